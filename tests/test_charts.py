"""Charts: exact feasibility, residual-factorization differential, encoder properties,
matrix-free pullback, approximate decoders (paper Sec. 3.3 and appendices)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from pcgbench.charts import (
    AffineNullSpaceChart,
    AlgebraicEliminationChart,
    Chart,
    GaussNewtonChart,
    HelmholtzChart3D,
    MaskedValueChart,
    MeanFreeChart,
    SolverDecoderChart,
    StreamfunctionChart2D,
    decoder_certificates,
)
from pcgbench.errors import PcgError

F64 = torch.float64
B = 3
# torch's forward-AD decompositions call the deprecated torch.jit.script on first use
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rand(*shape: int, g: torch.Generator, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=dtype)


def _mean_free(y: torch.Tensor, dim: int) -> torch.Tensor:
    return y - y.mean(dim, keepdim=True)


# Each case: (chart, domain sampler y(g) -> [B, *coord_shape], cond or None, linear?)
Case = tuple[Chart, Callable[[torch.Generator], torch.Tensor], "torch.Tensor | None", bool]


def _cases() -> dict[str, Case]:
    g = _gen(1)
    A = _rand(3, 10, g=g)
    W = _rand(2, 3, g=g)
    w_pos = torch.rand(2, 5, generator=g, dtype=F64) + 0.5
    cases: dict[str, Case] = {}

    ch = AffineNullSpaceChart(A, _rand(3, g=g), field_shape=(2, 5))
    cases["affine"] = (ch, lambda g: _rand(B, *ch.coord_shape, g=g), None, True)
    ch2 = AffineNullSpaceChart(A, field_shape=(2, 5), b_fn=lambda c: c @ W, weights=w_pos)
    cases["affine_cond_weighted"] = (ch2, lambda g: _rand(B, *ch2.coord_shape, g=g),
                                     _rand(B, 2, g=g), True)
    ch3 = AffineNullSpaceChart.from_basis(_rand(10, g=g), _rand(10, 4, g=g), (2, 5),
                                          weights=w_pos)
    cases["affine_basis"] = (ch3, lambda g: _rand(B, 4, g=g), None, True)

    mask = torch.rand(1, 6, 5, generator=g) < 0.3
    ch4 = MaskedValueChart(mask, _rand(1, 6, 5, g=g), weights=torch.rand(1, 6, 5,
                           generator=g, dtype=F64) + 0.5)
    cases["masked"] = (ch4, lambda g: _rand(B, *ch4.coord_shape, g=g), None, True)
    ch5 = MaskedValueChart(mask, values_fn=lambda c: c.reshape(-1, 1, 6, 5))
    cases["masked_cond"] = (ch5, lambda g: _rand(B, *ch5.coord_shape, g=g),
                            _rand(B, 30, g=g), True)

    ch6 = MeanFreeChart((1, 8, 5), (1,), target=0.3)
    cases["meanfree_target"] = (ch6, lambda g: _mean_free(_rand(B, 1, 8, 5, g=g), 2), None,
                                True)
    ch7 = MeanFreeChart((1, 8, 5), (1,), target=lambda c: c[:, 0])
    cases["meanfree_cond"] = (ch7, lambda g: _mean_free(_rand(B, 1, 8, 5, g=g), 2),
                              _rand(B, 1, g=g), True)

    def ref_domain(g: torch.Generator) -> torch.Tensor:
        y = _rand(B, 2, 8, 5, g=g)
        return torch.cat([y[..., :1], _mean_free(y[..., 1:], 2)], dim=-1)

    ch8 = MeanFreeChart((2, 8, 5), (1,), ref_dim=2,
                        weights=torch.rand(2, 8, 5, generator=g, dtype=F64) + 0.5)
    cases["meanfree_first"] = (ch8, ref_domain, None, True)
    ch9 = MeanFreeChart((2, 8, 5), (1,), ref_dim=2, ref_fn=lambda c: c.reshape(-1, 2, 8, 1))
    cases["meanfree_fixed_ic"] = (ch9, lambda g: _mean_free(_rand(B, 2, 8, 4, g=g), 2),
                                  _rand(B, 16, g=g), True)

    ch10 = StreamfunctionChart2D((8, 6), L=(2 * math.pi, 3.0))
    cases["streamfunction"] = (ch10, lambda g: ch10.gauge_project(_rand(B, 1, 8, 6, g=g)),
                               None, True)
    ch11 = StreamfunctionChart2D((7, 6), indexing="xy",
                                 weights=torch.tensor([2.0, 0.5], dtype=F64).reshape(2, 1, 1))
    cases["streamfunction_xy"] = (ch11, lambda g: ch11.gauge_project(_rand(B, 1, 7, 6, g=g)),
                                  None, True)
    w_ch = torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=F64)[:, None, None, None]
    ch12 = HelmholtzChart3D((6, 4, 5), passthrough=1, weights=w_ch)
    cases["helmholtz3d"] = (ch12, lambda g: ch12.project(_rand(B, 4, 6, 4, 5, g=g)), None,
                            True)
    ch13 = AlgebraicEliminationChart(
        (3, 4, 5), [0, 2], lambda y, c: y[:, :1] * y[:, 1:2] + torch.sin(y[:, :1]))
    cases["algebraic"] = (ch13, lambda g: _rand(B, 2, 4, 5, g=g), None, False)
    return cases


CASES = _cases()
LINEAR = [k for k, v in CASES.items() if v[3]]


def _explicit_pullback(chart: Chart, y: torch.Tensor, cond: torch.Tensor | None,
                       v: torch.Tensor) -> torch.Tensor:
    """J^T M J v with a dense per-sample Jacobian."""
    out = []
    w = torch.as_tensor(chart.metric_weights(), dtype=y.dtype).expand(chart.field_shape)
    for i in range(y.shape[0]):
        c = None if cond is None else cond[i:i + 1]
        jac = torch.func.jacrev(lambda yy, c=c: chart.decode(yy, c))(y[i:i + 1])
        jac = jac.reshape(chart.field_dim, chart.coord_dim)
        out.append(jac.T @ (w.reshape(-1, 1) * jac) @ v[i].reshape(-1))
    return torch.stack(out).reshape(v.shape)


@pytest.mark.parametrize("name", list(CASES))
def test_exact_feasibility_and_differential(name: str) -> None:
    chart, sample, cond, _ = CASES[name]
    g = _gen(2)
    y = sample(g)
    assert tuple(chart.decode(y, cond).shape) == (B, *chart.field_shape)
    assert chart.residual(chart.decode(y, cond), cond).abs().max() <= 1e-10
    # Lemma residual-factorization differential: J_R J_chi v = 0
    v = _rand(*y.shape, g=g)
    _, jv = torch.func.jvp(lambda yy: chart.residual(chart.decode(yy, cond), cond), (y,), (v,))
    assert jv.abs().max() <= 1e-10
    certs = decoder_certificates(chart, y, cond, power_iters=5)
    assert certs["eps_dec"] <= 1e-10 and certs["delta_dec"] <= 1e-10
    assert chart.tolerance == 0.0 and chart.diagnostics(y, cond) == {}


@pytest.mark.parametrize("name", list(CASES))
def test_encode_decode_roundtrip_and_projection(name: str) -> None:
    chart, sample, cond, _ = CASES[name]
    g = _gen(3)
    y = sample(g)
    x = chart.decode(y, cond)
    assert (chart.encode(x, cond) - y).abs().max() <= 1e-10  # identity on the domain
    xr = _rand(B, *chart.field_shape, g=g)  # off-manifold
    p1 = chart.decode(chart.encode(xr, cond), cond)
    p2 = chart.decode(chart.encode(p1, cond), cond)
    assert (p1 - p2).abs().max() <= 1e-10  # idempotent: a projection
    assert chart.residual(p1, cond).abs().max() <= 1e-10


@pytest.mark.parametrize("name", LINEAR)
def test_encoder_is_metric_orthogonal_projection(name: str) -> None:
    """For linear charts, eta(x) = argmin ||chi(y) - x||_M  <=>  J^T M (x - chi(eta(x))) = 0."""
    chart, sample, cond, _ = CASES[name]
    g = _gen(4)
    xr = _rand(B, *chart.field_shape, g=g)
    y = chart.encode(xr, cond)
    _, vjp_fn = torch.func.vjp(lambda yy: chart.decode(yy, cond), y)
    w = torch.as_tensor(chart.metric_weights(), dtype=F64)
    grad = vjp_fn((xr - chart.decode(y, cond)) * w)[0]
    assert grad.abs().max() <= 1e-10


def test_affine_encoder_matches_closed_form() -> None:
    chart, _, cond, _ = CASES["affine_cond_weighted"]
    g = _gen(5)
    x = _rand(B, 2, 5, g=g)
    A = chart.A
    w = chart.metric_weights().reshape(-1)
    m_inv = torch.diag(1 / w)
    b = cond @ torch.as_tensor(chart.b_fn(torch.eye(2, dtype=F64)))  # linear b_fn
    xf = x.reshape(B, -1)
    # closed-form M-projection onto {A x = b}: x - M^-1 A^T (A M^-1 A^T)^-1 (A x - b)
    lam = torch.linalg.solve(A @ m_inv @ A.T, (xf @ A.T - b).T).T
    expected = xf - lam @ A @ m_inv
    got = chart.decode(chart.encode(x, cond), cond).reshape(B, -1)
    assert (got - expected).abs().max() <= 1e-10
    # N is M-orthonormal: the pullback metric is the identity
    n = chart.N
    assert (n.T @ (w[:, None] * n) - torch.eye(n.shape[1], dtype=F64)).abs().max() <= 1e-10


@pytest.mark.parametrize("name", list(CASES))
def test_pullback_matvec_matches_explicit_jacobian(name: str) -> None:
    chart, sample, cond, _ = CASES[name]
    g = _gen(6)
    y = sample(g)
    v = _rand(*y.shape, g=g)
    got = chart.pullback_matvec(y, v, cond)
    assert torch.allclose(got, _explicit_pullback(chart, y, cond, v), atol=1e-10)


def test_streamfunction_divergence_and_commuting_derivatives() -> None:
    g = _gen(7)
    chart = StreamfunctionChart2D((16, 12), L=(1.0, 2.0))
    f = _rand(2, 16, 12, g=g)
    assert (chart.dx(chart.dy(f)) - chart.dy(chart.dx(f))).abs().max() <= 1e-10
    psi = _rand(B, 1, 16, 12, g=g)
    uv = chart.decode(psi)
    div = chart.dx(uv[:, 0]) + chart.dy(uv[:, 1])
    assert div.abs().max() <= 1e-10
    # encoder recovers psi from (u, v) + a gradient field (Helmholtz orthogonality)
    phi = _rand(B, 16, 12, g=g)
    x = uv + torch.stack([chart.dx(phi), chart.dy(phi)], dim=1)
    assert (chart.encode(x) - chart.gauge_project(psi)).abs().max() <= 1e-10
    with pytest.raises(PcgError):  # spectral charts need M constant over space
        StreamfunctionChart2D((8, 8), weights=torch.rand(2, 8, 8) + 0.5)


def test_changing_metric_weights_rebuilds_charts() -> None:
    """Assigning ``metric_w`` (or set_metric_weights) re-derives M-dependent parts."""
    g = _gen(15)
    chart = AffineNullSpaceChart(_rand(3, 10, g=g), _rand(3, g=g), field_shape=(2, 5))
    chart.metric_w = torch.rand(2, 5, generator=g, dtype=F64) + 0.5
    w = chart.metric_w.reshape(-1)
    assert torch.allclose(chart.N.T @ (w[:, None] * chart.N), torch.eye(7, dtype=F64))
    x = _rand(B, 2, 5, g=g)
    y = chart.encode(x)
    _, vjp_fn = torch.func.vjp(chart.decode, y)
    assert vjp_fn((x - chart.decode(y)) * chart.metric_w)[0].abs().max() <= 1e-10
    stream = StreamfunctionChart2D((8, 6))
    stream.set_metric_weights(torch.tensor([3.0, 0.5], dtype=F64).reshape(2, 1, 1))
    assert torch.equal(stream.chan_w, torch.tensor([3.0, 0.5], dtype=F64))
    with pytest.raises(PcgError):
        stream.metric_w = -torch.ones(2, 1, 1)


def test_helmholtz_passthrough_and_divergence() -> None:
    g = _gen(8)
    chart = HelmholtzChart3D((8, 6, 4), passthrough=1)
    y = _rand(B, 4, 8, 6, 4, g=g)
    x = chart.decode(y)
    assert chart.residual(x).abs().max() <= 1e-10
    assert torch.equal(x[:, 3], y[:, 3])
    # the removed part is a gradient: orthogonal to the divergence-free image
    assert abs(float(((y - x)[:, :3] * x[:, :3]).sum())) <= 1e-9


def test_meanfree_heat_style_conservation() -> None:
    """sum_x u(., t) = sum_x u(., 0) for every t (layout [1, nx, nt])."""
    g = _gen(9)
    chart = MeanFreeChart((1, 16, 7), (1,), ref_dim=2)
    x = chart.decode(chart.encode(_rand(B, 1, 16, 7, g=g)))
    sums = x.sum(2)  # [B, 1, nt]
    assert (sums - sums[..., :1]).abs().max() <= 1e-10
    with pytest.raises(PcgError):
        MeanFreeChart((1, 16, 7), (1,))


def test_algebraic_refined_encoder_reduces_projection_error() -> None:
    g = _gen(10)
    fn = lambda y, c: y[:, :1] * y[:, 1:2] + torch.sin(y[:, :1])  # noqa: E731
    plain = AlgebraicEliminationChart((3, 2, 2), [0, 2], fn)
    refined = AlgebraicEliminationChart((3, 2, 2), [0, 2], fn, encode_iters=12)
    x = plain.decode(_rand(B, 2, 2, 2, g=g)) + 0.1 * _rand(B, 3, 2, 2, g=g)
    err = [(c.decode(c.encode(x)) - x).square().sum() for c in (plain, refined)]
    assert err[1] < err[0]
    y = refined.encode(x)  # first-order optimality of the M-projection
    _, vjp_fn = torch.func.vjp(refined.decode, y)
    assert vjp_fn(x - refined.decode(y))[0].abs().max() <= 1e-8


def test_float32_charts() -> None:
    g = _gen(11)
    for name in ("affine", "masked", "meanfree_first", "streamfunction", "helmholtz3d"):
        chart, sample, cond, _ = CASES[name]
        y = sample(g).float()
        c = None if cond is None else cond.float()
        x = chart.decode(y, c)
        assert x.dtype == torch.float32
        assert chart.residual(x, c).abs().max() <= 1e-4
        assert (chart.encode(x, c) - y).abs().max() <= 1e-4


# -- approximate decoders --------------------------------------------------------------
def _sphere_mass(x: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
    xf = x.reshape(x.shape[0], -1)
    radius = 1.0 if c is None else c[:, 0]
    return torch.stack([xf.square().sum(1) - radius**2, xf.sum(1) - 0.5], dim=1)


@pytest.mark.parametrize("with_cond", [False, True])
def test_gauss_newton_converges_with_diagnostics(with_cond: bool) -> None:
    g = _gen(12)
    chart = GaussNewtonChart(_sphere_mass, (1, 6), iters=12,
                             weights=torch.rand(1, 6, generator=g, dtype=F64) + 0.5)
    y = 0.5 * _rand(B, 1, 6, g=g)
    cond = 1.0 + torch.rand(B, 1, generator=g, dtype=F64) if with_cond else None
    x = chart.decode(y, cond)
    assert chart.residual(x, cond).abs().max() <= 1e-10
    diag = chart.calibrate(y, cond)
    assert diag["eps_dec"] <= 1e-10 and diag["delta_dec"] <= 1e-8 and diag["gn_step"] <= 1e-8
    assert chart.tolerance == diag["eps_dec"]
    assert (chart.decode(chart.encode(x), cond) - x).abs().max() <= 1e-10  # fixed point
    v = _rand(*y.shape, g=g)
    assert torch.allclose(chart.pullback_matvec(y, v, cond),
                          _explicit_pullback(chart, y, cond, v), atol=1e-9)
    short = GaussNewtonChart(_sphere_mass, (1, 6), iters=1).diagnostics(y, cond)
    assert short["eps_dec"] > 1e3 * diag["eps_dec"] and short["delta_dec"] > 1e-6


def test_gauss_newton_on_base_chart_keeps_base_constraints() -> None:
    g = _gen(13)
    base = MaskedValueChart(torch.tensor([[True, False, False, False, False, True]]),
                            torch.full((1, 6), 0.2, dtype=F64))
    chart = GaussNewtonChart(_sphere_mass, (1, 6), base_chart=base)
    assert chart.coord_shape == base.coord_shape
    y = 0.5 * _rand(B, 4, g=g)
    x = chart.decode(y)
    assert chart.residual(x).abs().max() <= 1e-10  # [mask residual, sphere, mass]
    assert torch.all(x[:, 0, 0] == 0.2) and torch.all(x[:, 0, 5] == 0.2)
    assert chart.diagnostics(y)["eps_dec"] <= 1e-10


def _poisson_solver(n: int, K: int) -> SolverDecoderChart:
    """x = (f, u) with -Lap_h u = f (zero Dirichlet, h = 1), u by K Jacobi sweeps."""

    def neighbours(u: torch.Tensor) -> torch.Tensor:
        p = torch.nn.functional.pad(u, (1, 1, 1, 1))
        return p[..., :-2, 1:-1] + p[..., 2:, 1:-1] + p[..., 1:-1, :-2] + p[..., 1:-1, 2:]

    def step(u: torch.Tensor, f: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
        return (f + neighbours(u)) / 4.0

    def residual(x: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
        f, u = x[:, :1], x[:, 1:]
        return (4.0 * u - neighbours(u) - f).flatten(1)

    return SolverDecoderChart(step, K, None, residual_fn=residual, coord_shape=(1, n, n),
                              field_shape=(2, n, n))


def test_solver_decoder_residual_decreases_with_K() -> None:
    g = _gen(14)
    f = _rand(B, 1, 6, 6, g=g)
    res = []
    for K in (1, 2, 4, 8, 16, 32, 64):
        chart = _poisson_solver(6, K)
        res.append(float(chart.residual(chart.decode(f)).norm(dim=1).max()))
    assert all(b < a for a, b in zip(res, res[1:], strict=False))
    assert res[-1] < 1e-3 * res[0]
    chart = _poisson_solver(6, 200)
    diag = chart.calibrate(f)
    assert diag["eps_dec"] <= 1e-8 and diag["delta_dec"] <= 1e-8
    assert diag["update_norm"] <= 1e-8 and chart.tolerance == diag["eps_dec"]
    assert torch.equal(chart.encode(chart.decode(f)), f)
    v = _rand(*f.shape, g=g)
    small = _poisson_solver(4, 10)
    fs, vs = f[:, :, :4, :4], v[:, :, :4, :4]
    assert torch.allclose(small.pullback_matvec(fs, vs), _explicit_pullback(small, fs, None, vs),
                          atol=1e-10)


def _atan_sum(x: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
    return torch.atan(x.reshape(x.shape[0], -1).sum(1, keepdim=True))


def test_gauss_newton_backtracking_stops_overshoot() -> None:
    """Newton on atan(s) = 0 diverges from |s| > 1.39 (each step overshoots); the
    backtracking safeguard keeps ||h|| monotone and converges to s = 0."""
    y = torch.full((3, 1, 4), 0.75, dtype=F64) * torch.tensor([1.0, -1.0, 0.5],
                                                                 dtype=F64)[:, None, None]
    plain = GaussNewtonChart(_atan_sum, (1, 4), iters=4).decode(y)
    assert plain[:2].sum(dim=(1, 2)).abs().min() > 10.0  # |s| = 3 -> diverges
    chart = GaussNewtonChart(_atan_sum, (1, 4), iters=30, backtrack=6)
    x = chart.decode(y)
    assert chart.residual(x).abs().max() <= 1e-12
    u = y.reshape(3, -1)
    norms = []
    for _ in range(6):  # residual never increases along the iterations
        u, _ = GaussNewtonChart(_atan_sum, (1, 4), iters=1, backtrack=6).project(u)
        norms.append(float(_atan_sum(u, None).abs().max()))
    assert all(b <= a for a, b in zip(norms, norms[1:], strict=False))
    with pytest.raises(ValueError, match="backtrack"):
        GaussNewtonChart(_atan_sum, (1, 4), backtrack=-1)
