"""Do HIT reconstruction's scores against the hidden truth see realism?  Condition-aware
fakes scored like a method's samples (no model; docs/tasks/turbulence.md, "Scores
against the hidden truth").

The sanity rows (``pcgbench.sanity``) are built from the val split's fields with *their*
conditions, so they never face the test split's observations and ``missing_rmse``,
``crps``, ``coverage90`` are not applicable to them.  Here each fake answers the test
split's own conditions (the observed 10 % of points kept exactly, in the task's
normalised variables) and fills the hidden points without any physics:

``mean_fill``    hidden points at the training mean (one member, repeated).
``interp``       hidden points by periodic Gaussian normalised convolution of the
                 observations (width ``sigma`` in cells, chosen on the val split by
                 ``missing_rmse`` from ``SIGMAS``); one member, repeated.
``interp_noise`` ``interp`` plus white per-point Gaussian noise on the hidden points,
                 its std per channel the val split's hidden-point error of ``interp``:
                 a calibrated spread with no spatial structure at all.

A score that ranks a fake among or above the trained methods rewards something other
than a realistic sample (``missing_rmse`` of an ensemble mean rewards the conditional
mean, which is smooth); ``structure`` is printed beside them.  Usage::

    python benchmarks/hit_recon_baselines.py [--preset cpu] [--data-dir D]
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Mapping
from typing import Any

import torch

#: candidate widths (grid cells) of the interpolating kernel, chosen on val
SIGMAS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
#: the generator seed of ``interp_noise``
NOISE_SEED = 31
SHOWN = ("missing_rmse", "crps", "coverage90", "width90", "re", "structure")


def gaussian_smooth(f: torch.Tensor, sigma: float) -> torch.Tensor:
    """``f [N, C, n, n, n]`` convolved with a periodic Gaussian of width ``sigma`` cells
    (in Fourier space: the kernel's transform ``exp(-2 pi^2 sigma^2 |k|^2 / n^2)``)."""
    n = f.shape[-1]
    k = torch.fft.fftfreq(n, d=1.0, dtype=torch.float64)
    kr = torch.fft.rfftfreq(n, d=1.0, dtype=torch.float64)
    k2 = k[:, None, None] ** 2 + k[None, :, None] ** 2 + kr[None, None, :] ** 2
    g = torch.exp(-2.0 * math.pi**2 * sigma**2 * k2)
    return torch.fft.irfftn(torch.fft.rfftn(f, dim=(-3, -2, -1)) * g, s=(n, n, n),
                            dim=(-3, -2, -1))


def interpolate(cond: torch.Tensor, sigma: float) -> torch.Tensor:
    """Normalised fields ``[N, 4, n, n, n]``: the observations where observed, their
    normalised convolution ``G*(M y) / G*M`` elsewhere."""
    y, m = cond[:, :4].double(), cond[:, 4:5].double()
    fill = gaussian_smooth(y * m, sigma) / gaussian_smooth(m, sigma).clamp_min(1e-12)
    return m * y + (1 - m) * fill


def hidden_rmse(z: torch.Tensor, truth_z: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Per channel: the RMS of ``z - truth_z`` over the hidden points."""
    h = (1 - m).expand_as(z)
    return ((z - truth_z).pow(2) * h).sum(dim=(0, 2, 3, 4)).div(h.sum(dim=(0, 2, 3, 4))).sqrt()


def published_rows(task: str, preset: str) -> dict[str, list[Mapping[str, Any]]]:
    """Each default-column method's metrics per published seed of ``task`` at ``preset``
    (the verified published set; floor, sanity rows, variants and failed runs left out)."""
    from pcgbench.leaderboard.published import load_published
    from pcgbench.leaderboard.sanity import is_reference
    from pcgbench.leaderboard.tables import is_ok

    rows: dict[str, list[Mapping[str, Any]]] = {}
    for rec in load_published():
        if (rec.task, rec.preset) == (task, preset) and is_ok(rec) and not rec.variant \
                and not is_reference(rec.method):
            rows.setdefault(rec.method, []).append(rec.metrics)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--task", default="hit_reconstruction")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()

    from pcgbench.stages.plan import RunOptions, build_task
    from pcgbench.stages.scoring import evaluate

    task = build_task(RunOptions(task=args.task, method="fm_ot", preset=args.preset,
                                 data_dir=args.data_dir, progress=False))
    val, test = task.dataset("val"), task.dataset("test")
    norm = task.normalizer
    # sigma chosen on val (never test), by missing_rmse of the interpolant
    vm = val.cond[:, 4:5].double()
    vz = norm.encode(val.x.double())
    choice = {s: float(hidden_rmse(interpolate(val.cond, s), vz, vm).pow(2).mean().sqrt())
              for s in SIGMAS}
    sigma = min(choice, key=choice.__getitem__)
    noise_std = hidden_rmse(interpolate(val.cond, sigma), vz, vm)
    print(f"{args.task} @ {args.preset}: val hidden-point RMS (normalised) of interp by sigma: "
          + ", ".join(f"{s:g}: {v:.4f}" for s, v in choice.items()) + f" -> sigma {sigma:g}; "
          f"noise std per channel {[round(float(v), 4) for v in noise_std]}")

    m = test.cond[:, 4:5].double()
    z_interp = interpolate(test.cond, sigma)
    z_mean = m * test.cond[:, :4].double()
    gen = torch.Generator().manual_seed(NOISE_SEED)
    noise = torch.randn(z_interp.shape, generator=gen, dtype=torch.float64)
    z_noise = z_interp + (1 - m) * noise * noise_std[None, :, None, None, None]
    fakes = {"mean_fill": z_mean, "interp": z_interp, "interp_noise": z_noise}
    scored: dict[str, dict[str, float]] = {}
    for name, z in fakes.items():
        x = norm.decode(z).to(test.x.dtype)
        scored[name] = {k: v for k, v in evaluate(task, x, test.x, test.cond, test.cond).items()
                        if isinstance(v, int | float)}

    pub = published_rows(args.task, args.preset)
    print(f"\n| row | n | {' | '.join(SHOWN)} |\n|---|---|{'---|' * len(SHOWN)}")
    for name, mets in scored.items():
        print(f"| {name} (fake) | 1 | " + " | ".join(f"{mets.get(k, float('nan')):.4g}"
                                                     for k in SHOWN) + " |")
    for method, runs in sorted(pub.items(), key=lambda kv: kv[0]):
        cells = []
        for k in SHOWN:
            vals = [float(r[k]) for r in runs if isinstance(r.get(k), int | float)]
            cells.append(f"{statistics.fmean(vals):.4g}" if vals else "–")
        print(f"| {method} | {len(runs)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
