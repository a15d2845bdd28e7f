"""One table model behind every per-task output: :func:`task_table` builds a
:class:`TaskTable` (means, spreads, seed counts, the paper's reported rows, the notes under
the table and the lines after it) from run records; markdown, LaTeX, CSV and the HTML
report only render it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pcgbench.leaderboard.tables import (
    backbone_notes,
    failed_notes,
    group_records,
    nonfinite_notes,
    select,
    summary_frame,
    table_notes,
)
from pcgbench.paper.reported import reported_table
from pcgbench.record import RunRecord, as_records
from pcgbench.registry import TASKS


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
               groups: Mapping[tuple[str, str], Mapping[str, list[RunRecord]]] | None = None
               ) -> TaskTable | None:
    """The table of ``task`` at ``preset`` (None without records): ``rows`` / ``methods``
    select as ``leaderboard --rows/--methods`` (the notes on under-trained backbones are
    computed from the whole table); ``groups`` reuses a :func:`group_records` result."""
    records = as_records(records)
    if groups is None:
        groups = group_records(records, variants=variants)
    by_method = groups.get((task, preset))
    if not by_method:
        return None
    order = tuple(TASKS.get(task).metrics) if task in TASKS else ()
    mean, std, seeds = summary_frame(by_method, order)
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
                     notes=table_notes(task, preset, shown, mean),
                     remarks=backbones + nonfinite_notes(mean)
                     + failed_notes(records, {task}, preset))
