"""2-D streamfunction chart (paper Eq. app-streamfunction-chart) with periodic spectral
derivatives."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from pcgbench.charts.base import Chart, Cond
from pcgbench.errors import PcgError

if TYPE_CHECKING:
    from pcgbench.charts.geometry import Geometry


def spectral_wavenumbers(
    shape: tuple[int, ...], lengths: float | tuple[float, ...] = 2 * math.pi
) -> list[Tensor]:
    """Derivative wavenumbers on the real-FFT grid of ``shape`` (last axis halved),
    float64, one broadcastable tensor per axis.  The Nyquist wavenumber of an even axis
    is set to 0, so every first-derivative matrix D_j = F^-1 diag(i k_j) F is real,
    skew-symmetric, and all of them commute exactly (D_x D_y = D_y D_x)."""
    d = len(shape)
    lens = (lengths,) * d if isinstance(lengths, (int, float)) else tuple(lengths)
    out = []
    for j, (n, length) in enumerate(zip(shape, lens, strict=True)):
        last = j == d - 1
        k = (torch.fft.rfftfreq if last else torch.fft.fftfreq)(n, dtype=torch.float64) * n
        if n % 2 == 0:
            k[n // 2] = 0.0  # Nyquist: no real odd derivative
        k = k * (2 * math.pi / length)
        view = [1] * d
        view[j] = -1
        out.append(k.reshape(view))
    return out


def channel_weights(chart: Chart) -> Tensor:
    """The metric weights as one value per channel [C] (float64); spectral charts need M
    constant over space (scalar or per-channel, e.g. shape [C, 1, 1])."""
    w = torch.as_tensor(chart.metric_weights(), dtype=torch.float64)
    w = w.to(torch.float64).expand(chart.field_shape).reshape(chart.field_shape[0], -1)
    if not torch.equal(w.amax(1), w.amin(1)):
        raise PcgError("spectral charts need metric weights constant over space "
                       "(scalar or per-channel)")
    return w[:, 0].clone()


class StreamfunctionChart2D(Chart):
    """(u, v) = (D_y psi, -D_x psi), paper Eq. app-streamfunction-chart, on a periodic
    grid with spectral derivatives (Prop. app-incompressibility: D_x u + D_y v = 0).

    ``shape = (n0, n1)``; ``indexing="ij"`` puts x along array axis -2 and y along -1
    ("xy": the reverse); ``L`` is the period per array axis; M is a scalar or
    per-channel weights (w_u, w_v).  Coordinates: psi [1, n0, n1].  Gauge: modes with
    zero derivative wavenumber (the mean and, on even grids, the pure-Nyquist modes) do
    not change the velocity; the decoder ignores them
    and the encoder returns psi with them removed, so encode(decode(psi)) = psi for psi
    in the gauge-fixed domain.  Encoder: M-least-squares psi = G^+ J^T M x (paper Eq.
    declared-encoder), psi_hat = (w_v i k_x v_hat - w_u i k_y u_hat) / g(k) with
    g = w_u k_y^2 + w_v k_x^2 (for a scalar weight: the solenoidal part of (u, v)).
    Pullback G = w_u D_y^T D_y + w_v D_x^T D_x has Fourier symbol g(k) (= w|k|^2, Eq.
    app-streamfunction-pullback); :meth:`exact_geometry` returns C = sqrt(g) mode-wise,
    so G~ = I on the gauge-fixed domain.  Field: (u, v) [2, n0, n1].
    """

    def __init__(
        self,
        shape: tuple[int, int],
        L: float | tuple[float, float] = 2 * math.pi,
        indexing: str = "ij",
        weights: Tensor | float | None = None,
    ):
        if indexing not in ("ij", "xy"):
            raise PcgError("indexing must be 'ij' or 'xy'")
        shape = (int(shape[0]), int(shape[1]))
        super().__init__((1, *shape), (2, *shape), weights)
        k0, k1 = spectral_wavenumbers(shape, L)
        kx, ky = (k0, k1) if indexing == "ij" else (k1, k0)
        kx, ky = torch.broadcast_tensors(kx, ky)
        k2 = kx**2 + ky**2
        self.register_buffer("kx", kx.contiguous())
        self.register_buffer("ky", ky.contiguous())
        self.register_buffer("k2", k2)
        self.register_buffer("gauge", k2 == 0)
        self.register_buffer("chan_w", None)
        self._metric_changed()

    def _metric_changed(self) -> None:
        self.chan_w = channel_weights(self).to(self.kx.device)

    def _gsym(self) -> Tensor:
        """Fourier symbol of G: w_u k_y^2 + w_v k_x^2 (1 on gauge modes)."""
        w = self.chan_w
        g = w[0] * self.ky**2 + w[1] * self.kx**2
        return torch.where(self.gauge, torch.ones_like(g), g)

    # -- spectral operators --------------------------------------------------------------
    def _fft(self, f: Tensor) -> Tensor:
        return torch.fft.rfft2(f)

    def _ifft(self, fh: Tensor) -> Tensor:
        return torch.fft.irfft2(fh, s=self.field_shape[1:])

    def _ik(self, k: Tensor, like: Tensor) -> Tensor:
        return 1j * k.to(like.real.dtype)

    def dx(self, f: Tensor) -> Tensor:
        """Spectral D_x of real fields [..., n0, n1]."""
        fh = self._fft(f)
        return self._ifft(self._ik(self.kx, fh) * fh)

    def dy(self, f: Tensor) -> Tensor:
        fh = self._fft(f)
        return self._ifft(self._ik(self.ky, fh) * fh)

    # -- chart -----------------------------------------------------------------------------
    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        ph = self._fft(y[:, 0])
        u = self._ifft(self._ik(self.ky, ph) * ph)
        v = self._ifft(-self._ik(self.kx, ph) * ph)
        return torch.stack([u, v], dim=1)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        uh, vh = self._fft(x[:, 0]), self._fft(x[:, 1])
        w = self.chan_w.to(uh.real.dtype)
        num = w[1] * self._ik(self.kx, uh) * vh - w[0] * self._ik(self.ky, uh) * uh
        ph = torch.where(self.gauge, 0.0, num / self._gsym().to(uh.real.dtype))
        return self._ifft(ph).unsqueeze(1)

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        uh, vh = self._fft(x[:, 0]), self._fft(x[:, 1])
        div = self._ifft(self._ik(self.kx, uh) * uh + self._ik(self.ky, uh) * vh)
        return div.reshape(x.shape[0], -1)

    def pullback_sqrt_symbol(self) -> Tensor:
        """sqrt(w_u k_y^2 + w_v k_x^2) (= sqrt(w)|k| for a scalar weight) on the real-FFT
        grid, with gauge modes set to 1 (invertible C)."""
        return self._gsym().sqrt()

    def gauge_project(self, y: Tensor) -> Tensor:
        """Remove the gauge modes of coordinates y [B, 1, n0, n1]."""
        yh = self._fft(y)
        return self._ifft(torch.where(self.gauge, 0.0, yh))

    def exact_geometry(self, mu: Tensor | None = None) -> Geometry | None:
        from pcgbench.charts.geometry import FourierDiagonalGeometry

        return FourierDiagonalGeometry(self.pullback_sqrt_symbol(), mu)
