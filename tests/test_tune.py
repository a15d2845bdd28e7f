"""``pcgbench tune``: candidates fitted with one budget and scored on the val split only,
cached per (stage, task, candidate, seed), stage 2 = the best of stage 1 plus the
always-kept default, and the tables and verdict it writes."""

from __future__ import annotations

import json

import pytest

from pcgbench.cli import main
from pcgbench.errors import PcgError
from pcgbench.leaderboard.render import text_table
from pcgbench.stages import tune
from pcgbench.stages.tune import Stage, Study, grid
from pcgbench.task import Task


def _text(table: tune.StageTable) -> str:
    return table.caption + "\n" + text_table(table.headers, table.rows)


def _study() -> Study:
    return Study(
        name="tiny", method="pmosfm", description="a test study",
        candidates=grid({"e": {"e0": {"endpoint_share": 0.0}, "e1": {"endpoint_share": 1.0}},
                         "d": {"a": {"delta_range": (0.01, 0.1)},
                               "b": {"delta_range": (0.1, 0.1)}}}),
        tasks=("burgers",), stages=(Stage("1", 2, (0,)), Stage("2", 3, (0, 1), keep=1)),
        always=("e1|b",), eval_repeats=2, base=(("objective", "native"),))


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(tune.TUNE_STUDIES._objects, "tiny", _study)
    return _study()


def test_the_declared_study_is_the_issue_grid():
    s = tune.get_study("pmosfm_time_draws")
    assert len(s.candidates) == 18 and s.tasks == ("burgers", "darcy", "kolmogorov")
    assert "e0.25|uniform|U(0.01,0.1)" in s.always  # today's default always compared
    assert {c.config["endpoint_share"] for c in s.candidates} == {0.0, 0.25}
    assert [(st.iterations, st.seeds) for st in s.stages] == [(500, (0,)), (1000, (0, 1, 2))]
    with pytest.raises(PcgError, match="did you mean 'pmosfm_time_draws'"):
        tune.get_study("pmosfm_time_draw")


@pytest.mark.parametrize("name", sorted(tune.studies()))
def test_every_declared_candidate_is_a_valid_config_and_today_s_default_has_no_delta(name):
    """Each candidate's overrides resolve to a checked config of the study's method on
    each task (a typo fails here, not hours into a stage); a candidate without overrides
    is the default column itself (its fits are the runner's)."""
    from pcgbench.registry import TASKS
    from pcgbench.stages.plan import RunOptions, method_config

    study = tune.get_study(name)
    for task_name in study.tasks:
        task = TASKS.get(task_name)(preset="smoke", progress=False)
        _, default = method_config(task, RunOptions(task=task_name, method=study.method,
                                                    preset="smoke"))
        for cand in study.candidates:
            overrides = {**dict(study.base), **cand.config}
            _, config = method_config(task, RunOptions(
                task=task_name, method=study.method, preset="smoke", overrides=overrides))
            if not cand.config:
                assert config == default, (name, cand.name)


def test_a_job_scores_on_the_val_split_and_never_reads_test(dirs, tiny, monkeypatch):
    read: list[str] = []
    original = Task.dataset

    def spy(self, split):
        read.append(split)
        return original(self, split)

    monkeypatch.setattr(Task, "dataset", spy)
    out = tune.tune_job("tiny", "1", "burgers", "e0|a", 0, "smoke", None, None, "cpu")
    assert out["status"] == "ok"
    assert "test" not in read and "val" in read
    (path,) = (dirs / "results" / "tune" / "tiny").rglob("seed0.json")
    res = json.loads(path.read_text())
    assert res["split"] == "val" and res["overrides"]["iterations"] == 2
    assert res["ratios"]["wd"] == pytest.approx(res["metrics"]["wd"] / res["floor"]["wd"])
    assert res["headline"] == "structure" and set(res["sanity"]) == {
        "noise", "shuffle", "blur", "phase", "gaussian"}
    assert tune.result_problem(res) is None  # sealed
    # cached: the second call returns the stored result
    assert tune.tune_job("tiny", "1", "burgers", "e0|a", 0, "smoke", None, None,
                         "cpu")["status"] == "exists"


def test_repeat_rows_tiles_vector_and_field_shaped_conditions():
    import torch

    from pcgbench.fields import FieldData

    for cond in (torch.arange(6.0).view(3, 2), torch.arange(3 * 2 * 4 * 5.0).view(3, 2, 4, 5),
                 None):
        data = FieldData(torch.arange(3 * 4 * 5.0).view(3, 1, 4, 5), cond)
        out = tune.repeat_rows(data, 2)
        assert torch.equal(out.x[3:], data.x) and torch.equal(out.x[:3], data.x)
        if cond is None:
            assert out.cond is None
        else:
            assert out.cond.shape == (6, *cond.shape[1:])
            assert torch.equal(out.cond[3:], cond) and torch.equal(out.cond[:3], cond)


def test_a_job_scores_a_task_with_field_shaped_conditions(dirs, monkeypatch):
    """Dynamic stall's condition is a field ``[N, 6, t, s]`` (the budget study of issue 61
    failed on it when the val rows were repeated as vectors)."""
    def study() -> Study:
        return Study(name="tiny_ds", method="fm_ot", description="a test study",
                     candidates=grid({"r": {"recipe": {}}}), tasks=("dynamic_stall",),
                     stages=(Stage("1", 2, (0,)),), eval_repeats=2)

    monkeypatch.setitem(tune.TUNE_STUDIES._objects, "tiny_ds", study)
    out = tune.tune_job("tiny_ds", "1", "dynamic_stall", "recipe", 0, "smoke", None, None,
                        "cpu")
    assert out["status"] == "ok", out


def test_stages_keep_the_best_and_the_default_and_write_tables(dirs, tiny, capsys):
    with pytest.raises(PcgError, match="stage 1 is incomplete"):
        tune.stage_candidates(tiny, tune.study_dir(tiny, None), "smoke", 1)
    assert main(["tune", "tiny", "--preset", "smoke", "--executor", "debug", "--quiet"]) == 0
    root = tune.study_dir(tiny, None)
    first = tune.summarize(tiny, tiny.stages[0], *tune.load_results(
        tiny, root, "smoke", tiny.stages[0], tiny.candidates)).rows
    second = tune.stage_candidates(tiny, root, "smoke", 1)
    assert [c.name for c in second] == list(dict.fromkeys(
        [first[0]["candidate"], "e1|b"]))
    md = (root / "smoke" / "summary-stage2.md").read_text()
    # 3 updates at smoke learn nothing: a sanity row beats every candidate, so no choice
    assert "scored on the VAL split" in md and "no choice: a sanity row beats" in md
    assert (root / "smoke" / "summary-stage2.csv").read_text().startswith("candidate,score")
    out = capsys.readouterr().out
    assert "-- stage 2:" in out
    # everything present: a rerun has nothing to do
    assert main(["tune", "tiny", "--preset", "smoke", "--dry-run"]) == 0
    assert "0 job(s) to run" in capsys.readouterr().out


def test_a_failed_run_ranks_last_and_is_named(tiny):
    stage = tiny.stages[0]
    ok = {"task": "burgers", "seed": 0, "status": "ok",
          "ratios": {"structure": 2.0, "wd": 2.0, "energy": 2.0}}
    bad = {"task": "burgers", "seed": 0, "status": "diverged"}
    res = tune.summarize(tiny, stage, {"x": [bad], "y": [ok]}, 0)
    assert [r["candidate"] for r in res.rows] == ["y", "x"]
    assert res.rows[1]["failed"] == ["burgers/seed0: diverged"]
    assert "failed" in _text(tune.stage_table(tiny, res, "smoke"))


def _res(task: str, seed: int, headline: float, fakes: dict[str, float]) -> dict:
    return {"task": task, "seed": seed, "status": "ok", "sanity": fakes,
            "ratios": {"structure": headline, "wd": 1.0, "energy": 1.0}}


def test_a_task_whose_sanity_rows_stay_near_the_val_floor_is_left_out_of_the_score():
    study = Study(name="two", method="pmosfm", description="", tasks=("burgers", "darcy"),
                  candidates=grid({"x": {"x1": {"endpoint_share": 0.0},
                                         "x2": {"endpoint_share": 0.1}}}),
                  stages=(Stage("1", 2, (0, 1, 2)),))
    sees, blind = {"noise": 5.0, "phase": 2.0}, {"noise": 5.0, "phase": 1.3}
    found = {  # x1 better on burgers (which ranks), worse on darcy (where phase is 1.3x the floor)
        "x1": [_res("burgers", s, 1.5 + 0.01 * s, sees) for s in range(3)]
        + [_res("darcy", s, 9.0, blind) for s in range(3)],
        "x2": [_res("burgers", s, 1.8 + 0.01 * s, sees) for s in range(3)]
        + [_res("darcy", s, 1.1, blind) for s in range(3)],
    }
    res = tune.summarize(study, study.stages[0], found, 0)
    assert res.blind == {"darcy": "phase 1.3x"}
    assert [r["candidate"] for r in res.rows] == ["x1", "x2"]
    assert res.rows[0]["score"] == pytest.approx(1.51, rel=1e-2)  # burgers alone
    assert "Not in the score" in _text(tune.stage_table(study, res, "cpu"))
    text = tune.verdict(res)
    assert text.startswith("best: x1") and "beats it" not in text
    # the choice beaten by a sanity row on a task that ranks: named, not hidden
    found["x1"][0:3] = [_res("burgers", s, 2.5, sees) for s in range(3)]
    found["x2"][0:3] = [_res("burgers", s, 2.6, sees) for s in range(3)]
    text = tune.verdict(tune.summarize(study, study.stages[0], found, 0))
    assert text.startswith("no choice: a sanity row beats") and "phase scores 2x on burgers" in text


def test_a_damaged_edited_or_ill_typed_result_is_named_and_recomputed(dirs, tiny):
    args = ("tiny", "1", "burgers", "e0|a", 0, "smoke", None, None, "cpu")
    assert tune.tune_job(*args)["status"] == "ok"
    (path,) = (dirs / "results" / "tune" / "tiny").rglob("seed0.json")
    good = json.loads(path.read_text())
    edited = {**good, "ratios": {**good["ratios"], "structure": 1e-9}}
    for content in ('{"status": "ok", "ratios": {"wd": 2', json.dumps(edited),
                    json.dumps({**good, "ratios": {"wd": "low"}}), json.dumps([1, 2])):
        path.write_text(content)
        with pytest.warns(UserWarning, match="is not used"):
            assert tune.read_result(path) is None
        with pytest.warns(UserWarning, match="is recomputed"):
            assert tune.tune_job(*args)["status"] == "ok"  # recomputed, not "exists"
        assert tune.result_problem(json.loads(path.read_text())) is None


def test_colliding_candidate_names_are_refused_when_declared():
    from pcgbench.stages.tune import Candidate

    stage = (Stage("1", 2, (0,)),)
    with pytest.raises(PcgError, match="more than once"):
        Study("s", "pmosfm", "d", (Candidate("a", ()), Candidate("a", ())), ("burgers",), stage)
    with pytest.raises(PcgError, match="share one result file"):
        Study("s", "pmosfm", "d", (Candidate("a/b", ()), Candidate("a_b", ())), ("burgers",),
              stage)


def test_a_zero_val_floor_is_refused_naming_the_file(dirs, tiny, monkeypatch):
    from pcgbench.registry import TASKS

    real = tune.evaluate if hasattr(tune, "evaluate") else None
    assert real is None  # the floor goes through the evaluation stage's evaluate
    import pcgbench.stages.scoring as scoring

    orig = scoring.evaluate
    monkeypatch.setattr(scoring, "evaluate", lambda *a, **k: {**orig(*a, **k),
                                                             "structure": 0.0})
    task = TASKS.get("burgers")(preset="smoke", progress=False)
    with pytest.raises(PcgError, match="val floor of burgers has structure = 0.0"):
        tune.val_floor(task, 2, tune.study_dir(tiny, None))


def test_when_every_stage_one_job_fails_the_last_line_says_so(dirs, tiny, monkeypatch,
                                                               capsys):
    def broken(*args):
        raise RuntimeError("the solver exploded")

    monkeypatch.setattr(tune, "tune_job", broken)
    rc = main(["tune", "tiny", "--preset", "smoke", "--executor", "debug", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "Traceback" not in "\n".join(err)
    assert "stage 1: 4 of 4 job(s) failed" in err[-1] and "the solver exploded" in err[-1]
    assert "run it first" not in err[-1]


def test_tune_quiet_prints_no_executor_chatter(dirs, tiny, monkeypatch, capfd):
    def fine(*args):
        return {"status": "ok", "detail": "", "seconds": 0.0}

    monkeypatch.setattr(tune, "tune_job", fine)
    main(["tune", "tiny", "--preset", "smoke", "--executor", "debug", "--quiet",
          "--stage", "1"])
    err = capfd.readouterr().err
    assert "Logging is written both to" not in err


def test_a_code_fix_or_new_task_parameters_redo_a_stored_result(dirs, tiny, monkeypatch):
    """A study result carries its task parameters and code versions: a method version
    bump (e.g. PMosFM 5, C_c's floor) or new task parameters make it stale -- planned
    again and recomputed, never read as today's number -- and the val floor's cache
    follows the task's parameters."""
    import dataclasses

    from pcgbench.registry import METHODS, TASKS

    args = ("tiny", "1", "burgers", "e0|a", 0, "smoke", None, None, "cpu")
    assert tune.tune_job(*args)["status"] == "ok"
    (path,) = (dirs / "results" / "tune" / "tiny").rglob("seed0.json")
    res = json.loads(path.read_text())
    assert res["code_versions"]["method"] == METHODS.get("pmosfm").version_on("burgers")
    assert tune.result_current(res, "pmosfm")
    assert tune.tune_job(*args)["status"] == "exists"
    study = tune.get_study("tiny")
    jobs, present = tune.plan_stage(study, 0, "smoke", None, None, "cpu")
    assert present == 1 and len(jobs) == 3
    pm = METHODS.get("pmosfm")
    monkeypatch.setattr(pm, "version", pm.version + 1)
    monkeypatch.setattr(pm, "unchanged_on", {})
    assert not tune.result_current(res, "pmosfm")
    jobs, present = tune.plan_stage(study, 0, "smoke", None, None, "cpu")
    assert present == 0 and len(jobs) == 4
    assert tune.tune_job(*args)["status"] == "ok"  # recomputed
    assert tune.tune_job(*args)["status"] == "exists"
    # new task parameters: another val floor file, and the result is stale
    cls = TASKS.get("burgers")
    floors = set((dirs / "results" / "tune" / "tiny").rglob("floors/*.json"))
    original = cls.params_for.__func__

    def shifted(klass, preset):
        p = original(klass, preset)
        return dataclasses.replace(p, seed_val=p.seed_val + 1)

    monkeypatch.setattr(cls, "params_for", classmethod(shifted))
    assert not tune.result_current(json.loads(path.read_text()), "pmosfm")
    assert tune.tune_job(*args)["status"] == "ok"
    assert set((dirs / "results" / "tune" / "tiny").rglob("floors/*.json")) > floors


def test_a_diverged_result_carries_its_code_versions_and_is_not_refitted(dirs, tiny,
                                                                          monkeypatch):
    """A fit that diverged is a result of today's code too: stored with the method's
    version, it is current and not fitted again on the next call."""
    import pcgbench.stages.runner as runner
    from pcgbench.errors import TrainingDiverged
    from pcgbench.registry import METHODS

    def diverge(opts):
        raise TrainingDiverged("loss 1e12")

    monkeypatch.setattr(runner, "fit_only", diverge)
    args = ("tiny", "1", "burgers", "e0|a", 0, "smoke", None, None, "cpu")
    assert tune.tune_job(*args)["status"] == "diverged"
    (path,) = (dirs / "results" / "tune" / "tiny").rglob("seed0.json")
    res = json.loads(path.read_text())
    assert res["code_versions"]["method"] == METHODS.get("pmosfm").version_on("burgers")
    assert tune.result_current(res, "pmosfm")
    assert tune.tune_job(*args)["status"] == "exists"


def test_a_task_scored_per_condition_is_tuned_on_halves_of_its_val_split(dirs, monkeypatch):
    """The constrained-PDE suite groups MMSE/SMSE by condition and its val conditions are
    not among the training rows' (heat): a candidate samples half A's conditions and is
    scored against half B, over A's real rows against B -- the val split alone."""
    import torch

    from pcgbench.registry import TASKS

    task = TASKS.get("heat")(preset="smoke", progress=False)
    val = task.dataset("val")
    a, b = tune.val_halves(val)
    assert len(a) + len(b) == len(val) and abs(len(a) - len(b)) <= len(torch.unique(
        val.cond, dim=0))
    keys = {tuple(r) for r in val.cond.tolist()}
    assert {tuple(r) for r in a.cond.tolist()} == keys == {tuple(r) for r in b.cond.tolist()}
    assert not any(torch.equal(x, y) for x in a.x for y in b.x)  # no row on both sides
    assert tune.val_rows(task, 4).x.shape == a.x.shape  # one sample per row of A
    root = dirs / "study"
    floor = tune.val_floor(task, 4, root)
    assert floor[task.headline] > 0
    # real rows of A against B are the floor: A itself scores 1x it; the fakes are seen
    sanity = tune.val_sanity(task, 4, root)
    assert set(sanity) == set(tune_fakes()) and all(v > 1 for v in sanity.values())
    single = val.subset(torch.tensor([0]))
    with pytest.raises(PcgError, match="single row"):
        tune.val_halves(single)


def tune_fakes() -> tuple[str, ...]:
    from pcgbench.sanity import STRUCTURE_FAKES

    return STRUCTURE_FAKES


def test_a_study_resumes_from_its_published_stage_results(dirs, tmp_path, monkeypatch):
    """``published/tune/<study>/`` results are copied into the study's results dir where it
    has none (never over a local one), so a study measured elsewhere resumes here."""
    from pcgbench.leaderboard import published

    pub = tmp_path / "pub"
    src = pub / "tune" / "tiny" / "cpu" / "stage1" / "burgers" / "e0_a"
    src.mkdir(parents=True)
    (src / "seed0.json").write_text('{"from": "published"}')
    (src / "seed1.json").write_text('{"from": "published"}')
    monkeypatch.setattr(published, "published_root", lambda: pub)
    root = tmp_path / "results" / "tune" / "tiny"
    local = root / "cpu" / "stage1" / "burgers" / "e0_a" / "seed1.json"
    local.parent.mkdir(parents=True)
    local.write_text('{"from": "here"}')
    assert tune.seed_from_published(_study(), root) == 1
    assert json.loads((local.parent / "seed0.json").read_text()) == {"from": "published"}
    assert json.loads(local.read_text()) == {"from": "here"}
    assert tune.seed_from_published(_study(), root) == 0
    monkeypatch.setattr(published, "published_root", lambda: None)
    assert tune.seed_from_published(_study(), tmp_path / "other") == 0
