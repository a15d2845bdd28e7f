"""Seconds per metric of a task's evaluator on N samples (default kf_generation, 1,000
fields: its test split tiled and perturbed, against the tiled test split; ``--grid G``:
smooth random fields on a G x G grid instead, no data needed), each metric alone
(nothing shared) and the whole ``evaluate()`` (one MetricContext and
``metrics.distribution.sharing``: ``energy`` and ``mmd`` share one pooled distance
matrix, every metric the finite-row masks and float64 copies), then the former and the
current implementation of the costly parts side by side in the same run, interleaved
(the former ones are re-implemented here only as timing and value references: the MMD
with three distance matrices, the pooled matrix from three Gram blocks, the spectrum by
a full complex FFT, the blow-up check widening every value):

    OMP_NUM_THREADS=1 python benchmarks/evaluators.py --task kf_generation --grid 64
"""

from __future__ import annotations

import argparse
import time

import torch
from tabulate import tabulate

from pcgbench.metric import MetricContext
from pcgbench.registry import METRICS, TASKS
from pcgbench.stages.scoring import evaluate


def former_mmd(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """The MMD as computed before (median over the pooled distances, then the xx, yy and
    xy distances again): timing and value reference only."""
    from pcgbench.metrics.moments import pair_dists
    from pcgbench.metrics.spectral import median_bandwidth

    x = samples[:1000].to(torch.float64).flatten(1)
    y = reference[:1000].to(torch.float64).flatten(1)
    sigma = median_bandwidth(torch.cat([x, y]))
    g = 1.0 / (2.0 * sigma * sigma)

    def kmean(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.exp(-g * pair_dists(a, b) ** 2).mean()

    return max(0.0, float(kmean(x, x) + kmean(y, y) - 2.0 * kmean(x, y)))


def former_pooled(samples: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """The pooled distance matrix from three Gram blocks (xx, xy, yy)."""
    from pcgbench.metrics.moments import ENERGY_MAX_SAMPLES, pair_dists

    x = samples[:ENERGY_MAX_SAMPLES].to(torch.float64).flatten(1)
    y = reference[:ENERGY_MAX_SAMPLES].to(torch.float64).flatten(1)
    z = torch.cat([x, y])
    z = z - z.mean(dim=0)
    x, y = z[: x.shape[0]], z[x.shape[0]:]
    dxy = pair_dists(x, y)
    d = torch.cat([torch.cat([pair_dists(x, x), dxy], 1),
                   torch.cat([dxy.T, pair_dists(y, y)], 1)])
    return d.fill_diagonal_(0.0)


def former_spectrum(x: torch.Tensor) -> torch.Tensor:
    """The radial energy spectrum from the full complex FFT."""
    import math

    x = x.to(torch.float64)
    spatial = tuple(x.shape[2:])
    m = math.prod(spatial)
    power = (torch.fft.fftn(x, dim=tuple(range(2, x.ndim))).abs() ** 2).sum(dim=(0, 1))
    power = power / (2 * m * m)
    grids = torch.meshgrid(*[torch.fft.fftfreq(n, dtype=torch.float64) * n for n in spatial],
                           indexing="ij")
    shell = torch.stack(grids).pow(2).sum(0).sqrt().round().long()
    keep = shell <= min(spatial) // 2
    spec = torch.zeros(min(spatial) // 2 + 1, dtype=torch.float64)
    return spec.index_add_(0, shell[keep], power[keep]) / x.shape[0]


def former_blowup(samples: torch.Tensor, reference: torch.Tensor, factor: float = 1e3) -> float:
    """The blow-up fraction widening every value to float64 first."""
    ref = reference[torch.isfinite(reference)]
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    flat = samples.reshape(len(samples), -1).to(torch.float64)
    peak = torch.nan_to_num(flat.abs(), nan=float("inf")).amax(dim=1)
    return float((peak > factor * scale).sum()) / len(samples)


def side_by_side(samples: torch.Tensor, ref: torch.Tensor, repeats: int) -> list[list[str]]:
    """[part, former s, current s, speed-up, largest relative difference] per part."""
    from pcgbench.metrics.distribution import blowup_fraction
    from pcgbench.metrics.moments import pooled_distances
    from pcgbench.metrics.spectral import radial_energy_spectrum

    parts = {
        "pooled distances": (lambda: former_pooled(samples, ref),
                             lambda: pooled_distances(samples, ref)[0]),
        "spectrum (both sets)": (
            lambda: torch.cat([former_spectrum(samples), former_spectrum(ref)]),
            lambda: torch.cat([radial_energy_spectrum(samples),
                               radial_energy_spectrum(ref)])),
        "blow-up fraction": (lambda: torch.tensor(former_blowup(samples, ref)),
                             lambda: torch.tensor(blowup_fraction(samples, ref))),
    }
    rows = []
    for name, (old, new) in parts.items():
        t_old, t_new = [], []
        for _ in range(repeats):  # interleaved: background load hits both alike
            for f, ts in ((old, t_old), (new, t_new)):
                t0 = time.perf_counter()
                value = f()
                ts.append(time.perf_counter() - t0)
            a, b = old().to(torch.float64), value.to(torch.float64)
        rel = float(((a - b).abs() / a.abs().clamp_min(1e-300)).max())
        to, tn = sorted(t_old)[repeats // 2], sorted(t_new)[repeats // 2]
        rows.append([name, f"{to:.3f}", f"{tn:.3f}", f"{to / tn:.2f}x", f"{rel:.1e}"])
    return rows


def smooth_fields(n: int, channels: int, grid: int, seed: int) -> torch.Tensor:
    """``[n, channels, grid, grid]`` random fields with a k^-4 power spectrum (float32)."""
    g = torch.Generator().manual_seed(seed)
    xh = torch.randn(n, channels, grid, grid // 2 + 1, dtype=torch.complex64, generator=g)
    k = torch.fft.fftfreq(grid, 1 / grid).abs()[:, None] + torch.arange(grid // 2 + 1)[None]
    return torch.fft.irfft2(xh / (1 + k) ** 2, s=(grid, grid)).float() * 30


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="kf_generation")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--grid", type=int, default=None,
                    help="smooth random G x G fields (the task's channels) instead of its data")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--repeats", type=int, default=3, help="median of this many timings")
    args = ap.parse_args()
    task = TASKS.get(args.task)(preset=args.preset, data_dir=args.data_dir, progress=False)
    if args.grid:
        channels = task.spec.channels
        ref = smooth_fields(args.n, channels, args.grid, 0)
        samples = smooth_fields(args.n, channels, args.grid, 1)
        cond = None
    else:
        test = task.dataset("test")
        reps = -(-args.n // len(test))
        ref = test.x.repeat(reps, *[1] * (test.x.ndim - 1))[:args.n]
        cond = None if test.cond is None else test.cond.repeat(reps, 1)[:args.n]
        gen = torch.Generator().manual_seed(0)
        samples = ref + 0.1 * ref.std() * torch.randn(ref.shape, generator=gen)
    rows, total, alone = [], 0.0, {}
    for name in task.metrics:
        metric = METRICS.get(name)()
        times, value = [], float("nan")
        for _ in range(args.repeats):
            ctx = MetricContext(task=task, cond=cond, reference_cond=cond)  # nothing shared
            t0 = time.perf_counter()
            value = float(metric(samples, ref, ctx))
            times.append(time.perf_counter() - t0)
        t = sorted(times)[len(times) // 2]
        total += t
        alone[name] = value
        rows.append([name, f"{t:.3f}", f"{value:.6g}"])
    rows.append(["sum (each metric alone)", f"{total:.3f}", ""])
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        values = evaluate(task, samples, ref, cond, cond)  # one context: shared work
        times.append(time.perf_counter() - t0)
    t_eval = sorted(times)[len(times) // 2]
    rows.append(["evaluate() (shared context)", f"{t_eval:.3f}", ""])
    print(f"{args.task} [{args.preset}], {args.n} samples of {tuple(ref.shape[1:])}, "
          f"{torch.get_num_threads()} thread(s), median of {args.repeats}")
    print(tabulate(rows, headers=["metric", "seconds", "value"], tablefmt="github"))
    worst = max(abs(values[k] - v) / max(abs(v), 1e-300) for k, v in alone.items())
    print(f"\nevaluate(): {t_eval:.3f} s vs {total:.3f} s metric by metric "
          f"({total / t_eval:.2f}x); largest relative difference of a value: {worst:.1e}")
    if "mmd" in task.metrics:
        from pcgbench.metrics.spectral import mmd_rbf

        t0 = time.perf_counter()
        old = former_mmd(samples, ref)
        t_old = time.perf_counter() - t0
        t0 = time.perf_counter()
        new = mmd_rbf(samples, ref)
        t_new = time.perf_counter() - t0
        print(f"\nmmd former {t_old:.3f} s vs pooled {t_new:.3f} s ({t_old / t_new:.2f}x); "
              f"values {old:.12g} vs {new:.12g} (rel. diff {abs(old - new) / abs(old):.1e})")
    print("\nformer vs current, interleaved, median of", args.repeats)
    print(tabulate(side_by_side(samples, ref, args.repeats),
                   headers=["part", "former [s]", "current [s]", "speed-up", "max rel. diff"],
                   tablefmt="github"))


if __name__ == "__main__":
    main()
