"""What recorded runs cost, from the records' own timings (issue 61): measured, not priced.

``pcgbench sweep --dry-run`` prices a plan from a short probe extrapolated to the full
budget (:mod:`pcgbench.paper.cost`); this module reads what runs *took*: a record's
``wall_seconds`` (fit, sampling, evaluation of that run), plus its ``training.fit_seconds``
where the run reused a checkpoint fitted earlier for the same cell (a rerun, or a budget
study's fit), times the record's torch threads.  A method that samples a shared backbone
(CoCoGen, D-Flow, ECI, PCFM, DiffusionPDE) has no fit of its own: its cost is its sampling,
the backbone's record carries the fit.  Seconds are the machine's as it was (records keep
its load), so a sum is what these runs cost there, not a property of the code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: the issue-61 target: one `cpu` run within 10 minutes on one core
TARGET_CORE_SECONDS = 600.0


@dataclass(frozen=True)
class RunCost:
    """One record's cost: ``seconds`` of wall time at ``threads`` torch threads (None:
    not recorded)."""

    task: str
    method: str
    seed: int | None
    seconds: float
    threads: int | None

    @property
    def core_seconds(self) -> float:
        """seconds x threads (an unknown thread count counts as one)."""
        return self.seconds * (self.threads or 1)


def run_cost(record: Mapping[str, Any]) -> RunCost | None:
    """The cost of one run record; None for a record without timings (the data floor and
    the sanity rows: evaluation only)."""
    wall = record.get("wall_seconds")
    if not isinstance(wall, (int, float)):
        return None
    training = record.get("training") or {}
    fit = training.get("fit_seconds") if training.get("checkpoint_reused") else 0.0
    threads = record.get("threads")
    n = threads.get("threads") if isinstance(threads, Mapping) else None
    seed = record.get("seed")
    return RunCost(str(record.get("task")), str(record.get("method")),
                   seed if isinstance(seed, int) else None,
                   float(wall) + float(fit or 0.0), n if isinstance(n, int) else None)


@dataclass(frozen=True)
class CostSummary:
    """The runs of one group (a task): how many, their core-hours, the longest, and how
    many exceed :data:`TARGET_CORE_SECONDS`."""

    runs: int
    core_hours: float
    longest: RunCost | None
    over_target: int

    @classmethod
    def of(cls, costs: Iterable[RunCost]) -> CostSummary:
        costs = list(costs)
        longest = max(costs, key=lambda c: c.core_seconds, default=None)
        return cls(len(costs), sum(c.core_seconds for c in costs) / 3600.0, longest,
                   sum(c.core_seconds > TARGET_CORE_SECONDS for c in costs))


def summarize(records: Iterable[Mapping[str, Any]]) -> dict[str, CostSummary]:
    """Per task, the :class:`CostSummary` of every record with timings."""
    by_task: dict[str, list[RunCost]] = {}
    for r in records:
        c = run_cost(r)
        if c is not None:
            by_task.setdefault(c.task, []).append(c)
    return {t: CostSummary.of(cs) for t, cs in by_task.items()}
