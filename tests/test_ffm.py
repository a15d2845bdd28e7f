"""FFM (functional flow matching) and the shared backbone of zero-shot tasks: the GP
source has the kernel's covariance (closed-form Cholesky, empirical covariance of many
draws), training reduces the loss, Euler sampling counts NFE = steps, FM-OT's source hook
is N(0, I) bit for bit, and the sampling-time methods pick FFM (and its prior as their
noise) on a zero-shot task -- a tiny synthetic heat-like task defined here."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

import pcgbench.methods  # noqa: F401 - registers the methods
from pcgbench.errors import PcgError
from pcgbench.method import RunContext
from pcgbench.methods.ffm import (
    FFM,
    TASK_PRIORS,
    GaussianProcessPrior,
    exponential_cholesky,
    exponential_covariance,
)
from pcgbench.methods.fm_ot import FMOT
from pcgbench.registry import METHODS, TASKS
from pcgbench.sanity import SANITY_ROWS
from pcgbench.stages.fit import prepare
from pcgbench.task import Constraint, FieldData, Task, TaskSpec

TOY = "_toy_zero_shot_heat"


@dataclass(frozen=True)
class ToyParams:
    nt: int = 8
    nx: int = 8
    n_train: int = 64
    groups: int = 3
    per_group: int = 8


class ToyHeat(Task):
    """u(t, x) = sin(2 pi x + phi) exp(-nu t) on a periodic x grid (so sum_x u = 0 for
    every t); cond = the IC row u(0, .).  val/test: ``groups`` fixed phases x
    ``per_group`` random nu, rows ordered group by group (same phases in val and test)."""

    name = TOY
    Params = ToyParams
    metrics = ("mmse", "smse", "ce_ic", "ce_cl", "feature_fd")
    group_statistics_by_cond: ClassVar[bool] = True

    @classmethod
    def params_for(cls, preset: str) -> ToyParams:
        return ToyParams()

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(TOY, (1, p.nt, p.nx), ("u",), cond_dim=p.nx, zero_shot=True)

    def fields(self, phi: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
        p = self.params
        t = torch.linspace(0.0, 1.0, p.nt, dtype=torch.float64)[:, None]
        x = torch.arange(p.nx, dtype=torch.float64)[None] / p.nx
        u = torch.sin(2 * math.pi * x + phi[:, None, None]) * torch.exp(-nu[:, None, None] * t)
        return u[:, None].float()

    def generate(self, split: str) -> FieldData:
        p = self.params
        g = torch.Generator().manual_seed({"train": 0, "val": 1, "test": 2}[split])
        if split == "train":
            phi = math.pi * torch.rand(p.n_train, generator=g, dtype=torch.float64)
        else:  # fixed phases (shared by val and test), random viscosities
            phi = torch.linspace(0.3, 2.5, p.groups, dtype=torch.float64)
            phi = phi.repeat_interleave(p.per_group)
        nu = 1.0 + 4.0 * torch.rand(len(phi), generator=g, dtype=torch.float64)
        x = self.fields(phi, nu)
        return FieldData(x, x[:, 0, 0, :].clone())

    def residual(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        return self.constraints()["cl"](x, cond)

    def constraints(self) -> Mapping[str, Constraint]:
        def ic(x: torch.Tensor, cond: torch.Tensor | None) -> torch.Tensor:
            return x[:, 0, 0, :] - cond.to(x.dtype)

        def cl(x: torch.Tensor, cond: torch.Tensor | None) -> torch.Tensor:
            mass = x[:, 0].sum(dim=-1)
            return mass[:, 1:] - mass[:, :1]

        return {"ic": Constraint("ic", ic, linear=True), "cl": Constraint("cl", cl, linear=True)}


@pytest.fixture(autouse=True, scope="module")
def toy_prior():
    """The toy task's FFM prior, as the suite's tasks have theirs in ``TASK_PRIORS``."""
    TASK_PRIORS[TOY] = ("matern12", 0.2)
    yield
    del TASK_PRIORS[TOY]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("ffm")
    task = ToyHeat("smoke", data_dir=root / "data", progress=False)
    ctx = RunContext(seed=0, preset="smoke", results_dir=str(root / "results"),
                     data_dir=str(root / "data"), progress=False)
    return task, ctx


def build(env, name, **changes):
    task, ctx = env
    torch.manual_seed(0)  # the weights a run would start from, whatever ran before
    cls = METHODS.get(name)
    method = cls(task, cls.Config.for_preset("smoke").replace(**changes), "cpu")
    method.context = ctx
    return prepare(method)


# -- the Gaussian-process source ------------------------------------------------------------
@pytest.mark.parametrize("n, length", [(2, 0.5), (7, 0.2), (16, 0.05), (9, 1e-4)])
def test_closed_form_cholesky_factor(n, length):
    L = exponential_cholesky(n, length)
    assert torch.equal(L, torch.tril(L)) and bool((torch.diagonal(L) > 0).all())
    assert torch.allclose(L @ L.T, exponential_covariance(n, length), atol=1e-14, rtol=0)


def test_gp_source_covariance_matches_kernel():
    prior = GaussianProcessPrior((1, 6, 5), "matern12", (0.3, 0.5))
    n = 40_000
    x = prior.sample(n, torch.Generator().manual_seed(0)).reshape(n, -1).double()
    emp = x.T @ x / n
    K = prior.covariance()
    # separable exponential kernel: K[(i, j), (k, l)] = exp(-|s_i - s_k|/0.3 - |s_j - s_l|/0.5)
    s6, s5 = torch.linspace(0, 1, 6, dtype=torch.float64), torch.linspace(0, 1, 5,
                                                                          dtype=torch.float64)
    assert K[0, 5 * 1 + 1] == pytest.approx(math.exp(-s6[1] / 0.3 - s5[1] / 0.5))
    assert K[5 * 2 + 3, 5 * 4 + 1] == pytest.approx(
        math.exp(-(s6[4] - s6[2]) / 0.3 - (s5[3] - s5[1]) / 0.5))
    # entry-wise Monte-Carlo error sqrt((1 + K^2) / n) <= 0.0071; 5 sigma
    assert float((emp - K).abs().max()) < 5 * math.sqrt(2 / n)
    assert float(x.mean(0).abs().max()) < 5 / math.sqrt(n)


def test_white_prior_and_bad_prior():
    prior = GaussianProcessPrior((2, 4, 4), "white")
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(prior.sample(5, g1), torch.randn(5, 2, 4, 4, generator=g2))
    assert torch.equal(prior.covariance(), torch.eye(16, dtype=torch.float64))
    with pytest.raises(PcgError, match="ffm prior"):
        GaussianProcessPrior((1, 4), "matern52")
    with pytest.raises(PcgError, match="length scale"):
        GaussianProcessPrior((1, 4, 4), "matern12", (0.1, 0.2, 0.3))


def test_prior_from_task_attributes_and_config(env):
    task, _ = env
    m = build(env, "ffm")
    assert m.prior.kind == "matern12" and m.prior.length_scale == (0.2, 0.2)
    assert m.record_extras() == {"ffm_prior": "matern12", "ffm_length_scale": [0.2, 0.2]}
    assert build(env, "ffm", prior="white").prior.kind == "white"
    assert build(env, "ffm", length_scale=0.05).prior.length_scale == (0.05, 0.05)


def test_fm_ot_source_is_standard_normal_bit_for_bit(env):
    m = build(env, "fm_ot")
    got = m.sample_source(6, torch.Generator().manual_seed(11))
    ref = torch.randn((6, *env[0].spec.field_shape), generator=torch.Generator().manual_seed(11))
    assert torch.equal(got, ref)


# -- training and sampling ----------------------------------------------------------------------
@torch.no_grad()
def fixed_batch_loss(m: FFM, x: torch.Tensor) -> float:
    """The FFM loss E||v(x_t, t) - (x1 - eps)||^2 on a fixed batch (same eps, t)."""
    g = torch.Generator().manual_seed(99)
    x1 = m.task.normalizer.encode(x)
    eps = m.sample_source(len(x1), g)
    t = torch.rand(len(x1), 1, generator=g)
    tb = t.view(-1, 1, 1, 1)
    return float((m.net((1 - tb) * eps + tb * x1, t, None) - (x1 - eps)).pow(2).mean())


def test_ffm_training_reduces_loss_and_nfe_equals_steps(env):
    task, _ = env
    m = build(env, "ffm", iterations=200)
    train = task.dataset("train")
    before = fixed_batch_loss(m, train.x)
    stats = m.fit(train, progress=False)
    assert len(stats.update_seconds) == len(stats.losses) == 200
    after = fixed_batch_loss(m, train.x)
    assert after < 0.6 * before, (before, after)
    test = task.dataset("test")
    for steps in (1, 5):
        m.config = m.config.replace(steps=steps)
        m.nfe.reset()
        x = m.sample(test.cond[:4], 4, torch.Generator().manual_seed(0))
        assert x.shape == (4, *task.spec.field_shape) and torch.isfinite(x).all()
        assert m.nfe.count == steps


# -- the shared backbone of sampling-time methods ---------------------------------------------
def test_sampling_methods_use_ffm_on_zero_shot_tasks(env):
    task, _ = env
    eci = build(env, "eci")
    assert eci.shared_backbone() == "ffm"
    stats = eci.fit(task.dataset("train"), progress=False)
    assert stats.extra == {"backbone": "ffm"} and isinstance(eci.backbone, FFM)
    # the source noise is the backbone's GP prior
    got = eci.noise(5, torch.Generator().manual_seed(4))
    ref = eci.backbone.prior.sample(5, torch.Generator().manual_seed(4))
    assert torch.equal(got, ref)
    # ECI imposes ic and cl on the FFM backbone to round-off; NFE = steps
    test = task.dataset("test")
    eci.nfe.reset()
    x = eci.sample(test.cond[:6], 6, torch.Generator().manual_seed(0))
    assert eci.nfe.count == eci.config.steps
    cons = task.constraints()
    assert float(cons["ic"](x, test.cond[:6]).abs().max()) < 1e-5
    assert float(cons["cl"](x, test.cond[:6]).abs().max()) < 1e-4
    # a second sampler reuses the cached ffm checkpoint (same weights)
    pcfm = build(env, "pcfm")
    pcfm.fit(task.dataset("train"), progress=False)
    for a, b in zip(pcfm.backbone.net.parameters(), eci.backbone.net.parameters(), strict=True):
        assert torch.equal(a, b)


def test_other_tasks_keep_fm_ot(tmp_path):
    task = TASKS.get("burgers")("smoke", data_dir=tmp_path, progress=False)
    cls = METHODS.get("eci")
    assert not task.spec.zero_shot
    assert cls(task, cls.Config.for_preset("smoke"), "cpu").shared_backbone() == "fm_ot"
    assert isinstance(METHODS.get("ffm")(task, METHODS.get("ffm").Config.for_preset("smoke")),
                      FMOT)


# -- one run through the harness --------------------------------------------------------------
@pytest.fixture()
def toy_registered():
    """ToyHeat in the task registry for one test only (removed again, so that no other
    test iterating TASKS sees it)."""
    TASKS.add(TOY, ToyHeat)
    yield TOY
    TASKS._objects.pop(TOY, None)


def test_run_records_suite_metrics(toy_registered, tmp_path):
    from pcgbench.stages.runner import RunOptions, run

    opts = RunOptions(task=TOY, method="eci", preset="smoke", results_dir=str(tmp_path / "r"),
                      data_dir=str(tmp_path / "d"), progress=False, timing_repeats=1)
    record, _, skipped = run(opts)
    assert not skipped and record["training"]["backbone"] == "ffm"
    m = record["metrics"]
    assert set(m) >= {"mmse", "smse", "ce_ic", "ce_cl", "feature_fd"}
    assert m["ce_ic"] < 1e-5 and m["ce_cl"] < 1e-4
    assert all(math.isfinite(m[k]) for k in ("mmse", "smse", "feature_fd"))
    # the backbone's own checkpoint and the data reference (val vs test, grouped by cond)
    recs = list((tmp_path / "r" / "records" / TOY / "smoke").rglob("*.json"))
    assert {p.parent.name for p in recs} == {"eci", "data", *SANITY_ROWS}
    assert list((tmp_path / "r" / "checkpoints" / TOY / "smoke" / "ffm").glob("*.pt"))
