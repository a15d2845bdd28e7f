"""Turning stored run records into paper-style tables."""

from pcgbench.leaderboard.render import format_table
from pcgbench.leaderboard.tables import (
    backbone_notes,
    failed_notes,
    group_records,
    long_frame,
    select,
    summary_frame,
)
from pcgbench.paper.reported import reported_table
from pcgbench.results.store import load_records

__all__ = ["backbone_notes", "failed_notes", "format_table", "group_records", "load_records",
           "long_frame", "reported_table", "select", "summary_frame"]
