"""What recorded runs cost (pcgbench.results.cost): wall seconds, plus a reused checkpoint's
own fit, times the record's threads; runs without timings (the data floor, the sanity
rows) are not counted; the page and `sweep --dry-run` say what the published runs took."""

from __future__ import annotations

import pytest
from conftest import cli

from pcgbench.leaderboard import published as pub
from pcgbench.results.cost import TARGET_CORE_SECONDS, CostSummary, run_cost, summarize


def rec(method: str = "fm_ot", wall: float | None = 100.0, fit: float = 90.0,
        reused: bool = False, threads: int | None = 1, seed: int = 0) -> dict:
    r = {"task": "burgers", "method": method, "seed": seed,
         "training": {"fit_seconds": fit, "checkpoint_reused": reused},
         "threads": None if threads is None else {"threads": threads}}
    if wall is not None:
        r["wall_seconds"] = wall
    return r


def test_a_run_costs_its_wall_seconds_times_its_threads():
    c = run_cost(rec(wall=100.0, fit=90.0, threads=2))
    assert c is not None and c.seconds == 100.0 and c.core_seconds == 200.0
    # the fit is inside the wall time of a run that fitted: not counted twice
    assert run_cost(rec(wall=100.0, fit=90.0)).core_seconds == 100.0


def test_a_reused_checkpoint_adds_the_fit_it_was_made_by():
    c = run_cost(rec(wall=3.0, fit=1_000.0, reused=True))
    assert c is not None and c.core_seconds == 1_003.0


def test_records_without_timings_or_threads():
    assert run_cost(rec(method="data", wall=None)) is None
    c = run_cost(rec(threads=None, wall=50.0))
    assert c is not None and c.threads is None and c.core_seconds == 50.0  # counts as one


def test_the_summary_counts_runs_over_the_target_and_names_the_longest():
    rows = [rec(wall=TARGET_CORE_SECONDS + 1, seed=0), rec(wall=10.0, seed=1),
            rec(method="pmosfm", wall=TARGET_CORE_SECONDS - 1, threads=2, seed=2),
            rec(method="data", wall=None)]
    s = summarize(rows)["burgers"]
    assert s.runs == 3 and s.over_target == 2
    assert s.longest is not None and (s.longest.method, s.longest.seed) == ("pmosfm", 2)
    assert s.core_hours == pytest.approx((TARGET_CORE_SECONDS + 1 + 10
                                          + 2 * (TARGET_CORE_SECONDS - 1)) / 3600)
    empty = CostSummary.of([])
    assert empty.runs == 0 and empty.longest is None and empty.core_hours == 0


@pytest.fixture
def published_two_seeds(dirs, monkeypatch, capsys):
    a, p = dirs / "A", dirs / "P"
    rc, _, err = cli(capsys, ["run", "--task", "burgers", "--method", "fm_ot", "--preset",
                              "smoke", "--seed", "0", "1", "--quiet", "--results", str(a)])
    assert rc == 0, err
    rc, _, err = cli(capsys, ["publish", "--preset", "smoke", "--results", str(a),
                              "--to", str(p)])
    assert rc == 0, err
    monkeypatch.setenv(pub.ENV, str(p))
    monkeypatch.setenv("PCGBENCH_RESULTS", str(dirs / "B"))
    return p


def test_the_dry_run_and_the_page_say_what_the_published_runs_took(published_two_seeds,
                                                                     capsys):
    from pcgbench.leaderboard.published_page import cost_markdown

    records = pub.load_published()
    expected = sum(c.core_seconds for r in records if (c := run_cost(r)) is not None)
    assert expected > 0
    argv = ["sweep", "--dry-run", "--preset", "smoke", "--tasks", "burgers", "--methods",
            "fm_ot", "--seeds", "0", "1", "2"]
    rc, out, err = cli(capsys, [*argv, "--no-published"])
    assert rc == 0, err
    line = next(x for x in out.splitlines() if x.startswith("measured:"))
    assert "2 of the 3 run(s) have a published record" in line
    assert f"{expected / 3600:.3g} core-hours" in line
    rc, out, _ = cli(capsys, argv)  # published cells are not planned: nothing measured
    assert rc == 0 and "measured:" not in out
    page = cost_markdown(records, "smoke")
    row = next(x for x in page.splitlines() if x.startswith("| burgers |"))
    assert row.split("|")[2].strip() == "2"  # two fm_ot runs; the fakes carry no timings
