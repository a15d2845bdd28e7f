"""The paper-scale cost table: measured seconds per update and per sample at a preset
(``benchmarks/paper_cost.py``, a short probe), extrapolated to the preset's full budget.

One CSV (``paper/paper_cost.csv``, shipped with the package) holds a row per (task,
method, preset, device kind): the probe's measurements, the budget they are extrapolated
to and the resulting hours per seed, with the device, date and command that produced
them.  ``method`` ``data`` is the task's data generation (once per task).  A sampling-time
method's own fit trains nothing: its hours are sampling only, its shared backbone (FM-OT
or FFM) is a row of its own, as in a sweep.  :func:`estimate` prices a sweep plan from it
(``pcgbench sweep --dry-run``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass, fields
from importlib.resources import files
from pathlib import Path
from typing import Any

#: the cost table shipped with the package (the probe's ``--out`` default)
TABLE = "paper_cost.csv"
#: methods costed where a task has no transcribed paper table (the main table's set)
MAIN_TABLE_METHODS = ("fm_ot", "pmosfm", "pbfm", "pidm", "pcfm", "eci", "dflow",
                      "diffusionpde", "cocogen")


@dataclass
class CostRow:
    task: str
    method: str
    preset: str
    device_kind: str
    device: str
    date: str
    s_per_update: float | None  # median after warm-up (None: trains nothing / data row)
    updates: int  # the preset's budget the fit is extrapolated to
    fit_hours: float  # updates x s_per_update (per seed)
    s_per_sample: float | None
    n_test: int  # samples a run draws (the test split at the preset)
    sample_hours: float  # n_test x s_per_sample (per seed)
    total_hours: float  # fit + sample (per seed); data rows: the generation
    probe: str  # what was measured: sizes, updates, batches
    command: str

    @classmethod
    def columns(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def paper_matrix(task_names: Iterable[str] | None = None) -> dict[str, list[str]]:
    """task -> the registered methods the paper's tables report for it (its transcribed
    table, or the constrained-PDE suite's), supported on the task; tasks without a
    transcribed table get :data:`MAIN_TABLE_METHODS`.  A column the paper leaves empty on
    a task is not in its matrix (the suite's Navier--Stokes D-Flow and PBFM: "omitted
    (instabilities / no 1D protocol)"); such a pair still runs when named
    (``sweep --methods``).  Variants of a task are included (e.g.
    ``hit_reconstruction_50``)."""
    from pcgbench.paper.reported import method_key, reported_csv, reported_table
    from pcgbench.registry import METHODS, TASKS

    suite = reported_csv("constrained_pde_suite")
    registered = set(METHODS.names())
    out: dict[str, list[str]] = {}
    for name in task_names or TASKS.names():
        cls = TASKS.get(name)
        task = cls(preset="smoke", progress=False)
        labels: list[str] = []
        if name in set(suite["dataset"]):
            rows = suite[(suite["dataset"] == name) & suite["value"].notna()]
            labels = sorted(set(rows["method"]))
        elif getattr(cls, "paper_benchmark", None):
            table = reported_table(cls.paper_benchmark)
            labels = [] if table is None else [c for c in table.columns
                                               if table[c].notna().any()]
        keys = [method_key(label) for label in labels] or list(MAIN_TABLE_METHODS)
        out[name] = [k for k in dict.fromkeys(keys)
                     if k in registered and METHODS.get(k).unsupported_reason(task) is None]
    return out


#: the paper's main comparison table's benchmarks (README "Results at a glance")
MAIN_TABLE_TASKS = ("burgers", "darcy", "kolmogorov", "dynamic_stall", "hit_reconstruction")
#: ``pcgbench sweep --matrix`` choices
MATRICES = ("main", "suite", "paper")


def suite_tasks() -> list[str]:
    """The constrained-PDE suite's registered tasks (its transcribed table's datasets)."""
    from pcgbench.paper.reported import reported_csv
    from pcgbench.registry import TASKS

    names = set(reported_csv("constrained_pde_suite")["dataset"])
    return [t for t in TASKS.names() if t in names]


def matrix(name: str) -> dict[str, list[str]]:
    """task -> methods of a named matrix: ``main`` (:data:`MAIN_TABLE_TASKS`), ``suite``
    (the constrained-PDE suite) or ``paper`` (both), each task with the columns
    :func:`paper_matrix` gives it (its transcribed paper table's, supported here)."""
    if name not in MATRICES:
        raise ValueError(f"unknown matrix {name!r}: one of {', '.join(MATRICES)}")
    tasks = ([*MAIN_TABLE_TASKS] if name in ("main", "paper") else []) + (
        suite_tasks() if name in ("suite", "paper") else [])
    return paper_matrix(tasks)


def table_path() -> Path:
    return Path(str(files("pcgbench.paper").joinpath(TABLE)))


def read_table(path: Path | None = None) -> list[CostRow]:
    """The rows of a cost table (the shipped one by default; [] when there is none)."""
    path = path or table_path()
    if not path.exists():
        return []
    rows = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            kw: dict = {}
            for fld in fields(CostRow):
                v = raw.get(fld.name, "")
                if fld.name in ("updates", "n_test"):
                    kw[fld.name] = int(float(v or 0))
                elif fld.name in ("s_per_update", "s_per_sample"):
                    kw[fld.name] = float(v) if v not in ("", "None") else None
                elif fld.name.endswith("hours"):
                    kw[fld.name] = float(v or 0)
                else:
                    kw[fld.name] = v
            rows.append(CostRow(**kw))
    return rows


def merge(old: list[CostRow], new: list[CostRow]) -> list[CostRow]:
    """``old`` with every (task, method, preset, device kind) of ``new`` replaced."""
    key = {(r.task, r.method, r.preset, r.device_kind) for r in new}
    kept = [r for r in old if (r.task, r.method, r.preset, r.device_kind) not in key]
    return sorted([*kept, *new], key=lambda r: (r.preset, r.task, r.method != "data",
                                                r.method, r.device_kind))


def to_csv(rows: list[CostRow]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CostRow.columns())
    for r in rows:
        w.writerow([_fmt(getattr(r, c)) for c in CostRow.columns()])
    return buf.getvalue()


def _fmt(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


@dataclass
class Estimate:
    hours: float
    priced: int
    unpriced: list[str]
    device_kind: str
    sources: set[tuple[str, str]]  # (device, date) of the rows used


def estimate(jobs: Iterable[tuple[Any, ...]], preset: str, rows: list[CostRow],
             device_kind: str | None = None) -> Estimate | None:
    """Hours of a sweep's jobs ``(stage, task, method[, updates])`` (stage ``data``: the
    task's data row; ``updates``: the job's training budget where it differs from the
    row's, e.g. a task's own ``cpu`` budget) from the cost table rows of ``preset``: the
    GPU rows (device kind ``cuda``) when the table has any for the preset, else
    ``device_kind``'s, else the CPU probe's.  None when the table has no row for the
    preset."""
    from pcgbench.stages.measure import planned_timing_seconds
    from pcgbench.stages.plan import RunOptions

    at = [r for r in rows if r.preset == preset]
    if not at:
        return None
    kinds = {r.device_kind for r in at}
    kind = device_kind or ("cuda" if "cuda" in kinds else sorted(kinds)[0])
    by = {(r.task, r.method): r for r in at if r.device_kind == kind}
    hours, priced, unpriced, sources = 0.0, 0, [], set()
    for stage, task, method, *rest in jobs:
        row = by.get((task, "data" if stage == "data" else method))
        if row is None or not math.isfinite(row.total_hours):  # none, or the probe timed out
            unpriced.append(f"{task}/{'data' if stage == 'data' else method}")
            continue
        updates = rest[0] if rest else None
        if updates is not None and row.s_per_update is not None:
            # the job's own budget (a task's recipe_overrides, --set): the probe's s/update
            # times the updates this run will do, not the preset's default budget
            hours += row.s_per_update * updates / 3600 + row.sample_hours
        else:
            hours += row.total_hours
        if stage != "data" and row.s_per_sample and row.n_test:
            # the extra timed batches a run adds where its test split is short
            hours += planned_timing_seconds(row.n_test, RunOptions.sample_batch,
                                            row.s_per_sample) / 3600
        priced += 1
        sources.add((row.device, row.date))
    return Estimate(hours, priced, unpriced, kind, sources)


def markdown(rows: list[CostRow], seeds: int = 3) -> str:
    """docs/paper_cost.md: per preset and device kind, the table of hours per (task,
    method) and seed with the measured s/update and s/sample, and the matrix's total."""
    from pcgbench.leaderboard.render import text_table

    out = ["# Paper-scale cost table", "",
           "Seconds per optimizer update and per sample measured by a short probe "
           "(`benchmarks/paper_cost.py`), extrapolated to the preset's full budget: "
           "fit = updates x s/update, sampling = test rows x s/sample, per seed; `data` = "
           "the task's data generation (once per task), extrapolated from its generation "
           "probe by the task's work model.  A sampling-time method's hours are its "
           "sampling only (its shared backbone is the FM-OT/FFM row).  One-off costs "
           "(calibration, data loading) are not extrapolated.  `pcgbench sweep --dry-run "
           "--preset paper` prices the runs a sweep would do from this table "
           "(`paper/paper_cost.csv`); `benchmarks/gpu_check.sh` fills the GPU rows.", ""]
    groups: dict[tuple[str, str], list[CostRow]] = {}
    for r in rows:
        groups.setdefault((r.preset, r.device_kind), []).append(r)
    for (preset, kind), rs in sorted(groups.items()):
        devices = sorted({(r.device, r.date) for r in rs})
        commands = sorted({r.command for r in rs})
        label = "GPU" if kind == "cuda" else "CPU probe"
        out += [f"## preset `{preset}`, {label} ({kind})", ""]
        out += [f"- device: {d}, measured {date}" for d, date in devices]
        out += [f"- command: `{c}`" for c in commands]
        notes = sorted({r.probe for r in rs if r.method != "data"})
        out += [f"- probe: {n}" for n in notes[:3]]
        if len(notes) > 3:
            out.append(f"- ({len(notes) - 3} more probe descriptions in the CSV)")
        total = 0.0
        missing = []
        table = []
        for r in rs:
            table.append([r.task, r.method,
                          "" if r.s_per_update is None else f"{r.s_per_update:.4g}",
                          str(r.updates or ""), _h(r.fit_hours),
                          "" if r.s_per_sample is None else f"{r.s_per_sample:.4g}",
                          str(r.n_test or ""), _h(r.sample_hours), _h(r.total_hours)])
            if r.total_hours != r.total_hours:
                missing.append(f"{r.task}/{r.method}")
            else:
                total += r.total_hours * (1 if r.method == "data" else seeds)
        out += ["", text_table(["task", "method", "s/update", "updates", "fit h", "s/sample",
                                "test rows", "sample h", "h per seed"], table)]
        out += ["", f"Total for the matrix above at {seeds} seed(s) per (task, method), data "
                    f"once per task: **{total:.3g} {'GPU-' if kind == 'cuda' else ''}hours**"
                    + (f" (not priced: {', '.join(missing)})" if missing else "") + ".", ""]
    return "\n".join(out)


def _h(v: float) -> str:
    return "n/a" if v != v else f"{v:.3g}"
