"""The geometric preconditioner C_c of chart coordinates (paper Sec. 3.3, Eq.
preconditioned-coordinate): ``r = C (y - mu)``, ``y = mu + C^-1 r``, chosen so that the
pulled-back metric ``C^-T G C^-1`` is close to the identity.  Charts build their own
(``Chart.default_geometry``); :func:`pcgbench.training.preconditioning.fit_geometry` fits one from a
chart's pull-back.  Everything is a buffer, so ``state_dict`` round-trips with
``torch.load(weights_only=True)``; buffers are resized on load."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from pcgbench.errors import PcgError


class Resizable(nn.Module):
    """Loads buffers of any shape (statistics are sized at fit time)."""

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        for name in list(self._buffers):
            key = prefix + name
            if key in state_dict:
                value = state_dict[key]
                self._buffers[name] = None if value is None else torch.empty_like(value)
        super()._load_from_state_dict(state_dict, prefix, *args)


# ----------------------------------------------------------------------------------
# Geometric preconditioner C_c
# ----------------------------------------------------------------------------------
class Geometry(Resizable):
    """r = C (y - mu), y = mu + C^{-1} r (paper Eq. preconditioned-coordinate)."""

    def __init__(self, mu: Tensor | None = None):
        super().__init__()
        self.register_buffer("mu", None if mu is None else mu.detach().clone())

    def _mu(self, y: Tensor) -> Tensor | float:
        return 0.0 if self.mu is None else self.mu.to(dtype=y.dtype, device=y.device)

    def apply_C(self, v: Tensor) -> Tensor:
        return v

    def apply_Cinv(self, v: Tensor) -> Tensor:
        return v

    def to_r(self, y: Tensor) -> Tensor:
        return self.apply_C(y - self._mu(y))

    def to_y(self, r: Tensor) -> Tensor:
        return self._mu(r) + self.apply_Cinv(r)


class IdentityGeometry(Geometry):
    """C = I in paper Eq. preconditioned-coordinate (centering only); exact when G = I,
    e.g. an M-orthonormal null-space basis."""


class DiagonalGeometry(Geometry):
    """C = diag(scale) in paper Eq. preconditioned-coordinate; G~ = C^-T G C^-1 = I
    (Eq. pullback-physical-metric) when G is constant and diagonal, scale = diag(G)^1/2."""

    def __init__(self, scale: Tensor | float, mu: Tensor | None = None):
        super().__init__(mu)
        self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.float64).clone()
                             if not isinstance(scale, Tensor) else scale.detach().clone())

    def apply_C(self, v: Tensor) -> Tensor:
        return v * self.scale.to(dtype=v.dtype, device=v.device)

    def apply_Cinv(self, v: Tensor) -> Tensor:
        return v / self.scale.to(dtype=v.dtype, device=v.device)


class FourierDiagonalGeometry(Geometry):
    """C = F^-1 diag(symbol) F over the last ``symbol.ndim`` axes (real FFT half spectrum).

    ``symbol`` must be positive and even in k (e.g. |k|), so C is real and symmetric; for
    the streamfunction chart symbol = sqrt(w)|k| gives G~ = I exactly (paper Eq.
    app-streamfunction-pullback, DESIGN 'Streamfunction gauge')."""

    def __init__(self, symbol: Tensor, mu: Tensor | None = None):
        super().__init__(mu)
        if (symbol <= 0).any():
            raise PcgError("Fourier symbol must be positive (set gauge modes to 1)")
        self.register_buffer("symbol", symbol.detach().clone())

    def _mult(self, v: Tensor, inverse: bool) -> Tensor:
        nd = self.symbol.ndim
        dims = tuple(range(-nd, 0))
        sym = self.symbol.to(device=v.device, dtype=v.dtype)
        vh = torch.fft.rfftn(v, dim=dims)
        vh = vh / sym if inverse else vh * sym
        return torch.fft.irfftn(vh, s=v.shape[-nd:], dim=dims)

    def apply_C(self, v: Tensor) -> Tensor:
        return self._mult(v, inverse=False)

    def apply_Cinv(self, v: Tensor) -> Tensor:
        return self._mult(v, inverse=True)
