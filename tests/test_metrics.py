"""Tests of the built-in metrics (re, wd, js, mmse, smse, energy)."""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from scipy.stats import wasserstein_distance

from pcgbench.metric import MetricContext
from pcgbench.metrics import BASIC_METRICS, nonfinite_fraction
from pcgbench.metrics.distribution import JS_BINS, js_divergence, wasserstein1, wasserstein1_1d
from pcgbench.metrics.moments import energy_distance, mmse, smse
from pcgbench.metrics.residual import residual_error
from pcgbench.registry import METRICS

SYMMETRIC = ("wd", "js", "mmse", "smse", "energy")


class DummyTask:
    """Residual r(x) = x - 1 (any cond), so RE has a closed form."""

    def residual(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        r = x - 1.0
        return r if cond is None else r * cond.view(-1, *([1] * (x.ndim - 1)))


CTX = MetricContext(task=DummyTask())  # type: ignore[arg-type]


def _fields(n: int, seed: int, shift: float = 0.0, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return shift + scale * torch.randn(n, 2, 8, 6, generator=g, dtype=torch.float64)


def _metric(name: str):
    return METRICS.get(name)()


def test_registered() -> None:
    for name in BASIC_METRICS:
        cls = METRICS.get(name)
        assert cls.name == name
        assert cls.higher_is_better is False
        assert cls.description and cls.__doc__


@pytest.mark.parametrize("name", BASIC_METRICS)
def test_self_distance_and_nonnegative(name: str) -> None:
    x, y = _fields(40, 0), _fields(30, 1, shift=0.5)
    m = _metric(name)
    if name == "re":
        assert m(x, y, CTX) >= 0
        return
    assert m(x, x, CTX) == pytest.approx(0.0, abs=1e-12)
    assert m(x, y, CTX) > 0


@pytest.mark.parametrize("name", SYMMETRIC)
def test_symmetric(name: str) -> None:
    x, y = _fields(40, 0), _fields(30, 1, shift=0.3, scale=1.5)
    m = _metric(name)
    if name == "js":  # bins come from the reference: symmetric only on a shared range
        x, y = x.clamp(-2, 2), y.clamp(-2, 2)
        x[0, :, 0, 0], y[0, :, 0, 0] = -2.0, -2.0
        x[0, :, 0, 1], y[0, :, 0, 1] = 2.0, 2.0
    assert m(x, y, CTX) == pytest.approx(m(y, x, CTX), rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("name", BASIC_METRICS)
def test_nonfinite_samples(name: str) -> None:
    x, y = _fields(20, 0), _fields(25, 1, shift=0.2)
    bad = x.clone()
    bad[3, 1, 2, 2] = float("nan")
    bad[7, 0, 0, 0] = float("inf")
    keep = torch.ones(20, dtype=torch.bool)
    keep[[3, 7]] = False
    m = _metric(name)
    assert m(bad, y, CTX) == pytest.approx(m(x[keep], y, CTX), rel=1e-12)
    assert math.isnan(m(torch.full_like(x, float("nan")), y, CTX))


def test_nonfinite_fraction() -> None:
    x = _fields(10, 0)
    assert nonfinite_fraction(x) == 0.0
    x[2, 0, 0, 0] = float("nan")
    x[5, 1, 3, 3] = -float("inf")
    assert nonfinite_fraction(x) == pytest.approx(0.2)


def test_re_closed_form() -> None:
    x = torch.ones(4, 1, 3, 3, dtype=torch.float64)
    x[1] += 2.0  # RMS 2
    x[2, 0, 0, :] += 3.0  # RMS sqrt(27/9) = sqrt(3)
    expected = (0 + 2 + math.sqrt(3) + 0) / 4
    assert residual_error(x, DummyTask()) == pytest.approx(expected, rel=1e-14)
    assert _metric("re")(x, x, CTX) == pytest.approx(expected, rel=1e-14)
    cond = torch.tensor([1.0, 0.5, 1.0, 1.0])  # condition rows follow dropped samples
    x[3, 0, 0, 0] = float("nan")
    got = _metric("re")(x, x, MetricContext(task=DummyTask(), cond=cond))  # type: ignore[arg-type]
    assert got == pytest.approx((1.0 + math.sqrt(3)) / 3, rel=1e-14)


def test_wd_matches_scipy_and_pot() -> None:
    rng = np.random.default_rng(0)
    for n, m in [(50, 50), (37, 61), (6, 4), (1, 9), (120, 84)]:
        u, v = rng.normal(size=n), rng.gamma(2.0, size=m)
        assert wasserstein1_1d(u, v) == pytest.approx(wasserstein_distance(u, v), abs=1e-10)
    u, v = rng.normal(size=33), rng.normal(1.0, 2.0, size=57)
    assert wasserstein1_1d(u, v) == pytest.approx(ot.wasserstein_1d(u, v, p=1), abs=1e-10)
    x, y = _fields(13, 0), _fields(21, 1, shift=0.5, scale=0.7)
    per_channel = [
        wasserstein_distance(x[:, c].ravel().numpy(), y[:, c].ravel().numpy()) for c in range(2)
    ]
    assert wasserstein1(x, y) == pytest.approx(np.mean(per_channel), abs=1e-10)


def test_wd_gaussian_shift() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(200, 1, 50, 50, generator=g)
    y = torch.randn(150, 1, 50, 50, generator=g) + 1.0
    assert _metric("wd")(x, y, CTX) == pytest.approx(1.0, abs=0.01)


def test_wd_subsampling_is_deterministic() -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(5, 1, 1000, 500, generator=g)  # 2.5e6 values > cap
    y = torch.randn(5, 1, 1000, 500, generator=g) + 0.5
    a, b = wasserstein1(x, y), wasserstein1(x, y)
    assert a == b and a == pytest.approx(0.5, abs=0.01)


def test_js_matches_scipy() -> None:
    x, y = _fields(30, 0, scale=1.3), _fields(40, 1, shift=0.4)
    expected = []
    for c in range(2):
        ref = y[:, c].ravel().numpy()
        edges = np.linspace(ref.min(), ref.max(), JS_BINS + 1)
        gen = np.clip(x[:, c].ravel().numpy(), ref.min(), ref.max())
        p, _ = np.histogram(gen, bins=edges)
        q, _ = np.histogram(ref, bins=edges)
        expected.append(jensenshannon(p, q) ** 2)
    assert js_divergence(x, y) == pytest.approx(np.mean(expected), abs=1e-10)


def test_js_bounded_by_ln2() -> None:
    x, y = _fields(10, 0, shift=100.0), _fields(10, 1)
    assert js_divergence(x, y) <= math.log(2) + 1e-12
    assert js_divergence(torch.ones(3, 1, 4), torch.ones(3, 1, 4)) == 0.0  # constant ref
    assert js_divergence(torch.full((3, 1, 4), 2.0), torch.ones(3, 1, 4)) == pytest.approx(
        math.log(2)
    )


def test_mmse_smse_closed_forms() -> None:
    x = _fields(25, 0)
    assert mmse(x + 0.3, x) == pytest.approx(0.09, rel=1e-12)
    assert smse(x + 0.3, x) == pytest.approx(0.0, abs=1e-14)
    sd = x.std(dim=0, correction=0)
    assert smse(2.5 * x, x) == pytest.approx(float(((1.5 * sd) ** 2).mean()), rel=1e-12)
    y = _fields(17, 5)
    expected = ((y.numpy().mean(0) - x.numpy().mean(0)) ** 2).mean()
    assert mmse(x, y) == pytest.approx(expected, rel=1e-12)
    expected = ((y.numpy().std(0, ddof=0) - x.numpy().std(0, ddof=0)) ** 2).mean()
    assert smse(x, y) == pytest.approx(expected, rel=1e-12)


def _energy_loop(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x.reshape(len(x), -1), y.reshape(len(y), -1)

    def mean_dist(a: np.ndarray, b: np.ndarray) -> float:
        return sum(np.linalg.norm(ai - bj) for ai in a for bj in b) / (len(a) * len(b))

    return max(0.0, 2 * mean_dist(x, y) - mean_dist(x, x) - mean_dist(y, y))


def test_energy_matches_loop() -> None:
    x, y = _fields(12, 0), _fields(9, 1, shift=0.2, scale=1.2)
    assert energy_distance(x, y) == pytest.approx(_energy_loop(x.numpy(), y.numpy()), rel=1e-10)
    assert energy_distance(x, x[torch.randperm(12)]) == pytest.approx(0.0, abs=1e-12)


def test_energy_cramer_identity() -> None:
    rng = np.random.default_rng(1)
    u, v = rng.normal(size=15), rng.normal(0.5, 1.5, size=11)
    grid = np.sort(np.concatenate([u, v]))
    cdf_u = np.searchsorted(np.sort(u), grid[:-1], side="right") / len(u)
    cdf_v = np.searchsorted(np.sort(v), grid[:-1], side="right") / len(v)
    cramer = 2.0 * np.sum((cdf_u - cdf_v) ** 2 * np.diff(grid))
    got = energy_distance(torch.from_numpy(u).view(-1, 1, 1), torch.from_numpy(v).view(-1, 1, 1))
    assert got == pytest.approx(cramer, rel=1e-10)


def test_energy_cap() -> None:
    x = torch.zeros(1005, 1, 2, dtype=torch.float64)
    x[1000:] = 50.0  # beyond the first 1000: ignored
    assert energy_distance(x, torch.zeros(3, 1, 2)) == 0.0


def test_blowup_fraction() -> None:
    from pcgbench.metrics import blowup_fraction

    ref = torch.randn(20, 1, 4, 4)
    x = torch.randn(10, 1, 4, 4)
    assert blowup_fraction(x, ref) == 0.0
    x[0, 0, 0, 0] = 1e17
    x[1, 0, 1, 1] = float("nan")  # non-finite counts as blown up too
    assert blowup_fraction(x, ref) == pytest.approx(0.2)
    assert blowup_fraction(x[:0], ref) != blowup_fraction(x[:0], ref)  # nan when empty
