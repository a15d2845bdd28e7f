"""3-D HIT pseudo-spectral solver: exact Navier-Stokes solutions (ABC, Taylor-Green),
divergence, energy budget, temporal order, spectral truncation, random fields, input
checks and (slow) statistical stationarity under Lundgren forcing."""

from __future__ import annotations

import math

import pytest
import torch

from pcgbench.errors import PcgError
from pcgbench.tasks.hit.solver import (
    HITConfig,
    HITSolver,
    random_solenoidal_field,
    simulate_frames,
    spectral_truncate,
)


def mesh(n: int, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = 2 * math.pi * torch.arange(n, dtype=dtype) / n
    return torch.meshgrid(g, g, g, indexing="ij")  # (x, y, z) = the last three dims


def abc_flow(n: int, a=1.0, b=0.7, c=0.4, dtype=torch.float64) -> torch.Tensor:
    x, y, z = mesh(n, dtype)
    return torch.stack([a * torch.sin(z) + c * torch.cos(y),
                        b * torch.sin(x) + a * torch.cos(z),
                        c * torch.sin(y) + b * torch.cos(x)])[None]


def taylor_green(n: int) -> torch.Tensor:
    x, y, _ = mesh(n)
    return torch.stack([torch.sin(x) * torch.cos(y), -torch.cos(x) * torch.sin(y),
                        torch.zeros_like(x)])[None]


def rel_div(s: HITSolver, uh: torch.Tensor) -> float:
    """max |div u| / rms |grad u| (a scale-free divergence)."""
    grad_rms = math.sqrt(float(s.dissipation(uh).max()) / s.cfg.nu)
    return float(s.divergence(uh).abs().max()) / grad_rms


def random_state(s: HITSolver, seed: int, k_peak=2.0, energy=1.0, batch=1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return s.to_spectral(random_solenoidal_field(s.n, batch, k_peak, energy, gen, s.dtype))


# -- exact solutions ------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["rk4", "rk3"])
def test_abc_flow_exact(scheme):
    """ABC flow is Beltrami (omega = u, |k| = 1): u x omega = 0, so u(t) = u(0) exp(-nu t)
    and (u . grad) u = grad |u|^2 / 2 gives p = -|u|^2 / 2 + const."""
    n, nu, t = 16, 0.1, 1.3
    s = HITSolver(HITConfig(n=n, nu=nu, forcing="none", scheme=scheme))
    u0 = abc_flow(n)
    uh = s.advance(s.to_spectral(u0), t)
    u = s.to_physical(uh)
    assert float((u - u0 * math.exp(-nu * t)).abs().max()) <= 1e-10
    p_exact = -0.5 * u.pow(2).sum(1, keepdim=True)
    p_exact = p_exact - p_exact.mean()
    assert float((s.pressure(uh) - p_exact).abs().max()) <= 1e-10


def test_abc_flow_float32():
    """The solver runs in float32 (complex64 spectra) to single-precision accuracy."""
    n, nu, t = 16, 0.1, 1.0
    s = HITSolver(HITConfig(n=n, nu=nu, forcing="none"), dtype=torch.float32)
    u0 = abc_flow(n, dtype=torch.float32)
    uh = s.advance(s.to_spectral(u0), t)
    assert uh.dtype == torch.complex64
    assert float((s.to_physical(uh) - u0 * math.exp(-nu * t)).abs().max()) <= 1e-5


def test_taylor_green_exact():
    """2-D Taylor-Green in 3-D: u(t) = u(0) exp(-2 nu t), zero-mean pressure
    p = (cos 2x + cos 2y) / 4 exp(-4 nu t)."""
    n, nu, t = 16, 0.05, 2.0
    s = HITSolver(HITConfig(n=n, nu=nu, forcing="none"))
    u0 = taylor_green(n)
    uh = s.advance(s.to_spectral(u0), t)
    assert float((s.to_physical(uh) - u0 * math.exp(-2 * nu * t)).abs().max()) <= 1e-10
    x, y, _ = mesh(n)
    p_exact = (torch.cos(2 * x) + torch.cos(2 * y)) / 4 * math.exp(-4 * nu * t)
    assert float((s.pressure(uh)[0, 0] - p_exact).abs().max()) <= 1e-10


def test_linear_forcing_exact_on_beltrami():
    """With Lundgren forcing the ABC flow grows/decays as exp((A - nu) t) exactly."""
    n, nu, a, t = 8, 0.1, 0.3, 1.0
    s = HITSolver(HITConfig(n=n, nu=nu, forcing="linear", A=a))
    u0 = abc_flow(n)
    uh = s.advance(s.to_spectral(u0), t)
    assert float((s.to_physical(uh) - u0 * math.exp((a - nu) * t)).abs().max()) <= 1e-10
    e = float(s.energy(uh)[0])
    assert float(s.injection(uh)[0]) == pytest.approx(2 * a * e, rel=1e-12)


# -- invariants -----------------------------------------------------------------------
def test_divergence_stays_round_off():
    n = 16
    s = HITSolver(HITConfig(n=n, nu=0.02, A=0.2))
    uh = random_state(s, 3, k_peak=3.0, energy=1.0, batch=2)
    assert rel_div(s, uh) <= 1e-12
    uh = s.advance(uh, 1.5)
    assert rel_div(s, uh) <= 1e-12
    assert float(s.energy(uh).min()) > 0.1  # it is a turbulent, not a decayed, state


def test_energy_budget():
    """dE/dt = P - eps (advection conserves energy exactly under 2/3 de-aliasing):
    centred difference over two small steps vs the diagnostics at the midpoint."""
    n, h = 16, 2e-3
    s = HITSolver(HITConfig(n=n, nu=0.05, A=0.5))
    uh0 = random_state(s, 5, k_peak=3.0, energy=0.5)
    uh1 = s.step(uh0, h)
    uh2 = s.step(uh1, h)
    de_dt = (s.energy(uh2) - s.energy(uh0)) / (2 * h)
    budget = s.injection(uh1) - s.dissipation(uh1)
    scale = s.dissipation(uh1)
    assert float(((de_dt - budget) / scale).abs().max()) < 1e-3
    # the explicit right-hand side does no work beyond the forcing: <u . rhs> = P
    # (Parseval with the half-axis weights; advection is energy-neutral mode-sum-wise)
    prod = (uh1.conj() * s.rhs(uh1)).real * s.w_half
    work = prod.sum(dim=(-4, -3, -2, -1)) / n**6
    assert float(work[0]) == pytest.approx(float(s.injection(uh1)[0]), rel=1e-10)


@pytest.mark.parametrize("scheme,order", [("rk4", 4.0), ("rk3", 3.0)])
@pytest.mark.parametrize("forcing", ["none", "linear"])
def test_temporal_order(scheme, order, forcing):
    """Error vs a dt/32 reference at dt and dt/2 on a smooth random field."""
    n, t_end = 16, 0.8
    s = HITSolver(HITConfig(n=n, nu=0.05, forcing=forcing, A=0.5, scheme=scheme))
    uh0 = random_state(s, 1, k_peak=2.0, energy=1.0)

    def run(dt: float) -> torch.Tensor:
        uh = uh0
        for _ in range(round(t_end / dt)):
            uh = s.step(uh, dt)
        return s.to_physical(uh)

    ref = run(0.1 / 32)
    e1, e2 = (float((run(dt) - ref).abs().max()) for dt in (0.1, 0.05))
    assert abs(math.log2(e1 / e2) - order) < 0.3


def test_advance_lands_on_time_and_matches_steps():
    """advance(t) takes CFL steps with a shortened last step: same result as stepping
    with those sizes, and the clock ends exactly on t."""
    s = HITSolver(HITConfig(n=8, nu=0.05, dt_max=0.03))
    uh0 = random_state(s, 2)
    dts: list[float] = []
    out = s.advance(uh0, 0.1, callback=lambda dt, _: dts.append(dt))
    assert sum(dts) == pytest.approx(0.1, abs=1e-14)
    assert dts[:-1] == [pytest.approx(0.03)] * (len(dts) - 1) and dts[-1] <= 0.03
    uh = uh0
    for dt in dts:
        uh = s.step(uh, dt)
    assert torch.equal(uh, out)


def test_stable_dt():
    s = HITSolver(HITConfig(n=8, nu=0.05, cfl=0.4, dt_max=10.0))
    uh = random_state(s, 4)
    speed = float(s.to_physical(uh).pow(2).sum(1).sqrt().max())
    assert s.stable_dt(uh) == pytest.approx(0.4 * (2 * math.pi / 8) / speed)
    assert HITSolver(HITConfig(n=8, dt_max=1e-3)).stable_dt(uh) == 1e-3


def test_statistics_definitions():
    s = HITSolver(HITConfig(n=16, nu=0.02))
    uh = random_state(s, 7, energy=0.3)
    st = s.statistics(uh)
    _, ek = s.spectrum(uh)
    assert float(ek.sum()) == pytest.approx(st["energy"], rel=1e-12)
    assert st["energy"] == pytest.approx(0.3, rel=1e-12)
    u_rms = math.sqrt(0.2)
    assert st["u_rms"] == pytest.approx(u_rms)
    assert st["re_lambda"] == pytest.approx(u_rms * math.sqrt(15 * 0.02 * u_rms**2 /
                                                              st["dissipation"]) / 0.02)
    assert st["kmax_eta"] == pytest.approx(16 / 3 * (0.02**3 / st["dissipation"]) ** 0.25)
    # eps = nu <|grad u|^2> in physical space
    grads = [s.to_physical(1j * s.kvec[i] * uh) for i in range(3)]
    phys = 0.02 * sum(float(g.pow(2).sum(1).mean()) for g in grads)
    assert st["dissipation"] == pytest.approx(phys, rel=1e-12)


# -- fields and resampling ------------------------------------------------------------
def test_random_field_deterministic_and_solenoidal():
    n = 16
    u1 = random_solenoidal_field(n, 2, 3.0, 0.5, torch.Generator().manual_seed(11))
    u2 = random_solenoidal_field(n, 2, 3.0, 0.5, torch.Generator().manual_seed(11))
    u3 = random_solenoidal_field(n, 2, 3.0, 0.5, torch.Generator().manual_seed(12))
    assert u1.shape == (2, 3, n, n, n) and u1.dtype == torch.float64
    assert torch.equal(u1, u2) and not torch.allclose(u1, u3)
    assert not torch.allclose(u1[0], u1[1])  # batch rows are independent draws
    s = HITSolver(HITConfig(n=n))
    uh = s.to_spectral(u1)
    assert torch.allclose(s.to_physical(uh), u1, atol=1e-13)  # already de-aliased
    assert rel_div(s, uh) <= 1e-13
    assert torch.allclose(0.5 * u1.pow(2).sum(1).mean((-3, -2, -1)),
                          torch.tensor([0.5, 0.5], dtype=torch.float64), rtol=1e-12)
    # the spectrum peaks near k_peak (E ~ k^4 exp(-2 (k/kp)^2) peaks at k = kp)
    _, ek = s.spectrum(uh)
    assert int(ek.mean(0).argmax()) in (2, 3, 4)
    u32 = random_solenoidal_field(n, 2, 3.0, 0.5, torch.Generator().manual_seed(11),
                                  dtype=torch.float32)
    assert u32.dtype == torch.float32 and torch.allclose(u32.double(), u1, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n", [12, 16, 32])
def test_dealiased_inverse_equals_full_inverse(n, dtype):
    """The narrowed inverse (y and x transforms on the kept k_z columns only) gives the
    full irfftn of every de-aliased spectrum the solver transforms, to round-off."""
    s = HITSolver(HITConfig.for_grid(n), dtype=dtype)
    uh = random_state(s, 3, k_peak=n / 4, batch=2)
    assert s.kept_cols < n // 2 + 1 and bool(s.mask[..., s.kept_cols - 1].any())
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    for fh in (uh, s.curl(uh), s.nonlinear(uh)):
        full = s.to_physical(fh)
        err = float((s.to_physical_dealiased(fh) - full).abs().max())
        assert err <= tol * float(full.abs().max())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_complex_constants_are_the_real_formulas(dtype):
    """Projection, curl and the de-aliasing mask use constants pre-cast to the complex
    dtype: bit for bit the products with the real constants (which torch casts anyway)."""
    s = HITSolver(HITConfig.for_grid(16), dtype=dtype)
    uh = 1.3 * random_state(s, 4, k_peak=4.0, batch=2) + 0.1
    k = s.kvec
    assert torch.equal(s.project(uh), uh - k * ((k * uh).sum(-4, keepdim=True) * s.dk2_inv))
    kx, ky, kz = k
    ux, uy, uz = uh.unbind(-4)
    curl = 1j * torch.stack([ky * uz - kz * uy, kz * ux - kx * uz, kx * uy - ky * ux], -4)
    assert torch.equal(s.curl(uh), curl)
    assert torch.equal(s.to_spectral(s.to_physical(uh)),
                       torch.fft.rfftn(s.to_physical(uh), dim=(-3, -2, -1)) * s.mask)


def test_spectral_truncate_exact_and_solenoidal():
    # band-limited (|k_i| <= 5 < 16/2): truncation to 16 equals sampling on 16
    def field(n: int) -> torch.Tensor:
        x, y, z = mesh(n)
        return torch.sin(x + 2 * y) * torch.cos(5 * z) + 0.3 * torch.cos(3 * x - 7 * y)

    assert torch.allclose(spectral_truncate(field(32), 16), field(16), atol=1e-13)
    f = torch.randn(2, 1, 8, 8, 8, dtype=torch.float64)
    assert torch.allclose(spectral_truncate(spectral_truncate(f, 6), 4), spectral_truncate(f, 4))
    # turbulent velocity (modes up to 10) to 8 points: still divergence-free mode-wise
    u = random_solenoidal_field(32, 1, 6.0, 1.0, torch.Generator().manual_seed(0))
    uc = spectral_truncate(u, 8)
    s = HITSolver(HITConfig(n=8, dealias=1.0))
    uh = s.to_spectral(uc)
    assert rel_div(s, uh) <= 1e-13
    # the kept modes are the fine field's (Nyquist of the coarse grid dropped)
    assert float(uh[..., 4, :, :].abs().max()) == 0.0
    with pytest.raises(PcgError):
        spectral_truncate(u, 64)


# -- trajectories ---------------------------------------------------------------------
def test_simulate_frames_layout():
    cfg = HITConfig.for_grid(8)
    u0 = random_solenoidal_field(8, 1, 2.0, 0.2, torch.Generator().manual_seed(0))
    frames, info = simulate_frames(cfg, u0[0], 0.5, 0.25, 3)
    assert frames.shape == (3, 4, 8, 8, 8) and frames.dtype == torch.float32
    assert info["frame_times"] == pytest.approx([0.5, 0.75, 1.0])
    assert info["times"][0] == 0.0 and info["times"][-1] == pytest.approx(1.0)
    assert len(info["energy"]) == len(info["times"]) == info["steps"] + 1
    assert info["energy"][0] == pytest.approx(0.2)
    s = HITSolver(cfg)
    uh = s.to_spectral(frames[-1:, :3].double())
    assert float(s.pressure(uh)[0, 0].sub(frames[-1, 3].double()).abs().max()) < 1e-5
    assert info["re_lambda"] > 0 and info["kmax_eta"] > 0


# -- input checks ---------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(n=15), dict(n=2), dict(n=0), dict(nu=0.0), dict(nu=-1.0),
                                dict(nu=float("nan")), dict(A=-0.1), dict(cfl=0.0),
                                dict(cfl=1.5), dict(dt_max=0.0), dict(scheme="euler"),
                                dict(forcing="band"), dict(dealias=0.0), dict(dealias=1.2)])
def test_bad_config_raises(kw):
    with pytest.raises(PcgError):
        HITConfig(**kw)


def test_bad_inputs_raise():
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(PcgError):
        random_solenoidal_field(7, 1, 2.0, 1.0, gen)
    with pytest.raises(PcgError):
        random_solenoidal_field(8, 1, -2.0, 1.0, gen)
    s = HITSolver(HITConfig(n=8))
    with pytest.raises(PcgError):
        s.to_spectral(torch.zeros(1, 3, 16, 16, 16, dtype=torch.float64))
    with pytest.raises(PcgError):
        s.advance(s.to_spectral(torch.zeros(1, 3, 8, 8, 8, dtype=torch.float64)), -1.0)
    with pytest.raises(PcgError):
        simulate_frames(HITConfig(n=8), torch.zeros(2, 3, 8, 8, 8), 0.0, 0.1, 1)


def test_for_grid_keeps_resolution_scaling():
    c32, c128 = HITConfig(), HITConfig.for_grid(128)
    assert c128.n == 128 and c128.A == c32.A
    # eta ~ nu^(3/4) at fixed A: k_max eta unchanged when nu scales as n^(-4/3)
    assert (c128.kmax * c128.nu**0.75) == pytest.approx(c32.kmax * c32.nu**0.75)


# -- slow -----------------------------------------------------------------------------
@pytest.mark.slow
def test_linear_forcing_reaches_stationary_state():
    """Lundgren forcing at the default (32^3) setting from random fields, in float32: after
    a 10 tau spin-up the energy averaged over the batch (4 fields) and over two consecutive
    20 tau windows agrees within 20 %, injection balances dissipation on average, and the
    state is resolved with Re_lambda in the 32^3 range.  Long windows are needed: at this
    Reynolds number the forced energy oscillates by ~30 % over ~10 tau."""
    cfg = HITConfig()
    s = HITSolver(cfg, dtype=torch.float32)
    uh = random_state(s, 6100, k_peak=3.0, energy=1.0, batch=4)
    uh = s.advance(uh, 10 * cfg.tau)
    windows = []
    for _ in range(2):
        acc = {"t": 0.0, "e": 0.0, "p": 0.0, "eps": 0.0, "re": 0.0, "keta": 0.0}

        def accumulate(dt: float, u: torch.Tensor, acc=acc) -> None:
            st = s.statistics(u)
            acc["t"] += dt
            for key, name in (("e", "energy"), ("p", "injection"), ("eps", "dissipation"),
                              ("re", "re_lambda"), ("keta", "kmax_eta")):
                acc[key] += dt * st[name]

        uh = s.advance(uh, 20 * cfg.tau, accumulate)
        windows.append({k: v / acc["t"] for k, v in acc.items() if k != "t"})
    e1, e2 = windows[0]["e"], windows[1]["e"]
    assert abs(e2 - e1) / e1 < 0.2
    for w in windows:
        assert abs(w["p"] - w["eps"]) / w["eps"] < 0.1
        assert w["keta"] > 1.0 and 15 < w["re"] < 35
