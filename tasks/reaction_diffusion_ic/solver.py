"""1-D Fisher-KPP reaction-diffusion with Neumann flux boundaries, in batched torch.

Solves ``u_t = nu u_xx + rho u (1 - u)`` on ``[0, 1]`` with ``nx`` cells (centres
``x_j = (j + 1/2)/nx``), prescribed boundary fluxes ``F = -nu u_x = g_L`` at ``x = 0``
and ``g_R`` at ``x = 1`` (``g_L > 0`` and ``g_R < 0`` are inflows), the reaction-diffusion
problem of the constrained-PDE suite (PCFM protocol; ``/work/shared/REFERENCES.md``
"Constrained-PDE suite", PMosFM paper Appendix "Zero-shot constrained-PDE reference").

**Scheme** (the reference generator's, facts only): finite volumes with face fluxes
``F_0 = g_L``, ``F_j = -nu (u_j - u_{j-1})/dx`` (``1 <= j < nx``), ``F_nx = g_R`` and the
diffusion operator ``D(u)_j = -(F_{j+1} - F_j)/dx``; the reaction is the exact logistic
flow ``R_h(u) = u e^{rho h} / (1 + u (e^{rho h} - 1))``.  One step of size ``h``::

    v     = R_{h/2}(u) + (h/2) D(u)        (predictor)
    u_new = R_h(u)     + h D(v)            (midpoint diffusion)

with ``h <= cfl * dx^2 / (2 nu)`` (``cfl = 0.25``).  The reference takes steps of exactly
that size plus a short remainder to land on each save time; we split every save interval
into equal substeps (same bound, lands exactly, no accumulated time round-off).

Discrete identities the tests check: spatially uniform data with zero flux follow the
logistic ODE exactly (``D(u) = 0``, composition of exact flows); the interior fluxes
telescope, so the mass ``dx sum_j u_j`` changes by ``h (g_L - g_R)`` plus the reaction
increments; the Neumann cosines ``cos(pi k x_j)`` are exact eigenvectors of ``D`` (DCT-II),
with eigenvalue ``-(4 nu/dx^2) sin^2(pi k dx/2)`` (second order in space).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from pcgbench.errors import PcgError
from pcgbench.numerics.finite_difference import time_derivative

__all__ = [
    "cell_centres",
    "diffusion_operator",
    "face_fluxes",
    "fisher_kpp_residual",
    "interior_mass_balance_residual",
    "logistic_flow",
    "mass_balance_residual",
    "sample_boundary_fluxes",
    "sample_initial_conditions",
    "solve_fisher_kpp",
    "substeps",
    "time_derivative",
]


def cell_centres(nx: int) -> np.ndarray:
    """Cell centres ``(j + 1/2)/nx`` of the unit interval (float64)."""
    return (np.arange(nx) + 0.5) / nx


def logistic_flow(u: Tensor, rho: float, h: float) -> Tensor:
    """Exact flow of ``u' = rho u (1 - u)`` over time ``h``."""
    e = math.exp(rho * h)
    return u * e / (1.0 + u * (e - 1.0))


def _col(g: Tensor | float, u: Tensor) -> Tensor:
    """Boundary values as ``[..., 1]`` against ``u [..., nx]``: a scalar, or one value per
    row of the leading dim (``[B]``, broadcast over any middle dims)."""
    g = torch.as_tensor(g, dtype=u.dtype, device=u.device)
    if g.ndim == 0:
        return g.reshape([1] * u.ndim).expand(*u.shape[:-1], 1)
    return g.reshape(-1, *([1] * (u.ndim - 1))).expand(*u.shape[:-1], 1)


def face_fluxes(u: Tensor, nu: float, dx: float, g_left: Tensor | float,
                g_right: Tensor | float) -> Tensor:
    """Face fluxes ``F = -nu u_x`` ``[..., nx + 1]``: the prescribed ``g_L``, ``g_R`` on
    the boundary faces, two-point differences inside."""
    inner = -nu * (u[..., 1:] - u[..., :-1]) / dx
    return torch.cat([_col(g_left, u), inner, _col(g_right, u)], dim=-1)


def diffusion_operator(u: Tensor, nu: float, dx: float, g_left: Tensor | float,
                       g_right: Tensor | float) -> Tensor:
    """Finite-volume ``nu u_xx`` with flux boundaries: ``-(F_{j+1} - F_j)/dx``."""
    f = face_fluxes(u, nu, dx, g_left, g_right)
    return -(f[..., 1:] - f[..., :-1]) / dx


def substeps(interval: float, nu: float, dx: float, cfl: float) -> int:
    """Equal substeps per save interval with ``h <= cfl dx^2 / (2 nu)``."""
    h_max = cfl * 0.5 * dx**2 / nu if nu > 0 else math.inf
    return max(1, math.ceil(interval / h_max - 1e-9))


def solve_fisher_kpp(
    u0: Tensor,
    g_left: Tensor | float,
    g_right: Tensor | float,
    times: Tensor,
    rho: float,
    nu: float,
    cfl: float = 0.25,
) -> Tensor:
    """Trajectories ``[B, nt, nx]`` of the split-step scheme from ``u0 [B, nx]`` on the
    uniform save grid ``times`` (``times[0]`` = the initial time), per-row fluxes
    ``g_left``, ``g_right`` ``[B]`` (or scalars).  Plain torch: any dtype/device,
    differentiable."""
    if u0.ndim != 2:
        raise PcgError(f"u0 must be [B, nx], got shape {tuple(u0.shape)}")
    times = torch.as_tensor(times, dtype=torch.float64)
    if times.ndim != 1 or times.numel() < 1:
        raise PcgError("times must be a non-empty 1-D grid")
    steps = torch.diff(times)
    if steps.numel() and not torch.allclose(steps, steps[0].expand_as(steps), rtol=1e-9):
        raise PcgError("times must be uniformly spaced")
    nx = u0.shape[-1]
    dx = 1.0 / nx
    out = [u0]
    if steps.numel():
        interval = float(steps[0])
        n_sub = substeps(interval, nu, dx, cfl)
        h = interval / n_sub
        gl = torch.as_tensor(g_left, dtype=u0.dtype, device=u0.device)
        gr = torch.as_tensor(g_right, dtype=u0.dtype, device=u0.device)
        u = u0
        for _ in range(steps.numel()):
            for _ in range(n_sub):
                v = logistic_flow(u, rho, 0.5 * h) + 0.5 * h * diffusion_operator(
                    u, nu, dx, gl, gr)
                u = logistic_flow(u, rho, h) + h * diffusion_operator(v, nu, dx, gl, gr)
            out.append(u)
    return torch.stack(out, dim=1)


# -- initial and boundary data ------------------------------------------------------------
def sample_initial_conditions(
    rng: np.random.Generator,
    n: int,
    x: np.ndarray,
    k_tot: int = 3,
    n_draws: int = 2,
    p_abs: float = 0.1,
    p_window: float = 0.1,
    window_width: float = 0.01,
) -> np.ndarray:
    """``n`` initial conditions on the cell centres ``x`` -> float64 ``[n, nx]`` in [0, 1].

    The reference generator's family (facts, no code copied): ``sum_k A_k sin(kappa_k x +
    phi_k)`` over ``k = 1..k_tot`` with ``A_k ~ U[0, 1)``, ``phi_k ~ U[0, 2 pi)`` and
    ``kappa_k = 2 pi k c_k / (x[-1] - x[0])``, ``c_k`` the count of ``k`` in ``n_draws``
    uniform draws from ``{1..k_tot}`` (undrawn modes contribute the constant
    ``A_k sin phi_k``); with probability ``p_abs`` the absolute value; a random sign;
    with probability ``p_window`` the window ``(tanh((x - x_L)/w) - tanh((x - x_R)/w))/2``,
    ``x_L ~ U[0.1, 0.45]``, ``x_R ~ U[0.55, 0.9]``; finally shifted and scaled to
    ``[0, 1]`` (min 0, max 1 unless constant)."""
    draws = rng.integers(1, k_tot + 1, size=(n, n_draws))
    counts = (draws[:, :, None] == np.arange(1, k_tot + 1)).sum(axis=1)  # [n, k_tot]
    amp = rng.uniform(0.0, 1.0, size=(n, k_tot))
    phase = rng.uniform(0.0, 2 * math.pi, size=(n, k_tot))
    kappa = 2 * math.pi * np.arange(1, k_tot + 1) * counts / (x[-1] - x[0])
    u = np.einsum("nk,nkx->nx", amp, np.sin(kappa[:, :, None] * x + phase[:, :, None]))
    u = np.where((rng.uniform(size=n) < p_abs)[:, None], np.abs(u), u)
    u = u * rng.choice([-1.0, 1.0], size=(n, 1))
    windowed = rng.uniform(size=n) < p_window
    x_l = rng.uniform(0.1, 0.45, size=(n, 1))
    x_r = rng.uniform(0.55, 0.9, size=(n, 1))
    mask = 0.5 * (np.tanh((x - x_l) / window_width) - np.tanh((x - x_r) / window_width))
    u = np.where(windowed[:, None], u * mask, u)
    u = u - u.min(axis=1, keepdims=True)
    top = u.max(axis=1, keepdims=True)
    return np.where(top > 0, u / np.where(top > 0, top, 1.0), u)


def sample_boundary_fluxes(
    rng: np.random.Generator,
    n: int,
    left: tuple[float, float] = (0.0, 0.05),
    right: tuple[float, float] = (-0.05, 0.0),
    decimals: int | None = 3,
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` flux pairs ``g_L ~ U[left]``, ``g_R ~ U[right]`` (the reference rounds both
    to 3 decimals; ``decimals=None`` keeps them continuous)."""
    gl = rng.uniform(*left, size=n)
    gr = rng.uniform(*right, size=n)
    if decimals is not None:
        gl, gr = np.round(gl, decimals), np.round(gr, decimals)
    return gl, gr


# -- evaluators on the saved grid ----------------------------------------------------------
def fisher_kpp_residual(u: Tensor, rho: float, nu: float, dt: float) -> Tensor:
    """PDE residual ``u_t - nu u_xx - rho u (1 - u)`` of ``u [B, nt, nx]`` on the saved
    grid, interior cells ``1..nx-2`` only -> ``[B, nt, nx - 2]``:
    :func:`time_derivative` in time, the three-point ``nu (u_{j+1} - 2 u_j + u_{j-1})/dx^2``
    (the solver's interior finite-volume operator) in space.  The boundary cells need the
    boundary fluxes, which the field alone does not determine."""
    dx = 1.0 / u.shape[-1]
    lap = nu * (u[..., 2:] - 2 * u[..., 1:-1] + u[..., :-2]) / dx**2
    inner = u[..., 1:-1]
    return time_derivative(u, dt)[..., 1:-1] - lap - rho * inner * (1 - inner)


def _trapezoid(f: Tensor, dt: float) -> Tensor:
    """Cumulative trapezoid ``[B, nt - 1]`` of ``f [B, nt]`` from ``t_0`` to ``t_n``."""
    return torch.cumsum(0.5 * dt * (f[:, 1:] + f[:, :-1]), dim=1)


def mass_balance_residual(u: Tensor, g_left: Tensor, g_right: Tensor, rho: float,
                          dt: float) -> Tensor:
    """Whole-domain mass balance with the *prescribed* fluxes ``[B, nt - 1]`` (a solver
    check; the task's constraint is :func:`interior_mass_balance_residual`)::

        r_n = M_n - M_0 - trapezoid_{0..n}(S) - t_n (g_L - g_R),
        M_n = dx sum_j u_{n,j},  S_n = rho dx sum_j u_{n,j} (1 - u_{n,j}).

    The solver conserves it up to the trapezoid error of the reaction integral and
    round-off."""
    dx = 1.0 / u.shape[-1]
    mass = u.sum(dim=-1) * dx
    source = rho * (u * (1 - u)).sum(dim=-1) * dx
    n = torch.arange(1, u.shape[-2], dtype=u.dtype, device=u.device)
    inflow = (g_left - g_right).reshape(-1, 1) * (n * dt)
    return mass[:, 1:] - mass[:, :1] - _trapezoid(source, dt) - inflow


def interior_mass_balance_residual(u: Tensor, rho: float, nu: float, dt: float) -> Tensor:
    """Mass balance of the interior cells ``1..nx-2`` with the field's own face fluxes,
    ``[B, nt - 1]``, for ``n = 1..nt-1``::

        r_n = M_n - M_0 - trapezoid_{0..n}(S + F_L - F_R),
        M_n = dx sum_{j=1}^{nx-2} u_{n,j},  S_n = rho dx sum_{j=1}^{nx-2} u_{n,j}(1 - u_{n,j}),
        F_L = -nu (u_1 - u_0)/dx,  F_R = -nu (u_{nx-1} - u_{nx-2})/dx,

    the fluxes through the faces between the boundary cells and the interior, i.e. the
    scheme's own interior fluxes (the interior update is conservative with exactly these
    faces).  It needs no boundary data: the Neumann fluxes enter through the boundary
    cells.  On the solver's data it vanishes up to the trapezoid error of the time
    integrals (largest in the first save interval, where the boundary layer forms) and
    round-off."""
    dx = 1.0 / u.shape[-1]
    inner = u[..., 1:-1]
    mass = inner.sum(dim=-1) * dx
    source = rho * (inner * (1 - inner)).sum(dim=-1) * dx
    f_left = -nu * (u[..., 1] - u[..., 0]) / dx
    f_right = -nu * (u[..., -1] - u[..., -2]) / dx
    return mass[:, 1:] - mass[:, :1] - _trapezoid(source + f_left - f_right, dt)


def interior_mass_balance_jacobian(rows: Tensor, rho: float, nu: float, dt: float) -> Tensor:
    """D r / D u of :func:`interior_mass_balance_residual` with respect to the rows
    ``u_1..u_{nt-1}`` (the initial row fixed): ``rows [B, nt - 1, nx]`` ->
    ``[B, nt - 1, nt - 1, nx]`` (constraint n, row m, cell j), in closed form::

        dr_n/du_{m,j} = [m = n] dx 1_{0<j<nx-1} - W_{nm} dq_m/du_{m,j},
        q_m = S_m + F_L - F_R,  W_{nm} = dt (m < n), dt/2 (m = n), 0 (m > n),
        dq_m/du_{m,j} = rho dx (1 - 2 u_{m,j}) 1_{0<j<nx-1} + nu/dx ([j=0] - [j=1]
                        - [j=nx-2] + [j=nx-1])

    (the trapezoid counts q_m twice below the diagonal, once on it).  Agrees with
    autograd (tests/test_suite_heat_rd.py)."""
    b, n, nx = rows.shape
    dx = 1.0 / nx
    inner = torch.zeros(nx, dtype=rows.dtype, device=rows.device)
    inner[1:-1] = 1.0
    flux = torch.zeros(nx, dtype=rows.dtype, device=rows.device)
    flux[0], flux[1], flux[-2], flux[-1] = nu / dx, -nu / dx, -nu / dx, nu / dx
    g = rho * dx * (1 - 2 * rows) * inner + flux  # [B, nt - 1, nx]
    w = torch.tril(torch.full((n, n), dt, dtype=rows.dtype, device=rows.device), -1)
    w = w + torch.eye(n, dtype=rows.dtype, device=rows.device) * (0.5 * dt)
    eye = torch.eye(n, dtype=rows.dtype, device=rows.device)
    return eye[None, :, :, None] * (dx * inner) - w[None, :, :, None] * g[:, None, :, :]
