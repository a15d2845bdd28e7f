"""2-D Darcy flow ``-div(K grad p) = f`` on the unit square with zero normal flux: numerics
shared by the ``darcy`` task and its solver chart (facts from PIDM's generator and the PBFM
protocol, no code copied; docs/protocols.md, "Darcy").

Grid: ``n x n`` nodes with the boundary, ``x_i = i h``, ``h = 1/(n-1)``; axis 0 x, axis 1 y.
``log K``: Karhunen-Loeve field, covariance ``exp(-|x - x'| / length)``, from the leading
eigenpairs of the discrete covariance matrix (:func:`kl_basis`, cached per (n, modes, length)),
``G = V diag(sqrt(lam)) z``, ``z ~ N(0, I)``; eigenvectors deterministic (equal-eigenvalue
clusters diagonalize ``(x, y) -> (y, x)``, signs fixed by a fixed random probe vector).
System ``A(K) p = M f``: vertex-centred finite volumes, dual cells ``M`` (``h^2``; ``h^2/2`` on
edges, ``h^2/4`` at corners), face flux ``K_face (p_a - p_b) / h`` x face length (``h``; ``h/2``
on boundary rows), ``K_face`` the harmonic mean, zero boundary flux; ``A`` symmetric positive
semi-definite (null space: constants), so CG applies.  Zero mean: the direct solver pins node 0,
solves by sparse LU (SuperLU) and removes the plain grid mean; CG iterates are mean-corrected
alike.  :func:`evaluator_residual`: PBFM/PIDM ``-K p_xx - K_x p_x - K p_yy - K_y p_y - f``
(centred, interior nodes) plus the outward normal derivative on every boundary node
(second-order one-sided, corners once per edge) -- independent of the FV system.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg
import torch
import torch.nn.functional as F

from pcgbench.errors import PcgError

# ---------------------------------------------------------------- grid, source, KL


def spacing(n: int) -> float:
    """Node spacing ``h = 1/(n-1)`` of the ``n x n`` grid with boundary nodes."""
    if n < 4:
        raise PcgError(f"Darcy grid needs at least 4 nodes per side, got {n}")
    return 1.0 / (n - 1)


def source_field(n: int, width: float = 0.125, rate: float = 10.0) -> np.ndarray:
    """``f = +rate`` on ``[0, width]^2``, ``-rate`` on ``[1-width, 1]^2``, else 0 -> [n, n]."""
    x = np.arange(n) * spacing(n)
    eps = 1e-9
    lo = x <= width + eps
    hi = x >= 1.0 - width - eps
    f = np.zeros((n, n))
    f[np.ix_(lo, lo)] = rate
    f[np.ix_(hi, hi)] = -rate
    return f


def dual_areas(n: int) -> np.ndarray:
    """Dual-cell areas of the nodes (trapezoid weights): ``h^2`` inside, half on edges,
    a quarter at corners -> [n, n]; they sum to 1."""
    h = spacing(n)
    w = np.ones(n)
    w[0] = w[-1] = 0.5
    return np.outer(w, w) * h * h


def covariance_matrix(n: int, length: float) -> np.ndarray:
    """``exp(-|x_a - x_b| / length)`` between all nodes (flattened row-major) -> [n^2, n^2]."""
    x = np.arange(n) * spacing(n)
    xx, yy = np.meshgrid(x, x, indexing="ij")
    pts = np.stack([xx.ravel(), yy.ravel()], axis=1)
    d = np.sqrt(((pts[:, None, :] - pts[None, :, :]) ** 2).sum(-1))
    return np.exp(-d / length)


@functools.lru_cache(maxsize=8)
def kl_basis(n: int, modes: int, length: float) -> tuple[np.ndarray, np.ndarray]:
    """The ``modes`` largest eigenpairs of the discrete covariance: eigenvalues
    ``lam`` [modes] (descending) and orthonormal eigenvectors ``V`` [n^2, modes]
    (deterministic basis, see the module docstring).  Cached in memory."""
    size = n * n
    if not 1 <= modes <= size:
        raise PcgError(f"Darcy KL modes must lie in [1, {size}] for n={n}, got {modes}")
    cov = covariance_matrix(n, length)
    # one extra eigenpair so that a degenerate cluster cut by the truncation is detected
    extra = min(size, modes + 1)
    lam, vec = scipy.linalg.eigh(cov, subset_by_index=[size - extra, size - 1])
    lam, vec = lam[::-1].copy(), vec[:, ::-1].copy()
    swap = np.arange(size).reshape(n, n).T.ravel()  # (x, y) -> (y, x)
    start = 0
    while start < extra:  # rotate clusters of equal eigenvalues to a canonical basis
        stop = start + 1
        while stop < extra and abs(lam[stop] - lam[start]) <= 1e-9 * abs(lam[start]):
            stop += 1
        if stop - start > 1:
            block = vec[:, start:stop]
            s = block.T @ block[swap]  # the reflection restricted to the cluster
            _, rot = np.linalg.eigh(0.5 * (s + s.T))
            vec[:, start:stop] = block @ rot[:, ::-1]
        start = stop
    probe = np.random.default_rng(12345).standard_normal(size)
    signs = np.sign(probe @ vec)
    signs[signs == 0] = 1.0
    vec = vec * signs
    lam = np.clip(lam, 0.0, None)[:modes].copy()
    vec = np.ascontiguousarray(vec[:, :modes])
    lam.flags.writeable = False  # shared through the cache
    vec.flags.writeable = False
    return lam, vec


def sample_log_permeability(
    n: int, modes: int, length: float, z: np.ndarray
) -> np.ndarray:
    """KL fields ``G`` [N, n, n] from standard-normal coefficients ``z`` [N, modes]."""
    lam, vec = kl_basis(n, modes, length)
    return ((z * np.sqrt(lam)) @ vec.T).reshape(-1, n, n)


# ---------------------------------------------------------------- the FV system (numpy)


def _face_weights(n: int) -> np.ndarray:
    w = np.ones(n)
    w[0] = w[-1] = 0.5
    return w


def transmissibilities_np(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Face coefficients of ``A(K)`` for a field ``K`` [..., n, n] (one or a batch):
    ``tx`` [..., n-1, n] between (i, j) and (i+1, j), ``ty`` [..., n, n-1] between (i, j)
    and (i, j+1) (harmonic-mean permeability times face length / h)."""
    n = k.shape[-1]
    w = _face_weights(n)
    a, b = k[..., 1:, :], k[..., :-1, :]
    c, d = k[..., :, 1:], k[..., :, :-1]
    return 2.0 * a * b / (a + b) * w[None, :], 2.0 * c * d / (c + d) * w[:, None]


def fv_matrix(k: np.ndarray) -> scipy.sparse.csr_matrix:
    """The symmetric FV matrix ``A(K)`` [n^2, n^2] (row-major node numbering)."""
    n = k.shape[0]
    tx, ty = transmissibilities_np(k)
    idx = np.arange(n * n).reshape(n, n)
    rows, cols, vals = [], [], []
    for t, a, b in ((tx, idx[:-1], idx[1:]), (ty, idx[:, :-1], idx[:, 1:])):
        a, b, t = a.ravel(), b.ravel(), t.ravel()
        rows += [a, b, a, b]
        cols += [a, b, b, a]
        vals += [t, t, -t, -t]
    mat = scipy.sparse.coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n * n,) * 2
    )
    return mat.tocsr()


def fv_rhs(f: np.ndarray) -> np.ndarray:
    """``M f`` made compatible: ``f`` minus its area-weighted mean (a no-op for the Darcy
    source, whose two squares cancel exactly), times the dual-cell areas -> [n, n]."""
    m = dual_areas(f.shape[0])
    f = f - (m * f).sum() / m.sum()
    return m * f


def solve_pressure(k: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Direct sparse solve of ``A(K) p = M f`` with zero grid mean -> p [n, n] (float64).

    Node 0 is pinned (its row is implied by the others: rows of ``A`` and the compatible
    right-hand side both sum to zero), the SPD reduced system is factorized by SuperLU,
    and the mean is removed."""
    n = k.shape[0]
    a = fv_matrix(np.asarray(k, dtype=np.float64)).tocsc()[1:, 1:]
    b = fv_rhs(np.asarray(f, dtype=np.float64)).ravel()
    p = np.zeros(n * n)
    p[1:] = scipy.sparse.linalg.splu(a, permc_spec="MMD_AT_PLUS_A").solve(b[1:])
    p -= p.mean()
    return p.reshape(n, n)


def solve_pressure_banded(k: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Batched direct solve of ``A(K) p = M f`` with zero grid mean: ``k`` [B, n, n] ->
    p [B, n, n] (float64), the same system and pinning as :func:`solve_pressure`, by
    LAPACK's banded Cholesky (``dpbsv``, as ``scipy.linalg.solveh_banded``; row-major
    numbering gives half-bandwidth n, so ~n^4 flops per field, no fill-in search).  The
    limit K -> infinity of the K-iteration CG decoder of the Darcy chart."""
    k = np.asarray(k, dtype=np.float64)
    b, n, _ = k.shape
    rhs = fv_rhs(np.asarray(f, dtype=np.float64)).ravel()[1:]
    out = np.zeros((b, n * n))
    ab = _band_storage(k)  # node 0 pinned (its row is implied by the others)
    for i in range(b):
        _, x, info = scipy.linalg.lapack.dpbsv(ab[i], rhs)  # the solveh_banded kernel
        if info != 0:
            raise PcgError(f"Darcy banded solve failed (LAPACK dpbsv info={info}): the "
                           "permeability is not positive and finite")
        out[i, 1:] = x
    out -= out.mean(axis=1, keepdims=True)
    return out.reshape(b, n, n)


def _band_storage(k: np.ndarray) -> np.ndarray:
    """Upper band storage ``ab`` [B, n+1, n^2-1] of the pinned systems (node 0 removed) of
    the fields ``k`` [B, n, n]: ``ab[:, n + r - c, c] = A[r, c]`` for r <= c (LAPACK
    ``dpb*`` layout, half-bandwidth n)."""
    b, n, _ = k.shape
    tx, ty = transmissibilities_np(k)
    diag = np.zeros((b, n, n))
    diag[:, 1:] += tx
    diag[:, :-1] += tx
    diag[:, :, 1:] += ty
    diag[:, :, :-1] += ty
    m = n * n - 1
    ab = np.zeros((b, n + 1, m))
    ab[:, n] = diag.reshape(b, -1)[:, 1:]
    east = np.zeros((b, n, n))
    east[:, :, 1:] = -ty  # A[(r, c-1), (r, c)]
    ab[:, n - 1, 1:] = east.reshape(b, -1)[:, 2:]
    south = np.zeros((b, n, n))
    south[:, 1:] = -tx  # A[(r-1, c), (r, c)]
    ab[:, 0, n - 1:] = south.reshape(b, -1)[:, n:]
    return ab


def _not_positive(info: int) -> PcgError:
    return PcgError(f"Darcy direct solve failed (LAPACK info={info}): the permeability is "
                    "not positive and finite")


class PressureFactor:
    """The Cholesky factors of the FV systems ``A(K)`` of a batch of fields, for repeated
    direct solves ``A(K) p = r`` with zero grid mean (any right-hand side ``r`` whose
    entries sum to zero, as every compatible one does).

    Node 0 is pinned (its row is implied by the others for such an ``r``), the rest
    factorized once (``backend`` "auto"): on CPU by LAPACK's banded Cholesky
    (``dpbtrf``, half-bandwidth n, ~n^4 flops per field; "banded"), elsewhere (CUDA) by a
    batched block-tridiagonal Cholesky ("blocks", any device) in
    torch on the device (the row-major ordering makes ``A`` block tridiagonal with n x n
    blocks whose couplings are diagonal; pinning = adding ``A[0, 0]`` to ``A[0, 0]``, which
    gives the same solution, since 1^T r = 0 forces p_0 = 0).  Solves run in float64 and
    return float64 on the fields' device."""

    def __init__(self, k: torch.Tensor, backend: str = "auto"):
        k = k.detach().to(torch.float64)
        if not bool(torch.isfinite(k).all()) or bool((k <= 0).any()):
            raise _not_positive(-1)
        self.shape = tuple(k.shape)
        self.device = k.device
        if backend not in ("auto", "banded", "blocks"):
            raise ValueError(f"unknown backend {backend!r}")
        if backend == "auto":
            backend = "banded" if k.device.type == "cpu" else "blocks"
        if backend == "banded" and k.device.type != "cpu":
            raise ValueError("the banded LAPACK backend runs on CPU tensors only")
        self.backend = backend
        if backend == "banded":
            ab = _band_storage(k.numpy())
            self.bands = []
            for i in range(len(ab)):
                c, info = scipy.linalg.lapack.dpbtrf(ab[i])
                if info != 0:
                    raise _not_positive(info)
                self.bands.append(c)
        else:
            self._factor_blocks(k)

    def _factor_blocks(self, k: torch.Tensor) -> None:
        tx, ty = transmissibilities(k)
        diag = fv_diagonal(tx, ty)
        d = torch.diag_embed(diag) + torch.diag_embed(-ty, 1) + torch.diag_embed(-ty, -1)
        d[:, 0, 0, 0] = d[:, 0, 0, 0] + diag[:, 0, 0]  # pin node 0
        n = k.shape[-1]
        chol, info = torch.linalg.cholesky_ex(d[:, 0])
        self.L, self.M = [chol], [None]
        for i in range(1, n):
            # M_i = C_i L_{i-1}^-T with C_i = -diag(tx[i-1]) the coupling of rows i-1, i
            mt = torch.linalg.solve_triangular(self.L[-1], torch.diag_embed(-tx[:, i - 1]),
                                               upper=False)
            m = mt.transpose(-1, -2)
            chol, inf_i = torch.linalg.cholesky_ex(d[:, i] - m @ mt)
            info = torch.maximum(info, inf_i)
            self.L.append(chol)
            self.M.append(m)
        if bool((info != 0).any()):
            raise _not_positive(int(info.max()))

    def solve(self, rhs: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """p [B, n, n] (float64, zero grid mean) with ``A(K) p = rhs`` for ``rhs``
        [B, n, n] (entries summing to zero per field); ``rows`` (bool [B]): solve only
        those fields, the others are zero."""
        rhs = rhs.detach().to(device=self.device, dtype=torch.float64)
        b, n, _ = self.shape
        if rows is None:
            rows = torch.ones(b, dtype=torch.bool)
        if self.backend == "banded":
            out = np.zeros((b, n * n))
            flat = rhs.reshape(b, -1).numpy()
            for i in np.flatnonzero(rows.cpu().numpy()):
                x, info = scipy.linalg.lapack.dpbtrs(self.bands[i], flat[i, 1:])
                if info != 0:
                    raise _not_positive(info)
                out[i, 1:] = x
            p = torch.from_numpy(out).reshape(b, n, n)
        else:
            p = self._solve_blocks(rhs) * rows.to(self.device).view(-1, 1, 1)
        return p - p.mean(dim=(1, 2), keepdim=True)

    def _solve_blocks(self, rhs: torch.Tensor) -> torch.Tensor:
        n = rhs.shape[1]
        tri = torch.linalg.solve_triangular
        y = [tri(self.L[0], rhs[:, 0, :, None], upper=False)]
        for i in range(1, n):
            y.append(tri(self.L[i], rhs[:, i, :, None] - self.M[i] @ y[-1], upper=False))
        x = [tri(self.L[-1].transpose(-1, -2), y[-1], upper=True)]
        for i in range(n - 2, -1, -1):
            x.append(tri(self.L[i].transpose(-1, -2),
                         y[i] - self.M[i + 1].transpose(-1, -2) @ x[-1], upper=True))
        return torch.stack([v[..., 0] for v in reversed(x)], dim=1)


class _DirectPressure(torch.autograd.Function):
    """p(K) = the zero-mean solution of A(K) p = M f by a direct solve; backward by the
    implicit-function theorem (paper App. "solver decoder": D z = -(D_z F)^-1 D_y F): with
    A lambda = P g (g = dL/dp, P removing its mean), dL/dK = -d/dK <lambda, A(K) p> at
    fixed lambda, p -- one more solve with the same factors, no iterations unrolled."""

    @staticmethod
    def forward(ctx, k: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        factor = PressureFactor(k)
        p = factor.solve(b.expand(k.shape))
        ctx.factor = factor
        ctx.save_for_backward(k, p)
        return p.to(k.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):  # noqa: ANN001, ANN205
        k, p = ctx.saved_tensors
        g = grad.to(torch.float64)
        g = g - g.mean(dim=(1, 2), keepdim=True)
        rows = g.flatten(1).abs().amax(1) > 0  # a detached half of the batch: no solve
        lam = ctx.factor.solve(g, rows)
        with torch.enable_grad():
            kk = k.detach().to(torch.float64).requires_grad_(True)
            ap = fv_apply(p, *transmissibilities(kk))
            (gk,) = torch.autograd.grad(ap, kk, -lam)
        return gk.to(k.dtype), None


def pressure_direct(k: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """The exact (direct-solve) zero-mean pressure of the FV system ``A(K) p = M f`` for
    ``k`` [B, n, n] and source ``f`` [n, n] (compatible) -> [B, n, n] in ``k``'s dtype:
    the K -> infinity limit of :func:`cg_pressure`, differentiable in ``k`` through the
    implicit (adjoint) gradient (:class:`_DirectPressure`)."""
    m = torch.as_tensor(dual_areas(k.shape[-1]), dtype=torch.float64, device=k.device)
    return _DirectPressure.apply(k, m * f.to(device=k.device, dtype=torch.float64))


def fv_residual_np(p: np.ndarray, k: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Discrete residual ``A(K) p - M f`` of one field (float64) -> [n, n]."""
    return (fv_matrix(k) @ p.ravel()).reshape(p.shape) - fv_rhs(f)


# ---------------------------------------------------------------- the FV system (torch)


def transmissibilities(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched :func:`transmissibilities_np`: ``k`` [B, n, n] -> (tx [B, n-1, n],
    ty [B, n, n-1]); differentiable."""
    n = k.shape[-1]
    w = torch.ones(n, dtype=k.dtype, device=k.device)
    w[0] = w[-1] = 0.5
    kx = 2.0 * k[:, 1:] * k[:, :-1] / (k[:, 1:] + k[:, :-1])
    ky = 2.0 * k[:, :, 1:] * k[:, :, :-1] / (k[:, :, 1:] + k[:, :, :-1])
    return kx * w[None, None, :], ky * w[None, :, None]


def fv_apply(v: torch.Tensor, tx: torch.Tensor, ty: torch.Tensor) -> torch.Tensor:
    """``A(K) v`` for ``v`` [B, n, n], matrix-free (sum of face fluxes)."""
    fx = tx * (v[:, 1:] - v[:, :-1])
    fy = ty * (v[:, :, 1:] - v[:, :, :-1])
    return F.pad(fx, (0, 0, 1, 0)) - F.pad(fx, (0, 0, 0, 1)) + F.pad(fy, (1, 0)) - F.pad(fy, (0, 1))


def fv_diagonal(tx: torch.Tensor, ty: torch.Tensor) -> torch.Tensor:
    """diag(A(K)) [B, n, n] (the Jacobi preconditioner)."""
    return F.pad(tx, (0, 0, 1, 0)) + F.pad(tx, (0, 0, 0, 1)) + F.pad(ty, (1, 0)) + F.pad(ty, (0, 1))


def fv_residual(p: torch.Tensor, k: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """Cell-averaged FV residual ``(A(K) p - M f) / M`` [B, n, n] (units of f) for
    ``p, k`` [B, n, n] and ``f`` [n, n] (already compatible)."""
    n = p.shape[-1]
    m = torch.as_tensor(dual_areas(n), dtype=p.dtype, device=p.device)
    return fv_apply(p, *transmissibilities(k)) / m - f.to(p.dtype)


def _bsum(a: torch.Tensor) -> torch.Tensor:
    return a.flatten(1).sum(1).view(-1, 1, 1)


def cg_init(b: torch.Tensor, diag: torch.Tensor) -> torch.Tensor:
    """CG state ``[p, r, d]`` stacked on dim 1 -> [B, 3, n, n], warm start p = 0."""
    p = torch.zeros_like(diag)
    r = b.expand_as(diag)
    return torch.stack([p, r, r / diag], dim=1)


def cg_floor(b: torch.Tensor, diag: torch.Tensor, rel: float | None = None) -> torch.Tensor:
    """Stopping floor on ``r^T D^-1 r`` [B, 1, 1]: ``rel^2`` times its initial value,
    ``rel`` = 8 machine epsilons of the dtype by default (below that the recursively
    updated float32 residual is round-off and further steps only amplify it)."""
    rel = 8 * torch.finfo(diag.dtype).eps if rel is None else rel
    return rel**2 * _bsum(b.expand_as(diag).square() / diag)


def cg_step(state: torch.Tensor, tx: torch.Tensor, ty: torch.Tensor, diag: torch.Tensor,
            floor: torch.Tensor | float = 0.0) -> torch.Tensor:
    """One Jacobi-preconditioned CG iteration on ``A(K) p = b`` for a stacked state
    ``[p, r, d]`` [B, 3, n, n] (``r = b - A p``, ``d`` the search direction).  Samples
    whose ``r^T D^-1 r`` is at or below ``floor`` are frozen (p unchanged)."""
    p, r, d = state.unbind(1)
    z = r / diag
    rz = _bsum(r * z)
    active = rz > floor
    one = torch.ones_like(rz)
    ad = fv_apply(d, tx, ty)
    dad = _bsum(d * ad)
    alpha = torch.where(active, rz / torch.where(active, dad, one), 0.0)
    p = p + alpha * d
    r = r - alpha * ad
    z = r / diag
    beta = torch.where(active, _bsum(r * z) / torch.where(active, rz, one), 0.0)
    return torch.stack([p, r, z + beta * d], dim=1)


def cg_pressure(k: torch.Tensor, f: torch.Tensor, iters: int) -> torch.Tensor:
    """``iters`` Jacobi-preconditioned CG iterations from p = 0, mean removed ->
    p [B, n, n]; batched and differentiable in ``k``."""
    tx, ty = transmissibilities(k)
    diag = fv_diagonal(tx, ty)
    m = torch.as_tensor(dual_areas(k.shape[-1]), dtype=k.dtype, device=k.device)
    b = m * f.to(k.dtype)
    state, floor = cg_init(b, diag), cg_floor(b, diag)
    for _ in range(iters):
        state = cg_step(state, tx, ty, diag, floor)
    p = state[:, 0]
    return p - p.mean(dim=(1, 2), keepdim=True)


# ---------------------------------------------------------------- evaluator


def evaluator_residual(p: torch.Tensor, k: torch.Tensor, f: torch.Tensor, h: float
                       ) -> torch.Tensor:
    """PBFM/PIDM residual of ``p, k`` [B, n, n] with source ``f`` [n, n] ->
    [B, (n-2)^2 + 4n]: ``-K p_xx - K_x p_x - K p_yy - K_y p_y - f`` on the interior nodes
    (centred differences), then the outward normal derivatives ``-p_x`` at x = 0,
    ``p_x`` at x = 1, ``-p_y`` at y = 0, ``p_y`` at y = 1 (one-sided second order,
    ``(-3 p_0 + 4 p_1 - p_2) / 2h``), each edge with its n nodes."""
    c = (slice(None), slice(1, -1), slice(1, -1))
    pxx = (p[:, 2:, 1:-1] - 2 * p[c] + p[:, :-2, 1:-1]) / h**2
    pyy = (p[:, 1:-1, 2:] - 2 * p[c] + p[:, 1:-1, :-2]) / h**2
    px = (p[:, 2:, 1:-1] - p[:, :-2, 1:-1]) / (2 * h)
    py = (p[:, 1:-1, 2:] - p[:, 1:-1, :-2]) / (2 * h)
    kx = (k[:, 2:, 1:-1] - k[:, :-2, 1:-1]) / (2 * h)
    ky = (k[:, 1:-1, 2:] - k[:, 1:-1, :-2]) / (2 * h)
    kc = k[c]
    interior = -kc * pxx - kx * px - kc * pyy - ky * py - f[1:-1, 1:-1].to(p.dtype)

    def one_sided(a0: torch.Tensor, a1: torch.Tensor, a2: torch.Tensor) -> torch.Tensor:
        return (-3 * a0 + 4 * a1 - a2) / (2 * h)  # derivative into the domain

    bc = [
        one_sided(p[:, 0], p[:, 1], p[:, 2]),  # x = 0: -dp/dx = -(inward derivative)
        one_sided(p[:, -1], p[:, -2], p[:, -3]),  # x = 1: dp/dx = -(inward derivative)
        one_sided(p[:, :, 0], p[:, :, 1], p[:, :, 2]),
        one_sided(p[:, :, -1], p[:, :, -2], p[:, :, -3]),
    ]
    # outward normal derivative = -(derivative into the domain)
    return torch.cat([interior.flatten(1)] + [-b for b in bc], dim=1)
