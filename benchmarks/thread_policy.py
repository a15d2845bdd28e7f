"""The CPU thread policies (pcgbench.runtime.threads) side by side, idle and beside busy neighbours.

For every task, neighbour count and policy, one ``pcgbench run --method pmosfm --preset cpu
--set iterations=N --force`` in a fresh results folder (the data cache is shared), with
``k`` single-threaded busy loops (``python -c 'while True: pass'``) started before it and
stopped after.  Prints, per (task, neighbours), each policy's wall seconds of the whole
command and its median seconds per update (from the record), then each policy against
the best of its row, and the rule the default must meet (within 10 % of the best idle,
never more than 1.5x the best loaded):

    python benchmarks/thread_policy.py --tasks burgers kolmogorov --neighbours 0 1 2 \\
        --updates 60
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

POLICIES = ("default", "passive", "one", "free")


def _neighbours(k: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(k)]


def _run(task: str, policy: str, updates: int, method: str) -> tuple[float, float, dict]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "PCGBENCH_SET_OMP_WAIT",
                        "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    env["PCGBENCH_THREADS_POLICY"] = policy
    with tempfile.TemporaryDirectory() as res:
        cmd = [sys.executable, "-m", "pcgbench", "run", "--task", task, "--method", method,
               "--preset", "cpu", "--set", f"iterations={updates}", "--seed", "0",
               "--force", "--quiet", "--results", res]
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        (rec_path,) = [p for p in Path(res, "records").rglob("*.json")
                       if f"/{method}/" in str(p)]
        rec = json.loads(rec_path.read_text())
    return wall, rec["training"]["seconds_per_update"], rec.get("threads") or {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["burgers", "kolmogorov"])
    ap.add_argument("--neighbours", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--policies", nargs="+", default=list(POLICIES))
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--method", default="pmosfm")
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs; {args.method}, preset cpu, {args.updates} updates; "
          "neighbours: single-threaded busy loops")
    rows, ratio_rows = [], []
    for task in args.tasks:
        for k in args.neighbours:
            busy = _neighbours(k)
            try:
                time.sleep(1.0)
                got = {p: _run(task, p, args.updates, args.method) for p in args.policies}
            finally:
                for proc in busy:
                    proc.kill()
                    proc.wait()
            best_wall = min(w for w, _, _ in got.values())
            rows.append([task, k] + [f"{w:.0f} s ({u:.3f} s/upd, {t.get('threads', '?')} thr)"
                                     for w, u, t in got.values()])
            ratio_rows.append([task, k] + [f"{w / best_wall:.2f}x" for w, _, _ in got.values()])
            print(f"  {task}, {k} neighbour(s): "
                  + ", ".join(f"{p} {w:.0f} s" for p, (w, _, _) in got.items()), flush=True)
    head = ["task", "neighbours", *args.policies]
    print("\nwall of the whole command (median s/update, threads):")
    print(tabulate(rows, headers=head, tablefmt="github"))
    print("\nwall over the best of its row (default rule: <= 1.10x idle, <= 1.5x loaded):")
    print(tabulate(ratio_rows, headers=head, tablefmt="github"))


if __name__ == "__main__":
    main()
