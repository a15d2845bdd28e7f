"""First-order finite-volume Godunov scheme for the inviscid Burgers equation
``u_t + (u^2/2)_x = 0`` (constrained-PDE suite, REFERENCES.md "Constrained-PDE suite";
Godunov's method with the exact Riemann solver, e.g. LeVeque, *Finite Volume Methods
for Hyperbolic Problems*, Sec. 12.2).

Values ``u[..., j]`` live on the nodes ``x_j = j dx`` (``j = 0..nx-1``) and are updated
as cell values: ``u_j^{n+1} = u_j^n - lam (F_{j+1/2} - F_{j-1/2})``, ``lam = dt/dx``,
``F_{j+1/2} = G(u_j^n, u_{j+1}^n)``.  Everything is batched over leading dimensions, pure
torch (differentiable, vmap-compatible) and runs in the dtype of its input (float64 for
data generation).  Stability needs the CFL condition ``lam max|u| <= 1``
(:func:`check_cfl`).

Three boundary treatments:

* :func:`solve_inflow_outflow` -- the suite's scheme (PCFM ``generate_burgers1d_data``):
  the interior nodes ``1..nx-2`` are FV-updated, then the boundary nodes are overwritten,
  ``u_0^{n+1} = u_bc`` (left Dirichlet, for t > 0) and ``u_{nx-1}^{n+1} = u_{nx-2}^{n+1}``
  (right zero gradient);
* :func:`solve_periodic` and :func:`solve_zero_flux` -- every node is a cell, with periodic
  faces or zero flux through the two outer faces (both conserve ``sum_j u_j`` exactly).

The discrete mass balance of the inflow/outflow scheme (:func:`mass_balance`) follows by
summing the interior update: with ``mass^n = dx sum_{j=1}^{nx-2} u_j^n``,

    mass^n - mass^0 + dt sum_{m<n} [G(u_{nx-2}^m, u_{nx-1}^m) - G(u_0^m, u_1^m)] = 0,

an algebraic identity ``mass_balance(u) = dx * cumsum_m sum_j update_residual(u)`` for
*every* field, so it is zero to round-off on the solver's output.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pcgbench.errors import PcgError


def burgers_flux(u: Tensor) -> Tensor:
    """Physical flux ``f(u) = u^2 / 2``."""
    return 0.5 * u * u


def godunov_flux(ul: Tensor, ur: Tensor) -> Tensor:
    """Exact-Riemann (Godunov) flux of Burgers' equation at a face with states (ul, ur):
    ``G = max(f(max(ul, 0)), f(min(ur, 0)))`` (convex flux with minimum at 0; covers the
    shock, the rarefaction and the transonic rarefaction, G = 0).  For ``ul, ur >= 0``
    it is the upwind flux ``f(ul)``.

    (PCFM's reference uses ``min(f(ul), f(ur))`` for ``ul <= ur``, which differs only in
    the transonic case ``ul < 0 < ur``; the suite's data never have negative states.)"""
    zero = torch.zeros((), dtype=ul.dtype, device=ul.device)
    return torch.maximum(burgers_flux(torch.maximum(ul, zero)),
                         burgers_flux(torch.minimum(ur, zero)))


def face_fluxes(u: Tensor) -> Tensor:
    """Godunov fluxes of the ``nx - 1`` inner faces ``x_{j+1/2}``: ``[..., nx] -> [..., nx-1]``."""
    return godunov_flux(u[..., :-1], u[..., 1:])


def check_cfl(u: Tensor, lam: float) -> None:
    """Raise :class:`PcgError` unless ``lam * max|u| <= 1`` (Godunov's stability limit)."""
    cfl = float(lam * u.detach().abs().max()) if u.numel() else 0.0
    if cfl > 1.0 + 1e-12:
        raise PcgError(f"Godunov CFL number lam*max|u| = {cfl:.4g} exceeds 1 "
                       f"(lam = dt/dx = {lam:.4g})")


def interior_step(u: Tensor, lam: float) -> Tensor:
    """One conservative update of the interior nodes ``1..nx-2``: ``[..., nx] -> [..., nx-2]``."""
    f = face_fluxes(u)
    return u[..., 1:-1] - lam * (f[..., 1:] - f[..., :-1])


def _as_batch(u0: Tensor, n_steps: int) -> None:
    if u0.ndim < 1 or u0.shape[-1] < 3:
        raise PcgError(f"Godunov solver needs states [..., nx] with nx >= 3, got "
                       f"{tuple(u0.shape)}")
    if n_steps < 0:
        raise PcgError(f"number of time steps must be >= 0, got {n_steps}")


def solve_inflow_outflow(u0: Tensor, u_bc: Tensor | float, n_steps: int, lam: float,
                         check: bool = True) -> Tensor:
    """The suite's scheme: ``u0 [..., nx]``, left Dirichlet value ``u_bc`` (scalar or
    ``[...]``) -> trajectory ``[..., n_steps + 1, nx]`` (index 0 = the initial state,
    left untouched).  Each step FV-updates nodes ``1..nx-2`` from the previous state, then
    sets ``u_0 = u_bc`` and ``u_{nx-1} = u_{nx-2}``.  ``check`` enforces the CFL bound on
    the initial state and the boundary value (the scheme is monotone under it, so the
    bound holds for every later step)."""
    _as_batch(u0, n_steps)
    ubc = torch.as_tensor(u_bc, dtype=u0.dtype, device=u0.device)
    ubc = ubc.expand(u0.shape[:-1]).unsqueeze(-1)
    if check:
        check_cfl(u0, lam)
        check_cfl(ubc, lam)
    states = [u0]
    u = u0
    for _ in range(n_steps):
        inner = interior_step(u, lam)
        u = torch.cat([ubc, inner, inner[..., -1:]], dim=-1)
        states.append(u)
    return torch.stack(states, dim=-2)


def _solve_cells(u0: Tensor, n_steps: int, lam: float, periodic: bool, check: bool
                 ) -> Tensor:
    _as_batch(u0, n_steps)
    if check:
        check_cfl(u0, lam)
    states = [u0]
    u = u0
    for _ in range(n_steps):
        if periodic:
            f = godunov_flux(u, torch.roll(u, -1, dims=-1))  # F_{j+1/2}, j = 0..nx-1
            u = u - lam * (f - torch.roll(f, 1, dims=-1))
        else:
            inner = face_fluxes(u)
            zero = torch.zeros_like(u[..., :1])
            f = torch.cat([zero, inner, zero], dim=-1)  # F_{-1/2} .. F_{nx-1/2}
            u = u - lam * (f[..., 1:] - f[..., :-1])
        states.append(u)
    return torch.stack(states, dim=-2)


def solve_periodic(u0: Tensor, n_steps: int, lam: float, check: bool = True) -> Tensor:
    """Periodic Godunov scheme (every node a cell): ``[..., nx] -> [..., n_steps+1, nx]``."""
    return _solve_cells(u0, n_steps, lam, periodic=True, check=check)


def solve_zero_flux(u0: Tensor, n_steps: int, lam: float, check: bool = True) -> Tensor:
    """Godunov scheme with zero flux through both outer faces (closed box)."""
    return _solve_cells(u0, n_steps, lam, periodic=False, check=check)


def update_residual(u: Tensor, lam: float, steps: int | None = None) -> Tensor:
    """Residual of the interior update of a trajectory ``u [..., nt, nx]``:
    ``u_j^{n+1} - (u_j^n - lam (F_{j+1/2}^n - F_{j-1/2}^n))`` for ``j = 1..nx-2`` and the
    first ``steps`` steps (all ``nt - 1`` when None) -> ``[..., steps, nx-2]``
    (dimensionless update units, as PCFM's ``burgers_local_multistep_residual``)."""
    nt = u.shape[-2]
    k = nt - 1 if steps is None else int(steps)
    if not 0 <= k <= nt - 1:
        raise PcgError(f"update residual of {k} steps needs nt > {k}, got nt = {nt}")
    return u[..., 1:k + 1, 1:-1] - interior_step(u[..., :k, :], lam)


def boundary_fluxes(u: Tensor) -> tuple[Tensor, Tensor]:
    """Godunov fluxes through the faces bounding the interior nodes, ``x_{1/2}`` (left)
    and ``x_{nx-3/2}`` (right), of ``u [..., nt, nx]`` -> two ``[..., nt]`` tensors.
    For non-negative states they are ``u_0^2/2`` and ``u_{nx-2}^2/2``."""
    return godunov_flux(u[..., 0], u[..., 1]), godunov_flux(u[..., -2], u[..., -1])


def interior_mass(u: Tensor, dx: float) -> Tensor:
    """``mass^n = dx sum_{j=1}^{nx-2} u_j^n`` (midpoint rule over the interior cells)."""
    return dx * u[..., 1:-1].sum(dim=-1)


def mass_balance(u: Tensor, dx: float, dt: float) -> Tensor:
    """Discrete nonlinear mass balance of the inflow/outflow scheme for ``u [..., nt, nx]``:
    ``mass^n - mass^0 + dt sum_{m=0}^{n-1} (F_R^m - F_L^m)`` for ``n = 1..nt-1``
    -> ``[..., nt-1]`` (left-endpoint rule in time with the boundary Godunov fluxes of
    :func:`boundary_fluxes`; zero to round-off on :func:`solve_inflow_outflow` output)."""
    mass = interior_mass(u, dx)
    f_left, f_right = boundary_fluxes(u)
    outflow = torch.cumsum(dt * (f_right - f_left)[..., :-1], dim=-1)
    return mass[..., 1:] - mass[..., :1] + outflow
