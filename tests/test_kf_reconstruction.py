"""kf_reconstruction: observation operator (identity at factor 1, exact on bilinear
fields), split layout (kf_generation targets, balanced factors, test ensembles), backbones
with field-shaped conditions, ensemble / reconstruction metrics grouped by field
conditions, and smoke runs of FM-OT and PMosFM through the runner."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import pcgbench.metrics.reconstruction  # noqa: F401  (registers recon_* metrics)
from pcgbench.backbones import (
    BackboneConfig,
    FieldCondInput,
    conditioned_backbone,
    field_backbone,
)
from pcgbench.errors import PcgError
from pcgbench.metric import MetricContext
from pcgbench.metrics.ensemble import coverage, crps, width
from pcgbench.registry import METRICS
from pcgbench.task import TaskSpec
from pcgbench.tasks.kf_generation import KFGenerationTask
from pcgbench.tasks.kf_reconstruction import (
    KFReconstructionParams,
    KFReconstructionTask,
    observe,
    observe_rows,
)

SMALL = BackboneConfig(kind="fno", width=8, modes=4, layers=2, embed_dim=16)
#: the smoke grid (16^2) with a short, coarse simulation: plumbing only, seconds
TINY = KFReconstructionParams(
    flow=dataclasses.replace(KFGenerationTask.params_for("smoke"), n_solver=32, spinup=2.0,
                             n_traj=2, snaps_per_traj=6, n_traj_test=1),
    test_conditions=3, ensemble=4)


# -- observation operator -------------------------------------------------------------------
def test_factor_one_is_the_field_itself():
    x = torch.randn(3, 2, 8, 8)
    assert torch.equal(observe(x, 1), x)


@pytest.mark.parametrize("f", [2, 4])
def test_bilinear_upsampling_is_exact_on_bilinear_fields(f):
    n = 16
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 2, n, n, generator=gen, dtype=torch.float64)
    up = observe(x, f)
    # keeps the coarse nodes, and a periodic piecewise-bilinear field is reproduced exactly
    assert torch.equal(up[..., ::f, ::f], x[..., ::f, ::f])
    assert torch.equal(observe(up, f), up)
    # a global bilinear field (a + b i)(c + d j) is exact away from the periodic seam
    i = torch.arange(n, dtype=torch.float64)
    g = ((0.3 + 0.7 * i)[:, None] * (-1.1 + 0.4 * i)[None, :]).expand(1, 1, n, n)
    inner = slice(0, n - f + 1)
    torch.testing.assert_close(observe(g, f)[..., inner, inner], g[..., inner, inner],
                               rtol=0, atol=1e-12)


def test_periodic_interpolation_values_by_hand():
    x = torch.randn(1, 1, 8, 8, dtype=torch.float64)
    up = observe(x, 2)
    torch.testing.assert_close(up[0, 0, 1, 0], (x[0, 0, 0, 0] + x[0, 0, 2, 0]) / 2)
    torch.testing.assert_close(up[0, 0, 7, 7], (x[0, 0, 6, 6] + x[0, 0, 0, 6]
                                                + x[0, 0, 6, 0] + x[0, 0, 0, 0]) / 4)
    up4 = observe(x, 4)
    torch.testing.assert_close(up4[0, 0, 0, 5], 0.75 * x[0, 0, 0, 4] + 0.25 * x[0, 0, 0, 0])


def test_bad_factors_raise():
    with pytest.raises(PcgError, match="divide"):
        observe(torch.zeros(1, 2, 6, 6), 4)
    with pytest.raises(PcgError, match="factors"):
        observe_rows(torch.zeros(2, 2, 8, 8), [1])
    with pytest.raises(PcgError, match="divide"):
        KFReconstructionTask("smoke", params=dataclasses.replace(TINY, factors=(3,)))


# -- the task's splits ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("kfr-data")


@pytest.fixture(scope="module")
def task(data_dir):
    return KFReconstructionTask("smoke", data_dir=data_dir, progress=False, params=TINY)


def test_splits_reuse_kf_generation_targets_with_observations(task, data_dir):
    spec = task.spec
    n = task.params.flow.n
    assert spec.field_shape == (2, n, n) and spec.cond_channels == 2 and spec.cond_dim == 0
    flow = KFGenerationTask("smoke", data_dir=data_dir, progress=False, params=TINY.flow)
    assert task.params.flow == flow.params
    for split in ("train", "val"):
        d = task.dataset(split)
        assert torch.equal(d.x, flow.dataset(split).x)  # same targets, same cache
        fac = task.row_factors(split)
        assert d.cond.shape == d.x.shape
        assert torch.equal(d.cond, observe_rows(d.x, fac))
        assert torch.equal(d.cond[fac == 1], d.x[fac == 1])
        counts = np.bincount(fac, minlength=5)[[1, 2, 4]]
        assert counts.max() - counts.min() <= 1  # balanced factor assignment
    assert (data_dir / "kf_generation").is_dir()
    torch.testing.assert_close(task.normalizer.mean, flow.normalizer.mean, rtol=0, atol=0)
    torch.testing.assert_close(task.normalizer.std, flow.normalizer.std, rtol=0, atol=0)


def test_test_split_is_ensembles_of_fixed_conditions(task):
    p = task.params
    d = task.dataset("test")
    g, e = p.test_conditions, p.ensemble
    assert len(d) == g * e
    src = task.flow.dataset("test").x
    idx = task.test_indices(len(src))
    fac = task.row_factors("test")
    assert fac[::e].tolist() == [p.factors[k % len(p.factors)] for k in range(g)]
    for k in range(g):
        rows = slice(k * e, (k + 1) * e)
        assert torch.equal(d.x[rows], src[idx[k]].expand(e, -1, -1, -1))
        assert torch.equal(d.cond[rows], observe(src[idx[k]][None], int(fac[k * e])).expand(
            e, -1, -1, -1))
    assert len(torch.unique(d.cond.flatten(1), dim=0)) == g


# -- backbones with field conditions ----------------------------------------------------------
@pytest.mark.parametrize("kind", ["fno", "unet"])
def test_field_cond_backbone_shapes_and_dependence(kind):
    spec = TaskSpec(name="t", field_shape=(2, 8, 8), channel_names=("u", "v"),
                    cond_channels=3)
    torch.manual_seed(0)
    net = field_backbone(BackboneConfig(kind=kind, width=8, modes=4, layers=2,
                                        embed_dim=16), spec, n_times=2)
    assert isinstance(net, FieldCondInput)
    x, t = torch.randn(4, 2, 8, 8), torch.rand(4, 2)
    c = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        out = net(x, t, c)
        assert out.shape == (4, 2, 8, 8) and torch.isfinite(out).all()
        assert not torch.allclose(net(x, t, c + 1.0), out), "cond ignored"
        torch.testing.assert_close(net(x, t, c[:1]), net(x, t, c[:1].expand(4, -1, -1, -1)))
    with pytest.raises(PcgError, match="field condition"):
        net(x, t, None)
    with pytest.raises(PcgError, match="field condition"):
        net(x, t, c[:, :2])


def test_field_cond_needs_the_task_grid_and_can_be_ignored():
    spec = TaskSpec(name="t", field_shape=(2, 8, 8), channel_names=("u", "v"),
                    cond_channels=2)
    with pytest.raises(PcgError, match="grid"):
        conditioned_backbone(SMALL, spec, in_channels=1, out_channels=1, spatial_shape=(4, 4))
    plain = field_backbone(SMALL, spec, conditioned=False)
    x = torch.randn(2, 2, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(plain(x, 0.5, torch.randn(2, 2, 8, 8)),
                                   plain(x, 0.5, torch.zeros(2, 2, 8, 8)))


def test_pmosfm_network_takes_the_observation(task):
    from pcgbench.methods.pmosfm import PMosFM, PMosFMConfig

    m = PMosFM(task, PMosFMConfig.for_preset("smoke"))
    assert isinstance(m.net, FieldCondInput) and m.net.cond_channels == 2
    c = torch.randn(3, 2, 16, 16)
    assert m.calibration.whiten_cond(c) is None  # pooled whitening for field conditions


# -- metrics grouped by field conditions --------------------------------------------------------
def _ensemble_case():
    gen = torch.Generator().manual_seed(3)
    g, e = 3, 5
    y = torch.randn(g, 2, 4, 4, generator=gen, dtype=torch.float64)
    cond = torch.randn(g, 2, 4, 4, generator=gen, dtype=torch.float64)
    samples = y.repeat_interleave(e, 0) + torch.randn(g * e, 2, 4, 4, generator=gen,
                                                      dtype=torch.float64)
    return y, cond, samples, g, e


def test_crps_and_coverage_group_by_field_conditions():
    y, cond, samples, g, e = _ensemble_case()
    s_cond = cond.repeat_interleave(e, 0)
    # reference in a different order than the samples: matching is by condition
    perm = torch.tensor([2, 0, 1])
    ref, r_cond = y[perm].repeat_interleave(e, 0), cond[perm].repeat_interleave(e, 0)
    ctx = MetricContext(task=None, cond=s_cond, reference_cond=r_cond)
    brute = []
    for k in range(g):
        ens = samples[k * e:(k + 1) * e].flatten(1)
        obs = y[k].flatten()
        mae = (ens - obs).abs().mean(0)
        spread = (ens[:, None] - ens[None]).abs().mean((0, 1)) / 2
        brute.append((mae - spread).mean())
    assert crps(samples, ref, ctx) == pytest.approx(float(torch.stack(brute).mean()), rel=1e-12)
    # a collapsed ensemble at the target: CRPS 0, full coverage, zero width
    exact = y.repeat_interleave(e, 0)
    assert crps(exact, ref, ctx) == pytest.approx(0.0, abs=1e-15)
    assert coverage(exact, ref, ctx) == 1.0 and width(exact, ref, ctx) == 0.0
    assert METRICS.get("coverage90")()(exact, ref, ctx) == pytest.approx(0.1)


def test_reconstruction_metrics_use_the_ensemble_mean_per_condition():
    y, cond, _, g, e = _ensemble_case()
    scale = torch.tensor([0.1, 0.2, 0.4], dtype=torch.float64)
    noise = torch.randn(g * e, 2, 4, 4, generator=torch.Generator().manual_seed(4),
                        dtype=torch.float64)
    noise = noise - noise.view(g, e, -1).mean(1).repeat_interleave(e, 0).view_as(noise)
    # members (1 + s_g) y_g + zero-mean noise: ensemble mean (1 + s_g) y_g
    samples = ((1 + scale)[:, None, None, None] * y).repeat_interleave(e, 0) + noise
    ctx = MetricContext(task=None, cond=cond.repeat_interleave(e, 0),
                        reference_cond=cond.repeat_interleave(e, 0))
    ref = y.repeat_interleave(e, 0)
    rel = METRICS.get("recon_rel_l2")()(samples, ref, ctx)
    assert rel == pytest.approx(float(scale.mean()), rel=1e-12)
    mse = METRICS.get("recon_mse")()(samples, ref, ctx)
    expected = (scale**2 * y.flatten(1).pow(2).mean(1)).mean()
    assert mse == pytest.approx(float(expected), rel=1e-12)
    other = MetricContext(task=None, cond=ctx.cond, reference_cond=ctx.cond + 1.0)
    assert np.isnan(METRICS.get("recon_rel_l2")()(samples, ref, other))


# -- smoke runs through the runner -------------------------------------------------------------
@pytest.mark.parametrize("method,nfe", [("fm_ot", 20), ("pmosfm", 1)])
def test_runner_smoke(task, data_dir, tmp_path_factory, monkeypatch, method, nfe):
    from pcgbench.registry import TASKS
    from pcgbench.stages import plan
    from pcgbench.stages.runner import RunOptions, run

    assert TASKS.get("kf_reconstruction") is KFReconstructionTask
    monkeypatch.setattr(plan, "build_task", lambda opts: task)  # the TINY-data task
    results = tmp_path_factory.getbasetemp() / "kfr-results"
    opts = RunOptions(task="kf_reconstruction", method=method, preset="smoke",
                      results_dir=str(results), data_dir=str(data_dir), progress=False,
                      overrides={"iterations": 3})
    record, path, skipped = run(opts)
    assert not skipped and path.exists()
    assert record["nfe"] == nfe and record["n_samples"] == len(task.dataset("test"))
    m = record["metrics"]
    assert set(task.metrics) <= set(m)
    for name in ("re", "recon_rel_l2", "recon_mse", "crps", "coverage90", "width90"):
        assert isinstance(m[name], float) and np.isfinite(m[name]), name
    assert 0.0 <= m["coverage90"] <= 0.9
    # the data column (val vs test): conditions never match -> no reconstruction score
    data = json.loads(next((results / "records" / "kf_reconstruction" / "smoke" / "data")
                           .glob("*.json")).read_text())["metrics"]
    assert data["recon_rel_l2"] is None and data["re"] > 0
