"""How the Burgers evaluator ``re`` (the paper's r_B = u_t + u u_x - nu u_xx, centred
differences, RMS per sample, mean over samples) depends on the stored grid, and why a
smoother field scores lower than real data.

The same initial conditions (our solver, 1024 internal points, the test split's seed) are
stored on several (nt, nx) grids; for each: ``re`` of the true solutions (the evaluator's
floor at that resolution: its finite-difference truncation error on a solution of the PDE),
the share of the residual's square in the 1 % largest points (how much sits on the steep
fronts), and ``re`` of the same solutions low-pass filtered in x (modes |k| <= K kept): a
field that smears the fronts, less physical but lower ``re``.  The last column is ``re``
with unit grid spacing (dt = dx = 1: differences per index), a reading of the paper's
undeclared units, for scale only.

    OMP_NUM_THREADS=1 python benchmarks/burgers_residual_floor.py --n 16
"""

from __future__ import annotations

import argparse
import dataclasses

import torch
from tabulate import tabulate

from pcgbench.metrics.residual import residual_error
from pcgbench.registry import TASKS
from pcgbench.tasks.burgers import burgers_residual


def low_pass(x: torch.Tensor, keep: int) -> torch.Tensor:
    """``x [..., nx]`` with the Fourier modes |k| > keep removed (periodic x)."""
    xh = torch.fft.rfft(x.double(), dim=-1)
    xh[..., keep + 1:] = 0
    return torch.fft.irfft(xh, n=x.shape[-1], dim=-1)


def top_share(r: torch.Tensor, frac: float = 0.01) -> float:
    """Share of sum(r^2) carried by the ``frac`` largest |r| of every sample (mean)."""
    sq = (r.double() ** 2).flatten(1)
    k = max(1, int(frac * sq.shape[1]))
    return float((sq.topk(k, dim=1).values.sum(1) / sq.sum(1)).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16, help="trajectories per grid")
    ap.add_argument("--grids", nargs="+", default=["51x128", "101x256", "201x1024"],
                    help="stored grids NTxNX (cpu preset: 51x128; paper: 201x1024)")
    ap.add_argument("--keep", type=int, nargs="+", default=[8, 16])
    args = ap.parse_args()
    cls = TASKS.get("burgers")
    rows = []
    for grid in args.grids:
        nt, nx = (int(v) for v in grid.split("x"))
        task = cls(preset="cpu", progress=False)
        task.params = dataclasses.replace(task.params, nt=nt, nx=nx,
                                          n_internal=max(1024, nx), n_test=args.n)
        x = task.generate("test").x
        r = task.residual(x.double())
        row = {"grid nt x nx": grid, "re (data)": residual_error(x, task),
               "top 1 % share of r^2": top_share(r)}
        for k in args.keep:
            row[f"re (|k|<={k})"] = residual_error(low_pass(x, k).float(), task)
        per_index = burgers_residual(x[:, 0].double(), task.nu, 1.0, 1.0)
        row["re (unit spacing)"] = float((per_index ** 2).mean((1, 2)).sqrt().mean())
        rows.append(row)
    print(f"Burgers evaluator floor, {args.n} test trajectories (our solver, nu = "
          f"{cls.params_for('cpu').nu:g}):\n")
    print(tabulate(rows, headers="keys", floatfmt=".4g", tablefmt="github"))


if __name__ == "__main__":
    main()
