"""The ``gpu`` preset: the ``cpu`` data and network with a longer training budget, and
the default of ``run``/``sweep`` where the device resolves to CUDA."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
import torch

from pcgbench.methods._flow import PRESET_RECIPE
from pcgbench.presets import PRESETS, data_preset, default_preset
from pcgbench.registry import METHODS, TASKS

BUDGET_FIELDS = {"iterations", "batch_size", "warmup"}


def test_gpu_is_a_preset_with_the_cpu_data():
    assert "gpu" in PRESETS and data_preset("gpu") == "cpu"
    assert all(data_preset(p) == p for p in ("smoke", "cpu", "paper"))
    gpu, cpu = PRESET_RECIPE["gpu"], PRESET_RECIPE["cpu"]
    assert gpu.iterations * gpu.batch_size > 5 * cpu.iterations * cpu.batch_size


@pytest.mark.parametrize("name", TASKS.names())
def test_every_task_at_gpu_has_the_cpu_parameters_and_cache_file(name, tmp_path):
    from pcgbench.data.cache import cache_path
    from pcgbench.task import PRESET_REGIME

    cls = TASKS.get(name)
    gpu = cls(preset="gpu", progress=False, data_dir=tmp_path)
    cpu = cls(preset="cpu", progress=False, data_dir=tmp_path)
    assert gpu.params == cpu.params and gpu.spec == cpu.spec
    assert cache_path(gpu, "train") == cache_path(cpu, "train")
    line = cls.provenance("gpu")
    assert line.endswith(PRESET_REGIME["gpu"])


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_at_gpu_is_its_cpu_config_trained_longer(name):
    cls = METHODS.get(name)
    gpu = dataclasses.asdict(cls.Config.for_preset("gpu"))
    cpu = dataclasses.asdict(cls.Config.for_preset("cpu"))
    differ = {k for k in gpu if gpu[k] != cpu[k]}
    assert differ <= BUDGET_FIELDS, differ
    if "iterations" in differ:
        assert gpu["iterations"] > cpu["iterations"]


def test_run_without_preset_picks_gpu_where_cuda_resolves(monkeypatch, capsys):
    from pcgbench.cli._common import default_preset as _default_preset

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_preset("auto")[0] == "cpu"
    args = argparse.Namespace(preset=None, device="auto")
    _default_preset(args)
    assert args.preset == "cpu" and capsys.readouterr().out == ""

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_preset("auto") == ("gpu", "CUDA present and no --preset given")
    assert default_preset("cpu")[0] == "cpu"
    args = argparse.Namespace(preset=None, device="auto")
    _default_preset(args)
    assert args.preset == "gpu"
    assert capsys.readouterr().out.startswith("preset gpu (CUDA present")
    given = argparse.Namespace(preset="cpu", device="auto")
    _default_preset(given)
    assert given.preset == "cpu"


def test_a_task_recipe_override_reaches_every_recipe_trained_method_only():
    """kf_generation's lr (Task.recipe_overrides) reaches the methods trained from
    scratch with the preset recipe -- in a run and in the default column alike -- and
    no other method; --set wins."""
    from pcgbench.stages.plan import build_method, default_config
    from pcgbench.stages.runner import RunOptions

    task = TASKS.get("kf_generation")(preset="cpu", progress=False)
    lr = task.recipe_overrides["cpu"]["lr"]
    for name in METHODS.names():
        cls = METHODS.get(name)
        if cls.unsupported_reason(task):
            continue
        method = build_method(task, RunOptions(task="kf_generation", method=name,
                                               preset="cpu"), torch.device("cpu"))
        assert method.config == default_config(task, cls, "cpu")
        cfg_lr = getattr(method.config, "lr", None)
        if cls.preset_recipe:
            assert cfg_lr == lr, name
        else:
            assert cfg_lr == getattr(cls.Config.for_preset("cpu"), "lr", None), name
    forced = build_method(task, RunOptions(task="kf_generation", method="fm_ot",
                                           preset="cpu", overrides={"lr": 1e-3}),
                          torch.device("cpu"))
    assert forced.config.lr == 1e-3
    smoke = TASKS.get("kf_generation")(preset="smoke", progress=False)
    assert build_method(smoke, RunOptions(task="kf_generation", method="fm_ot",
                                          preset="smoke"), torch.device("cpu")).config.lr == 1e-3


def test_the_table_says_when_a_task_departs_from_the_recipe():
    from pcgbench.leaderboard.tables import table_notes

    assert any(line.startswith("training:") and "lr = 0.0003" in line
               for line in table_notes("kf_generation", "cpu", {}))
    assert not any(line.startswith("training:") for line in table_notes("darcy", "cpu", {}))


def test_a_method_override_reaches_that_method_and_its_variants_only():
    """darcy's ``method_overrides`` (PMosFM's warm-up, a stability fix) reach ``pmosfm``
    and ``pmosfm_tuned`` (registered as its subclass) at ``cpu`` -- in a run and in the
    default column alike -- and no other method or preset; --set wins; the table says so
    only where a PMosFM column is shown."""
    from pcgbench.leaderboard.tables import table_notes
    from pcgbench.method import method_lineage
    from pcgbench.stages.plan import build_method, default_config
    from pcgbench.stages.runner import RunOptions

    assert method_lineage(METHODS.get("pmosfm_tuned")) == ["pmosfm_tuned", "pmosfm"]
    task = TASKS.get("darcy")(preset="cpu", progress=False)
    (key, value), = task.method_overrides["pmosfm"]["cpu"].items()
    for name in METHODS.names():
        cls = METHODS.get(name)
        if cls.unsupported_reason(task):
            continue
        method = build_method(task, RunOptions(task="darcy", method=name, preset="cpu"),
                              torch.device("cpu"))
        assert method.config == default_config(task, cls, "cpu")
        base = getattr(cls.Config.for_preset("cpu"), key, None)
        assert base != value, name
        expected = value if "pmosfm" in method_lineage(cls) else base
        assert getattr(method.config, key, None) == expected, name
    forced = build_method(task, RunOptions(task="darcy", method="pmosfm", preset="cpu",
                                           overrides={key: 100}), torch.device("cpu"))
    assert getattr(forced.config, key) == 100
    for preset in ("smoke", "paper"):
        assert getattr(default_config(task, METHODS.get("pmosfm"), preset), key) != value
    notes = table_notes("darcy", "cpu", {"pmosfm_tuned": []})
    assert any(line.startswith("training: pmosfm") and f"{key} = {value}" in line
               for line in notes)
    assert not any("pmosfm" in line and line.startswith("training:")
                   for line in table_notes("darcy", "cpu", {"fm_ot": []}))


def test_a_task_backbone_override_reaches_every_recipe_trained_method_and_trains(tmp_path):
    """dynamic_stall's U-Net (``backbone.*`` keys in Task.recipe_overrides) is the network
    of every method trained from scratch at cpu, is said under its tables, and each such
    method fits and samples with it (smoke-sized data and budget)."""
    from pcgbench.leaderboard.tables import table_notes
    from pcgbench.stages.plan import build_method, default_config
    from pcgbench.stages.runner import RunOptions

    task = TASKS.get("dynamic_stall")(preset="cpu", progress=False)
    trained = [n for n in METHODS.names() if METHODS.get(n).preset_recipe
               and not METHODS.get(n).unsupported_reason(task)]
    assert {"fm_ot", "pbfm", "pidm", "pmosfm"} <= set(trained)
    for name in trained:
        cfg = default_config(task, METHODS.get(name), "cpu")
        assert (cfg.backbone.kind, cfg.backbone.layers) == ("unet", 3), name
    assert any("backbone.kind = unet" in line for line in table_notes("dynamic_stall", "cpu", {}))
    smoke = TASKS.get("dynamic_stall")(preset="smoke", data_dir=tmp_path, progress=False)
    data, test = smoke.dataset("train"), smoke.dataset("test")
    for name in trained:
        opts = RunOptions(task="dynamic_stall", method=name, preset="smoke",
                          overrides={"backbone.kind": "unet", "backbone.layers": 2,
                                     "iterations": 2})
        method = build_method(smoke, opts, torch.device("cpu"))
        method.fit(data)
        out = method.sample(test.cond[:2], 2, torch.Generator().manual_seed(0))
        assert out.shape == (2, *smoke.spec.field_shape) and torch.isfinite(out).all(), name
