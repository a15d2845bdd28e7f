"""Batched pseudo-spectral solver of the forced 2-D Navier-Stokes equations in vorticity form
(torch; constrained-PDE suite, ``shared/REFERENCES.md`` "Navier-Stokes 2-D"; PCFM's data
generator ``datasets/generate_ns_2d.py``, after Li et al. 2020)::

    dw/dt + u . grad(w) = nu Lap(w) + f,   u = (d psi/dy, -d psi/dx),   -Lap(psi) = w,

on the periodic ``[0, 1)^2``, grid ``x_i = i/n``, ``y_j = j/n``.  **Layout:** ``[..., n, n]``,
y along axis -2, x along axis -1 (``"xy"``: ``w[..., j, i] = w(x_i, y_j)``); spectra ``rfft2``.
**Scheme** (step ``dt``, ``k = 2 pi (k_x, k_y)``), Crank-Nicolson viscosity, explicit advection:
``w_hat <- [(1 - a) w_hat + dt (f_hat - N_hat(w))] / (1 + a)``, ``a = dt nu |k|^2 / 2``, with
``N_hat`` the 2/3-rule de-aliased (``|k_x|, |k_y| <= n // 3``) pseudo-spectral ``u . grad(w)``;
the state is not truncated (as PCFM); first derivatives use zero Nyquist wavenumbers.  The mean
mode has ``|k|^2 = 0`` and zero advection: total vorticity changes only by the forcing's mean.
ICs: :func:`gaussian_random_field` (PCFM's ``GaussianRF``, ``alpha = 2.5``, ``tau = 7``,
mean-free); forcing :func:`sinusoidal_forcing` ``0.1 sqrt(2) sin(2 pi (x + y) + phi)``.  Plain
torch (float64 default, float32 option, any device), batched over rows; gradients flow
through :meth:`NavierStokesCN.solve`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pcgbench.errors import PcgError
from pcgbench.numerics.spectral2d import (
    VorticitySpectra,
    dealias_mask,
    derivative_wavenumbers,
    wavenumbers,
)

__all__ = [
    "FORCING_AMPLITUDE",
    "NavierStokesCN",
    "gaussian_random_field",
    "grf_mode_variance",
    "sinusoidal_forcing",
    "snapshot_residual",
    "unit_wavenumbers",
]

#: Amplitude of the protocol forcing ``0.1 sqrt(2) sin(2 pi (x + y) + phi)``.
FORCING_AMPLITUDE = 0.1 * math.sqrt(2.0)


def unit_wavenumbers(
    n: int, device=None, derivative: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Angular wavenumbers ``2 pi k`` of the ``rfft2`` grid of an ``n x n`` field on the unit
    torus in the ``[..., y, x]`` layout: ``ky [n, 1]`` (full axis -2), ``kx [1, n//2+1]``
    (half axis -1), float64.  ``derivative=True`` zeroes the Nyquist wavenumbers (odd
    derivatives of real fields).  Thin wrapper of :mod:`pcgbench.tasks.kolmogorov.solver`'s
    integer wavenumbers (there axis -2 is called x; only the axis order matters)."""
    k_row, k_col = (derivative_wavenumbers if derivative else wavenumbers)(n, device)
    return 2 * math.pi * k_row, 2 * math.pi * k_col


def grf_mode_variance(n: int, alpha: float = 2.5, tau: float = 7.0,
                      sigma: float | None = None) -> torch.Tensor:
    """``E |w_hat_k|^2`` of :func:`gaussian_random_field` for the unnormalized ``rfft2``
    ([n, n//2+1], float64): ``n^4 * 2 sigma^2 (4 pi^2 |k|^2 + tau^2)^-alpha``, 0 at k = 0;
    ``sigma = tau^(alpha - 1)`` by default (``tau^(0.5 (2 alpha - d))`` with d = 2)."""
    if sigma is None:
        sigma = tau ** (alpha - 1.0)
    ky, kx = unit_wavenumbers(n)
    var = n**4 * 2.0 * sigma**2 * (kx**2 + ky**2 + tau**2) ** (-alpha)
    var[0, 0] = 0.0
    return var


def gaussian_random_field(
    batch: int,
    n: int,
    rng: np.random.Generator,
    alpha: float = 2.5,
    tau: float = 7.0,
    sigma: float | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """``batch`` mean-free Gaussian random fields on the ``n x n`` unit torus -> [B, n, n].

    The law of PCFM's / Li et al.'s ``GaussianRF(2, n, alpha, tau)``: a stationary real
    Gaussian field with Fourier coefficients of variance :func:`grf_mode_variance`
    (spectrum ``~ (4 pi^2 |k|^2 + tau^2)^-alpha``, zero mean mode).  Built as the rfft2
    of real white noise (``E |z_hat_k|^2 = n^2`` for every k, Hermitian by construction)
    scaled mode by mode, which has exactly those second moments; drawn from the numpy
    generator ``rng`` (float64), returned in ``dtype``."""
    if batch < 0 or n < 2:
        raise PcgError(f"gaussian_random_field needs batch >= 0 and n >= 2, got {batch}, {n}")
    z = torch.from_numpy(rng.standard_normal((batch, n, n)))
    scale = grf_mode_variance(n, alpha, tau, sigma).sqrt() / n
    return torch.fft.irfft2(torch.fft.rfft2(z) * scale, s=(n, n)).to(dtype)


def sinusoidal_forcing(
    n: int, phi: torch.Tensor | np.ndarray | float, amplitude: float = FORCING_AMPLITUDE,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """The protocol forcing ``amplitude * sin(2 pi (x + y) + phi)`` on the ``n x n`` grid,
    one field per phase: ``phi [F]`` -> ``[F, n, n]`` (``[..., y, x]`` layout)."""
    phi = torch.as_tensor(phi, dtype=torch.float64).reshape(-1, 1, 1)
    g = torch.arange(n, dtype=torch.float64) / n
    theta = 2 * math.pi * (g[None, :] + g[:, None])  # symmetric in x and y
    return (amplitude * torch.sin(theta + phi)).to(dtype)


class NavierStokesCN(VorticitySpectra):
    """Crank-Nicolson / explicit-advection pseudo-spectral solver on the ``n x n`` unit torus.

    ``nu``: viscosity; ``dt``: time step; ``forcing``: physical forcing ``[B or 1, n, n]``
    (or ``None``: unforced), time-independent; ``dtype``: float64 (default) or float32.
    States are vorticity spectra ``w_hat [B, n, n//2+1]`` (complex)."""

    def __init__(
        self,
        n: int,
        nu: float,
        dt: float,
        forcing: torch.Tensor | None = None,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ):
        if n < 4:
            raise PcgError(f"NavierStokesCN needs n >= 4, got {n}")
        if nu < 0 or dt <= 0:
            raise PcgError(f"NavierStokesCN needs nu >= 0 and dt > 0, got nu={nu}, dt={dt}")
        if dtype not in (torch.float32, torch.float64):
            raise PcgError(f"NavierStokesCN dtype must be float32 or float64, got {dtype}")
        self.n, self.nu, self.dt, self.dtype = int(n), float(nu), float(dt), dtype
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        cdt = torch.complex128 if dtype == torch.float64 else torch.complex64
        ky, kx = unit_wavenumbers(self.n, self.device)
        dky, dkx = unit_wavenumbers(self.n, self.device, derivative=True)
        k2 = kx**2 + ky**2
        self.k2 = k2.to(dtype)
        self.ikx, self.iky = (1j * dkx).to(cdt), (1j * dky).to(cdt)
        self.k2_inv = torch.where(k2 == 0, 0.0, 1.0 / torch.where(k2 == 0, 1.0, k2)).to(dtype)
        mask = dealias_mask(self.n, self.device)
        mask[0, 0] = False  # <u . grad w> = 0 exactly: no mean mode in the advection term
        self.mask = mask
        a = 0.5 * self.dt * self.nu * k2
        self.decay = ((1 - a) / (1 + a)).to(dtype)  # per-step factor of the linear part
        self.gain = (self.dt / (1 + a)).to(dtype)  # dt / (1 + a)
        if forcing is None:
            self.f_hat = torch.zeros((), dtype=cdt, device=self.device)
        else:
            if forcing.shape[-2:] != (self.n, self.n):
                raise PcgError(f"forcing must be [B, {self.n}, {self.n}], got "
                               f"{tuple(forcing.shape)}")
            # transformed in float64 (its mean stays at float64 round-off), then cast
            f64 = forcing.to(self.device, torch.float64)
            self.f_hat = torch.fft.rfft2(f64).to(cdt)

    # -- transforms ----------------------------------------------------------------------
    def fft(self, w: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft2(w.to(self.dtype))

    # -- dynamics ------------------------------------------------------------------------
    def advection_hat(self, w_hat: torch.Tensor) -> torch.Tensor:
        """De-aliased ``(u . grad w)_hat`` (2/3 rule, mean mode 0)."""
        uh, vh = self.velocity_hat(w_hat)
        u, v, wx, wy = self.ifft(torch.stack([uh, vh, self.ikx * w_hat, self.iky * w_hat]))
        return torch.fft.rfft2(u * wx + v * wy) * self.mask

    def step(self, w_hat: torch.Tensor, n_steps: int = 1) -> torch.Tensor:
        """``n_steps`` Crank-Nicolson / forward-Euler steps of size ``dt``."""
        for _ in range(n_steps):
            w_hat = self.decay * w_hat + self.gain * (self.f_hat - self.advection_hat(w_hat))
        return w_hat

    def solve(self, w0: torch.Tensor, n_snapshots: int, steps_per_snapshot: int
              ) -> torch.Tensor:
        """Evolve ``w0 [B, n, n]`` and record ``n_snapshots`` fields ``steps_per_snapshot``
        steps apart (the first is ``w0`` itself, at t = 0) -> ``[B, n_snapshots, n, n]`` in
        the solver dtype.  Raises :class:`PcgError` if the run produces non-finite values."""
        if w0.ndim != 3 or w0.shape[-2:] != (self.n, self.n):
            raise PcgError(f"w0 must be [B, {self.n}, {self.n}], got {tuple(w0.shape)}")
        if n_snapshots < 1 or steps_per_snapshot < 1:
            raise PcgError("solve needs n_snapshots >= 1 and steps_per_snapshot >= 1")
        w0 = w0.to(self.device, self.dtype)
        w_hat = self.fft(w0)
        outs = [w0]
        for _ in range(n_snapshots - 1):
            w_hat = self.step(w_hat, steps_per_snapshot)
            w = self.ifft(w_hat)
            if not bool(torch.isfinite(w).all()):
                raise PcgError(f"Navier-Stokes solver blew up (dt={self.dt}, nu={self.nu}, "
                               f"n={self.n}); reduce dt")
            outs.append(w)
        return torch.stack(outs, dim=1)

    # -- diagnostics ---------------------------------------------------------------------
    def max_speed(self, w_hat: torch.Tensor) -> float:
        """``max |u|`` over the batch (``dt <= 2 nu / max|u|^2`` is the stability bound of
        forward-Euler advection damped by Crank-Nicolson viscosity, for every mode)."""
        vel = self.velocity(w_hat)
        return float(vel.pow(2).sum(1).sqrt().amax())


def snapshot_residual(w: torch.Tensor, nu: float, dt: float,
                      forcing: torch.Tensor | None = None) -> torch.Tensor:
    """Vorticity-equation residual between consecutive snapshots ``w [..., nt, n, n]``
    spaced ``dt`` apart (trapezoidal rule in time, spectral in space)::

        r^{m+1/2} = (w^{m+1} - w^m)/dt + (G(w^{m+1}) + G(w^m))/2 - f,
        G(w) = u . grad(w) - nu Lap(w)

    with the solver's operators (2/3-rule de-aliased advection, spectral Laplacian) ->
    ``[..., nt - 1, n, n]``.  Second order in ``dt`` about the midpoints, so on exact
    trajectories it is ``O(dt^2 w_ttt / 12)`` (plus the solver's own O(step) error): the
    discretization floor of the evaluator.  ``forcing`` broadcasts against one snapshot
    (e.g. ``[..., 1, n, n]``); ``None`` omits it.  Differentiable in ``w``."""
    n = w.shape[-1]
    if w.shape[-2] != n or w.ndim < 3 or w.shape[-3] < 2:
        raise PcgError(f"snapshot_residual needs [..., nt >= 2, n, n], got {tuple(w.shape)}")
    s = NavierStokesCN(n, nu, 1.0, dtype=w.dtype, device=w.device)
    w_hat = torch.fft.rfft2(w)
    g = s.ifft(s.advection_hat(w_hat) + nu * s.k2 * w_hat)
    r = (w[..., 1:, :, :] - w[..., :-1, :, :]) / dt + 0.5 * (g[..., 1:, :, :] + g[..., :-1, :, :])
    return r if forcing is None else r - forcing.to(r)
