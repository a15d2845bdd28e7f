"""The training budget is a declared config field (``MethodConfig.budget_field``): the
core reads it through ``training_updates()``, never by the name ``iterations``."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

import pcgbench.methods  # noqa: F401 - registers the methods
from pcgbench.errors import PcgError
from pcgbench.registry import METHODS
from pcgbench.stages import tune
from pcgbench.stages.budget import warn_budget
from pcgbench.stages.scoring import config_problem


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_declares_its_budget_as_an_int_field_or_none(name):
    config_cls = METHODS.get(name).Config
    field = config_cls.budget_field
    config = config_cls.for_preset("cpu")
    if field is None:
        assert config.training_updates() is None
        return
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    assert field in fields, f"{name}: budget_field {field!r} is not a field of its config"
    assert isinstance(getattr(config, field), int)
    assert config.training_updates() == getattr(config, field)
    assert config.replace(**{field: 7}).training_updates() == 7


def test_dflow_s_iterations_are_its_sampler_s_not_a_training_budget():
    config = METHODS.get("dflow").Config.for_preset("cpu")
    assert config.iterations > 0 and config.training_updates() is None
    # a zero sampler iteration count is not a config that trains nothing
    assert config_problem(config.replace(iterations=0)) is None
    assert config_problem(METHODS.get("fm_ot").Config().replace(iterations=0)) is not None


def test_the_budget_warning_names_the_declared_field():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_budget("burgers", "fm_ot", "cpu", "/nonexistent", 100_000, 1000, "iterations")
        warn_budget("burgers", "dflow", "cpu", "/nonexistent", None, None, None)
    assert len(caught) == 1 and str(caught[0].message).startswith("iterations=100000 is 100 x")


def test_a_study_stages_the_declared_budget_and_refuses_a_method_without_one():
    study = tune.Study(name="s", method="pmosfm", description="", candidates=(),
                       tasks=("burgers",), stages=())
    assert tune.budget_field(study) == "iterations"
    with pytest.raises(PcgError, match="declares no training budget"):
        tune.budget_field(dataclasses.replace(study, method="dflow"))


def test_the_cost_probe_shortens_the_training_budget_and_keeps_d_flow_s_sampler():
    """``benchmarks/paper_cost.py`` probes a few updates by overriding the declared budget
    field; D-Flow's ``iterations`` (its sampler's L-BFGS) stay as configured, or its
    s/sample would be timed with 4 instead of 20 iterations."""
    import importlib.util
    from pathlib import Path
    from types import SimpleNamespace

    import torch

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "paper_cost.py"
    spec = importlib.util.spec_from_file_location("paper_cost_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Built(Exception):
        pass

    seen: list[dict] = []

    def build(task, opts, device):
        seen.append(dict(opts.overrides))
        if len(seen) == 2:
            raise Built
        return SimpleNamespace(config=METHODS.get(opts.method).Config.for_preset("cpu"))

    module.build_method = build
    args = SimpleNamespace(warmup=1, updates=3, batch_size=None)
    for name, expect in (("dflow", {}), ("fm_ot", {"iterations": 4})):
        seen.clear()
        with pytest.raises(Built):
            module.probe_method(SimpleNamespace(name="burgers"), name, "cpu",
                                torch.device("cpu"), args)
        assert seen[1] == expect
