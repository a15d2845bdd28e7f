"""Periodic 1-D viscous Burgers numerics in torch: spectral derivatives, Fourier
resampling and a batched, differentiable IF-RK4 pseudo-spectral solver.

Solves ``u_t + u u_x = nu u_xx`` on the periodic unit interval, grid ``x_j = j / n``.
The nonlinear term is evaluated in conservative form ``-(u^2/2)_x`` with the 2/3 rule
(products de-aliased by zeroing wavenumbers ``|j| >= n/3``); viscosity is integrated
exactly by an integrating factor and the rest by classical RK4 (Lawson's IF-RK4).  The
mean (mass) is conserved to round-off.  This is the "periodic RK4 pseudospectral
evolution" of the PMosFM paper (Appendix "Burgers"); the paper's *evaluator* is a
finite-difference residual and lives in ``pcgbench.tasks.burgers``.

Everything is plain torch, so gradients flow through ``solve_burgers`` (a PMosFM chart
decodes an initial condition to a trajectory with it), in float32 or float64, on CPU
or GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = [
    "FILTERS",
    "cell_average",
    "dealias_mask",
    "fourier_resample",
    "solve_burgers",
    "spectral_derivative",
    "steps_per_interval",
    "wavenumbers",
]

#: Optional stabilisation for coarse grids (``filter=`` of :func:`solve_burgers`):
#:
#: ``"svv"``  spectral vanishing viscosity (Tadmor 1989; Maday, Ould Kaber & Tadmor 1993):
#:     an extra linear term ``-eps Q_j k^2`` acting only on the upper part of the
#:     de-aliased band, ``Q_j = exp(-((j - j_c)/(j - m))^2)`` for ``m < j < j_c`` (else 0),
#:     ``j_c = n/3`` the cut-off, ``m = SVV_M * sqrt(j_c)``, ``eps = SVV_C * max|u0| / k_c``
#:     (``k_c = 2 pi j_c``).  It sits inside the integrating factor, so it is independent
#:     of the time step and leaves the well-resolved modes untouched.
#: ``"exp"``  exponential filter ``sigma_j = exp(-EXP_ALPHA (j/j_c)^EXP_ORDER)`` applied to
#:     the state after every time step (Hou & Li 2007 use alpha=36, order 36 on the full
#:     band; here it acts on the 2/3 band).  Its total strength grows with the step count.
#: ``None`` (default)  no filter: the plain de-aliased Galerkin/IF-RK4 scheme.
FILTERS = (None, "svv", "exp")
SVV_C = 1.0
SVV_M = 2.0
EXP_ALPHA = 36.0
EXP_ORDER = 16


def wavenumbers(n: int, device=None, dtype=torch.float64) -> torch.Tensor:
    """Angular wavenumbers ``2 pi j``, ``j = 0..n//2`` (the ``rfft`` half-spectrum)."""
    return 2 * math.pi * torch.arange(n // 2 + 1, device=device, dtype=dtype)


def dealias_mask(n: int, device=None, dtype=torch.float64) -> torch.Tensor:
    """1 for the modes kept by the 2/3 rule (``3 j < n``), 0 elsewhere."""
    j = torch.arange(n // 2 + 1, device=device)
    return (3 * j < n).to(dtype)


def spectral_derivative(u: torch.Tensor, order: int = 1) -> torch.Tensor:
    """``d^order u / dx^order`` of periodic samples ``u [..., n]`` on [0, 1) (Fourier).

    The Nyquist mode is dropped for odd orders (its derivative is not real)."""
    n = u.shape[-1]
    k = wavenumbers(n, u.device, u.dtype)
    sym = (1j * k) ** order
    if order % 2 == 1 and n % 2 == 0:
        sym[-1] = 0
    return torch.fft.irfft(torch.fft.rfft(u) * sym, n=n)


def fourier_resample(u: torch.Tensor, n_new: int) -> torch.Tensor:
    """Trigonometric interpolation (``n_new > n``) or band-limited projection
    (``n_new < n``) of periodic samples ``u [..., n]`` to ``n_new`` points.

    A band-limited field is reproduced exactly; up-then-down sampling is the identity.
    Nyquist modes are split/merged so that the result stays real and consistent."""
    n = u.shape[-1]
    if n_new == n:
        return u
    uh = torch.fft.rfft(u)
    m = min(n, n_new) // 2 + 1
    out = uh.new_zeros(*uh.shape[:-1], n_new // 2 + 1)
    out[..., :m] = uh[..., :m]
    if n_new < n and n_new % 2 == 0:  # new Nyquist bin: keep only the cosine part, doubled
        out[..., -1] = 2 * uh[..., n_new // 2].real
    if n_new > n and n % 2 == 0:  # old Nyquist cosine becomes an ordinary mode: halve it
        out[..., n // 2] = uh[..., n // 2] / 2
    return torch.fft.irfft(out * (n_new / n), n=n_new)


def cell_average(u: torch.Tensor, nx: int) -> torch.Tensor:
    """Exact averages of the trigonometric interpolant of ``u [..., n]`` over the ``nx``
    cells ``[i/nx - h/2, i/nx + h/2]`` (``h = 1/nx``, ``n`` a multiple of ``nx``).

    Each mode is multiplied by ``sinc(j / nx)`` and the result sampled at ``x = i/nx``;
    the aliased modes ``j = m nx`` vanish, so the coarse mean equals the fine mean
    exactly (mass is conserved by the downsampling)."""
    n = u.shape[-1]
    if n % nx:
        raise ValueError(f"cell_average needs n ({n}) to be a multiple of nx ({nx})")
    if n == nx:
        return u
    j = torch.arange(n // 2 + 1, device=u.device, dtype=u.dtype)
    smooth = torch.fft.irfft(torch.fft.rfft(u) * torch.sinc(j / nx), n=n)
    return smooth[..., :: n // nx]


def steps_per_interval(dt_out: float, dt: float) -> int:
    """Number of equal steps of size <= ``dt`` that exactly fill ``dt_out``."""
    return max(1, math.ceil(dt_out / dt - 1e-9))


def _svv_rate(n: int, umax: float, k: torch.Tensor) -> torch.Tensor:
    j = torch.arange(n // 2 + 1, device=k.device, dtype=k.dtype)
    jc = n / 3
    m = SVV_M * math.sqrt(jc)
    q = torch.zeros_like(j)
    band = (j > m) & (j < jc)
    q[band] = torch.exp(-(((j[band] - jc) / (j[band] - m)) ** 2))
    q[j >= jc] = 1.0
    eps = SVV_C * umax / (2 * math.pi * jc)
    return eps * q * k**2


def _exp_decay(n: int, k: torch.Tensor) -> torch.Tensor:
    """Per-step factor of the ``"exp"`` filter on the half-spectrum (ones otherwise)."""
    eta = torch.arange(n // 2 + 1, device=k.device, dtype=k.dtype) / (n / 3)
    return torch.exp(-EXP_ALPHA * eta**EXP_ORDER)


def _band_rhs(n: int, k: torch.Tensor, in_place: bool = False
              ) -> tuple[int, Callable[[torch.Tensor], torch.Tensor]]:
    """(nb, rhs): the de-aliased band size (3 j < n) and the nonlinear term -(u^2/2)_x of
    a band spectrum, the part the IF-RK4 steps integrate.

    ``in_place=True`` (no autograd): the band is copied into one zero-padded spectrum kept
    between calls instead of being padded anew, and the square taken in place; the same
    arithmetic, so the result is bitwise the same."""
    nb = (n - 1) // 3 + 1
    nl = -0.5j * k[:nb]

    def rhs(vh: torch.Tensor) -> torch.Tensor:
        v = torch.fft.irfft(vh, n=n)
        return nl * torch.fft.rfft(v * v)[..., :nb]

    padded: list[torch.Tensor] = []

    def rhs_in_place(vh: torch.Tensor) -> torch.Tensor:
        if not padded or padded[0].shape[:-1] != vh.shape[:-1]:
            padded[:] = [vh.new_zeros(*vh.shape[:-1], n // 2 + 1)]
        padded[0][..., :nb] = vh
        v = torch.fft.irfft(padded[0], n=n)
        return nl * torch.fft.rfft(v.mul_(v))[..., :nb]

    return nb, (rhs_in_place if in_place else rhs)


def _if_rk4_step(band: torch.Tensor, h: float | torch.Tensor, e1: torch.Tensor,
                 e2: torch.Tensor, rhs: Callable[[torch.Tensor], torch.Tensor]
                 ) -> torch.Tensor:
    """One Lawson IF-RK4 step of size ``h`` (e1 = exp(L h/2), e2 = e1^2)."""
    a = rhs(band)
    b = rhs(e1 * (band + (h / 2) * a))
    c = rhs(e1 * band + (h / 2) * b)
    d = rhs(e2 * band + h * (e1 * c))
    return e2 * band + (h / 6) * (e2 * a + 2 * e1 * (b + c) + d)


def _real_scale_(z: torch.Tensor, s: float) -> torch.Tensor:
    """``z *= s`` for complex ``z`` and a real scalar, as a real product (the complex one
    multiplies by ``s + 0i``: the same values, twice the work)."""
    torch.view_as_real(z).mul_(s)
    return z


def _if_rk4_step_in_place(band: torch.Tensor, h: float, e1: torch.Tensor, e2: torch.Tensor,
                          two_e1: torch.Tensor, rhs: Callable[[torch.Tensor], torch.Tensor]
                          ) -> torch.Tensor:
    """:func:`_if_rk4_step` without autograd (``two_e1 = 2 * e1``): the same products and
    sums in the same order, on fewer temporaries, so the result is bitwise the same (a
    test holds it); data generation's inner loop."""
    a = rhs(band)
    b = rhs(_real_scale_(a.clone(), h / 2).add_(band).mul_(e1))
    c = rhs(_real_scale_(b.clone(), h / 2).add_(e1 * band))
    e2_band = e2 * band
    d = rhs(_real_scale_(e1 * c, h).add_(e2_band))
    a.mul_(e2).add_(b.add_(c).mul_(two_e1)).add_(d)
    return e2_band.add_(_real_scale_(a, h / 6))


def solve_burgers(
    u0: torch.Tensor,
    nu: float,
    t_out: torch.Tensor,
    dt_max: float | None = None,
    cfl: float | None = 0.5,
    filter: str | None = None,
    per_sample: bool = False,
) -> torch.Tensor:
    """Evolve ``u0 [B, n]`` (periodic samples on ``x_j = j/n``) to the times ``t_out [nt]``.

    Returns ``[B, nt, n]`` in ``u0``'s dtype and device; ``t_out[0]`` must be 0 and the
    first output is ``u0`` itself.  The step is ``dt = min(dt_max, cfl * dx / max|u0|)``
    (``max|u|`` never grows for Burgers, so the bound holds for the whole run up to small
    Gibbs overshoots; the batch maximum is used; RK4 is stable up to cfl ~ 1.35 here),
    shrunk on each output interval so that a whole number of steps lands exactly on
    every output time.  At least one of ``dt_max``/``cfl`` must be given.  ``filter``:
    see :data:`FILTERS` (default ``None``).  Differentiable in ``u0``.

    ``per_sample=True``: every sample takes its own step ``cfl * dx / max|u0_i|`` (and its
    own SVV strength), so its trajectory does not depend on which other samples share the
    batch (a chart decoder must be a function of its own coordinates).  The batch runs the
    largest step count; a sample that has filled its interval is frozen (masked).
    """
    if u0.ndim != 2:
        raise ValueError(f"u0 must be [B, n], got shape {tuple(u0.shape)}")
    if filter not in FILTERS:
        raise ValueError(f"unknown filter {filter!r}; expected one of {FILTERS}")
    t_out = torch.as_tensor(t_out, dtype=torch.float64).flatten()
    if t_out.numel() == 0 or abs(float(t_out[0])) > 1e-12:
        raise ValueError("t_out must start at 0")
    dts = torch.diff(t_out)
    if (dts <= 0).any():
        raise ValueError("t_out must be strictly increasing")
    n = u0.shape[-1]
    if per_sample:
        return _solve_per_sample(u0, nu, dts, dt_max, cfl, filter)
    n = u0.shape[-1]
    umax = float(u0.detach().abs().max()) if u0.numel() else 0.0
    candidates = [] if dt_max is None else [float(dt_max)]
    if cfl is not None:
        candidates.append(cfl / n / umax if umax > 0 else math.inf)
    if not candidates:
        raise ValueError("give dt_max or cfl")
    dt = min(candidates)  # inf (u0 == 0, cfl only): one step per interval, exact

    k = wavenumbers(n, u0.device, u0.dtype)
    lin = -nu * k**2
    if filter == "svv":
        lin = lin - _svv_rate(n, umax, k)
    decay = _exp_decay(n, k) if filter == "exp" else torch.ones_like(k)
    # Only the de-aliased band (3 j < n) feels the nonlinear term; the modes above it just
    # decay linearly and are advanced exactly once per output interval (cheaper, and their
    # underflowing amplitudes never enter the inner loop).
    # without autograd the steps run in place (bitwise the same; data generation)
    in_place = not (torch.is_grad_enabled() and u0.requires_grad)
    nb, rhs = _band_rhs(n, k, in_place=in_place)
    lin_b, lin_t, post, post_t = lin[:nb], lin[nb:], decay[:nb], decay[nb:]
    filtered = filter == "exp"

    uh = torch.fft.rfft(u0)
    band, tail = uh[..., :nb], uh[..., nb:]
    outs = [u0]
    factors: dict[int, tuple[float, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    for interval in dts.tolist():
        m = steps_per_interval(interval, dt)
        key = round(interval / m * 1e15)
        if key not in factors:
            h = interval / m
            e1 = torch.exp(lin_b * (h / 2)).to(uh.dtype)
            factors[key] = (h, e1, e1 * e1, 2 * e1)
        h, e1, e2, two_e1 = factors[key]
        for _ in range(m):
            band = (_if_rk4_step_in_place(band, h, e1, e2, two_e1, rhs) if in_place
                    else _if_rk4_step(band, h, e1, e2, rhs))
            if filtered:
                band = band * post
        tail = tail * (torch.exp(lin_t * interval) * post_t**m)
        outs.append(torch.fft.irfft(torch.cat([band, tail], dim=-1), n=n))
    return torch.stack(outs, dim=1)


def _solve_per_sample(u0: torch.Tensor, nu: float, dts: torch.Tensor, dt_max: float | None,
                      cfl: float | None, filter: str | None) -> torch.Tensor:
    """:func:`solve_burgers` with one step size per sample (same IF-RK4 update; a sample
    whose ``m_i`` steps fill the interval keeps its state while the others go on)."""
    bsz, n = u0.shape
    if dt_max is None and cfl is None:
        raise ValueError("give dt_max or cfl")
    umax = u0.detach().abs().amax(-1).to(torch.float64)  # [B]
    dt = torch.full_like(umax, math.inf if dt_max is None else float(dt_max))
    if cfl is not None:
        dt = torch.minimum(dt, torch.where(umax > 0, cfl / n / umax.clamp_min(1e-300),
                                           torch.full_like(umax, math.inf)))
    k = wavenumbers(n, u0.device, u0.dtype)
    lin = (-nu * k**2).expand(bsz, -1)
    if filter == "svv":
        lin = lin - _svv_rate(n, 1.0, k) * umax.to(u0.dtype)[:, None]  # eps ~ max|u0_i|
    decay = _exp_decay(n, k) if filter == "exp" else torch.ones_like(k)
    nb, rhs = _band_rhs(n, k)
    lin_b, lin_t, post, post_t = lin[:, :nb], lin[:, nb:], decay[:nb], decay[nb:]
    filtered = filter == "exp"

    uh = torch.fft.rfft(u0)
    band, tail = uh[..., :nb], uh[..., nb:]
    outs = [u0]
    for interval in dts.tolist():
        m = torch.ceil(interval / dt - 1e-9).clamp_min(1)
        m = torch.where(torch.isfinite(m), m, torch.ones_like(m)).long()  # dt = inf: 1 step
        h = (interval / m.to(torch.float64)).to(u0.dtype)[:, None]  # [B, 1]
        e1 = torch.exp(lin_b * (h / 2)).to(uh.dtype)
        e2 = e1 * e1
        for step in range(int(m.max())):
            new = _if_rk4_step(band, h, e1, e2, rhs)
            if filtered:
                new = new * post
            band = torch.where((step < m)[:, None], new, band)
        tail = tail * (torch.exp(lin_t * interval) * post_t ** m[:, None].to(u0.dtype))
        outs.append(torch.fft.irfft(torch.cat([band, tail], dim=-1), n=n))
    return torch.stack(outs, dim=1)
