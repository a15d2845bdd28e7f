"""Helmholtz (Leray) projection chart for periodic divergence-free velocity fields
(paper Table constraint-charts, 'Differential compatibility')."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from pcgbench.charts.base import Chart, Cond
from pcgbench.charts.streamfunction import channel_weights, spectral_wavenumbers
from pcgbench.errors import PcgError

if TYPE_CHECKING:
    from pcgbench.charts.geometry import Geometry


class HelmholtzChart(Chart):
    """Divergence-free projection of the first d channels on a periodic d-D grid.

    decode(y) = P y with the spectral Leray projector
    P u_hat = u_hat - W^-1 k (k . u_hat) / (k . W^-1 k), W = diag of per-channel weights
    (= u_hat - k (k . u_hat)/|k|^2 for a scalar weight), with Nyquist-zeroed derivative
    wavenumbers, the same ones the residual's divergence sum_j D_j u_j uses, so
    D . P y = 0 exactly up to rounding.  Optional ``passthrough``
    channels (e.g. a 4th scalar) are copied unchanged.  Coordinates are the field itself
    (coord_shape = field_shape = (d + passthrough, *shape)), so coord_dim exceeds the
    intrinsic dimension by the gradient part, a gauge the decoder annihilates.
    ``encode`` is the same projection P, which is M-orthogonal (paper Eq.
    declared-encoder; M scalar or per-channel); P is idempotent, so encode o decode = P =
    identity on the divergence-free domain and decode o encode = P is a projection.
    G = M P (M P is symmetric), so the exact geometry is C = M^1/2 on the domain.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        passthrough: int = 0,
        L: float | tuple[float, ...] = 2 * math.pi,
        weights: Tensor | float | None = None,
    ):
        shape = tuple(int(n) for n in shape)
        fshape = (len(shape) + passthrough, *shape)
        super().__init__(fshape, fshape, weights)
        self.d = len(shape)
        ks = torch.broadcast_tensors(*spectral_wavenumbers(shape, L))
        self.register_buffer("k", torch.stack(ks).contiguous())  # [d, *rfft_shape]
        self.register_buffer("chan_w", None)
        self.register_buffer("winv_k_over", None)
        self._metric_changed()

    def _metric_changed(self) -> None:
        w = channel_weights(self).to(self.k.device)
        self.chan_w = w
        winv = (1.0 / w[: self.d]).reshape(-1, *([1] * self.d))
        kwk = (self.k.square() * winv).sum(0)  # k . W^-1 k
        self.winv_k_over = winv * self.k / torch.where(kwk == 0, 1.0, kwk)

    def _fft(self, u: Tensor) -> Tensor:
        return torch.fft.rfftn(u, dim=tuple(range(-self.d, 0)))

    def _ifft(self, uh: Tensor) -> Tensor:
        return torch.fft.irfftn(uh, s=self.field_shape[1:], dim=tuple(range(-self.d, 0)))

    def project(self, x: Tensor) -> Tensor:
        """Leray projection of the velocity channels; passthrough channels unchanged."""
        u, rest = x[:, : self.d], x[:, self.d:]
        uh = self._fft(u)
        real = uh.real.dtype
        kdot = (self.k.to(real) * uh).sum(1, keepdim=True)
        ph = uh - self.winv_k_over.to(real) * kdot
        return torch.cat([self._ifft(ph), rest], dim=1)

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        return self.project(y)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        return self.project(x)

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        uh = self._fft(x[:, : self.d])
        div = self._ifft(1j * (self.k.to(uh.real.dtype) * uh).sum(1))
        return div.reshape(x.shape[0], -1)

    def exact_geometry(self, mu: Tensor | None = None) -> Geometry | None:
        from pcgbench.charts.geometry import DiagonalGeometry, IdentityGeometry

        w = self.chan_w
        if bool((w == 1.0).all()):
            return IdentityGeometry(mu)
        return DiagonalGeometry(w.sqrt().reshape(-1, *([1] * self.d)), mu)


class HelmholtzChart3D(HelmholtzChart):
    """:class:`HelmholtzChart` on a 3-D periodic grid (u, v, w [+ passthrough])."""

    def __init__(self, shape: tuple[int, int, int], passthrough: int = 0,
                 L: float | tuple[float, float, float] = 2 * math.pi,
                 weights: Tensor | float | None = None):
        if len(shape) != 3:
            raise PcgError("HelmholtzChart3D needs a 3-D grid shape")
        super().__init__(shape, passthrough, L, weights)
