"""Dynamic-stall surrogate generator: exact closures, NACA0012 geometry, panel method,
compressibility limits, unsteady lag and dynamic-stall hysteresis, realizations, wall
state bounds and input checks (all small: 32-64 points, a few conditions)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pcgbench.errors import PcgError
from pcgbench.tasks.dynamic_stall import solver as ds

ATTACHED = [0.3, 5.0, 5.0, 0.05]  # alpha in [0, 10] deg, below alpha1 = 15.25 deg
DEEP = [0.5, 10.0, 10.0, 0.1]  # alpha up to 20 deg, alpha1 = 10.5 deg at M = 0.5


@pytest.fixture(scope="module")
def fields() -> np.ndarray:
    """Rows: attached, deep stall (nominal), then 2 perturbed realizations of a mid case."""
    nominal = ds.surface_fields(np.array([ATTACHED, DEEP]), 64, 64)
    rng = np.random.default_rng(5)
    pert = ds.surface_fields(np.array([[0.4, 7.5, 7.5, 0.075]]), 64, 64, rng=rng,
                             realizations=2)
    return np.concatenate([nominal, pert])


def _rms(a: np.ndarray) -> float:
    return float(np.sqrt((a**2).mean()))


def test_closures_exact(fields: np.ndarray):
    assert fields.shape == (4, 8, 64, 64) and fields.dtype == np.float64
    p, dx, dy, T, rho, tau, sx, sy = (fields[:, i] for i in range(8))
    assert np.abs(ds.gas_residual(p, rho, T)).max() <= 1e-10 * _rms(p)
    assert np.abs(ds.shear_residual(tau, dx, dy, T, sx, sy)).max() <= 1e-10 * _rms(tau)
    # the same functions on torch tensors (arithmetic only) agree with numpy
    tt = [torch.from_numpy(fields[:, i].copy()) for i in range(8)]
    r_t = ds.shear_residual(tt[5], tt[1], tt[2], tt[3], tt[6], tt[7])
    assert torch.is_tensor(r_t) and float(r_t.abs().max()) <= 1e-10 * _rms(tau)
    assert float(ds.gas_residual(tt[0], tt[4], tt[3]).abs().max()) <= 1e-10 * _rms(p)
    mu_t = ds.sutherland(torch.tensor([300.0], dtype=torch.float64))
    assert abs(float(mu_t) - ds.sutherland(300.0)) < 1e-20
    assert abs(ds.sutherland(ds.T_SUTH) - ds.MU0) < 1e-20
    # the direction channels are the unit normal; the gradient is not purely normal
    assert np.allclose(sx**2 + sy**2, 1.0, atol=1e-14)
    tangential = np.abs(dx * sy - dy * sx)
    assert (tangential > 0).mean() > 0.5
    assert tangential.max() < 0.05 * np.abs(dx * sx + dy * sy).max()


def test_naca0012_geometry():
    x = np.linspace(0.0, 1.0, 20001)
    yt = ds.naca0012_half_thickness(x)
    i = int(np.argmax(yt))
    assert abs(2 * yt[i] - 0.12) < 2e-4 and abs(x[i] - 0.30) < 0.01
    assert abs(yt[-1]) < 1e-15  # closed trailing edge
    nodes = ds.airfoil_nodes(40)
    assert np.array_equal(nodes[0], nodes[-1]) and np.array_equal(nodes[20], [0.0, 0.0])
    assert (nodes[1:20, 1] < 0).all() and (nodes[21:40, 1] > 0).all()
    for n in (32, 64):
        g = ds.surface_geometry(n)
        assert np.allclose(g.tx**2 + g.ty**2, 1) and np.allclose(g.nx**2 + g.ny**2, 1)
        assert np.allclose(g.tx * g.nx + g.ty * g.ny, 0, atol=1e-15)
        assert (np.diff(g.theta) > 0).all() and (g.y[: n // 2] < 0).all()
        assert (g.y[n // 2:] > 0).all() and (np.diff(g.x[: n // 2]) < 0).all()
        # a small step along n leaves the airfoil (into the fluid), one against n enters
        px, py = g.x + 1e-5 * g.nx, g.y + 1e-5 * g.ny
        inside = (px > 0) & (px < 1) & (np.abs(py) < ds.naca0012_half_thickness(
            np.clip(px, 0, 1)))
        assert not inside.any()
        mx, my = g.x - 1e-5 * g.nx, g.y - 1e-5 * g.ny
        assert ((mx > 0) & (np.abs(my) < ds.naca0012_half_thickness(np.clip(mx, 0, 1)))).all()


def test_panel_method():
    x, y, cp = ds.panel_cp(0.0)
    assert np.abs(cp - cp[::-1]).max() < 1e-10  # symmetric airfoil, symmetric Cp
    assert np.allclose(x, x[::-1]) and np.allclose(y, -y[::-1])
    assert -0.45 < cp.min() < -0.38 and 0.95 < cp.max() <= 1.0
    assert abs(float(ds.lift_coefficient(0.0))) < 1e-10
    da = math.radians(1.0)
    slope = float(ds.lift_coefficient(da) - ds.lift_coefficient(-da)) / (2 * da)
    target = 2 * math.pi * (1 + 0.77 * 0.12)
    assert abs(slope / target - 1) < 0.10, slope
    cl5 = float(ds.lift_coefficient(math.radians(5.0)))
    assert 0.55 <= cl5 <= 0.65, cl5


def test_compressibility_limits():
    cp0 = np.linspace(-5.0, 1.0, 25)
    for m in (1e-3, 1e-4):
        assert np.abs(ds.karman_tsien(cp0, m) - cp0).max() < 1e-5
        assert np.abs(ds.prandtl_glauert(cp0, m) - cp0).max() < 1e-5
    assert np.abs(ds.compressible_cp(cp0, np.array(1e-4)) - cp0).max() < 1e-6
    # stagnation maps to the isentropic Cp_t; the sonic cap keeps p > 0
    for m in (0.3, 0.5):
        cp = ds.compressible_cp(np.array([1.0, -50.0]), np.array(m))
        assert abs(cp[0] - ds._stagnation_cp(m)) < 1e-12
        assert cp[1] >= ds.sonic_cp(m) - 1e-12 and abs(cp[1] - ds.sonic_cp(m)) < 1e-6
    assert ds.sonic_cp(0.5) < ds.karman_tsien(-1.0, 0.5) < -1.0


def _loop_area(cond: list[list[float]]) -> np.ndarray:
    st = ds.pitching_states(np.array(cond), 128)
    a, cn = st["alpha"], st["cn"]
    return np.abs(np.sum(0.5 * (cn + np.roll(cn, -1, 1)) * (np.roll(a, -1, 1) - a), 1))


def test_unsteady_lag_and_hysteresis():
    st = ds.pitching_states(np.array([[0.3, 5.0, 5.0, 1e-4]]), 64)
    assert np.abs(st["alpha_e"] - st["alpha"]).max() < 1e-4  # quasi-steady
    f_static = ds.separation_point(np.rad2deg(st["alpha"]), 15.25, 3.0, 2.3)
    assert np.abs(st["f"] - f_static).max() < 1e-4
    area = _loop_area([[0.3, 5, 5, k] for k in (1e-4, 0.02, 0.05, 0.1)])
    assert area[0] < 1e-4 and area[1] < area[2] < area[3], area
    st = ds.pitching_states(np.array([[0.3, 5.0, 5.0, 0.1]]), 64)
    assert np.abs(st["alpha_e"] - st["alpha"]).max() > math.radians(0.5)  # lagged


def test_dynamic_stall_separation_hysteresis():
    st = ds.pitching_states(np.array([[0.3, 10.0, 10.0, 0.1], ATTACHED]), 64)
    f, a = st["f"], st["alpha"]
    up, down = 8, 24  # phases pi/4 and 3 pi/4: the same angle, up- and downstroke
    assert abs(a[0, up] - a[0, down]) < 1e-12
    assert f[0].min() < 0.5 and f[0, up] > f[0, down] + 0.3
    assert f[0, up] > st["f_static"][0, up]  # separation delayed on the upstroke
    assert np.argmin(f[0]) > 16  # the deepest separation lags the peak angle
    assert st["x_vortex"][0].max() > 1.0 and st["cn_vortex"][0].max() > 0.1
    assert f[1].min() > 0.9 and st["x_vortex"][1].max() == 0.0


def test_realizations():
    cond = np.array([[0.35, 6.0, 8.0, 0.06], [0.45, 9.0, 6.0, 0.09]])
    a = ds.surface_fields(cond, 32, 32, rng=np.random.default_rng(1), realizations=3)
    b = ds.surface_fields(cond, 32, 32, rng=np.random.default_rng(1), realizations=3)
    assert a.shape == (6, 8, 32, 32) and np.array_equal(a, b)
    c = ds.surface_fields(cond, 32, 32, rng=np.random.default_rng(2), realizations=3)
    assert not np.array_equal(a, c)
    for i in range(6):
        for j in range(i + 1, 6):
            assert np.abs(a[i, 0] - a[j, 0]).max() > 1.0  # every realization differs
    rms = np.sqrt((a[:, :6] ** 2).mean((0, 2, 3)))
    nominal = ds.surface_fields(cond, 32, 32)
    # realizations scatter closely around their own condition's nominal field
    for g in range(2):
        spread = np.abs(a[3 * g:3 * g + 3, :6].mean((2, 3)) - nominal[g, :6].mean((1, 2)))
        assert (spread.max(0) < 0.1 * rms).all(), spread.max(0) / rms
    # condition-wise means change smoothly along a line in the design space
    line = np.array([[m, 7.5, 7.5, 0.075] for m in np.linspace(0.35, 0.45, 5)])
    means = ds.surface_fields(line, 32, 32)[:, :6].mean((2, 3))
    d1, d2 = np.diff(means, axis=0), np.diff(means, 2, axis=0)
    assert (np.abs(d1).max(0) < 0.05 * rms).all()
    smooth = [0, 3, 4, 5]  # p, T, rho, tau_w: second differences << first differences
    assert (np.abs(d2[:, smooth]).max(0) < 0.5 * np.abs(d1[:, smooth]).max(0)).all()


def test_wall_state_bounds_and_shear_sign(fields: np.ndarray):
    cp = np.linspace(-3.0, 1.0, 9)[None]
    for m in (0.3, 0.5):
        c = ds.compressible_cp(cp, np.array([m]))
        p_e, t_e, u_e, t_t = ds.edge_state(c, np.array([m]))
        for turb in (False, True):
            t_w = ds.adiabatic_wall_temperature(t_e, t_t, turb)
            assert (t_w >= t_e - 1e-9).all() and (t_w <= t_t + 1e-9).all()
        assert (p_e > 0).all() and u_e[0, -1] < 1e-3 and (np.diff(u_e[0]) < 0).all()
    p, T, rho, tau = fields[:, 0], fields[:, 3], fields[:, 4], fields[:, 5]
    assert (p > 0).all() and (T > 0).all() and (rho > 0).all()
    # nominal rows: their own T_t; perturbed rows (Mach 0.4 +- 0.004): that of Mach 0.45
    _, t_t, _ = ds.free_stream(np.array([ATTACHED[0], DEEP[0], 0.45, 0.45]))
    assert (T.max((1, 2)) <= t_t).all()
    assert (T.min((1, 2)) >= t_t * 2 / (ds.GAMMA + 1) * 0.97).all()  # ~ sonic at worst
    g = ds.surface_geometry(64)
    fore = g.x < 0.95
    assert (tau[0][:, fore] > 0).all()  # attached: positive shear (bar the TE strip)
    assert (tau[1][:, g.x < 0.8] < 0).any()  # deep stall: reversed flow on the chord
    assert (tau[1] > 0).any()


def test_sample_conditions():
    c = ds.sample_conditions(16, np.random.default_rng(0))
    assert c.shape == (16, 4)
    assert (c >= ds.COND_LO).all() and (c <= ds.COND_HI).all()
    strata = np.floor((c - ds.COND_LO) / (ds.COND_HI - ds.COND_LO) * 16)
    for j in range(4):  # Latin hypercube: one draw per stratum in every coordinate
        assert sorted(strata[:, j].astype(int)) == list(range(16))
    assert np.array_equal(c, ds.sample_conditions(16, np.random.default_rng(0)))


@pytest.mark.parametrize("kwargs", [
    {"conditions": np.array([[0.6, 7.0, 7.0, 0.07]])},
    {"conditions": np.array([[0.4, 7.0, 7.0, 0.02]])},
    {"conditions": np.array([[0.4, 7.0, 7.0, np.nan]])},
    {"conditions": np.array([0.4, 7.0, 7.0, 0.07])},
    {"conditions": np.zeros((2, 3))},
    {"n_time": 3},
    {"n_surf": 2},
    {"realizations": 2},
    {"realizations": 0, "rng": np.random.default_rng(0)},
    {"perturb": -0.1},
])
def test_bad_inputs(kwargs):
    args = {"conditions": np.array([[0.4, 7.0, 7.0, 0.07]]), "n_time": 8, "n_surf": 8}
    args.update(kwargs)
    with pytest.raises(PcgError):
        ds.surface_fields(**args)
    # just inside the tolerance (the perturbation size) is accepted
    ok = ds.surface_fields(np.array([[0.3 - 0.003, 5.0, 10.0 + 0.09, 0.1]]), 8, 8)
    assert ok.shape == (1, 8, 8, 8)
    with pytest.raises(PcgError):
        ds.sample_conditions(0, np.random.default_rng(0))
