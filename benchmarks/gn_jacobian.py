"""The Gauss-Newton chart's Jacobian on reaction_diffusion_ic: closed form
(``interior_mass_balance_jacobian``) against the generic vmap of jacrev, side by side in
one run -- one ``ic_mass`` decode (3 GN steps) forward and backward, as PMosFM's training
does it, at the cpu grid and batch 32.

    OMP_NUM_THREADS=1 python benchmarks/gn_jacobian.py [--batch 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from pcgbench.registry import TASKS


def _time(chart, u: torch.Tensor, cond: torch.Tensor, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        y = u.clone().requires_grad_(True)
        t0 = time.perf_counter()
        chart.decode(y, cond).square().sum().backward()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    task = TASKS.get("reaction_diffusion_ic")(preset="cpu", progress=False)
    closed = task.ic_mass_chart()
    generic = task.ic_mass_chart()
    generic.jacobian = None
    gen = torch.Generator().manual_seed(0)
    u = torch.rand(a.batch, *closed.coord_shape, generator=gen)
    cond = torch.rand(a.batch, task.spec.cond_dim, generator=gen)
    with torch.no_grad():
        agree = float((closed.decode(u, cond) - generic.decode(u, cond)).abs().max())
    tc, tg = _time(closed, u, cond, a.repeats), _time(generic, u, cond, a.repeats)
    print(f"reaction_diffusion_ic ic_mass decode+backward, batch {a.batch}, "
          f"{torch.get_num_threads()} thread(s), median of {a.repeats}:")
    print(f"  generic jacrev {tg * 1e3:8.1f} ms   closed form {tc * 1e3:8.1f} ms   "
          f"ratio {tg / tc:.2f}x   max |decode difference| {agree:.2e}")


if __name__ == "__main__":
    main()
