"""Renderers of a :class:`~pcgbench.leaderboard.model.TaskTable`: markdown (the table, its
notes, then its remarks), LaTeX (everything inside the float) and long CSV (one frame for
many tables, with task and preset columns)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from pcgbench.leaderboard.model import TaskTable
from pcgbench.leaderboard.tables import (
    annotate_frame,
    format_table,
    long_frame,
    md_text,
    render_notes,
    to_csv,
)
from pcgbench.log import printable


def table_markdown(table: TaskTable) -> str:
    """A heading, the table with its notes, then one paragraph per remark (names and
    notes escaped as the table's cells: :func:`~pcgbench.leaderboard.tables.md_text`)."""
    body = (format_table(table.mean, table.std, table.seeds, "md", table.reported)
            + render_notes(table.notes, "md"))
    return "\n".join([f"\n## {md_text(table.task)} (preset {md_text(table.preset)})\n", body,
                      *(f"\n{md_text(line)}" for line in table.remarks)])


def table_latex(table: TaskTable) -> str:
    """One table float; every note and remark inside it."""
    return format_table(
        table.mean, table.std, table.seeds, "latex", table.reported,
        caption=f"{table.task} (preset {table.preset}): mean ± std over n seeds; best in bold",
        notes=table.notes + table.remarks)


def table_csv(tables: Sequence[TaskTable]) -> str:
    """Every table as long rows (metric, method, value, ...) with task and preset columns
    (paper rows carry no preset)."""
    frames = []
    for t in tables:
        frame = annotate_frame(long_frame(t.mean, t.std, t.seeds, t.reported), t.task,
                               t.preset, t.mean)
        frame.insert(0, "preset", [t.preset if src == "measured" else ""
                                   for src in frame["source"]])
        frame.insert(0, "task", t.task)
        for col in ("method", "label"):  # no control characters
            frame[col] = frame[col].map(printable)
        frames.append(frame)
    return to_csv(pd.concat(frames, ignore_index=True)) if frames else ""
