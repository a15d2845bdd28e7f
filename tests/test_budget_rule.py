"""The 2x-budget rule (pcgbench.stages.budget_rule): the smallest budget whose seeds'
mean lies within one seed std of the 2x-larger budget's mean, per task, on val."""

from __future__ import annotations

import pytest

from pcgbench.cli import main
from pcgbench.errors import PcgError
from pcgbench.stages import budget_rule, tune
from pcgbench.stages.budget_rule import Cell, choose, within_spread
from pcgbench.stages.tune import Candidate, Stage, Study


def _cell(n: int, *scores: float, missing: int = 0) -> Cell:
    return Cell(n, tuple(scores), missing)


def test_within_spread_is_one_seed_std_of_the_larger_cell():
    big = _cell(200, 2.0, 3.0, 4.0)  # mean 3, std 1
    assert within_spread(_cell(100, 3.9, 4.0, 4.1), big)   # |4 - 3| = 1 <= 1
    assert not within_spread(_cell(100, 4.1, 4.1, 4.1), big)
    assert not within_spread(_cell(100, 3.0), _cell(200, 3.0))  # one seed: no spread


def test_the_smallest_passing_budget_is_chosen():
    cells = [_cell(400, 2.0, 2.1, 2.2), _cell(100, 5.0, 5.0, 5.1),
             _cell(200, 2.2, 2.0, 2.4)]  # unordered on purpose
    out = choose("burgers", cells)
    assert out.chosen == 200 and [c.iterations for c in out.cells] == [100, 200, 400]
    assert "200: 2.2 lies within 2.1 ± 0.1 (400)" in out.why


def test_a_task_still_moving_gets_no_choice_and_says_to_measure_more():
    out = choose("burgers", [_cell(100, 5.0, 5.1, 5.2), _cell(200, 3.0, 3.1, 3.2)])
    assert out.chosen is None and "measure a larger budget" in out.why


def test_an_incomplete_or_blind_task_gets_no_choice():
    assert "incomplete" in choose("b", [_cell(100, 2.0, 2.0, missing=1),
                                        _cell(200, 2.0, 2.1, 2.2)]).why
    out = choose("b", [_cell(100, 2.0, 2.0, 2.0), _cell(200, 2.0, 2.1, 2.2)], "phase 1.2x")
    assert out.chosen is None and "cannot rank on val" in out.why


def _tiny(doubling: bool = True) -> Study:
    return Study(name="tiny_budget", method="fm_ot", description="test",
                 candidates=(Candidate("preset recipe", ()),), tasks=("burgers",),
                 stages=(Stage("2", 2, (0, 1, 2)), Stage("4", 4 if doubling else 5, (0, 1, 2))),
                 eval_repeats=1, budget_rule=True)


def test_a_budget_study_must_double_on_the_same_seeds(dirs):
    with pytest.raises(PcgError, match="must double"):
        budget_rule.apply_rule(_tiny(doubling=False), "smoke", None)
    plain = Study(name="x", method="fm_ot", description="", candidates=(), tasks=(),
                  stages=())
    with pytest.raises(PcgError, match="not a budget study"):
        budget_rule.apply_rule(plain, "smoke", None)


@pytest.mark.parametrize("name", sorted(n for n in tune.studies()
                                        if tune.get_study(n).budget_rule))
def test_declared_budget_studies_double_from_the_preset_recipe(name):
    study = tune.get_study(name)
    assert [c.config for c in study.candidates] == [{}]  # the preset recipe itself
    budgets = sorted(s.iterations for s in study.stages)
    assert 3000 in budgets and all(b == 2 * a for a, b in zip(budgets, budgets[1:],
                                                                    strict=False))
    assert {s.seeds for s in study.stages} == {(0, 1, 2)}


def test_tune_prints_and_writes_the_rule_table(dirs, monkeypatch, capsys):
    monkeypatch.setitem(tune.TUNE_STUDIES._objects, "tiny_budget", _tiny)
    assert main(["tune", "tiny_budget", "--preset", "smoke", "--executor", "debug",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "Budget rule, study tiny_budget" in out and "2 updates" in out
    md = (tune.study_dir(_tiny(), None) / "smoke" / "budget-rule.md").read_text()
    assert "| burgers" in md and "structure" in md
    rows = budget_rule.apply_rule(_tiny(), "smoke", None)
    assert len(rows) == 1 and all(len(c.scores) == 3 for c in rows[0].cells)


def test_tables_of_trained_methods_say_their_budget_is_budget_limited():
    from pcgbench.leaderboard.tables import table_notes

    lines = table_notes("burgers", "cpu", {"fm_ot": [], "data": []})
    assert any(x.startswith("training budget: 3,000 updates") for x in lines)
    assert not any(x.startswith("training budget:")
                   for x in table_notes("burgers", "cpu", {"data": []}))
    assert not any(x.startswith("training budget:")
                   for x in table_notes("burgers", "smoke", {"fm_ot": []}))
