"""The 2x-budget rule: a task's training budget chosen by evidence (issue 61).

A *budget study* is a :class:`~pcgbench.stages.tune.Study` with ``budget_rule=True``: one
candidate (the preset recipe), one stage per budget, each budget twice the one before, on
the same seeds.  Every run is scored like any study run (the task's headline metric on the
**val** split over the val floor).  Per task, the rule picks the smallest budget ``B``
whose cell (mean over seeds) lies within the spread of the ``2B`` cell -- within one
sample standard deviation over seeds of the ``2B`` cell's mean:

    |mean_B - mean_2B| <= std_2B

A task where no measured budget passes gets no choice ("still moving at the largest pair
measured: measure a larger one"); a task where the headline cannot rank on val
(:func:`pcgbench.stages.tune.blind_tasks`) gets none either.  The budget a task takes is
the largest of its studied methods' choices (one budget for every method on the task:
``Task.recipe_overrides``), which docs/running.md "Training budgets at `cpu`" records.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from pcgbench.errors import PcgError
from pcgbench.stages.tune import (
    StageTable,
    Study,
    blind_tasks,
    headline_of,
    load_results,
    run_score,
    stage_candidates,
    study_dir,
)


@dataclass(frozen=True)
class Cell:
    """One budget's headline ratios over the val floor, one per seed (None: missing)."""

    iterations: int
    scores: tuple[float, ...]
    missing: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores) if self.scores else math.nan

    @property
    def std(self) -> float:
        return statistics.stdev(self.scores) if len(self.scores) > 1 else math.nan


@dataclass(frozen=True)
class TaskBudget:
    task: str
    cells: tuple[Cell, ...]
    #: the smallest budget that passes, or None
    chosen: int | None
    why: str


def within_spread(small: Cell, large: Cell) -> bool:
    """``small``'s mean lies within one seed standard deviation of ``large``'s mean."""
    return (math.isfinite(small.mean) and math.isfinite(large.std)
            and abs(small.mean - large.mean) <= large.std)


def choose(task: str, cells: list[Cell], blind: str | None = None) -> TaskBudget:
    """The rule on one task's cells (ascending budgets, each twice the previous)."""
    cells = sorted(cells, key=lambda c: c.iterations)
    if blind:
        return TaskBudget(task, tuple(cells), None,
                          f"the headline cannot rank on val here ({blind}): no choice")
    gaps = [c for c in cells if c.missing or len(c.scores) < 3]
    if gaps:
        return TaskBudget(task, tuple(cells), None,
                          "incomplete: " + ", ".join(f"{c.iterations} ({len(c.scores)} seeds"
                                                     f", {c.missing} missing)" for c in gaps))
    for small, large in zip(cells, cells[1:], strict=False):
        if within_spread(small, large):
            return TaskBudget(task, tuple(cells), small.iterations,
                              f"{small.iterations}: {small.mean:.3g} lies within "
                              f"{large.mean:.3g} ± {large.std:.2g} ({large.iterations})")
    last = cells[-2:]
    detail = (f" ({last[0].iterations}: {last[0].mean:.3g}; {last[1].iterations}: "
              f"{last[1].mean:.3g} ± {last[1].std:.2g})" if len(last) == 2 else "")
    return TaskBudget(task, tuple(cells), None,
                      "still moving at the largest pair measured" + detail
                      + ": measure a larger budget")


def apply_rule(study: Study, preset: str, results_dir: str | None) -> list[TaskBudget]:
    """The rule on every task of a budget study, from its stages' results."""
    if not study.budget_rule:
        raise PcgError(f"study {study.name!r} is not a budget study (budget_rule)")
    stages = sorted(study.stages, key=lambda s: s.iterations)
    for a, b in zip(stages, stages[1:], strict=False):
        if b.iterations != 2 * a.iterations or b.seeds != a.seeds:
            raise PcgError(f"study {study.name!r}: stage {b.name} must double stage "
                           f"{a.name}'s budget on the same seeds")
    root = study_dir(study, results_dir)
    per_task: dict[str, list[Cell]] = {t: [] for t in study.tasks}
    blind: dict[str, str] = {}
    for stage in stages:
        index = study.stages.index(stage)
        found, _ = load_results(study, root, preset, stage,
                                stage_candidates(study, root, preset, index))
        blind.update(blind_tasks(study, found))
        results = [r for rs in found.values() for r in rs]
        for task in study.tasks:
            mine = [r for r in results if r.get("task") == task]
            scores = tuple(s for s in (run_score(r) for r in mine) if math.isfinite(s))
            per_task[task].append(Cell(stage.iterations, scores,
                                       len(stage.seeds) - len(scores)))
    return [choose(t, per_task[t], blind.get(t)) for t in study.tasks]


def rule_table(study: Study, preset: str, rows: list[TaskBudget]) -> StageTable:
    """The rule's table: per task each budget's headline over the val floor (mean ± std
    over seeds) and the choice, with what the data are."""
    budgets = sorted({c.iterations for r in rows for c in r.cells})
    head = (("task", "headline") + tuple(f"{b} updates" for b in budgets)
            + ("chosen", "why"))

    def cell(c: Cell | None) -> str:
        if c is None or not c.scores:
            return "missing"
        s = f"{c.mean:.3g}" + (f" ± {c.std:.2g}" if math.isfinite(c.std) else "")
        return s + (f" ({c.missing} missing)" if c.missing else "")

    body = tuple((r.task, headline_of(r.task))
                 + tuple(cell(next((c for c in r.cells if c.iterations == b), None))
                         for b in budgets)
                 + ("-" if r.chosen is None else str(r.chosen), r.why) for r in rows)
    seeds = ", ".join(map(str, study.stages[0].seeds))
    caption = (f"Budget rule, study {study.name} ({study.method}, preset {preset}, seeds "
               f"{seeds}): each task's headline metric on the VAL split over the val floor "
               "(mean ± std over seeds); chosen = the smallest budget whose mean lies "
               "within one seed std of the 2x-larger budget's mean.")
    return StageTable(caption, head, body)
