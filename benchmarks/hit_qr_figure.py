"""The Q-R joint PDF of the HIT task data (the teardrop) next to a Gaussian random
solenoidal field's, saved as a figure, with the quadrant masses printed.

    python benchmarks/hit_qr_figure.py --preset cpu --out docs/figures/hit_qr_cpu.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from pcgbench.metrics.velocity_gradient import plot_qr, qr_histogram, qr_normalized
from pcgbench.tasks.hit.forecasting import HITForecastingTask
from pcgbench.tasks.hit.solver import random_solenoidal_field


def quadrants(u: torch.Tensor) -> str:
    q, r = qr_normalized(u)
    skew = float(((q > 0) & (r < 0)).double().mean() + ((q < 0) & (r > 0)).double().mean())
    return f"P(Q>0,R<0) + P(Q<0,R>0) = {skew:.3f}, other quadrants {1 - skew:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--out", default="docs/figures/hit_qr_cpu.png")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    task = HITForecastingTask(args.preset, data_dir=args.data_dir)
    frames = task.frames()[:, :3].double()
    n = frames.shape[-1]
    gauss = random_solenoidal_field(n, frames.shape[0], 3.0, 1.0,
                                    torch.Generator().manual_seed(0))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plot_qr(qr_histogram(frames), out,
            title=f"HIT data, preset {args.preset} ({frames.shape[0]} frames of {n}^3)")
    gpath = out.with_name(out.stem + "_gaussian" + out.suffix)
    plot_qr(qr_histogram(gauss), gpath, title=f"Gaussian solenoidal field ({n}^3)")
    print(f"HIT data ({args.preset}): {quadrants(frames)}\n  -> {out}")
    print(f"Gaussian field:      {quadrants(gauss)}\n  -> {gpath}")


if __name__ == "__main__":
    main()
