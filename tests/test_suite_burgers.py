"""Constrained-PDE suite, inviscid Burgers (``burgers_ic``, ``burgers_bc``): the Godunov
solver (exact Riemann fluxes, constant states, Rankine-Hugoniot shock speed, L1
convergence, conservation), the tasks' data and constraints (zero to round-off on the
solver's own data, non-zero off it), the charts (affine, closed-form mass shift,
Gauss-Newton) and a smoke PMosFM run through the runner."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from pcgbench.charts import AffineNullSpaceChart, decoder_certificates
from pcgbench.errors import PcgError
from pcgbench.registry import METRICS
from pcgbench.stages.runner import RunOptions, run
from pcgbench.tasks._burgers_suite import generate_trajectories, suite_params
from pcgbench.tasks._burgers_suite.solver import (
    burgers_flux,
    check_cfl,
    godunov_flux,
    mass_balance,
    solve_inflow_outflow,
    solve_periodic,
    solve_zero_flux,
    update_residual,
)
from pcgbench.tasks.burgers_bc import BurgersBCTask
from pcgbench.tasks.burgers_ic import BurgersICTask

F64 = torch.float64
SUITE_TASKS = (BurgersICTask, BurgersBCTask)


def _riemann_cell_averages(nx: int, x0: float, ul: float, ur: float):
    """Cell averages of the step ``ul 1{x < x0} + ur 1{x > x0}`` on the nodes of [0, 1]."""
    dx = 1.0 / (nx - 1)
    x = torch.arange(nx, dtype=F64) * dx
    frac = ((x0 - (x - dx / 2)) / dx).clamp(0.0, 1.0)
    return ul * frac + ur * (1.0 - frac), x, dx


def _riemann_final(nx: int, ul: float, ur: float, x0: float):
    """Godunov solution at t = 1 (dt = dx, inflow ul, zero-gradient outflow)."""
    u0, x, dx = _riemann_cell_averages(nx, x0, ul, ur)
    return solve_inflow_outflow(u0[None], ul, nx - 1, 1.0)[0, -1], x, dx


# -- solver ------------------------------------------------------------------------------------
def test_godunov_flux_is_the_exact_riemann_flux():
    """G(ul, ur) = f(u*(x/t = 0)) of the exact Riemann solution, on random state pairs
    (shocks moving either way, rarefactions, transonic rarefactions)."""
    g = torch.Generator().manual_seed(0)
    ul, ur = (torch.rand(2, 4000, generator=g, dtype=F64) * 4 - 2).unbind(0)
    shock_speed = 0.5 * (ul + ur)
    u_star = torch.where(ul > ur, torch.where(shock_speed > 0, ul, ur),
                         torch.where(ul >= 0, ul, torch.where(ur <= 0, ur, 0.0)))
    assert torch.allclose(godunov_flux(ul, ur), burgers_flux(u_star), rtol=0, atol=1e-15)
    pos = ul.abs(), ur.abs()
    assert torch.equal(godunov_flux(*pos), burgers_flux(pos[0]))  # upwind for u >= 0
    assert float(godunov_flux(torch.tensor(-0.5), torch.tensor(0.5))) == 0.0  # transonic


def test_constant_state_stays_constant():
    for c in (0.0, 0.37, 1.0):
        u0 = torch.full((3, 21), c, dtype=F64)
        assert torch.equal(solve_inflow_outflow(u0, c, 20, 1.0), torch.full((3, 21, 21), c,
                                                                            dtype=F64))
        assert torch.equal(solve_periodic(u0, 20, 1.0)[:, -1], u0)


def test_cfl_is_checked():
    check_cfl(torch.tensor([1.0, -0.5]), 1.0)
    with pytest.raises(PcgError, match="CFL"):
        check_cfl(torch.tensor([0.2, 1.01]), 1.0)
    with pytest.raises(PcgError, match="CFL"):
        solve_inflow_outflow(torch.zeros(1, 8), 1.5, 3, 1.0)


def test_shock_moves_at_rankine_hugoniot_speed_first_order_in_l1():
    """u_L = 0.8 > u_R = 0.2 from x0 = 0.25: a shock at speed (u_L + u_R)/2 = 0.5, so at
    x = 0.75 at t = 1.  The discrete shock sits there to 1e-6 dx on every grid and the
    L1 error halves with dx (observed order 1.000)."""
    ul, ur, x0 = 0.8, 0.2, 0.25
    errs = []
    for nx in (101, 201, 401, 801):
        u, x, dx = _riemann_final(nx, ul, ur, x0)
        mid = 0.5 * (ul + ur)
        i = int((u < mid).nonzero()[0])
        x_shock = float(x[i - 1] + (u[i - 1] - mid) / (u[i - 1] - u[i]) * dx)
        assert abs(x_shock - (x0 + 0.5 * (ul + ur))) < 1e-6 * dx
        exact = torch.where(x < x0 + 0.5 * (ul + ur), ul, ur)
        errs.append(dx * float((u - exact).abs().sum()))
    orders = [math.log2(errs[i] / errs[i + 1]) for i in range(len(errs) - 1)]
    print("shock L1 errors", errs, "orders", orders)
    assert all(abs(o - 1.0) < 0.02 for o in orders)


def test_rarefaction_converges_at_first_order_up_to_log():
    """u_L = 0.2 < u_R = 0.8 from x0 = 0.1: the fan u = (x - x0)/t.  The L1 error is
    C dx log(1/dx) (the fan's corners; measured C = 0.226..0.231): observed orders
    0.79, 0.81, 0.83 rising toward 1, and error / (dx log(1/dx)) constant within 3 %."""
    ul, ur, x0 = 0.2, 0.8, 0.1
    errs, scaled = [], []
    for nx in (101, 201, 401, 801):
        u, x, dx = _riemann_final(nx, ul, ur, x0)
        exact = (x - x0).clamp(ul, ur)
        errs.append(dx * float((u - exact).abs().sum()))
        scaled.append(errs[-1] / (dx * math.log(1 / dx)))
    orders = [math.log2(errs[i] / errs[i + 1]) for i in range(len(errs) - 1)]
    print("rarefaction L1 errors", errs, "orders", orders, "C", scaled)
    assert all(0.75 < o < 1.0 for o in orders) and orders == sorted(orders)
    assert max(scaled) / min(scaled) < 1.03


@pytest.mark.parametrize("solver", [solve_periodic, solve_zero_flux])
def test_conservation_with_periodic_and_zero_flux_boundaries(solver):
    g = torch.Generator().manual_seed(1)
    x = torch.arange(64, dtype=F64) / 64
    amp = torch.rand(4, 3, 1, generator=g, dtype=F64)
    u0 = (amp * torch.sin(2 * math.pi * torch.arange(1, 4)[:, None] * x)).sum(1) / 3
    u = solver(u0, 200, 0.9)  # shocks form; lam max|u| <= 0.9
    drift = (u.sum(-1) - u0.sum(-1)[:, None]).abs().max()
    assert float(drift) < 1e-13
    assert float((u[:, -1] - u0).abs().max()) > 0.05  # it did evolve


def test_mass_balance_is_the_summed_update_residual_for_any_field():
    """cl = dx cumsum_n sum_j r_j^n (algebraic identity of the scheme), on a random field."""
    g = torch.Generator().manual_seed(2)
    u = torch.randn(3, 9, 12, generator=g, dtype=F64)
    dx, dt = 0.1, 0.1
    lhs = mass_balance(u, dx, dt)
    rhs = dx * torch.cumsum(update_residual(u, dt / dx).sum(-1), dim=-1)
    assert torch.allclose(lhs, rhs, rtol=0, atol=1e-13)


# -- tasks: data, constraints, evaluator -----------------------------------------------------
@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    d = tmp_path_factory.mktemp("burgers_suite_data")
    tasks = {cls.name: cls("smoke", data_dir=d, progress=False) for cls in SUITE_TASKS}
    data = {name: {s: t.dataset(s) for s in ("train", "val", "test")}
            for name, t in tasks.items()}
    return tasks, data


def test_presets_keep_dt_over_dx_one_and_protocol_sizes():
    for preset in ("smoke", "cpu", "paper"):
        p = suite_params(preset)
        assert p.lam == pytest.approx(1.0) and p.nx == p.nt
    p = suite_params("paper")
    assert (p.nx, p.nt, p.n_train, p.n_test, p.n_per_group) == (101, 101, 6400, 10240, 512)
    assert (p.seed_train, p.seed_test, p.godunov_steps) == (42, 42, 5)


def test_conditions_reproduce_pcfm_draws_and_group_structure(smoke):
    tasks, data = smoke
    p = tasks["burgers_ic"].params
    rng = np.random.RandomState(42)
    ics, bcs = rng.uniform(0.2, 0.8, p.n_ic_train), rng.uniform(0.0, 1.0, p.n_bc_train)
    ic, bc = tasks["burgers_ic"].conditions("train")
    assert np.array_equal(ic, np.repeat(ics, p.n_bc_train))
    assert np.array_equal(bc, np.tile(bcs, p.n_ic_train))
    for name, task in tasks.items():
        test, val = data[name]["test"], data[name]["val"]
        assert test.cond.shape == (p.n_groups * p.n_per_group, task.spec.cond_dim)
        groups = test.cond.reshape(p.n_groups, p.n_per_group, -1)
        assert torch.equal(groups, groups[:, :1].expand_as(groups))  # one cond per group
        assert torch.equal(val.cond, test.cond)  # same fixed conditions ...
        assert not torch.equal(val.x, test.x)  # ... independent other draws
    # BC task: the fixed BCs are the first draws of seed 42 (PCFM's diffBCs order)
    fixed = tasks["burgers_bc"].conditions("test")[1][:: p.n_per_group]
    assert np.array_equal(fixed, np.random.RandomState(42).uniform(0.0, 1.0, p.n_groups))


def test_generation_is_deterministic_and_float32(smoke):
    tasks, data = smoke
    again = tasks["burgers_ic"].generate("test")
    assert again.x.dtype == torch.float32 and torch.equal(again.x, data["burgers_ic"]["test"].x)


@pytest.mark.parametrize("cls", SUITE_TASKS)
def test_constraints_zero_on_solver_data_nonzero_off_it(cls, smoke):
    tasks, data = smoke
    task = tasks[cls.name]
    test = data[cls.name]["test"]
    # float64 solver output, before storage: zero to float64 round-off
    ic, bc = task.conditions("test")
    p = task.params
    x64 = torch.stack([solve_inflow_outflow(
        torch.sigmoid(-(torch.linspace(0, 1, p.nx, dtype=F64) - float(a)) / p.front_width)[None],
        float(b), p.nt - 1, p.lam)[0] for a, b in zip(ic, bc, strict=True)])[:, None]
    assert torch.allclose(x64.float(), test.x)
    cond64 = torch.from_numpy(bc)[:, None] if cls is BurgersBCTask else x64[:, 0, 0]
    g = torch.Generator().manual_seed(3)
    noise = 1e-2 * torch.randn(test.x.shape, generator=g)
    for name, con in task.constraints().items():
        assert float(con(x64, cond64).abs().max()) < 1e-14, name
        assert float(con(test.x, test.cond).abs().max()) < 1e-6, name  # stored float32
        assert float(con(test.x + noise, test.cond).norm(dim=1).min()) > 1e-3, name
    assert float(task.residual(x64).abs().max()) < 1e-12
    assert float(task.residual(test.x + noise).pow(2).mean().sqrt()) > 0.1


def test_constraint_shapes(smoke):
    tasks, data = smoke
    p = tasks["burgers_ic"].params
    x = data["burgers_ic"]["test"].x[:2]
    shapes = {k: tuple(c(x, data["burgers_ic"]["test"].cond[:2]).shape)
              for k, c in tasks["burgers_ic"].constraints().items()}
    assert shapes == {"ic": (2, p.nx), "godunov": (2, 5 * (p.nx - 2)), "cl": (2, p.nt - 1)}
    shapes = {k: tuple(c(x, data["burgers_bc"]["test"].cond[:2]).shape)
              for k, c in tasks["burgers_bc"].constraints().items()}
    assert shapes == {"bc": (2, 2 * (p.nt - 1)), "cl": (2, p.nt - 1)}
    assert tuple(tasks["burgers_ic"].residual(x).shape) == (2, p.nt - 1, p.nx - 2)


def test_generate_rejects_cfl_violation():
    p = suite_params("smoke")
    with pytest.raises(PcgError, match="CFL"):
        generate_trajectories(p, np.array([0.5]), np.array([1.5]))


# -- charts -------------------------------------------------------------------------------------
def _perturbed_coords(chart, x, cond, sigma: float, seed: int = 0):
    y = chart.encode(x, cond)
    g = torch.Generator().manual_seed(seed)
    return y + sigma * torch.randn(y.shape, generator=g, dtype=y.dtype)


@pytest.mark.parametrize("cls,name", [(BurgersICTask, "ic"), (BurgersBCTask, "bc")])
def test_affine_charts_exact(cls, name, smoke):
    tasks, data = smoke
    task, test = tasks[cls.name], data[cls.name]["test"]
    chart = task.chart(name)
    x, c = test.x, test.cond
    assert torch.equal(chart.decode(chart.encode(x, c), c), x)  # exact on data
    y = _perturbed_coords(chart, x, c, 0.5)
    xd = chart.decode(y, c)
    ce = task.constraints()[name](xd, c).norm(dim=1).mean()
    assert float(ce) <= 1e-5 and float(chart.residual(xd, c).abs().max()) == 0.0
    assert torch.equal(chart.decode(chart.encode(xd, c), c), xd)  # projection is idempotent


def test_inflow_outflow_chart_matches_dense_affine_projection(smoke):
    """The 0/1-basis BC chart and AffineNullSpaceChart (SVD null space) of the same
    constraint give the same M-orthogonal projection, for a non-uniform metric; the exact
    geometry is the pullback G = N^T M N."""
    tasks, data = smoke
    task = tasks["burgers_bc"]
    p = task.params
    chart = task.chart("bc").double()
    n = p.nt * p.nx
    rows = []
    for t in range(1, p.nt):
        e = torch.zeros(p.nt, p.nx, dtype=F64)
        e[t, 0] = 1.0
        rows.append(e.flatten())
        e = torch.zeros(p.nt, p.nx, dtype=F64)
        e[t, -1], e[t, -2] = 1.0, -1.0
        rows.append(e.flatten())
    A = torch.stack(rows)

    def b_fn(c):
        z = torch.zeros(c.shape[0], p.nt - 1, 2, dtype=F64)
        z[..., 0] = c[:, :1]
        return z.reshape(c.shape[0], -1)

    g = torch.Generator().manual_seed(4)
    w = 0.5 + torch.rand(1, p.nt, p.nx, generator=g, dtype=F64)
    dense = AffineNullSpaceChart(A, b_fn=b_fn, field_shape=(1, p.nt, p.nx), weights=w)
    chart.set_metric_weights(w)
    x = torch.randn(5, 1, p.nt, p.nx, generator=g, dtype=F64)
    c = data["burgers_bc"]["test"].cond[:5].double()
    proj = chart.decode(chart.encode(x, c), c)
    assert torch.allclose(proj, dense.decode(dense.encode(x, c), c), atol=1e-12)
    y = chart.encode(x, c)
    v = torch.randn(y.shape, generator=g, dtype=F64)
    gv = chart.pullback_matvec(y, v, c)
    assert torch.allclose(gv, chart.coordinate_metric() * v, atol=1e-12)
    assert n == chart.field_dim


@pytest.mark.parametrize("cls", SUITE_TASKS)
def test_shift_chart_exact_for_all_constraints(cls, smoke):
    tasks, data = smoke
    task, test = tasks[cls.name], data[cls.name]["test"]
    chart = task.chart()  # default
    assert task.charts() and next(iter(task.charts())) == "shift"
    x, c = test.x, test.cond
    assert float((chart.decode(chart.encode(x, c), c) - x).abs().max()) < 1e-6
    for dtype, tol in ((torch.float32, 1e-5), (F64, 1e-12)):
        ch = chart.to(dtype)
        y = _perturbed_coords(ch, x.to(dtype), c.to(dtype), 0.3)
        xd = ch.decode(y, c.to(dtype))
        for name, con in task.constraints().items():
            assert float(con(xd, c.to(dtype)).norm(dim=1).max()) < tol, (name, dtype)
    cert = decoder_certificates(chart.double(), y[:2], c[:2].double(), power_iters=3)
    assert cert["eps_dec"] < 1e-12 and cert["delta_dec"] < 1e-10


@pytest.mark.parametrize("cls", SUITE_TASKS)
def test_gauss_newton_chart_converges_to_tolerance(cls, smoke):
    """Briefed GN decoders (float64): from encoded test fields + N(0, 0.1^2) noise, 10
    iterations reach all constraints to 1e-12; decoder certificates at round-off."""
    tasks, data = smoke
    task, test = tasks[cls.name], data[cls.name]["test"]
    chart = task.chart("gauss_newton").double()
    x, c = test.x[:4].double(), test.cond[:4].double()
    y = _perturbed_coords(chart, x, c, 0.1)
    xd = chart.decode(y, c)
    for name, con in task.constraints().items():
        assert float(con(xd, c).norm(dim=1).max()) < 1e-12, name
    assert float(chart.residual(xd, c).norm(dim=1).max()) < 1e-12
    assert float((chart.decode(chart.encode(x, c), c) - x).abs().max()) < 1e-6
    cert = decoder_certificates(chart, y[:1], c[:1], power_iters=2)
    assert cert["eps_dec"] < 1e-12 and cert["delta_dec"] < 1e-8


# -- runner -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", SUITE_TASKS)
def test_pmosfm_smoke_run_satisfies_constraints(cls, tmp_path, monkeypatch):
    registered = tuple(m for m in cls.metrics if m in METRICS)
    monkeypatch.setattr(cls, "metrics", registered)  # guard: metrics written elsewhere
    record, _, skipped = run(RunOptions(
        task=cls.name, method="pmosfm", preset="smoke", results_dir=str(tmp_path / "r"),
        data_dir=str(tmp_path / "d"), progress=False, overrides={"iterations": 5}))
    assert not skipped and record["nfe"] == 1
    metrics = record["metrics"]
    assert metrics["nonfinite_fraction"] == 0.0
    for name in ("ce_ic", "ce_bc", "ce_cl"):
        if name in metrics:
            assert metrics[name] <= 1e-5, name
    assert math.isfinite(metrics["mmse"])


def test_bad_grids_are_one_line_errors():
    p = suite_params("smoke")
    short = BurgersICTask("smoke", progress=False, params=dataclasses.replace(p, nx=6, nt=6))
    with pytest.raises(PcgError, match="godunov_steps"):
        short.chart()
    narrow = BurgersBCTask("smoke", progress=False, params=dataclasses.replace(p, nx=4))
    with pytest.raises(PcgError, match="nx >= 5"):
        narrow.chart()
