"""Batched constraint Jacobians and Gram solves: the linear algebra the projection
samplers (``_sampling``) and the structured Jacobians (``_jacobian``) share (a leaf)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Cond = Tensor | None
ConstraintFn = Callable[[Tensor, Cond], Tensor]


def batched_jacobian(g: ConstraintFn, z: Tensor, cond: Cond = None) -> Tensor:
    """``J[b] = d g(z[b], c[b]) / d z[b]`` as ``[B, k, n]`` (n = z[0].numel()) by
    ``vmap(jacrev(.))``; ``g`` maps a batch ``[B, *shape] -> [B, k]``."""
    shape = z.shape[1:]

    def one(zf: Tensor, c1: Cond) -> Tensor:
        c1 = None if c1 is None else c1[None]
        return g(zf.reshape(1, *shape), c1)[0]

    jac = torch.func.jacrev(one, argnums=0)
    zf = z.detach().reshape(z.shape[0], -1)
    return torch.func.vmap(jac, in_dims=(0, None if cond is None else 0))(zf, cond)


def shared_jacobian(g: ConstraintFn, z: Tensor, cond: Cond = None) -> Tensor:
    """The Jacobian at the first sample, ``[1, k, n]`` (broadcasts over the batch): the
    constant linear part of an affine constraint."""
    c0 = None if cond is None else cond[:1]
    return batched_jacobian(g, z[:1], c0)


def linear_part_shared(g: ConstraintFn, z: Tensor, cond: Cond, jac: Tensor,
                       rtol: float = 1e-4) -> bool:
    """Whether ``jac`` [1, k, n], the first sample's Jacobian of an affine ``g``, is every
    sample's: ``g(z + d) - g(z) = J d`` batch-wide for one seeded direction ``d``, to
    ``rtol`` of the largest ``|J d|``.  False where the linear part depends on the
    condition (e.g. HIT reconstruction's observation mask, one per condition)."""
    if cond is None or z.shape[0] < 2:
        return True
    gen = torch.Generator(device="cpu").manual_seed(0)
    d = torch.randn(z.shape, generator=gen, dtype=z.dtype).to(z.device)
    b = z.shape[0]
    dh = (g(z + d, cond) - g(z, cond)).reshape(b, -1)
    pred = d.reshape(b, -1) @ jac[0].transpose(0, 1)
    scale = float(pred.abs().max().clamp_min(torch.finfo(z.dtype).tiny))
    return float((dh - pred).abs().max()) <= rtol * scale


def dense_gram(jac: Tensor) -> Tensor:
    """``J J^T`` by one batched matrix product."""
    return jac @ jac.transpose(1, 2)


def spd_solve(s: Tensor, rhs: Tensor, damped: bool = False) -> Tensor:
    """Solve ``s x = rhs`` for the Gram matrix ``s = J J^T`` (batched).  Undamped, the
    Moore-Penrose pseudo-inverse (eigen-decomposition, torch's default cut-off
    k * eps * max eigenvalue) keeps rank-deficient but consistent constraints exact
    (e.g. a pointwise divergence, whose grid sum vanishes identically), so
    ``x - J^T s^+ h`` is still the orthogonal projection; damped (positive definite, see
    :func:`damp`), a Cholesky solve in float64 (LU as fallback), returned in the input's
    dtype: in float32 the solve on Darcy's Gram (eigenvalues 0 to 6e7) was ill-posed."""
    if damped:
        s64, r64 = s.to(torch.float64), rhs.to(torch.float64)
        chol, info = torch.linalg.cholesky_ex(s64)
        if bool((info == 0).all()):
            return torch.cholesky_solve(r64, chol).to(rhs.dtype)
        return torch.linalg.solve(s64, r64).to(rhs.dtype)
    return torch.linalg.pinv(s, hermitian=True) @ rhs


def damp(s: Tensor, damping: float) -> Tensor:
    """``s + damping * mean(diag s) * I`` per sample: Tikhonov damping relative to the
    Gram's own scale (an absolute 1e-6 is 1e-14 of Darcy's largest eigenvalue, i.e. no
    damping at all in float32, while it is felt on an O(1) Gram), so directions with
    eigenvalues below ~damping x the mean are suppressed whatever the units."""
    if not damping:
        return s
    scale = s.diagonal(dim1=-2, dim2=-1).mean(dim=-1).clamp_min(torch.finfo(s.dtype).tiny)
    eye = torch.eye(s.shape[-1], dtype=s.dtype, device=s.device)
    return s + (damping * scale)[..., None, None] * eye
