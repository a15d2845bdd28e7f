"""Constrained-PDE suite tasks ``heat`` and ``reaction_diffusion_ic``: exact solutions,
solver identities and convergence order, constraints on the tasks' own data, charts, and a
PMosFM smoke run through the runner."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from pcgbench.charts import decoder_certificates
from pcgbench.registry import METRICS
from pcgbench.stages.runner import RunOptions, run
from pcgbench.tasks.heat import HeatTask, heat_residual
from pcgbench.tasks.reaction_diffusion_ic import ReactionDiffusionICTask
from pcgbench.tasks.reaction_diffusion_ic import solver as fk

RHO, NU = 0.01, 0.005


@pytest.fixture(scope="module")
def heat(tmp_path_factory):
    return HeatTask("smoke", data_dir=tmp_path_factory.mktemp("heat"), progress=False)


@pytest.fixture(scope="module")
def rd(tmp_path_factory):
    return ReactionDiffusionICTask("smoke", data_dir=tmp_path_factory.mktemp("rd"),
                                   progress=False)


@pytest.fixture(scope="module")
def rd_fine():
    """A few trajectories on the paper grid (128 cells, saved every 0.01 to 0.99)."""
    p = dataclasses.replace(ReactionDiffusionICTask.params_for("paper"), n_ic_train=3,
                            n_bc_train=3, n_groups=1, bc_per_group_val=1, bc_per_group_test=1)
    task = ReactionDiffusionICTask("paper", progress=False, params=p)
    return task, task.generate("train")


# -- heat --------------------------------------------------------------------------------
def test_heat_data_is_the_exact_solution(heat):
    p = heat.params
    x = 2 * np.pi * np.arange(p.nx) / p.nx
    t = np.linspace(0.0, 1.0, p.nt)
    for split in ("train", "val", "test"):
        data = heat.dataset(split)
        phi, nu = heat.parameters(split)
        assert ((phi >= 0) & (phi <= np.pi)).all() and ((nu >= 1) & (nu <= 5)).all()
        exact = np.sin(x[None, None] + phi[:, None, None]) * np.exp(-nu[:, None, None] * t[:, None])
        assert np.abs(data.x[:, 0].numpy() - exact).max() < 1e-6
        u0 = data.x[:, 0, 0].double()
        # unit-amplitude first harmonic: u0(x)^2 + u0(x + pi/2)^2 = 1 (nx divisible by 4)
        assert torch.allclose(u0**2 + torch.roll(u0, -p.nx // 4, dims=-1) ** 2,
                              torch.ones_like(u0), atol=1e-6)
        # every slice is u0 exp(-nu t) with one decay rate per row
        rate = -torch.log(data.x[:, 0, 1:].double().norm(dim=-1) / u0.norm(dim=-1)[:, None])
        rate = rate / torch.tensor(t[1:])
        assert torch.allclose(rate, torch.tensor(nu)[:, None].expand_as(rate), rtol=1e-5)


def test_heat_sampling_sets_are_grouped(heat):
    p = heat.params
    val, test, train = heat.dataset("val"), heat.dataset("test"), heat.dataset("train")
    assert torch.equal(train.cond, train.x[:, 0, 0])
    for data, per in ((val, p.per_group_val), (test, p.per_group_test)):
        assert len(data) == p.n_groups * per and torch.equal(data.cond, data.x[:, 0, 0])
        groups = data.cond.reshape(p.n_groups, per, -1)
        assert torch.equal(groups, groups[:, :1].expand_as(groups))
        assert torch.unique(data.cond, dim=0).shape[0] == p.n_groups
    assert torch.equal(val.cond[:: p.per_group_val], test.cond[:: p.per_group_test])
    assert not torch.equal(val.x[: p.per_group_val], test.x[: p.per_group_test])


def test_heat_constraints_vanish_on_data_only(heat):
    data = heat.dataset("test")
    x, c = data.x.double(), data.cond.double()
    cons = heat.constraints()
    assert cons["ic"].linear and cons["cl"].linear
    assert cons["ic"](x, c).abs().max() == 0
    assert cons["cl"](x, c).abs().max() < 1e-6
    bump = torch.zeros_like(x)
    bump[:, 0, 3, 2] = 0.1
    assert cons["cl"](x + bump, c)[:, 2].abs().min() > 0.1 * 2 * math.pi / x.shape[-1] * 0.99
    assert cons["ic"](x, c + 0.05).abs().min() > 0.049


def test_heat_residual_floor_converges_and_detects_non_solutions():
    """The best-fit-nu residual of exact data is second order in the grid (end-slice
    truncation only), and a non-heat field (wrong time profile) is far above it."""
    floors = []
    for n in (16, 32, 64):
        task = HeatTask("smoke", params=dataclasses.replace(HeatTask.params_for("smoke"),
                                                             nx=n, nt=n))
        x = task.generate("test").x.double()
        floors.append(float(task.residual(x).pow(2).mean(dim=(1, 2)).sqrt().mean()))
    assert floors[0] / floors[1] > 3.0 and floors[1] / floors[2] > 3.0
    task = HeatTask("smoke", params=dataclasses.replace(HeatTask.params_for("smoke"),
                                                         nx=64, nt=64))
    x = task.generate("test").x.double()
    t = torch.linspace(0, 1, 64, dtype=torch.float64).view(1, 1, -1, 1)
    wrong = x[:, :, :1] * (1 - t)  # linear instead of exponential decay
    r = task.residual(wrong).pow(2).mean(dim=(1, 2)).sqrt().mean()
    assert r > 100 * floors[2]
    # negative fitted diffusivity (growth) is clipped to 0: u_t itself is the residual
    grow = x[:, :, :1] * torch.exp(t)
    res = heat_residual(grow[:, 0], 1 / 63, 2 * math.pi / 64)
    assert torch.allclose(res[:, 1:-1], grow[:, 0, 1:-1], rtol=1e-3)


def test_heat_chart_is_exact_and_feasible(heat):
    chart = heat.chart()
    data = heat.dataset("test")
    x, c = data.x[:8], data.cond[:8]
    assert torch.allclose(chart.decode(chart.encode(x, c), c), x, atol=1e-6)
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(8, *chart.coord_shape, generator=gen)
    xd = chart.decode(y, c)  # float32, as PMosFM decodes
    cons = heat.constraints()
    for name in ("ic", "cl"):
        ce = cons[name](xd.double(), c.double()).norm(dim=1).mean()
        assert ce <= 1e-5, (name, float(ce))
    # encode o decode is the identity on the coordinate domain (mean-free slices)
    y0 = y - y.mean(dim=-1, keepdim=True)
    assert torch.allclose(chart.encode(chart.decode(y0, c), c), y0, atol=1e-5)


# -- Fisher-KPP solver -------------------------------------------------------------------
def test_uniform_data_follow_the_logistic_ode_exactly():
    t = 0.01 * torch.arange(100, dtype=torch.float64)
    u0 = torch.tensor([0.0, 0.3, 0.9, 1.2], dtype=torch.float64)[:, None].expand(4, 16)
    for rho in (RHO, 3.0):
        sol = fk.solve_fisher_kpp(u0, 0.0, 0.0, t, rho, NU)
        e = torch.exp(rho * t)[None, :, None]
        exact = u0[:, None] * e / (1 + u0[:, None] * (e - 1))
        assert (sol - exact).abs().max() < 1e-13


def test_diffusion_is_second_order_in_space():
    """Neumann cosine mode cos(2 pi x) (rho = 0, zero flux) against its exact decay."""
    t = torch.linspace(0, 1, 6, dtype=torch.float64)
    errors = []
    for nx in (16, 32, 64):
        x = torch.tensor(fk.cell_centres(nx))
        sol = fk.solve_fisher_kpp(torch.cos(2 * math.pi * x)[None], 0.0, 0.0, t, 0.0, NU)
        exact = torch.cos(2 * math.pi * x) * torch.exp(-NU * (2 * math.pi) ** 2 * t)[:, None]
        errors.append(float((sol[0] - exact).abs().max()))
    orders = [math.log2(errors[i] / errors[i + 1]) for i in range(2)]
    assert all(1.9 < o < 2.1 for o in orders), orders


def test_flux_boundaries_sign_and_mass_balance():
    """A linear profile carrying the boundary flux g is steady; with rho = 0 the mass grows
    by exactly t (g_L - g_R)."""
    nx, t = 32, torch.linspace(0, 1, 11, dtype=torch.float64)
    x = torch.tensor(fk.cell_centres(nx))
    g = 0.03
    u0 = (0.5 - g / NU * x)[None]
    assert (fk.solve_fisher_kpp(u0, g, g, t, 0.0, NU) - u0[:, None]).abs().max() < 1e-13
    u0 = torch.rand(3, nx, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    gl, gr = torch.tensor([0.05, 0.0, 0.02]), torch.tensor([-0.05, -0.01, 0.0])
    sol = fk.solve_fisher_kpp(u0, gl, gr, t, 0.0, NU)
    assert fk.mass_balance_residual(sol, gl, gr, 0.0, 0.1).abs().max() < 1e-14


def test_prescribed_flux_balance_holds_on_the_paper_grid(rd_fine):
    task, data = rd_fine
    u0, gl, gr = task.conditions("train")
    traj = fk.solve_fisher_kpp(torch.from_numpy(u0), torch.from_numpy(gl),
                               torch.from_numpy(gr), task.times, RHO, NU)
    assert torch.equal(traj.float(), data.x[:, 0])
    r = fk.mass_balance_residual(traj, torch.from_numpy(gl), torch.from_numpy(gr), RHO, 0.01)
    assert r.abs().max() < 2e-6  # trapezoid error of the reaction integral only


# -- reaction_diffusion_ic task ------------------------------------------------------------
def test_rd_data_family_and_sampling_sets(rd):
    p = rd.params
    train, val, test = rd.dataset("train"), rd.dataset("val"), rd.dataset("test")
    for data in (train, val, test):
        assert torch.equal(data.cond, data.x[:, 0, 0])
        u0 = data.cond.double()
        assert torch.allclose(u0.amin(1), torch.zeros(len(u0), dtype=torch.float64))
        assert torch.allclose(u0.amax(1), torch.ones(len(u0), dtype=torch.float64))
    first_ics = train.cond[:: p.n_bc_train][: p.n_groups]
    for data, per in ((val, p.bc_per_group_val), (test, p.bc_per_group_test)):
        groups = data.cond.reshape(p.n_groups, per, -1)
        assert torch.equal(groups, first_ics[:, None].expand_as(groups))
    for split in ("train", "val", "test"):
        _, gl, gr = rd.conditions(split)
        assert ((gl >= 0) & (gl <= 0.05)).all() and ((gr >= -0.05) & (gr <= 0)).all()
        assert np.allclose(gl * 1000, np.round(gl * 1000))
    assert not torch.equal(val.x, test.x)


def test_rd_constraints_on_data_and_perturbations(rd, rd_fine):
    cons = rd.constraints()
    assert cons["ic"].linear and not cons["cl"].linear
    task, fine = rd_fine
    x, c = fine.x.double(), fine.cond.double()
    assert task.constraints()["ic"](x, c).abs().max() == 0
    cl = task.constraints()["cl"](x, c)
    assert cl.norm(dim=1).max() < 1e-3  # trapezoid floor of the boundary-layer transient
    assert cl[:, 1:].sub(cl[:, :1]).abs().max() < 5e-5  # after the first save interval
    bump = torch.zeros_like(x)
    bump[:, 0, 40:, 60:68] = 0.02  # an interior mass jump of 1.25e-3 at t = 0.4
    assert task.constraints()["cl"](x + bump, c)[:, 45:].abs().min() > 1e-3
    data = rd.dataset("test")
    x, c = data.x.double(), data.cond.double()
    assert cons["ic"](x, c).abs().max() == 0
    assert cons["cl"](x, c).norm(dim=1).max() < 3e-3  # smoke: dt_save = 0.09


def test_rd_residual_floor_and_sensitivity(rd_fine):
    task, data = rd_fine
    x = data.x.double()
    r = task.residual(x)
    assert r.shape == (len(x), task.params.nt, task.params.nx - 2)
    floor = r[:, 2:].pow(2).mean(dim=(1, 2)).sqrt().mean()
    assert floor < 5e-3  # away from the initial boundary layer
    u0, gl, gr = task.conditions("train")
    other = fk.solve_fisher_kpp(torch.from_numpy(u0), torch.from_numpy(gl),
                                torch.from_numpy(gr), task.times, RHO, 4 * NU)
    wrong = task.residual(other[:, None])[:, 2:].pow(2).mean(dim=(1, 2)).sqrt().mean()
    assert wrong > 5 * floor


def test_rd_chart_decodes_feasible_fields(rd):
    chart = rd.chart()
    data = rd.dataset("test")
    c = data.cond[:6].double()
    chart = chart.double()
    y = chart.encode(data.x[:6].double(), c)
    y = y + 0.3 * torch.randn(y.shape, generator=torch.Generator().manual_seed(0),
                              dtype=y.dtype)
    xd = chart.decode(y, c)
    cons = rd.constraints()
    assert cons["ic"](xd, c).abs().max() == 0
    assert cons["cl"](xd, c).norm(dim=1).max() < 1e-12
    cert = decoder_certificates(chart, y, c)
    assert cert["eps_dec"] < 1e-12 and cert["delta_dec"] < 1e-10
    # float32, as PMosFM decodes: within the declared tolerance
    chart32 = chart.float()
    x32 = chart32.decode(y.float(), c.float())
    assert chart32.residual(x32, c.float()).norm(dim=1).max() <= chart32.tolerance
    # data are a (near-)fixed point: the projection moves them by the data floor only
    back = chart32.decode(chart32.encode(data.x[:6], data.cond[:6]), data.cond[:6])
    assert (back - data.x[:6]).abs().max() < 5e-3


# -- PMosFM through the runner -------------------------------------------------------------
@pytest.mark.parametrize("name", ["heat", "reaction_diffusion_ic"])
def test_pmosfm_smoke_run(name, tmp_path, monkeypatch):
    cls = {"heat": HeatTask, "reaction_diffusion_ic": ReactionDiffusionICTask}[name]
    # metrics written by another module may not be registered yet: evaluate those present
    monkeypatch.setattr(cls, "metrics", tuple(m for m in cls.metrics if m in METRICS))
    opts = RunOptions(task=name, method="pmosfm", preset="smoke", progress=False,
                      results_dir=str(tmp_path / "r"), data_dir=str(tmp_path / "d"),
                      overrides={"iterations": 2}, timing_repeats=1)
    record, path, skipped = run(opts)
    assert not skipped and path.exists() and record["nfe"] == 1
    m = record["metrics"]
    assert m["nonfinite_fraction"] == 0.0 and math.isfinite(m["mmse"])
    for ce in ("ce_ic", "ce_cl"):
        if ce in m:
            assert m[ce] <= 1e-5


@pytest.mark.parametrize("preset", ["smoke", "cpu", "paper"])
def test_rd_rows_shared_with_training_are_declared(preset):
    """Sampling-set rows equal to training rows (same IC, same rounded fluxes) occur by
    design (PCFM's protocol); the task must declare them, else the split guard refuses
    its data (it did at ``cpu``: 3 of 128 val rows).  Conditions only, no solve."""
    task = ReactionDiffusionICTask(preset, progress=False)
    train = {row.tobytes() for row in np.column_stack(task.conditions("train"))}
    shared = sum(row.tobytes() in train
                 for split in ("val", "test")
                 for row in np.column_stack(task.conditions(split)))
    if shared:
        assert task.overlap_reason("train/val") and task.overlap_reason("train/test")


@pytest.mark.parametrize("preset", ["smoke", "cpu"])
def test_the_mass_balance_jacobian_in_closed_form_is_autograds(preset):
    """The ``ic_mass`` chart's closed-form D_u h equals the generic vmap of jacrev (float64,
    random rows and ICs), and both charts decode to the same fields."""
    import torch

    from pcgbench.registry import TASKS

    task = TASKS.get("reaction_diffusion_ic")(preset=preset, progress=False)
    chart = task.ic_mass_chart()
    gen = torch.Generator().manual_seed(1)
    u = torch.rand(3, *chart.coord_shape, generator=gen, dtype=torch.float64)
    cond = torch.rand(3, task.spec.cond_dim, generator=gen, dtype=torch.float64)
    closed = chart._jacobian(u.reshape(3, -1), cond)
    plain = task.ic_mass_chart()
    plain.jacobian = None
    auto = plain._jacobian(u.reshape(3, -1), cond)
    assert closed.shape == auto.shape == (3, chart.coord_shape[1], u[0].numel())
    torch.testing.assert_close(closed, auto, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(chart.decode(u, cond), plain.decode(u, cond))
