"""Compressed (coloured) Jacobians of constraints with a structural sparsity pattern.

Stencil constraints (e.g. Darcy's discrete PDE residual) have many rows, each touching a few
entries.  Instead of one reverse pass per row (``vmap(jacrev(.))``), columns that share no row get
one colour and one forward-mode JVP with the colour's indicator recovers all their entries (Curtis,
Powell and Reid 1974; greedy distance-2 column colouring, Gebremedhin, Manne and Pothen, SIAM
Review 2005).  Rows touching more than ``dense_fraction`` of the columns (global sums such as a
zero mean or a mass balance) go by reverse mode, one VJP each.  The pattern is detected once, as
the union of non-zeros of the dense Jacobian at a few random probes: exact when the constraint
declares ``structural`` (or is linear), since a random point then sees every structural non-zero
with probability one.  Result: the [B, k, n] tensor of
:func:`pcgbench.methods._sampling.batched_jacobian`.  :meth:`ColoredJacobian.gram` forms J J^T
from the entry pairs that sparse rows share (listed at detection) plus one [d, n] x [n, k]
product for the dense rows.  When no row is dense and the rows fall into small groups sharing no
column (pointwise closures such as dynamic stall's ideal-gas and Sutherland shear residuals),
J J^T is block diagonal: :meth:`ColoredJacobian.linearize` keeps J as its structural entries
(:class:`SparseRowsJacobian`) and each Gauss-Newton solve is a batch of small dense ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from pcgbench.methods._linalg import batched_jacobian, damp, spd_solve

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


MAX_BLOCK = 32  # largest group of coupled rows solved as one small dense system


def _block_layout(pattern: np.ndarray, pair_target: np.ndarray
                  ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray] | None:
    """Rows linked (directly or through others) by shared columns form the diagonal
    blocks of ``J J^T``.  Returns (block size s, the slot block * s + position of each
    row, the slot-space index of each Gram pair, the unused slots), or None when some
    block exceeds :data:`MAX_BLOCK` rows."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    k = pattern.shape[0]
    if k == 0:
        return None
    a = sp.csr_matrix(pattern.astype(np.int8))
    n_comp, comp = connected_components(a @ a.T, directed=False)
    sizes = np.bincount(comp, minlength=n_comp)
    bs = int(sizes.max())
    if bs > MAX_BLOCK or bs == k:
        return None
    order = np.argsort(comp, kind="stable")
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pos = np.empty(k, dtype=np.int64)
    pos[order] = np.arange(k) - first[comp[order]]
    slot_of_row = comp * bs + pos
    ra, rb = pair_target // k, pair_target % k
    pair_slot = comp[ra] * bs * bs + pos[ra] * bs + pos[rb]
    used = np.zeros(n_comp * bs, dtype=bool)
    used[slot_of_row] = True
    return bs, slot_of_row, pair_slot, np.flatnonzero(~used)


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
    # block-diagonal Gram (no dense rows, every group of rows linked by shared columns at
    # most MAX_BLOCK rows): rows padded into [n_blocks, block_size] slots
    block_size: int = 0  # 0: no block structure
    slot_of_row: Tensor | None = None  # [k] long: block * block_size + position
    pair_slot: Tensor | None = None  # [P] long: entry of the [n_blocks * bs * bs] blocks
    pad_diag: Tensor | None = None  # block-space diagonal entries of slots without a row
    n_blocks: int = 0

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

        blocks: dict[str, object] = {}
        if not dense.any():
            layout = _block_layout(sparse_pattern, pair_target)
            if layout is not None:
                bs, slot_of_row, pair_slot, pad = layout
                blocks = dict(block_size=bs, slot_of_row=long(slot_of_row),
                              pair_slot=long(pair_slot), n_blocks=int(slot_of_row.max()) // bs + 1,
                              pad_diag=long((pad // bs) * bs * bs + (pad % bs) * (bs + 1)))
        return cls(
            pattern=torch.from_numpy(sparse_pattern).to(dev, dt),
            colors=torch.from_numpy(colors).to(dev),
            seeds=torch.from_numpy(seeds).to(dev, dt),
            dense_rows=long(np.flatnonzero(dense)),
            entry_index=long(entry_index),
            pair_a=long(pair_a),
            pair_b=long(pair_b),
            pair_target=long(pair_target),
            **blocks,  # type: ignore[arg-type]
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

    def _compressed(self, g: ConstraintFn, z: Tensor, cond: Cond
                    ) -> tuple[Tensor, Callable[[Tensor], Tensor], Tensor]:
        """(J_b @ seed_c for every colour c and sample b [C, b, k], the flattened
        constraint f, the flattened point zf): one forward-mode pass per colour."""
        b, shape = z.shape[0], z.shape[1:]
        zf = z.detach().reshape(b, -1)

        def f(u: Tensor) -> Tensor:
            return g(u.reshape(b, *shape), cond).reshape(b, -1)

        def jvp(seed: Tensor) -> Tensor:  # J_b @ seed for every sample b: [b, k]
            return torch.func.jvp(f, (zf,), (seed.expand(b, -1),))[1]

        return torch.func.vmap(jvp)(self.seeds.to(zf.dtype)), f, zf

    def __call__(self, g: ConstraintFn, z: Tensor, cond: Cond = None) -> Tensor:
        b = z.shape[0]
        compressed, f, zf = self._compressed(g, z, cond)
        compressed = compressed.permute(1, 2, 0)  # [b, k, C]
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

    def linearize(self, g: ConstraintFn, z: Tensor, cond: Cond = None) -> Linearization:
        """``J`` at z as a :class:`SparseRowsJacobian` (only its structural entries) when
        the Gram is block diagonal, else as a :class:`DenseJacobian`."""
        if not self.block_size:
            return DenseJacobian(self(g, z, cond), self.gram)
        compressed, _, _ = self._compressed(g, z, cond)  # [C, b, k]
        k, n = self.pattern.shape
        rows, cols = self.entry_index // n, self.entry_index % n
        vals = compressed[self.colors[cols], :, rows].transpose(0, 1)  # [b, nnz]
        return SparseRowsJacobian(vals, rows, cols, k, n, self)


def _shifted(s: Tensor, rhs: Tensor, damping: float, shift: Tensor | None) -> Tensor:
    """Solve ``(s + damping * mean(diag s) I + shift I) x = rhs`` with the conventions of
    :func:`pcgbench.methods._sampling.spd_solve` / ``damp``: undamped, the pseudo-inverse;
    relative damping, Cholesky in float64; an absolute per-sample ``shift`` (CCFM's
    Levenberg-Marquardt term), in float64: Cholesky where every shifted Gram is positive
    definite, else the pseudo-inverse (a singular Gram, e.g. rank-deficient constraint
    rows, with a shift below its round-off: ``torch.linalg.solve`` raised there on some
    CPU kernels), returned in the input's dtype."""
    if shift is not None:
        eye = torch.eye(s.shape[-1], dtype=torch.float64, device=s.device)
        shifted = s.to(torch.float64) + shift.to(torch.float64).view(
            -1, *([1] * (s.ndim - 1))) * eye
        r64 = rhs.to(torch.float64)
        chol, info = torch.linalg.cholesky_ex(shifted)
        if bool((info == 0).all()):
            return torch.cholesky_solve(r64, chol).to(rhs.dtype)
        return (torch.linalg.pinv(shifted, hermitian=True) @ r64).to(rhs.dtype)
    return spd_solve(damp(s, damping), rhs, damped=damping > 0)


@dataclass(frozen=True)
class DenseJacobian:
    """``J`` [B or 1, k, n] as a tensor; the products and solves of a Gauss-Newton step.
    The Gram's factorization is kept per (damping) for the life of the object: an affine
    constraint's shared J is built once per ``sample`` call, and refactoring its k x k
    Gram every step cost PCFM ~20 s per step on HIT forecasting (k = 4,096)."""

    jac: Tensor
    gram_fn: Callable[[Tensor], Tensor] | None = None
    _factors: dict = field(default_factory=dict, compare=False, repr=False)

    def matvec(self, d: Tensor) -> Tensor:  # J d: [b, n] -> [b, k]
        if self.jac.shape[0] == 1:  # shared J: one GEMM (a broadcast bmm copies J per sample)
            return d @ self.jac[0].transpose(0, 1)
        return (self.jac @ d.unsqueeze(-1)).squeeze(-1)

    def rmatvec(self, lam: Tensor) -> Tensor:  # J^T lam: [b, k] -> [b, n]
        if self.jac.shape[0] == 1:
            return lam @ self.jac[0]
        return (self.jac.transpose(1, 2) @ lam.unsqueeze(-1)).squeeze(-1)

    def row_norm(self) -> Tensor:
        return self.jac.norm(dim=-1)

    def gram(self) -> Tensor:
        if "gram" not in self._factors:
            self._factors["gram"] = (self.gram_fn or (lambda j: j @ j.transpose(1, 2)))(
                self.jac)
        return self._factors["gram"]

    def correction(self, rhs: Tensor, damping: float = 0.0) -> Tensor:
        """``J^T (J J^T + damping c I)^+ rhs``: the change of one Gauss-Newton step."""
        return self.rmatvec(self.solve(rhs, damping))

    def solve(self, rhs: Tensor, damping: float = 0.0, shift: Tensor | None = None) -> Tensor:
        """``(J J^T + damping c I + shift I)^-1 rhs`` (see :func:`_shifted`); for a shared
        J ([1, k, n]) without ``shift``, the factor (Cholesky, or the pseudo-inverse) is
        computed once and reused (the same numbers as refactoring every call)."""
        if shift is not None or self.jac.shape[0] != 1:
            return _shifted(self.gram(), rhs.unsqueeze(-1), damping, shift).squeeze(-1)
        key = ("damped", damping) if damping else ("pinv",)
        if key not in self._factors:
            s = damp(self.gram(), damping)
            if damping:
                s64 = s.to(torch.float64)
                chol, info = torch.linalg.cholesky_ex(s64)
                self._factors[key] = (("chol", chol) if bool((info == 0).all())
                                      else ("inv", torch.linalg.inv(s64)))
            else:
                self._factors[key] = ("pinv", torch.linalg.pinv(s, hermitian=True))
        kind, f = self._factors[key]
        r = rhs.unsqueeze(-1)
        if kind == "chol":
            return torch.cholesky_solve(r.to(torch.float64), f).to(rhs.dtype).squeeze(-1)
        if kind == "inv":
            return (f @ r.to(torch.float64)).to(rhs.dtype).squeeze(-1)
        return (f @ r).squeeze(-1)


@dataclass(frozen=True)
class SparseRowsJacobian:
    """``J`` kept as its structural entries ``vals`` [b, nnz] at (rows, cols), for a plan
    whose Gram is block diagonal: memory O(nnz) instead of O(k n), and each solve a batch
    of [block_size]^2 systems (the same matrix as the dense route, row by row; the
    pseudo-inverse's cut-off is per block)."""

    vals: Tensor
    rows: Tensor
    cols: Tensor
    k: int
    n: int
    plan: ColoredJacobian

    def _scatter(self, width: int, index: Tensor, src: Tensor) -> Tensor:
        out = torch.zeros(src.shape[0], width, dtype=src.dtype, device=src.device)
        return out.index_add_(1, index, src)

    def matvec(self, d: Tensor) -> Tensor:
        return self._scatter(self.k, self.rows, self.vals * d[:, self.cols])

    def rmatvec(self, lam: Tensor) -> Tensor:
        return self._scatter(self.n, self.cols, self.vals * lam[:, self.rows])

    def row_norm(self) -> Tensor:
        return self._scatter(self.k, self.rows, self.vals.pow(2)).sqrt()

    def dense(self) -> Tensor:
        """The [b, k, n] matrix (tests)."""
        b = self.vals.shape[0]
        out = torch.zeros(b, self.k * self.n, dtype=self.vals.dtype, device=self.vals.device)
        out[:, self.rows * self.n + self.cols] = self.vals
        return out.view(b, self.k, self.n)

    def correction(self, rhs: Tensor, damping: float = 0.0) -> Tensor:
        """``J^T (J J^T + damping c I)^+ rhs``: the change of one Gauss-Newton step."""
        return self.rmatvec(self.solve(rhs, damping))

    def solve(self, rhs: Tensor, damping: float = 0.0, shift: Tensor | None = None) -> Tensor:
        """As :meth:`DenseJacobian.solve`, block by block: relative damping (c the mean
        diagonal of the whole Gram) by Cholesky in float64, an absolute ``shift`` as
        :func:`_shifted`, neither by each block's pseudo-inverse."""
        p = self.plan
        assert p.slot_of_row is not None and p.pair_slot is not None and p.pad_diag is not None
        b, bs = rhs.shape[0], p.block_size
        n_blocks = p.n_blocks
        prod = self.vals[:, p.pair_a] * self.vals[:, p.pair_b]
        g = torch.zeros(b, n_blocks * bs * bs, dtype=rhs.dtype, device=rhs.device)
        g.index_add_(1, p.pair_slot, prod)
        g[:, p.pad_diag] = 1.0  # slots holding no row: identity, zero right-hand side
        g = g.view(b, n_blocks, bs, bs)
        r = torch.zeros(b, n_blocks * bs, dtype=rhs.dtype, device=rhs.device)
        r[:, p.slot_of_row] = rhs
        r = r.view(b, n_blocks, bs, 1)
        if shift is not None:
            x = _shifted(g, r, 0.0, shift)
        else:  # the damping is relative to the whole Gram's mean diagonal, not a block's
            scale = (self.vals.pow(2).sum(dim=1) / self.k).clamp_min(torch.finfo(g.dtype).tiny)
            eye = torch.eye(bs, dtype=g.dtype, device=g.device)
            x = spd_solve(g + (damping * scale).view(-1, 1, 1, 1) * eye, r,
                          damped=bool(damping))
        return x.reshape(b, n_blocks * bs)[:, p.slot_of_row]


Linearization = DenseJacobian | SparseRowsJacobian
