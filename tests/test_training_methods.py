"""Training-time physics methods: PBFM (ConFIG, unrolling) and PIDM (DDPM identities).

The Burgers evaluator r_B is NOT zero on the task's own data (coarse grid, shocks, the
paper's edge-replicated u_t), so the residual-loss checks are consistency checks: the
loss computed on the data equals the mean squared data residual (the evaluator's floor).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pcgbench.config import apply_overrides
from pcgbench.methods.pbfm import (
    PBFM,
    config_combine,
    curriculum_depth,
    residual_loss,
    unroll_endpoint,
)
from pcgbench.methods.pidm import PIDM, DDPMSchedule
from pcgbench.tasks.burgers import BurgersTask


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return BurgersTask("smoke", data_dir=tmp_path_factory.mktemp("data"), progress=False)


def _method(cls, task, **over):
    cfg = apply_overrides(cls.Config.for_preset("smoke"), {"iterations": 2, **over})
    return cls(task, cfg, "cpu")


# -- ConFIG -----------------------------------------------------------------------------
def _pairs():
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(20):  # random pairs
        out.append((torch.randn(50, generator=gen), torch.randn(50, generator=gen)))
    for scale in (0.01, 1.0, 100.0):  # deliberately conflicting: nearly opposite
        g = torch.randn(50, generator=gen)
        out.append((g, -0.9 * scale * g + 0.1 * torch.randn(50, generator=gen)))
    e1, e2 = torch.zeros(50), torch.zeros(50)
    e1[0], e2[0], e2[1] = 1.0, -1.0, 0.05  # 177 degrees apart
    out.append((e1, e2))
    return out


@pytest.mark.parametrize("pair", _pairs())
def test_config_update_does_not_conflict(pair):
    g1, g2 = pair
    g, used = config_combine(g1, g2)
    assert used and torch.isfinite(g).all()
    tol = 1e-5 * g.norm()
    assert torch.dot(g, g1) >= -tol * g1.norm()
    assert torch.dot(g, g2) >= -tol * g2.norm()


@pytest.mark.parametrize("seed", range(4))
def test_config_closed_form_used_on_cuda_equals_the_pinv_path(seed):
    """CUDA takes the package's two-gradient closed form, the CPU its pseudo-inverse:
    the same ConFIG direction and length to float32 rounding (non-parallel pairs)."""
    from conflictfree.grad_operator import ConFIG_update, ConFIG_update_double

    gen = torch.Generator().manual_seed(seed)
    g1 = torch.randn(20000, generator=gen)
    g2 = 3 * torch.randn(20000, generator=gen) - (seed - 1.5) * g1  # acute to obtuse
    ref = ConFIG_update(torch.stack([g1, g2]), use_least_square=False)
    closed = ConFIG_update_double(g1, g2)
    assert torch.allclose(closed, ref, rtol=0, atol=1e-4 * float(ref.abs().max()))
    assert torch.equal(config_combine(g1, g2)[0], ref)  # CPU: the pinv path, unchanged


def test_config_nan_and_zero_fallback():
    g1 = torch.randn(10)
    bad = torch.full((10,), float("nan"))
    assert torch.equal(config_combine(g1, bad)[0], g1)
    assert not config_combine(g1, bad)[1]
    assert torch.equal(config_combine(g1, torch.zeros(10))[0], g1)


# -- PBFM unrolling -----------------------------------------------------------------------
def test_unroll_one_step_is_one_shot_endpoint(task):
    m = _method(PBFM, task)
    gen = torch.Generator().manual_seed(1)
    xt = torch.randn(4, *task.spec.field_shape, generator=gen)
    t = torch.rand(4, 1, generator=gen)
    with torch.no_grad():
        v = m.net(xt, t)
        one = unroll_endpoint(m.net, xt, t, 1)
        reused = unroll_endpoint(m.net, xt, t, 1, v0=v)
    expect = xt + (1 - t).view(-1, 1, 1, 1) * v
    torch.testing.assert_close(one, expect)
    torch.testing.assert_close(reused, expect)
    # two steps: the second network call at t + (1 - t)/2
    with torch.no_grad():
        two = unroll_endpoint(m.net, xt, t, 2)
        dt = (1 - t) / 2
        mid = xt + dt.view(-1, 1, 1, 1) * v
        expect2 = mid + dt.view(-1, 1, 1, 1) * m.net(mid, t + dt)
    torch.testing.assert_close(two, expect2)


def test_curriculum_quarters():
    depths = [curriculum_depth(s, 8) for s in range(8)]
    assert depths == [1, 1, 2, 2, 3, 3, 4, 4]
    assert curriculum_depth(799, 800) == 4 and curriculum_depth(199, 800) == 1


def test_pbfm_residual_loss_on_data_is_data_floor(task):
    x = task.dataset("train").x[:8]
    floor = task.residual(x).pow(2).mean()
    got = residual_loss(task, task.normalizer.encode(x))
    assert floor > 0  # r_B is not zero on the data (see module docstring)
    torch.testing.assert_close(got, floor, rtol=1e-4, atol=0)


# -- PIDM -------------------------------------------------------------------------------------
def test_pidm_x0_identity_and_posterior_mean():
    sch = DDPMSchedule(100)
    gen = torch.Generator().manual_seed(2)
    x0 = torch.randn(6, 1, 5, 7, generator=gen, dtype=torch.float64)
    eps = torch.randn(6, 1, 5, 7, generator=gen, dtype=torch.float64)
    k = torch.tensor([0, 1, 10, 50, 98, 99])
    xt = sch.q_sample(x0, k, eps)
    torch.testing.assert_close(sch.x0_from_eps(xt, k, eps), x0)
    # posterior mean q(x_{t-1} | x_t, x0) with x0 from eps == the eps-form DDPM mean
    torch.testing.assert_close(sch.posterior_mean(sch.x0_from_eps(xt, k, eps), xt, k),
                               sch.eps_mean(xt, k, eps))
    assert float(sch.abar[-1]) < 1e-3 and (sch.post_var_clipped > 0).all()
    assert sch.post_var[0] == 0 and sch.post_var_clipped[0] == sch.post_var[1]


class _Oracle(nn.Module):
    """Returns fixed fields whatever the input (a perfect x0-predictor for one batch)."""

    def __init__(self, x: torch.Tensor):
        super().__init__()
        self.x = x

    def forward(self, x, t, cond=None):
        return self.x


def test_pidm_residual_loss_on_data_is_data_floor(task):
    m = _method(PIDM, task)
    x = task.dataset("train").x[:8]
    z = task.normalizer.encode(x)
    m.net = _Oracle(z)
    k = torch.arange(8) * 12
    l_data, l_res = m.losses(z, k, torch.randn_like(z), None)
    per = task.residual(x).pow(2).flatten(1).mean(1)
    var = m.schedule.post_var_clipped[k].float()
    assert float(l_data) == 0.0
    torch.testing.assert_close(l_res, (per / (2 * var)).mean(), rtol=1e-4, atol=0)


# -- end to end: fit 2 updates, sample, counted NFE --------------------------------------------
@pytest.mark.parametrize(("cls", "nfe"), [(PBFM, 20), (PIDM, 100)])
def test_fit_two_updates_and_sample(task, cls, nfe):
    torch.manual_seed(0)
    m = _method(cls, task)
    stats = m.fit(task.dataset("train"), progress=False)
    assert len(stats.update_seconds) == 2 and all(s > 0 for s in stats.update_seconds)
    assert all(torch.isfinite(torch.tensor(stats.losses)))
    m.nfe.reset()
    x = m.sample(None, 3, torch.Generator().manual_seed(0))
    assert m.nfe.count == nfe
    assert x.shape == (3, *task.spec.field_shape) and torch.isfinite(x).all()
    state = m.state_dict()
    m2 = _method(cls, task)
    m2.load_state_dict(state)
    m2.nfe.reset()
    torch.testing.assert_close(m2.sample(None, 3, torch.Generator().manual_seed(0)), x)


def test_pbfm_curriculum_and_fixed_depth_in_fit(task):
    m = _method(PBFM, task, iterations=4)
    stats = m.fit(task.dataset("train"), progress=False)
    assert stats.extra["updates_per_depth"] == {"1": 1, "2": 1, "3": 1, "4": 1}
    assert stats.extra["residual_loss_final"] > 0
    m = _method(PBFM, task, unroll=3)
    stats = m.fit(task.dataset("train"), progress=False)
    assert stats.extra["updates_per_depth"] == {"3": 2}
    # the EMA moved away from the initial weights and is what sampling uses
    assert m.velocity.net is m.ema


def test_pbfm_residual_off_is_its_flow_matching_gradient_alone(task, monkeypatch):
    """``residual=false`` (the diagnostic ablation) takes exactly the update PBFM takes when
    its residual gradient is zero, and never computes the residual."""
    torch.manual_seed(0)
    off = _method(PBFM, task, residual=False)
    stats = off.fit(task.dataset("train"), progress=False)
    assert stats.extra["residual_loss_first"] is None
    assert stats.extra["residual_terms"].startswith("none")
    import pcgbench.methods.pbfm as pbfm

    monkeypatch.setattr(pbfm, "residual_loss", lambda _t, x, *a, **k: 0.0 * x.sum())
    torch.manual_seed(0)
    zero = _method(PBFM, task, use_config=False)
    zero.fit(task.dataset("train"), progress=False)
    for a, b in zip(off.net.parameters(), zero.net.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_pbfm_residual_off_trains_fm_ot(task):
    """With its residual off PBFM's training is FM-OT's (same path, loss, recipe, batch and
    noise draws, EMA): the two fits agree, so PBFM's gap to FM-OT in a table is its residual
    term's (docs/methods/training_time.md; at `cpu` on Burgers the records agreed to every
    digit)."""
    from pcgbench.method import RunContext
    from pcgbench.methods.fm_ot import FMOT

    fits = []
    for cls, over in ((PBFM, {"residual": False}), (FMOT, {})):
        torch.manual_seed(0)
        m = _method(cls, task, iterations=3, **over)
        m.context = RunContext(seed=0, preset="smoke", progress=False)
        m.fit(task.dataset("train"), progress=False)
        fits.append(m)
    torch.manual_seed(1)
    a = fits[0].sample(None, 3, torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    b = fits[1].sample(None, 3, torch.Generator().manual_seed(0))
    torch.testing.assert_close(a, b)


# -- PCFT (adjoint matching on the cached FM-OT model) ----------------------------------------
def test_pcft_finetune_and_sample(task, tmp_path):
    from pcgbench.method import RunContext
    from pcgbench.methods.pcft import PCFT
    from pcgbench.stages.fit import prepare

    torch.manual_seed(0)
    m = _method(PCFT, task, iterations=1, steps=10, batch_size=3, n_random=3)
    m.context = RunContext(seed=0, preset="smoke", results_dir=str(tmp_path),
                           data_dir=str(task.data_dir), progress=False)
    stats = prepare(m).fit(task.dataset("train"), progress=False)
    assert len(stats.update_seconds) == 1 and torch.isfinite(torch.tensor(stats.losses)).all()
    assert stats.extra["residual_form"].startswith("strong")
    m.nfe.reset()
    x = m.sample(None, 3, torch.Generator().manual_seed(0))
    assert m.nfe.count == 10
    assert x.shape == (3, *task.spec.field_shape) and torch.isfinite(x).all()
    assert PCFT.Config.for_preset("paper").steps == 100
    assert PCFT.Config.for_preset("cpu").steps == 20


def test_pcft_lean_adjoint_linear_drift(task):
    """With v_base = 0 the base drift is -(1 - kappa) x/(t + h), so the adjoint is the
    terminal gradient times prod_k (1 - h (1 - kappa)/(t_k + h))."""
    from pcgbench.methods.pcft import PCFT

    m = _method(PCFT, task, steps=5)

    class Zero(nn.Module):
        def forward(self, x, t, cond=None):
            return torch.zeros_like(x)

    gen = torch.Generator().manual_seed(3)
    traj = [torch.randn(2, *task.spec.field_shape, generator=gen) for _ in range(6)]
    adj, cost = m.lean_adjoint(Zero(), traj, None)
    x1 = traj[-1].clone().requires_grad_(True)
    (g,) = torch.autograd.grad(m.terminal_cost(x1, None).sum(), x1)
    h, kap = 0.2, m.config.kappa
    expect = m.config.lam_x * g
    torch.testing.assert_close(adj[5], expect)
    for k in range(4, -1, -1):
        expect = expect * (1 - h * (1 - kap) / (k * h + h))
        torch.testing.assert_close(adj[k], expect, rtol=1e-4, atol=1e-4)
    assert cost.shape == (2,)


# -- PBFM residual as in the reference (tum-pbs/PBFM cfm_loss_residual) --------------------
def test_pbfm_t_weight_is_the_reference_batch_broadcast(task):
    """The reference multiplies t [B, 1, 1, 1] by the per-sample error [B]: the mean of
    that broadcast is mean(t) * mean(e), not mean(t_b e_b)."""
    x = task.normalizer.encode(task.dataset("train").x[:6])
    t = torch.linspace(0.05, 0.95, 6)
    e = task.residual(task.normalizer.decode(x)).abs().flatten(1).mean(1)
    broadcast = (t.view(-1, 1, 1, 1) * e).mean()  # the reference's expression
    got = residual_loss(task, x, None, t, power=1, t_weight="batch")
    torch.testing.assert_close(got, broadcast, rtol=1e-5, atol=0)
    assert not torch.isclose(got, (t * e).mean(), rtol=1e-3)  # the per-sample weight
    torch.testing.assert_close(residual_loss(task, x, None, t, power=1, t_weight="sample"),
                               (t * e).mean(), rtol=1e-5, atol=0)


@pytest.mark.parametrize(("name", "power", "channel_sum"), [
    ("darcy", 1, False), ("kolmogorov", 2, False), ("dynamic_stall", 2, True),
    ("burgers", 1, False)])
def test_pbfm_residual_per_benchmark_follows_the_reference(task, name, power, channel_sum):
    from pcgbench.methods.pbfm import residual_spec

    class Named:  # residual_spec reads the task's name only
        pass

    named = Named()
    named.name = name
    spec = residual_spec(named, None)
    assert (spec.power, spec.channel_sum) == (power, channel_sum)
    assert residual_spec(named, 2).power == 2 and residual_spec(named, 1).power == 1
    m = PBFM(task, PBFM.Config.for_preset("smoke"), "cpu")
    assert m.config.residual_t_weight == "batch" and m.config.residual_power is None


def test_pbfm_dynamic_stall_sums_the_two_closures(tmp_path):
    from pcgbench.methods._physics import physics_residual
    from pcgbench.registry import TASKS

    ds = TASKS.get("dynamic_stall")("smoke", data_dir=tmp_path, progress=False)
    data = ds.dataset("train")
    x, c = data.x[:3], data.cond[:3]
    noisy = x * (1 + 0.01 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0)))
    r = ds.residual(noisy, c)
    ref = (r[:, 0].pow(2) + r[:, 1].pow(2)).flatten(1).mean(1)  # reference: gas^2 + tau^2
    torch.testing.assert_close(physics_residual(ds, noisy, c, power=2, channel_sum=True), ref)
