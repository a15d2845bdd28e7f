"""Kolmogorov solver step time with the inverse transforms of de-aliased spectra as the
full ``irfft2`` (the former code) and as ``KolmogorovSolver.ifft_dealiased`` (the x-
transform on the n // 3 + 1 columns the 2/3 rule keeps), side by side in one process,
interleaved, on the `cpu` data configuration of `kolmogorov` (64^2 solver grid, float32,
32 rows: 8 Re x 4 trajectories) and of `kf_generation`.  Also checks whether the two give
bitwise equal states after the timed steps:

    OMP_NUM_THREADS=1 python benchmarks/kolmogorov_solver.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from tabulate import tabulate

from pcgbench.solvers.kolmogorov2d import KolmogorovSolver


def solvers(n: int, re: torch.Tensor, dtype: torch.dtype) -> dict[str, KolmogorovSolver]:
    former = KolmogorovSolver(n, re, dtype=dtype)
    former.ifft_dealiased = former.ifft  # type: ignore[method-assign]
    return {"irfft2 (former)": former, "dealiased (current)": KolmogorovSolver(n, re, dtype=dtype)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="RK4 steps per timing")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cases = [("kolmogorov cpu (64^2, 32 rows)", 64, torch.linspace(100.0, 500.0, 32)),
             ("kf_generation cpu (96^2, 8 rows of Re 1000)", 96, torch.full((8,), 1000.0))]
    rows = []
    for label, n, re in cases:
        solv = solvers(n, re, torch.float32)
        ref = next(iter(solv.values()))
        w0 = ref.laminar() + ref.random_vorticity(len(re), np.random.default_rng(0))
        w0 = w0.to(torch.complex64)
        times: dict[str, list[float]] = {k: [] for k in solv}
        out: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for s in solv.values():  # warm-up
                s.step(w0, 0.01, 2)
            for _ in range(args.rounds):
                for k, s in solv.items():
                    t0 = time.perf_counter()
                    out[k] = s.step(w0, 0.01, args.steps)
                    times[k].append((time.perf_counter() - t0) / args.steps)
        med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        a, b = med.values()
        first, second = out.values()
        rows.append([label, f"{a:.2f}", f"{b:.2f}", f"{a / b:.2f}x", torch.equal(first, second)])
    print(tabulate(rows, headers=["case", "irfft2 ms/step", "dealiased ms/step", "ratio",
                                  "bitwise equal"], tablefmt="github"))


if __name__ == "__main__":
    main()
