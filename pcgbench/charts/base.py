"""The chart interface: feasible parameterizations chi_c: Y -> X (paper Sec. 3.3).

A chart decodes coordinates ``y`` [B, *coord_shape] into physical fields
``x`` [B, *field_shape] that satisfy the encoded constraint ``R_h(x, c) = 0`` exactly
(paper Eq. exact-chart) or up to a declared tolerance (approximate decoders, paper
Eq. app-decoder-certificates).  Charts hold no learned parameters; they are
``nn.Module`` s only so that their constant buffers follow ``.to(device)``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from pcgbench.errors import PcgError

if TYPE_CHECKING:
    from pcgbench.charts.geometry import Geometry

Cond = Tensor | None


def as_tensor_like(value: Tensor | float, ref: Tensor) -> Tensor | float:
    """Cast a buffer to the dtype/device of ``ref`` (floats pass through)."""
    return value.to(dtype=ref.dtype, device=ref.device) if isinstance(value, Tensor) else value


class Chart(nn.Module, ABC):
    """Feasible parameterization chi_c: Y -> X with R(chi(y), c) = 0 (paper Eq. exact-chart).

    Subclasses implement :meth:`decode`, :meth:`encode` (the physical-metric projection
    eta_c of paper Eq. declared-encoder, an exact inverse on the represented set) and
    :meth:`residual` (the *encoded* constraint, with the decoder's discrete operators).
    ``metric_weights`` is the diagonal of M_h (Euclidean by default).
    """

    tolerance: float = 0.0
    coord_shape: tuple[int, ...]
    field_shape: tuple[int, ...]

    def __init__(
        self,
        coord_shape: tuple[int, ...],
        field_shape: tuple[int, ...],
        weights: Tensor | float | None = None,
    ):
        super().__init__()
        self.coord_shape = tuple(int(s) for s in coord_shape)
        self.field_shape = tuple(int(s) for s in field_shape)
        self._w_scalar = 1.0
        if weights is None or not isinstance(weights, Tensor):
            self._w_scalar = 1.0 if weights is None else float(weights)
            if self._w_scalar <= 0:
                raise PcgError("metric weights must be positive")
            self.register_buffer("metric_w", None)
        else:
            self.register_buffer("metric_w", self._checked_weights(weights))

    def _checked_weights(self, w: Tensor) -> Tensor:
        w = w.detach().clone()
        if torch.broadcast_shapes(w.shape, self.field_shape) != self.field_shape:
            raise PcgError(f"metric weights {tuple(w.shape)} do not broadcast to "
                           f"field shape {self.field_shape}")
        if bool((w <= 0).any()):
            raise PcgError("metric weights must be positive")
        return w

    def __setattr__(self, name: str, value: object) -> None:
        # assigning ``chart.metric_w = w`` after construction re-derives what depends on M
        if name == "metric_w" and "metric_w" in self.__dict__.get("_buffers", {}):
            value = None if value is None else self._checked_weights(value)  # type: ignore[arg-type]
            super().__setattr__(name, value)
            self._metric_changed()
            return
        super().__setattr__(name, value)

    def set_metric_weights(self, weights: Tensor | float | None) -> None:
        """Replace the diagonal of M_h (same as assigning ``metric_w``); charts whose
        decoder/encoder depend on M (affine bases, spectral projections) re-derive them."""
        if isinstance(weights, Tensor):
            self.metric_w = weights
            return
        self._w_scalar = 1.0 if weights is None else float(weights)
        if self._w_scalar <= 0:
            raise PcgError("metric weights must be positive")
        self.metric_w = None

    def _metric_changed(self) -> None:
        """Hook: recompute M-dependent buffers (called after the weights change)."""

    # -- sizes ---------------------------------------------------------------------
    @property
    def coord_dim(self) -> int:
        """Number of coordinates per sample (>= the intrinsic dimension m)."""
        return math.prod(self.coord_shape)

    @property
    def field_dim(self) -> int:
        return math.prod(self.field_shape)

    # -- the chart -------------------------------------------------------------------
    def forward(self, y: Tensor, cond: Cond = None) -> Tensor:
        return self.decode(y, cond)

    @abstractmethod
    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        """chi_c(y): [B, *coord_shape] -> [B, *field_shape]."""

    def decode_exact(self, y: Tensor, cond: Cond = None) -> Tensor:
        """chi_c(y): the decoder's exact limit where it is an iterative solver that a
        direct solve does faster (e.g. the Darcy chart's K-iteration CG -> a banded
        Cholesky), else :meth:`decode` itself.  Differentiable (a chart that overrides it
        provides the implicit gradient), so training may use it too."""
        return self.decode(y, cond)

    @abstractmethod
    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        """eta_c(x): [B, *field_shape] -> [B, *coord_shape]."""

    @abstractmethod
    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        """The encoded constraint R_h(x, c): [B, *field_shape] -> [B, k]."""

    def metric_weights(self) -> Tensor | float:
        """Diagonal of M_h, broadcastable to ``field_shape`` (1.0: Euclidean)."""
        return self._w_scalar if self.metric_w is None else self.metric_w

    def _weights_like(self, x: Tensor) -> Tensor | float:
        return as_tensor_like(self.metric_weights(), x)

    def pullback_matvec(self, y: Tensor, v: Tensor, cond: Cond = None) -> Tensor:
        """G(y) v = J^T M (J v), matrix-free (paper Eq. matrix-free-pullback).

        One forward-mode JVP and one reverse-mode VJP of the decoder; samples in the
        batch are independent, so each row gets its own G(y_b) v_b."""

        def f(yy: Tensor) -> Tensor:
            return self.decode(yy, cond)

        y, v = y.contiguous(), v.contiguous()  # forward AD rejects expanded primals
        _, jv = torch.func.jvp(f, (y,), (v,))
        _, vjp_fn = torch.func.vjp(f, y)
        return vjp_fn(jv * self._weights_like(jv))[0]

    def exact_geometry(self, mu: Tensor | None = None) -> Geometry | None:
        """A transform C_c with C^-T G C^-1 = I on the coordinate domain, when one is
        known in closed form (linear charts); ``None`` otherwise."""
        return None

    def pullback_diagonal(self, y: Tensor | None = None) -> Tensor | None:
        """diag(G(y)) [*coord_shape] in closed form, G = J^T M J (paper Eq.
        matrix-free-pullback), where the chart knows it (linear charts: G is constant);
        ``None`` otherwise (then it is computed from :meth:`pullback_matvec`)."""
        return None

    def diagnostics(self, y: Tensor, cond: Cond = None) -> dict[str, float]:
        """Decoder diagnostics (empty for exact charts)."""
        return {}


def decoder_certificates(
    chart: Chart, y: Tensor, cond: Cond = None, power_iters: int = 20, seed: int = 0
) -> dict[str, float]:
    """Empirical decoder certificates of paper Eq. app-decoder-certificates on a batch:

    ``eps_dec``  = max_b ||R_h(chi(y_b), c)||_2  (residual value),
    ``delta_dec`` = max_b ||D_y[R_h o chi](y_b)||_2 (spectral norm of the residual
    differential).  With k <= ``power_iters`` residual components the k x m Jacobian
    is formed exactly by k VJPs; otherwise the norm is estimated by power iteration on
    J^T J (one JVP and one VJP per step).  The suprema over Y_c are estimated by maxima
    over the given batch."""

    def f(yy: Tensor) -> Tensor:
        return chart.residual(chart.decode(yy, cond), cond)

    y = y.detach().contiguous()
    res, vjp_fn = torch.func.vjp(f, y)
    res = res.detach()
    b, k = res.shape[0], res[0].numel()
    eps = float(res.reshape(b, -1).norm(dim=1).max())
    if k == 0:
        return {"eps_dec": eps, "delta_dec": 0.0}
    if k <= power_iters:
        rows = []
        for i in range(k):
            e = torch.zeros_like(res).reshape(b, -1)
            e[:, i] = 1.0
            rows.append(vjp_fn(e.reshape(res.shape))[0].reshape(b, -1))
        jac = torch.stack(rows, dim=1)  # [B, k, m]
        return {"eps_dec": eps, "delta_dec": float(torch.linalg.matrix_norm(jac, 2).max())}
    gen = torch.Generator(device="cpu").manual_seed(seed)
    v = torch.randn(y.shape, generator=gen, dtype=y.dtype).to(y.device)
    dims = tuple(range(1, y.ndim))
    sigma2 = torch.zeros(b, dtype=y.dtype, device=y.device)
    for _ in range(power_iters):
        v = v / v.square().sum(dims, keepdim=True).sqrt().clamp_min(_tiny(v))
        _, jv = torch.func.jvp(f, (y,), (v,))
        g = vjp_fn(jv)[0]
        sigma2 = (g * v).sum(dims)
        v = g.detach() + 1e-30 * v
    return {"eps_dec": eps, "delta_dec": float(sigma2.clamp_min(0).sqrt().max())}


def _tiny(t: Tensor) -> float:
    """Smallest positive normal number of ``t``'s dtype (1e-300 is 0 in float32)."""
    return torch.finfo(t.dtype).tiny


def _bdot(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).flatten(1).sum(1).reshape(-1, *([1] * (a.ndim - 1)))


def gauss_newton_encode(
    chart: Chart, x: Tensor, y0: Tensor, cond: Cond = None, iters: int = 3,
    cg_iters: int = 20,
) -> Tensor:
    """Refine coordinates toward eta(x) = argmin_y ||chi(y) - x||_M^2 (paper Eq.
    declared-encoder) by Gauss-Newton steps; each normal system G d = J^T M (x - chi(y))
    is solved matrix-free by batched conjugate gradients on ``pullback_matvec``."""
    y = y0.detach()
    x = x.detach()
    for _ in range(iters):
        xd, vjp_fn = torch.func.vjp(lambda yy: chart.decode(yy, cond), y)
        rhs = vjp_fn((x - xd) * chart._weights_like(x))[0]
        d = torch.zeros_like(y)
        res, p = rhs.clone(), rhs.clone()
        rr = _bdot(res, res)
        for _ in range(cg_iters):
            gp = chart.pullback_matvec(y, p, cond)
            alpha = rr / _bdot(p, gp).clamp_min(_tiny(rr))
            d = d + alpha * p
            res = res - alpha * gp
            rr_new = _bdot(res, res)
            p = res + rr_new / rr.clamp_min(_tiny(rr)) * p
            rr = rr_new
        y = (y + d).detach()
    return y


def batch_cond(cond: Cond, batch: int) -> Cond:
    """Repeat a single condition row (a vector or a field) to ``batch`` rows (helper for
    probing)."""
    if cond is None:
        return None
    cond = cond.reshape(1, -1) if cond.ndim <= 1 else cond
    return cond.expand(batch, *cond.shape[1:]) if cond.shape[0] == 1 else cond


CondFn = Callable[[Tensor | None], Tensor]
