"""TMT generator (Brinkman-penalized flow past a random body): divergence at round-off,
no-slip error vs eta, exact signed distances (eikonal, brute force), Taylor-Green
velocity and pressure, determinism, input errors and the TMT residual."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from pcgbench.errors import PcgError
from pcgbench.tasks.turbulence_mass_transfer.solver import (
    BrinkmanSolver,
    TMTConfig,
    generate,
    image_distances,
    random_body,
    sdf_points,
    signed_distance,
    simulate_sample,
    tmt_residual,
)

L = 2 * math.pi
ELLIPSE = {"kind": "ellipse", "center": [2.0, 3.0], "axes": [0.6, 0.35], "angle": 0.5,
           "seed": 3}
SHORT = TMTConfig(n=32, t_end=0.5)


def mesh(n: int, length: float = L) -> tuple[np.ndarray, np.ndarray]:
    g = np.arange(n) * (length / n)
    return np.meshgrid(g, g, indexing="ij")


def brute_force_sdf(body: dict, x: np.ndarray, y: np.ndarray, m: int = 20000) -> np.ndarray:
    """Signed distance by dense boundary sampling (m points; over-estimates by at most
    half the sample spacing, ~1e-4 here)."""
    a, b = body["axes"]
    c, s = math.cos(body["angle"]), math.sin(body["angle"])
    t = np.linspace(0, 2 * math.pi, m, endpoint=False)
    bx = body["center"][0] + c * a * np.cos(t) - s * b * np.sin(t)
    by = body["center"][1] + s * a * np.cos(t) + c * b * np.sin(t)
    out = np.empty(x.shape)
    for i in range(0, x.size, 256):  # chunks keep the distance matrix small
        xs, ys = x.ravel()[i : i + 256, None], y.ravel()[i : i + 256, None]
        out.ravel()[i : i + 256] = np.sqrt((xs - bx) ** 2 + (ys - by) ** 2).min(axis=1)
    dx, dy = x - body["center"][0], y - body["center"][1]
    inside = ((c * dx + s * dy) / a) ** 2 + ((-s * dx + c * dy) / b) ** 2 < 1
    return np.where(inside, -out, out)


# -- 1. divergence ------------------------------------------------------------------------
def test_divergence_at_roundoff():
    out, diag = simulate_sample(ELLIPSE, SHORT)
    assert out.shape == (4, 32, 32) and out.dtype == np.float64
    assert diag["divergence_rel"] < 1e-10
    res = tmt_residual(torch.from_numpy(out[None]))
    grad_u = np.abs(np.gradient(out[0], SHORT.h)).max()
    assert float(res[0, 0].abs().max()) < 1e-10 * grad_u
    assert diag["steps"] > 0 and diag["time"] == SHORT.t_end


# -- 2. no-slip error vs eta -------------------------------------------------------------
def test_noslip_violation_decreases_with_eta():
    """max |u| inside the body (phi < 0) falls monotonically with eta.  Measured (n = 32,
    t = 0.5): log-log slope ~0.7 over eta = 1e-2..1e-4 (pre-asymptotic: the force
    density chi u / eta inside still grows as the layer stiffens), ~0.93 from 1e-5 to
    1e-6: O(eta) at grid points, the penalization layer sqrt(nu eta) being sub-cell."""
    etas = [1e-2, 1e-3, 1e-4, 1e-5, 1e-6]
    err = [simulate_sample(ELLIPSE, dataclasses.replace(SHORT, eta=e))[1]["noslip_max"]
           for e in etas]
    assert all(e0 > e1 > 0 for e0, e1 in zip(err[:-1], err[1:], strict=True))
    slope = np.polyfit(np.log10(etas[:3]), np.log10(err[:3]), 1)[0]
    assert 0.5 < slope < 1.2, (err, slope)
    assert 0.85 < math.log10(err[3] / err[4]) < 1.15, err


# -- 3. signed distance -------------------------------------------------------------------
def test_ellipse_sdf_matches_brute_force():
    rng = np.random.default_rng(0)
    for body in [ELLIPSE, {**ELLIPSE, "axes": [0.3, 0.8], "angle": 2.0}]:
        c = np.array(body["center"])[:, None]
        pts = c + rng.uniform(-1.2, 1.2, size=(2, 1500))
        # points on the major axis, where the closed-form branch applies
        ang = body["angle"] if body["axes"][0] > body["axes"][1] else body["angle"] + math.pi / 2
        r = rng.uniform(-1.0, 1.0, 100)
        pts[:, :100] = c + np.stack([np.cos(ang) * r, np.sin(ang) * r])
        exact = sdf_points(body, pts[0], pts[1])
        brute = brute_force_sdf(body, pts[0], pts[1])
        assert np.all(np.sign(exact) == np.sign(brute))
        assert np.all(np.abs(brute) - np.abs(exact) > -1e-12)  # sampling only adds
        assert np.abs(brute - exact).max() < 1e-4


def test_periodic_sdf_on_grid():
    """A body straddling the box corner: the grid SDF is the distance to the nearest
    periodic image (brute force over the 4 shifted copies that touch the box)."""
    body = {**ELLIPSE, "center": [0.2, 6.1], "angle": 2.5}
    n = 32
    x, y = mesh(n)
    phi = signed_distance(body, n, L)
    brute = np.min([brute_force_sdf({**body, "center": [0.2 + i * L, 6.1 + j * L]}, x, y)
                    for i in (0, 1) for j in (-1, 0)], axis=0)
    assert np.abs(phi - brute).max() < 1e-4
    circle = {"kind": "circle", "center": [1.0, 5.0], "axes": [0.5, 0.5], "angle": 0.0}
    dx = np.mod(x - 1.0 + L / 2, L) - L / 2
    dy = np.mod(y - 5.0 + L / 2, L) - L / 2
    assert np.abs(signed_distance(circle, n, L) - (np.hypot(dx, dy) - 0.5)).max() < 1e-14


def test_eikonal_away_from_medial_axis_and_seams():
    """|grad phi| = 1 by centred differences (step 1e-6) of the exact SDF at grid points
    farther than 2h from the medial axis and from the periodic seams."""
    rng = np.random.default_rng(1)
    n, step = 64, 1e-6
    h = L / n
    x, y = mesh(n)
    bodies = [random_body(rng, L) for _ in range(4)] + [{**ELLIPSE, "axes": [0.9, 0.3]}]
    for body in bodies:
        d = np.sort(image_distances(body, x, y, L), axis=0)
        gx = (image_distances(body, x + step, y, L).min(0)
              - image_distances(body, x - step, y, L).min(0)) / (2 * step)
        gy = (image_distances(body, x, y + step, L).min(0)
              - image_distances(body, x, y - step, L).min(0)) / (2 * step)
        a, b = body["axes"]
        ang = body["angle"] if a >= b else body["angle"] + math.pi / 2
        a, b = max(a, b), min(a, b)
        dx = np.mod(x - body["center"][0] + L / 2, L) - L / 2
        dy = np.mod(y - body["center"][1] + L / 2, L) - L / 2
        xr = np.cos(ang) * dx + np.sin(ang) * dy
        yr = -np.sin(ang) * dx + np.cos(ang) * dy
        medial = np.hypot(np.clip(np.abs(xr) - (a * a - b * b) / a, 0, None), yr)
        ok = (d[1] - d[0] > 4 * h) & ((d[0] > 0) | (medial > 2 * h))
        assert ok.mean() > 0.75  # seams and medial axis exclude ~15 %
        err = np.abs(np.hypot(gx, gy) - 1)[ok]
        assert err.max() < 1e-6, (body, err.max())


# -- 4./5. Taylor-Green -------------------------------------------------------------------
@pytest.mark.parametrize("u_inf", [0.0, 1.0])
def test_taylor_green_velocity_and_pressure(u_inf):
    """No body, no drive: u = cos x sin y, v = -sin x cos y decays as exp(-2 nu t), and
    p = -(cos 2x + cos 2y) exp(-4 nu t) / 4; with a mean flow the same pattern is
    carried along x (Galilean check; the RK3 phase error is ~1e-8)."""
    n, nu, t_end, steps = 32, 0.05, 1.0, 100
    s = BrinkmanSolver(n, L, nu, 1e-3, (u_inf, 0.0))
    x, y = s.grid()
    u0 = torch.stack([u_inf + torch.cos(x) * torch.sin(y), -torch.sin(x) * torch.cos(y)])
    s.set_mask(torch.zeros(1, n, n, dtype=torch.float64), t_end / steps)
    uh = s.fft(u0[None])
    for _ in range(steps):
        uh, _ = s.step(uh)
    xs = x - u_inf * t_end
    decay = math.exp(-2 * nu * t_end)
    exact = torch.stack([u_inf + torch.cos(xs) * torch.sin(y) * decay,
                         -torch.sin(xs) * torch.cos(y) * decay])
    p_exact = -(torch.cos(2 * xs) + torch.cos(2 * y)) / 4 * decay**2
    tol = 1e-12 if u_inf == 0 else 1e-7
    assert float((s.velocity(uh)[0] - exact).abs().max()) < tol
    assert float((s.pressure(uh)[0] - p_exact).abs().max()) < tol


# -- 6. determinism -----------------------------------------------------------------------
def test_generate_deterministic():
    cfg = TMTConfig(n=16, t_end=0.3)
    a = generate(3, cfg, seed=7)
    assert a.shape == (3, 4, 16, 16) and a.dtype == np.float32
    assert np.isfinite(a).all()
    np.testing.assert_array_equal(a, generate(3, cfg, seed=7))
    assert not np.allclose(a, generate(3, cfg, seed=8))
    # batching changes nothing but round-off (dt does not depend on the batch)
    np.testing.assert_allclose(a, generate(3, cfg, seed=7, batch_size=1), atol=1e-6)
    assert np.all(a[:, 3].min(axis=(1, 2)) < 0)  # every sample holds a body


# -- 7. input errors ------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [{"n": 31}, {"n": 8}, {"eta": 0.0}, {"eta": -1e-3},
                                {"nu": 0.0}, {"nu": -0.01}, {"t_end": 0.0}])
def test_bad_config_raises(kw):
    with pytest.raises(PcgError):
        TMTConfig(**kw)


def test_bad_body_raises():
    with pytest.raises(PcgError):
        signed_distance({**ELLIPSE, "kind": "square"}, 16, L)
    with pytest.raises(PcgError):
        signed_distance({**ELLIPSE, "axes": [2.0, 0.5]}, 16, L)  # larger than L / 4


# -- residual -------------------------------------------------------------------------------
def test_tmt_residual_on_exact_fields():
    """Taylor-Green velocity and pressure with a circle's SDF: zero divergence, the
    Laplacian term 0.02 (cos 2x + cos 2y), the wall term exp(-(phi/delta)^2) u . n."""
    n = 64
    x, y = mesh(n)
    circle = {"kind": "circle", "center": [3.0, 3.0], "axes": [0.8, 0.8], "angle": 0.0}
    phi = signed_distance(circle, n, L)
    u, v = np.cos(x) * np.sin(y), -np.sin(x) * np.cos(y)
    p = -(np.cos(2 * x) + np.cos(2 * y)) / 4
    res = tmt_residual(torch.from_numpy(np.stack([u, v, p, phi])[None]))[0].numpy()
    assert res.shape == (4, n, n)
    assert np.abs(res[0]).max() < 1e-12
    assert np.abs(res[3] - 0.02 * (np.cos(2 * x) + np.cos(2 * y))).max() < 1e-12
    r = np.hypot(x - 3.0, y - 3.0)
    wall = np.exp(-((phi / (2 * L / n)) ** 2)) * (u * (x - 3.0) + v * (y - 3.0)) / r
    assert np.abs(res[1] - wall).max() < 2e-2
    band = np.abs(phi) < 0.5  # the eikonal term is small away from the centre kink
    assert np.abs(res[2][band]).max() < 0.2 * 0.05
