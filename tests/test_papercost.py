"""The paper-scale cost table (pcgbench.paper.cost): the paper's matrix, merging rows, and
the sweep's dry-run price."""

from __future__ import annotations

import math

from pcgbench.cli import main
from pcgbench.paper import cost as papercost
from pcgbench.paper.cost import CostRow


def _row(task, method, kind="cuda", hours=2.0, preset="paper", updates=10, s_sample=0.0,
         n_test=5):
    # s/update consistent with the row's fit hours at ``updates`` (no sampling time)
    return CostRow(task, method, preset, kind, f"{kind} box", "2026-01-01",
                   hours * 3600 / updates, updates, hours, s_sample, n_test, 0.0, hours,
                   "probe", "cmd")


def test_the_paper_matrix_names_registered_supported_methods():
    m = papercost.paper_matrix(["burgers", "heat", "kf_generation"])
    assert {"fm_ot", "pmosfm", "pbfm", "pcfm"} <= set(m["burgers"])
    assert "ffm" in m["heat"] and "pdm" not in m["heat"]  # PDM is not registered
    assert m["kf_generation"]  # no transcribed table: the main table's methods


def test_the_paper_matrix_leaves_out_columns_the_paper_leaves_empty():
    # the suite's Navier-Stokes row: D-Flow "pending", PBFM "--" (omitted in the paper)
    m = papercost.paper_matrix(["navier_stokes", "reaction_diffusion_ic"])
    assert "dflow" not in m["navier_stokes"] and "pbfm" not in m["navier_stokes"]
    assert {"ffm", "eci", "pcfm", "diffusionpde", "pmosfm"} <= set(m["navier_stokes"])
    assert {"dflow", "pbfm"} <= set(m["reaction_diffusion_ic"])


def test_merge_replaces_a_measurement_and_the_csv_round_trips(tmp_path):
    old = [_row("burgers", "fm_ot", hours=1.0), _row("burgers", "fm_ot", "cpu", 9.0)]
    new = [_row("burgers", "fm_ot", hours=3.0)]
    merged = papercost.merge(old, new)
    assert sorted((r.device_kind, r.total_hours) for r in merged) == [("cpu", 9.0),
                                                                     ("cuda", 3.0)]
    path = tmp_path / "t.csv"
    path.write_text(papercost.to_csv(merged))
    back = papercost.read_table(path)
    assert [(r.task, r.method, r.device_kind, r.total_hours) for r in back] == \
        [(r.task, r.method, r.device_kind, r.total_hours) for r in merged]
    assert "GPU-hours" in papercost.markdown(back)


def test_estimate_prefers_gpu_rows_and_names_what_it_cannot_price():
    rows = [_row("burgers", "data", hours=0.5), _row("burgers", "fm_ot"),
            _row("burgers", "fm_ot", "cpu", 50.0)]
    est = papercost.estimate([("data", "burgers", None), ("backbone", "burgers", "fm_ot"),
                              ("method", "burgers", "pcfm")], "paper", rows)
    assert est.device_kind == "cuda" and math.isclose(est.hours, 2.5)
    assert est.priced == 2 and est.unpriced == ["burgers/pcfm"]
    assert papercost.estimate([], "cpu", rows) is None
    # a probe that passed its time limit has a row of NaN hours: named, not summed
    rows.append(_row("burgers", "dflow", hours=math.nan))
    est = papercost.estimate([("method", "burgers", "dflow"), ("backbone", "burgers",
                                                             "fm_ot")], "paper", rows)
    assert math.isclose(est.hours, 2.0) and est.unpriced == ["burgers/dflow"]


def test_estimate_scales_a_job_s_fit_to_its_own_budget():
    """A job that trains half the row's updates (a task's own cpu budget) costs half the
    fit; a job without a budget (None) costs the row's total."""
    rows = [_row("darcy", "fm_ot", "cpu", 2.0, preset="cpu", updates=3000)]
    half = papercost.estimate([("backbone", "darcy", "fm_ot", 1500)], "cpu", rows)
    full = papercost.estimate([("backbone", "darcy", "fm_ot", None)], "cpu", rows)
    assert math.isclose(half.hours, 1.0) and math.isclose(full.hours, 2.0)


def test_the_price_counts_a_default_run_s_extra_timed_batches():
    """measure's default bound, planned: a one-batch test split adds one timed batch when
    it is slow (HIT D-Flow: 64 rows at 11.8 s), three when they fit the 60 s floor; a
    split of four batches already has its three timed production batches."""
    from pcgbench.stages.measure import planned_timing_seconds

    assert math.isclose(planned_timing_seconds(64, 64, 11.8), 64 * 11.8)
    assert math.isclose(planned_timing_seconds(64, 64, 0.001), 3 * 64 * 0.001)
    assert math.isclose(planned_timing_seconds(128, 64, 0.01), 2 * 64 * 0.01)
    assert planned_timing_seconds(256, 64, 5.0) == 0.0
    rows = [_row("hit_reconstruction", "dflow", "cpu", 0.0, preset="cpu", s_sample=11.8,
                 n_test=64)]
    est = papercost.estimate([("method", "hit_reconstruction", "dflow")], "cpu", rows)
    assert math.isclose(est.hours, 64 * 11.8 / 3600)


def test_sweep_dry_run_prints_the_price(dirs, capsys, monkeypatch, tmp_path):
    table = tmp_path / "cost.csv"
    table.write_text(papercost.to_csv([_row("burgers", "data", hours=0.5),
                                       _row("burgers", "fm_ot", hours=4.0,
                                            updates=20000)]))
    monkeypatch.setattr(papercost, "table_path", lambda: table)
    assert main(["sweep", "--tasks", "burgers", "--methods", "fm_ot", "--preset", "paper",
                 "--seeds", "0", "1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "estimated cost of the 3 priced job(s): 8.5 GPU-hours" in out


def test_the_probe_prices_the_rows_a_run_samples(tmp_path):
    """benchmarks/paper_cost.py's test-row count equals the test split's length, also where
    ``n_test`` counts conditions sampled once per realization (dynamic stall) or test
    frames sampled ``ensemble`` times (HIT reconstruction): every registered task."""
    import importlib.util
    from pathlib import Path

    from pcgbench.registry import TASKS

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "paper_cost.py"
    spec = importlib.util.spec_from_file_location("paper_cost_probe", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    failed = {}
    for name in sorted(TASKS.names()):
        cls = TASKS.get(name)
        task = cls("smoke", data_dir=tmp_path, progress=False)
        probe = cls("smoke", data_dir=tmp_path / "probe", progress=False,
                    params=task.generation_probe())
        rows, how = mod.test_rows(name, task, probe.params,
                                  probe_test=len(probe.dataset("test")))
        if rows != len(task.dataset("test")):
            failed[name] = (rows, len(task.dataset("test")), how)
    assert not failed
