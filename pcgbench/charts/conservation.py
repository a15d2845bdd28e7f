"""Conservation charts: mean-free coordinates (paper Table constraint-charts, 'Global
conservation', l^T x - C = 0)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from pcgbench.charts.base import Chart, Cond
from pcgbench.errors import PcgError

if TYPE_CHECKING:
    from pcgbench.charts.geometry import Geometry

TargetFn = Callable[[Tensor | None], Tensor]


class MeanFreeChart(Chart):
    """Fix the mean of every slice over ``reduce_dims`` (field dims: 0 = channel).

    Three modes (R_h is the plain mean, i.e. a sum constraint l^T x = C):

    * ``target=`` (float, tensor broadcastable to the slice-mean shape, or
      ``fn(cond) -> [B]`` or broadcastable to [B, *slice-mean shape]): mean(x_t) = target_t.
    * ``ref_dim=d``: every slice along field dim ``d`` has the mean of slice 0 along
      ``d`` (heat ``sum_x u(., t) = sum_x u(., 0)``, periodic Burgers mass conservation).
    * ``ref_dim=d, ref_fn=fn``: slice 0 along ``d`` is additionally fixed to
      ``fn(cond) -> [B, *slice]`` (IC + conservation); coordinates omit that slice.

    Coordinates are field-shaped (``coord_shape = field_shape``, minus the reference
    slice with ``ref_fn``) so conv/FNO backbones can consume them; decode replaces each
    constrained slice's mean by its target: ``x = y - mean(y) + target`` (with the free
    reference slice passing through unchanged).  The coordinate *domain* is the set of y
    whose constrained slices are mean-free, so coord_dim exceeds the intrinsic m by the
    number of constrained slices: those per-slice constants are a gauge, annihilated by
    the decoder (G has them as its null space; ``pullback_matvec`` stays well defined).
    ``encode`` returns the M-orthogonal projection (paper Eq. declared-encoder, any
    diagonal M) expressed in the gauge-fixed coordinates, so encode(decode(y)) = y on the
    domain and decode(encode(x)) is a projection.
    """

    def __init__(
        self,
        field_shape: tuple[int, ...],
        reduce_dims: tuple[int, ...],
        target: float | Tensor | TargetFn | None = None,
        ref_dim: int | None = None,
        ref_fn: TargetFn | None = None,
        weights: Tensor | float | None = None,
    ):
        if (target is None) == (ref_dim is None):
            raise PcgError("MeanFreeChart: pass exactly one of target= or ref_dim=")
        if ref_fn is not None and ref_dim is None:
            raise PcgError("MeanFreeChart: ref_fn needs ref_dim")
        if ref_dim is not None and ref_dim in reduce_dims:
            raise PcgError("MeanFreeChart: ref_dim must not be a reduced dim")
        coord_shape = list(field_shape)
        if ref_fn is not None:
            coord_shape[ref_dim] -= 1  # type: ignore[index]
        super().__init__(tuple(coord_shape), field_shape, weights)
        self.rd = tuple(d + 1 for d in reduce_dims)  # dims of batched tensors
        self.ref = None if ref_dim is None else ref_dim + 1
        self.ref_fn = ref_fn
        self.target_fn = target if callable(target) else None
        const = None
        if target is not None and not callable(target):
            const = (target.detach() if isinstance(target, Tensor)
                     else torch.tensor(float(target), dtype=torch.float64))
        self.register_buffer("target", None if const is None else const.clone())

    # -- helpers -----------------------------------------------------------------------
    def _mean(self, x: Tensor) -> Tensor:
        return x.mean(self.rd, keepdim=True)

    def _target(self, cond: Cond, like: Tensor) -> Tensor:
        if self.target_fn is not None:
            t = self.target_fn(cond).to(like)
            return t.reshape(like.shape[0], *([1] * (like.ndim - 1))) if t.ndim == 1 else t
        return self.target.to(like)

    def _ref_slice(self, cond: Cond, like: Tensor) -> Tensor:
        shape = list(like.shape)
        shape[self.ref] = 1  # type: ignore[index]
        return self.ref_fn(cond).to(like).reshape(shape)  # type: ignore[misc]

    def _split(self, x: Tensor) -> tuple[Tensor, Tensor]:
        n = x.shape[self.ref]  # type: ignore[index]
        return x.narrow(self.ref, 0, 1), x.narrow(self.ref, 1, n - 1)  # type: ignore[arg-type]

    def _w(self, like: Tensor) -> Tensor:
        w = torch.as_tensor(self._weights_like(like), dtype=like.dtype, device=like.device)
        return w.expand(self.field_shape).unsqueeze(0)

    def _project(self, x: Tensor, w: Tensor, target: Tensor | None) -> Tensor:
        """M-orthogonal projection onto {mean(x_t) = target_t} (target None: a common
        value along ref_dim, the M-weighted average of the slice means)."""
        h = self._mean(1.0 / w)  # mean of M^-1 over each slice
        m = self._mean(x)
        if target is None:
            target = (m / h).sum(self.ref, keepdim=True) / (1.0 / h).sum(self.ref, keepdim=True)
        return x - (m - target) / h / w

    # -- chart -----------------------------------------------------------------------
    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        if self.ref is None:
            return y - self._mean(y) + self._target(cond, y)
        if self.ref_fn is None:
            ref, _ = self._split(y)
            return y - self._mean(y) + self._mean(ref)  # the ref slice passes through
        ref = self._ref_slice(cond, y)
        return torch.cat([ref, y - self._mean(y) + self._mean(ref)], dim=self.ref)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        w = self._w(x)
        if self.ref is None:
            xb = self._project(x, w, self._target(cond, x))
            return xb - self._mean(xb)
        if self.ref_fn is None:
            xb = self._project(x, w, None)
            keep = torch.zeros(x.shape[self.ref], dtype=x.dtype, device=x.device)
            keep[0] = 1.0
            keep = keep.reshape([-1 if d == self.ref else 1 for d in range(x.ndim)])
            return xb - (1.0 - keep) * self._mean(xb)
        _, rest = self._split(x)
        _, w_rest = self._split(w)
        xb = self._project(rest, w_rest, self._mean(self._ref_slice(cond, x)))
        return xb - self._mean(xb)

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        b = x.shape[0]
        if self.ref is None:
            return (self._mean(x) - self._target(cond, x)).reshape(b, -1)
        ref, rest = self._split(x)
        if self.ref_fn is None:
            return (self._mean(rest) - self._mean(ref)).reshape(b, -1)
        given = self._ref_slice(cond, x)
        return torch.cat([(ref - given).reshape(b, -1),
                          (self._mean(rest) - self._mean(given)).reshape(b, -1)], dim=1)

    def pullback_diagonal(self, y: Tensor | None = None) -> Tensor:
        """diag(J^T M J) of the (linear) decoder, in closed form.  With n the size of a
        constrained slice S and w the diagonal of M: a coordinate i of S that the decoder
        re-centres (x_j = y_j - mean_S y + ..., j in S) has sum_{j in S} w_j (delta_ij -
        1/n)^2 = w_i (1 - 2/n) + sum_S w / n^2; a free reference-slice coordinate (``ref_dim``
        without ``ref_fn``) passes through and also shifts the mean of every other slice
        along ``ref_dim``: w_i + sum_{t > 0} sum_{S_t} w / n^2."""
        like = torch.zeros((), dtype=torch.float64 if y is None else y.dtype,
                           device=None if y is None else y.device)
        w = self._w(like)  # [1, *field_shape]
        n = math.prod(w.shape[d] for d in self.rd)
        slice_sum = w.sum(self.rd, keepdim=True)
        diag = w * (1 - 2 / n) + slice_sum / n**2
        if self.ref is not None and self.ref_fn is None:
            rest = slice_sum.narrow(self.ref, 1, w.shape[self.ref] - 1).sum(
                self.ref, keepdim=True) / n**2
            first = w.narrow(self.ref, 0, 1) + rest
            diag = torch.cat([first.expand_as(diag.narrow(self.ref, 0, 1)),
                              diag.narrow(self.ref, 1, w.shape[self.ref] - 1)], dim=self.ref)
        elif self.ref_fn is not None:
            diag = self._split(diag)[1]
        return diag[0].expand(self.coord_shape).contiguous()

    def exact_geometry(self, mu: Tensor | None = None) -> Geometry | None:
        """sqrt(w) when M is constant along the reduced dims and the reference slice is
        not free (G = w I on the mean-free domain); ``None`` otherwise."""
        from pcgbench.charts.geometry import DiagonalGeometry, IdentityGeometry

        if self.ref is not None and self.ref_fn is None:
            return None
        if self.metric_w is None:
            if self._w_scalar == 1.0:
                return IdentityGeometry(mu)
            return DiagonalGeometry(self._w_scalar**0.5, mu)
        w = self.metric_w.expand(self.field_shape).unsqueeze(0)
        if not torch.equal(w.amax(self.rd, keepdim=True), w.amin(self.rd, keepdim=True)):
            return None
        if self.ref_fn is not None:
            w = self._split(w)[1]
        return DiagonalGeometry(w[0].sqrt(), mu)
