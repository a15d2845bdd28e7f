"""Geometric and statistical preconditioning of chart coordinates (paper Sec. 3.3).

* :class:`Geometry` - the fixed coordinate transform ``r = C_c (y - mu_c)`` of paper
  Eq. preconditioned-coordinate, chosen so that the pulled-back metric
  ``G~ = C^-T G C^-1`` (Eq. pullback-physical-metric) is close to the identity.
* :class:`InputWhitening` - the input preconditioner ``P_s (r - m_s)`` of paper
  Eq. input-preconditioner for the linear path ``r_s = (1-s) r0 + s r1``.

Everything is stored as buffers, so ``state_dict`` / ``torch.load(weights_only=True)``
round-trip; buffers are resized on load, so a fresh (unfitted) module can load them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pcgbench.charts.base import Chart, batch_cond
from pcgbench.charts.geometry import (  # noqa: F401 - re-exported: C_c lives with the charts
    DiagonalGeometry,
    FourierDiagonalGeometry,
    Geometry,
    IdentityGeometry,
    Resizable,
)
from pcgbench.errors import PcgError

#: the largest relative error a probed diag(G) may carry (two independent probe sets)
PROBE_MAX_REL_ERROR = 0.05


def fit_diagonal_from_chart(
    chart: Chart,
    y_samples: Tensor,
    cond: Tensor | None = None,
    n_probes: int = 64,
    exact_max_dim: int = 1 << 17,
    chunk: int = 256,
    rel_floor: float = 1e-8,
    seed: int = 0,
    max_rel_error: float = PROBE_MAX_REL_ERROR,
) -> DiagonalGeometry:
    """DiagonalGeometry with scale = diag(G(mu))^1/2, mu = mean of ``y_samples``.

    diag(G) is, in this order: the chart's closed form (:meth:`Chart.pullback_diagonal`,
    linear charts); exact, from :meth:`Chart.pullback_matvec` of every unit vector, when
    ``coord_dim <= exact_max_dim`` (``chunk`` at a time); otherwise Hutchinson's estimate
    mean_j v_j * (G v_j) over two independent sets of ``n_probes`` Rademacher v_j, whose
    difference is the estimate's own error: the mean of the two is refused (one-line
    :class:`PcgError`) when its relative error max_i |a_i - b_i| / (a_i + b_i) exceeds
    ``max_rel_error`` (a C_c off by tens of percent per coordinate is not the paper's
    preconditioner).  ``cond`` is one condition row at which G is probed (None for
    unconditional charts).  Entries are floored at ``rel_floor * max`` so C stays
    invertible (per coordinate channel: :func:`_floor_per_channel`).  The geometry's
    ``info`` says which route and, probed, the error."""
    mu = y_samples.detach().mean(0)
    m = chart.coord_dim
    closed = chart.pullback_diagonal(mu)
    if closed is not None:
        diag, info = closed.to(mu).reshape(m), {"route": "closed form", "rel_error": 0.0}
    elif m <= exact_max_dim:
        diag = torch.zeros(m, dtype=mu.dtype, device=mu.device)
        for start in range(0, m, chunk):
            idx = torch.arange(start, min(start + chunk, m), device=mu.device)
            v = torch.zeros(len(idx), m, dtype=mu.dtype, device=mu.device)
            v[torch.arange(len(idx)), idx] = 1.0
            diag[idx] = _probe(chart, mu, v, cond).gather(1, idx[:, None])[:, 0]
        info = {"route": "exact (unit vectors)", "rel_error": 0.0}
    else:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        halves = []
        for _ in range(2):
            probes = (torch.randint(0, 2, (n_probes, m), generator=gen) * 2 - 1).to(mu)
            acc = torch.zeros(m, dtype=mu.dtype, device=mu.device)
            for start in range(0, n_probes, chunk):
                v = probes[start:start + chunk]
                acc += (v * _probe(chart, mu, v, cond)).sum(0)
            halves.append(acc / n_probes)
        a, b = halves
        rel = float(((a - b).abs() / (a + b).abs().clamp_min(1e-300)).max())
        if rel > max_rel_error:
            raise PcgError(f"C_c of chart {type(chart).__name__}: diag(G) probed with 2 x "
                           f"{n_probes} Rademacher vectors on {m} coordinates has "
                           f"{100 * rel:.0f} % relative error (> {100 * max_rel_error:g} %); "
                           "give the chart a closed-form pullback_diagonal or raise "
                           "exact_max_dim")
        diag, info = (a + b) / 2, {"route": f"probed (2 x {n_probes})", "rel_error": rel}
    diag = _floor_per_channel(diag, chart.coord_shape, rel_floor)
    geom = DiagonalGeometry(diag.sqrt().reshape(chart.coord_shape), mu)
    geom.info = info
    return geom


def _floor_per_channel(diag: Tensor, coord_shape: tuple[int, ...], rel_floor: float
                       ) -> Tensor:
    """diag(G) [m] floored at ``rel_floor`` x the largest entry *of its own coordinate
    channel* (so C_c stays invertible).  Channels of a multi-channel chart carry their own
    physical units, so one floor for all is not dimensionless: on dynamic_stall's
    algebraic chart (velocity gradients ~1e6 1/s beside T ~ 300 K and rho ~ 1) the
    gradient channels' diag(G) ~ 7e-13 lay 1e-8 below T's and rho's largest and a global
    floor replaced them, leaving those coordinates' RMS spread in r at 270 and 703
    instead of 0.28 and 0.54 (PMosFM version 5).  With one channel (or flat coordinates)
    this is the one floor of before, bit for bit; a channel with diag(G) = 0 throughout
    gets the global one."""
    if len(coord_shape) < 2 or coord_shape[0] == 1:
        return diag.clamp_min(rel_floor * float(diag.max().clamp_min(1e-300)))
    per = diag.reshape(coord_shape[0], -1)
    top = per.amax(1, keepdim=True)
    # a channel the metric does not see at all falls back to the global floor
    top = torch.where(top > 0, top, diag.max()).clamp_min(1e-300)
    return torch.maximum(per, rel_floor * top).reshape(diag.shape)


def _probe(chart: Chart, mu: Tensor, v: Tensor, cond: Tensor | None) -> Tensor:
    """G(mu) v for the rows of ``v`` [b, m] (flattened coordinates): [b, m]."""
    b = v.shape[0]
    y = mu.expand(b, *chart.coord_shape)
    gv = chart.pullback_matvec(y, v.reshape(b, *chart.coord_shape), batch_cond(cond, b))
    return gv.reshape(b, -1)


def fit_geometry(chart: Chart, y_samples: Tensor, cond: Tensor | None = None,
                 **kwargs: Any) -> Geometry:
    """The chart's closed-form geometry when it has one, else a probed diagonal one."""
    mu = y_samples.detach().mean(0)
    geom = chart.exact_geometry(mu)
    return geom if geom is not None else fit_diagonal_from_chart(chart, y_samples, cond,
                                                                 **kwargs)


# ----------------------------------------------------------------------------------
# Input whitening P_s
# ----------------------------------------------------------------------------------
_MODES = ("full", "diagonal", "none")
_SINGLE, _GROUPS, _BINS = 0, 1, 2


class InputWhitening(Resizable):
    """Input preconditioner P_s (r - m_s), P_s = (Sigma_s + eps I)^-1/2 (paper Eq.
    input-preconditioner), for r_s = (1-s) r0 + s r1 with r0 ~ N(0, I) independent of r1.

    Then m_s = s m_1 and Sigma_s = (1-s)^2 I + s^2 Sigma_1 share Sigma_1's eigenvectors.
    A thin SVD of the centered N x m matrix of training r1 gives Sigma_1's eigenpairs
    (u_i, lambda_i) on the data span (sample covariance, divisor N-1), so for every s

        P_s z = a_s z + sum_i (d_i(s) - a_s) u_i u_i^T z,
        d_i(s) = ((1-s)^2 + s^2 lambda_i + eps)^-1/2,  a_s = ((1-s)^2 + s^2 iso + eps)^-1/2,

    with no m x m matrix.  ``iso`` = 0 when all eigenpairs are kept (exact).  With
    ``rank=k`` only the top-k eigenpairs are kept and the rest of the spectrum is
    replaced by its mean ``iso = (tr Sigma_1 - sum_{i<=k} lambda_i) / (m - k)`` on the
    complement (low-rank-plus-isotropic approximation; exact when k >= data rank).

    ``mode``: "full" (above), "diagonal" (per-coordinate standardization by
    (s^2 var_i + (1-s)^2 + eps)^-1/2), "none" (identity, r is returned unchanged).

    Conditional statistics: ``fit(..., groups=labels)`` gives exact per-label
    statistics for discrete conditions; ``fit(..., cond=c, n_bins=n)`` bins a scalar
    continuous condition into ``n`` quantile bins with per-bin statistics, and
    ``apply`` picks the bin of each sample's condition.
    """

    def __init__(self, mode: str = "full"):
        super().__init__()
        if mode not in _MODES:
            raise PcgError(f"unknown whitening mode {mode!r}; expected one of {_MODES}")
        self.mode = mode
        for name in ("mean", "evecs", "evals", "iso", "var", "eps", "labels", "edges",
                     "kind"):
            self.register_buffer(name, None)

    @property
    def fitted(self) -> bool:
        return self.mean is not None

    # -- fitting ---------------------------------------------------------------------
    @torch.no_grad()
    def fit(
        self,
        r1: Tensor,
        eps: float = 1e-3,
        rank: int | None = None,
        groups: Tensor | None = None,
        cond: Tensor | None = None,
        n_bins: int = 8,
        rank_fraction: float | None = None,
    ) -> InputWhitening:
        """Fit from training coordinates ``r1`` [N, *coord_shape]; returns ``self``.

        ``rank_fraction`` f: keep in each group/bin only the top floor(f * n_g) (>= 1)
        eigenpairs, the rest of the spectrum replaced by its mean (low-rank-plus-isotropic).
        With all eigenpairs of an n_g-sample group kept, the directions outside the
        training span get the gain eps^-1/2 as s -> 1, and held-out fields are blown up
        (Kolmogorov smoke, 3 samples per bin: held-out RMS 212x the training RMS at s = 1);
        with f = 0.25 the complement gets the residual spectrum's mean instead."""
        if eps <= 0:
            raise PcgError("whitening eps must be positive")
        if rank_fraction is not None and not 0 < rank_fraction <= 1:
            raise PcgError(f"whitening rank_fraction must lie in (0, 1], got {rank_fraction}")
        x = r1.detach().reshape(r1.shape[0], -1)
        n, m = x.shape
        if groups is not None and cond is not None:
            raise PcgError("pass either groups (discrete) or cond (binned), not both")
        if groups is not None:
            labels, idx = torch.unique(groups.reshape(-1), return_inverse=True)
            kind, edges = _GROUPS, None
        elif cond is not None:
            c = _scalar_cond(cond).to(torch.float64)
            qs = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)[1:-1]
            edges = torch.unique(torch.quantile(c, qs.to(c.device)))
            idx = torch.bucketize(c, edges)
            labels, kind = None, _BINS
        else:
            idx, labels, edges, kind = torch.zeros(n, dtype=torch.long), None, None, _SINGLE
        n_groups = int(idx.max()) + 1 if n else 0
        k_max = min(rank if rank is not None else m, m)
        members = [x[idx.to(x.device) == g] for g in range(n_groups)]
        stats = [_group_stats(xg, k_max if rank_fraction is None else min(
            k_max, max(1, int(rank_fraction * xg.shape[0])))) for xg in members]
        if any(s is None for s in stats):
            raise PcgError("a whitening group/bin has no samples; use fewer bins")
        k = max(s[1].shape[1] for s in stats)  # type: ignore[index]
        dt = r1.dtype
        self.mean = torch.stack([s[0] for s in stats]).to(dt)  # type: ignore[index]
        # groups with fewer eigenpairs are zero-padded (a zero column acts as no column)
        self.evecs = torch.stack([_pad(s[1], k, 1) for s in stats]).to(dt)  # type: ignore[index]
        self.evals = torch.stack([_pad(s[2], k, 0) for s in stats]).to(dt)  # type: ignore[index]
        self.iso = torch.stack([s[3] for s in stats]).to(dt)  # type: ignore[index]
        self.var = torch.stack([s[4] for s in stats]).to(dt)  # type: ignore[index]
        self.eps = torch.tensor(float(eps), dtype=torch.float64)
        self.labels = labels
        self.edges = edges
        self.kind = torch.tensor(kind)
        return self

    # -- applying --------------------------------------------------------------------
    def _group_index(self, batch: int, groups: Tensor | None, cond: Tensor | None) -> Tensor:
        kind = int(self.kind)
        if kind == _SINGLE:
            return torch.zeros(batch, dtype=torch.long)
        if kind == _GROUPS:
            if groups is None:
                raise PcgError("whitening was fitted per group: pass groups=")
            g = groups.reshape(-1).to(self.labels.device)
            pos = torch.searchsorted(self.labels, g).clamp_max(len(self.labels) - 1)
            if not bool((self.labels[pos] == g).all()):
                raise PcgError("whitening: unknown group label at apply time")
            return pos.cpu()
        if cond is None:
            raise PcgError("whitening was fitted on condition bins: pass cond=")
        c = _scalar_cond(cond).to(torch.float64)
        return torch.bucketize(c, self.edges.to(c.device)).cpu()

    def apply(self, r: Tensor, s: Tensor | float, groups: Tensor | None = None,
              cond: Tensor | None = None) -> Tensor:
        """P_s (r - m_s) for r [B, *coord_shape] and per-sample s [B] (or a scalar)."""
        if self.mode == "none":
            return r
        if not self.fitted:
            raise PcgError("InputWhitening.apply called before fit")
        b = r.shape[0]
        z = r.reshape(b, -1)
        s = torch.as_tensor(s, dtype=r.dtype, device=r.device).reshape(-1).expand(b)
        s = s[:, None]
        gidx = self._group_index(b, groups, cond)
        groups_present = torch.unique(gidx).tolist()
        if len(groups_present) == 1:  # no masking (and no device sync) for one group
            return self._whiten(z, s, groups_present[0]).reshape(r.shape)
        out = torch.empty_like(z)
        for g in groups_present:
            sel = (gidx == g).to(r.device)
            out[sel] = self._whiten(z[sel], s[sel], g)
        return out.reshape(r.shape)

    forward = apply

    def _whiten(self, z: Tensor, s: Tensor, g: int) -> Tensor:
        z = z - s * self.mean[g].to(z)
        base = (1 - s) ** 2 + float(self.eps)
        if self.mode == "diagonal":
            return z * (base + s**2 * self.var[g].to(z)).rsqrt()
        u = self.evecs[g].to(z)
        a = (base + s**2 * self.iso[g].to(z)).rsqrt()  # [b, 1]: complement of the span
        d = (base + s**2 * self.evals[g].to(z)).rsqrt()  # [b, k]: on the eigenvectors
        return a * z + ((d - a) * (z @ u)) @ u.T

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}"


def _scalar_cond(cond: Tensor) -> Tensor:
    c = cond.reshape(cond.shape[0], -1) if cond.ndim > 1 else cond.reshape(-1, 1)
    if c.shape[1] != 1:
        raise PcgError("binned whitening needs a scalar condition; pass groups= labels "
                       "for discrete or multi-dimensional conditions")
    return c[:, 0]


def _pad(t: Tensor, k: int, dim: int) -> Tensor:
    pad = [0, 0] * (t.ndim - 1 - dim) + [0, k - t.shape[dim]]
    return torch.nn.functional.pad(t, pad)


def _group_stats(x: Tensor, k_max: int) -> tuple[Tensor, ...] | None:
    """mean, top-k eigenvectors [m, k], eigenvalues [k], isotropic rest, variance [m]."""
    n = x.shape[0]
    if n == 0:
        return None
    x = x.to(torch.float64)
    mean = x.mean(0)
    xc = x - mean
    denom = max(n - 1, 1)
    _, sv, vh = torch.linalg.svd(xc, full_matrices=False)
    lam = sv**2 / denom
    k = min(k_max, lam.shape[0])
    var = xc.square().sum(0) / denom
    m = x.shape[1]
    rest = (var.sum() - lam[:k].sum()).clamp_min(0) / max(m - k, 1)
    iso = rest if k < lam.shape[0] else torch.zeros_like(rest)
    return mean, vh[:k].T.contiguous(), lam[:k], iso, var


__all__ = [
    "DiagonalGeometry",
    "FourierDiagonalGeometry",
    "Geometry",
    "IdentityGeometry",
    "InputWhitening",
    "fit_diagonal_from_chart",
    "fit_geometry",
]
