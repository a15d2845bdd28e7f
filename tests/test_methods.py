"""Every registered method on every registered task (smoke preset): fit, sample, shapes,
finiteness, counted NFE; unsupported combinations fail with a one-line reason."""

from __future__ import annotations

import pytest
import torch

from pcgbench.config import apply_overrides
from pcgbench.metrics import blowup_fraction
from pcgbench.registry import METHODS, TASKS
from pcgbench.stages.fit import prepare

TINY = {"iterations": 2}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def _fitted(task, method_name: str):
    """The method at the smoke preset with the TINY budget, fitted on the train split."""
    cls = METHODS.get(method_name)
    cfg = cls.Config.for_preset("smoke")
    cfg = apply_overrides(cfg, {k: v for k, v in TINY.items() if hasattr(cfg, k)})
    method = prepare(cls(task, cfg, "cpu"))
    method.fit(task.dataset("train"), progress=False)
    return method


# registered variants (``Task.variant_of``) share their base task's code path
BASE_TASKS = [t for t in TASKS.names() if TASKS.get(t).variant_of is None]


@pytest.mark.parametrize("task_name", BASE_TASKS)
@pytest.mark.parametrize("method_name", METHODS.names())
def test_fit_and_sample(task_name, method_name, data_dir):
    task = TASKS.get(task_name)("smoke", data_dir=data_dir, progress=False)
    cls = METHODS.get(method_name)
    reason = cls.unsupported_reason(task)
    if reason is not None:
        assert "\n" not in reason and method_name in reason
        pytest.skip(reason)
    method = _fitted(task, method_name)
    test = task.dataset("test")
    n = 3
    cond = None if test.cond is None else test.cond[:n]
    method.nfe.reset()
    x = method.sample(cond, n, torch.Generator().manual_seed(0))
    assert x.shape == (n, *task.spec.field_shape)
    assert torch.isfinite(x).all()
    # not blown up either (the runner's criterion: a PMosFM geometry bug on
    # hit_reconstruction once gave finite samples 1e4 x too large)
    assert blowup_fraction(x, test.x) == 0.0
    assert method.nfe.count >= 1


def _fit_and_draw(task, method_name: str) -> torch.Tensor:
    torch.manual_seed(0)  # what the runner does with the run seed
    method = _fitted(task, method_name)
    test = task.dataset("test")
    cond = None if test.cond is None else test.cond[:2]
    return method.sample(cond, 2, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("method_name", METHODS.names())
def test_same_seed_same_samples(method_name, data_dir):
    """Fit and sample twice from the same seeds in one process: bit-identical samples, so a
    recorded run can be reproduced and no method leans on hidden global state."""
    task = TASKS.get("burgers")("smoke", data_dir=data_dir, progress=False)
    if METHODS.get(method_name).unsupported_reason(task) is not None:
        pytest.skip("unsupported on burgers")
    a = _fit_and_draw(task, method_name)
    b = _fit_and_draw(task, method_name)
    assert torch.equal(a, b)
