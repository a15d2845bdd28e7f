"""Geometric preconditioner C_c and input whitening P_s (paper Eqs.
pullback-physical-metric, input-preconditioner, Lemma regularized whitening)."""

from __future__ import annotations

import io

import pytest
import torch

from pcgbench.charts import (
    AffineNullSpaceChart,
    AlgebraicEliminationChart,
    HelmholtzChart,
    MaskedValueChart,
    MeanFreeChart,
    StreamfunctionChart2D,
)
from pcgbench.errors import PcgError
from pcgbench.training.preconditioning import (
    DiagonalGeometry,
    FourierDiagonalGeometry,
    IdentityGeometry,
    InputWhitening,
    fit_diagonal_from_chart,
    fit_geometry,
)

F64 = torch.float64
# torch's forward-AD decompositions call the deprecated torch.jit.script on first use
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")
S_VALUES = (0.0, 0.3, 0.7, 1.0)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _data(n: int, m: int, seed: int = 0) -> torch.Tensor:
    """Correlated, anisotropic, non-centred samples [n, m]."""
    g = _gen(seed)
    mix = torch.randn(m, m, generator=g, dtype=F64) * torch.logspace(-0.5, 0.5, m, dtype=F64)
    return torch.randn(n, m, generator=g, dtype=F64) @ mix + 3.0


def _dense_sigma(r1: torch.Tensor, s: float) -> torch.Tensor:
    m = r1.shape[1]
    return (1 - s) ** 2 * torch.eye(m, dtype=F64) + s**2 * torch.cov(r1.T)


def _inv_sqrt(a: torch.Tensor) -> torch.Tensor:
    lam, u = torch.linalg.eigh(a)
    return u @ torch.diag(lam.rsqrt()) @ u.T


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| relative to max |b| (dense eigh references lose ~cond * 1e-16)."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def _dense_P(w: InputWhitening, s: float, m: int) -> torch.Tensor:
    """P_s as a matrix: columns P_s e_i = apply(m_s + e_i, s)."""
    eye = torch.eye(m, dtype=F64)
    return w.apply(eye + s * w.mean[0], torch.full((m,), s, dtype=F64)).T


# -- geometry ----------------------------------------------------------------------------
def test_geometry_roundtrips() -> None:
    g = _gen(1)
    y = torch.randn(4, 1, 8, 6, generator=g, dtype=F64)
    mu = torch.randn(1, 8, 6, generator=g, dtype=F64)
    chart = StreamfunctionChart2D((8, 6))
    geoms = [IdentityGeometry(mu), DiagonalGeometry(torch.rand(1, 8, 6, dtype=F64) + 0.5, mu),
             FourierDiagonalGeometry(chart.pullback_sqrt_symbol(), mu)]
    for geom in geoms:
        assert torch.allclose(geom.to_y(geom.to_r(y)), y, atol=1e-12)
        assert torch.allclose(geom.to_r(mu.expand_as(y)), torch.zeros_like(y), atol=1e-12)


def test_fourier_geometry_makes_streamfunction_pullback_identity() -> None:
    """G~ = C^-T G C^-1 = I on the gauge-fixed domain (DESIGN 'Streamfunction gauge')."""
    g = _gen(2)
    chart = StreamfunctionChart2D((16, 12), L=(1.0, 3.0),
                                  weights=torch.tensor([0.25, 4.0], dtype=F64).reshape(2, 1, 1))
    y = chart.gauge_project(torch.randn(3, 1, 16, 12, generator=g, dtype=F64))
    geom = fit_geometry(chart, y)
    assert isinstance(geom, FourierDiagonalGeometry)
    for _ in range(3):
        v = chart.gauge_project(torch.randn(3, 1, 16, 12, generator=g, dtype=F64))
        gv = geom.apply_Cinv(chart.pullback_matvec(y, geom.apply_Cinv(v)))  # C symmetric
        assert (gv - v).abs().max() <= 1e-10


def test_exact_geometries_of_linear_charts() -> None:
    g = _gen(3)
    w = torch.rand(1, 6, 5, generator=g, dtype=F64) + 0.5
    charts = [
        AffineNullSpaceChart(torch.randn(3, 10, generator=g, dtype=F64),
                             torch.randn(3, generator=g, dtype=F64), weights=2.0),
        MaskedValueChart(torch.rand(1, 6, 5, generator=g) < 0.3,
                         torch.zeros(1, 6, 5, dtype=F64), weights=w),
        MeanFreeChart((1, 6, 5), (1,), target=0.0, weights=w.mean(1, keepdim=True)),
        HelmholtzChart((6, 4), passthrough=1,
                       weights=torch.tensor([2.0, 0.5, 3.0], dtype=F64)[:, None, None]),
    ]
    for chart in charts:
        geom = chart.exact_geometry()
        assert geom is not None
        y = torch.randn(4, *chart.coord_shape, generator=g, dtype=F64)
        v = torch.randn(4, *chart.coord_shape, generator=g, dtype=F64)
        if isinstance(chart, (MeanFreeChart, HelmholtzChart)):  # r-domain = C (y-domain)
            y, v = chart.encode(chart.decode(y)), geom.apply_C(chart.encode(chart.decode(v)))
        gv = geom.apply_Cinv(chart.pullback_matvec(y, geom.apply_Cinv(v)))
        assert (gv - v).abs().max() <= 1e-10


def test_fit_diagonal_exact_and_hutchinson() -> None:
    g = _gen(4)
    w = torch.rand(1, 6, 5, generator=g, dtype=F64) + 0.5
    chart = MaskedValueChart(torch.rand(1, 6, 5, generator=g) < 0.3,
                             torch.zeros(1, 6, 5, dtype=F64), weights=w)
    ys = torch.randn(8, *chart.coord_shape, generator=g, dtype=F64)
    expected = w.reshape(-1)[chart.free_idx].sqrt()
    exact = fit_diagonal_from_chart(chart, ys)
    assert torch.allclose(exact.scale, expected, atol=1e-12)
    assert torch.allclose(exact.mu, ys.mean(0))
    # Rademacher probes are exact for a diagonal G
    hutch = fit_diagonal_from_chart(chart, ys, exact_max_dim=0, n_probes=4)
    assert torch.allclose(hutch.scale, expected, atol=1e-12)


def test_fit_diagonal_nonlinear_chart_matches_jacobian() -> None:
    g = _gen(5)
    chart = AlgebraicEliminationChart((2, 3, 2), [0], lambda y, c: torch.tanh(2.0 * y))
    assert chart.exact_geometry() is None
    ys = torch.randn(10, 1, 3, 2, generator=g, dtype=F64)
    geom = fit_geometry(chart, ys)
    jac = torch.func.jacrev(chart.decode)(ys.mean(0, keepdim=True)).reshape(12, 6)
    assert torch.allclose(geom.scale.reshape(-1), (jac.T @ jac).diagonal().sqrt(), atol=1e-12)


# -- whitening ---------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "m"), [(40, 6), (10, 30)])
def test_whitening_spectrum_lemma(n: int, m: int) -> None:
    """P Sigma P^T = Sigma (Sigma + eps I)^-1 (Lemma app-regularized-whitening)."""
    r1 = _data(n, m)
    eps = 0.05
    w = InputWhitening("full").fit(r1, eps=eps)
    for s in S_VALUES:
        sigma = _dense_sigma(r1, s)
        p = _dense_P(w, s, m)
        expected = sigma @ torch.linalg.inv(sigma + eps * torch.eye(m, dtype=F64))
        assert _rel_err(p @ sigma @ p.T, expected) <= 1e-10
        assert _rel_err(p, _inv_sqrt(sigma + eps * torch.eye(m, dtype=F64))) <= 1e-10


@pytest.mark.parametrize(("n", "m"), [(40, 6), (10, 30)])
def test_thin_svd_apply_matches_dense(n: int, m: int) -> None:
    g = _gen(6)
    r1 = _data(n, m)
    eps = 1e-3
    w = InputWhitening().fit(r1.reshape(n, 1, m), eps=eps)  # field-shaped input
    r = torch.randn(5, 1, m, generator=g, dtype=F64)
    s = torch.tensor([0.0, 0.2, 0.5, 0.9, 1.0], dtype=F64)
    out = w.apply(r, s)
    assert out.shape == r.shape
    for i in range(5):
        si = float(s[i])
        p = _inv_sqrt(_dense_sigma(r1, si) + eps * torch.eye(m, dtype=F64))
        expected = p @ (r[i, 0] - si * r1.mean(0))
        assert _rel_err(out[i, 0], expected) <= 1e-9  # dense eigh loses ~lam_max/eps ulps


def test_rank_capped_whitening() -> None:
    n, m, eps = 10, 30, 1e-2
    r1 = _data(n, m)
    full = InputWhitening().fit(r1, eps=eps)
    r = torch.randn(4, m, generator=_gen(7), dtype=F64)
    s = torch.full((4,), 0.6, dtype=F64)
    for rank in (n - 1, n + 5):  # >= data rank (N - 1): exact
        capped = InputWhitening().fit(r1, eps=eps, rank=rank)
        assert _rel_err(capped.apply(r, s), full.apply(r, s)) <= 1e-10
    # below the data rank: low-rank-plus-isotropic covariance (rest of the spectrum -> mean)
    k = 3
    capped = InputWhitening().fit(r1, eps=eps, rank=k)
    lam, u = torch.linalg.eigh(torch.cov(r1.T))
    lam, u = lam.flip(0), u.flip(1)
    iso = (lam.sum() - lam[:k].sum()) / (m - k)
    uk = u[:, :k]
    sigma1 = uk @ torch.diag(lam[:k]) @ uk.T + iso * (torch.eye(m, dtype=F64) - uk @ uk.T)
    sigma = 0.4**2 * torch.eye(m, dtype=F64) + 0.6**2 * sigma1
    p = _inv_sqrt(sigma + eps * torch.eye(m, dtype=F64))
    expected = (r - 0.6 * r1.mean(0)) @ p.T
    assert _rel_err(capped.apply(r, s), expected) <= 1e-10


def test_diagonal_and_none_modes() -> None:
    r1 = _data(30, 5)
    r = torch.randn(4, 5, generator=_gen(8), dtype=F64)
    s = torch.tensor([0.0, 0.3, 0.8, 1.0], dtype=F64)[:, None]
    diag = InputWhitening("diagonal").fit(r1, eps=1e-3)
    var = r1.var(0)
    expected = (r - s * r1.mean(0)) / (s**2 * var + (1 - s) ** 2 + 1e-3).sqrt()
    assert (diag.apply(r, s[:, 0]) - expected).abs().max() <= 1e-12
    none = InputWhitening("none")
    assert torch.equal(none.apply(r, s[:, 0]), r)
    with pytest.raises(PcgError):
        InputWhitening("pca")


def test_grouped_whitening_equals_separate_fits() -> None:
    r1 = torch.cat([_data(20, 4, seed=1), _data(15, 4, seed=2) * 0.1 - 7.0])
    labels = torch.tensor([5] * 20 + [2] * 15)
    w = InputWhitening().fit(r1, eps=1e-3, groups=labels)
    sep = {5: InputWhitening().fit(r1[:20], eps=1e-3), 2: InputWhitening().fit(r1[20:], eps=1e-3)}
    r = torch.randn(6, 4, generator=_gen(9), dtype=F64)
    s = torch.linspace(0, 1, 6, dtype=F64)
    lab = torch.tensor([5, 2, 2, 5, 2, 5])
    out = w.apply(r, s, groups=lab)
    for i in range(6):
        ref = sep[int(lab[i])].apply(r[i:i + 1], s[i:i + 1])
        assert _rel_err(out[i:i + 1], ref) <= 1e-12
    with pytest.raises(PcgError):
        w.apply(r, s, groups=torch.tensor([3] * 6))
    with pytest.raises(PcgError):
        w.apply(r, s)


def test_binned_continuous_condition() -> None:
    n = 40
    cond = torch.linspace(0, 1, n, dtype=F64)[torch.randperm(n, generator=_gen(10))]
    r1 = _data(n, 3) + 10 * cond[:, None]
    w = InputWhitening().fit(r1, eps=1e-3, cond=cond[:, None], n_bins=4)
    assert w.edges.numel() == 3
    counts = torch.bincount(torch.bucketize(cond, w.edges))
    assert counts.tolist() == [10, 10, 10, 10]  # quantile bins
    c_test = torch.tensor([0.05, 0.95], dtype=F64)
    r = torch.randn(2, 3, generator=_gen(11), dtype=F64)
    out = w.apply(r, torch.tensor([0.5, 0.5], dtype=F64), cond=c_test)
    for i, c in enumerate(c_test):
        sel = torch.bucketize(cond, w.edges) == torch.bucketize(c, w.edges)
        ref = InputWhitening().fit(r1[sel], eps=1e-3).apply(r[i:i + 1], 0.5)
        assert _rel_err(out[i:i + 1], ref) <= 1e-12


def test_state_dict_roundtrip_weights_only() -> None:
    r1 = _data(12, 5)
    labels = torch.tensor([0, 1] * 6)
    mods = [
        (InputWhitening().fit(r1, eps=1e-2, rank=3, groups=labels), InputWhitening()),
        (DiagonalGeometry(torch.rand(5, dtype=F64), r1.mean(0)), DiagonalGeometry(1.0)),
        (FourierDiagonalGeometry(torch.rand(4, 3, dtype=F64) + 0.1),
         FourierDiagonalGeometry(torch.ones(1, dtype=F64))),
    ]
    for fitted, fresh in mods:
        buf = io.BytesIO()
        torch.save(fitted.state_dict(), buf)
        buf.seek(0)
        fresh.load_state_dict(torch.load(buf, weights_only=True))
        for (k1, v1), (k2, v2) in zip(fitted.state_dict().items(), fresh.state_dict().items(),
                                      strict=True):
            assert k1 == k2 and torch.equal(v1, v2)
    w_new = mods[0][1]
    r = torch.randn(3, 5, dtype=F64)
    s = torch.tensor([0.1, 0.5, 0.9], dtype=F64)
    g = torch.tensor([1, 0, 1])
    assert torch.equal(w_new.apply(r, s, groups=g), mods[0][0].apply(r, s, groups=g))


# -- C_c: closed-form, exact and probed diag(G) -------------------------------------------
def _exact_diagonal(chart, cols: torch.Tensor | None = None) -> torch.Tensor:
    """diag(G) at y = 0 from G e_i for the unit vectors ``cols`` (all by default)."""
    m = chart.coord_dim
    cols = torch.arange(m) if cols is None else cols
    eye = torch.zeros(len(cols), m, dtype=F64)
    eye[torch.arange(len(cols)), cols] = 1.0
    y = torch.zeros(len(cols), *chart.coord_shape, dtype=F64)
    cond = torch.zeros(len(cols), 1, dtype=F64)  # one (unused) condition row per probe
    gv = chart.pullback_matvec(y, eye.reshape(len(cols), *chart.coord_shape), cond)
    return gv.reshape(len(cols), m)[torch.arange(len(cols)), cols]


@pytest.mark.parametrize("mode", ["ref", "target", "ref_fn"])
@pytest.mark.parametrize("weights", ["none", "field", "channel"])
def test_mean_free_closed_form_diagonal_is_the_exact_one(mode, weights) -> None:
    g = _gen(11)
    shape = (2, 4, 5)
    w = {"none": None, "field": torch.rand(*shape, generator=g, dtype=F64) + 0.5,
         "channel": torch.tensor([2.0, 3.0], dtype=F64).view(2, 1, 1)}[weights]
    kw = {"ref": dict(ref_dim=1), "target": dict(target=0.5),
          "ref_fn": dict(ref_dim=1, ref_fn=lambda c: torch.ones(c.shape[0], 2, 5, dtype=F64))
          }[mode]
    chart = MeanFreeChart(shape, reduce_dims=(2,), weights=w, **kw)
    closed = chart.pullback_diagonal().reshape(-1)
    assert torch.allclose(closed, _exact_diagonal(chart), rtol=0, atol=1e-14)


@pytest.mark.parametrize(("nt", "nx"), [(26, 64), (201, 1024)])
def test_burgers_mass_chart_closed_form_at_the_cpu_and_paper_grids(nt, nx) -> None:
    """The Burgers `mass` chart (periodic mass conservation, the t = 0 slice free): the
    closed form equals G e_i for every coordinate at `cpu` (26 x 64) and for a seeded
    sample of 600 coordinates at the `paper` grid (201 x 1024), the t = 0 slice included;
    on the t = 0 slice it is 1 + (nt - 1) / nx (1.39, 1.195) times the channel weight."""
    chart = MeanFreeChart((1, nt, nx), reduce_dims=(2,), ref_dim=1,
                          weights=torch.tensor([0.7], dtype=F64).view(1, 1, 1))
    closed = chart.pullback_diagonal().reshape(-1)
    m = chart.coord_dim
    cols = (torch.arange(m) if m <= 2048 else torch.cat([
        torch.arange(0, nx, 7), torch.randperm(m, generator=_gen(3))[:600 - len(
            range(0, nx, 7))]]))
    assert torch.allclose(closed[cols], _exact_diagonal(chart, cols), rtol=1e-12, atol=0)
    assert float(closed[0]) == pytest.approx(0.7 * (1 + (nt - 1) / nx), rel=1e-12)
    geom = fit_geometry(chart, torch.zeros(2, 1, nt, nx, dtype=F64))
    assert geom.info["route"] == "closed form"
    assert torch.allclose(geom.scale.reshape(-1), closed.sqrt())


def test_a_probed_diagonal_reports_its_error_and_is_refused_above_five_percent() -> None:
    g = _gen(6)
    chart = AlgebraicEliminationChart((2, 8, 8), [0], lambda y, c: torch.tanh(2.0 * y))
    ys = 0.3 * torch.randn(10, 1, 8, 8, generator=g, dtype=F64)
    exact = fit_diagonal_from_chart(chart, ys)
    assert exact.info["route"] == "exact (unit vectors)"
    # G is diagonal here: Rademacher probes are exact, the two sets agree
    probed = fit_diagonal_from_chart(chart, ys, exact_max_dim=0, n_probes=4)
    assert probed.info["rel_error"] < 1e-12
    assert torch.allclose(probed.scale, exact.scale, atol=1e-12)
    # a coupled G (mass chart: every t > 0 slice depends on the t = 0 slice) is not
    mass = MeanFreeChart((1, 26, 64), reduce_dims=(2,), ref_dim=1)
    mass.pullback_diagonal = lambda y=None: None  # force the matrix-free route
    with pytest.raises(PcgError, match="relative error"):
        fit_diagonal_from_chart(mass, torch.zeros(2, 1, 26, 64, dtype=F64), exact_max_dim=0)
    ok = fit_diagonal_from_chart(mass, torch.zeros(2, 1, 26, 64, dtype=F64))
    assert torch.allclose(ok.scale.reshape(-1) ** 2, _exact_diagonal(mass), atol=1e-12)


def test_the_floor_of_c_c_is_per_coordinate_channel() -> None:
    """Channels in their own units (dynamic_stall: velocity gradients beside T and rho)
    keep their exact diag(G)^1/2 however far apart; a global rel_floor x max replaced the
    small channel's (PMosFM version 4).  Chart: coordinates (a, b), a third field
    channel 2a, M_h = diag(1, 1e-12, 1) per channel: diag(G) = (1 + 4, 1e-12)."""
    g = _gen(6)
    w = torch.tensor([1.0, 1e-12, 1.0], dtype=F64).view(3, 1, 1).expand(3, 4, 3)
    chart = AlgebraicEliminationChart((3, 4, 3), [0, 1], lambda y, c: 2.0 * y[:, :1],
                                      weights=w.clone())
    assert chart.exact_geometry() is None
    ys = torch.randn(5, *chart.coord_shape, generator=g, dtype=F64)
    geom = fit_diagonal_from_chart(chart, ys)
    expected = torch.tensor([5.0, 1e-12], dtype=F64).sqrt().view(2, 1, 1).expand(2, 4, 3)
    assert torch.allclose(geom.scale, expected, rtol=1e-10)
    # a channel whose diag(G) is zero throughout falls back to the global floor
    from pcgbench.training.preconditioning import _floor_per_channel

    d = torch.tensor([4.0, 1.0, 0.0, 0.0], dtype=F64)
    assert torch.equal(_floor_per_channel(d, (2, 2), 1e-2),
                       torch.tensor([4.0, 1.0, 0.04, 0.04], dtype=F64))


def test_one_channel_keeps_the_global_floor_bit_for_bit() -> None:
    from pcgbench.training.preconditioning import _floor_per_channel

    d = torch.rand(1 * 5 * 7, generator=_gen(7), dtype=F64)
    d[3] = 0.0
    for shape in ((1, 5, 7), (35,)):
        assert torch.equal(_floor_per_channel(d, shape, 1e-3),
                           d.clamp_min(1e-3 * float(d.max())))


def test_pmosfm_floor_noop_tasks_never_reach_a_per_channel_floor(tmp_path) -> None:
    """The claim behind ``FLOOR_NOOP_TASKS`` (their version-4 records stay current): every
    chart of each listed task has one coordinate channel or a closed-form C_c, and every
    registered task outside the list has a chart that does not."""
    from pcgbench.registry import METHODS, TASKS

    noop = METHODS.get("pmosfm").unchanged_on[5]
    assert METHODS.get("pmosfm_tuned").unchanged_on[6] == noop

    def untouched(task: str) -> bool:
        t = TASKS.get(task)("smoke", data_dir=str(tmp_path), progress=False)
        for make in t.charts().values():
            chart = make()
            shape = tuple(chart.coord_shape)
            if len(shape) >= 2 and shape[0] > 1 and \
                    chart.exact_geometry(torch.zeros(shape)) is None:
                return False
        return True

    assert noop <= set(TASKS.names())
    assert {t for t in TASKS.names() if untouched(t)} == noop
