"""Sampling-time methods on the shared FM-OT backbone (PCFM, ECI, DiffusionPDE, D-Flow,
CoCoGen): hard constraints to round-off, projections vs closed forms, guidance and
noise optimization reduce the constraint loss, counted NFE equals the documented count,
and the velocity -> score formula on a Gaussian toy."""

from __future__ import annotations

import math

import pytest
import torch

import pcgbench.methods  # noqa: F401 - registers the methods
from pcgbench.method import RunContext
from pcgbench.methods._sampling import (
    apply_projector,
    batched_jacobian,
    gauss_newton_project,
    orthogonal_projector,
)
from pcgbench.methods.cocogen import score_from_velocity
from pcgbench.registry import METHODS, TASKS
from pcgbench.stages.fit import prepare
from pcgbench.stages.runner import RunOptions, run
from pcgbench.task import Constraint

N = 4


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Burgers at the smoke preset; the fm_ot backbone (30 updates) cached under tmp."""
    root = tmp_path_factory.mktemp("sampling")
    task = TASKS.get("burgers")("smoke", data_dir=root / "data", progress=False)
    ctx = RunContext(seed=0, preset="smoke", results_dir=str(root / "results"),
                     data_dir=str(root / "data"), progress=False)
    return task, ctx


def build(env, name, **changes):
    task, ctx = env
    cls = METHODS.get(name)
    method = cls(task, cls.Config.for_preset("smoke").replace(**changes), "cpu")
    method.context = ctx
    prepare(method)
    method.fit(task.dataset("train"), progress=False)
    return method


def draw(method, n=N, seed=0):
    method.nfe.reset()
    x = method.sample(None, n, torch.Generator().manual_seed(seed))
    assert x.shape == (n, *method.task.spec.field_shape)
    assert torch.isfinite(x).all()
    return x


def mass(task, x):
    return task.constraints()["mass"](x)


# -- projections -------------------------------------------------------------------------
def test_projection_equals_closed_form_orthogonal_projection():
    torch.manual_seed(0)
    shape, k = (2, 3, 5), 4
    n = math.prod(shape)
    A = torch.randn(k, n, dtype=torch.float64)
    b = torch.randn(k, dtype=torch.float64)

    def h(z, cond=None):
        return z.reshape(z.shape[0], -1) @ A.T - b

    z = torch.randn(6, *shape, dtype=torch.float64)
    zf = z.reshape(6, -1)
    expected = zf - (zf @ A.T - b) @ torch.linalg.solve(A @ A.T, A)  # x - A^T(AA^T)^-1 h
    J = batched_jacobian(h, z)
    assert torch.allclose(J, A.expand(6, k, n))
    for anchor in (False, True):
        got = gauss_newton_project(h, z, steps=1, damping=0.0, anchor=anchor)
        assert torch.allclose(got.reshape(6, -1), expected, atol=1e-12)
    got = apply_projector(orthogonal_projector(J[:1]), z, h(z))
    assert torch.allclose(got.reshape(6, -1), expected, atol=1e-12)
    # the projection is orthogonal: the correction lies in the row space of A
    step = zf - expected
    coeff = torch.linalg.lstsq(A.T, step.T).solution
    assert torch.allclose(A.T @ coeff, step.T, atol=1e-10)


def test_mass_projection_is_uniform_shift(env):
    """For Burgers ``mass`` the orthogonal projection shifts every slice to the mean of
    the slice means (in normalized units, where the projection is computed)."""
    task, _ = env
    from pcgbench.methods._sampling import normalized

    hz = normalized(task.constraints()["mass"].fn, task)
    z = torch.randn(3, *task.spec.field_shape, dtype=torch.float64)
    got = gauss_newton_project(hz, z, steps=1, damping=0.0)
    means = z.mean(dim=-1, keepdim=True)
    expected = z - means + means.mean(dim=-2, keepdim=True)
    assert torch.allclose(got, expected, atol=1e-10)


# -- hard constraints and NFE ------------------------------------------------------------
@pytest.mark.parametrize("name,changes,nfe", [
    ("pcfm", {"steps": 5}, 5),
    ("eci", {"steps": 5, "n_mix": 2}, 10),
    ("eci", {"steps": 4, "n_mix": 1, "resample_step": 0}, 4),
    ("ccfm", {"steps": 5}, 5),
])
def test_hard_constraint_float64_and_nfe(env, name, changes, nfe):
    method = build(env, name, dtype="float64", **changes)
    x = draw(method)
    assert x.dtype == torch.float64
    assert method.nfe.count == nfe
    assert mass(method.task, x).abs().max() <= 1e-6
    assert method.state_dict() == {}


def test_pcfm_defaults_and_float32(env):
    method = build(env, "pcfm")
    assert method.config.steps == 20 and method.config.damping == 1e-6
    x = draw(method)
    assert method.nfe.count == 20
    assert mass(method.task, x).abs().max() <= 1e-4  # float32 round-off


class _NonlinearBurgers(TASKS.get("burgers")):
    """Burgers with a nonlinear constraint: the spatial mean of u^2 is conserved."""

    def constraints(self):
        def energy(x, cond=None):
            e = x[:, 0].pow(2).mean(dim=-1)
            return e[:, 1:] - e[:, :1]

        return {"energy": Constraint("energy", energy, linear=False)}


def test_pcfm_nonlinear_constraint_and_eci_refuses(env):
    task0, ctx = env
    task = _NonlinearBurgers("smoke", data_dir=task0.data_dir, progress=False)
    reason = METHODS.get("eci").unsupported_reason(task)
    assert reason is not None and "\n" not in reason and "energy" in reason
    assert METHODS.get("pcfm").unsupported_reason(task) is None
    cls = METHODS.get("pcfm")
    method = cls(task, cls.Config.for_preset("smoke").replace(
        steps=4, dtype="float64", final_newton_steps=6, relax_iters=3), "cpu")
    method.context = ctx
    prepare(method).fit(task.dataset("train"), progress=False)
    x = draw(method)
    assert method.nfe.count == 4
    assert task.constraints()["energy"](x).abs().max() <= 1e-6


class _MassEnergyBurgers(TASKS.get("burgers")):
    """Burgers with the linear ``mass`` and the nonlinear ``energy`` constraint."""

    def constraints(self):
        return {**TASKS.get("burgers").constraints(self), **_NonlinearBurgers.constraints(self)}


def test_eci_linear_only_by_default_and_gauss_newton_extension(env):
    task0, ctx = env
    task = _MassEnergyBurgers("smoke", data_dir=task0.data_dir, progress=False)
    cls = METHODS.get("eci")
    assert cls.unsupported_reason(task) is None
    out = {}
    for mode in ("ignore", "gauss_newton"):
        cfg = cls.Config.for_preset("smoke").replace(steps=3, dtype="float64", nonlinear=mode,
                                                      newton_steps=4)
        method = cls(task, cfg, "cpu")
        method.context = ctx
        prepare(method).fit(task.dataset("train"), progress=False)
        x = draw(method)
        assert method.nfe.count == 3
        assert mass(task, x).abs().max() <= 1e-6
        out[mode] = task.constraints()["energy"](x).abs().max()
        assert method.record_extras()["eci_constraints"] == (
            ["mass"] if mode == "ignore" else ["mass", "energy"])
    assert out["gauss_newton"] < 1e-3 * out["ignore"]


def test_diffusionpde_guidance_reduces_constraint_at_equal_nfe(env):
    guided = build(env, "diffusionpde", steps=6)
    plain = build(env, "diffusionpde", steps=6, guidance=0.0)
    xg, xp = draw(guided, n=8), draw(plain, n=8)
    assert guided.nfe.count == plain.nfe.count == 2 * 6 - 1
    task = guided.task
    assert mass(task, xg).pow(2).sum() < 0.5 * mass(task, xp).pow(2).sum()
    # the residual term alone lowers the evaluator residual
    res = build(env, "diffusionpde", steps=6, guidance=1e-4, residual_weight=1.0,
                constraints=("mass",))
    xr = draw(res, n=8)
    assert task.residual(xr).pow(2).mean() < task.residual(xp).pow(2).mean()


def test_diffusionpde_default_is_the_reference_port_step(env):
    """PCFM ffm_sampler.guided_sample: v = mean of v(u, t) and v(u, t + dt) at the SAME u
    (detached), u1 = u + (1 - t) v, u <- u + v / n - eta grad_u L(u1).  The Heun option
    (predictor point, gradient through the network) is a different sampler."""
    steps, eta = 4, 2e-3
    method = build(env, "diffusionpde", steps=steps, guidance=eta, max_step_rms=1e9)
    assert method.config.step == "reference"
    got = draw(method, n=3, seed=5)
    z = method.noise(3, torch.Generator().manual_seed(5))  # the sampler's first draw
    dt = 1.0 / steps
    for k in range(steps):
        t = k * dt
        with torch.no_grad():
            v = method.velocity(z, t, None)
            if k < steps - 1:
                v = 0.5 * (v + method.velocity(z, t + dt, None))
        u1 = (z + (1 - t) * v).requires_grad_(True)
        (grad,) = torch.autograd.grad(method.guidance_loss(u1, None), u1)
        z = (z + dt * v - eta * grad).detach()
    torch.testing.assert_close(got, method.decode(z), rtol=1e-5, atol=1e-6)
    heun = build(env, "diffusionpde", steps=steps, guidance=eta, max_step_rms=1e9,
                 step="heun")
    for m, same in ((method, True), (heun, False)):  # where the second call is evaluated
        seen = []
        inner = m.velocity
        m.velocity = lambda z_, t_, c_, inner=inner, seen=seen: (
            seen.append((z_.detach().clone(), z_.requires_grad)) or inner(z_, t_, c_))
        draw(m, n=3, seed=5)
        assert m.nfe.count == 2 * steps - 1
        pairs = [(seen[2 * k][0], seen[2 * k + 1][0]) for k in range(steps - 1)]
        assert all(torch.equal(a, b) == same for a, b in pairs)
        assert any(g for _, g in seen) == (not same)  # heun: gradient through the network


def test_dflow_reduces_constraint_loss_and_counts_closures(env):
    method = build(env, "dflow", steps=3, iterations=4)
    draw(method)
    info = method.record_extras()
    assert info["dflow_constraint_loss_final"] < 0.5 * info["dflow_constraint_loss_initial"]
    evals = int(info["dflow_closure_evals"])
    assert 1 <= evals <= 5  # max_eval = 1.25 * 4
    assert method.nfe.count == (evals + 1) * 3


def test_cocogen_nfe_and_corrections(env):
    method = build(env, "cocogen", steps=8)
    x = draw(method)
    assert method.nfe.count == 8
    none = build(env, "cocogen", steps=8, correct_fraction=0.0, extra_corrections=0)
    x0 = draw(none)
    task = method.task
    assert task.residual(x).pow(2).mean() < task.residual(x0).pow(2).mean()


def test_ccfm_band_leaves_early_states_and_closes_at_one():
    from pcgbench.methods.ccfm import band_project

    torch.manual_seed(1)
    A = torch.randn(3, 8, dtype=torch.float64)

    def h(z, cond=None):
        return z.reshape(z.shape[0], -1) @ A.T

    z = torch.randn(5, 8, dtype=torch.float64)
    J = batched_jacobian(h, z[:1])
    inside = 0.05 * z  # |h(inside)| <= kappa (1 - t) ||A_i||: inside the band at t = 0.01
    assert (h(inside).abs() <= 0.674 * 0.99 * A.norm(dim=1)).all()
    assert torch.allclose(band_project(h, inside, 0.01, None, kappa=0.674, jac=J), inside)
    final = band_project(h, z, 1.0, None, kappa=0.674, jac=J)  # sigma = 0: exact
    assert h(final).abs().max() < 1e-10
    mid = band_project(h, z, 0.5, None, kappa=0.674, jac=J)
    beta = 0.674 * 1.0 * A.norm(dim=1)
    assert (h(mid / 0.5).abs() <= beta + 1e-10).all()


def test_score_from_velocity_matches_gaussian_toy():
    """Data N(mu, s^2), source N(0, 1): z_t = (1-t) z0 + t z1 ~ N(t mu, (1-t)^2 + t^2 s^2),
    exact FM velocity E[z1 - z0 | z_t = z] = mu + (t s^2 - (1-t)) (z - t mu) / var_t."""
    mu, s = 1.3, 0.7
    z = torch.linspace(-4, 4, 41, dtype=torch.float64)
    for t in (0.05, 0.3, 0.6, 0.9, 0.99):
        var = (1 - t) ** 2 + t**2 * s**2
        v = mu + (t * s**2 - (1 - t)) * (z - t * mu) / var
        exact = -(z - t * mu) / var
        assert torch.allclose(score_from_velocity(v, z, t), exact, atol=1e-12)


def test_end_to_end_run_reuses_backbone(env):
    task, ctx = env
    opts = RunOptions(task="burgers", method="pcfm", preset="smoke", progress=False,
                      results_dir=ctx.results_dir, data_dir=ctx.data_dir,
                      overrides={"steps": 3}, timing_repeats=1)
    record, path, skipped = run(opts)
    assert not skipped and record["nfe"] == 3
    assert record["training"]["backbone"] == "fm_ot"
    assert record["parameters"] > 0
    path.unlink()  # rerun: the (empty) checkpoint is loaded and the backbone re-attached
    record2, _, skipped = run(opts)
    assert not skipped and record2["training"]["checkpoint_reused"] is True
    assert record2["nfe"] == 3 and record2["metrics"] == record["metrics"]


def test_dflow_chi_penalty_is_shifted_to_zero_and_keeps_float32_resolution():
    from pcgbench.methods.dflow import DFlow

    d = 51 * 128  # a Burgers cpu field
    z = torch.randn(4, 1, 51, 128, generator=torch.Generator().manual_seed(0))
    on_shell = z / z.reshape(4, -1).norm(dim=1).view(4, 1, 1, 1) * math.sqrt(d - 1)
    assert DFlow.chi_penalty(on_shell).abs().max() < 1e-2  # its minimum is 0
    pen = DFlow.chi_penalty(z)
    assert (pen >= -1e-2).all() and pen.max() < 10.0  # O(1), not -2.5e4
    # a 1e-3 change of the constraint part is visible in the float32 total
    total = (0.01 * pen).sum()
    assert float(total + 1e-3) != float(total)


def test_damped_gram_solve_is_scale_aware_on_rank_deficient_float32_grams():
    """Darcy's Gram (eigenvalues 0 to 6e7, rank-deficient) made the float32 solve of
    J J^T + 1e-6 I ill-posed (one cpu PCFM sample in 64 reached 3.4e17).  With damping
    relative to mean(diag J J^T) = c and a float64 solve, every step obeys the Tikhonov
    bound ||J^T (J J^T + mu I)^-1 h|| <= ||h|| / (2 sqrt(mu)), mu = 1e-6 c, whatever the
    row scales, and stays float32 and finite."""
    from pcgbench.methods._sampling import damp, spd_solve

    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        k, n = 64, 96
        jac = torch.randn(1, k, n, generator=g) * torch.exp(3 * torch.randn(1, k, 1, generator=g))
        jac[:, -1] = jac[:, :-1].sum(1)  # a dependent row: the Gram is singular
        jac = 1e3 * jac
        h = torch.randn(1, k, 1, generator=g)
        s = jac @ jac.transpose(1, 2)
        mu = 1e-6 * float(s.diagonal(dim1=-2, dim2=-1).mean())
        step = jac.transpose(1, 2) @ spd_solve(damp(s, 1e-6), h, damped=True)
        assert step.dtype == torch.float32 and torch.isfinite(step).all()
        assert float(step.norm()) <= 1.01 * float(h.norm()) / (2 * mu**0.5)
    # damping 0 is no damping (the final exact projection keeps using the pseudo-inverse)
    assert torch.equal(damp(s, 0.0), s)
