"""Velocity-gradient (Q-R) statistics of 3-D periodic velocity fields: ``qr_js``, ``qr_tv``
and ``qr_hellinger``.

For ``u [N, C >= 3, n, n, n]`` on the periodic cube of side L (axes x, y, z = the last three
dims, x_i = L i / n; channel 0..2 = (u, v, w), any further channel such as the pressure is
ignored), the velocity-gradient tensor ``A_ij = d u_i / d x_j`` is taken by Fourier
differentiation and made traceless (generated fields are not exactly divergence-free);
its invariants are ``Q = -1/2 tr(A^2)`` and ``R = -det A``.  Each sample SET is normalized
by its own ``<Q_W> = <|omega|^2> / 4`` (mean over all points and samples of that set):
``Q* = Q / <Q_W>``, ``R* = R / <Q_W>^(3/2)``.  The joint histograms of (R*, Q*) on the fixed
window R* in [-2, 2], Q* in [-4, 4] (100 x 100 bins, points outside clipped into the edge
bins) are compared by the Jensen-Shannon divergence, total variation and Hellinger
distance.

Why each set's own <Q_W>: it is the turbulence-literature convention (the Q-R "teardrop"
of a field is reported in its own Kolmogorov-time units), which makes the statistic
compare the *shape* of the gradient statistics, invariant to a global velocity scale and
to the box size L (Q and <Q_W> both scale as U^2 / L^2, R as U^3 / L^3).  The amplitude of
the gradients is left to metrics that see it (``spectrum``, ``wd``); normalizing the
generated set by the reference's <Q_W> would mix an energy error into every bin.

Why clipping, not dropping, out-of-window points: with clipping every point counts and
the histograms are probability distributions over the same outcomes (the edge bins hold
"at or beyond the edge"), so a generator that puts too much mass in the tails is
penalized.  Dropping and renormalizing by the in-window count would score a set with half
its points outside the window as perfect if the other half had the right shape.  This is
also what the pointwise ``js`` metric does.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar

import torch

from pcgbench.errors import PcgError
from pcgbench.metric import JS_NATS, UNIT, Metric, MetricContext
from pcgbench.registry import METRICS

from .distribution import check_pair, finite_rows

QR_BINS = 100
R_RANGE = (-2.0, 2.0)
Q_RANGE = (-4.0, 4.0)
#: grid points per chunk of samples in :func:`qr_histogram` (A of a chunk is 9x this many
#: float64 values, ~75 MB, plus FFT temporaries)
QR_CHUNK_POINTS = 2**20


# -- differentiation ------------------------------------------------------------------------
def _check_velocity(u: torch.Tensor) -> None:
    if u.ndim != 5 or u.shape[1] < 3:
        raise PcgError(f"velocity-gradient statistics need fields [N, >=3, nx, ny, nz]; got "
                       f"{tuple(u.shape)}")


def _real64(u: torch.Tensor) -> torch.Tensor:
    """The velocity channels in float64 (MPS has no float64: CPU there)."""
    v = u[:, :3].detach()
    if v.device.type == "mps":
        v = v.cpu()
    return v.to(torch.float64)


def _grid(v: torch.Tensor) -> tuple[int, int, int]:
    return int(v.shape[-3]), int(v.shape[-2]), int(v.shape[-1])


def _wavenumbers(shape: tuple[int, int, int], L: float,
                 device: torch.device) -> list[torch.Tensor]:
    """Angular wavenumbers (2 pi / L) * integer mode of the rfftn layout, broadcastable to
    ``[nx, ny, nz // 2 + 1]``, with the Nyquist mode of even axes set to 0: the Nyquist
    cosine's derivative vanishes on the grid and its sine is not represented, so ``i k``
    there would make the derivative of a real field complex."""
    ks = []
    for axis, n in enumerate(shape):
        if axis < 2:
            k = torch.fft.fftfreq(n, d=1.0 / n, dtype=torch.float64, device=device)
        else:
            k = torch.fft.rfftfreq(n, d=1.0 / n, dtype=torch.float64, device=device)
        if n % 2 == 0:
            k[n // 2] = 0.0
        view = [1, 1, 1]
        view[axis] = k.numel()
        ks.append((2 * math.pi / L) * k.view(view))
    return ks


def velocity_gradient(u: torch.Tensor, L: float = 2 * math.pi) -> torch.Tensor:
    """``A[:, i, j] = d u_i / d x_j`` of ``u [N, >=3, nx, ny, nz]`` (channels 0..2 = u, v, w;
    others ignored), periodic of side L on every axis: ``A_ij = irfftn(i k_j rfftn(u_i))``
    with ``k_j = 2 pi m_j / L`` and the Nyquist mode of first derivatives zeroed.  Float64
    ``[N, 3, 3, nx, ny, nz]`` on u's device; exact for trigonometric polynomials of modes
    below the Nyquist one.  The trace is kept (see :func:`qr_invariants`)."""
    _check_velocity(u)
    v = _real64(u)
    shape = _grid(v)
    dims = (-3, -2, -1)
    uh = torch.fft.rfftn(v, dim=dims)  # [N, 3, nx, ny, nz//2+1]
    ks = _wavenumbers(shape, L, v.device)
    cols = [torch.fft.irfftn(1j * k * uh, s=shape, dim=dims) for k in ks]
    return torch.stack(cols, dim=2)


# -- invariants ----------------------------------------------------------------------------
def qr_invariants(A: torch.Tensor, traceless: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``Q = -1/2 A_ij A_ji`` and ``R = -det A`` of ``A [N, 3, 3, *rest]`` (``[N, *rest]``
    each).  With ``traceless`` (default) A is first replaced by ``A - tr(A)/3 I``, for
    which these are the second and third invariants of the characteristic polynomial
    ``l^3 + Q l + R = 0`` (and ``R = -1/3 tr(A^3)``).  With ``traceless=False`` the same
    two formulas are applied to A as given."""
    if A.ndim < 3 or tuple(A.shape[1:3]) != (3, 3):
        raise PcgError(f"qr_invariants needs A [N, 3, 3, ...]; got {tuple(A.shape)}")
    a = [[A[:, i, j] for j in range(3)] for i in range(3)]
    if traceless:
        t = (a[0][0] + a[1][1] + a[2][2]) / 3.0
        for i in range(3):
            a[i][i] = a[i][i] - t
    # -1/2 tr(A^2) = -1/2 sum_i a_ii^2 - sum_{i<j} a_ij a_ji
    q = -0.5 * (a[0][0] ** 2 + a[1][1] ** 2 + a[2][2] ** 2) - (
        a[0][1] * a[1][0] + a[0][2] * a[2][0] + a[1][2] * a[2][1])
    # cofactor expansion along the first row, elementwise over the trailing dims
    det = (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
           - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
           + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))
    return q, -det


def _vorticity_sq_sum(u: torch.Tensor, L: float) -> float:
    """sum over samples and grid points of ``|omega|^2``, omega = curl of the velocity
    channels differentiated as :func:`velocity_gradient`, by Parseval on the rfftn
    half-spectrum (modes 0 < m_z < nz/2 stand for two conjugate modes): no inverse FFT,
    so the normalization costs a fraction of the histogram pass."""
    v = _real64(u)
    shape = _grid(v)
    uh = torch.fft.rfftn(v, dim=(-3, -2, -1))
    kx, ky, kz = _wavenumbers(shape, L, v.device)
    wx = ky * uh[:, 2] - kz * uh[:, 1]  # omega_hat / i; |i|^2 = 1
    wy = kz * uh[:, 0] - kx * uh[:, 2]
    wz = kx * uh[:, 1] - ky * uh[:, 0]
    power = (wx.abs() ** 2 + wy.abs() ** 2 + wz.abs() ** 2).sum(dim=(0, 1, 2))  # [nz//2+1]
    nz = shape[2]
    weight = torch.full_like(power, 2.0)
    weight[0] = 1.0
    if nz % 2 == 0:
        weight[-1] = 1.0
    # Parseval: sum_x |f|^2 = sum_k |f_hat|^2 / m with the unnormalized DFT
    return float((weight * power).sum()) / math.prod(shape)


def mean_rotation_invariant(u: torch.Tensor, L: float = 2 * math.pi,
                            chunk_points: int | None = None) -> float:
    """``<Q_W> = <|omega|^2> / 4`` over all grid points and samples of ``u`` (nan if
    there are none), in chunks of about ``chunk_points`` grid points."""
    _check_velocity(u)
    if u.shape[0] == 0 or math.prod(u.shape[-3:]) == 0:
        return math.nan
    chunk = _chunk(u, chunk_points)
    total = sum(_vorticity_sq_sum(u[s : s + chunk], L) for s in range(0, u.shape[0], chunk))
    return total / (u.shape[0] * math.prod(u.shape[-3:])) / 4.0


def _chunk(u: torch.Tensor, chunk_points: int | None) -> int:
    return max(1, (chunk_points or QR_CHUNK_POINTS) // max(1, math.prod(u.shape[-3:])))


def qr_normalized(u: torch.Tensor, L: float = 2 * math.pi) -> tuple[torch.Tensor, torch.Tensor]:
    """``Q* = Q / <Q_W>``, ``R* = R / <Q_W>^(3/2)`` with this set's ``<Q_W> = <|omega|^2>/4``
    (traceless A), each ``[N, nx, ny, nz]``; nan where ``<Q_W>`` is not positive and
    finite.  Independent of L and of a global velocity scale."""
    qw = mean_rotation_invariant(u, L)
    q, r = qr_invariants(velocity_gradient(u, L))
    if not (math.isfinite(qw) and qw > 0):
        return torch.full_like(q, math.nan), torch.full_like(r, math.nan)
    return q / qw, r / qw**1.5


# -- histograms and distances -------------------------------------------------------------
def _bin_index(v: torch.Tensor, lo: float, hi: float, bins: int) -> torch.Tensor:
    """floor((v - lo) / (hi - lo) * bins) clipped to [0, bins - 1]: equal bins, right edge
    of the window in the last bin, outside values in the edge bins."""
    return torch.floor((v - lo) / (hi - lo) * bins).clamp_(0, bins - 1).to(torch.int64)


def qr_histogram(u: torch.Tensor, bins: int | tuple[int, int] = QR_BINS,
                 r_range: tuple[float, float] = R_RANGE,
                 q_range: tuple[float, float] = Q_RANGE,
                 chunk_points: int | None = None) -> torch.Tensor:
    """Joint histogram of (R*, Q*) (:func:`qr_normalized`) over all points and samples of
    ``u``, ``[bins_R, bins_Q]`` float64 probabilities summing to 1; equal bins on
    ``r_range x q_range``, points outside clipped into the edge bins.  Computed over
    chunks of samples (about ``chunk_points`` grid points each), never the whole A.  All
    nan when ``<Q_W>`` is not positive and finite."""
    _check_velocity(u)
    br, bq = (bins, bins) if isinstance(bins, int) else bins
    if u.shape[0] == 0 or math.prod(u.shape[-3:]) == 0:
        raise PcgError("qr_histogram: no grid point to histogram")
    chunk = _chunk(u, chunk_points)
    qw = mean_rotation_invariant(u, chunk_points=chunk_points)  # L cancels in Q*, R*
    if not (math.isfinite(qw) and qw > 0):
        return torch.full((br, bq), math.nan, dtype=torch.float64)
    counts = torch.zeros(br * bq, dtype=torch.float64)
    for s in range(0, u.shape[0], chunk):
        q, r = qr_invariants(velocity_gradient(u[s : s + chunk]))
        ir = _bin_index(r.reshape(-1) / qw**1.5, *r_range, br)
        iq = _bin_index(q.reshape(-1) / qw, *q_range, bq)
        counts += torch.bincount(ir * bq + iq, minlength=br * bq).to("cpu", torch.float64)
    return (counts / counts.sum()).view(br, bq)


def histogram_distances(p: torch.Tensor, q: torch.Tensor) -> dict[str, float]:
    """``{"js", "tv", "hellinger"}`` between histograms p, q of equal shape (normalized to
    sum 1 first): ``JS = 1/2 KL(p||M) + 1/2 KL(q||M)``, ``M = (p+q)/2``, natural log, terms
    with a zero probability skipped (0 log 0 = 0), in [0, ln 2]; ``TV = 1/2 sum |p - q|``
    in [0, 1]; ``H = sqrt(1/2 sum (sqrt p - sqrt q)^2)`` in [0, 1].  Identical inputs give
    exactly 0; all nan if either has a non-finite or non-positive total."""
    p = torch.as_tensor(p, dtype=torch.float64).reshape(-1)
    q = torch.as_tensor(q, dtype=torch.float64).reshape(-1)
    if p.shape != q.shape:
        raise PcgError(f"histograms differ in size: {p.numel()} vs {q.numel()}")
    sp, sq = float(p.sum()), float(q.sum())
    if not (math.isfinite(sp) and math.isfinite(sq) and sp > 0 and sq > 0):
        return {"js": math.nan, "tv": math.nan, "hellinger": math.nan}
    p, q = p / sp, q / sq
    m = 0.5 * (p + q)
    nzp, nzq = p > 0, q > 0
    js = 0.5 * float((p[nzp] * torch.log(p[nzp] / m[nzp])).sum()) + 0.5 * float(
        (q[nzq] * torch.log(q[nzq] / m[nzq])).sum())
    tv = 0.5 * float((p - q).abs().sum())
    h2 = 0.5 * float(((p.sqrt() - q.sqrt()) ** 2).sum())
    # rounding can step just outside the bounds; clamp, as js_divergence_1d does
    return {"js": min(max(js, 0.0), math.log(2.0)), "tv": min(max(tv, 0.0), 1.0),
            "hellinger": min(math.sqrt(max(h2, 0.0)), 1.0)}


def qr_distances(samples: torch.Tensor, reference: torch.Tensor,
                 bins: int | tuple[int, int] = QR_BINS,
                 cache: dict | None = None) -> dict[str, float]:
    """:func:`histogram_distances` between the Q*-R* histograms (:func:`qr_histogram`,
    each set normalized by its own <Q_W>) of the finite samples and the finite reference
    rows.  All nan when the fields are not ``[N, >=3, nx, ny, nz]``, a set is empty or
    has no vorticity.  With ``cache`` (a MetricContext's) it is computed once per
    evaluation, for the same two tensor objects and bins."""
    hit = None if cache is None else cache.get("qr_distances")
    if hit is not None and hit[0] is samples and hit[1] is reference and hit[2] == bins:
        return dict(hit[3])
    check_pair(samples, reference)
    nan = {"js": math.nan, "tv": math.nan, "hellinger": math.nan}
    out = nan
    if samples.ndim == 5 and samples.shape[1] >= 3:
        x, y = finite_rows(samples), finite_rows(reference)
        if x.shape[0] and y.shape[0] and math.prod(x.shape[-3:]):
            out = histogram_distances(qr_histogram(x, bins), qr_histogram(y, bins))
    if cache is not None:
        cache["qr_distances"] = (samples, reference, bins, dict(out))
    return out


# -- plot -------------------------------------------------------------------------------------
def plot_qr(hist: torch.Tensor, path: str | Path, title: str = "",
            r_range: tuple[float, float] = R_RANGE,
            q_range: tuple[float, float] = Q_RANGE) -> Path:
    """Filled contours of log10 of the joint PDF ``p / (dR* dQ*)`` of a :func:`qr_histogram`
    with the Vieillefosse line ``27 R^2 / 4 + Q^3 = 0``, i.e. ``Q = -3 (R^2 / 4)^(1/3)``,
    saved to ``path`` (format from the suffix, e.g. .png).  Empty bins and the outermost
    ring of bins are left blank: the latter also hold the clipped out-of-window mass, which
    is no density."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    h = torch.as_tensor(hist, dtype=torch.float64).cpu().numpy()
    br, bq = h.shape
    dr, dq = (r_range[1] - r_range[0]) / br, (q_range[1] - q_range[0]) / bq
    rc = r_range[0] + dr * (np.arange(br) + 0.5)
    qc = q_range[0] + dq * (np.arange(bq) + 0.5)
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.where(h > 0, np.log10(h / (dr * dq)), np.nan)
    if br > 2 and bq > 2:
        logp[[0, -1], :] = np.nan
        logp[:, [0, -1]] = np.nan
    # Figure + Agg canvas directly: no pyplot state, no global backend switch
    fig = Figure(figsize=(5, 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if np.isfinite(logp).any():
        lo, hi = np.nanmin(logp), np.nanmax(logp)
        levels = np.linspace(lo, hi, 12) if hi > lo else np.array([lo - 0.5, lo + 0.5])
        cs = ax.contourf(rc, qc, logp.T, levels=levels, cmap="viridis")
        fig.colorbar(cs, ax=ax, label="log10 PDF")
    rl = np.linspace(r_range[0], r_range[1], 401)
    ax.plot(rl, -3.0 * np.cbrt(rl**2 / 4.0), "k--", lw=1, label=r"$27R^2/4 + Q^3 = 0$")
    ax.set_xlim(*r_range)
    ax.set_ylim(*q_range)
    ax.set_xlabel("R / <Q_W>^(3/2)")
    ax.set_ylabel("Q / <Q_W>")
    ax.axhline(0, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.legend(loc="upper left", fontsize=8)
    if title:
        ax.set_title(title)
    out = Path(path)
    fig.savefig(out, dpi=100, bbox_inches="tight")
    return out


# -- registered metrics -------------------------------------------------------------------
class _QRMetric(Metric):
    """Shared call: one Q-R histogram pair per evaluation (``ctx.cache``), one key each."""

    higher_is_better = False
    nan_means_not_applicable = True  # fields that are not [N, >=3, n, n, n]
    key: ClassVar[str] = ""  # entry of qr_distances

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return qr_distances(samples, reference, cache=ctx.cache)[self.key]


@METRICS.register("qr_js")
class QRJensenShannonMetric(_QRMetric):
    """JS (nats, <= ln 2) between the joint (R*, Q*) histograms of the velocity gradient,
    Q* = Q / <Q_W>, R* = R / <Q_W>^(3/2), each set by its own <Q_W> = <|omega|^2>/4;
    100 x 100 bins on [-2, 2] x [-4, 4], outside points in the edge bins.  nan unless
    the fields are [N, >=3, n, n, n] (velocity first); non-finite samples dropped.  See
    :mod:`pcgbench.metrics.velocity_gradient`."""

    bounds = JS_NATS

    description = "Jensen-Shannon divergence (nats) of the normalized Q-R joint PDF"
    key = "js"


@METRICS.register("qr_tv")
class QRTotalVariationMetric(_QRMetric):
    """TV = 1/2 sum |p - q| between the joint (R*, Q*) histograms of the velocity gradient
    (as ``qr_js``)."""

    bounds = UNIT

    description = "Total variation distance of the normalized Q-R joint PDF"
    key = "tv"


@METRICS.register("qr_hellinger")
class QRHellingerMetric(_QRMetric):
    """H = sqrt(1/2 sum (sqrt p - sqrt q)^2) in [0, 1] between the joint (R*, Q*)
    histograms of the velocity gradient (as ``qr_js``)."""

    bounds = UNIT

    description = "Hellinger distance of the normalized Q-R joint PDF"
    key = "hellinger"
