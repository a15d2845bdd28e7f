"""A leaderboard cell is one identity: a --set/--chart/--data-file/--batch-size/--tag run
is a named variant column, never averaged with (or replacing) the default; the run key
covers the device kind and the sampling batch size."""

from __future__ import annotations

import json

from conftest import read_records

from pcgbench.cli import main

RUN = ["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--quiet"]


def _table(capsys, *extra) -> str:
    capsys.readouterr()
    assert main(["leaderboard", "--task", "burgers", "--no-reported", *extra]) == 0
    return capsys.readouterr().out


def test_a_set_run_is_a_variant_column_not_the_default(dirs, capsys):
    assert main(RUN) == 0
    before = _table(capsys)
    assert main([*RUN, "--set", "iterations=5"]) == 0
    after = _table(capsys)
    assert after == before  # the default column is untouched
    assert "fm_ot[iterations=5]" not in after
    with_variants = _table(capsys, "--variants")
    assert "fm_ot (n=1)" in with_variants and "fm_ot[iterations=5] (n=1)" in with_variants
    recs = {r.get("variant"): r for r in read_records(dirs / "results") if r["method"] == "fm_ot"}
    assert set(recs) == {None, "iterations=5"}
    assert recs[None]["config_hash"] != recs["iterations=5"]["config_hash"]


def test_tag_names_a_variant_and_batch_size_is_a_new_record(dirs, capsys):
    assert main(RUN) == 0
    assert main([*RUN, "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "skipped" not in out  # another batch size is another record
    assert main([*RUN, "--tag", "mine"]) == 0
    recs = [r for r in read_records(dirs / "results") if r["method"] == "fm_ot"]
    assert sorted(r["sample_batch"] for r in recs) == [4, 64, 64]
    # tags have their own namespace; another sampling batch size is its own column
    assert {r.get("variant") for r in recs} == {None, "tag:mine", "sample_batch=4"}
    assert all(r["device_kind"] == "cpu" for r in recs)
    table = _table(capsys, "--variants")
    assert "fm_ot[tag:mine]" in table and "fm_ot[sample_batch=4]" in table


def test_show_config_prints_the_resolved_config(capsys):
    assert main(["show-config", "--task", "kolmogorov", "--method", "pcfm", "--preset",
                 "cpu"]) == 0
    out = capsys.readouterr().out
    assert "default column" in out and json.loads(out.split("\n", 1)[1])["steps"] == 200
    assert main(["show-config", "--task", "kolmogorov", "--method", "pcfm", "--preset",
                 "cpu", "--set", "steps=7"]) == 0
    assert "variant [steps=7]" in capsys.readouterr().out


def test_a_sampler_only_variant_reuses_the_fitted_checkpoint(dirs, capsys):
    assert main(RUN) == 0
    assert main([*RUN, "--set", "steps=5"]) == 0
    recs = {r.get("variant"): r for r in read_records(dirs / "results") if r["method"] == "fm_ot"}
    assert recs["steps=5"]["training"]["checkpoint_reused"] is True
    assert recs["steps=5"]["nfe"] == 5 and recs[None]["nfe"] == 20
    assert recs["steps=5"]["checkpoint"] == recs[None]["checkpoint"]
    # a training field is part of the fit's identity: another checkpoint
    assert main([*RUN, "--set", "lr=0.002"]) == 0
    recs = {r.get("variant"): r for r in read_records(dirs / "results") if r["method"] == "fm_ot"}
    assert recs["lr=0.002"]["checkpoint"] != recs[None]["checkpoint"]


def test_latex_compiles_shapes_and_csv_is_one_table(dirs, capsys):
    assert main(RUN) == 0
    assert main(["run", "--task", "heat", "--method", "ffm", "--preset", "smoke",
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["leaderboard", "--task", "burgers", "--format", "latex"]) == 0
    tex = capsys.readouterr().out
    assert r"fm\_ot" in tex and "fm_ot" not in tex.replace(r"fm\_ot", "")
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert r"\hline" not in tex
    assert main(["leaderboard", "--format", "csv", "--no-reported"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("task,preset,metric,method,label,mean")
    assert sum(line.startswith("task,") for line in lines) == 1  # one header
    assert {line.split(",")[0] for line in lines[1:]} == {"burgers", "heat"}


def test_a_code_version_bump_refits_and_retires_older_records(dirs, capsys, monkeypatch):
    """A fix that changes what a method fits (``Method.version``) is part of the
    checkpoint's identity: the next run refits instead of loading the stale checkpoint,
    and the older record leaves the leaderboard's means with a note saying why."""
    from pcgbench.registry import METHODS, TASKS

    # start from version 0 (whatever the registered versions are now)
    monkeypatch.setattr(METHODS.get("fm_ot"), "version", 0)
    monkeypatch.setattr(TASKS.get("burgers"), "version", 0)
    assert main(RUN) == 0
    first = [r for r in read_records(dirs / "results") if r["method"] == "fm_ot"]
    assert "code_versions" not in first[0]  # version 0: identities from before versioning
    monkeypatch.setattr(METHODS.get("fm_ot"), "version", 1)
    out = _table(capsys)
    assert "fm_ot (n=1)" not in out
    assert "stale: recorded before a code fix (version method 0 < 1): rerun" in out
    assert main(RUN) == 0
    recs = {r["config_hash"]: r for r in read_records(dirs / "results")
            if r["method"] == "fm_ot"}
    assert len(recs) == 2
    new = next(r for r in recs.values() if r.get("code_versions"))
    assert new["code_versions"] == {"method": 1}
    assert new["training"]["checkpoint_reused"] is False
    assert new["checkpoint"] != first[0]["checkpoint"]
    out = _table(capsys)
    assert "fm_ot (n=1)" in out and "stale" in out  # the new record; the old one noted


def test_code_versions_cover_task_data_and_the_pretrained_backbone(monkeypatch):
    import torch

    from pcgbench.data.cache import cache_path
    from pcgbench.leaderboard.tables import is_ok, stale_reason
    from pcgbench.registry import METHODS, TASKS
    from pcgbench.results.identity import run_key
    from pcgbench.stages.plan import build_method, build_task
    from pcgbench.stages.runner import RunOptions

    for cls in (METHODS.get("fm_ot"), METHODS.get("pcfm"), TASKS.get("burgers")):
        monkeypatch.setattr(cls, "version", 0)  # start from version 0
    opts = RunOptions(task="burgers", method="pcfm", preset="smoke")
    task = build_task(opts)
    method = build_method(task, opts, torch.device("cpu"))
    base = run_key(task, method, opts)
    cache = cache_path(task, "train")
    assert "code_versions" not in base
    monkeypatch.setattr(METHODS.get("fm_ot"), "version", 2)  # PCFM samples FM-OT's flow
    assert run_key(task, method, opts)["code_versions"] == {"pretrained:fm_ot": 2}
    monkeypatch.setattr(TASKS.get("burgers"), "version", 1)
    assert run_key(task, method, opts)["code_versions"] == {"task": 1, "pretrained:fm_ot": 2}
    assert cache_path(task, "train") == cache  # a chart fix keeps the data
    monkeypatch.setattr(TASKS.get("burgers"), "data_version", 1)
    assert cache_path(task, "train") != cache  # a data fix regenerates it
    record = {"task": "burgers", "method": "pcfm", "pretrained": "fm_ot",
              "code_versions": {"task": 1, "data": 1}}
    assert stale_reason(record) == ("recorded before a code fix (version "
                                    "pretrained:fm_ot 0 < 2): rerun")
    assert not is_ok(record)
    assert is_ok({**record, "code_versions": {"task": 1, "data": 1, "pretrained:fm_ot": 2}})
    assert is_ok({"task": "no_such_task", "method": "mine"})  # unregistered: unchecked


def test_a_bump_declared_unchanged_on_a_task_keeps_its_records_current():
    """``Method.unchanged_on``: PMosFM version 5 (C_c's floor per coordinate channel)
    changes only dynamic_stall among the registered tasks; a plug-in task takes the bump."""
    from pcgbench.registry import METHODS
    from pcgbench.results.identity import stale_versions

    pm = METHODS.get("pmosfm")
    assert pm.version == 5
    assert pm.version_on("dynamic_stall") == 5 and pm.version_on("my_plugin_task") == 5
    assert pm.version_on("burgers") == 4 and pm.version_on("kolmogorov") == 4
    assert stale_versions({"method": 4, "task": 1}, "burgers", "pmosfm") == []
    assert "method 4 < 5" in stale_versions({"method": 4}, "dynamic_stall", "pmosfm")
    tuned = METHODS.get("pmosfm_tuned")
    assert tuned.version_on("dynamic_stall") == 6 and tuned.version_on("darcy") == 5


def test_every_added_at_default_field_is_its_config_s_default():
    """``MethodConfig.added_at_default`` names real fields at their declared defaults (a
    record without the field is the run with it at that value)."""
    import dataclasses

    from pcgbench.registry import METHODS

    for name in METHODS.names():
        cfg_cls = METHODS.get(name).Config
        defaults = {f.name: f.default for f in dataclasses.fields(cfg_cls)}
        for k, v in cfg_cls.added_at_default.items():
            assert k in defaults and defaults[k] == v, (name, k)


def test_a_record_from_before_a_config_field_is_found_not_rerun(dirs, tmp_path):
    """PBFM's ``residual`` came after its published cells: sweep, run and reproduce find
    the cell under the name it had (``legacy_key``), so nothing is re-run; a run with
    the field off has no older name."""
    import shutil
    from pathlib import Path

    from pcgbench.results.identity import legacy_key, legacy_keys
    from pcgbench.results.layout import identity_name
    from pcgbench.stages.plan import RunOptions, record_paths, resolve
    from pcgbench.stages.runner import run

    key = {"config": {"a": 1, "residual": True}, "seed": 0}

    class Cfg:
        added_at_default = {"residual": True}

    assert legacy_key(key, Cfg()) == {"config": {"a": 1}, "seed": 0}
    assert legacy_key({**key, "config": {"a": 1, "residual": False}}, Cfg()) is None

    class Two:  # fields in the order they came: residual, then cond_input
        added_at_default = {"residual": True, "cond_input": "embed"}

    both = {"config": {"a": 1, "residual": True, "cond_input": "embed"}, "seed": 0}
    # written before cond_input (with residual), and before both
    assert legacy_keys(both, Two()) == [{"config": {"a": 1, "residual": True}, "seed": 0},
                                        {"config": {"a": 1}, "seed": 0}]
    # the newest off its old value: no older name; an older one off: only the newest left out
    assert legacy_keys({**both, "config": {**both["config"], "cond_input": "slice"}},
                       Two()) == []
    assert legacy_keys({**both, "config": {**both["config"], "residual": False}}, Two()) == [
        {"config": {"a": 1, "residual": False}, "seed": 0}]
    # the published Burgers PBFM cells (recorded before the field) are found by name
    opts = RunOptions(task="burgers", method="pbfm", seed=0, preset="cpu",
                      results_dir=str(tmp_path / "r"), data_dir=str(tmp_path / "d"))
    names = {identity_name(p) for p in record_paths(opts)}
    shipped = Path(__file__).resolve().parents[1] / "published" / "records"
    assert len(names) == 3 and sum((shipped / n).exists() for n in names) == 1
    off = RunOptions(task="burgers", method="pbfm", seed=0, preset="cpu",
                     overrides={"residual": False}, results_dir=str(tmp_path / "r"),
                     data_dir=str(tmp_path / "d"))
    assert len(record_paths(off)) == 2  # its name from before cond_input only
    # a run finds a record stored under the older name and does not run again
    smoke = RunOptions(task="burgers", method="pbfm", seed=0, preset="smoke",
                       progress=False, overrides={"iterations": 2})
    first, path, reused = run(smoke)
    assert not reused
    *_, old = resolve(smoke, planning=True).legacy_paths  # the oldest name
    shutil.move(path, old)
    again, where, reused = run(smoke)
    assert reused and where == old and again.get("seed") == first.get("seed")
    # a fit saved under the older name is loaded, not refitted (the record gone)
    from pcgbench.stages.fit import fit

    plan = resolve(smoke, planning=True)
    ckpt_now = Path(str(first["checkpoint"]))
    old.unlink()
    from pcgbench.results.identity import fit_key
    from pcgbench.results.layout import checkpoint_path

    oldest_key = legacy_keys(plan.key, plan.method.config)[-1]
    older = checkpoint_path(plan.root, fit_key(oldest_key, plan.method.config))
    shutil.move(ckpt_now, older)
    replanned = resolve(smoke)
    assert replanned.checkpoint == older
    assert fit(replanned).reused


def test_a_split_is_generated_at_one_thread_whatever_the_process_runs_with(tmp_path):
    """Data identity is the task's parameters and solver, so the bytes must not depend on
    the thread count (torch reductions and BLAS kernels split work by it: Kolmogorov's
    val split differed at 2 threads).  Generation runs at ``GENERATION_THREADS`` for torch
    and the BLAS pools, and the caller's count comes back afterwards."""
    import torch
    from threadpoolctl import threadpool_info

    from pcgbench.data.cache import GENERATION_THREADS, load_or_generate
    from pcgbench.fields import FieldData, TaskSpec

    seen: list[tuple[int, list[int]]] = []

    class Probe:
        name, preset, data_dir, data_version, generation_allowed = (
            "probe", "smoke", tmp_path, None, True)
        spec = TaskSpec(name="probe", field_shape=(1, 4), channel_names=("u",))

        def params_dict(self):
            return {"n": 4}

        def generate(self, split):
            seen.append((torch.get_num_threads(),
                         [p["num_threads"] for p in threadpool_info()]))
            return FieldData(torch.ones(3, 1, 4), None)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        load_or_generate(Probe(), "train")
        assert torch.get_num_threads() == 2  # restored
    finally:
        torch.set_num_threads(before)
    (torch_threads, pools), = seen
    assert torch_threads == GENERATION_THREADS == 1
    assert all(n == 1 for n in pools)
