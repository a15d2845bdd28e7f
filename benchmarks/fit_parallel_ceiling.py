"""How much a second core can buy a `cpu` fit (issue 61's design-card target), side by side.

One forward + backward of the `cpu` FNO (width 16, 12 modes, 4 layers) on a batch of 32,
in one process, three ways:

- ``1 thread``: torch at one intra-op thread (how the published cells were fitted);
- ``2 threads``: torch at two intra-op threads (what `pcgbench run` does by default on
  an idle 2-core machine);
- ``2 halves``: two Python threads, each a half batch at one intra-op thread, their
  parameter gradients summed in a fixed order (data parallelism inside one process: the
  ceiling of splitting the batch, which no method does today).

Shapes: Burgers' 26 x 64 grid (one channel, two times: PMosFM's network) and HIT
reconstruction's 16^3 grid (three channels).  Rounds interleave the three ways, and the
median over rounds is printed with each way's speed-up over ``1 thread``; the halves'
gradients are checked against the whole batch's (round-off only)::

    python benchmarks/fit_parallel_ceiling.py --rounds 5 --steps 10
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from tabulate import tabulate

from pcgbench.backbones.fno import FNO

SHAPES = {"burgers": ((26, 64), 1, 2), "hit_reconstruction": ((16, 16, 16), 3, 1)}


def _net(shape: tuple[int, ...], channels: int, n_times: int) -> FNO:
    torch.manual_seed(0)
    return FNO(channels, channels, shape, width=16, modes=12, layers=4, embed_dim=32,
               n_times=n_times, cond_dim=0)


def _grads(net: FNO, x: torch.Tensor, t: torch.Tensor, scale: float) -> list[torch.Tensor]:
    out = net(x, t)
    loss = out.square().sum() * scale
    return list(torch.autograd.grad(loss, list(net.parameters())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="forward+backward per timing")
    a = ap.parse_args()
    pool = ThreadPoolExecutor(2)
    rows = []
    for task in a.tasks:
        shape, ch, n_times = SHAPES[task]
        net = _net(shape, ch, n_times)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(a.batch, ch, *shape, generator=g)
        t = torch.rand(a.batch, n_times, generator=g)
        scale = 1.0 / x.numel()
        h = a.batch // 2

        def whole(net=net, x=x, t=t, scale=scale) -> list[torch.Tensor]:
            return _grads(net, x, t, scale)

        def halves(net=net, x=x, t=t, scale=scale, h=h) -> list[torch.Tensor]:
            parts = [pool.submit(_grads, net, x[:h], t[:h], scale),
                     pool.submit(_grads, net, x[h:], t[h:], scale)]
            g0, g1 = (f.result() for f in parts)
            return [u + v for u, v in zip(g0, g1, strict=True)]

        ways = {"1 thread": (1, whole), "2 threads": (2, whole), "2 halves": (1, halves)}
        times: dict[str, list[float]] = {k: [] for k in ways}
        for _ in range(a.rounds):
            for name, (threads, fn) in ways.items():
                torch.set_num_threads(threads)
                fn()  # warm-up at this thread count
                t0 = time.perf_counter()
                for _ in range(a.steps):
                    fn()
                times[name].append((time.perf_counter() - t0) / a.steps)
        torch.set_num_threads(1)
        ref, split = whole(), halves()
        err = max(float((u - v).abs().max() / v.abs().max().clamp_min(1e-30))
                  for u, v in zip(split, ref, strict=True))
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append([task, a.batch, *(f"{med[k]:.4f}" for k in ways),
                     *(f"{med['1 thread'] / med[k]:.2f}x" for k in ways), f"{err:.1e}"])
    head = ["task", "batch", *(f"{k} [s]" for k in ("1 thread", "2 threads", "2 halves")),
            *(f"{k} speed-up" for k in ("1 thread", "2 threads", "2 halves")),
            "halves vs whole (max rel. grad diff)"]
    print(f"torch {torch.__version__}; forward + backward of the cpu FNO; median of "
          f"{a.rounds} rounds of {a.steps}")
    print(tabulate(rows, head, tablefmt="github"))


if __name__ == "__main__":
    main()
