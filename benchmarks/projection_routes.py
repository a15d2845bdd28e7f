"""Gauss-Newton projection on dynamic stall: the dense route against the block route.

PCFM's per-step projection ``u <- u - J^T (J J^T + c I)^-1 h(u)`` on the two pointwise
closures (ideal gas, Sutherland shear), for a batch of noisy test fields:

* ``dense``: ``J`` as a [B, k, n] tensor from the coloured plan, ``J J^T`` from its entry
  pairs, one float64 Cholesky of the k x k Gram per sample (the route before the block
  solve existed; at ``cpu`` a batch of 64 needed 13 GB);
* ``block``: ``J`` as its structural entries, ``J J^T`` as k/2 blocks of 2 x 2
  (:class:`pcgbench.methods._jacobian.SparseRowsJacobian`).

Prints the median seconds per projection (after one warm-up), the Jacobian's bytes and
the largest difference between the two results (the same matrix; round-off only).

    OMP_NUM_THREADS=1 python benchmarks/projection_routes.py --preset cpu --batch 4
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from tabulate import tabulate

from pcgbench.methods._jacobian import ColoredJacobian, DenseJacobian
from pcgbench.methods._sampling import gauss_newton_project, normalized, stack_constraints
from pcgbench.registry import TASKS
from pcgbench.runtime import environment


class _DenseOnly:
    """The coloured plan with its block structure hidden: the dense route."""

    def __init__(self, plan: ColoredJacobian):
        self.plan = plan

    def __call__(self, g, z, cond=None):
        return self.plan(g, z, cond)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data-dir", default=None, help="dataset cache (default: a temporary one)")
    args = ap.parse_args()
    args.data_dir = args.data_dir or tempfile.mkdtemp()
    print(f"machine: {environment.device_description(environment.resolve_device('cpu'))}")
    task = TASKS.get("dynamic_stall")(preset=args.preset, data_dir=args.data_dir,
                                      progress=False)
    h = normalized(stack_constraints(dict(task.constraints())), task)
    te = task.dataset("test")
    gen = torch.Generator().manual_seed(0)
    z = task.normalizer.encode(te.x[: args.batch])
    z = z + 0.1 * torch.randn(z.shape, generator=gen)
    cond = te.cond[: args.batch]
    plan = ColoredJacobian.detect(h, z, cond)
    routes = {"dense": _DenseOnly(plan), "block": plan}
    out, rows = {}, []
    for name, jac in routes.items():
        times = []
        for _ in range(args.repeats + 1):
            t0 = time.perf_counter()
            out[name] = gauss_newton_project(h, z, cond, steps=1, damping=1e-6, jacobian=jac)
            times.append(time.perf_counter() - t0)
        lin = plan.linearize(h, z, cond) if name == "block" else DenseJacobian(plan(h, z, cond))
        nbytes = (lin.vals if name == "block" else lin.jac).numel() * z.element_size()
        rows.append([name, statistics.median(times[1:]), nbytes / 1e6])
    dense_t = rows[0][1]
    for r in rows:
        r.append(dense_t / r[1])
    diff = float((out["dense"] - out["block"]).abs().max())
    k, n = plan.pattern.shape
    print(f"dynamic_stall ({args.preset}): k = {k:,} rows, n = {n:,}, batch {args.batch}, "
          f"blocks of {plan.block_size}; max |dense - block| = {diff:.2e}")
    print(tabulate(rows, headers=["route", "s / projection", "Jacobian MB",
                                  "speed-up vs dense"], floatfmt=".4g"))


if __name__ == "__main__":
    main()
