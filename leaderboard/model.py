"""The table models every output renders (:mod:`pcgbench.leaderboard.render`).

:func:`task_table` builds a :class:`TaskTable` (one task's means, spreads, seed counts, the
paper's reported rows, the notes under the table and the lines after it) from run records;
a table as printed is a :class:`Grid` of :class:`Cell` values (a task table's:
:func:`measured_grid`, :func:`reported_grid`); a multi-task table in a paper's layout (a
suite, an ablation) is a :class:`LayoutTable`: its grids and its long CSV frames.
Markdown, LaTeX, CSV and the HTML report only render these."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pcgbench.leaderboard.sanity import BLIND_MARK, blind
from pcgbench.leaderboard.tables import (
    LOADED_MARK,
    REPORTED_CAPTION,
    backbone_notes,
    best_column,
    failed_notes,
    group_records,
    method_of,
    nonfinite_cell,
    nonfinite_notes,
    row_label,
    select,
    summary_frame,
    table_notes,
)
from pcgbench.paper.reported import reported_table
from pcgbench.registry import TASKS
from pcgbench.results.record import RunRecord, as_records


@dataclass(frozen=True)
class TaskTable:
    """One task's table at one preset: metric rows x method columns (``mean``, ``std``,
    ``seeds`` per column), the paper's ``reported`` rows (None: none or not wanted), the
    records of each shown column, ``notes`` (inside the table: provenance, departures,
    memory figure, loaded timing cells) and ``remarks`` (after it: under-trained
    backbones, non-finite cells, runs left out of the means)."""

    task: str
    preset: str
    mean: pd.DataFrame
    std: pd.DataFrame
    seeds: dict[str, int]
    reported: pd.DataFrame | None
    by_method: Mapping[str, list[RunRecord]]
    notes: list[str]
    remarks: list[str]


def task_table(records: Iterable[Mapping[str, Any]], task: str, preset: str, *,
               variants: bool = False, rows: Sequence[str] | None = None,
               methods: Sequence[str] | None = None, reported: bool = True,
               groups: Mapping[tuple[str, str], Mapping[str, list[RunRecord]]] | None = None,
               sanity: bool = True) -> TaskTable | None:
    """The table of ``task`` at ``preset`` (None without records): ``rows`` / ``methods``
    select as ``leaderboard --rows/--methods`` (the notes on under-trained backbones are
    computed from the whole table); ``groups`` reuses a :func:`group_records` result.
    The task's headline metric is the first row; ``sanity``: show the sanity rows'
    columns (their verdicts mark and rank the rows either way)."""
    from pcgbench.leaderboard.published import provenance_notes, withheld_notes
    from pcgbench.leaderboard.sanity import blind_notes, is_sanity

    records = as_records(records)
    if groups is None:
        groups = group_records(records, variants=variants)
    by_method = groups.get((task, preset))
    if not by_method:
        return None
    cls = TASKS.lookup(task)
    order = tuple(dict.fromkeys((cls.headline, *cls.metrics))) if cls is not None else ()
    mean, std, seeds = summary_frame(by_method, order)
    mean.attrs["unranked"] = dict(getattr(cls, "unranked_metrics", {}) or {})
    mean.attrs["headline"] = getattr(cls, "headline", None)
    if not sanity:
        keep = [c for c in mean.columns if not is_sanity(c)]
        mean, std, seeds = mean[keep], std[keep], {c: seeds[c] for c in keep}
    paper = None
    if reported and task in TASKS and (bench := TASKS.get(task).paper_benchmark):
        paper = reported_table(bench)
    selected = select(mean, std, seeds, list(rows or ()), list(methods or ()), paper)
    backbones = backbone_notes(mean, preset, shown=set(selected[0].columns),
                               by_method=by_method)
    mean, std, seeds, paper = selected
    shown = {m: by_method[m] for m in mean.columns}
    return TaskTable(task=task, preset=preset, mean=mean, std=std, seeds=seeds,
                     reported=paper, by_method=shown,
                     notes=table_notes(task, preset, shown, mean) + blind_notes(mean)
                     + unranked_notes(mean) + provenance_notes(shown)
                     + withheld_notes(task, preset, shown),
                     remarks=backbones + nonfinite_notes(mean)
                     + failed_notes(records, {task}, preset))


def unranked_notes(mean: pd.DataFrame) -> list[str]:
    """One line per shown metric the task leaves unranked, with why."""
    return [f"{row}: not ranked: {why}" for row, why in mean.attrs.get("unranked", {}).items()
            if row in mean.index]


@dataclass(frozen=True)
class Cell:
    """One value cell: ``value`` (NaN prints '–'), then `` ± spread`` unless ``spread`` is
    None, then ``suffix`` (a mark or a seed count); ``text`` prints instead of the value
    where set (a failed run's status, a non-finite metric's kind, a transcribed value as
    printed); ``best``: bold."""

    value: float = math.nan
    spread: float | None = None
    suffix: str = ""
    text: str | None = None
    best: bool = False


@dataclass(frozen=True)
class Grid:
    """One table as printed: ``title`` (a heading; for the paper's values, ``reported``, a
    caption line), ``headers`` (the label columns' then the value columns', plain text),
    ``rows`` of (labels, cells) and the ``notes`` under it.  ``verbatim``: cells print
    unescaped in LaTeX (the suite and ablation layouts, whose gaps print as '–')."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[tuple[str, ...], tuple[Cell, ...]], ...]
    notes: tuple[str, ...] = ()
    reported: bool = False
    verbatim: bool = False


@dataclass(frozen=True)
class LayoutTable:
    """A multi-task table in a paper's layout (a suite, an ablation): ``blocks`` in print
    order -- a :class:`Grid` per preset or group of runs, a line where datasets have no
    records, the paper's values last -- and ``long``, its CSV form: one long frame per CSV
    printed (the suite: one per preset)."""

    blocks: tuple[Grid | str, ...]
    long: tuple[pd.DataFrame, ...]


def measured_grid(mean: pd.DataFrame, std: pd.DataFrame, seeds: dict[str, int],
                  title: str = "Measured", notes: Sequence[str] = (),
                  nonfinite: bool = True) -> Grid:
    """Metric rows x method columns (``mean ± std``, ``LOADED_MARK`` on a timing cell
    measured under load, the best per row: :func:`best_column`); ``nonfinite``: a NaN/Inf
    metric shows its kind (the HTML report shows '–')."""
    rows = []
    for row in mean.index:
        best = best_column(mean, row)
        cells = []
        for m in mean.columns:
            value, spread = mean.loc[row, m], std.loc[row, m]
            loaded = (row, m) in mean.attrs.get("loaded", ()) and not math.isnan(value)
            cells.append(Cell(value, None if math.isnan(spread) else spread,
                              LOADED_MARK if loaded else "",
                              nonfinite_cell(mean, row, m) if nonfinite else None, m == best))
        mark = BLIND_MARK if blind(mean, str(row)) is not None else ""
        head = " (headline)" if row == mean.attrs.get("headline") else ""
        rows.append(((row_label(row) + head + mark,), tuple(cells)))
    headers = ["metric"] + [column_header(m, seeds[m]) for m in mean.columns]
    return Grid(title, tuple(headers), tuple(rows), tuple(notes))


def column_header(column: str, seeds: int) -> str:
    """A value column's header: ``data (reference)``, ``noise (sanity)`` or
    ``method (n=seeds)``."""
    from pcgbench.leaderboard.sanity import is_sanity

    if method_of(column) == "data":
        return column.replace("data", "data (reference)", 1)
    if is_sanity(column):
        name = method_of(column)
        return column.replace(name, f"{name} (sanity)", 1)
    return f"{column} (n={seeds})"


def reported_grid(reported: pd.DataFrame, label: Callable[[str], str] = row_label) -> Grid:
    """The paper's rows (``label``: a row's name) x its method columns."""
    rows = tuple(((label(r),), tuple(Cell(reported.loc[r, m]) for m in reported.columns))
                 for r in reported.index)
    return Grid(REPORTED_CAPTION, ("metric", *(f"paper: {m}" for m in reported.columns)),
                rows, reported=True)
