"""Shared pieces of the sampling-time methods (PCFM, ECI, DiffusionPDE, D-Flow, CoCoGen).

All of them reuse the shared pretrained backbone (``Method.shared_backbone()``: FM-OT,
or FFM on zero-shot constrained-PDE tasks, the protocol's common backbone; loaded with
``Method.pretrained``, trained once per task/preset/seed and cached by the harness) and
only change how it is integrated.  Conventions (as in :mod:`pcgbench.methods.fm_ot`):

* state ``z`` in NORMALIZED units, path ``z_t = (1 - t) z0 + t z1``, ``z0`` the
  backbone's source (``sample_source``: N(0, I) for FM-OT, the GP prior for FFM; every
  draw of source noise below goes through ``noise``), velocity ``v(z, t[B, 1], cond)``;
  Euler grid ``t_k = k / n``;
* constraints ``h(x, cond) -> [N, k]`` and the evaluator residual act on PHYSICAL fields
  ``x = normalizer.decode(z)``; gradients and Jacobians flow back through the affine
  normalizer, so every projection below is orthogonal in normalized units (for a
  one-channel task that is the physical Euclidean metric up to a constant factor);
* every network call goes through the backbone's counted wrapper, rewired to count into
  the sampling method's own ``self.nfe`` (what the runner reads).

Batched Jacobians use ``torch.func.vmap(jacrev(.))`` over the batch (no per-sample Python
loop), or, for constraints with a structural sparsity pattern (a stencil such as Darcy's
PDE residual), compressed forward mode with coloured columns (:mod:`._jacobian`; the same
matrix from ~15 JVPs instead of ~1,000 reverse passes).

For affine constraints ``h(x, c) = A x - b(c)`` the Jacobian is constant: it is
computed once per ``sample`` call, at the first sample, and shared by the batch
(``shared_jacobian``), where ``A`` does not depend on the condition (checked,
``linear_part_shared``) and its Gram is small enough to factor; otherwise the projection
samplers go matrix-free (``_matrix_free``: AD products and CGLS, the same projection).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

import torch
from torch import Tensor

from pcgbench.errors import PcgError
from pcgbench.method import ConfigT, FitStats, FlowBackbone, Method
from pcgbench.methods._jacobian import ColoredJacobian, DenseJacobian, Linearization
from pcgbench.methods._linalg import (  # noqa: F401 - re-exported (the plugin toolkit)
    Cond,
    ConstraintFn,
    batched_jacobian,
    damp,
    dense_gram,
    linear_part_shared,
    shared_jacobian,
    spd_solve,
)
from pcgbench.methods._matrix_free import MatrixFreeJacobian
from pcgbench.runtime.timing import free_memory_bytes
from pcgbench.task import Constraint, FieldData, Task

JacobianFn = Callable[[ConstraintFn, Tensor, Cond], Tensor]

DTYPES = {"float32": torch.float32, "float64": torch.float64}


# -- constraints ---------------------------------------------------------------------------
def select_constraints(task: Task, names: Sequence[str] = ()) -> dict[str, Constraint]:
    """The task's constraints named in ``names`` (all of them when empty)."""
    available = dict(task.constraints())
    if not names:
        return available
    missing = [n for n in names if n not in available]
    if missing:
        raise PcgError(
            f"task {task.name!r} has no constraint {', '.join(map(repr, missing))}; "
            f"available: {', '.join(available) or 'none'}"
        )
    return {n: available[n] for n in names}


def stack_constraints(constraints: Mapping[str, Constraint]) -> ConstraintFn:
    """One residual ``h(x, c) -> [N, sum k_i]``: the named constraints concatenated."""
    items = list(constraints.values())

    def h(x: Tensor, cond: Cond = None) -> Tensor:
        return torch.cat([c(x, cond).reshape(x.shape[0], -1) for c in items], dim=1)

    return h


def all_linear(constraints: Mapping[str, Constraint]) -> bool:
    return bool(constraints) and all(c.linear for c in constraints.values())


def normalized(h: ConstraintFn, task: Task) -> ConstraintFn:
    """``h`` as a function of normalized fields: ``z -> h(decode(z), c)``."""
    dec = task.normalizer.decode

    def hz(z: Tensor, cond: Cond = None) -> Tensor:
        return h(dec(z), cond).to(z.dtype)  # some constraints compute in float64

    return hz


# -- Jacobians and projections -----------------------------------------------------------------
MAX_DENSE_ROWS = 16_384  # largest dense Gram a projection sampler factors (kf at paper)

#: registered tasks whose linear constraints' Jacobian is the same for every condition (or
#: that have no linear constraint): there the shared dense route of the projection
#: samplers is unchanged by the matrix-free one (ECI 2, PCFM 1, CCFM 1 keep their older
#: records; tests/test_matrix_free.py checks the set against every registered task)
SHARED_JACOBIAN_TASKS = frozenset({
    "burgers", "burgers_bc", "burgers_ic", "darcy", "dynamic_stall", "heat",
    "hit_forecasting", "kf_generation", "kf_reconstruction", "kolmogorov", "navier_stokes",
    "reaction_diffusion_ic", "turbulence_mass_transfer"})


def gauss_newton_project(
    g: ConstraintFn,
    z: Tensor,
    cond: Cond = None,
    steps: int = 1,
    damping: float = 0.0,
    jac: Tensor | DenseJacobian | MatrixFreeJacobian | None = None,
    anchor: bool = False,
    jacobian: JacobianFn | None = None,
) -> Tensor:
    """Gauss-Newton projection of ``z`` onto ``{g = 0}`` (batched, no gradient).

    Root mode (``anchor=False``, PCFM's per-step projection, paper App.
    baseline-mechanisms): ``u <- u - J^T (J J^T + damping c I)^-1 g(u)`` repeated ``steps``
    times from u = z.  Anchored mode (``anchor=True``, PCFM's final projection): the
    Newton iteration of ``min ||u - z||^2 s.t. g(u) = 0``,
    ``u <- u + d - J^T (J J^T + damping c I)^-1 (J d + g(u))`` with ``d = z - u``;
    c = mean(diag J J^T) per sample (:func:`damp`: relative, so the damping means the same
    whatever the constraint's units; solved in float64).
    For affine ``g`` and ``damping = 0`` one step of either mode is the exact orthogonal
    projection ``z - J^T (J J^T)^-1 g(z)``.  ``jac`` ([B or 1, k, n]) fixes the Jacobian
    (affine constraints); otherwise ``jacobian`` (default :func:`batched_jacobian`)
    recomputes it at every step.  Safeguard: a
    sample whose step is not finite keeps its previous iterate.
    """
    b = z.shape[0]
    shape = z.shape[1:]
    with torch.no_grad():
        zf = z.detach().reshape(b, -1)
        u = zf.clone()
        for _ in range(int(steps)):
            r = g(u.reshape(b, *shape), cond).reshape(b, -1)
            J = linearize(g, u.reshape(b, *shape), cond, jac, jacobian)
            if anchor:
                d = zf - u
                new = u + d - J.correction(J.matvec(d) + r, damping)
            else:
                new = u - J.correction(r, damping)
            ok = torch.isfinite(new).all(dim=1, keepdim=True)
            u = torch.where(ok, new, u)
    return u.reshape(b, *shape)


def linearize(g: ConstraintFn, z: Tensor, cond: Cond,
              jac: Tensor | DenseJacobian | MatrixFreeJacobian | None = None,
              jacobian: JacobianFn | None = None) -> Linearization | MatrixFreeJacobian:
    """``dg/dz`` at z for a Gauss-Newton step: the fixed ``jac`` of an affine constraint;
    a coloured plan's own form (sparse rows when its Gram is block diagonal); else the
    dense ``jacobian(g, z, cond)`` (default :func:`batched_jacobian`)."""
    if isinstance(jac, (DenseJacobian, MatrixFreeJacobian)):
        return jac
    if jac is not None:
        return DenseJacobian(jac, dense_gram)
    if isinstance(jacobian, ColoredJacobian):
        return jacobian.linearize(g, z, cond)
    return DenseJacobian((jacobian or batched_jacobian)(g, z, cond), dense_gram)


def orthogonal_projector(jac: Tensor) -> Tensor:
    """``P = J^T (J J^T)^+`` ([.., n, k]) (``J^T (J J^T)^-1`` for full row rank): the
    closed-form correction ``x <- x - P h(x)`` is the orthogonal projection onto a
    consistent affine set."""
    s = jac @ jac.transpose(-1, -2)
    return spd_solve(s, jac).transpose(-1, -2)


def apply_projector(P: Tensor, z: Tensor, r: Tensor) -> Tensor:
    """``z - P r`` for z [B, *shape], P [B or 1, n, k], r [B, k]."""
    if P.shape[0] == 1:  # one shared projector: one GEMM (a broadcast bmm copies P per
        dz = r.reshape(r.shape[0], -1) @ P[0].transpose(0, 1)  # sample: 13x slower on HIT)
    else:
        dz = (P @ r.reshape(r.shape[0], -1, 1)).squeeze(-1)
    return z - dz.reshape(z.shape)


# -- the shared backbone ---------------------------------------------------------------------
class BackboneSampler(Method[ConfigT]):
    """Base of the sampling-time methods on the shared pretrained backbone
    (``shared_backbone()``: ``fm_ot``, or ``ffm`` on zero-shot tasks).

    ``fit`` loads (or trains once and caches) the backbone for this task/preset/seed
    through the harness and performs no update of its own: it returns an empty
    :class:`FitStats` (no update seconds, no losses; ``extra`` names the backbone), so
    the record's training time is the backbone's, reported in the backbone's record.
    ``state_dict`` is empty: the backbone is cached as its own method's checkpoint and is
    re-attached by ``load_state_dict``.
    """

    requires = frozenset({"constraints"})
    #: the shared pretrained flow backbone, and the one on zero-shot constrained-PDE tasks
    #: (the protocol's common FFM backbone, REFERENCES.md "Constrained-PDE suite")
    default_backbone: ClassVar[str] = "fm_ot"
    zero_shot_backbone: ClassVar[str] = "ffm"

    def __init__(self, task: Task, config: ConfigT, device: torch.device | str = "cpu"):
        super().__init__(task, config, device)
        # unknown constraint names fail here, before the backbone is fitted or loaded
        select_constraints(task, getattr(config, "constraints", ()))
        self.backbone: Method | None = None
        self._jac_plans: dict[tuple[str, ...], ColoredJacobian | None] = {}

    # -- backbone ----------------------------------------------------------------------
    def pretrained_name(self) -> str:
        return self.shared_backbone()

    def shared_backbone(self) -> str:
        """Name of the shared backbone method for this task: ``zero_shot_backbone`` when
        ``task.spec.zero_shot``, else ``default_backbone``."""
        return self.zero_shot_backbone if self.task.spec.zero_shot else self.default_backbone

    def attach_backbone(self) -> Method:
        if self.backbone is None:
            bb = self.pretrained()
            if not isinstance(bb, FlowBackbone):
                raise PcgError(f"method {self.name!r}: the pretrained {bb.name!r} is not a "
                               "flow backbone (needs net and sample_source)")
            # count every network call of the backbone into this method's counter
            bb.nfe = self.nfe
            bb.velocity = bb.counted(bb.net)
            bb.net.eval()
            for p in bb.net.parameters():
                p.requires_grad_(False)
            self.backbone = bb
        dtype = self.dtype
        if next(self.backbone.net.parameters()).dtype != dtype:
            self.backbone.net.to(dtype)
        return self.backbone

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[getattr(self.config, "dtype", "float32")]

    def fit(self, train: FieldData, progress: bool = True) -> FitStats:
        self.attach_backbone()
        return FitStats(extra={"backbone": self.shared_backbone()})

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        self.attach_backbone()

    def modules(self) -> list[torch.nn.Module]:
        return [] if self.backbone is None else [self.backbone.net]

    # -- helpers -------------------------------------------------------------------------
    def velocity(self, z: Tensor, t: float | Tensor, cond: Cond) -> Tensor:
        """One counted backbone call at time t (scalar or [B, 1])."""
        bb = self.attach_backbone()
        if not torch.is_tensor(t):
            t = torch.full((z.shape[0], 1), float(t), dtype=z.dtype, device=z.device)
        return bb.velocity(z, t, cond)

    def noise(self, n: int, generator: torch.Generator) -> Tensor:
        """The backbone's source distribution in normalized units (``sample_source``:
        N(0, I) for FM-OT, the GP prior for FFM), drawn in float32 from the CPU generator
        so that float32/float64 runs share the same draw."""
        bb = self.backbone if self.backbone is not None else self.attach_backbone()
        return bb.sample_source(n, generator).to(self.device, self.dtype)

    def prepare_cond(self, cond: Cond) -> Cond:
        return None if cond is None else cond.to(self.device, self.dtype)

    def decode(self, z: Tensor) -> Tensor:
        return self.task.normalizer.decode(z)

    def encode(self, x: Tensor) -> Tensor:
        return self.task.normalizer.encode(x)

    def jacobian_fn(self, names: Sequence[str], h: ConstraintFn, z: Tensor, cond: Cond,
                    mode: str = "auto") -> JacobianFn:
        """How to take ``dh/dz`` for the constraints ``names``: ``"dense"``
        (:func:`batched_jacobian`, one reverse pass per row) or ``"auto"``: compressed
        forward mode (:class:`ColoredJacobian`, detected once per method instance) when
        every constraint is linear or declares ``structural`` and that needs fewer than a
        quarter of the passes; the two give the same matrix."""
        if mode not in ("auto", "dense"):
            raise PcgError(f"method {self.name!r}: jacobian must be 'auto' or 'dense', "
                           f"got {mode!r}")
        if mode == "dense":
            return batched_jacobian
        cons = select_constraints(self.task, names)
        key = tuple(cons)
        if key not in self._jac_plans:
            plan = None
            if all(c.sparse_jacobian_ok for c in cons.values()):
                plan = ColoredJacobian.detect(h, z, cond)
                if 4 * plan.passes >= plan.pattern.shape[0]:
                    plan = None  # few rows or dense rows: reverse mode is as cheap
            self._jac_plans[key] = plan
        return self._jac_plans[key] or batched_jacobian

    @staticmethod
    def constraint_rows(h: ConstraintFn, z: Tensor, cond: Cond) -> int:
        """k: the rows of one sample's constraint vector."""
        return h(z[:1], None if cond is None else cond[:1]).reshape(1, -1).shape[1]

    @staticmethod
    def dense_fits(k: int, z: Tensor, samples: int = 1) -> bool:
        """Whether ``samples`` dense [k, n] Jacobians fit in a quarter of the memory free
        on z's device."""
        free = free_memory_bytes(z.device)
        return free is None or samples * k * z[0].numel() * z.element_size() <= free / 4

    def check_jacobian_size(self, h: ConstraintFn, z: Tensor, cond: Cond) -> int:
        """Refuse in one line, before any Jacobian is formed, where one sample's dense
        constraint Jacobian [k, n] exceeds a quarter of the memory free on the device
        (the projection samplers take it densely at least once: the shared Jacobian of an
        affine constraint, or the probes that detect a sparsity pattern).  Returns k."""
        k = self.constraint_rows(h, z, cond)
        if not self.dense_fits(k, z):
            n = z[0].numel()
            need = k * n * z.element_size()
            free = free_memory_bytes(z.device) or 0
            raise PcgError(
                f"method {self.name!r}: task {self.task.name!r} has a {k:,} x {n:,} "
                f"constraint Jacobian per sample ({need / 1e9:.1f} GB in {z.dtype}), over a "
                f"quarter of the {free / 1e9:.1f} GB free on {z.device}; this projection "
                "method has no matrix-free solver for these constraints")
        return k

    def affine_linearization(self, h: ConstraintFn, z: Tensor, cond: Cond
                             ) -> DenseJacobian | MatrixFreeJacobian:
        """The fixed Jacobian of the affine ``h`` for one ``sample`` call.  The closed form
        where it serves: the first sample's dense J (:func:`shared_jacobian`), its Gram
        factored once, when it has at most :data:`MAX_DENSE_ROWS` rows, fits in memory
        and is every condition's (:func:`linear_part_shared`); else the same projection
        matrix-free (:class:`MatrixFreeJacobian`: AD products, CGLS solves)."""
        k = self.constraint_rows(h, z, cond)
        if k <= MAX_DENSE_ROWS and self.dense_fits(k, z):
            jac = shared_jacobian(h, z, cond)
            if linear_part_shared(h, z, cond, jac):
                return DenseJacobian(jac)
        return MatrixFreeJacobian(h, z, cond)

    def affine_jacobian(self, h: ConstraintFn, z: Tensor, cond: Cond) -> Tensor:
        """The dense Jacobian [1, k, n] of the affine ``h`` for one ``sample`` call, the
        first sample's (call :meth:`check_jacobian_size` first); refused in one line where
        it is not every condition's (a method that needs J's rows densely and has no
        per-condition route)."""
        jac = shared_jacobian(h, z, cond)
        if not linear_part_shared(h, z, cond, jac):
            raise PcgError(
                f"method {self.name!r}: task {self.task.name!r}'s linear constraints depend "
                "on the condition (e.g. an observation mask per condition); this method "
                "needs one dense Jacobian for the batch and has no per-condition route")
        return jac

    def check_dense_solve(self, k: int, jacobian: JacobianFn | None) -> None:
        """Refuse in one line where every projection step would factor a dense k x k Gram
        with k > :data:`MAX_DENSE_ROWS` (a coloured plan with a block-diagonal Gram solves
        small blocks instead).  HIT reconstruction at ``cpu`` (k = 20,480: observation and
        divergence rows): one float64 eigendecomposition of its Gram takes over an hour
        on one CPU thread (4,096^2: 31 s, measured; cubic scaling)."""
        if k > MAX_DENSE_ROWS and not getattr(jacobian, "block_size", 0):
            raise PcgError(
                f"method {self.name!r}: task {self.task.name!r} has {k:,} constraint rows; "
                f"its projections would factor a dense {k:,} x {k:,} Gram every step (limit "
                f"{MAX_DENSE_ROWS:,}), and the matrix-free route serves affine constraints "
                "only")

    def constraint_fn(self, names: Sequence[str] = ()) -> tuple[ConstraintFn, bool]:
        """(h in normalized units, all-linear flag) for the selected constraints.  ``h``
        decodes its input itself: pass it normalized states ``z``, never ``decode(z)``."""
        cons = select_constraints(self.task, names)
        if not cons:
            raise PcgError(f"method {self.name!r}: task {self.task.name!r} has no constraints")
        return normalized(stack_constraints(cons), self.task), all_linear(cons)

    def objective(self, z: Tensor, cond: Cond) -> Tensor:
        """Per-sample constraint loss ``||h(decode(z), c)||^2`` [B] of NORMALIZED fields
        ``z``: what this method drives to zero (its guidance loss, or the residual its
        projections remove).  Real data is a zero of it (tested for every sampling-time
        method on every IC/BC task)."""
        h, _ = self.constraint_fn(getattr(self.config, "constraints", ()))
        return h(z, cond).pow(2).sum(dim=1)

    def guidance_objective(self, z: Tensor, cond: Cond, residual_weight: float) -> Tensor:
        """``objective`` plus ``residual_weight`` x the grid mean of the squared evaluator
        residual R(decode(z)) (physical units) [B]: the loss of the gradient-based
        samplers (D-Flow, DiffusionPDE)."""
        loss = self.objective(z, cond)
        if residual_weight:
            r = self.task.residual(self.decode(z), cond).reshape(z.shape[0], -1)
            loss = loss + residual_weight * r.pow(2).mean(dim=1)
        return loss
