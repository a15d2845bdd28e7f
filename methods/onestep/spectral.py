"""Fourier-mode statistics of fields on a coordinate grid, for PMosFM's "spectral" source
scale and "spectral" spread term (ours, not in the paper; ``PMosFMConfig.source_scale``
and ``spread_match``).

Fields are ``r`` [B, C, *spatial] in PMosFM's coordinates; modes are those of the real FFT
over the spatial axes (``torch.fft.rfftn``), shells the integer radii |k| of those modes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def shell_index(spatial: tuple[int, ...], device: torch.device) -> Tensor:
    """Integer radius |k| (rounded) of every rfftn mode of a field on ``spatial``."""
    freqs = [torch.fft.fftfreq(n, 1 / n, device=device) for n in spatial[:-1]]
    freqs.append(torch.fft.rfftfreq(spatial[-1], 1 / spatial[-1], device=device))
    grids = torch.meshgrid(*freqs, indexing="ij")
    return torch.sqrt(sum(g.pow(2) for g in grids)).round().long()


def shell_power(r: Tensor, shells: Tensor) -> Tensor:
    """Mean power per (channel, |k| shell) of the fluctuations of ``r`` [B, C, *spatial]
    about their batch mean (unbiased over the batch): [C, n_shells]."""
    power = _mode_power(r - r.mean(0, keepdim=True))
    flat = power.reshape(power.shape[0], -1)
    idx = shells.reshape(-1)
    n = int(idx.max()) + 1
    total = flat.new_zeros(flat.shape[0], n).index_add_(1, idx, flat)
    count = torch.bincount(idx, minlength=n).to(flat.dtype)
    return total / count


def _mode_power(fluct: Tensor) -> Tensor:
    """Unbiased batch power per (channel, rfft mode) of centred ``fluct`` [B, C, *spatial]."""
    dims = tuple(range(2, fluct.ndim))
    return torch.fft.rfftn(fluct, dim=dims).abs().pow(2).sum(0) / max(len(fluct) - 1, 1)


def data_amplitude(r: Tensor, rel_floor: float = 1e-6) -> Tensor:
    """RMS amplitude per (channel, Fourier mode) of the fluctuations of ``r`` [B, C,
    *spatial] about their batch mean, normalized so that white noise of unit variance has
    amplitude 1 in every mode: [C, *rfft shape] (floored at ``rel_floor`` x the largest,
    so dividing by it is safe).  Even in k, so scaling by it maps real fields to real."""
    power = _mode_power((r - r.mean(0, keepdim=True)).to(torch.float64))
    amp = (power / math.prod(r.shape[2:])).sqrt()
    return amp.clamp_min(rel_floor * float(amp.max())).to(r.dtype)


def fourier_scale(r: Tensor, symbol: Tensor, inverse: bool) -> Tensor:
    """F^-1 (symbol^{+-1} F r) over the spatial axes of ``r`` [B, C, *spatial]: the
    Fourier-diagonal scale ``symbol`` [C, *rfft shape] (``inverse``: divided by it)."""
    dims = tuple(range(2, r.ndim))
    rh = torch.fft.rfftn(r, dim=dims)
    sym = symbol.to(device=r.device, dtype=r.dtype)
    rh = rh / sym if inverse else rh * sym
    return torch.fft.irfftn(rh, s=r.shape[2:], dim=dims)
