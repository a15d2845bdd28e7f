"""The sanity rows in tables: which columns are references (the data floor and the fakes of
:mod:`pcgbench.sanity`), each metric row's verdict on a task (does it see structure
there?) read off a table's own columns, and the marks and footnotes a table prints for a
metric that does not."""

from __future__ import annotations

import math

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
