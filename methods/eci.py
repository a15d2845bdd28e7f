"""ECI: extrapolation-correction-interpolation sampling (Cheng et al. 2025) on FM-OT.

For each of n Euler steps (t = k/n, t' = t + 1/n), ``n_mix`` times (REFERENCES.md "ECI sampler";
paper App. baseline-mechanisms): extrapolate x1 = x + (1 - t) v(x, t); correct x1 <- Q(x1), the
closed-form orthogonal projection Q(x) = x - J^T (J J^T)^-1 h(x) onto affine h(x) = A x - b (J = A
and P = J^T (J J^T)^-1 computed once per ``sample`` call, vmap/jacrev at the first sample; for
Burgers ``mass``, the uniform shift of every time slice to the mean of the slice means; where A
depends on the condition or its Gram is too large to factor, the same Q matrix-free:
``_matrix_free``, CGLS to a relative residual of 1e-7);
interpolate x = s x1 + (1 - s) eps, s = t for the first n_mix - 1 repetitions, t' for the last.
As in amazon-science/ECI-sampling (``models/functional.py`` ``eci_sample``) a counter is
incremented *before* the test ``cnt % k == 0`` (k = ``resample_step``), so eps is redrawn at
repetitions k, 2k, ... (k = 1: every time, the first included; k > 1: the source serves the first
k - 1; 0 = never).  Output: the corrected x1 of the last step (t' = 1), feasible to round-off.
NFE = n * n_mix; defaults n = 20, n_mix = 1 (the paper's Burgers row: ECI NFE 20),
``resample_step`` = 1.  With ``constraints`` empty the task's LINEAR constraints are corrected and
nonlinear ones ignored (``nonlinear="ignore"``; the record's ``eci_constraints`` names them);
``nonlinear="gauss_newton"`` (ours) adds ``newton_steps`` undamped steps u <- u - J^T (J J^T)^-1
h(u) on all selected constraints after the closed-form step, then re-projects the linear ones.
Tasks with no linear constraint are refused (one line).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from pcgbench.errors import PcgError
from pcgbench.method import MethodConfig
from pcgbench.methods._jacobian import DenseJacobian
from pcgbench.methods._sampling import (
    SHARED_JACOBIAN_TASKS,
    BackboneSampler,
    apply_projector,
    batched_jacobian,
    gauss_newton_project,
    normalized,
    orthogonal_projector,
    select_constraints,
    stack_constraints,
)
from pcgbench.registry import METHODS
from pcgbench.runtime.timing import PhaseTimer


@dataclass(frozen=True)
class ECIConfig(MethodConfig):
    #: samples the shared pretrained backbone: no training budget of its own
    budget_field: ClassVar[str | None] = None
    steps: int = 20  # Euler steps n
    n_mix: int = 1  # extrapolate-correct-interpolate repetitions per step
    resample_step: int = 1  # redraw eps every this many interpolations (0 = never)
    # True: one Jacobian per call (where every condition shares it, else matrix-free);
    # False: each sample's dense Jacobian
    shared_jacobian: bool = True
    constraints: tuple[str, ...] = ()  # task constraint names; empty = all
    nonlinear: Literal["ignore", "gauss_newton"] = "ignore"  # gauss_newton: our extension
    newton_steps: int = 1
    dtype: Literal["float32", "float64"] = "float32"


@METHODS.register("eci")
class ECI(BackboneSampler[ECIConfig]):
    """Extrapolate the endpoint, correct it in closed form, interpolate back."""

    Config = ECIConfig
    description = "ECI: extrapolation-correction-interpolation, closed-form linear corrections"
    #: 1: the noise counter is incremented before its test, as in the reference
    #: 2: a linear part that depends on the condition (HIT reconstruction's masks) or a
    #: Gram over MAX_DENSE_ROWS goes matrix-free (before: the first condition's J for all,
    #: or refused); bit for bit the same on every task of ``SHARED_JACOBIAN_TASKS``
    version = 2
    unchanged_on = {2: SHARED_JACOBIAN_TASKS}

    def __init__(self, task, config: ECIConfig, device="cpu"):
        super().__init__(task, config, device)
        self.config: ECIConfig = config
        self.used_constraints: list[str] = []

    @classmethod
    def unsupported_reason(cls, task):
        reason = super().unsupported_reason(task)
        if reason:
            return reason
        if not any(c.linear for c in task.constraints().values()):
            return (f"method {cls.name!r} needs closed-form (linear) corrections, and task "
                    f"{task.name!r} has only nonlinear constraints "
                    f"({', '.join(task.constraints())})")
        return None

    @classmethod
    def nfe_settings(cls, nfe):
        return {"steps": int(nfe), "n_mix": 1}  # our reading: n Euler steps, no mixing

    @classmethod
    def nominal_nfe(cls, config):
        return str(config.steps * config.n_mix)

    def split_constraints(self):
        """(linear h, nonlinear h or None, names used) per ``constraints``/``nonlinear``."""
        cfg = self.config
        if cfg.nonlinear not in ("ignore", "gauss_newton"):
            raise PcgError(f"eci: nonlinear={cfg.nonlinear!r}; use 'ignore' or 'gauss_newton'")
        cons = select_constraints(self.task, cfg.constraints)
        lin = {k: c for k, c in cons.items() if c.linear}
        nonlin = {k: c for k, c in cons.items() if not c.linear}
        if nonlin and cfg.nonlinear == "ignore":
            if cfg.constraints:
                raise PcgError(f"eci: constraint(s) {', '.join(nonlin)} are nonlinear; set "
                               "nonlinear=gauss_newton or leave them out")
            nonlin = {}
        if not lin:
            raise PcgError(f"eci: task {self.task.name!r} has no linear constraint selected")
        h_lin = normalized(stack_constraints(lin), self.task)
        # the nonlinear Gauss-Newton steps act on all selected constraints jointly
        h_non = normalized(stack_constraints({**lin, **nonlin}), self.task) if nonlin else None
        self.used_constraints = [*lin, *nonlin]
        return h_lin, h_non

    def record_extras(self):
        return {"eci_constraints": list(self.used_constraints)}

    def objective(self, z, cond):
        """||h||^2 of the constraints ECI corrects in closed form (its selection)."""
        h, _ = self.split_constraints()
        return h(z, cond).pow(2).sum(dim=1)

    @torch.no_grad()
    def sample(self, cond, n, generator):
        cfg = self.config
        self.attach_backbone()
        timer = PhaseTimer(self.device)
        h, h_non = self.split_constraints()
        cond = self.prepare_cond(cond)
        x = self.noise(n, generator)
        with timer.phase("correction"):
            if cfg.shared_jacobian:
                lin = self.affine_linearization(h, x, cond)
            else:
                self.check_dense_solve(self.check_jacobian_size(h, x, cond), None)
                lin = DenseJacobian(batched_jacobian(h, x, cond))
            if isinstance(lin, DenseJacobian):
                P = orthogonal_projector(lin.jac)

                def project(x1):
                    return apply_projector(P, x1, h(x1, cond))
            else:  # the same projection, matrix-free (one undamped step is exact)
                def project(x1):
                    return gauss_newton_project(h, x1, cond, jac=lin)

        def correct(x1):
            x1 = project(x1)
            if h_non is not None:
                x1 = gauss_newton_project(h_non, x1, cond, steps=cfg.newton_steps)
                x1 = project(x1)
            return x1

        eps, calls, x1 = x, 0, x
        dt = 1.0 / cfg.steps
        for k in range(cfg.steps):
            t, tn = k * dt, (k + 1) * dt
            for j in range(cfg.n_mix):
                with timer.phase("network"):
                    v = self.velocity(x, t, cond)
                with timer.phase("correction"):
                    x1 = correct(x + (1 - t) * v)
                calls += 1
                if cfg.resample_step > 0 and calls % cfg.resample_step == 0:
                    eps = self.noise(n, generator)
                sl = tn if j == cfg.n_mix - 1 else t
                x = sl * x1 + (1 - sl) * eps
        self.sample_breakdown = dict(timer.seconds)
        return self.decode(x1)
