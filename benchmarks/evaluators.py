"""Seconds per metric of a task's evaluator on N samples (default kf_generation, 1,000
fields: its test split tiled and perturbed, against the tiled test split), each metric
alone (nothing shared) and the whole ``evaluate()`` (one MetricContext: ``energy`` and
``mmd`` share one pooled distance matrix), and the MMD before/after the pooled-distance
change side by side in the same run (the former three-matrix MMD is re-implemented here
only as the timing and value reference):

    OMP_NUM_THREADS=1 python benchmarks/evaluators.py --task kf_generation --n 1000
"""

from __future__ import annotations

import argparse
import time

import torch
from tabulate import tabulate

from pcgbench.metric import MetricContext
from pcgbench.registry import METRICS, TASKS
from pcgbench.runner import evaluate


def former_mmd(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """The MMD as computed before (median over the pooled distances, then the xx, yy and
    xy distances again): timing and value reference only."""
    from pcgbench.metrics.moments import _pair_dists
    from pcgbench.metrics.spectral import median_bandwidth

    x = samples[:1000].to(torch.float64).flatten(1)
    y = reference[:1000].to(torch.float64).flatten(1)
    sigma = median_bandwidth(torch.cat([x, y]))
    g = 1.0 / (2.0 * sigma * sigma)

    def kmean(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.exp(-g * _pair_dists(a, b) ** 2).mean()

    return max(0.0, float(kmean(x, x) + kmean(y, y) - 2.0 * kmean(x, y)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="kf_generation")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--repeats", type=int, default=3, help="median of this many timings")
    args = ap.parse_args()
    task = TASKS.get(args.task)(preset=args.preset, data_dir=args.data_dir, progress=False)
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


if __name__ == "__main__":
    main()
