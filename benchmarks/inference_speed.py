"""PMosFM vs FM-OT (and any other methods) inference time per sample, side by side.

Loads each method's cached checkpoint for (task, preset, seed) -- fitting it first if
there is none -- then, in one process and at one batch size, times ``sample`` with
synchronization after a warm-up, median of repeats, interleaving the methods so that
background load hits all of them alike.  Prints seconds per sample, NFE (counted), the
phase breakdown and the ratio of every method to the first one.

    python benchmarks/inference_speed.py --task burgers --preset cpu --batch-size 64

A method may carry config overrides, ``NAME:key=value[,key=value]`` (values parsed as
``--set`` parses them: ``fm_ot:steps=10``, ``pmosfm:delta_range=[0.01, 0.1]``), to compare
variants of one sampler side by side, e.g. the dense and the coloured Jacobian of PCFM on
Darcy:

    python benchmarks/inference_speed.py --task darcy --batch-size 16 --repeats 3 \
        --methods pcfm:jacobian=dense pcfm:jacobian=auto

``--record`` also writes the per-repeat seconds per sample of every method as one
benchmark record (``pcgbench.results.benchmarks``, with the device and the machine's load at
start and end), the only CPU timing source ``pcgbench audit`` uses; a method with
overrides is the column ``name[key=value]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from tabulate import tabulate

from pcgbench.config import parse_method_spec
from pcgbench.results.files import results_dir
from pcgbench.runtime import environment
from pcgbench.runtime.timing import synchronize
from pcgbench.stages.fit import fit
from pcgbench.stages.plan import RunOptions, resolve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="burgers")
    ap.add_argument("--methods", nargs="+", default=["fm_ot", "pmosfm"])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--results", default=None)
    ap.add_argument("--record", action="store_true",
                    help="write the measurement as a benchmark record (for pcgbench audit)")
    args = ap.parse_args()
    from pcgbench.runtime.environment import machine_load

    load = {"start": machine_load()}

    device = environment.resolve_device(args.device)
    loaded = {}
    for name in args.methods:
        method_name, overrides = parse_method_spec(name)  # values typed as --set's
        opts = RunOptions(task=args.task, method=method_name, seed=args.seed,
                          preset=args.preset, device=str(device), results_dir=args.results,
                          progress=True, overrides=overrides)
        # as in a run: the run's checkpoint (a sampling-time method's backbone reused
        # from --results), fitted here where there is none
        plan = resolve(opts)
        fitted = fit(plan)
        task = plan.task
        print(f"{name}: checkpoint {'reused' if fitted.reused else 'fitted'} "
              f"({fitted.checkpoint})")
        loaded[name] = fitted.method

    b = args.batch_size
    # conditioned tasks sample at the test split's first b conditions (the runner's own
    # conditions are the test rows too), on the method's device
    test = task.dataset("test")
    cond = None
    if test.cond is not None:
        reps = -(-b // len(test.cond))
        cond = test.cond.repeat(reps, *[1] * (test.cond.ndim - 1))[:b].to(device)
    times: dict[str, list[float]] = {n: [] for n in loaded}
    phases: dict[str, list[dict[str, float]]] = {n: [] for n in loaded}
    nfe = {}
    for name, m in loaded.items():  # warm-up and NFE count
        m.nfe.reset()
        m.sample(cond, b, torch.Generator().manual_seed(0))
        nfe[name] = m.nfe.count
    for r in range(args.repeats):
        for name, m in loaded.items():
            gen = torch.Generator().manual_seed(100 + r)
            synchronize(device)
            t0 = time.perf_counter()
            with torch.no_grad():
                m.sample(cond, b, gen)
            synchronize(device)
            times[name].append(time.perf_counter() - t0)
            phases[name].append(dict(m.sample_breakdown))

    ref = args.methods[0]
    ref_t = statistics.median(times[ref]) / b
    rows = []
    for name in loaded:
        per = statistics.median(times[name]) / b
        br = {k: statistics.median(p.get(k, 0.0) for p in phases[name]) / b
              for k in (phases[name][0] if phases[name] else {})}
        br_s = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in br.items()) or "–"
        rows.append([name, nfe[name], f"{per * 1e3:.3f}", f"{ref_t / per:.2f}x", br_s])
    print(f"\ninference at batch {b}, {args.task} preset {args.preset}, "
          f"{environment.device_description(device)}, median of {args.repeats}")
    print(tabulate(rows, headers=["method", "NFE", "ms / sample", f"speed-up vs {ref}",
                                  "breakdown per sample"], tablefmt="pipe"))
    if args.record:
        from pcgbench.results.benchmarks import write_benchmark_record

        load["end"] = machine_load()
        cols = {n: n.replace(":", "[", 1) + "]" if ":" in n else n for n in loaded}
        path = write_benchmark_record(
            results_dir(args.results), "inference_speed", args.task, args.preset, device,
            "seconds_per_sample", {cols[n]: [t / b for t in times[n]] for n in loaded},
            {cols[n]: n.partition(":")[0] for n in loaded}, load,
            {"batch_size": b, "repeats": args.repeats, "seed": args.seed,
             "nfe": {cols[n]: nfe[n] for n in loaded}})
        print(f"record: {path}")


if __name__ == "__main__":
    main()
