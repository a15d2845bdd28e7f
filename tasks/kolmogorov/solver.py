"""Batched pseudo-spectral solver of 2-D Kolmogorov flow in vorticity form (torch).

Equation (PBFM protocol, ``shared/REFERENCES.md``), on the 2 pi-periodic square::

    d omega/dt + u . grad(omega) = (1/Re) Lap(omega) - alpha omega + F,
    F = -k_f cos(k_f y),  alpha = 0.1,  k_f = 4,

with ``omega = dx v - dy u`` and the velocity from the streamfunction,
``Lap(psi) = -omega``, ``(u, v) = (dy psi, -dx psi)`` (the convention of
:class:`pcgbench.charts.StreamfunctionChart2D`).  ``F`` is the curl of the body force
``f = (sin(k_f y), 0)``; its forcing work is ``P = <u sin(k_f y)>``.

Layout: fields are ``[B, n, n]`` with x along axis -2 and y along axis -1 (``"ij"``);
grid ``x_i = 2 pi i / n``.  Spectral state: ``rfft2`` over the last two axes.

Numerics.  Linear terms ``L = -(nu |k|^2 + alpha)`` are integrated exactly by an
integrating factor; the advection by classical RK4 (Lawson IF-RK4).  The constant
forcing is integrated exactly too: the solver evolves ``zeta = omega - omega_s`` with
``omega_s_hat = F_hat / (nu |k|^2 + alpha)`` the linear steady state (the laminar
Kolmogorov state, on which advection vanishes identically), so the laminar state is a
fixed point of the discrete scheme to round-off.  Products are de-aliased by the 2/3
rule (modes with ``|k_x|`` or ``|k_y| > n // 3`` removed from the state and from the
advection term), which makes the truncated advection conserve energy and enstrophy
exactly (Galerkin truncation).  Time steps come from a CFL condition
``dt = cfl * dx / max(|u| + |v|)`` recomputed per output interval, with the number of
sub-steps rounded up so the solver lands exactly on the output times.  ``nu`` may differ
per batch row (several Re at once); all rows share ``dt``.
"""

from __future__ import annotations

import math

import torch

from pcgbench.numerics.spectral2d import (
    VorticitySpectra,
    dealias_mask,
    derivative_wavenumbers,
    wavenumbers,
)

__all__ = ["KolmogorovSolver"]


class KolmogorovSolver(VorticitySpectra):
    """IF-RK4 pseudo-spectral Kolmogorov-flow solver on an ``n x n`` grid.

    ``re``: Reynolds numbers, one per batch row (tensor [B] or float); ``drag`` alpha;
    ``kf`` forcing wavenumber; ``forcing_amp`` scales ``F`` (0: unforced).  States are
    vorticity spectra ``w_hat [B, n, n//2+1]`` (complex, de-aliased)."""

    def __init__(
        self,
        n: int,
        re: torch.Tensor | float,
        drag: float = 0.1,
        kf: int = 4,
        forcing_amp: float = 1.0,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ):
        self.n, self.drag, self.kf, self.dtype = int(n), float(drag), int(kf), dtype
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        re = torch.as_tensor(re, dtype=torch.float64, device=self.device).reshape(-1)
        self.re = re
        self.nu = (1.0 / re).to(dtype).reshape(-1, 1, 1)
        kx, ky = wavenumbers(self.n, self.device)
        dkx, dky = derivative_wavenumbers(self.n, self.device)
        self.k2 = (kx**2 + ky**2).to(dtype)
        self.ikx = (1j * dkx).to(self._cdtype)
        self.iky = (1j * dky).to(self._cdtype)
        self.mask = dealias_mask(self.n, self.device)
        k2_inv = torch.where(self.k2 == 0, torch.zeros_like(self.k2), 1.0 / self.k2)
        self.k2_inv = k2_inv
        self.lin = -(self.nu * self.k2 + self.drag)  # [B or 1, n, n//2+1]
        y = self.grid()
        self.force_y = forcing_amp * torch.sin(self.kf * y)  # velocity forcing f_u(y) [n]
        f_phys = (-forcing_amp * self.kf * torch.cos(self.kf * y)).expand(self.n, self.n)
        self.f_hat = torch.fft.rfft2(f_phys) * self.mask
        denom = torch.where(self.lin == 0, torch.ones_like(self.lin), -self.lin)
        # linear steady state (laminar), [B, n, m]; the mean mode (F has none) stays 0
        self.w_s = torch.where(self.lin == 0, 0.0, self.f_hat / denom)

    @property
    def _cdtype(self) -> torch.dtype:
        return torch.complex128 if self.dtype == torch.float64 else torch.complex64

    def grid(self) -> torch.Tensor:
        return 2 * math.pi * torch.arange(self.n, dtype=self.dtype, device=self.device) / self.n

    # -- transforms -------------------------------------------------------------------
    def fft(self, f: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft2(f) * self.mask

    def ifft_dealiased(self, fh: torch.Tensor) -> torch.Tensor:
        """:meth:`ifft` of a de-aliased spectrum (zero where ``|k_y| > n // 3``): the
        transform along x runs on the ``n // 3 + 1`` columns that can be nonzero only,
        then the real transform along y zero-pads the rest (irfft2 is separable: the same
        field, at ~3/4 of the work; ``tests/test_kolmogorov.py``)."""
        g = torch.fft.ifft(fh[..., : self.n // 3 + 1], dim=-2)
        return torch.fft.irfft(g, n=self.n, dim=-1)

    def velocity(self, w_hat: torch.Tensor) -> torch.Tensor:
        """(u, v) [B, 2, n, n] of de-aliased vorticity spectra (the solver's states)."""
        uh, vh = self.velocity_hat(w_hat)
        return torch.stack([self.ifft_dealiased(uh), self.ifft_dealiased(vh)], dim=1)

    def laminar(self) -> torch.Tensor:
        """Vorticity spectrum of the laminar state, one per Re row."""
        return self.w_s.expand(self.nu.shape[0], -1, -1).clone()

    def random_vorticity(self, batch: int, rng, kmax: int = 8, rms: float = 2.0) -> torch.Tensor:
        """Random de-aliased vorticity spectra [batch, n, n//2+1]: i.i.d. Gaussian modes
        with ``1 <= |k| <= kmax`` from the numpy generator ``rng``, scaled to rms vorticity
        ``rms`` per field (real fields: obtained through rfft2 of the physical field)."""
        z = torch.from_numpy(rng.standard_normal((batch, self.n, self.n))).to(self.dtype)
        zh = torch.fft.rfft2(z.to(self.device))
        kk = self.k2.sqrt()
        zh = torch.where((kk >= 1) & (kk <= kmax) & self.mask, zh, torch.zeros_like(zh))
        w = self.ifft(zh)
        w = w * (rms / w.pow(2).mean(dim=(-2, -1), keepdim=True).sqrt().clamp_min(1e-300))
        return self.fft(w)

    # -- dynamics -----------------------------------------------------------------------
    def advection_hat(self, w_hat: torch.Tensor) -> torch.Tensor:
        """De-aliased ``-(u . grad omega)`` in spectral space."""
        uh, vh = self.velocity_hat(w_hat)
        inv = self.ifft_dealiased
        wx, wy = inv(self.ikx * w_hat), inv(self.iky * w_hat)
        return -self.fft(inv(uh) * wx + inv(vh) * wy)

    def _adv_shifted(self, zeta: torch.Tensor) -> torch.Tensor:
        return self.advection_hat(zeta + self.w_s)

    def step(self, w_hat: torch.Tensor, dt: float, n_steps: int = 1) -> torch.Tensor:
        """``n_steps`` Lawson IF-RK4 steps of size ``dt``."""
        e1 = torch.exp(self.lin * dt)
        e2 = torch.exp(self.lin * (dt / 2))
        z = w_hat - self.w_s
        for _ in range(n_steps):
            k1 = self._adv_shifted(z)
            k2 = self._adv_shifted(e2 * (z + 0.5 * dt * k1))
            k3 = self._adv_shifted(e2 * z + 0.5 * dt * k2)
            k4 = self._adv_shifted(e1 * z + dt * (e2 * k3))
            z = e1 * z + (dt / 6) * (e1 * k1 + 2 * e2 * (k2 + k3) + k4)
        return z + self.w_s

    def cfl_dt(self, w_hat: torch.Tensor, cfl: float, dt_max: float | None = None) -> float:
        """``cfl * dx / max(|u| + |v|)`` over the batch (capped at ``dt_max``)."""
        vel = self.velocity(w_hat)
        speed = float((vel[:, 0].abs() + vel[:, 1].abs()).amax())
        dt = cfl * (2 * math.pi / self.n) / max(speed, 1e-12)
        return dt if dt_max is None else min(dt, dt_max)

    def advance(
        self, w_hat: torch.Tensor, t: float, cfl: float = 0.8, dt_max: float | None = 0.05
    ) -> tuple[torch.Tensor, int, float]:
        """Advance by time ``t`` with a CFL step fixed over this interval (rounded so the
        interval is hit exactly).  Returns (state, steps, dt)."""
        dt0 = self.cfl_dt(w_hat, cfl, dt_max)
        steps = max(1, math.ceil(t / dt0 - 1e-12))
        dt = t / steps
        return self.step(w_hat, dt, steps), steps, dt

    # -- diagnostics ----------------------------------------------------------------------
    def _mean_sq(self, fh: torch.Tensor) -> torch.Tensor:
        """Domain mean of f^2 from its rfft2 (Parseval; half-axis modes counted twice)."""
        w = torch.full((self.n // 2 + 1,), 2.0, dtype=self.dtype, device=self.device)
        w[0] = 1.0
        if self.n % 2 == 0:
            w[-1] = 1.0
        return (fh.abs() ** 2 * w).sum(dim=(-2, -1)) / self.n**4

    def energy(self, w_hat: torch.Tensor) -> torch.Tensor:
        """E = (1/2) <u^2 + v^2> per row."""
        uh, vh = self.velocity_hat(w_hat)
        return 0.5 * (self._mean_sq(uh) + self._mean_sq(vh))

    def enstrophy(self, w_hat: torch.Tensor) -> torch.Tensor:
        """Z = (1/2) <omega^2> per row."""
        return 0.5 * self._mean_sq(w_hat)

    def forcing_work(self, w_hat: torch.Tensor) -> torch.Tensor:
        """P = <u f_u> = <u sin(k_f y)> per row (the energy input)."""
        u = self.velocity(w_hat)[:, 0]
        return (u * self.force_y).mean(dim=(-2, -1))

    def energy_rate(self, w_hat: torch.Tensor) -> torch.Tensor:
        """dE/dt = -2 nu Z - 2 alpha E + P (advection conserves E exactly)."""
        nu = self.nu.reshape(-1)
        return -2 * nu * self.enstrophy(w_hat) - 2 * self.drag * self.energy(w_hat) + (
            self.forcing_work(w_hat)
        )
