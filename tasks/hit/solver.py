"""Batched pseudo-spectral solver of forced homogeneous isotropic turbulence (torch).

Incompressible Navier-Stokes on the 2 pi-periodic cube with Lundgren's linear forcing
(Lundgren 2003; Rosales & Meneveau, Phys. Fluids 17, 095106, 2005)::

    du/dt + (u . grad) u = -grad p + nu Lap u + A u,   div u = 0,

``A u`` acting on every mode with ``k != 0``; at stationarity ``eps = 3 A u'^2``, eddy turnover
``tau = u'^2 / eps = 1 / (3 A)``; pressure from ``-Lap p = d_i d_j (u_i u_j)``.  Fields
``[B, C, n, n, n]``, axes ``(x, y, z)`` the last three, ``x_i = 2 pi i / n``; spectral state
``uh [B, 3, n, n, n//2+1]`` = unnormalised ``rfftn`` of the last three dims.  Rotational form
``du/dt = P[u x omega] - nu k^2 u + A u`` (``P`` the Leray projector); cubic de-aliasing
(modes with ``|k_i| >= dealias * n / 2`` on any axis are zero; ``k_max = dealias * n / 2`` in
``k_max eta >= 1``); derivative wavenumbers 0 at Nyquist (as in
:mod:`pcgbench.tasks.kolmogorov.solver`); the linear part ``A - nu k^2`` by integrating
factor, the rest by Lawson IF-RK4 (``scheme="rk4"``) or IF Shu-Osher SSP-RK3 (``"rk3"``);
``dt = cfl * dx / max|u|`` (Euclidean speed), capped by ``dt_max``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import Tensor

from pcgbench.errors import PcgError

__all__ = [
    "HITConfig",
    "HITSolver",
    "random_solenoidal_field",
    "simulate_frames",
    "spectral_truncate",
]

_DIMS = (-3, -2, -1)


def _check_grid(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 4 or n % 2:
        raise PcgError(f"HIT grid: n must be an even integer >= 4, got {n!r}")


@dataclass(frozen=True)
class HITConfig:
    """Physics and numerics of one HIT run.

    Defaults: a resolved 32^3 run, measured at stationarity (time mean over 15-30 tau)
    ``Re_lambda ~ 21`` and ``k_max eta ~ 1.1`` (min ~1.03).  ``A`` is the 64^3 reference
    value and ``nu`` its ``4.491e-3`` moved to 32^3 at fixed ``k_max eta`` (x 2^(4/3),
    :meth:`for_grid`).  At fixed ``n`` and forcing ``Re_lambda ~ (k_max eta)^(-2/3)``, so
    ``k_max eta >= 1`` (with ``k_max = n/3``) caps ``Re_lambda`` near 22 at 32^3."""

    n: int = 32  # grid points per axis
    nu: float = 0.0113  # kinematic viscosity (see above; use for_grid(n) on other grids)
    # "linear": Lundgren f = A u on all modes k != 0; "none": decaying turbulence
    forcing: Literal["linear", "none"] = "linear"
    A: float = 0.0667  # Lundgren coefficient; forcing time scale tau = 1 / (3 A)
    cfl: float = 0.4
    dt_max: float = 0.05
    scheme: Literal["rk4", "rk3"] = "rk4"
    dealias: float = 2.0 / 3.0  # kept modes: |k_i| < dealias * n / 2 on every axis (cubic)

    def __post_init__(self) -> None:
        _check_grid(self.n)
        if not (math.isfinite(self.nu) and self.nu > 0):
            raise PcgError(f"HIT: nu must be a positive number, got {self.nu!r}")
        if self.forcing not in ("linear", "none"):
            raise PcgError(f"HIT: forcing must be 'linear' or 'none', got {self.forcing!r}")
        if not (math.isfinite(self.A) and self.A >= 0):
            raise PcgError(f"HIT: the forcing coefficient A must be >= 0, got {self.A!r}")
        if not (0 < self.cfl <= 1):
            raise PcgError(f"HIT: cfl must be in (0, 1], got {self.cfl!r}")
        if not (math.isfinite(self.dt_max) and self.dt_max > 0):
            raise PcgError(f"HIT: dt_max must be positive, got {self.dt_max!r}")
        if self.scheme not in ("rk4", "rk3"):
            raise PcgError(f"HIT: scheme must be 'rk4' or 'rk3', got {self.scheme!r}")
        if not (0 < self.dealias <= 1):
            raise PcgError(f"HIT: dealias must be in (0, 1], got {self.dealias!r}")

    @property
    def kmax(self) -> float:
        """De-aliased maximum wavenumber ``dealias * n / 2`` (n/3 for the 2/3 rule)."""
        return self.dealias * self.n / 2

    @property
    def tau(self) -> float:
        """Forcing time scale ``1 / (3 A)`` = the stationary eddy turnover ``u'^2 / eps``."""
        return 1.0 / (3.0 * self.A) if self.forcing == "linear" and self.A > 0 else math.inf

    @classmethod
    def for_grid(cls, n: int, **overrides) -> HITConfig:
        """The default physics moved to grid ``n`` at fixed ``k_max eta``: with ``A`` (hence
        ``eps / u'^2``) fixed, ``eta ~ nu^(3/4)`` so ``nu = nu_32 (32 / n)^(4/3)``, and
        ``Re_lambda = u' sqrt(5 / (nu A)) ~ n^(2/3)`` (x2.5 from 32^3 to 128^3)."""
        _check_grid(n)
        nu = cls.nu * (32 / n) ** (4 / 3)
        return cls(**{"n": n, "nu": nu, **overrides})


def _wavenumbers(n: int, device, nyquist_zero: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Integer wavenumbers of the ``rfftn`` grid, broadcastable ``[n,1,1], [1,n,1],
    [1,1,n//2+1]`` (float64); Nyquist set to 0 when ``nyquist_zero`` (odd derivatives)."""
    k = torch.fft.fftfreq(n, d=1.0 / n, dtype=torch.float64, device=device)
    kz = torch.fft.rfftfreq(n, d=1.0 / n, dtype=torch.float64, device=device)
    if nyquist_zero:
        k = torch.where(k.abs() == n // 2, torch.zeros_like(k), k)
        kz = torch.where(kz.abs() == n // 2, torch.zeros_like(kz), kz)
    return k.view(n, 1, 1), k.view(1, n, 1), kz.view(1, 1, -1)


def _dealias_mask(n: int, dealias: float, device) -> Tensor:
    """Cubic truncation: True where ``|k_i| < dealias * n / 2`` on all three axes."""
    kx, ky, kz = _wavenumbers(n, device, nyquist_zero=False)
    cut = dealias * n / 2
    # strict "<" with a tolerance so that e.g. n = 48 keeps |k_i| <= 15, not 16 (3K < n)
    lim = cut - 1e-9
    return (kx.abs() < lim) & (ky.abs() < lim) & (kz.abs() < lim)


def _parseval_weights(n: int, dtype, device) -> Tensor:
    """Weights of the half (last) ``rfftn`` axis in Parseval sums: 2 for the modes standing
    for a conjugate pair, 1 for ``k_z = 0`` and the Nyquist mode."""
    w = torch.full((n // 2 + 1,), 2.0, dtype=dtype, device=device)
    w[0] = 1.0
    w[-1] = 1.0  # n is even: the last rfft mode is the Nyquist mode
    return w


class HITSolver:
    """IF-RK pseudo-spectral HIT solver on an ``n^3`` grid (see the module docstring).

    States are de-aliased velocity spectra ``uh [B, 3, n, n, n//2+1]``; all batch rows
    share the time step."""

    def __init__(
        self, cfg: HITConfig, dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu"
    ):
        if dtype not in (torch.float64, torch.float32):
            raise PcgError(f"HIT solver: dtype must be float32 or float64, got {dtype}")
        self.cfg, self.n, self.dtype = cfg, cfg.n, dtype
        self.device = torch.device(device)
        self.cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        n, dev = self.n, self.device
        kx, ky, kz = _wavenumbers(n, dev, nyquist_zero=False)
        dkx, dky, dkz = _wavenumbers(n, dev, nyquist_zero=True)
        self.k2 = (kx**2 + ky**2 + kz**2).to(dtype)  # [n, n, m], true |k|^2
        # derivative wavenumbers (Nyquist zeroed) as one [3, n, n, m] tensor
        self.kvec = torch.stack(torch.broadcast_tensors(dkx, dky, dkz)).to(dtype)
        dk2 = self.kvec.pow(2).sum(0)
        self.dk2_inv = torch.where(dk2 == 0, torch.zeros_like(dk2), 1.0 / dk2)
        self.mask = _dealias_mask(n, cfg.dealias, dev)
        #: k_z columns a de-aliased spectrum can hold (|k_z| < dealias n / 2: the first ones)
        self.kept_cols = int(self.mask.any(0).any(0).sum())
        forced = cfg.forcing == "linear"
        self.a = cfg.A if forced else 0.0
        lin = -cfg.nu * self.k2 + self.a
        # no forcing (and no viscosity, trivially) on the mean mode
        self.lin = torch.where(self.k2 == 0, torch.zeros_like(lin), lin)
        self.w_half = _parseval_weights(n, dtype, dev)
        self.dx = 2 * math.pi / n
        # the same constants cast to the state's complex dtype once: a real or bool factor
        # in a product with a spectrum is cast anyway, so this is the same arithmetic
        # without a cast (a copy) per product (`cpu` HIT data ~17 % faster, protocols)
        self._kvec_c = self.kvec.to(self.cdtype)
        self._dk2_inv_c = self.dk2_inv.to(self.cdtype)
        self._mask_c = self.mask.to(self.cdtype)
        self._kmag_c = self.k2.sqrt().to(self.cdtype)

    # -- transforms --------------------------------------------------------------------
    def to_spectral(self, u: Tensor) -> Tensor:
        """Physical ``[..., n, n, n]`` -> de-aliased spectrum ``[..., n, n, n//2+1]``
        (modes outside the 2/3-rule cube are zeroed: the solver's state space)."""
        self._check_shape(u.shape[-3:], physical=True)
        uh = torch.fft.rfftn(u.to(self.device, self.dtype), dim=_DIMS)
        return uh * self._mask_c

    def to_physical(self, uh: Tensor) -> Tensor:
        """Spectrum ``[..., n, n, n//2+1]`` -> physical ``[..., n, n, n]``."""
        return torch.fft.irfftn(uh, s=(self.n,) * 3, dim=_DIMS)

    def to_physical_dealiased(self, uh: Tensor) -> Tensor:
        """:meth:`to_physical` of a de-aliased spectrum (zero where ``|k_z|`` is cut, as
        every solver state and what is derived from it mode-wise): the transforms along
        y and x run on the kept k_z columns only, one axis at a time, and the real
        transform along z zero-pads the rest (irfftn is separable: the same field at ~1/2
        of the work on the `cpu` grid; ``tests/test_hit3d_solver.py``)."""
        g = torch.fft.ifft(uh[..., : self.kept_cols], dim=-2)
        g = torch.fft.ifft(g, dim=-3)
        return torch.fft.irfft(g, n=self.n, dim=-1)

    def _check_shape(self, shape, physical: bool) -> None:
        want = (self.n,) * 3 if physical else (self.n, self.n, self.n // 2 + 1)
        if tuple(shape) != want:
            kind = "physical" if physical else "spectral"
            raise PcgError(f"HIT solver: {kind} field has grid {tuple(shape)}, expected {want}")

    def project(self, uh: Tensor) -> Tensor:
        """Leray projection ``(I - k k^T / k^2) uh`` (mode-wise ``k . uh = 0``, with the
        derivative wavenumbers so the spectral divergence vanishes to round-off)."""
        k = self._kvec_c
        kdotu = (k * uh).sum(dim=-4, keepdim=True)
        return uh - k * (kdotu * self._dk2_inv_c)

    def curl(self, uh: Tensor) -> Tensor:
        """Spectral vorticity ``omega_hat = i k x uh``."""
        kx, ky, kz = self._kvec_c
        ux, uy, uz = uh.unbind(dim=-4)
        return 1j * torch.stack([ky * uz - kz * uy, kz * ux - kx * uz, kx * uy - ky * ux], -4)

    def divergence(self, uh: Tensor) -> Tensor:
        """Physical ``div u`` ``[B, 1, n, n, n]`` by Fourier differentiation."""
        return self.to_physical(1j * (self.kvec * uh).sum(dim=-4, keepdim=True))

    # -- dynamics ----------------------------------------------------------------------
    def _nonlinear(self, uh: Tensor, speed: bool = False) -> tuple[Tensor, Tensor | None]:
        """De-aliased ``P[u x omega]`` and, if asked, the per-row max speed ``max |u|``
        ([B]; the first RK stage's velocity gives the CFL step for free)."""
        u = self.to_physical_dealiased(uh)
        w = self.to_physical_dealiased(self.curl(uh))
        ux, uy, uz = u.unbind(dim=-4)
        wx, wy, wz = w.unbind(dim=-4)
        cross = torch.stack([uy * wz - uz * wy, uz * wx - ux * wz, ux * wy - uy * wx], dim=-4)
        nh = self.project(torch.fft.rfftn(cross, dim=_DIMS) * self._mask_c)
        nh[..., 0, 0, 0] = 0  # the mean of a divergence/gradient is 0; drop round-off
        if not speed:
            return nh, None
        return nh, u.pow(2).sum(dim=-4).amax(dim=(-3, -2, -1)).sqrt()

    def nonlinear(self, uh: Tensor) -> Tensor:
        """De-aliased, projected advection term ``P[u x omega]`` (spectral)."""
        return self._nonlinear(uh)[0]

    def rhs(self, uh: Tensor) -> Tensor:
        """``du_hat/dt + nu k^2 u_hat`` = nonlinear + forcing, ``P[u x omega] + A u``
        (``A u`` on ``k != 0``).  The time steppers integrate ``A - nu k^2`` exactly and
        only use :meth:`nonlinear`; this is the split's explicit part for diagnostics."""
        fh = self.a * uh
        fh[..., 0, 0, 0] = 0
        return self.nonlinear(uh) + fh

    def _step_from(self, uh: Tensor, n1: Tensor, dt: float) -> Tensor:
        """One Lawson IF-RK step of size ``dt`` given ``n1 = N(uh)``."""
        e1 = torch.exp(self.lin * dt).to(self.cdtype)
        e2 = torch.exp(self.lin * (dt / 2)).to(self.cdtype)
        nl = self.nonlinear
        if self.cfg.scheme == "rk4":
            # classical RK4 on v = exp(-L t) u, written back in u (cf. kolmogorov2d)
            n2 = nl(e2 * (uh + 0.5 * dt * n1))
            n3 = nl(e2 * uh + 0.5 * dt * n2)
            n4 = nl(e1 * uh + dt * (e2 * n3))
            return e1 * uh + (dt / 6) * (e1 * n1 + 2 * e2 * (n2 + n3) + n4)
        # Shu-Osher SSP-RK3 on v: stages at t + dt, t + dt/2; the second one needs
        # exp(-L dt/2), bounded since nu k_max^2 dt is O(1) at CFL steps
        em = torch.exp(-self.lin * (dt / 2)).to(self.cdtype)
        v1 = e1 * (uh + dt * n1)
        v2 = 0.75 * (e2 * uh) + 0.25 * (em * (v1 + dt * nl(v1)))
        return (e1 * uh) / 3 + (2.0 / 3.0) * (e2 * (v2 + dt * nl(v2)))

    def step(self, uh: Tensor, dt: float) -> Tensor:
        """One integrating-factor RK step (``cfg.scheme``) of size ``dt``."""
        return self._step_from(uh, self.nonlinear(uh), dt)

    def _dt_from_speed(self, speed: Tensor) -> float:
        vmax = float(speed.amax())
        dt = self.cfg.cfl * self.dx / vmax if vmax > 0 else math.inf
        return min(dt, self.cfg.dt_max)

    def stable_dt(self, uh: Tensor) -> float:
        """``cfl * dx / max|u|`` over the grid and the batch, capped by ``dt_max``."""
        u = self.to_physical_dealiased(uh)
        return self._dt_from_speed(u.pow(2).sum(dim=-4).amax(dim=(-3, -2, -1)).sqrt())

    def advance(self, uh: Tensor, t: float, callback=None) -> Tensor:
        """Integrate exactly time ``t``: CFL steps recomputed each step from the first
        stage's velocity, the last one shortened to land on ``t``.  ``callback(dt, uh)``
        runs after every step (diagnostics, progress)."""
        if t < 0:
            raise PcgError(f"HIT solver: cannot advance by a negative time {t}")
        done = 0.0
        while t - done > 1e-12 * max(t, 1.0):
            n1, speed = self._nonlinear(uh, speed=True)
            assert speed is not None
            dt = min(self._dt_from_speed(speed), t - done)
            uh = self._step_from(uh, n1, dt)
            done = t if dt == t - done else done + dt
            if callback is not None:
                callback(dt, uh)
        return uh

    # -- diagnostics -------------------------------------------------------------------
    def _mean_sq(self, fh: Tensor) -> Tensor:
        """Domain mean of ``f^2`` from its rfftn (Parseval), summed over the channel dim."""
        s = (fh.real.pow(2) + fh.imag.pow(2)) * self.w_half
        return s.sum(dim=(-4, -3, -2, -1)) / self.n**6

    def pressure(self, uh: Tensor) -> Tensor:
        """Zero-mean pressure ``[B, 1, n, n, n]`` of ``-Lap p = d_i d_j (u_i u_j)``, i.e.
        ``p_hat = -k_i k_j (u_i u_j)^ / k^2`` with the de-aliased products (the pressure of
        the Galerkin dynamics; Lundgren forcing is solenoidal and does not enter)."""
        u = self.to_physical_dealiased(uh)
        k = self.kvec
        acc = torch.zeros_like(uh[..., :1, :, :, :])
        for i in range(3):
            for j in range(i, 3):
                pij = torch.fft.rfftn(u[..., i, :, :, :] * u[..., j, :, :, :], dim=_DIMS)
                acc = acc + (1.0 if i == j else 2.0) * (k[i] * k[j] * pij).unsqueeze(-4)
        ph = -acc * self.mask * self.dk2_inv
        return self.to_physical_dealiased(ph)

    def energy(self, uh: Tensor) -> Tensor:
        """``E = <|u|^2> / 2`` per row ([B])."""
        return 0.5 * self._mean_sq(uh)

    def dissipation(self, uh: Tensor) -> Tensor:
        """``eps = nu <|grad u|^2> = nu sum k^2 |u_k|^2`` (= ``2 nu <s_ij s_ij>`` for
        periodic solenoidal fields) per row ([B])."""
        return self.cfg.nu * self._mean_sq(uh * self._kmag_c)

    def injection(self, uh: Tensor) -> Tensor:
        """Forcing power ``P = <f . u> = A <|u - <u>|^2>`` per row ([B]); 0 unforced."""
        mean_sq = (uh[..., 0, 0, 0].abs() ** 2).sum(dim=-1) / self.n**6
        return self.a * (self._mean_sq(uh) - mean_sq)

    def spectrum(self, uh: Tensor) -> tuple[Tensor, Tensor]:
        """Shell-summed energy spectrum: integer shells ``k = 0..K`` (``|k|`` rounded) and
        ``E(k)`` per row ``[B, K+1]``; ``sum_k E(k) = E``."""
        dens = 0.5 * (uh.real.pow(2) + uh.imag.pow(2)).sum(dim=-4) * self.w_half / self.n**6
        shell = self.k2.sqrt().round().long()
        kmax = int(shell.max())
        flat = dens.reshape(*dens.shape[:-3], -1)
        out = torch.zeros(*flat.shape[:-1], kmax + 1, dtype=flat.dtype, device=flat.device)
        out.scatter_add_(-1, shell.reshape(-1).expand_as(flat), flat)
        return torch.arange(kmax + 1, device=flat.device), out

    def statistics(self, uh: Tensor) -> dict[str, float]:
        """Turbulence statistics of the batch-mean ``E`` and ``eps`` (standard isotropic
        relations): ``u' = sqrt(2E/3)``, ``lambda = sqrt(15 nu u'^2 / eps)``,
        ``Re_lambda = u' lambda / nu``, ``eta = (nu^3 / eps)^(1/4)``, ``k_max eta`` with
        ``k_max = dealias n / 2`` (n/3), integral scale ``L = pi/(2 u'^2) sum E(k)/k``,
        large-eddy turnover ``T_L = L / u'`` and eddy turnover ``u'^2 / eps``
        (= 1/(3A) at stationarity under Lundgren forcing)."""
        nu = self.cfg.nu
        e = float(self.energy(uh).mean())
        eps = float(self.dissipation(uh).mean())
        inj = float(self.injection(uh).mean())
        k, ek = self.spectrum(uh)
        ek = ek.reshape(-1, ek.shape[-1]).mean(0)
        u_rms = math.sqrt(2 * e / 3)
        tiny = 1e-300
        lam = math.sqrt(15 * nu * u_rms**2 / max(eps, tiny))
        eta = (nu**3 / max(eps, tiny)) ** 0.25
        length = math.pi / (2 * max(u_rms**2, tiny)) * float((ek[1:] / k[1:].to(ek)).sum())
        return {
            "energy": e,
            "dissipation": eps,
            "injection": inj,
            "u_rms": u_rms,
            "taylor_lambda": lam,
            "re_lambda": u_rms * lam / nu,
            "eta": eta,
            "kmax_eta": self.cfg.kmax * eta,
            "integral_scale": length,
            "large_eddy_time": length / max(u_rms, tiny),
            "turnover_time": u_rms**2 / max(eps, tiny),
        }


# -- fields and resampling --------------------------------------------------------------
def random_solenoidal_field(
    n: int,
    batch: int,
    k_peak: float,
    energy: float,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """Random divergence-free velocity ``[batch, 3, n, n, n]`` with the peaked spectrum
    ``E(k) ~ k^4 exp(-2 (k/k_peak)^2)`` and mean energy ``<|u|^2>/2 = energy`` per field.

    Gaussian white noise (drawn in float64 from ``generator``, so the field is a
    deterministic function of its state) is Fourier transformed, Leray-projected and
    shaped by ``sqrt(E(k) / (4 pi k^2))`` (an isotropic field spreads ``E(k)`` over the
    shell area ``4 pi k^2``); modes outside the 2/3-rule cube of the default solver and
    the mean are zeroed, so the field is a valid solver state."""
    _check_grid(n)
    if batch < 1:
        raise PcgError(f"random_solenoidal_field: batch must be >= 1, got {batch}")
    if not (k_peak > 0 and math.isfinite(k_peak)):
        raise PcgError(f"random_solenoidal_field: k_peak must be positive, got {k_peak}")
    if not (energy >= 0 and math.isfinite(energy)):
        raise PcgError(f"random_solenoidal_field: energy must be >= 0, got {energy}")
    dev = generator.device
    noise = torch.randn(batch, 3, n, n, n, generator=generator, dtype=torch.float64, device=dev)
    solver = HITSolver(HITConfig(n=n, forcing="none"), torch.float64, dev)
    nh = solver.project(solver.to_spectral(noise))
    k = solver.k2.sqrt()
    # sqrt(E(k) / k^2) with E ~ k^4 exp(-2 (k/kp)^2)
    amp = k * torch.exp(-((k / k_peak) ** 2))
    uh = nh * amp
    uh[..., 0, 0, 0] = 0
    e = solver.energy(uh)
    scale = torch.sqrt(energy / e.clamp_min(1e-300)).view(-1, 1, 1, 1, 1)
    return solver.to_physical(uh * scale).to(dtype)


def spectral_truncate(x: Tensor, n_out: int) -> Tensor:
    """Real fields ``[..., n, n, n]`` -> ``[..., n_out, n_out, n_out]`` (``n_out <= n``)
    keeping the Fourier modes with ``|k_i| < n_out / 2`` on every axis (the coarse Nyquist
    is dropped).  Coefficients are rescaled by ``(n_out / n)^3`` (unnormalised DFT), so a
    band-limited field is sampled exactly on the coarse grid; kept modes are unchanged,
    so ``k . u_hat = 0`` mode by mode carries over."""
    n = x.shape[-1]
    if x.dim() < 3 or tuple(x.shape[-3:]) != (n, n, n):
        raise PcgError(f"spectral_truncate: expected [..., n, n, n], got {tuple(x.shape)}")
    if not (isinstance(n_out, int) and 1 <= n_out <= n):
        raise PcgError(f"spectral_truncate: need 1 <= n_out <= {n}, got {n_out!r}")
    xh = torch.fft.rfftn(x, dim=_DIMS)
    h = (n_out - 1) // 2  # largest kept |k|
    out = torch.zeros(*x.shape[:-3], n_out, n_out, n_out // 2 + 1, dtype=xh.dtype,
                      device=x.device)
    # index ranges of k = 0..h and k = -h..-1 on the full axes (fine -> coarse)
    src = [slice(0, h + 1), slice(n - h, n)] if h > 0 else [slice(0, 1)]
    dst = [slice(0, h + 1), slice(n_out - h, n_out)] if h > 0 else [slice(0, 1)]
    for sx, dx_ in zip(src, dst, strict=True):
        for sy, dy in zip(src, dst, strict=True):
            out[..., dx_, dy, : h + 1] = xh[..., sx, sy, : h + 1]
    return torch.fft.irfftn(out * (n_out / n) ** 3, s=(n_out,) * 3, dim=_DIMS)


# -- trajectories -----------------------------------------------------------------------
def simulate_frames(
    cfg: HITConfig,
    u0: Tensor,
    t_spinup: float,
    frame_dt: float,
    n_frames: int,
    progress: bool = False,
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, dict]:
    """Spin up ``u0`` (``[3, n, n, n]`` or ``[1, 3, n, n, n]``, on the device to solve on)
    for ``t_spinup``, then record ``n_frames`` snapshots ``frame_dt`` apart (the first at
    ``t_spinup``).  Returns float32 CPU frames ``[n_frames, 4, n, n, n]`` (u, v, w, p) and
    diagnostics: per-step ``times``/``energy``/``dissipation``/``injection`` over the whole
    run, per-frame ``frame_times``/``re_lambda_frames``/``kmax_eta_frames``, their window
    means ``re_lambda``/``kmax_eta``/``energy_mean``, ``steps``, ``wall_s``, ``config``."""
    if u0.dim() == 4:
        u0 = u0.unsqueeze(0)
    if u0.dim() != 5 or u0.shape[0] != 1 or u0.shape[1] != 3:
        raise PcgError(f"simulate_frames: u0 must be [3, n, n, n] or [1, 3, n, n, n], "
                       f"got {tuple(u0.shape)}")
    if n_frames < 1 or frame_dt <= 0 or t_spinup < 0:
        raise PcgError(f"simulate_frames: need n_frames >= 1, frame_dt > 0, t_spinup >= 0; "
                       f"got {n_frames}, {frame_dt}, {t_spinup}")
    solver = HITSolver(cfg, dtype=dtype, device=u0.device)
    # project so that a not exactly solenoidal u0 (e.g. after a dtype cast) is a valid state
    uh = solver.project(solver.to_spectral(u0))
    series: dict[str, list[float]] = {"times": [], "energy": [], "dissipation": [],
                                      "injection": []}
    clock = [0.0]
    steps = [0]

    def record(uh_: Tensor) -> None:
        series["times"].append(clock[0])
        series["energy"].append(float(solver.energy(uh_)[0]))
        series["dissipation"].append(float(solver.dissipation(uh_)[0]))
        series["injection"].append(float(solver.injection(uh_)[0]))

    bar = None
    total = t_spinup + (n_frames - 1) * frame_dt
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc=f"generating HIT data ({cfg.n}^3 DNS, every split)",
                   unit="t.u.",
                   bar_format="{l_bar}{bar}| {n:.2f}/{total:.2f} [{elapsed}<{remaining}]")

    def callback(dt: float, uh_: Tensor) -> None:
        clock[0] += dt
        steps[0] += 1
        record(uh_)
        if bar is not None:  # clamp: summed step sizes may overshoot by round-off
            bar.update(max(0.0, min(clock[0], total) - bar.n))

    t0 = time.perf_counter()
    record(uh)
    uh = solver.advance(uh, t_spinup, callback)
    frames = torch.empty(n_frames, 4, cfg.n, cfg.n, cfg.n, dtype=torch.float32)
    frame_times, re_l, keta = [], [], []
    for i in range(n_frames):
        if i > 0:
            uh = solver.advance(uh, frame_dt, callback)
        frames[i, :3] = solver.to_physical_dealiased(uh)[0].to("cpu", torch.float32)
        frames[i, 3] = solver.pressure(uh)[0, 0].to("cpu", torch.float32)
        st = solver.statistics(uh)
        frame_times.append(clock[0])
        re_l.append(st["re_lambda"])
        keta.append(st["kmax_eta"])
    if bar is not None:
        bar.close()
    wall = time.perf_counter() - t0
    win = [e for t, e in zip(series["times"], series["energy"], strict=True)
           if t >= t_spinup - 1e-9]
    info = {
        **series,
        "frame_times": frame_times,
        "re_lambda_frames": re_l,
        "kmax_eta_frames": keta,
        "re_lambda": sum(re_l) / len(re_l),
        "kmax_eta": sum(keta) / len(keta),
        "energy_mean": sum(win) / len(win),
        "steps": steps[0],
        "wall_s": wall,
        "config": asdict(cfg),
    }
    return frames, info
