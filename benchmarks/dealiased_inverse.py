"""Spectral-solver step time with the inverse transforms of de-aliased spectra as the
full ``irfft2``/``irfftn`` (the former code) and as the solvers' narrowed inverse
(``KolmogorovSolver.ifft_dealiased``, ``HITSolver.to_physical_dealiased``: the transforms
before the last axis on the columns the 2/3 rule keeps), side by side in one process,
interleaved, on the `cpu` data configurations of `kolmogorov` (64^2 solver grid, float32,
32 rows: 8 Re x 4 trajectories), `kf_generation` (96^2, 8 rows) and the HIT tasks (32^3,
float64, one trajectory).  Also checks whether the two give bitwise equal states after
the timed steps:

    OMP_NUM_THREADS=1 python benchmarks/dealiased_inverse.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from tabulate import tabulate

from pcgbench.tasks.hit.solver import HITConfig, HITSolver, random_solenoidal_field
from pcgbench.tasks.kolmogorov.solver import KolmogorovSolver


def kolmogorov_case(n: int, re: torch.Tensor) -> tuple[list, torch.Tensor, float]:
    """(former, current) solvers, a turbulent initial state, a time step."""
    former = KolmogorovSolver(n, re, dtype=torch.float32)
    former.ifft_dealiased = former.ifft  # type: ignore[method-assign]
    current = KolmogorovSolver(n, re, dtype=torch.float32)
    w0 = former.laminar() + former.random_vorticity(len(re), np.random.default_rng(0))
    return [former, current], w0.to(torch.complex64), 0.01


def hit_case(n: int) -> tuple[list, torch.Tensor, float]:
    cfg = HITConfig.for_grid(n)
    former, current = HITSolver(cfg), HITSolver(cfg)
    former.to_physical_dealiased = former.to_physical  # type: ignore[method-assign]
    u0 = random_solenoidal_field(n, 1, 3.0, 0.5, torch.Generator().manual_seed(0))
    return [former, current], current.to_spectral(u0), 0.005


def steps(solver: KolmogorovSolver | HITSolver, state: torch.Tensor, dt: float, k: int
          ) -> torch.Tensor:
    if isinstance(solver, KolmogorovSolver):
        return solver.step(state, dt, k)
    for _ in range(k):
        state = solver.step(state, dt)
    return state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="RK4 steps per timing")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cases = [("kolmogorov cpu (64^2, 32 rows)",
              lambda: kolmogorov_case(64, torch.linspace(100.0, 500.0, 32))),
             ("kf_generation cpu (96^2, 8 rows of Re 1000)",
              lambda: kolmogorov_case(96, torch.full((8,), 1000.0))),
             ("HIT cpu (32^3, float64, 1 row)", lambda: hit_case(32))]
    rows = []
    for label, make in cases:
        solvers, w0, dt = make()
        times: list[list[float]] = [[], []]
        out: list[torch.Tensor] = [w0, w0]
        with torch.no_grad():
            for s in solvers:  # warm-up
                steps(s, w0, dt, 2)
            for _ in range(args.rounds):
                for i, s in enumerate(solvers):
                    t0 = time.perf_counter()
                    out[i] = steps(s, w0, dt, args.steps)
                    times[i].append((time.perf_counter() - t0) / args.steps)
        a, b = (float(np.median(v)) * 1e3 for v in times)
        rows.append([label, f"{a:.2f}", f"{b:.2f}", f"{a / b:.2f}x", torch.equal(*out)])
    print(tabulate(rows, headers=["case", "full inverse ms/step", "dealiased ms/step",
                                  "ratio", "bitwise equal"], tablefmt="github"))


if __name__ == "__main__":
    main()
