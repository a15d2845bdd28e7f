"""FNO forward + backward time with the spectral layers' mode mixing as the first complex
``einsum``, as one batched matmul over contiguous [M, B, I] @ [M, I, O] with autograd's
own ``bmm`` backward, and as the current ``mix_modes`` (the same matmul, its backward on a
contiguous output gradient), side by side in one process, interleaved, on the `cpu`
network (width 16, modes 12, 4 layers) at the `cpu` grids of Burgers, Darcy/Kolmogorov
and the 3-D tasks.  Also checks that all give bitwise equal outputs and gradients (each
against the einsum):

    OMP_NUM_THREADS=1 python benchmarks/fno_mode_mixing.py

``--along``: the full-axis transforms instead (``fno._along``): the axis always moved last
for one 2-D GEMM (the former way), moved only where fewer than
``ALONG_IN_PLACE_FROM`` elements trail it (current), and always multiplied in place as a
batched matmul; the same grids (HIT at the `cpu` batch of 32), bitwise checked against the
former way.  The in-place route is taken at one thread only, so at more threads "current"
is "moved" (run it with ``OMP_NUM_THREADS=1``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from tabulate import tabulate

from pcgbench.backbones import BackboneConfig, build_backbone
from pcgbench.backbones import fno as fno_module

CURRENT = fno_module.mix_modes


def former(block: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The former mixing (timing and value reference only)."""
    return torch.einsum("bi...,io...->bo...", block, w)


def plain_bmm(block: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The batched matmul with autograd's own backward (timing and value reference)."""
    b, o, modes = block.shape[0], w.shape[1], block.shape[2:]
    x = block.flatten(2).permute(2, 0, 1).contiguous()
    wm = w.flatten(2).permute(2, 0, 1).contiguous()
    return torch.bmm(x, wm).permute(1, 2, 0).reshape(b, o, *modes)


VARIANTS = {"einsum": former, "bmm": plain_bmm, "current": CURRENT}
#: --along: the in-place threshold of each variant (former: never in place)
ALONG = {"moved": float("inf"), "current": fno_module.ALONG_IN_PLACE_FROM, "in place": 0}


def fwd_bwd(net: torch.nn.Module, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, list]:
    net.zero_grad()
    y = net(x, t)
    y.pow(2).mean().backward()
    return y.detach(), [p.grad.clone() for p in net.parameters()]


def same(results: dict, label: str, ref: str = "einsum") -> bool:
    """Bitwise equal output and gradients to the reference's (the einsum's)."""
    (y0, g0), (y1, g1) = results[ref], results[label]
    return torch.equal(y0, y1) and all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))


def timed(shape: tuple[int, ...], channels: int, batch: int, variants: dict[str, object],
          attr: str, args: argparse.Namespace) -> tuple[dict, dict[str, list[float]]]:
    """Each variant's (output, gradients) and seconds per forward+backward over the
    rounds, with ``fno.<attr>`` set to the variant's value, interleaved; ``attr`` is put
    back as it was."""
    torch.manual_seed(0)
    cfg = BackboneConfig(kind="fno", width=16, modes=12, layers=4, embed_dim=32)
    net = build_backbone(cfg, in_channels=channels, out_channels=channels,
                         spatial_shape=shape, n_times=1, cond_dim=0)
    x, t = torch.randn(batch, channels, *shape), torch.rand(batch, 1)
    before = getattr(fno_module, attr)
    results: dict = {}
    times: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for _ in range(args.rounds):
            for label, value in variants.items():
                setattr(fno_module, attr, value)
                results[label] = fwd_bwd(net, x, t)
                start = time.perf_counter()
                for _ in range(args.repeats):
                    fwd_bwd(net, x, t)
                times[label].append((time.perf_counter() - start) / args.repeats)
    finally:
        setattr(fno_module, attr, before)
    return results, times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--along", action="store_true", help="time the full-axis transforms")
    args = ap.parse_args()
    if args.along:
        along(args)
        return
    cases = [("burgers 26x64", (26, 64), 1, 32), ("darcy 32x32", (32, 32), 2, 32),
             ("hit 16^3", (16, 16, 16), 3, 8)]
    rows = []
    for name, shape, channels, batch in cases:
        results, times = timed(shape, channels, batch, VARIANTS, "mix_modes", args)
        best = {k: min(v) for k, v in times.items()}
        rows.append([name, batch, *(f"{best[k] * 1e3:.1f}" for k in VARIANTS),
                     f"{best['bmm'] / best['current']:.2f}x",
                     f"{best['einsum'] / best['current']:.2f}x",
                     "yes" if same(results, "bmm") and same(results, "current") else "NO"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); best of "
          f"{args.rounds} rounds x {args.repeats} forward+backward passes")
    print(tabulate(rows, headers=["grid", "batch", *(f"{k} ms" for k in VARIANTS),
                                  "bmm / current", "einsum / current", "bitwise equal"]))


def along(args: argparse.Namespace) -> None:
    cases = [("burgers 26x64", (26, 64), 1, 32), ("darcy 64x64", (64, 64), 2, 32),
             ("hit 16^3", (16, 16, 16), 4, 32)]
    rows = []
    for name, shape, channels, batch in cases:
        results, times = timed(shape, channels, batch, ALONG, "ALONG_IN_PLACE_FROM", args)
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append([name, batch, *(f"{med[k] * 1e3:.1f}" for k in ALONG),
                     f"{med['moved'] / med['current']:.2f}x",
                     f"{med['moved'] / med['in place']:.2f}x",
                     "yes" if all(same(results, k, "moved") for k in ALONG) else "NO"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); median of "
          f"{args.rounds} rounds x {args.repeats} forward+backward passes")
    print(tabulate(rows, headers=["grid", "batch", *(f"{k} ms" for k in ALONG),
                                  "speed-up current", "speed-up in place", "bitwise equal"]))


if __name__ == "__main__":
    main()
