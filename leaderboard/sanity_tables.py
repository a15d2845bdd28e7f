"""The ``pcgbench sanity`` tables and the verdicts of a task read from records (through
:func:`pcgbench.leaderboard.model.task_table`; :mod:`pcgbench.leaderboard.sanity` holds
what the table model itself needs)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from pcgbench.leaderboard.model import Cell, Grid, task_table
from pcgbench.leaderboard.sanity import two_sided
from pcgbench.registry import METRICS, TASKS
from pcgbench.sanity import FAKES, Verdict, beyond_floor, fmt_ratio, ratio_to_floor


def task_verdicts(records: Iterable[Mapping[str, Any]], task: str, preset: str
                  ) -> dict[str, Verdict]:
    """The verdict of every metric of ``task`` at ``preset`` from the records' data floor
    and sanity rows (the default columns)."""
    table = task_table(records, task, preset, reported=False)
    return {} if table is None else dict(table.mean.attrs.get("verdicts", {}))


def sanity_grid(records: Iterable[Mapping[str, Any]], task: str, preset: str
                ) -> Grid | None:
    """One task's sanity table: the floor (mean ± its draws' spread), then each sanity row
    as its ratio to the floor (``ratio_to_floor``; ' ✗' where it is *not* clearly worse
    than the floor, :func:`pcgbench.sanity.beyond_floor`), then each metric's verdict.
    None without a floor or sanity records."""
    table = task_table(records, task, preset, reported=False)
    if table is None or "data" not in table.mean.columns:
        return None
    mean, std = table.mean, table.std
    verdicts = mean.attrs.get("verdicts", {})
    cls = TASKS.lookup(task)
    metrics = [m for m in (cls.metrics if cls is not None else verdicts) if m in verdicts]
    fakes = [c for c in mean.columns if c in FAKES]
    if not metrics or not fakes:
        return None
    headline = getattr(cls, "headline", None)
    rows = []
    for m in metrics:
        floor, s = float(mean.loc[m, "data"]), _spread(std, m)
        cells = [Cell(floor, s)]
        for fake in fakes:
            v = float(mean.loc[m, fake])
            cls_m = METRICS.lookup(m)
            chance = float(getattr(cls_m, "chance", 0.0))
            ok = beyond_floor(v, floor, s or 0.0, two_sided(m),
                              bool(getattr(cls_m, "higher_is_better", False)), chance)
            text = fmt_ratio(ratio_to_floor(v, floor, s or 0.0, two_sided(m), chance))
            cells.append(Cell(text=text + ("" if ok else " ✗")))
        v = verdicts[m]
        cells.append(Cell(text="yes" if v.sees else f"no: {', '.join(v.missed)}"))
        label = m + (" (headline)" if m == headline else "") + (" [two-sided]"
                                                                if two_sided(m) else "")
        rows.append(((label,), tuple(cells)))
    headers = ("metric", "data floor", *fakes, "sees structure")
    notes = ("each sanity row: its metric over the data floor's, both from the metric's "
             "chance level (c2st: 0.5; two-sided metrics: 1 + |value - floor| / floor), "
             "mean over its draws; ✗: not clearly worse than "
             "the floor (rule: docs/evaluation.md 'Sanity rows'); data floor: mean ± the "
             "spread over its draws",)
    return Grid(f"{task} ({preset}): sanity rows over the data floor", headers, tuple(rows),
                notes)


def _spread(std: pd.DataFrame, m: str) -> float | None:
    v = float(std.loc[m, "data"]) if m in std.index and "data" in std.columns else math.nan
    return None if math.isnan(v) else v


def sanity_summary(records: Iterable[Mapping[str, Any]], tasks: Iterable[str], preset: str
                   ) -> pd.DataFrame:
    """Long form of every verdict: task, metric, sees, the fake closest to the data and its
    ratio, the fakes the metric misses, whether it is the task's headline."""
    rows = []
    records = list(records)
    for task in tasks:
        cls = TASKS.lookup(task)
        for m, v in task_verdicts(records, task, preset).items():
            rows.append({"task": task, "metric": m, "sees": v.sees, "closest_fake": v.worst,
                         "ratio": v.ratio, "missed": " ".join(v.missed),
                         "headline": m == getattr(cls, "headline", None)})
    return pd.DataFrame(rows)
