"""Cost warnings before and during a run: a fit far above the preset's budget (with the
time it would take at the s/update recorded for the same cell), many extra timed batches."""

from __future__ import annotations

import math
import statistics
from typing import Any

from pcgbench.results.files import results_dir as default_results_dir
from pcgbench.results.store import cell_records

#: warn before a fit with this many times the preset's default updates
BUDGET_RATIO_WARNING = 100
#: or whose estimated duration (from recorded s/update) exceeds this many seconds
BUDGET_SECONDS_WARNING = 3600.0


def recorded_seconds_per_update(task: str, preset: str, method: str,
                                results: str | None) -> float | None:
    """The median training s/update recorded for (task, preset, method) in the results
    directory (None where none is recorded)."""
    values = []
    for rec in cell_records(default_results_dir(results), task, preset, method, limit=50):
        v = rec.training.get("seconds_per_update")
        if isinstance(v, int | float) and math.isfinite(v) and v > 0:
            values.append(float(v))
    return statistics.median(values) if values else None


def duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def warn_budget(task: str, method: str, preset: str, results: str | None, iters: Any,
                default: Any, field: str | None = "iterations") -> None:
    """Warn before a fit of ``iters`` updates far above the preset's ``default``: with the
    estimated time where a s/update of this (task, preset, method) is recorded.  (The
    runner passes its plan's fields; nothing here reads the plan.)"""
    if not isinstance(iters, int) or not isinstance(default, int) or default <= 0:
        return
    ratio = iters / default
    spu = recorded_seconds_per_update(task, preset, method, results)
    if ratio <= 1 or (ratio < BUDGET_RATIO_WARNING
                      and (spu is None or iters * spu < BUDGET_SECONDS_WARNING)):
        return
    import warnings

    estimate = ("" if spu is None else
                f": ~{duration(iters * spu)} at the {spu:.3g} s/update recorded for "
                f"{method} on {task} at {preset}")
    warnings.warn(f"{field}={iters} is {ratio:.3g} x the {preset} default ({default})"
                  f"{estimate}; --max-minutes bounds the run", stacklevel=2)
