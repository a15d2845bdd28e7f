"""Spectral helpers of 2 pi-periodic square fields ``[..., n, n]`` (``rfft2`` layout: x along
axis -2, full; y along axis -1, half), shared by the 2-D spectral solvers of the tasks."""

from __future__ import annotations

import torch

__all__ = ["VorticitySpectra", "dealias_mask", "derivative_wavenumbers", "fourier_truncate",
           "wavenumbers"]


def wavenumbers(n: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer wavenumbers of the ``rfft2`` grid of an ``n x n`` 2 pi-periodic field:
    ``kx [n, 1]`` (full axis -2), ``ky [1, n//2+1]`` (half axis -1), float64."""
    kx = torch.fft.fftfreq(n, dtype=torch.float64, device=device) * n
    ky = torch.fft.rfftfreq(n, dtype=torch.float64, device=device) * n
    return kx[:, None], ky[None, :]


def derivative_wavenumbers(n: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`wavenumbers` with the Nyquist wavenumber of each axis set to 0 (odd
    derivatives of real fields; the convention of the streamfunction chart)."""
    kx, ky = wavenumbers(n, device)
    kx, ky = kx.clone(), ky.clone()
    if n % 2 == 0:
        kx[n // 2] = 0.0
        ky[0, n // 2] = 0.0
    return kx, ky


def dealias_mask(n: int, device=None) -> torch.Tensor:
    """2/3 rule: True where ``|k_x| <= n // 3`` and ``|k_y| <= n // 3`` ([n, n//2+1])."""
    kx, ky = wavenumbers(n, device)
    cut = n // 3
    return (kx.abs() <= cut) & (ky.abs() <= cut)


def fourier_truncate(f: torch.Tensor, m: int) -> torch.Tensor:
    """Real fields ``[..., n, n]`` -> ``[..., m, m]`` (m <= n) keeping the modes
    ``|k| < m / 2`` of each axis (the Nyquist modes of the coarse grid are dropped, so
    spectral derivatives with zeroed Nyquist wavenumbers commute with the reduction);
    values are interpolated exactly for band-limited fields."""
    n = f.shape[-1]
    if m == n:
        return f
    fh = torch.fft.rfft2(f)
    half = (m - 1) // 2  # largest kept |k| (excludes the coarse Nyquist)
    out = torch.zeros(*f.shape[:-2], m, m // 2 + 1, dtype=fh.dtype, device=f.device)
    out[..., : half + 1, : half + 1] = fh[..., : half + 1, : half + 1]
    if half > 0:
        out[..., m - half :, : half + 1] = fh[..., n - half :, : half + 1]
    return torch.fft.irfft2(out * (m * m) / (n * n), s=(m, m))


class VorticitySpectra:
    """Velocity from vorticity spectra ``w_hat [B, n, n//2+1]`` of a 2-D periodic solver:
    ``psi_hat = w_hat / |k|^2`` (mean mode 0), ``(u, v)_hat = (i k_y, -i k_x) psi_hat``.
    A solver sets ``n``, ``ikx``, ``iky`` (``i k`` of odd derivatives) and ``k2_inv`` in its
    own axis layout."""

    n: int
    ikx: torch.Tensor
    iky: torch.Tensor
    k2_inv: torch.Tensor

    def ifft(self, fh: torch.Tensor) -> torch.Tensor:
        return torch.fft.irfft2(fh, s=(self.n, self.n))

    def velocity_hat(self, w_hat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(u_hat, v_hat) = (i k_y, -i k_x) psi_hat`` with ``psi_hat = w_hat / |k|^2``."""
        psi = w_hat * self.k2_inv
        return self.iky * psi, -self.ikx * psi

    def velocity(self, w_hat: torch.Tensor) -> torch.Tensor:
        """(u, v) ``[B, 2, n, n]`` of vorticity spectra."""
        uh, vh = self.velocity_hat(w_hat)
        return torch.stack([self.ifft(uh), self.ifft(vh)], dim=1)
