"""Navier-Stokes suite task: the Crank-Nicolson pseudo-spectral solver against exact
solutions, its time order and conservation, the GRF law, the snapshot evaluator, the
constraints and the ``ic_cl`` chart on data, and a smoke run of PMosFM via the runner."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pcgbench.registry import METRICS
from pcgbench.stages.runner import RunOptions, run
from pcgbench.tasks.navier_stokes import NavierStokesTask, fit_forcing_phase
from pcgbench.tasks.navier_stokes.solver import (
    FORCING_AMPLITUDE,
    NavierStokesCN,
    gaussian_random_field,
    grf_mode_variance,
    sinusoidal_forcing,
    snapshot_residual,
)

F64 = torch.float64


def _grid(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, Y) [n, n] in the solver's [..., y, x] layout."""
    g = torch.arange(n, dtype=F64) / n
    return g[None, :].expand(n, n), g[:, None].expand(n, n)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return NavierStokesTask("smoke", data_dir=tmp_path_factory.mktemp("ns"), progress=False)


# -- solver -----------------------------------------------------------------------------
def test_advection_term_matches_analytic_product():
    """w = sin(2 pi x) + cos(4 pi y): psi = sin(2 pi x)/(4 pi^2) + cos(4 pi y)/(16 pi^2),
    u = psi_y, v = -psi_x, so u w_x + v w_y = 1.5 cos(2 pi x) sin(4 pi y) exactly."""
    x, y = _grid(16)
    w = torch.sin(2 * math.pi * x) + torch.cos(4 * math.pi * y)
    s = NavierStokesCN(16, 1e-3, 1e-3)
    adv = s.ifft(s.advection_hat(s.fft(w[None])))[0]
    exact = 1.5 * torch.cos(2 * math.pi * x) * torch.sin(4 * math.pi * y)
    assert torch.allclose(adv, exact, atol=1e-13)


def test_single_shell_decays_exactly():
    """Modes of one shell (|k|^2 = 5 (2 pi)^2) have u . grad w = 0: the CN step multiplies
    them by (1 - a)/(1 + a) exactly, and the decay matches exp(-nu |k|^2 t) to O(dt^2)."""
    x, y = _grid(16)
    w0 = torch.cos(2 * math.pi * (2 * x + y)) + 0.5 * torch.sin(2 * math.pi * (x - 2 * y))
    nu, dt, steps = 1e-2, 1e-2, 50
    out = NavierStokesCN(16, nu, dt).solve(w0[None], 2, steps)[0, 1]
    lam = nu * 5 * (2 * math.pi) ** 2
    a = 0.5 * dt * lam
    assert torch.allclose(out, w0 * ((1 - a) / (1 + a)) ** steps, atol=1e-13)
    rel = float((out - w0 * math.exp(-lam * dt * steps)).abs().max() / w0.abs().max())
    assert rel < lam**3 * dt**2 * dt * steps  # leading CN error lam^3 dt^2 t / 12, margin 12


def test_forced_steady_state_and_transient_are_exact():
    """The protocol forcing lies in the shell |k|^2 = 8 pi^2: w_s = f/(nu |k|^2) is a fixed
    point of the scheme, and w_s + c(x) with c in that shell relaxes by (1-a)/(1+a) per step."""
    nu, dt, steps, n = 1e-3, 1e-2, 100, 16
    f = sinusoidal_forcing(n, [0.3])
    lam = nu * 8 * math.pi**2
    ws = f / lam
    solver = NavierStokesCN(n, nu, dt, f)
    assert torch.allclose(solver.solve(ws, 2, steps)[:, 1], ws, rtol=0, atol=1e-12)
    x, y = _grid(n)
    c = 0.7 * torch.cos(2 * math.pi * (x - y))
    a = 0.5 * dt * lam
    out = solver.solve(ws + c, 2, steps)[:, 1]
    assert torch.allclose(out, ws + c * ((1 - a) / (1 + a)) ** steps, rtol=0, atol=1e-12)


@pytest.mark.parametrize("forced", [False, True])
def test_crank_nicolson_is_second_order(forced):
    """Linear problems (one shell): error at T = 1 vs the exact solution halves twice per
    halving of dt (observed orders in [1.9, 2.1]); unforced decay and forced relaxation."""
    n, nu, t_end = 16, 0.05, 1.0
    x, y = _grid(n)
    if forced:
        f = sinusoidal_forcing(n, [0.2])
        lam = nu * 8 * math.pi**2
        w0 = torch.zeros(1, n, n, dtype=F64)
        exact = f / lam * (1 - math.exp(-lam * t_end))
    else:
        f = None
        lam = nu * (2 * math.pi) ** 2
        w0 = torch.cos(2 * math.pi * x)[None]
        exact = w0 * math.exp(-lam * t_end)
    errs = []
    for steps in (10, 20, 40):
        out = NavierStokesCN(n, nu, t_end / steps, f).solve(w0, 2, steps)[:, 1]
        errs.append(float((out - exact).abs().max()))
    orders = [math.log2(errs[i] / errs[i + 1]) for i in range(2)]
    assert all(1.9 < p < 2.1 for p in orders), orders


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-13), (torch.float32, 2e-6)])
def test_mean_vorticity_conserved(dtype, tol):
    """A nonlinear GRF run with an offset mean and the protocol forcing keeps the mean of
    every snapshot at round-off (advection has no mean mode, the forcing is mean-free)."""
    n = 32
    w0 = gaussian_random_field(2, n, np.random.default_rng(5)) + 0.37
    f = sinusoidal_forcing(n, [0.0, 1.0])
    traj = NavierStokesCN(n, 1e-3, 1e-2, f, dtype=dtype).solve(w0, 5, 50).to(F64)
    drift = (traj.mean(dim=(-2, -1)) - w0.mean(dim=(-2, -1))[:, None]).abs().max()
    assert float(drift) < tol
    # the dynamics are non-trivial: the fields moved by O(1) of their spread
    assert float((traj[:, -1] - traj[:, 0]).std()) > 0.3 * float(w0.std())


def test_grf_law_and_spectrum_slope():
    """Per-shell modal power of 256 GRF draws (n = 64) matches E|w_hat|^2 =
    n^4 2 sigma^2 (4 pi^2 |k|^2 + tau^2)^-alpha within sampling error, and its log-log slope
    on 8 <= |k| <= 24 is the formula's (about -2 alpha = -5); fields are mean-free."""
    n, alpha, tau = 64, 2.5, 7.0
    w = gaussian_random_field(256, n, np.random.default_rng(0), alpha, tau)
    assert float(w.mean(dim=(-2, -1)).abs().max()) < 1e-14
    power = torch.fft.rfft2(w).abs().pow(2).mean(0)
    theory = grf_mode_variance(n, alpha, tau)
    ky = torch.fft.fftfreq(n, d=1 / n, dtype=F64)[:, None]
    kx = torch.fft.rfftfreq(n, d=1 / n, dtype=F64)[None, :]
    shell = (kx**2 + ky**2).sqrt().round().expand(power.shape)
    ks = torch.arange(8, 25, dtype=F64)
    emp = torch.stack([power[shell == k].mean() for k in ks])
    th = torch.stack([theory[shell == k].mean() for k in ks])
    assert float((emp / th - 1).abs().max()) < 0.15  # >= ~100 modes x 256 draws per shell

    def slope(p: torch.Tensor) -> float:
        return float(np.polyfit(np.log(ks.numpy()), np.log(p.numpy()), 1)[0])

    assert abs(slope(emp) - slope(th)) < 0.05
    assert abs(slope(th) + 2 * alpha) < 0.3


def test_snapshot_residual_exact_and_second_order():
    """The evaluator vanishes on the exact forced steady state and is O(dt^2) on an exact
    decaying shell (ratio 4 per halving of the snapshot spacing)."""
    n, nu = 16, 1e-3
    f = sinusoidal_forcing(n, [0.4])
    ws = f / (nu * 8 * math.pi**2)
    steady = ws[:, None].expand(1, 5, n, n)
    assert float(snapshot_residual(steady, nu, 1.0, f[:, None]).abs().max()) < 1e-14
    x, y = _grid(n)
    mode = torch.cos(2 * math.pi * (x + 2 * y))
    lam = 0.005 * 5 * (2 * math.pi) ** 2  # lam * dt ~ 0.1: the asymptotic regime
    norms = []
    for dt in (0.1, 0.05):
        t = torch.arange(3, dtype=F64)[:, None, None] * dt
        traj = (mode * torch.exp(-lam * t))[None]
        norms.append(float(snapshot_residual(traj, 0.005, dt)[0, 0].abs().max()))
    assert 3.9 < norms[0] / norms[1] < 4.1


# -- task: data, evaluator, constraints, chart ----------------------------------------------
def test_splits_layout_and_determinism(task):
    p = task.params
    train, val, test = (task.dataset(s) for s in ("train", "val", "test"))
    assert train.x.shape == (p.n_ic_train * p.n_phi_train, 1, p.nt, p.n, p.n)
    assert test.cond.shape == (p.n_ic_test * p.n_phi_test, p.n * p.n) == val.cond.shape
    assert task.spec.cond_dim == p.n * p.n and task.spec.zero_shot
    # val and test share the fixed initial vorticities, rows of a group share cond exactly
    assert torch.equal(val.cond, test.cond)
    groups = test.cond.reshape(p.n_ic_test, p.n_phi_test, -1)
    assert torch.equal(groups, groups[:, :1].expand_as(groups))
    assert torch.unique(test.cond, dim=0).shape[0] == p.n_ic_test
    # ... and differ in the hidden randomness (the forcing phase)
    assert not torch.allclose(task.phases("val"), task.phases("test"))
    assert not torch.allclose(val.x[:, :, 1:], test.x[:, :, 1:])
    # deterministic from the seeds, to round-off: the cached split may come from another
    # thread count (a reduction order), so no bitwise comparison
    torch.testing.assert_close(task.generate("test").x, test.x, rtol=1e-5, atol=1e-6)


def test_constraints_zero_on_data_nonzero_on_perturbed(task):
    d = task.dataset("test")
    x, c = d.x.double(), d.cond.double()
    h = task.constraints()
    assert h["ic"].linear and h["cl"].linear
    assert float(h["ic"](x, c).abs().max()) == 0.0
    assert float(h["cl"](x, c).abs().max()) < 1e-7  # float32 storage of the fields
    bumped = x.clone()
    bumped[:, 0, 0, 3, 5] += 0.1
    assert torch.allclose(h["ic"](bumped, c).norm(dim=1), torch.full((len(x),), 0.1, dtype=F64))
    shifted = x.clone()
    shifted[:, 0, 2] += 0.05
    cl = h["cl"](shifted, c)
    assert torch.allclose(cl[:, 1], torch.full((len(x),), 0.05, dtype=F64), atol=1e-7)
    wiggle = x.clone()  # a mean-free change of a later snapshot keeps both constraints
    noise = 0.05 * torch.randn(x.shape[-2:], dtype=F64, generator=torch.Generator().manual_seed(0))
    wiggle[:, 0, 2] += noise - noise.mean()
    assert float(h["cl"](wiggle, c).abs().max()) < 1e-7
    assert float(h["ic"](wiggle, c).abs().max()) == 0.0


def test_evaluator_on_data_recovers_phase(task):
    """On the data the fitted forcing phase matches each row's true phase, the residual with
    it is at most the true-phase residual (it is the l2 minimizer), and it is far below the
    residual of noise-perturbed fields."""
    d = task.dataset("val")  # random phases, inside [0, phi_max]
    x = d.x.double()
    phi = task.phases("val")
    fitted = fit_forcing_phase(task._residual_no_forcing(x), task.params.phi_max)
    assert float((fitted - phi).abs().max()) < 2e-3

    def rms(r: torch.Tensor) -> torch.Tensor:
        return r.pow(2).flatten(1).mean(1).sqrt()

    r_fit, r_true = rms(task.residual(x, d.cond)), rms(task.residual_with_phase(x, phi))
    assert bool((r_fit <= r_true * (1 + 1e-12)).all())
    noisy = x + 0.05 * torch.randn(x.shape, dtype=F64, generator=torch.Generator().manual_seed(1))
    assert float(rms(task.residual(noisy, d.cond)).mean()) > 10 * float(r_fit.mean())


def test_fit_forcing_phase_clamps_to_family():
    """Phases outside [0, phi_max] map to the nearer endpoint (in angle)."""
    n = 16
    f = sinusoidal_forcing(n, [-0.3, 2.0, 0.8, math.pi])[:, None]  # r0 = f: phi* = true
    got = fit_forcing_phase(f, math.pi / 2)
    assert torch.allclose(got, torch.tensor([0.0, math.pi / 2, 0.8, math.pi / 2], dtype=F64),
                          atol=1e-12)


def test_chart_decodes_feasible_fields(task):
    """``ic_cl``: decoded random coordinates satisfy ic and cl to <= 1e-5 (float32), data
    are fixed points of decode(encode(.)), and the chart's own residual vanishes."""
    chart = task.chart()
    p = task.params
    assert chart.coord_shape == (1, p.nt - 1, p.n, p.n)
    d = task.dataset("test")
    y = 3.0 * torch.randn(len(d), *chart.coord_shape, generator=torch.Generator().manual_seed(2))
    x = chart.decode(y, d.cond)
    assert x.dtype == torch.float32 and x.shape == (len(d), *task.spec.field_shape)
    h = task.constraints()
    for name in ("ic", "cl"):
        assert float(h[name](x.double(), d.cond.double()).norm(dim=1).max()) <= 1e-5
    assert float(chart.residual(x, d.cond).abs().max()) <= 1e-5
    back = chart.decode(chart.encode(d.x, d.cond), d.cond)
    assert float((back - d.x).abs().max()) < 1e-5


def test_pmosfm_smoke_run(tmp_path, monkeypatch):
    """PMosFM through the runner on the smoke preset: a complete record, NFE 1, and (when
    the suite's CE metrics are registered) exact constraints on its samples."""
    wanted = NavierStokesTask.metrics
    monkeypatch.setattr(NavierStokesTask, "metrics", tuple(m for m in wanted if m in METRICS))
    opts = RunOptions(task="navier_stokes", method="pmosfm", preset="smoke",
                      results_dir=str(tmp_path / "r"), data_dir=str(tmp_path / "d"),
                      progress=False, overrides={"iterations": 2})
    record, path, skipped = run(opts)
    assert not skipped and path.exists() and record["nfe"] == 1
    metrics = record["metrics"]
    assert metrics["nonfinite_fraction"] == 0.0 and math.isfinite(metrics["mmse"])
    for name in ("ce_ic", "ce_cl"):
        if name in metrics:
            assert metrics[name] <= 1e-5


def test_presets_keep_the_physics():
    """Every preset has the paper's viscosity, forcing family and GRF law; the paper preset
    is the protocol's grid and sampling set."""
    presets = {k: NavierStokesTask.params_for(k) for k in ("smoke", "cpu", "paper")}
    for p in presets.values():
        assert (p.nu, p.forcing_amplitude, p.phi_max) == (1e-3, FORCING_AMPLITUDE, math.pi / 2)
        assert (p.grf_alpha, p.grf_tau) == (2.5, 7.0)
    pp = presets["paper"]
    assert (pp.n, pp.dt, pp.nt, pp.dt_snapshot) == (64, 1e-3, 50, 1.0)
    assert (pp.n_ic_train, pp.n_phi_train, pp.n_ic_test, pp.n_phi_test) == (100, 100, 10, 100)
    assert presets["cpu"].dt_snapshot == 1.0 and presets["cpu"].n == 32
