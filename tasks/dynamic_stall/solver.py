"""Surface fields of a sinusoidally pitching NACA0012 in compressible flow -- a cheap,
physically grounded SURROGATE of PBFM's "dynamic stall" data (Baldan et al. 2025).

**This is a surrogate, not RANS**: a chain of classical models (vortex panel method, Katz &
Plotkin 2001 sec. 11.4; Leishman & Beddoes 1989 indicial lags and dynamic stall; Karman-Tsien
1941; Thwaites 1949, Michel 1951, turbulent flat-plate wall shear), float64 numpy.  Exact to
round-off: ``r_gas = p - rho R T`` (``R = R_GAS``, 287.04 J/(kg K)) and
``r_tau = tau_w - sign(mu . s) |mu|``, ``mu = mu(T) (du_s/dx, du_s/dy)`` (Sutherland).
**Sign convention:** the direction channels ``(s_x, s_y)`` are the unit wall normal ``n`` into
the fluid, so ``sign(mu . n) = sign(du_s/dn)`` (> 0 attached, < 0 reversed flow); ``u_s`` is the
velocity along the boundary layer, away from the stagnation point.  Chord frame (x leading ->
trailing edge, y up), chord ``c = 1 m``; free stream ISA sea level (288.15 K, 101325 Pa),
``gamma = 1.4``, ``Pr = 0.72``.  **Grids:** ``n_surf`` points ``x = cos^2(theta_j/2)``,
``theta_j = 2 pi (j + 1/2)/n_surf`` (trailing edge, lower surface, nose, upper surface),
interpolated in theta from ``N_PANELS`` panel midpoints; ``n_time`` samples ``t_j = j P/n_time``
of the third period of ``alpha(t) = alpha_m + alpha_a sin(2 pi t/P)`` (fixed phase).  Model
details: docs/protocols.md, "Notes behind the code".
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from pcgbench.errors import PcgError

__all__ = [
    "CHANNELS",
    "COND_HI",
    "COND_LO",
    "DIRECTION_CHANNELS",
    "MU0",
    "R_GAS",
    "S_SUTH",
    "T_SUTH",
    "adiabatic_wall_temperature",
    "airfoil_nodes",
    "compressible_cp",
    "edge_state",
    "free_stream",
    "gas_residual",
    "karman_tsien",
    "lift_coefficient",
    "naca0012_half_thickness",
    "panel_cp",
    "pitching_states",
    "prandtl_glauert",
    "sample_conditions",
    "separation_point",
    "shear_residual",
    "sonic_cp",
    "surface_fields",
    "surface_geometry",
    "sutherland",
]

# ---------------------------------------------------------------- constants

R_GAS = 8.31446261815324 / 28.966 * 1000  # [J/(kg K)], PBFM dataset_loader.py
MU0 = 1.716e-5  # [Pa s] Sutherland reference viscosity
T_SUTH = 273.11  # [K] Sutherland reference temperature
S_SUTH = 110.56  # [K] Sutherland constant
CHANNELS = ("p", "dus_dx", "dus_dy", "T", "rho", "tau_w")
DIRECTION_CHANNELS = ("s_x", "s_y")

#: the PBFM design space: Mach, mean angle [deg], amplitude [deg], reduced frequency k
COND_LO = np.array([0.3, 5.0, 5.0, 0.05])
COND_HI = np.array([0.5, 10.0, 10.0, 0.10])

GAMMA = 1.4
PRANDTL = 0.72
T_INF = 288.15  # [K] ISA sea level
P_INF = 101325.0  # [Pa]
CHORD = 1.0  # [m]
CP_GAS = GAMMA * R_GAS / (GAMMA - 1.0)  # [J/(kg K)]

NACA_T = 0.12
_NACA_A = (0.2969, -0.1260, -0.3516, 0.2843, -0.1036)  # closed trailing edge

N_PANELS = 200  # panel count of the pressure / boundary-layer grid (even)
STEPS_PER_PERIOD = 1024  # lag-state steps per period (at least; a multiple of n_time)
N_PERIODS = 3  # simulated periods; the last is returned

# Leishman & Beddoes (1989) indicial constants (attached flow)
A1, A2, B1, B2 = 0.3, 0.7, 0.14, 0.53
# NACA 0012 stall constants vs Mach, approximately Leishman & Beddoes (1989, Table 1);
# linearly interpolated in Mach (held constant outside 0.3-0.5)
_BL_MACH = np.array([0.3, 0.4, 0.5])
_BL_ALPHA1 = np.array([15.25, 12.5, 10.5])  # [deg] f = 0.7 break angle
_BL_S1 = np.array([3.0, 3.25, 3.5])  # [deg]
_BL_S2 = np.array([2.3, 1.6, 1.2])  # [deg]
_BL_TP = np.array([1.7, 1.8, 2.0])  # [semichords] leading-edge pressure lag
_BL_TF = np.array([3.0, 2.5, 2.2])  # [semichords] boundary-layer (separation point) lag
T_V = 6.0  # [semichords] vortex-lift lag (typical NACA 0012 value, ibid.)
T_VL = 7.0  # [semichords] vortex travel time to the trailing edge (ibid., M = 0.3)
SIGMA_V = 0.1  # [c] half-width of the vortex's suction footprint
DELTA_PLATEAU = 0.02  # [c] smooth onset of the separated pressure plateau
CP_BASE = -1.0  # lowest (incompressible) plateau Cp: a base-pressure level (our choice)
DELTA_SEP = 0.04  # [c] development length of the reversed wall flow behind f''
R_REV = 0.1  # reversed shear / attached shear in separated flow
Y_WALL = 1e-6  # [c] wall-adjacent height of the tangential gradient (y+ ~ 0.3)
MICHEL = 1.174  # Michel's (1951) transition constant


# ---------------------------------------------------------------- closures


def sutherland(T):
    """Sutherland's law ``mu = mu0 (T/T0)^(3/2) (T0 + S)/(T + S)`` (Sutherland 1893;
    mu0 = 1.716e-5 Pa s, T0 = 273.11 K, S = 110.56 K); numpy or torch (arithmetic only)."""
    return MU0 * (T / T_SUTH) ** 1.5 * (T_SUTH + S_SUTH) / (T + S_SUTH)


def gas_residual(p, rho, T):
    """Ideal-gas closure ``p - rho R T`` (numpy or torch)."""
    return p - rho * R_GAS * T


def _signed_shear(dx, dy, T, sx, sy):
    """``sign(mu . s) |mu|``, ``mu = mu(T) (dx, dy)``; only arithmetic and comparisons,
    so numpy and torch evaluate it identically (the generator defines tau_w with it)."""
    mu = sutherland(T)
    mx = mu * dx
    my = mu * dy
    dot = mx * sx + my * sy
    sign = (dot > 0) * 1.0 - (dot < 0) * 1.0
    return sign * (mx * mx + my * my) ** 0.5


def shear_residual(tau, dx, dy, T, sx, sy):
    """Wall-shear closure ``tau - sign(mu . s) |mu|_2`` with ``mu = mu(T) (dx, dy)`` and
    Sutherland's ``mu(T)`` (numpy or torch)."""
    return tau - _signed_shear(dx, dy, T, sx, sy)


# ---------------------------------------------------------------- geometry


def naca0012_half_thickness(x: np.ndarray) -> np.ndarray:
    """NACA 4-digit half thickness ``5 t (0.2969 sqrt x - 0.1260 x - 0.3516 x^2 +
    0.2843 x^3 - 0.1036 x^4)``, t = 0.12 (Abbott & von Doenhoff 1959, closed trailing
    edge variant of the last coefficient)."""
    x = np.asarray(x, dtype=np.float64)
    a0, a1, a2, a3, a4 = _NACA_A
    return 5 * NACA_T * (a0 * np.sqrt(x) + x * (a1 + x * (a2 + x * (a3 + x * a4))))


def _half_thickness_slope(x: np.ndarray) -> np.ndarray:
    a0, a1, a2, a3, a4 = _NACA_A
    return 5 * NACA_T * (0.5 * a0 / np.sqrt(x) + a1 + x * (2 * a2 + x * (3 * a3 + x * 4 * a4)))


def _contour(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points at the cosine parameter theta in [0, 2 pi]: x = cos^2(theta/2) (= (1 + cos
    theta)/2 without cancellation at the nose), lower surface for theta < pi."""
    x = np.cos(theta / 2) ** 2
    side = np.where(theta < np.pi, -1.0, 1.0)
    return x, side * naca0012_half_thickness(x)


def airfoil_nodes(n_panels: int) -> np.ndarray:
    """Closed contour of ``n_panels + 1`` cosine-spaced nodes [n+1, 2], trailing edge ->
    lower surface -> leading edge -> upper surface -> the same trailing-edge point."""
    if n_panels < 8 or n_panels % 2:
        raise PcgError(f"the panel count must be even and >= 8, got {n_panels}")
    theta = 2 * np.pi * np.arange(n_panels + 1) / n_panels
    x, y = _contour(theta)
    nodes = np.stack([x, y], axis=1)
    nodes[n_panels // 2] = (0.0, 0.0)  # the nose exactly
    nodes[0] = nodes[-1] = (1.0, 0.0)  # the coefficients sum to 0: close it exactly
    return nodes


@dataclass(frozen=True)
class SurfaceGeometry:
    """Surface points at ``theta``; ``t`` the unit tangent along the ordering, ``n`` the
    unit normal into the fluid."""

    theta: np.ndarray
    x: np.ndarray
    y: np.ndarray
    tx: np.ndarray
    ty: np.ndarray
    nx: np.ndarray
    ny: np.ndarray


@functools.lru_cache(maxsize=8)
def surface_geometry(n_surf: int) -> SurfaceGeometry:
    """The ``n_surf`` output points at ``theta_j = 2 pi (j + 1/2)/n_surf`` with analytic
    unit tangents (along the ordering) and fluid-pointing unit normals ``n = (-t_y,
    t_x)`` (the ordering runs clockwise, so the left normal points outward)."""
    if n_surf < 4:
        raise PcgError(f"dynamic stall needs n_surf >= 4, got {n_surf}")
    theta = 2 * np.pi * (np.arange(n_surf) + 0.5) / n_surf
    x, y = _contour(theta)
    lower = theta < np.pi
    dy = _half_thickness_slope(x)
    # d(x, y)/dtheta is parallel to -(1, -y_t') on the lower and +(1, y_t') on the upper side
    tx = np.where(lower, -1.0, 1.0)
    ty = dy.copy()
    norm = np.hypot(tx, ty)
    tx, ty = tx / norm, ty / norm
    arrays = (theta, x, y, tx, ty, -ty, tx)
    for a in arrays:
        a.flags.writeable = False  # shared through the cache
    return SurfaceGeometry(*arrays)


# ---------------------------------------------------------------- panel method


@dataclass(frozen=True)
class _Panels:
    xc: np.ndarray  # collocation points (panel midpoints) [N]
    yc: np.ndarray
    theta: np.ndarray  # their cosine parameter (for interpolation)
    length: np.ndarray  # panel lengths [N]
    nx: np.ndarray  # outward panel normals [N]
    ny: np.ndarray
    arc: np.ndarray  # arc length of the collocation points from the first [N]
    vt0: np.ndarray  # tangential speed / U along the ordering at alpha = 0 [N]
    vt90: np.ndarray  # ... at alpha = 90 deg


@functools.lru_cache(maxsize=4)
def _panel_solution(n_panels: int = N_PANELS) -> _Panels:
    """Linear-strength vortex panels (Katz & Plotkin 2001, sec. 11.4): node strengths
    gamma_j, zero normal velocity at the panel midpoints, Kutta ``gamma_0 + gamma_N = 0``
    (both trailing-edge nodes coincide); solved for a unit free stream along x and y."""
    nodes = airfoil_nodes(n_panels)
    n = n_panels
    p0, p1 = nodes[:-1], nodes[1:]
    d = p1 - p0
    length = np.hypot(d[:, 0], d[:, 1])
    tx, ty = d[:, 0] / length, d[:, 1] / length
    nx, ny = -ty, tx  # clockwise contour: the left normal is outward
    xc, yc = 0.5 * (p0[:, 0] + p1[:, 0]), 0.5 * (p0[:, 1] + p1[:, 1])

    # collocation point i in the local frame of panel j (origin at its first node)
    rx = xc[:, None] - p0[None, :, 0]
    ry = yc[:, None] - p0[None, :, 1]
    lx = rx * tx[None] + ry * ty[None]
    ly = rx * nx[None] + ry * ny[None]
    diag = np.arange(n)
    ly[diag, diag] = 0.0
    L = length[None]
    beta = np.arctan2(ly, lx - L) - np.arctan2(ly, lx)  # angle subtended by the panel
    beta[diag, diag] = np.pi  # self-influence, limit from the fluid side
    lnr = 0.5 * np.log((lx**2 + ly**2) / ((lx - L) ** 2 + ly**2))
    # a vortex sheet gamma(xi) = ga (1 - xi/L) + gb xi/L on [0, L] (counter-clockwise
    # positive): u = -1/(2pi) int gamma y/r^2, v = 1/(2pi) int gamma (x - xi)/r^2
    i1y = (lx * beta - ly * lnr) / L
    i1x = (lx * lnr - L + ly * beta) / L
    ua, ub = -(beta - i1y) / (2 * np.pi), -i1y / (2 * np.pi)
    va, vb = (lnr - i1x) / (2 * np.pi), i1x / (2 * np.pi)

    def project(ex: np.ndarray, ey: np.ndarray) -> np.ndarray:
        """[N, N+1] influence of the node strengths on the velocity along (ex_i, ey_i)."""
        t_e = tx[None] * ex[:, None] + ty[None] * ey[:, None]  # t_j . e_i
        n_e = nx[None] * ex[:, None] + ny[None] * ey[:, None]  # n_j . e_i
        ca, cb = ua * t_e + va * n_e, ub * t_e + vb * n_e
        out = np.zeros((n, n + 1))
        out[:, :n] += ca
        out[:, 1:] += cb
        return out

    a_n = project(nx, ny)
    a_t = project(tx, ty)
    system = np.zeros((n + 1, n + 1))
    system[:n] = a_n
    system[n, 0] = system[n, n] = 1.0  # Kutta condition
    rhs = np.zeros((n + 1, 2))
    rhs[:n, 0], rhs[:n, 1] = -nx, -ny  # free stream (1, 0) and (0, 1)
    gamma = np.linalg.solve(system, rhs)
    vt = a_t @ gamma + np.stack([tx, ty], axis=1)
    theta = np.arccos(np.clip(2 * xc - 1, -1.0, 1.0))
    theta = np.where(np.arange(n) < n // 2, theta, 2 * np.pi - theta)
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(xc), np.diff(yc)))])
    out = _Panels(xc, yc, theta, length, nx, ny, arc, vt[:, 0].copy(), vt[:, 1].copy())
    for a in (out.xc, out.yc, out.theta, out.length, out.nx, out.ny, out.arc, out.vt0,
              out.vt90):
        a.flags.writeable = False
    return out


def _tangential_speed(alpha: np.ndarray, pan: _Panels) -> np.ndarray:
    """V_t/U [..., N] at the angles ``alpha`` [...] (rad), by linearity in the free stream."""
    a = np.asarray(alpha, dtype=np.float64)[..., None]
    return np.cos(a) * pan.vt0 + np.sin(a) * pan.vt90


def panel_cp(alpha: float | np.ndarray, n_panels: int = N_PANELS
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Incompressible ``Cp = 1 - (V_t/U)^2`` at the panel midpoints (Bernoulli) ->
    ``(x, y, Cp [..., N])`` for angles ``alpha`` [rad]."""
    pan = _panel_solution(n_panels)
    return pan.xc, pan.yc, 1.0 - _tangential_speed(alpha, pan) ** 2


def lift_coefficient(alpha: float | np.ndarray, n_panels: int = N_PANELS) -> np.ndarray:
    """Pressure lift coefficient ``Cl = -sum Cp (n . e_lift) ds / c`` of the panel solution
    (``e_lift = (-sin alpha, cos alpha)``)."""
    pan = _panel_solution(n_panels)
    a = np.asarray(alpha, dtype=np.float64)
    cp = 1.0 - _tangential_speed(a, pan) ** 2
    fx = -(cp * pan.nx * pan.length).sum(-1)
    fy = -(cp * pan.ny * pan.length).sum(-1)
    return fy * np.cos(a) - fx * np.sin(a)


# ---------------------------------------------------------------- compressibility


def prandtl_glauert(cp0, mach):
    """Prandtl-Glauert rule ``Cp = Cp0 / sqrt(1 - M^2)`` (Glauert 1928)."""
    return cp0 / np.sqrt(1.0 - np.asarray(mach) ** 2)


def karman_tsien(cp0, mach):
    """Karman-Tsien rule ``Cp = Cp0 / (beta + M^2/(1 + beta) Cp0/2)``, ``beta = sqrt(1 -
    M^2)`` (von Karman 1941; Tsien 1939)."""
    m2 = np.asarray(mach) ** 2
    beta = np.sqrt(1.0 - m2)
    return cp0 / (beta + m2 / (1.0 + beta) * cp0 / 2)


def _karman_tsien_inverse(cp, mach):
    """The incompressible Cp0 that Karman-Tsien maps to ``cp`` (the rule is monotone)."""
    m2 = np.asarray(mach) ** 2
    beta = np.sqrt(1.0 - m2)
    return cp * beta / (1.0 - cp * m2 / (2 * (1.0 + beta)))


def sonic_cp(mach):
    """Critical pressure coefficient ``Cp* = 2/(gamma M^2) [((2 + (gamma-1) M^2)/(gamma +
    1))^(gamma/(gamma-1)) - 1]`` (isentropic, local Mach 1)."""
    m2 = np.asarray(mach) ** 2
    g = GAMMA
    return 2 / (g * m2) * (((2 + (g - 1) * m2) / (g + 1)) ** (g / (g - 1)) - 1)


def _stagnation_cp(mach):
    """Isentropic stagnation ``Cp_t = 2/(gamma M^2) [(1 + (gamma-1)/2 M^2)^(gamma/(gamma-1))
    - 1]``."""
    m2 = np.asarray(mach) ** 2
    g = GAMMA
    return 2 / (g * m2) * ((1 + 0.5 * (g - 1) * m2) ** (g / (g - 1)) - 1)


def _smooth_max(a, b, eps):
    """``eps log(e^(a/eps) + e^(b/eps)) >= max(a, b)``: smooth, and off by only
    ``eps e^(-|a - b|/eps)`` away from the switch (a quadratic blend would shift every
    value by ``~eps^2/(4 |a - b|)``)."""
    return eps * np.logaddexp(a / eps, b / eps)


def compressible_cp(cp0: np.ndarray, mach: np.ndarray) -> np.ndarray:
    """Karman-Tsien Cp of the incompressible ``cp0`` [..., N] at ``mach`` [...]: the input
    is first limited smoothly from below at the Cp0 that maps to the sonic Cp* (a crude
    sonic plateau standing for the supersonic pocket; keeps p > 0), and the compression
    side is scaled by ``1 + c Cp0^2`` so that Cp0 = 1 maps to the isentropic stagnation
    Cp_t exactly (Karman-Tsien overshoots it by < 1 % at M = 0.5; this keeps p_e <= p_t
    and the edge speed zero exactly at stagnation)."""
    m = np.asarray(mach, dtype=np.float64)[..., None]
    floor = _karman_tsien_inverse(sonic_cp(m), m)
    cp0 = _smooth_max(cp0, floor, 0.1)
    cp = karman_tsien(cp0, m)
    c = _stagnation_cp(m) / karman_tsien(1.0, m) - 1.0
    return cp * (1.0 + c * np.clip(cp0, 0.0, None) ** 2)


# ---------------------------------------------------------------- edge / wall state


def free_stream(mach):
    """``(U, T_t, p_t)`` of the free stream at ``mach`` (ISA sea-level static state)."""
    m = np.asarray(mach, dtype=np.float64)
    a = math.sqrt(GAMMA * R_GAS * T_INF)
    ratio = 1.0 + 0.5 * (GAMMA - 1) * m**2
    return m * a, T_INF * ratio, P_INF * ratio ** (GAMMA / (GAMMA - 1))


def edge_state(cp, mach) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Boundary-layer edge ``(p_e, T_e, U_e, T_t)`` from the compressible ``cp`` [..., N] at
    ``mach`` [...]: ``p_e = p_inf (1 + gamma M^2 Cp/2)``, isentropic ``T_e = T_t
    (p_e/p_t)^((gamma-1)/gamma)``, energy equation ``U_e = sqrt(2 c_p (T_t - T_e))``."""
    m = np.asarray(mach, dtype=np.float64)[..., None]
    _, t_t, p_t = free_stream(m)
    p_e = P_INF * (1.0 + 0.5 * GAMMA * m**2 * cp)
    t_e = t_t * (p_e / p_t) ** ((GAMMA - 1) / GAMMA)
    u_e = np.sqrt(2 * CP_GAS * np.clip(t_t - t_e, 0.0, None))
    return p_e, t_e, u_e, np.broadcast_to(t_t, t_e.shape)


def adiabatic_wall_temperature(t_e, t_t, turbulent):
    """``T_w = T_e + r (T_t - T_e)``, recovery factor ``r = Pr^(1/2)`` laminar, ``Pr^(1/3)``
    turbulent, ``Pr = 0.72`` (Pohlhausen; e.g. White 2006, eqs. 7-46 and 7-152)."""
    r = np.where(turbulent, PRANDTL ** (1 / 3), PRANDTL**0.5)
    return t_e + r * (t_t - t_e)


# ---------------------------------------------------------------- Beddoes-Leishman


def separation_point(alpha_deg, alpha1, s1, s2):
    """Static Kirchhoff separation point ``f = 1 - 0.3 exp((|a| - a1)/S1)`` for ``|a| <=
    a1``, ``0.04 + 0.66 exp((a1 - |a|)/S2)`` beyond (Leishman & Beddoes 1989; degrees)."""
    a = np.abs(alpha_deg)
    below = 1.0 - 0.3 * np.exp((np.minimum(a, alpha1) - alpha1) / s1)
    above = 0.04 + 0.66 * np.exp((alpha1 - np.maximum(a, alpha1)) / s2)
    return np.where(a <= alpha1, below, above)


def _stall_constants(mach: np.ndarray, factors: np.ndarray | None) -> dict[str, np.ndarray]:
    """Mach-interpolated NACA 0012 constants per sample, times the realization factors
    ``[B, 4]`` on (T_p, T_f, alpha1, Michel threshold)."""
    m = np.asarray(mach, dtype=np.float64)
    out = {"t_p": np.interp(m, _BL_MACH, _BL_TP), "t_f": np.interp(m, _BL_MACH, _BL_TF),
           "alpha1": np.interp(m, _BL_MACH, _BL_ALPHA1), "s1": np.interp(m, _BL_MACH, _BL_S1),
           "s2": np.interp(m, _BL_MACH, _BL_S2), "michel": np.full_like(m, MICHEL)}
    if factors is not None:
        for i, key in enumerate(("t_p", "t_f", "alpha1", "michel")):
            out[key] = out[key] * factors[:, i]
    return out


def pitching_states(conditions: np.ndarray, n_time: int,
                    factors: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Lag states of the Beddoes-Leishman model over one periodic pitching cycle.

    ``conditions`` [B, 4] = (Mach, alpha_m, alpha_a [deg], k); no range check here (the
    tests use k -> 0).  Time advances in ``Delta s = 2 U Delta t/c = 2 pi/(k n)`` semichords
    (n steps per period, a multiple of ``n_time`` >= ``STEPS_PER_PERIOD``) with the
    recursive formulas of Leishman & Beddoes (1989): deficiency functions ``X, Y`` (``A_i,
    b_i beta^2``) of the 3/4-chord angle -> ``alpha_e``; pressure lag ``D_p`` (``T_p``) ->
    ``alpha_f``; separation lag ``D_f`` (``T_f``) of ``f(alpha_f)`` -> ``f''``; vortex lift
    ``C_v = 2 pi |alpha_e| (1 - K_N)``, ``K_N = (1 + sqrt f'')^2/4``, lagged by ``T_v``
    while the vortex clock ``tau_v <= T_vl`` and decaying with ``T_v/2`` after it; the
    clock runs from the instant ``|alpha_f| > alpha1`` until the next upstroke below it.

    Returns arrays [B, n_time] (angles in rad): ``alpha``, ``alpha_e``, ``alpha_f``,
    ``f_static`` (at alpha_f), ``f`` (lagged, f''), ``cn_vortex``, ``x_vortex`` (= tau_v/T_vl)
    and ``cn`` (the normal force ``2 pi/beta K_N alpha_e + C_N^v``, for diagnostics).
    """
    cond = np.asarray(conditions, dtype=np.float64)
    mach, am, aa, k = (cond[:, i] for i in range(4))
    am, aa = np.deg2rad(am), np.deg2rad(aa)
    c = _stall_constants(mach, factors)
    a1, s1, s2 = c["alpha1"], c["s1"], c["s2"]
    sub = max(1, math.ceil(STEPS_PER_PERIOD / n_time))
    n = sub * n_time
    ds = 2 * np.pi / (k * n)
    beta2 = 1.0 - mach**2
    e1, e1h = np.exp(-B1 * beta2 * ds), np.exp(-0.5 * B1 * beta2 * ds)
    e2, e2h = np.exp(-B2 * beta2 * ds), np.exp(-0.5 * B2 * beta2 * ds)
    ep, eph = np.exp(-ds / c["t_p"]), np.exp(-0.5 * ds / c["t_p"])
    ef, efh = np.exp(-ds / c["t_f"]), np.exp(-0.5 * ds / c["t_f"])
    ev, evd = np.exp(-ds / T_V), np.exp(-2 * ds / T_V)

    def angles(phase: float) -> tuple[np.ndarray, np.ndarray]:
        a = am + aa * np.sin(phase)
        return a, a + k * aa * np.cos(phase)  # 3/4-chord angle: + (c/2U) dalpha/dt

    alpha, a34 = angles(0.0)
    x_def = np.zeros_like(alpha)
    y_def = np.zeros_like(alpha)
    d_p = np.zeros_like(alpha)
    d_f = np.zeros_like(alpha)
    a_e = a34.copy()
    f_s = separation_point(np.rad2deg(a_e), a1, s1, s2)
    f_l = f_s.copy()
    tau_v = np.zeros_like(alpha)
    cnv = np.zeros_like(alpha)
    keys = ("alpha", "alpha_e", "alpha_f", "f_static", "f", "cn_vortex", "x_vortex")
    out = {key: np.empty((len(cond), n_time)) for key in keys}
    first = (N_PERIODS - 1) * n
    for step in range(1, N_PERIODS * n + 1):
        alpha, a34_new = angles(2 * np.pi * step / n)
        da = a34_new - a34
        a34 = a34_new
        x_def = x_def * e1 + A1 * da * e1h
        y_def = y_def * e2 + A2 * da * e2h
        a_e_new = a34 - x_def - y_def
        d_p = d_p * ep + (a_e_new - a_e) * eph
        a_e = a_e_new
        a_f = a_e - d_p
        f_s_new = separation_point(np.rad2deg(a_f), a1, s1, s2)
        d_f = d_f * ef + (f_s_new - f_s) * efh
        f_s = f_s_new
        f_l = np.clip(f_s - d_f, 0.02, 1.0)
        stalled = np.abs(np.rad2deg(a_f)) > a1
        tau_v = np.where(stalled | ((tau_v > 0) & (da <= 0)), tau_v + ds, 0.0)
        k_n = 0.25 * (1.0 + np.sqrt(f_l)) ** 2
        c_v = 2 * np.pi * np.abs(a_e) * (1.0 - k_n)
        cnv = np.where(tau_v <= T_VL, cnv * ev + c_v * (1.0 - ev), cnv * evd)
        j, r = divmod(step - first, sub)
        if step >= first and r == 0 and j < n_time:
            for key, val in zip(keys, (alpha, a_e, a_f, f_s, f_l, cnv, tau_v / T_VL),
                                strict=True):
                out[key][:, j] = val
    k_n = 0.25 * (1.0 + np.sqrt(out["f"])) ** 2
    out["cn"] = 2 * np.pi / np.sqrt(1.0 - mach[:, None] ** 2) * k_n * out["alpha_e"] \
        + np.sign(out["alpha_f"]) * out["cn_vortex"]
    return out


# ---------------------------------------------------------------- surface synthesis


def _smoothstep(u: np.ndarray) -> np.ndarray:
    """C1 ramp 0 -> 1 on u in [0, 1]."""
    u = np.clip(u, 0.0, 1.0)
    return u * u * (3.0 - 2.0 * u)


def _interp_rows(xs: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Row-wise linear interpolation of ``values`` [R, m] (abscissae ``xs`` [m]
    increasing) at one point per row ``at`` [R], clamped at the ends."""
    idx = np.clip(np.searchsorted(xs, at), 1, len(xs) - 1)
    x0, x1 = xs[idx - 1], xs[idx]
    w = np.clip((at - x0) / (x1 - x0), 0.0, 1.0)
    rows = np.arange(len(at))
    return values[rows, idx - 1] * (1 - w) + values[rows, idx] * w


def _fine_fields(alpha_k: np.ndarray, side: np.ndarray, x_sep: np.ndarray, cnv: np.ndarray,
                 x_v: np.ndarray, mach: np.ndarray, michel: np.ndarray,
                 pan: _Panels) -> dict[str, np.ndarray]:
    """Wall state on the panel midpoints for R (sample, time) rows -> arrays [R, N].

    Inputs per row: the Kirchhoff-reduced angle ``alpha_k`` [rad], the suction side
    (+1 upper, -1 lower), the lagged separation point ``x_sep = f''``, the vortex lift
    ``cnv`` and position ``x_v``, Mach and Michel's threshold.  Returns ``p`` (edge = wall
    pressure), ``T_w``, ``T_e``, ``T_t``, ``g_n = du_s/dn``, ``g_t`` (the tangential gradient
    along the ordering tangent) and ``turbulent``.
    """
    rows, n = len(alpha_k), len(pan.xc)
    x = pan.xc[None]
    upper = pan.theta > np.pi
    vt = _tangential_speed(alpha_k, pan)  # attached potential flow, signed along t
    cp0 = 1.0 - vt**2
    suction = np.where(side[:, None] > 0, upper[None], ~upper[None])
    # separated plateau: Cp held at its value at x_sep on the suction side (Kirchhoff flow)
    lo_idx = np.flatnonzero(~upper)[::-1]  # lower surface, nose -> trailing edge
    up_idx = np.flatnonzero(upper)
    cp_sep = np.where(side > 0, _interp_rows(pan.xc[up_idx], cp0[:, up_idx], x_sep),
                      _interp_rows(pan.xc[lo_idx], cp0[:, lo_idx], x_sep))
    # ... but not below the base pressure of massively separated flow: once separation
    # nears the nose the suction peak collapses instead of spreading over the chord
    cp_sep = _smooth_max(cp_sep, CP_BASE, 0.1)
    w_p = suction * _smoothstep((x - x_sep[:, None]) / DELTA_PLATEAU)
    cp = cp0 + w_p * (cp_sep[:, None] - cp0)
    # leading-edge vortex: Gaussian suction footprint carrying the normal force cnv
    amp = cnv / (SIGMA_V * math.sqrt(math.pi))
    cp = cp - suction * amp[:, None] * np.exp(-(((x - x_v[:, None]) / SIGMA_V) ** 2))
    cp = compressible_cp(cp, mach)
    p_e, t_e, u_e, t_t = edge_state(cp, mach)
    v_e = np.sign(vt) * u_e  # signed edge speed: smooth through the stagnation point

    # -- Thwaites from the stagnation point (both branches at once)
    t_w0 = adiabatic_wall_temperature(t_e, t_t, True)  # r(transition) is not known yet
    mu_w0 = sutherland(t_w0)
    nu = mu_w0 * R_GAS * t_w0 / p_e  # mu / rho_w, rho_w = p_e/(R T_w)
    u = np.abs(v_e)
    s_arc = pan.arc
    # int nu U^5 dS per segment, exact for U linear on the segment
    ua, ub = u[:, :-1], u[:, 1:]
    u5 = (ua**5 + ua**4 * ub + ua**3 * ub**2 + ua**2 * ub**3 + ua * ub**4 + ub**5) / 6
    seg = 0.5 * (nu[:, :-1] + nu[:, 1:]) * u5 * np.diff(s_arc)
    cum = np.concatenate([np.zeros((rows, 1)), np.cumsum(seg, axis=1)], axis=1)
    # stagnation: the first sign change - -> + of V_t in the nose region (x < 0.5)
    lo, hi = n // 4, 3 * n // 4
    k_st = lo + np.argmax(vt[:, lo:hi] > 0, axis=1)
    r = np.arange(rows)
    va, vb = vt[r, k_st - 1], vt[r, k_st]
    s_st = s_arc[k_st - 1] + (s_arc[k_st] - s_arc[k_st - 1]) * (-va / (vb - va))
    after = np.arange(n)[None] >= k_st[:, None]  # the branch running along the ordering
    part_up = nu[r, k_st] * u[r, k_st] ** 5 * (s_arc[k_st] - s_st) / 6
    part_lo = nu[r, k_st - 1] * u[r, k_st - 1] ** 5 * (s_st - s_arc[k_st - 1]) / 6
    integral = np.where(after, cum - cum[r, k_st][:, None] + part_up[:, None],
                        cum[r, k_st - 1][:, None] - cum + part_lo[:, None])
    s = np.abs(s_arc[None] - s_st[:, None])
    u_floor = np.maximum(u, 1e-9)
    theta2 = 0.45 * integral / u_floor**6
    theta = np.sqrt(theta2)
    # dU_e/ds along either branch equals dV_e/dS along the ordering
    dudx = np.gradient(v_e, s_arc, axis=1)
    lam_raw = theta2 * dudx / nu
    lam = np.clip(lam_raw, -0.09, 0.25)
    ratio_lam = (lam + 0.09) ** 0.62 / np.maximum(theta, 1e-300)  # g_n/U_e, laminar
    # transition: Michel's criterion or laminar separation, whichever first per branch
    re_s = np.maximum(u * s / nu, 1.0)
    re_theta = u * theta / nu
    crit = (re_theta > michel[:, None] * (1 + 22400 / re_s) * re_s**0.46) | (lam_raw < -0.09)
    trip_up = np.logical_or.accumulate(crit & after, axis=1)
    trip_lo = np.logical_or.accumulate((crit & ~after)[:, ::-1], axis=1)[:, ::-1]
    turbulent = np.where(after, trip_up, trip_lo)
    cf = 0.0592 * re_s**-0.2
    ratio = np.where(turbulent, 0.5 * u * cf / nu, ratio_lam)  # tau/(mu U_e)
    # reversed flow behind the lagged separation point on the suction side
    w_s = suction * _smoothstep((x - x_sep[:, None]) / DELTA_SEP)
    ratio = ratio * (1.0 - (1.0 + R_REV) * w_s)
    t_w = adiabatic_wall_temperature(t_e, t_t, turbulent)
    g_n = u * ratio
    # tangential part at the wall-adjacent height Y_WALL: u(y1) ~ y1 g_n and local
    # similarity du/ds = (u(y1)/U_e) dU_e/ds (exact for Hiemenz stagnation flow)
    g_s = Y_WALL * CHORD * ratio * dudx
    return {"p": p_e, "T_w": t_w, "T_e": t_e, "T_t": t_t, "g_n": g_n,
            "g_t": np.sign(v_e) * g_s, "turbulent": turbulent, "cp": cp}


@functools.lru_cache(maxsize=8)
def _resampler(n_surf: int, n_panels: int = N_PANELS) -> tuple[np.ndarray, np.ndarray]:
    """Indices and weights of linear interpolation in theta from the panel midpoints to
    the output points (clamped at the trailing edge)."""
    src = _panel_solution(n_panels).theta
    dst = surface_geometry(n_surf).theta
    idx = np.clip(np.searchsorted(src, dst), 1, len(src) - 1)
    w = np.clip((dst - src[idx - 1]) / (src[idx] - src[idx - 1]), 0.0, 1.0)
    return idx, w


def _resample(values: np.ndarray, idx: np.ndarray, w: np.ndarray) -> np.ndarray:
    return values[:, idx - 1] * (1 - w) + values[:, idx] * w


# ---------------------------------------------------------------- public generator


def sample_conditions(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` conditions [n, 4] (Mach, alpha_m [deg], alpha_a [deg], k) by Latin-hypercube
    sampling of the PBFM box (McKay et al. 1979): each coordinate takes one uniform draw
    in each of ``n`` equal strata, the strata permuted independently per coordinate."""
    if int(n) != n or n < 1:
        raise PcgError(f"dynamic stall needs n >= 1 conditions, got {n}")
    n = int(n)
    u = (rng.permuted(np.tile(np.arange(n), (4, 1)), axis=1).T + rng.random((n, 4))) / n
    return COND_LO + u * (COND_HI - COND_LO)


def _check(conditions: np.ndarray, n_time: int, n_surf: int, rng, realizations: int,
           perturb: float) -> np.ndarray:
    cond = np.asarray(conditions, dtype=np.float64)
    if cond.ndim != 2 or cond.shape[1] != 4 or len(cond) == 0:
        raise PcgError(f"dynamic stall conditions must be [N, 4] (Mach, alpha_m, alpha_a, k), "
                       f"got shape {cond.shape}")
    if not np.isfinite(cond).all():
        raise PcgError("dynamic stall conditions must be finite")
    if int(n_time) != n_time or n_time < 4 or int(n_surf) != n_surf or n_surf < 4:
        raise PcgError(f"dynamic stall needs n_time >= 4 and n_surf >= 4, got {n_time}, "
                       f"{n_surf}")
    if not 0.0 <= perturb <= 0.1:
        raise PcgError(f"dynamic stall perturb must lie in [0, 0.1], got {perturb}")
    if int(realizations) != realizations or realizations < 1:
        raise PcgError(f"dynamic stall needs realizations >= 1, got {realizations}")
    if rng is None and realizations != 1:
        raise PcgError("dynamic stall realizations > 1 need an rng (None = no perturbation)")
    tol = perturb * (COND_HI - COND_LO) + 1e-9
    bad = (cond < COND_LO - tol) | (cond > COND_HI + tol)
    if bad.any():
        i = int(np.argwhere(bad)[0, 0])
        raise PcgError(f"dynamic stall condition {cond[i].tolist()} lies outside Mach "
                       f"0.3-0.5, alpha_m 5-10 deg, alpha_a 5-10 deg, k 0.05-0.1 (tolerance "
                       f"{perturb:g} of each range)")
    return cond


def surface_fields(conditions: np.ndarray, n_time: int, n_surf: int,
                   rng: np.random.Generator | None = None, realizations: int = 1,
                   perturb: float = 0.02) -> np.ndarray:
    """Surrogate surface fields -> float64 ``[N * realizations, 8, n_time, n_surf]``.

    Channels :data:`CHANNELS` + :data:`DIRECTION_CHANNELS` (the fluid-pointing wall normal,
    see the module docstring); rows condition by condition, ``realizations`` each.  ``rng``
    None: the nominal conditions and constants (``realizations`` must be 1); otherwise
    every realization perturbs the condition by ``perturb`` x each range (Gaussian) and
    ``T_p, T_f, alpha1`` and Michel's threshold by ``exp(2.5 perturb z)``.  Conditions may
    lie outside the PBFM ranges by at most ``perturb`` x the range.
    """
    cond = _check(conditions, n_time, n_surf, rng, realizations, perturb)
    n_time, n_surf, reps = int(n_time), int(n_surf), int(realizations)
    cond = np.repeat(cond, reps, axis=0)
    factors = None
    if rng is not None:
        z = rng.standard_normal((len(cond), 8))
        cond = cond + perturb * (COND_HI - COND_LO) * z[:, :4]
        factors = np.exp(2.5 * perturb * z[:, 4:])
    consts = _stall_constants(cond[:, 0], factors)
    st = pitching_states(cond, n_time, factors)
    pan = _panel_solution()
    geo = surface_geometry(n_surf)
    idx, w = _resampler(n_surf)
    b = len(cond)
    out = np.empty((b, 8, n_time, n_surf))
    k_n = 0.25 * (1.0 + np.sqrt(st["f"])) ** 2
    alpha_k = (k_n * st["alpha_e"]).ravel()
    side = np.where(st["alpha_f"] >= 0, 1.0, -1.0).ravel()
    mach = np.repeat(cond[:, 0], n_time)
    michel = np.repeat(consts["michel"], n_time)
    flat = {"alpha_k": alpha_k, "side": side, "x_sep": st["f"].ravel(),
            "cnv": st["cn_vortex"].ravel(), "x_v": st["x_vortex"].ravel(), "mach": mach,
            "michel": michel}
    # chunks of whole samples keep the [rows, N_PANELS] temporaries cache-sized
    per = max(1, 4096 // n_time)
    for start in range(0, b, per):
        sl = slice(start * n_time, min(b, start + per) * n_time)
        f = _fine_fields(**{key: val[sl] for key, val in flat.items()}, pan=pan)
        shape = (-1, n_time, n_surf)
        t_w = _resample(f["T_w"], idx, w).reshape(shape)
        p_e = _resample(f["p"], idx, w).reshape(shape)
        g_n = _resample(f["g_n"], idx, w).reshape(shape)
        g_t = _resample(f["g_t"], idx, w).reshape(shape)
        dx = g_n * geo.nx + g_t * geo.tx
        dy = g_n * geo.ny + g_t * geo.ty
        rho = p_e / (R_GAS * t_w)
        blk = out[start:start + per]
        blk[:, 0] = rho * R_GAS * t_w  # p := rho R T, the gas closure to round-off
        blk[:, 1], blk[:, 2], blk[:, 3], blk[:, 4] = dx, dy, t_w, rho
        blk[:, 6], blk[:, 7] = geo.nx, geo.ny
        blk[:, 5] = _signed_shear(blk[:, 1], blk[:, 2], blk[:, 3], blk[:, 6], blk[:, 7])
    return out
