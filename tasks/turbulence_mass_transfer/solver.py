"""TMT ("turbulence mass transfer") data generator: 2-D incompressible flow past one random
immersed body, Brinkman volume penalization (Angot, Bruneau & Fabrie 1999; pseudo-spectral
form: Kolomenskiy & Schneider 2009), torch, batched.  Kinematic, on the periodic ``[0, L)^2``::

    du/dt + (u . grad) u = -grad p + nu Lap u - (chi / eta) (u - u_body) + G(t),
    div u = 0,   u_body = 0,   <u> = U_inf = (1, 0),

``chi`` the body mask (:func:`body_mask`), ``eta`` the permeability, ``G(t)`` the uniform drive
keeping ``<u> = U_inf`` (its value: the drag per unit area).  Channels ``(u, v, p, phi)``: ``p``
the zero-mean kinematic pressure, ``-Lap p = div div(u u) + div(chi u / eta)``; ``phi`` the
exact periodic signed distance to the body (< 0 inside; ellipses after Eberly 2013).  Layout
``[..., n, n]``, x on axis -2, y on axis -1 (``"ij"``), ``x_i = i L / n``; spectra ``rfft2``.
Step (Lie splitting): Lawson IF-RK3 advection + viscosity (2/3 rule), then penalization and
pressure implicitly (preconditioned CG + Leray projection: ``div u`` is round-off); fixed
``dt = cfl h / u_ref``, so a sample does not depend on its batch (numerics and measurements:
docs/protocols.md, "Notes behind the code").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from pcgbench.errors import PcgError
from pcgbench.numerics.spectral2d import dealias_mask

__all__ = [
    "BrinkmanSolver",
    "TMTConfig",
    "body_mask",
    "generate",
    "image_distances",
    "random_body",
    "sdf_points",
    "signed_distance",
    "simulate_batch",
    "simulate_sample",
    "tmt_residual",
]


@dataclass(frozen=True)
class TMTConfig:
    """TMT generator settings.  Defaults: Re = U_inf D / nu = 150 for the nominal
    equal-area body diameter D = L / 8 (random bodies span Re ~ 120-190: unsteady,
    laminar wakes that n = 64 still roughly resolves); eta = 1e-3 (dt / eta ~ 20-40 is
    handled implicitly; max |u| inside the body 0.5-1.3 % of U_inf at n = 64, 0.3-0.7 %
    at n = 32); t_end = 10 (~13 body flow-through times D / U_inf, 1.6 box
    flow-throughs: the wake has shed for several periods; the box-scale mean profile
    still drifts slowly, on the viscous time L^2 / nu, which no affordable run reaches).
    """

    n: int = 64
    L: float = 2 * math.pi
    nu: float = 2 * math.pi / 8 / 150
    eta: float = 1e-3
    t_end: float = 10.0
    cfl: float = 0.5
    smooth: float = 1.0
    u_inf: float = 1.0  # box-mean velocity along x (the imposed flow rate)
    u_ref: float = 2.5  # bound on max(|u| + |v|) fixing dt = cfl h / u_ref
    perturb: float = 0.05  # rms of the initial perturbation / u_inf (breaks symmetry)
    cg_tol: float = 1e-7  # CG stop: rms div u before the final projection, / (U / h)
    cg_maxiter: int = 2000

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 16 or self.n % 2:
            raise PcgError(f"TMT: n must be an even integer >= 16, got {self.n!r}")
        for name in ("L", "nu", "eta", "t_end", "cfl", "u_ref", "cg_tol"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise PcgError(f"TMT: {name} must be a finite number > 0, got {v!r}")
        if not (self.smooth >= 0 and self.perturb >= 0 and math.isfinite(self.u_inf)):
            raise PcgError("TMT: smooth and perturb must be >= 0 and u_inf finite")

    @property
    def h(self) -> float:
        return self.L / self.n


# -- bodies and signed distances ------------------------------------------------------
def random_body(rng: np.random.Generator, L: float) -> dict:
    """One random body: a circle (probability 1/3) or an ellipse with equal-area diameter
    ``D = 2 sqrt(a b)`` uniform in ``[0.8, 1.25] L / 8``, aspect ``b / a`` in
    ``[0.4, 1]``, orientation uniform in ``[0, pi)`` and centre uniform in the box.
    ``seed`` seeds the initial perturbation of :func:`simulate_sample` (so a body dict
    fixes its sample)."""
    kind = "circle" if rng.random() < 1 / 3 else "ellipse"
    d = float(rng.uniform(0.8, 1.25)) * L / 8
    aspect = 1.0 if kind == "circle" else float(rng.uniform(0.4, 1.0))
    a, b = d / 2 / math.sqrt(aspect), d / 2 * math.sqrt(aspect)
    angle = 0.0 if kind == "circle" else float(rng.uniform(0.0, math.pi))
    centre = [float(c) for c in rng.uniform(0.0, L, size=2)]
    return {"kind": kind, "center": centre, "axes": [a, b], "angle": angle,
            "seed": int(rng.integers(2**31 - 1))}


def _check_body(body: dict) -> tuple[float, float, float]:
    kind = body.get("kind")
    a, b = (float(v) for v in body["axes"])
    if kind not in ("circle", "ellipse") or not (a > 0 and b > 0):
        raise PcgError(f"TMT: bad body {body!r} (kind circle|ellipse, axes > 0)")
    if kind == "circle" and a != b:
        raise PcgError(f"TMT: a circle needs equal axes, got {body['axes']!r}")
    return a, b, float(body.get("angle", 0.0))


def _ellipse_sdf_local(x: np.ndarray, y: np.ndarray, a: float, b: float) -> np.ndarray:
    """Exact signed distance to ``(x/a)^2 + (y/b)^2 = 1`` in the ellipse frame (Eberly
    2013; the root of ``F`` in ``q = s + 1 > 0``, so the bracket's left end ``q = z1``
    is exact even for points next to the major axis)."""
    if a < b:  # the formulation wants the major axis along x
        x, y, a, b = y, x, b, a
    ax, ay = np.abs(x), np.abs(y)
    if a == b:
        return np.hypot(ax, ay) - a
    r0 = (a / b) ** 2
    c0, z1 = r0 * ax / a, ay / b  # r0 z0, z1
    on_axis = z1 == 0.0
    z1s = np.where(on_axis, 1.0, z1)  # placeholder; the axis is handled in closed form

    def f(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t0, t1 = c0 / (q + r0 - 1), z1s / q
        return t0**2 + t1**2 - 1, -2 * (t0**2 / (q + r0 - 1) + t1**2 / q)

    lo, hi = z1s.copy(), np.hypot(c0, z1s)  # F(lo) >= 0 >= F(hi)
    for _ in range(200):
        val, der = f(lo)
        # Newton from the left of the root of a convex decreasing F stays left of it
        step = np.where(der < 0, -val / np.where(der < 0, der, -1.0), 0.0)
        new = np.clip(lo + np.maximum(step, 0.0), lo, hi)
        mid = 0.5 * (new + hi)  # bisection keeps the worst case linear
        left = f(mid)[0] >= 0
        lo, hi = np.where(left, mid, new), np.where(left, hi, mid)
        if np.all((np.abs(step) <= 1e-15 * lo) | (hi - lo <= 1e-15 * hi)):
            break
    s = lo - 1.0
    phi = s * np.hypot(ax / (s + r0), ay / lo)
    # on the major axis: inside the medial segment the closest point is off the axis
    e = (a * a - b * b) / a
    x0 = a * ax / (a - b * b / a)  # a^2 x / (a^2 - b^2)
    inner = -np.hypot(ax - x0, b * np.sqrt(np.clip(1 - (x0 / a) ** 2, 0.0, None)))
    phi_axis = np.where(ax < e, inner, ax - a)
    return np.where(on_axis, phi_axis, phi)


def sdf_points(body: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact signed distance of the (non-periodic) body at points ``(x, y)``."""
    a, b, th = _check_body(body)
    cx, cy = (float(c) for c in body["center"])
    dx, dy = np.asarray(x, dtype=np.float64) - cx, np.asarray(y, dtype=np.float64) - cy
    if body["kind"] == "circle":
        return np.hypot(dx, dy) - a
    c, s = math.cos(th), math.sin(th)
    return _ellipse_sdf_local(c * dx + s * dy, -s * dx + c * dy, a, b)


def image_distances(body: dict, x: np.ndarray, y: np.ndarray, L: float) -> np.ndarray:
    """Signed distances ``[9, ...]`` of the 9 periodic images nearest to each point (the
    centre offset wrapped into ``[-L/2, L/2)``, then shifted by ``{-L, 0, L}^2``)."""
    a, b, _ = _check_body(body)
    if 2 * max(a, b) >= L / 2:
        raise PcgError(f"TMT: body {body['axes']!r} too large for the box L = {L}")
    cx, cy = (float(c) for c in body["center"])
    dx = np.mod(np.asarray(x, dtype=np.float64) - cx + L / 2, L) - L / 2
    dy = np.mod(np.asarray(y, dtype=np.float64) - cy + L / 2, L) - L / 2
    here = {**body, "center": [0.0, 0.0]}
    return np.stack([sdf_points(here, dx + i * L, dy + j * L)
                     for i in (-1, 0, 1) for j in (-1, 0, 1)])


def signed_distance(body: dict, n: int, L: float) -> np.ndarray:
    """Exact periodic signed distance ``[n, n]`` on the grid ``x_i = i L / n`` ("ij"),
    negative inside: the minimum over periodic images (exact for a convex body smaller
    than L/2, whose images do not overlap)."""
    g = np.arange(n) * (L / n)
    x, y = np.meshgrid(g, g, indexing="ij")
    return image_distances(body, x, y, L).min(axis=0)


def body_mask(phi: np.ndarray | torch.Tensor, h: float, smooth: float):
    """Penalization mask from the signed distance: 1 inside, 0 outside, a sine ramp
    ``(1 - sin(pi phi / w)) / 2`` across ``|phi| < w / 2``, ``w = smooth h`` (sharp
    ``phi < 0`` if ``smooth = 0``).  The ramp has compact support, so fluid farther
    than ``w / 2`` is never penalized and the effective body of the ``eta -> 0`` limit
    grows by at most ``w / 2`` (a tanh ramp's tail would solidify a layer growing like
    ``log(1 / eta)``); ``chi >= 1/2`` exactly where ``phi <= 0``."""
    lib = torch if isinstance(phi, torch.Tensor) else np
    if smooth == 0:
        return (phi < 0) * 1.0
    w = smooth * h
    return 0.5 * (1 - lib.sin(math.pi * lib.clip(phi / w, -0.5, 0.5)))


# -- solver -----------------------------------------------------------------------------
class BrinkmanSolver:
    """Penalized Navier-Stokes on an ``n x n`` periodic box of side ``L`` (batched rows).

    States are velocity spectra ``u_hat [B, 2, n, n//2+1]``; ``chi [B, n, n]`` the masks
    (``set_mask`` once per run, with the step ``dt``).  See the module docstring."""

    def __init__(self, n: int, L: float, nu: float, eta: float, u_inf=(1.0, 0.0),
                 dtype: torch.dtype = torch.float64, device=None,
                 cg_tol: float = 1e-7, cg_maxiter: int = 2000):
        if n < 4 or n % 2 or nu <= 0 or eta <= 0 or L <= 0:
            raise PcgError(f"Brinkman: need even n >= 4, nu, eta, L > 0 (n={n}, nu={nu}, "
                           f"eta={eta}, L={L})")
        self.n, self.L, self.nu, self.eta, self.dtype = int(n), float(L), nu, eta, dtype
        self.h = self.L / self.n
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.u_inf = torch.as_tensor(u_inf, dtype=dtype, device=self.device).reshape(2)
        # the CG can only reach a few ulps of the operator's conditioning
        self.cg_tol = max(cg_tol, 100 * torch.finfo(dtype).eps)
        self.cg_maxiter = int(cg_maxiter)
        f = 2 * math.pi / self.L
        kx = torch.fft.fftfreq(n, dtype=torch.float64) * n * f
        ky = torch.fft.rfftfreq(n, dtype=torch.float64) * n * f
        kx, ky = kx[:, None].to(self.device), ky[None, :].to(self.device)
        self.k2 = (kx**2 + ky**2).to(dtype)  # Laplacian: full symbol
        dkx, dky = kx.clone(), ky.clone()
        dkx[n // 2], dky[0, n // 2] = 0.0, 0.0  # odd derivatives of real fields
        self.dk = torch.stack(torch.broadcast_tensors(dkx, dky)).to(dtype)  # [2, n, m]
        dk2 = (dkx**2 + dky**2).to(dtype)
        self.dk2_inv = torch.where(dk2 > 0, 1 / torch.where(dk2 > 0, dk2, 1.0), 0.0)
        self.mask = dealias_mask(n, self.device)
        # Parseval weights of the half spectrum: mean(f g) = sum(w Re(conj(F) G)) / n^4
        w = torch.full((n // 2 + 1,), 2.0, dtype=dtype, device=self.device)
        w[0], w[-1] = 1.0, 1.0
        self.pw = w / n**4
        self.chi: torch.Tensor | None = None
        self.dt = 0.0
        self.cg_iters: list[int] = []

    @property
    def _cdtype(self) -> torch.dtype:
        return torch.complex128 if self.dtype == torch.float64 else torch.complex64

    def grid(self) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.arange(self.n, dtype=self.dtype, device=self.device) * self.h
        return torch.meshgrid(g, g, indexing="ij")

    # -- spectral helpers -----------------------------------------------------------------
    def fft(self, f: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft2(f)

    def ifft(self, fh: torch.Tensor) -> torch.Tensor:
        return torch.fft.irfft2(fh, s=(self.n, self.n))

    def project(self, uh: torch.Tensor) -> torch.Tensor:
        """Spectral Leray projection of ``[B, 2, n, m]`` spectra (Nyquist-zeroed k)."""
        return uh - self.dk * ((self.dk * uh).sum(dim=-3, keepdim=True) * self.dk2_inv)

    def div_hat(self, vh: torch.Tensor) -> torch.Tensor:
        return 1j * (self.dk * vh).sum(dim=-3)

    def grad(self, ph: torch.Tensor) -> torch.Tensor:
        """Physical gradient ``[B, 2, n, n]`` of a spectrum ``[B, n, m]``."""
        return self.ifft(1j * self.dk * ph[:, None])

    def _dot(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Domain mean of the product of two real fields given by their spectra."""
        return ((a.conj() * b).real * self.pw).sum(dim=(-2, -1))

    def advection_hat(self, uh: torch.Tensor) -> torch.Tensor:
        """De-aliased ``-div(u u)`` (= ``-(u . grad) u`` for div-free u), unprojected."""
        u = self.ifft(uh * self.mask)
        uu = self.fft(torch.stack([u[:, 0] ** 2, u[:, 0] * u[:, 1], u[:, 1] ** 2], dim=1))
        ik = 1j * self.dk
        nx = ik[0] * uu[:, 0] + ik[1] * uu[:, 1]
        ny = ik[0] * uu[:, 1] + ik[1] * uu[:, 2]
        return -torch.stack([nx, ny], dim=1) * self.mask

    # -- step A: advection + viscosity ----------------------------------------------------
    def _rk3(self, uh: torch.Tensor, dt: float) -> torch.Tensor:
        """Lawson IF-RK3 (Kutta: c = 0, 1/2, 1; b = 1/6, 2/3, 1/6) on the Leray-projected
        advection with exact viscous factors."""
        e1 = torch.exp(-self.nu * self.k2 * dt)
        e2 = torch.exp(-self.nu * self.k2 * (dt / 2))

        def rhs(v: torch.Tensor) -> torch.Tensor:
            return self.project(self.advection_hat(v))

        k1 = rhs(uh)
        k2 = rhs(e2 * (uh + 0.5 * dt * k1))
        k3 = rhs(e1 * (uh - dt * k1) + 2 * dt * (e2 * k2))
        return e1 * uh + (dt / 6) * (e1 * k1 + 4 * (e2 * k2) + k3)

    # -- step B: implicit penalization + pressure -----------------------------------------
    def _cg(self, rhs: torch.Tensor, x0: torch.Tensor, atol: torch.Tensor) -> torch.Tensor:
        """Preconditioned CG for ``-div(m^-1 grad q) = rhs`` (spectra ``[B, n, m]``), per
        row until ``rms(residual) <= atol``; the spectral Laplacian preconditions."""
        minv = self.minv

        def op(q: torch.Tensor) -> torch.Tensor:
            return -self.div_hat(self.fft(minv * self.grad(q)))

        x = x0
        r = rhs - op(x)
        z = r * self.dk2_inv
        d = z
        rz = self._dot(r, z)
        it = 0
        while it < self.cg_maxiter:
            active = self._dot(r, r).sqrt() > atol
            if not bool(active.any()):
                break
            od = op(d)
            dod = self._dot(d, od)
            # converged rows are frozen, so a row's result does not depend on its batch
            alpha = torch.where(active & (dod > 0), rz / torch.where(dod > 0, dod, 1.0), 0.0)
            x = x + alpha[:, None, None] * d
            r = r - alpha[:, None, None] * od
            z = r * self.dk2_inv
            rz_new = self._dot(r, z)
            beta = torch.where(rz > 0, rz_new / torch.where(rz > 0, rz, 1.0), 0.0)
            d = z + beta[:, None, None] * d
            rz = rz_new
            it += 1
        self.cg_iters.append(it)
        return x

    def _atol(self, dt: float) -> torch.Tensor:
        # div u' = -dt * residual: stop when the divergence is cg_tol of u_scale / h
        scale = max(float(self.u_inf.abs().max()), 1.0) / self.h
        return torch.tensor(self.cg_tol * scale / dt, dtype=self.dtype, device=self.device)

    def set_mask(self, chi: torch.Tensor, dt: float) -> None:
        """Fix the masks ``[B, n, n]`` and step ``dt``; solves the responses to a unit
        mean pressure gradient along x and y (one CG solve each)."""
        self.chi = chi.to(self.dtype)
        self.dt = float(dt)
        self.minv = (1 / (1 + self.dt * self.chi / self.eta))[:, None]  # [B, 1, n, n]
        b = self.chi.shape[0]
        atol = self._atol(self.dt)
        resp = []
        for j in range(2):
            e = torch.zeros(2, 1, 1, dtype=self.dtype, device=self.device)
            e[j] = 1.0
            rhs = -self.div_hat(self.fft(self.minv * e))
            q = self._cg(rhs, torch.zeros_like(rhs), atol)
            resp.append(self.dt * self.minv * (e - self.grad(q)))
        self.resp = torch.stack(resp, dim=-1)  # [B, 2, n, n, 2]: velocity per unit G_j
        self.resp_mean = self.resp.mean(dim=(2, 3))  # [B, 2 (component), 2 (j)]
        self.q = torch.zeros(b, self.n, self.n // 2 + 1, dtype=self._cdtype,
                             device=self.device)
        self.q_old = self.q
        self.g = torch.zeros(b, 2, dtype=self.dtype, device=self.device)

    def _penalize(self, uh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Step B on spectra; returns (new spectra, new physical velocity)."""
        w = self.ifft(uh)
        rhs = -self.div_hat(self.fft(self.minv * w)) / self.dt
        guess = 2 * self.q - self.q_old  # linear extrapolation in time
        self.q_old, self.q = self.q, self._cg(rhs, guess, self._atol(self.dt))
        ua = self.minv * (w - self.dt * self.grad(self.q))
        # mean pressure gradient G holding <u> = U_inf (2x2 solve per row)
        self.g = torch.linalg.solve(self.resp_mean, self.u_inf - ua.mean(dim=(2, 3)))
        u = ua + (self.resp * self.g[:, None, None, None, :]).sum(-1)
        uh = self.project(self.fft(u))
        return uh, u

    def step(self, uh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One split step of size ``self.dt``: A (advection, viscosity), then B."""
        return self._penalize(self._rk3(uh, self.dt))

    # -- diagnostics ----------------------------------------------------------------------
    def velocity(self, uh: torch.Tensor) -> torch.Tensor:
        return self.ifft(uh)

    def divergence(self, uh: torch.Tensor) -> torch.Tensor:
        """Spectral divergence (physical, [B, n, n])."""
        return self.ifft(self.div_hat(uh))

    def pressure(self, uh: torch.Tensor, chi: torch.Tensor | None = None) -> torch.Tensor:
        """Zero-mean pressure [B, n, n] of the PPE ``-Lap p = div div(u u) + div(chi u /
        eta)`` (de-aliased advection; ``chi`` defaults to the current masks)."""
        chi = self.chi if chi is None else chi
        force = self.advection_hat(uh)  # -div(u u)
        if chi is not None:
            force = force - self.fft(chi[:, None] * self.ifft(uh)) / self.eta
        # Lap p = div(force): p_hat = -i k . F_hat / |k|^2
        return self.ifft(-self.div_hat(force) * self.dk2_inv)


# -- generation -------------------------------------------------------------------------
def _perturbation(seed: int, x: np.ndarray, y: np.ndarray, L: float) -> np.ndarray:
    """Divergence-free random velocity [2, n, n] of unit rms from a streamfunction with
    the modes ``1 <= |k| <= 4`` (in units of 2 pi / L): resolution-independent."""
    rng = np.random.default_rng(seed)
    f = 2 * math.pi / L
    u = np.zeros((2, *x.shape))
    for i in range(-4, 5):
        for j in range(0, 5):
            if (j == 0 and i <= 0) or not 1 <= i * i + j * j <= 16:
                continue
            ca, cb = rng.standard_normal(2)
            ph = f * (i * x + j * y)
            dpsi = -ca * np.sin(ph) + cb * np.cos(ph)  # d/dphase of ca cos + cb sin
            u[0] += f * j * dpsi  # u = d psi / dy
            u[1] -= f * i * dpsi  # v = -d psi / dx
    return u / np.sqrt((u**2).sum(0).mean())


def simulate_batch(bodies: list[dict], cfg: TMTConfig,
                   dtype: torch.dtype = torch.float64) -> tuple[np.ndarray, list[dict]]:
    """Simulate one sample per body, batched: ``[B, 4, n, n]`` (u, v, p, phi) float64 and
    one diagnostics dict per body (see :func:`simulate_sample`)."""
    n, L, h = cfg.n, cfg.L, cfg.h
    g = np.arange(n) * h
    x, y = np.meshgrid(g, g, indexing="ij")
    phi = np.stack([signed_distance(b, n, L) for b in bodies])
    u0 = np.stack([cfg.u_inf * (np.array([1.0, 0.0])[:, None, None]
                                + cfg.perturb * _perturbation(b["seed"], x, y, L))
                   for b in bodies])
    solver = BrinkmanSolver(n, L, cfg.nu, cfg.eta, (cfg.u_inf, 0.0), dtype=dtype,
                            cg_tol=cfg.cg_tol, cg_maxiter=cfg.cg_maxiter)
    chi = torch.from_numpy(body_mask(phi, h, cfg.smooth)).to(dtype)
    uh = solver.project(solver.fft(torch.from_numpy(u0).to(dtype)))
    fields, diags = _integrate(solver, uh, chi, cfg)
    out = np.concatenate([fields, phi[:, None]], axis=1)
    for d, b in zip(diags, bodies, strict=True):
        d["re"] = abs(cfg.u_inf) * 2 * math.sqrt(b["axes"][0] * b["axes"][1]) / cfg.nu
    return out, diags


def _integrate(solver: BrinkmanSolver, uh: torch.Tensor, chi: torch.Tensor,
        cfg: TMTConfig) -> tuple[np.ndarray, list[dict]]:
    """Integrate to ``cfg.t_end`` from spectra ``uh`` with masks ``chi``; returns
    ``[B, 3, n, n]`` (u, v, p) float64 and per-row diagnostics."""
    dt = cfg.cfl * cfg.h / cfg.u_ref
    steps = max(1, math.ceil(cfg.t_end / dt - 1e-12))
    dt = cfg.t_end / steps
    solver.set_mask(chi, dt)
    done, total, halvings = 0, 0, 0
    courant = torch.zeros(chi.shape[0], dtype=solver.dtype)
    while done < steps:
        uh_new, u = solver.step(uh)
        c = float((u[:, 0].abs() + u[:, 1].abs()).amax()) * solver.dt / cfg.h
        if not math.isfinite(c) or c > 2 * cfg.cfl:
            if halvings >= 6:
                raise PcgError(f"TMT: unstable (Courant {c:.3g} after {halvings} halvings)")
            halvings += 1  # redo this step and the rest with dt / 2
            steps, done = 2 * (steps - done), 0
            solver.set_mask(chi, solver.dt / 2)
            continue
        uh, done, total = uh_new, done + 1, total + 1
        speed = (u[:, 0].abs() + u[:, 1].abs()).amax(dim=(-2, -1))
        courant = torch.maximum(courant, speed * (solver.dt / cfg.h))
    u = solver.velocity(uh)
    p = solver.pressure(uh)
    # measured on the physical output (re-transformed), as a user of the data would
    div = solver.divergence(solver.fft(u)).abs().amax(dim=(-2, -1))
    grad_scale = solver.ifft(1j * solver.dk[None, :, None] * uh[:, None]).abs().amax(
        dim=(1, 2, 3, 4))
    inside = chi >= 0.5
    speed = torch.sqrt(u[:, 0] ** 2 + u[:, 1] ** 2)
    noslip = torch.where(inside, speed, 0.0).amax(dim=(-2, -1))
    diags = [{"divergence_max": float(div[i]),
              "divergence_rel": float(div[i] / grad_scale[i]),
              "noslip_max": float(noslip[i]),
              "steps": total, "time": cfg.t_end, "dt": solver.dt,
              "courant_max": float(courant[i]),
              "cg_iters_mean": float(np.mean(solver.cg_iters)),
              "cg_iters_max": int(max(solver.cg_iters)),
              "mean_pressure_gradient": [float(v) for v in solver.g[i]]}
             for i in range(u.shape[0])]
    fields = torch.cat([u, p[:, None]], dim=1).cpu().numpy().astype(np.float64)
    return fields, diags


def simulate_sample(body: dict, cfg: TMTConfig,
                    dtype: torch.dtype = torch.float64) -> tuple[np.ndarray, dict]:
    """One sample ``[4, n, n]`` (u, v, p, phi) float64 at ``cfg.t_end`` from rest plus the
    body's seeded perturbation; diagnostics: ``divergence_max`` (max |div u|, spectral),
    ``divergence_rel`` (/ max |grad u|), ``noslip_max`` (max |u| where chi >= 1/2, i.e.
    phi < 0), ``steps``, ``time``, ``dt``, ``courant_max``, CG iteration counts,
    ``mean_pressure_gradient`` G (the drag per unit area) and ``re`` (U_inf D / nu, D
    the equal-area diameter)."""
    out, diags = simulate_batch([body], cfg, dtype)
    return out[0], diags[0]


def generate(n_samples: int, cfg: TMTConfig, seed: int, progress: bool = False,
             batch_size: int = 16, desc: str = "generating TMT data") -> np.ndarray:
    """``[N, 4, n, n]`` float32 TMT samples, one random body each (drawn in order from
    ``default_rng(seed)``), simulated ``batch_size`` at a time in float64."""
    if n_samples < 0 or batch_size < 1:
        raise PcgError(f"TMT: need n_samples >= 0 and batch_size >= 1, got "
                       f"{n_samples}, {batch_size}")
    rng = np.random.default_rng(seed)
    bodies = [random_body(rng, cfg.L) for _ in range(n_samples)]
    out = np.empty((n_samples, 4, cfg.n, cfg.n), dtype=np.float32)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_samples, desc=desc, unit="sample")
    for i in range(0, n_samples, batch_size):
        chunk = bodies[i : i + batch_size]
        out[i : i + len(chunk)] = simulate_batch(chunk, cfg)[0]
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return out


# -- residual ---------------------------------------------------------------------------
def tmt_residual(x: torch.Tensor, L: float = 2 * math.pi,
                 delta: float | None = None) -> torch.Tensor:
    """TMT constraint residual ``[N, 4, n, n]`` of samples ``x = (u, v, p, phi)``::

        [div u,  exp(-(phi/delta)^2) u . n_phi,  0.2 (|grad phi| - 1),  0.02 Lap p],

    ``n_phi = grad phi / |grad phi|``; Fourier derivatives (first ones with zeroed
    Nyquist wavenumbers, the Laplacian with the full symbol).  ``delta`` defaults to two
    grid spacings ``2 L / n``, the width of the wall band where no-penetration is
    checked.  The eikonal term is not exactly 0 on exact data: the SDF has kinks on the
    medial axis and the periodic seams, which the spectral derivative smears (Gibbs) over
    a few cells around them."""
    n = x.shape[-1]
    delta = 2 * L / n if delta is None else float(delta)
    f = 2 * math.pi / L
    kx = torch.fft.fftfreq(n, dtype=torch.float64, device=x.device)[:, None] * n * f
    ky = torch.fft.rfftfreq(n, dtype=torch.float64, device=x.device)[None, :] * n * f
    k2 = (kx**2 + ky**2).to(x.dtype)
    dkx, dky = kx.clone(), ky.clone()
    dkx[n // 2], dky[0, n // 2] = 0.0, 0.0
    dkx, dky = dkx.to(x.dtype), dky.to(x.dtype)

    def dx(fh: torch.Tensor) -> torch.Tensor:
        return torch.fft.irfft2(1j * dkx * fh, s=(n, n))

    def dy(fh: torch.Tensor) -> torch.Tensor:
        return torch.fft.irfft2(1j * dky * fh, s=(n, n))

    xh = torch.fft.rfft2(x)
    u, v, phi = x[:, 0], x[:, 1], x[:, 3]
    div = dx(xh[:, 0]) + dy(xh[:, 1])
    px, py = dx(xh[:, 3]), dy(xh[:, 3])
    gnorm = torch.sqrt(px**2 + py**2)
    un = (u * px + v * py) / gnorm.clamp_min(1e-12)
    wall = torch.exp(-((phi / delta) ** 2)) * un
    lap_p = torch.fft.irfft2(-k2 * xh[:, 2], s=(n, n))
    return torch.stack([div, wall, 0.2 * (gnorm - 1), 0.02 * lap_p], dim=1)
