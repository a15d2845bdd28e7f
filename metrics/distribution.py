"""Pointwise value-distribution metrics (``wd``, ``js``) and shared input helpers.

Both metrics pool every grid value of every sample of one channel into a 1-D empirical
distribution, compare generated and reference pools, and average over channels.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pcgbench.errors import PcgError
from pcgbench.metric import JS_NATS, NONNEGATIVE, Metric, MetricContext, shared
from pcgbench.metric import sharing as sharing  # re-exported
from pcgbench.registry import METRICS
from pcgbench.sample_health import (  # noqa: F401 - re-exported (the metrics' API)
    BLOWUP_FACTOR,
    blowup_fraction,
    nonfinite_fraction,
)

WD_MAX_VALUES = 2_000_000  # per side and channel; larger pools are evenly strided
JS_BINS = 100
_CHUNK = 4_000_000  # values per histogram chunk (bounds float64 temporaries)


# -- shared helpers ---------------------------------------------------------------------
def finite_mask(x: torch.Tensor) -> torch.Tensor:
    """Boolean [N]: True where the whole sample is finite (once per tensor inside
    :func:`sharing`)."""
    return shared("finite_mask", (x,),
                  lambda: torch.isfinite(x.reshape(x.shape[0], -1)).all(dim=1))


def finite_rows(x: torch.Tensor) -> torch.Tensor:
    """Drop whole samples that contain any non-finite value (no copy if all finite)."""
    mask = finite_mask(x)
    return x if bool(mask.all()) else x[mask]


def check_pair(samples: torch.Tensor, reference: torch.Tensor) -> None:
    """Samples and reference must share the per-sample shape [C, *spatial]."""
    if samples.ndim < 2 or tuple(samples.shape[1:]) != tuple(reference.shape[1:]):
        raise PcgError(
            f"metric inputs must be [N, C, *spatial] with equal per-sample shapes; got "
            f"{tuple(samples.shape)} and {tuple(reference.shape)}"
        )


def _channel_values(x: torch.Tensor, c: int, cap: int | None = None) -> np.ndarray:
    """All grid values of channel c pooled over samples, float64 numpy, optionally
    evenly strided (index k*size//cap) down to ``cap`` values."""
    v = x[:, c].reshape(-1)
    if cap is not None and v.numel() > cap:
        idx = torch.arange(cap, dtype=torch.int64) * v.numel() // cap
        v = v[idx.to(v.device)]
    return v.detach().to("cpu", torch.float64).numpy()


# -- Wasserstein-1 --------------------------------------------------------------------------
def wasserstein1_1d(u: np.ndarray, v: np.ndarray) -> float:
    """Exact W1 between two 1-D empirical distributions (uniform weights, any sizes):
    W1 = int_0^1 |F^-1(s) - G^-1(s)| ds.  Both quantile functions are step functions with
    jumps at i/n and j/m; on each interval of the merged grid they are constant."""
    a = np.sort(np.asarray(u, dtype=np.float64).ravel())
    b = np.sort(np.asarray(v, dtype=np.float64).ravel())
    n, m = a.size, b.size
    if n == 0 or m == 0:
        return float("nan")
    if n == m:
        return float(np.mean(np.abs(a - b)))
    g = math.gcd(n, m)
    # merged breakpoints as integers k/L with L = lcm(n, m): exact, no float ties
    L = n // g * m
    knots = np.union1d(np.arange(n + 1, dtype=np.int64) * (L // n),
                       np.arange(m + 1, dtype=np.int64) * (L // m))
    lo = knots[:-1]  # left end of each interval; quantile index = floor(lo * n / L)
    ia = lo // (L // n)
    ib = lo // (L // m)
    widths = np.diff(knots).astype(np.float64) / L
    return float(np.sum(np.abs(a[ia] - b[ib]) * widths))


def wasserstein1(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """Mean over channels of the 1-D W1 between pooled pointwise value distributions."""
    check_pair(samples, reference)
    x, y = finite_rows(samples), finite_rows(reference)
    if x.shape[0] == 0 or y.shape[0] == 0:
        return float("nan")
    vals = [
        wasserstein1_1d(_channel_values(x, c, WD_MAX_VALUES), _channel_values(y, c, WD_MAX_VALUES))
        for c in range(x.shape[1])
    ]
    return float(np.mean(vals))


# -- Jensen-Shannon -------------------------------------------------------------------------
def _histogram(x: torch.Tensor, c: int, lo: float, hi: float, bins: int) -> np.ndarray:
    """Counts of channel-c values in ``bins`` equal bins on [lo, hi], outside values
    clipped into the edge bins (computed in chunks)."""
    flat = x[:, c].reshape(-1)
    counts = np.zeros(bins, dtype=np.float64)
    for start in range(0, flat.numel(), _CHUNK):
        v = flat[start : start + _CHUNK].detach().to("cpu", torch.float64).numpy()
        idx = np.floor((v - lo) / (hi - lo) * bins)
        idx = np.clip(idx, 0, bins - 1).astype(np.int64)
        counts += np.bincount(idx, minlength=bins)
    return counts


def js_divergence_1d(p: np.ndarray, q: np.ndarray) -> float:
    """JS(p, q) = KL(p||m)/2 + KL(q||m)/2, m = (p+q)/2, natural log (<= ln 2), with
    0 log 0 = 0; p and q are normalized to sum 1."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    p, q = p / p.sum(), q / q.sum()
    m = 0.5 * (p + q)

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log(a[nz] / m[nz])))

    return max(0.0, 0.5 * kl(p) + 0.5 * kl(q))


def js_divergence(samples: torch.Tensor, reference: torch.Tensor, bins: int = JS_BINS) -> float:
    """Mean over channels of JS between value histograms; bins are ``bins`` equal bins on
    [min, max] of the reference values of that channel (a constant reference channel gets
    a range of +-1e-6*max(|v|, 1) around its value)."""
    check_pair(samples, reference)
    x, y = finite_rows(samples), finite_rows(reference)
    if x.shape[0] == 0 or y.shape[0] == 0:
        return float("nan")
    vals = []
    for c in range(x.shape[1]):
        yc = y[:, c].detach().to(torch.float64)
        lo, hi = float(yc.min()), float(yc.max())
        if hi <= lo:
            pad = 1e-6 * max(abs(lo), 1.0)
            lo, hi = lo - pad, hi + pad
        vals.append(
            js_divergence_1d(_histogram(x, c, lo, hi, bins), _histogram(y, c, lo, hi, bins))
        )
    return float(np.mean(vals))


# -- registered metrics -------------------------------------------------------------------
@METRICS.register("wd")
class WassersteinMetric(Metric):
    """WD = (1/C) sum_c W1(P_c^gen, P_c^ref), P_c the pooled empirical distribution of all
    grid values of channel c; exact 1-D W1 = int |F^-1 - G^-1|; pools above 2e6 values are
    evenly strided to 2e6.  Non-finite samples are dropped."""

    bounds = NONNEGATIVE

    higher_is_better = False
    description = "Wasserstein-1 distance of pooled pointwise values, mean over channels"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return wasserstein1(samples, reference)


@METRICS.register("js")
class JensenShannonMetric(Metric):
    """JS = (1/C) sum_c JS(h_c^gen, h_c^ref) in nats, h the 100-bin histograms of channel-c
    values on [min, max] of the reference (outliers clipped into edge bins)."""

    bounds = JS_NATS

    higher_is_better = False
    description = "Jensen-Shannon divergence (nats) of 100-bin value histograms, mean over channels"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return js_divergence(samples, reference)
