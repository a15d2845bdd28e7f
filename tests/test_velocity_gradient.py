"""Q-R velocity-gradient statistics: analytic invariants, Fourier gradients of periodic
fields, normalization, histogram distances and the registered ``qr_*`` metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pcgbench.errors import PcgError
from pcgbench.metric import MetricContext
from pcgbench.metrics import velocity_gradient as vg
from pcgbench.metrics.velocity_gradient import (
    histogram_distances,
    mean_rotation_invariant,
    plot_qr,
    qr_distances,
    qr_histogram,
    qr_invariants,
    qr_normalized,
    velocity_gradient,
)
from pcgbench.registry import METRICS

QR = ("qr_js", "qr_tv", "qr_hellinger")
KEYS = {"qr_js": "js", "qr_tv": "tv", "qr_hellinger": "hellinger"}


class DummyTask:
    """The qr metrics never look at the task."""


CTX_TASK = DummyTask()


def ctx() -> MetricContext:
    return MetricContext(task=CTX_TASK)  # type: ignore[arg-type]


def grid(n: int, L: float = 2 * math.pi) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = L * torch.arange(n, dtype=torch.float64) / n
    x, y, z = torch.meshgrid(g, g, g, indexing="ij")
    return x, y, z


def one(m: list[list[float]]) -> torch.Tensor:
    """A constant 3x3 tensor as A [1, 3, 3] (no trailing dims)."""
    return torch.tensor(m, dtype=torch.float64)[None]


def smooth_field(n_samples: int, n: int, seed: int, channels: int = 3) -> torch.Tensor:
    """Random periodic fields with modes |m| <= 3 (resolved on n >= 8)."""
    gen = torch.Generator().manual_seed(seed)
    spec = torch.randn(n_samples, channels, n, n, n // 2 + 1, dtype=torch.complex128,
                       generator=gen)
    m = torch.fft.fftfreq(n, d=1.0 / n, dtype=torch.float64)
    mz = torch.fft.rfftfreq(n, d=1.0 / n, dtype=torch.float64)
    keep = (m.abs()[:, None, None] <= 3) & (m.abs()[None, :, None] <= 3) & (mz <= 3)
    return torch.fft.irfftn(spec * keep, s=(n, n, n), dim=(-3, -2, -1)) * n**3


# -- invariants on analytic constant tensors ---------------------------------------------
def test_pure_strain() -> None:
    """A = diag(a, b, -a-b): Q = -(a^2 + b^2 + (a+b)^2)/2, R = -a b (-a-b)."""
    a, b = 0.7, -1.9
    q, r = qr_invariants(one([[a, 0, 0], [0, b, 0], [0, 0, -a - b]]))
    assert q.shape == (1,) and r.shape == (1,)
    assert float(q) == pytest.approx(-(a * a + b * b + (a + b) ** 2) / 2, rel=1e-14)
    assert float(r) == pytest.approx(-a * b * (-a - b), rel=1e-14)


def test_solid_body_rotation() -> None:
    """A = [[0, -W, 0], [W, 0, 0], [0, 0, 0]]: A^2 = diag(-W^2, -W^2, 0), so
    Q = -1/2 tr(A^2) = W^2 (= omega^2 / 4 with omega = 2W); the last row is 0, R = 0."""
    w = 1.3
    q, r = qr_invariants(one([[0, -w, 0], [w, 0, 0], [0, 0, 0]]))
    assert float(q) == pytest.approx(w * w, rel=1e-14)
    assert float(r) == 0.0


def test_burgers_vortex_axis() -> None:
    """Burgers vortex u_r = -a r/2, u_z = a z, u_theta = G/(2 pi r) (1 - exp(-r^2 a/(4 nu))).
    Near the axis u_theta ~ G a r/(8 pi nu): solid-body core with W0 = G a/(8 pi nu)
    (omega_z = 2 W0 = G a/(4 pi nu)).  In Cartesian form at r = 0
    A = [[-a/2, -W0, 0], [W0, -a/2, 0], [0, 0, a]], so
    tr(A^2) = 2 (a^2/4 - W0^2) + a^2  ->  Q = W0^2 - 3 a^2/4  (= Q_W + Q_S),
    det A = a (a^2/4 + W0^2)          ->  R = -a (a^2/4 + W0^2)."""
    a, gam, nu = 0.5, 2.0, 0.1
    w0 = gam * a / (8 * math.pi * nu)

    def vel(p: np.ndarray) -> np.ndarray:  # the full vortex, to check A at the axis
        x, y, z = p
        r2 = x * x + y * y
        f = gam / (2 * math.pi * r2) * -math.expm1(-r2 * a / (4 * nu))  # u_theta / r
        return np.array([-a * x / 2 - f * y, -a * y / 2 + f * x, a * z])

    # central differences along x and y at the axis (f is 0/0 on the axis itself, so
    # not along z; the z column, (0, 0, a), is plain)
    h = 1e-4
    fd = np.stack([(vel(h * e) - vel(-h * e)) / (2 * h) for e in np.eye(3)[:2]], axis=1)
    exact = np.array([[-a / 2, -w0, 0], [w0, -a / 2, 0], [0, 0, a]])
    np.testing.assert_allclose(fd, exact[:, :2], atol=1e-6)
    q, r = qr_invariants(torch.from_numpy(exact)[None])
    assert float(q) == pytest.approx(w0 * w0 - 3 * a * a / 4, rel=1e-14)
    assert float(r) == pytest.approx(-a * (a * a / 4 + w0 * w0), rel=1e-14)


def test_random_matrices_match_numpy() -> None:
    rng = np.random.default_rng(0)
    m = rng.standard_normal((50, 3, 3))
    dev = m - np.trace(m, axis1=1, axis2=2)[:, None, None] / 3 * np.eye(3)
    q, r = qr_invariants(torch.from_numpy(m))
    np.testing.assert_allclose(q.numpy(), -0.5 * np.trace(dev @ dev, axis1=1, axis2=2),
                               rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(r.numpy(), -np.linalg.det(dev), rtol=1e-12, atol=1e-13)
    # traceless: -det A = -1/3 tr(A^3)
    np.testing.assert_allclose(r.numpy(), -np.trace(dev @ dev @ dev, axis1=1, axis2=2) / 3,
                               rtol=1e-12, atol=1e-13)
    q0, r0 = qr_invariants(torch.from_numpy(m), traceless=False)
    np.testing.assert_allclose(q0.numpy(), -0.5 * np.trace(m @ m, axis1=1, axis2=2),
                               rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(r0.numpy(), -np.linalg.det(m), rtol=1e-12, atol=1e-13)
    # any trailing shape: [N, 3, 3, 2, 5] -> [N, 2, 5]
    t = torch.from_numpy(rng.standard_normal((2, 3, 3, 2, 5)))
    qt, _ = qr_invariants(t)
    assert qt.shape == (2, 2, 5)
    assert float(qt[1, 1, 3]) == pytest.approx(float(qr_invariants(t[1:2, :, :, 1, 3])[0][0]))
    with pytest.raises(PcgError):
        qr_invariants(torch.zeros(2, 3, 2))


# -- Fourier velocity gradient -----------------------------------------------------------
ABC = (1.0, 0.7, 0.4)


def abc_flow(n: int, coef: tuple[float, float, float] = ABC) -> torch.Tensor:
    a, b, c = coef
    x, y, z = grid(n)
    return torch.stack([a * torch.sin(z) + c * torch.cos(y),
                        b * torch.sin(x) + a * torch.cos(z),
                        c * torch.sin(y) + b * torch.cos(x)])[None]


def abc_gradient(n: int, coef: tuple[float, float, float] = ABC) -> torch.Tensor:
    a, b, c = coef
    x, y, z = grid(n)
    zero = torch.zeros_like(x)
    rows = [[zero, -c * torch.sin(y), a * torch.cos(z)],
            [b * torch.cos(x), zero, -a * torch.sin(z)],
            [-b * torch.sin(x), c * torch.cos(y), zero]]
    return torch.stack([torch.stack(row) for row in rows])[None]


def test_gradient_abc_flow_and_pressure_ignored() -> None:
    n = 16
    u = abc_flow(n)
    a = velocity_gradient(u)
    assert a.shape == (1, 3, 3, n, n, n) and a.dtype == torch.float64
    assert float((a - abc_gradient(n)).abs().max()) < 1e-12
    p = torch.randn(1, 1, n, n, n, dtype=torch.float64)
    assert torch.equal(velocity_gradient(torch.cat([u, p], 1)), a)
    assert torch.equal(velocity_gradient(u.float()), velocity_gradient(u.float().double()))


def test_gradient_several_modes_box_length_and_nyquist() -> None:
    """u = sin(2x + 3y) cos z, v = cos(x - 2z) + sin 3y, w = sin(x) sin(2y) sin(3z) on a box
    of side L (x scaled by 2 pi / L); plus a Nyquist cosine, whose derivative is zeroed."""
    n, L = 12, 3.0
    x, y, z = grid(n, L)
    s = 2 * math.pi / L
    X, Y, Z = s * x, s * y, s * z
    u = torch.stack([torch.sin(2 * X + 3 * Y) * torch.cos(Z),
                     torch.cos(X - 2 * Z) + torch.sin(3 * Y),
                     torch.sin(X) * torch.sin(2 * Y) * torch.sin(3 * Z)])
    c1, s1 = torch.cos(2 * X + 3 * Y), torch.sin(2 * X + 3 * Y)
    ex = [[2 * c1 * torch.cos(Z), 3 * c1 * torch.cos(Z), -s1 * torch.sin(Z)],
          [-torch.sin(X - 2 * Z), 3 * torch.cos(3 * Y), 2 * torch.sin(X - 2 * Z)],
          [torch.cos(X) * torch.sin(2 * Y) * torch.sin(3 * Z),
           2 * torch.sin(X) * torch.cos(2 * Y) * torch.sin(3 * Z),
           3 * torch.sin(X) * torch.sin(2 * Y) * torch.cos(3 * Z)]]
    exact = s * torch.stack([torch.stack(r) for r in ex])
    # the Nyquist cosine cos(n/2 X) = (-1)^i on the grid: its derivative is 0 there
    nyq = torch.cos(n / 2 * X)
    got = velocity_gradient(torch.stack([u, u + nyq[None]]), L=L)
    assert float((got[0] - exact).abs().max()) < 1e-12
    assert float((got[1] - exact).abs().max()) < 1e-12
    with pytest.raises(PcgError):
        velocity_gradient(torch.zeros(1, 2, 4, 4, 4))
    with pytest.raises(PcgError):
        velocity_gradient(torch.zeros(1, 3, 4, 4))


def test_abc_invariants_and_rotation() -> None:
    """ABC gradient (above): diagonal 0, so
    Q = -(A01 A10 + A02 A20 + A12 A21) = bc sin y cos x + ab sin x cos z + ac cos y sin z,
    det A = -A01 (A10 A22 - A12 A20) + A02 (A10 A21 - A11 A20)
          = abc (cos x cos y cos z - sin x sin y sin z),  R = -det A.
    Beltrami: omega = u, so <Q_W> = <|u|^2>/4 = (a^2 + b^2 + c^2)/4; <Q> = 0 (periodic)."""
    n = 16
    a, b, c = ABC
    x, y, z = grid(n)
    q, r = qr_invariants(velocity_gradient(abc_flow(n)))
    qa = (b * c * torch.sin(y) * torch.cos(x) + a * b * torch.sin(x) * torch.cos(z)
          + a * c * torch.cos(y) * torch.sin(z))
    ra = -a * b * c * (torch.cos(x) * torch.cos(y) * torch.cos(z)
                       - torch.sin(x) * torch.sin(y) * torch.sin(z))
    assert float((q[0] - qa).abs().max()) < 1e-12
    assert float((r[0] - ra).abs().max()) < 1e-12
    assert abs(float(q.mean())) < 1e-14
    qw = (a * a + b * b + c * c) / 4
    assert mean_rotation_invariant(abc_flow(n)) == pytest.approx(qw, rel=1e-13)
    qs, rs = qr_normalized(abc_flow(n))
    assert float((qs[0] - qa / qw).abs().max()) < 1e-12
    assert float((rs[0] - ra / qw**1.5).abs().max()) < 1e-12


def test_rotation_invariant_matches_direct_curl() -> None:
    """Parseval <|omega|^2> = the grid mean of the curl of velocity_gradient, any chunking."""
    u = torch.randn(5, 4, 8, 6, 10, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(3))
    a = velocity_gradient(u, L=1.7)
    w2 = ((a[:, 2, 1] - a[:, 1, 2]) ** 2 + (a[:, 0, 2] - a[:, 2, 0]) ** 2
          + (a[:, 1, 0] - a[:, 0, 1]) ** 2)
    direct = float(w2.mean()) / 4
    assert mean_rotation_invariant(u, L=1.7) == pytest.approx(direct, rel=1e-12)
    assert mean_rotation_invariant(u, 1.7, chunk_points=8 * 6 * 10) == pytest.approx(
        direct, rel=1e-12)


# -- normalization and histograms --------------------------------------------------------
def test_normalization_removes_velocity_scale_and_box_length() -> None:
    u = smooth_field(3, 12, seed=1)
    q, r = qr_normalized(u)
    for c in (2.0, 3.0):
        qc, rc = qr_normalized(c * u)
        torch.testing.assert_close(qc, q, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(rc, r, rtol=1e-12, atol=1e-12)
        assert qr_distances(c * u, u) == {"js": 0.0, "tv": 0.0, "hellinger": 0.0}
    ql, rl = qr_normalized(u, L=0.3)
    torch.testing.assert_close(ql, q, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(rl, r, rtol=1e-11, atol=1e-11)
    # no vorticity (a potential flow): nothing to normalize by
    x, y, z = grid(12)
    pot = torch.stack([torch.cos(x), torch.zeros_like(x), torch.zeros_like(x)])[None]
    assert bool(qr_normalized(pot)[0].isnan().all())
    assert bool(qr_histogram(pot).isnan().all())
    assert all(math.isnan(v) for v in qr_distances(pot, u[:1]).values())


@pytest.mark.parametrize("window", [((-2.0, 2.0), (-4.0, 4.0)), ((-0.05, 0.1), (-0.2, 0.1))])
def test_histogram_matches_numpy_and_clips(window) -> None:
    """Chunked histogram == numpy histogram2d of the clipped (R*, Q*) of the whole set;
    the narrow window puts most points into the edge bins and still sums to 1."""
    (r_range, q_range) = window
    u = smooth_field(4, 10, seed=2)
    qs, rs = qr_normalized(u)
    rv = np.clip(rs.numpy().ravel(), *r_range)
    qv = np.clip(qs.numpy().ravel(), *q_range)
    ref, _, _ = np.histogram2d(rv, qv, bins=[20, 30], range=[r_range, q_range])
    ref /= ref.sum()
    for chunk in (None, 1000, 1):  # default: one chunk; 1000 / 1: one sample per chunk
        h = qr_histogram(u, bins=(20, 30), r_range=r_range, q_range=q_range,
                         chunk_points=chunk)
        assert h.shape == (20, 30) and h.dtype == torch.float64
        np.testing.assert_array_equal(h.numpy(), ref)
        assert float(h.sum()) == pytest.approx(1.0, abs=1e-14)
    if r_range[0] > -1:
        edges = h[0].sum() + h[-1].sum() + h[:, 0].sum() + h[:, -1].sum()
        assert float(edges) > 0.5


# -- distances ----------------------------------------------------------------------------
def rand_hist(seed: int, shape: tuple[int, int] = (10, 12)) -> torch.Tensor:
    h = torch.rand(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    h[h < 0.3] = 0.0  # some empty bins
    return h / h.sum()


def test_histogram_distances_closed_forms_symmetry_bounds() -> None:
    p = rand_hist(0)
    assert histogram_distances(p, p) == {"js": 0.0, "tv": 0.0, "hellinger": 0.0}
    # counts, not probabilities: normalized first (equal up to rounding)
    d = histogram_distances(3 * p, p)
    assert max(d.values()) < 1e-15
    a, b = torch.zeros(10, 12, dtype=torch.float64), torch.zeros(10, 12, dtype=torch.float64)
    a[:5], b[5:] = rand_hist(1)[:5], rand_hist(2)[5:]  # disjoint supports
    d = histogram_distances(a, b)
    assert d["js"] == pytest.approx(math.log(2), rel=1e-14)
    assert d["tv"] == pytest.approx(1.0, rel=1e-14)
    assert d["hellinger"] == pytest.approx(1.0, rel=1e-14)
    for s in range(3, 8):
        p, q = rand_hist(s), rand_hist(s + 10)
        d, e = histogram_distances(p, q), histogram_distances(q, p)
        for k in d:
            assert d[k] == pytest.approx(e[k], rel=1e-13)
        assert 0 < d["js"] <= math.log(2) and 0 < d["tv"] <= 1 and 0 < d["hellinger"] <= 1
        # independent forms: JS = H(M) - (H(p) + H(q))/2; H^2 = 1 - sum sqrt(p q)
        m = 0.5 * (p + q)

        def ent(v: torch.Tensor) -> float:
            return -float((v[v > 0] * v[v > 0].log()).sum())

        assert d["js"] == pytest.approx(ent(m) - 0.5 * (ent(p) + ent(q)), rel=1e-10)
        assert d["hellinger"] ** 2 == pytest.approx(1 - float((p * q).sqrt().sum()), rel=1e-10)
    empty = histogram_distances(torch.zeros(4), p.reshape(-1)[:4])
    assert all(math.isnan(v) for v in empty.values())
    with pytest.raises(PcgError):
        histogram_distances(torch.ones(3), torch.ones(4))


def test_qr_distances_fields() -> None:
    u, w = smooth_field(3, 10, seed=4), smooth_field(3, 10, seed=5)
    assert qr_distances(u, u) == {"js": 0.0, "tv": 0.0, "hellinger": 0.0}
    d, e = qr_distances(u, w), qr_distances(w, u)
    assert d == pytest.approx(e, rel=1e-12)
    assert all(v > 0 for v in d.values())
    # plane shear u = sin y: A01 = cos y only, so Q = R = 0 everywhere (one bin)
    x, y, z = grid(10)
    shear = torch.stack([torch.sin(y), torch.zeros_like(x), torch.zeros_like(x)])[None]
    assert qr_distances(shear, u)["tv"] > 0.5


# -- registered metrics --------------------------------------------------------------------
def test_registered_metrics() -> None:
    for name in QR:
        cls = METRICS.get(name)
        assert cls.name == name and cls.higher_is_better is False
        assert cls.description and cls.__doc__


def test_metrics_through_interface_and_cache(monkeypatch) -> None:
    u, w = smooth_field(3, 8, seed=6, channels=4), smooth_field(4, 8, seed=7, channels=4)
    calls = []
    real = vg.qr_histogram
    monkeypatch.setattr(vg, "qr_histogram", lambda *a, **k: calls.append(1) or real(*a, **k))
    c = ctx()
    got = {name: METRICS.get(name)()(u, w, c) for name in QR}
    assert len(calls) == 2  # one histogram per set, shared by the three metrics
    expect = qr_distances(u, w)
    assert got == {name: expect[KEYS[name]] for name in QR}
    # other tensor objects (even equal values) are not served from the cache
    v = u.clone()
    v[:, 3] = 5.0  # a different pressure: ignored
    assert METRICS.get("qr_tv")()(v, w, c) == got["qr_tv"]
    assert len(calls) == 6  # two for the direct qr_distances, two for (v, w)
    assert METRICS.get("qr_js")()(w, w, c) == 0.0


def test_metrics_nonfinite_rows_and_inapplicable_inputs() -> None:
    u, w = smooth_field(4, 8, seed=8), smooth_field(3, 8, seed=9)
    bad = u.clone()
    bad[2, 1, 0, 0, 0] = float("nan")
    keep = torch.tensor([True, True, False, True])
    for name in QR:
        m = METRICS.get(name)()
        assert m(bad, w, ctx()) == m(u[keep], w, ctx())
        assert math.isnan(m(torch.full_like(u, math.nan), w, ctx()))
        assert math.isnan(m(u[:, :2], w[:, :2], ctx()))  # fewer than 3 channels
        assert math.isnan(m(u[:, :, 0], w[:, :, 0], ctx()))  # 2-D
        assert math.isnan(m(u[:, :, 0, 0], w[:, :, 0, 0], ctx()))  # 1-D


# -- plot ------------------------------------------------------------------------------------
def test_plot_qr_writes_png(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    h = qr_histogram(smooth_field(2, 8, seed=10), bins=40)
    out = plot_qr(h, tmp_path / "qr.png", title="smooth random field")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
