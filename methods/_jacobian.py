"""Compressed (coloured) Jacobians of constraints with a structural sparsity pattern.

A stencil constraint such as Darcy's discrete PDE residual has ~1,000 rows, but each row
touches only a handful of field entries.  ``vmap(jacrev(.))`` pays one reverse pass per
row; here columns that share no row get one colour and a single forward-mode JVP with
the colour's indicator vector recovers all of their entries at once (Curtis, Powell and
Reid, "On the estimation of sparse Jacobian matrices", 1974; greedy distance-2 column
colouring as in Gebremedhin, Manne and Pothen, SIAM Review 2005).  Rows that touch more
than ``dense_fraction`` of the columns (global sums such as a zero mean or a mass
balance) would force one colour per column, so they are taken by reverse mode instead,
one VJP each.

The pattern is detected once, as the union of the non-zeros of the dense Jacobian at a
few random probes.  That is exact when the constraint declares ``structural`` (or is
linear): its derivatives do not vanish on a branch, so a random point sees every
structural non-zero with probability one.  The result is the same [B, k, n] tensor as
:func:`pcgbench.methods._sampling.batched_jacobian`.

The same pattern makes the Gram matrix ``J J^T`` that every Gauss-Newton projection needs
cheap (:meth:`ColoredJacobian.gram`): two sparse rows meet only in the columns they share,
so their inner product is a sum over the few entry pairs listed once at detection; the
dense rows take one [d, n] x [n, k] product.  On Darcy at ``cpu`` (k = 1,029, n = 2,048)
that replaces the k^2 n multiply-adds of the dense product by a few tens of thousands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

Cond = Tensor | None
ConstraintFn = Callable[[Tensor, Cond], Tensor]


def greedy_column_coloring(pattern: np.ndarray) -> np.ndarray:
    """Colours [n] of the columns of a boolean ``pattern`` [k, n] such that no two columns
    with a common non-zero row share a colour (greedy, natural order)."""
    import scipy.sparse as sp

    a = sp.csr_matrix(pattern.astype(np.int8))
    conflicts = (a.T @ a).tocsr()  # columns j, l conflict iff they share a row
    n = pattern.shape[1]
    colors = np.full(n, -1, dtype=np.int64)
    for j in range(n):
        lo, hi = conflicts.indptr[j], conflicts.indptr[j + 1]
        used = colors[conflicts.indices[lo:hi]]
        taken = np.zeros(len(used) + 2, dtype=bool)
        taken[used[(used >= 0) & (used < len(taken))]] = True
        colors[j] = int(np.argmin(taken))  # the smallest colour no neighbour holds
    return colors


def _gram_pairs(pattern: np.ndarray) -> tuple[np.ndarray, ...]:
    """For a boolean [k, n] pattern: the flat index of every non-zero, and every ordered
    pair (a, b) of non-zeros in one column with the Gram entry row(a) * k + row(b) their
    product adds to."""
    k, n = pattern.shape
    rows, cols = np.nonzero(pattern)  # row-major order
    entry_index = rows * n + cols
    order = np.argsort(cols, kind="stable")
    starts = np.searchsorted(cols[order], np.arange(n + 1))
    pa, pb = [], []
    for j in range(n):
        ents = order[starts[j]:starts[j + 1]]
        if len(ents):
            a, b = np.meshgrid(ents, ents, indexing="ij")
            pa.append(a.ravel())
            pb.append(b.ravel())
    pair_a = np.concatenate(pa) if pa else np.zeros(0, dtype=np.int64)
    pair_b = np.concatenate(pb) if pb else np.zeros(0, dtype=np.int64)
    return entry_index, pair_a, pair_b, rows[pair_a] * k + rows[pair_b]


@dataclass(frozen=True)
class ColoredJacobian:
    """``J = dg/dz`` [B, k, n] from one JVP per colour plus one VJP per dense row."""

    pattern: Tensor  # [k, n]: 1 on the structural non-zeros of the sparse rows, else 0
    colors: Tensor  # [n] long, colour of each column
    seeds: Tensor  # [C, n] colour indicators
    dense_rows: Tensor  # [d] long
    entry_index: Tensor  # [nnz] long: flat index row * n + col of each sparse-row entry
    pair_a: Tensor  # [P] long: entry pairs (a, b) that share a column ...
    pair_b: Tensor  # [P] long
    pair_target: Tensor  # [P] long: ... and add to Gram entry row(a) * k + row(b)

    @property
    def n_colors(self) -> int:
        return int(self.seeds.shape[0])

    @property
    def passes(self) -> int:
        """Forward plus reverse passes per Jacobian (the dense way pays k)."""
        return self.n_colors + int(self.dense_rows.numel())

    @classmethod
    def detect(cls, g: ConstraintFn, z: Tensor, cond: Cond = None, probes: int = 2,
               dense_fraction: float = 0.125, seed: int = 0) -> ColoredJacobian:
        """Pattern from the dense Jacobian at ``probes`` random points shaped like z[0]
        (with the first samples' conditions); colours for the sparse rows."""
        from pcgbench.methods._sampling import batched_jacobian

        gen = torch.Generator(device="cpu").manual_seed(seed)
        m = min(probes, z.shape[0]) if cond is not None else probes
        pts = torch.randn((probes, *z.shape[1:]), generator=gen).to(z.device, z.dtype)
        conds = None if cond is None else cond[torch.arange(probes) % m]
        nz = (batched_jacobian(g, pts, conds) != 0).any(dim=0).cpu().numpy()  # [k, n]
        k, n = nz.shape
        dense = nz.sum(axis=1) > dense_fraction * n
        sparse_pattern = nz & ~dense[:, None]
        colors = greedy_column_coloring(sparse_pattern)
        n_col = int(colors.max()) + 1 if n else 0
        seeds = np.zeros((n_col, n), dtype=np.float32)
        seeds[colors, np.arange(n)] = 1.0
        entry_index, pair_a, pair_b, pair_target = _gram_pairs(sparse_pattern)
        dev, dt = z.device, z.dtype

        def long(a: np.ndarray) -> Tensor:
            return torch.from_numpy(a.astype(np.int64)).to(dev)

        return cls(
            pattern=torch.from_numpy(sparse_pattern).to(dev, dt),
            colors=torch.from_numpy(colors).to(dev),
            seeds=torch.from_numpy(seeds).to(dev, dt),
            dense_rows=long(np.flatnonzero(dense)),
            entry_index=long(entry_index),
            pair_a=long(pair_a),
            pair_b=long(pair_b),
            pair_target=long(pair_target),
        )

    def gram(self, jac: Tensor) -> Tensor:
        """``jac @ jac^T`` [B, k, k] for a Jacobian from this plan (zero off the pattern in
        its sparse rows), without the dense product: sparse-row pairs from the entry pairs
        that share a column, dense rows by one matmul."""
        b, k, n = jac.shape
        vals = jac.reshape(b, k * n)[:, self.entry_index]  # [b, nnz]
        prod = vals[:, self.pair_a] * vals[:, self.pair_b]
        g = torch.zeros(b, k * k, dtype=jac.dtype, device=jac.device)
        g.index_add_(1, self.pair_target, prod)
        g = g.view(b, k, k)
        if self.dense_rows.numel():
            rows = jac[:, self.dense_rows, :] @ jac.transpose(1, 2)  # [b, d, k]
            g[:, self.dense_rows, :] = rows
            g[:, :, self.dense_rows] = rows.transpose(1, 2)
        return g

    def __call__(self, g: ConstraintFn, z: Tensor, cond: Cond = None) -> Tensor:
        b, shape = z.shape[0], z.shape[1:]
        zf = z.detach().reshape(b, -1)
        seeds = self.seeds.to(zf.dtype)

        def f(u: Tensor) -> Tensor:
            return g(u.reshape(b, *shape), cond).reshape(b, -1)

        def jvp(seed: Tensor) -> Tensor:  # J_b @ seed for every sample b: [b, k]
            return torch.func.jvp(f, (zf,), (seed.expand(b, -1),))[1]

        compressed = torch.func.vmap(jvp)(seeds).permute(1, 2, 0)  # [b, k, C]
        k, n = self.pattern.shape
        jac = torch.gather(compressed, 2, self.colors.expand(b, k, n))
        jac = jac * self.pattern.to(jac.dtype)
        d = int(self.dense_rows.numel())
        if d:
            _, vjp_fn = torch.func.vjp(f, zf)
            cot = torch.zeros(d, b, k, dtype=jac.dtype, device=jac.device)
            cot[torch.arange(d), :, self.dense_rows] = 1.0
            (rows,) = torch.func.vmap(vjp_fn)(cot)  # [d, b, n]
            jac[:, self.dense_rows, :] = rows.permute(1, 0, 2)
        return jac
