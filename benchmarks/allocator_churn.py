"""Allocator churn of a `cpu` fit: minor page faults, system time and seconds per update
with glibc's default malloc thresholds against raised ones, side by side in one run.

glibc serves allocations above its mmap threshold (128 KiB at start, adapting upward to
32 MiB) with fresh mmap'd pages and returns them with munmap, and trims the heap top
above its trim threshold: a training loop that allocates and frees the same
multi-megabyte activations every update then faults every page in again each time.  This
runs the same fit (task, method, seed, ``updates`` updates at the preset's config) in a
fresh single-threaded child process per configuration and round, and prints per
configuration the median over rounds of: seconds per update (median after 5), minor page
faults and system / user CPU seconds of the fit alone (``getrusage`` around ``fit``), and
ratios to the first configuration.

    OMP_NUM_THREADS=1 python benchmarks/allocator_churn.py --task burgers --method pmosfm \\
        --updates 300 --rounds 2

Configurations: ``glibc`` (the defaults), ``env`` (``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` raised to 32 MiB / 1 GiB in the child's environment, fixed before it
starts) and ``pcgbench`` (what ``pcgbench`` sets at import: :mod:`pcgbench.runtime.allocator`;
``PCGBENCH_MALLOPT=0`` in ``glibc``/``env`` turns that off so they measure what they say).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from tabulate import tabulate

CHILD = r"""
import json, resource, statistics, sys, tempfile, time
import torch
torch.set_num_threads(1)
from pcgbench.stages.fit import fit
from pcgbench.stages.plan import RunOptions, resolve
task, method, updates, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with tempfile.TemporaryDirectory() as tmp:
    opts = RunOptions(task=task, method=method, seed=seed, preset="cpu", device="cpu",
                      overrides={"iterations": updates}, results_dir=tmp,
                      checkpoint_every=0, progress=False)
    plan = resolve(opts)
    plan.task.dataset("train"); plan.task.dataset("test")  # data generated before timing
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    out = fit(plan)
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
from pcgbench.runtime import allocator
print(json.dumps({"spu": statistics.median(out.stats.update_seconds[5:]),
                  "minflt": r1.ru_minflt - r0.ru_minflt, "stime": r1.ru_stime - r0.ru_stime,
                  "utime": r1.ru_utime - r0.ru_utime, "wall": t1 - t0,
                  "mallopt": allocator.APPLIED}))
"""

CONFIGS = {
    "glibc": {"PCGBENCH_MALLOPT": "0"},
    "env": {"PCGBENCH_MALLOPT": "0", "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
            "MALLOC_TRIM_THRESHOLD_": str(1 << 30)},
    "pcgbench": {},
}


def one(task: str, method: str, updates: int, seed: int, env: dict[str, str]) -> dict:
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith("MALLOC_") and k != "PCGBENCH_MALLOPT"}
    child_env.update(env, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, task, method, str(updates), str(seed)],
                         env=child_env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="burgers")
    ap.add_argument("--method", default="pmosfm")
    ap.add_argument("--updates", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {c: [] for c in args.configs}
    for r in range(args.rounds):  # interleaved: slow drifts in load hit every config alike
        for c in args.configs:
            runs[c].append(one(args.task, args.method, args.updates, args.seed, CONFIGS[c]))
            print(f"round {r} {c}: {runs[c][-1]}", file=sys.stderr, flush=True)
    keys = ("spu", "minflt", "stime", "utime", "wall")
    med = {c: {k: statistics.median(x[k] for x in v) for k in keys} for c, v in runs.items()}
    base = med[args.configs[0]]
    rows = [[c, f"{m['spu']:.4g}", f"{m['minflt']:.3g}", f"{m['stime']:.3g}",
             f"{m['utime']:.3g}", f"{m['wall']:.3g}",
             f"{m['spu'] / base['spu']:.2f}", f"{m['minflt'] / max(base['minflt'], 1):.3f}",
             f"{m['stime'] / max(base['stime'], 1e-9):.2f}", runs[c][0]["mallopt"]]
            for c, m in med.items()]
    load = os.getloadavg()[0]
    print(f"{args.task}/{args.method} at cpu, {args.updates} updates, seed {args.seed}, "
          f"{args.rounds} round(s), one thread per child; 1-min load {load:.2f} on "
          f"{os.cpu_count()} CPUs at the end")
    print(tabulate(rows, headers=["config", "s/update", "minor faults", "sys s", "user s",
                                  "fit wall s", "s/update ratio", "faults ratio",
                                  "sys ratio", "mallopt at import"]))


if __name__ == "__main__":
    main()
