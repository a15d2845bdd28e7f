"""The sanity rows in tables: which columns are references (the data floor and the fakes of
:mod:`pcgbench.sanity`), each metric row's verdict on a task (does it see structure
there?) read off a table's own columns, and the marks and footnotes a table prints for a
metric that does not."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from pcgbench.registry import METRICS
from pcgbench.sanity import FAKES, SANITY_ROWS, Verdict, verdict

#: every reference column: the data floor first, then the sanity rows in declared order
REFERENCE_COLUMNS: tuple[str, ...] = ("data", *SANITY_ROWS)
#: the mark after a metric's row label where it does not see structure on the task
BLIND_MARK = "‡"


def base_name(column: str) -> str:
    """The method name of a column label (variant and device kind removed)."""
    return column.split("[", 1)[0].split("@", 1)[0]


def is_reference(column: str) -> bool:
    """The data floor or a sanity row: never a contender, never 'best'."""
    return base_name(column) in REFERENCE_COLUMNS


def is_sanity(column: str) -> bool:
    return base_name(column) in FAKES


def two_sided(metric: str) -> bool:
    """Whether ``metric`` is ranked by distance from the data's own value
    (``Metric.two_sided``: the data score away from 0, e.g. the residual on a coarse grid,
    so a too-smooth field would otherwise rank best)."""
    cls = METRICS.lookup(metric)
    return bool(getattr(cls, "two_sided", False))


def frame_verdicts(mean: pd.DataFrame, std: pd.DataFrame) -> dict[str, Verdict]:
    """Each registered metric row's :class:`~pcgbench.sanity.Verdict` from a table's own
    columns: the ``data`` floor (mean, spread) and the default sanity columns (their
    means); {} when the table has no floor or no sanity column."""
    if "data" not in mean.columns:
        return {}
    fakes = [c for c in mean.columns if c in FAKES]
    if not fakes:
        return {}
    out = {}
    for row in mean.index:
        cls = METRICS.lookup(str(row))
        if cls is None:
            continue
        floor = float(mean.loc[row, "data"])
        spread = float(std.loc[row, "data"]) if row in std.index else math.nan
        values = {c: float(mean.loc[row, c]) for c in fakes}
        out[str(row)] = verdict(str(row), floor, 0.0 if math.isnan(spread) else spread,
                                values, two_sided(str(row)),
                                bool(getattr(cls, "higher_is_better", False)),
                                float(getattr(cls, "chance", 0.0)))
    return out


def blind(mean: pd.DataFrame, row: str) -> Verdict | None:
    """The row's verdict where it says the metric does not see structure here (tested and
    failed), else None."""
    v = mean.attrs.get("verdicts", {}).get(row)
    return v if v is not None and not v.sees and v.worst is not None else None


def blind_notes(mean: pd.DataFrame) -> list[str]:
    """One line per shown metric row that does not see structure on this task."""
    out = []
    for row in mean.index:
        if (v := blind(mean, str(row))) is not None:
            out.append(f"{BLIND_MARK} {v.footnote()}: it ranks nothing here")
    if mean.attrs.get("verdicts") == {} and "data" in mean.columns:
        out.append("sanity rows not recorded for this table: no metric was tested against "
                   "the fakes (any `pcgbench run` of the task, or `pcgbench sanity`, "
                   "records them)")
    return out


def task_verdicts(records: Iterable[Mapping[str, Any]], task: str, preset: str
                  ) -> dict[str, Verdict]:
    """The verdict of every metric of ``task`` at ``preset`` from the records' data floor
    and sanity rows (the default columns)."""
    from pcgbench.leaderboard.model import task_table

    table = task_table(records, task, preset, reported=False)
    return {} if table is None else dict(table.mean.attrs.get("verdicts", {}))


# -- the `pcgbench sanity` tables ------------------------------------------------------------
def sanity_grid(records: Iterable[Mapping[str, Any]], task: str, preset: str):  # -> Grid
    """One task's sanity table: the floor (mean ± its draws' spread), then each sanity row
    as its ratio to the floor (``ratio_to_floor``; ' ✗' where it is *not* clearly worse
    than the floor, :func:`pcgbench.sanity.beyond_floor`), then each metric's verdict.
    None without a floor or sanity records."""
    from pcgbench.leaderboard.model import Cell, Grid, task_table
    from pcgbench.registry import TASKS
    from pcgbench.sanity import beyond_floor, fmt_ratio, ratio_to_floor

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
    from pcgbench.registry import TASKS

    rows = []
    records = list(records)
    for task in tasks:
        cls = TASKS.lookup(task)
        for m, v in task_verdicts(records, task, preset).items():
            rows.append({"task": task, "metric": m, "sees": v.sees, "closest_fake": v.worst,
                         "ratio": v.ratio, "missed": " ".join(v.missed),
                         "headline": m == getattr(cls, "headline", None)})
    return pd.DataFrame(rows)
