"""Darcy decoder accuracy and latency across CG iteration counts (paper Table
"Darcy decoder accuracy and latency across iteration counts").

For each preset and each K: draws ``--samples`` log-permeability fields from the KL prior
(test-split seed), solves each pressure directly (sparse LU, float64) as the reference,
then decodes the batch with the task's solver chart at K Jacobi-preconditioned CG
iterations (float32 unless ``--dtype float64``) and reports, mean +- std over samples:

* relative pressure error ``||p_K - p_direct||_2 / ||p_direct||_2``,
* the independent evaluator residual RE (the task's ``residual``: per-sample RMS),
* the encoded residual ``||R_h||_2`` of the chart (max over samples),
* latency per sample: median of ``--repeats`` batched decodes after one warm-up, / batch.

The ``direct`` row is the reference solve itself (its RE is the evaluator's floor on the
data: FV solver and finite-difference evaluator are different discretizations).

    OMP_NUM_THREADS=1 python benchmarks/darcy_decoder.py --presets cpu paper
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from tabulate import tabulate

from pcgbench.runtime import environment
from pcgbench.runtime.timing import timed_median
from pcgbench.tasks.darcy import DarcyTask
from pcgbench.tasks.darcy import solver as darcy2d


def _pm(v: torch.Tensor, fmt: str = "{:.2e}") -> str:
    return f"{fmt.format(float(v.mean()))} ± {fmt.format(float(v.std()))}"


def table(preset: str, iters: list[int], samples: int, repeats: int, dtype: torch.dtype,
          device: torch.device) -> tuple[list[list[str]], dict[str, float]]:
    task = DarcyTask(preset, progress=False)
    p = task.params
    t0 = time.perf_counter()
    g = task.log_permeability(samples, p.seed_test)
    kl_s = time.perf_counter() - t0
    k = np.exp(g)
    f = task.source()
    t0 = time.perf_counter()
    p_ref = np.stack([darcy2d.solve_pressure(ki, f) for ki in k])
    direct_s = (time.perf_counter() - t0) / samples
    ref = torch.from_numpy(np.stack([p_ref, k], axis=1))
    ref_norm = ref[:, 0].flatten(1).norm(dim=1)
    re_ref = task.residual(ref).pow(2).mean(1).sqrt()
    rows = [["direct (sparse LU)", "0", _pm(re_ref), "-", f"{1e3 * direct_s:.2f}"]]
    y = torch.from_numpy(g)[:, None].to(device=device, dtype=dtype)
    for K in iters:
        chart = task.solver_chart(iters=K, calibrate=False).to(device)
        with torch.no_grad():
            sec, _ = timed_median(lambda chart=chart: chart.decode(y), device, repeats)
            x = chart.decode(y)
            rh = float(chart.residual(x).norm(dim=1).max())
        x = x.double().cpu()
        rel = (x[:, 0] - ref[:, 0]).flatten(1).norm(dim=1) / ref_norm
        re = task.residual(x).pow(2).mean(1).sqrt()
        rows.append([str(K), _pm(rel), _pm(re), f"{rh:.2e}", f"{1e3 * sec / samples:.2f}"])
    return rows, {"kl_seconds": kl_s, "direct_ms_per_sample": 1e3 * direct_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", nargs="+", default=["cpu", "paper"])
    ap.add_argument("--iters", nargs="+", type=int, default=[16, 32, 64, 128, 256])
    ap.add_argument("--samples", type=int, default=64, help="batch = samples")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    device = environment.resolve_device(args.device)
    dtype = getattr(torch, args.dtype)
    headers = ["K", "rel. pressure error", "independent residual RE", "max ||R_h||_2",
               "latency / sample (ms)"]
    for preset in args.presets:
        rows, info = table(preset, args.iters, args.samples, args.repeats, dtype, device)
        n = DarcyTask.params_for(preset).n
        print(f"\nDarcy decoder, preset {preset} ({n}x{n}), {args.samples} samples, batch "
              f"{args.samples}, {args.dtype}, device {device}, torch threads "
              f"{torch.get_num_threads()} (KL basis + draws {info['kl_seconds']:.1f} s)")
        print(tabulate(rows, headers=headers, tablefmt="github"))


if __name__ == "__main__":
    main()
