"""Data-generation time per task and preset: measured, and extrapolated where the full
generation is too long for this machine.

For every (task, preset):

* ``measured``: generate every split with the preset's own parameters into a fresh
  temporary cache and time it (solver + HDF5 write + checksum), unless ``--probe-only``
  names the preset;
* ``probe``: generate every split with the task's reduced probe parameters
  (``Task.generation_probe``: same grid, physics and spin-up, fewer rows) and extrapolate
  ``t_full = t_one_off + t_probe * work(full) / work(probe)`` with the task's own work
  model (``Task.generation_work``: rows, or trajectory-time units for the Kolmogorov
  tasks).  The probe runs twice in one process: the second run reuses in-process caches
  (e.g. Darcy's KL basis), ``t_probe`` is its time and ``t_one_off`` = first − second.
  This is linear scaling of a measured cost; it ignores batching gains (a GPU runs many
  trajectories at once) and fixed costs, so it is an estimate, labelled as such.

    OMP_NUM_THREADS=1 python benchmarks/data_generation.py --presets cpu paper \\
        --probe-only paper --csv results/data_generation.csv
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from pcgbench.registry import TASKS
from pcgbench.results.files import atomic_write
from pcgbench.runtime import environment
from pcgbench.task import SPLITS, Task


def _generate_all(task_cls: type[Task], preset: str, params) -> float:
    """Seconds to generate and cache every split with ``params`` in a fresh directory."""
    from pcgbench.data.cache import load_or_generate

    with tempfile.TemporaryDirectory() as d:
        task = task_cls(preset, data_dir=Path(d), progress=False, params=params)
        t0 = time.perf_counter()
        for split in SPLITS:
            load_or_generate(task, split)
        return time.perf_counter() - t0


def measure(name: str, preset: str, full: bool) -> dict:
    task_cls = TASKS.get(name)
    task = task_cls(preset, progress=False)
    params, probe = task.params, task.generation_probe()
    row: dict = {"task": name, "preset": preset}
    if full:
        row["measured_s"] = _generate_all(task_cls, preset, params)
    if probe != params:
        # run the probe twice: the second run reuses in-process caches (KL bases, FFT
        # plans, imports), so first - second is the one-off cost, not scaled with work
        t_first = _generate_all(task_cls, preset, probe)
        t_probe = _generate_all(task_cls, preset, probe)
        one_off = max(t_first - t_probe, 0.0)
        w_full, w_probe = task.generation_work(params), task.generation_work(probe)
        row.update(probe_s=t_probe, one_off_s=one_off, work_ratio=w_full / w_probe,
                   extrapolated_s=one_off + t_probe * w_full / w_probe)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=None, help="default: every task")
    ap.add_argument("--presets", nargs="+", default=["cpu", "paper"])
    ap.add_argument("--probe-only", nargs="*", default=["paper"],
                    help="presets timed by the probe only (no full generation)")
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args()
    names = args.tasks or TASKS.names()
    print(f"machine: {environment.device_description(environment.resolve_device('cpu'))}")
    rows = []
    for name in names:
        for preset in args.presets:
            row = measure(name, preset, full=preset not in args.probe_only)
            rows.append(row)
            print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()},
                  flush=True)
    cols = ["task", "preset", "measured_s", "probe_s", "one_off_s", "work_ratio",
            "extrapolated_s"]
    table = [[r.get(c, "") if not isinstance(r.get(c), float) else f"{r[c]:.1f}"
              for c in cols] for r in rows]
    print(tabulate(table, headers=["task", "preset", "measured (s)", "probe (s)", "one-off (s)",
                                   "work full/probe", "extrapolated (s)"], tablefmt="github"))
    if args.csv is not None:
        import pandas as pd

        args.csv.parent.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame(rows)
        atomic_write(args.csv, lambda tmp: frame.to_csv(tmp, index=False))
        print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()

