"""PBFM: physics-based flow matching (Baldan et al. 2025; tum-pbs/PBFM).

Training: OT path x_t = (1 - t) x0 + t x1 (sigma_min = 0, x0 ~ N(0, I) normalized), L_FM =
E||v(x_t, t) - (x1 - x0)||^2, plus a residual loss on the endpoint x^1 of ``n`` differentiable
Euler steps of size (1 - t)/n from x_t (the first reuses v(x_t, t)), as the reference's
``cfm_loss_residual`` (``*/flow_matching.py``): e_b = mean_grid |R(decode(x^1_b))|^p and
L_R = mean_b(t_b) * mean_b(e_b), R = ``task.residual`` in physical units.  p as the reference
(``REFERENCE_RESIDUAL``): 1 on Darcy, 2 on Kolmogorov and dynamic stall (two closures summed
before the grid mean); 1 elsewhere (ours); ``residual_power`` overrides.  The reference's t-weight
is a batch weight (``residual_t_weight="batch"``; "sample": mean_b(t_b e_b); "none").  ConFIG
(``use_config``; ``conflictfree.grad_operator.ConFIG_update``) combines the gradients, FM's alone
if the residual one is not finite (as the reference).  Unroll n = 1 -> 2 -> 3 -> 4 over the training
quarters, or fixed ``unroll``.  Sampling: EMA (0.999) weights, Euler, ``steps`` = 20 (NFE 20).
Departures (config fields): ``conditioned`` = True feeds the condition on every task, the zero-shot
suite included, where L_R also covers the hard constraints h(x, c) (``methods._physics``);
``ema_warmup``: decay min(0.999, (1 + k)/(10 + k)) at update k (False: constant 0.999 from a copy
of the weights); FM-OT's backbone, batch, updates, lr (``preset_backbone``, ``PRESET_RECIPE``), not
the reference's DiT, batch 64, lr 3e-5, so PBFM and FM-OT differ only in L_R; gradient-norm
clipping 1.0 after ConFIG (the reference does not clip).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple

import torch

from pcgbench.backbones import BackboneConfig, field_backbone
from pcgbench.errors import PcgError
from pcgbench.method import FitStats, Method, MethodConfig
from pcgbench.methods._flow import (
    PRESET_RECIPE,
    CondOTPath,
    bshape,
    ema_update,
    preset_backbone,
)
from pcgbench.methods._physics import physics_residual, sees_constraints
from pcgbench.methods.fm_ot import euler_sample
from pcgbench.registry import METHODS
from pcgbench.task import FieldData, Task
from pcgbench.training.loop import batch_indices, train_loop


@dataclass(frozen=True)
class PBFMConfig(MethodConfig):
    sampling_only: ClassVar[frozenset[str]] = frozenset({"steps"})  # Euler steps

    backbone: BackboneConfig = field(default_factory=lambda: preset_backbone("cpu"))
    iterations: int = 3000
    batch_size: int = 32
    lr: float = 1e-3
    steps: int = 20  # Euler steps at sampling (NFE)
    unroll: int | None = None  # fixed unrolling depth; None = curriculum 1..max_unroll
    max_unroll: int = 4
    use_config: bool = True  # False: plain sum of the two gradients (ablation)
    #: False: the flow-matching gradient alone, no unrolled residual (a diagnostic
    #: ablation, not PBFM: what the residual loss does to the samples; a variant column)
    residual: bool = True
    #: fields that came after PBFM's published cells, in the order they came, each with
    #: the value a record without it ran (``residual`` True, ``cond_input`` "embed")
    added_at_default: ClassVar[dict[str, Any]] = {"residual": True, "cond_input": "embed"}
    # "batch": mean(t) * mean(e) (the reference's broadcast); "sample": mean(t_b e_b)
    # (ours, per-sample weight); "none": mean(e)
    residual_t_weight: Literal["batch", "sample", "none"] = "batch"
    residual_power: int | None = None  # None: per benchmark (REFERENCE_RESIDUAL); 1 | 2
    conditioned: bool = True  # feed the condition also on zero-shot tasks
    #: how a vector condition enters the network (paper-silent; ``pcgbench tune
    #: suite_cond_input_pbfm``): "embed" with the time (the default), or "slice": an
    #: initial row/frame repeated along time as an input channel (``SliceCondInput``)
    cond_input: Literal["embed", "slice"] = "embed"
    ema_decay: float = 0.999
    ema_warmup: bool = True
    grad_clip: float | None = 1.0
    #: the preset recipe's lr schedule (``PRESET_RECIPE``; the EMA above is PBFM's own)
    lr_schedule: str = "cosine"
    warmup: int = 100

    @classmethod
    def for_preset(cls, preset: str) -> PBFMConfig:
        return cls(backbone=preset_backbone(preset), **PRESET_RECIPE[preset].fields(ema=False))


class ReferenceResidual(NamedTuple):
    """How the reference's ``compute_residual`` reduces one benchmark's residual."""

    power: int  # |R| (1) or R^2 (2)
    channel_sum: bool = False  # sum the residual's channels (dim 1) before the grid mean
    spectral: bool = False  # the task's Fourier residual (``Task.residual_spectral``)


#: the reference's residual loss per task (tum-pbs/PBFM): Darcy ``residual.abs()`` then
#: the grid mean; Kolmogorov ``div(...).square()`` with torchfsm's spectral ``Div``; dynamic
#: stall the squared ideal-gas and wall-shear residuals added pointwise.  Other tasks:
#: ``DEFAULT_RESIDUAL`` (ours)
REFERENCE_RESIDUAL: dict[str, ReferenceResidual] = {
    "darcy": ReferenceResidual(1),
    "kolmogorov": ReferenceResidual(2, spectral=True),
    "dynamic_stall": ReferenceResidual(2, channel_sum=True),
}
DEFAULT_RESIDUAL = ReferenceResidual(1)


def residual_spec(task: Task, power: int | None) -> ReferenceResidual:
    """The residual reduction PBFM uses on ``task``: the reference's, or ``power``."""
    ref = REFERENCE_RESIDUAL.get(task.name, DEFAULT_RESIDUAL)
    return ref if power is None else ref._replace(power=power)


def curriculum_depth(step: int, iterations: int, max_unroll: int = 4) -> int:
    """Unrolling depth at update ``step``: 1, 2, ..., max_unroll over equal shares."""
    return min(max_unroll, step * max_unroll // max(iterations, 1) + 1)


def unroll_endpoint(net, xt: torch.Tensor, t: torch.Tensor, n: int,
                    cond: torch.Tensor | None = None, v0: torch.Tensor | None = None
                    ) -> torch.Tensor:
    """x^1 from ``n`` differentiable Euler steps of size (1 - t)/n from x_t (t: [B, 1]).

    ``v0`` is the network output at (x_t, t) when already computed (the FM prediction)."""
    if n < 1:
        raise PcgError(f"pbfm: unrolling depth must be >= 1, got {n}")
    dt = (1 - t) / n
    dtb = bshape(dt, xt.ndim)
    x, tk = xt, t
    for k in range(n):
        v = v0 if (k == 0 and v0 is not None) else net(x, tk, cond)
        x = x + dtb * v
        tk = tk + dt
    return x


def residual_loss(task: Task, x_norm: torch.Tensor, cond: torch.Tensor | None = None,
                  weight: torch.Tensor | None = None, power: int = 2,
                  constraints: bool = False, t_weight: str = "sample",
                  channel_sum: bool = False, spectral: bool = False) -> torch.Tensor:
    """The residual loss of normalized fields (decoded to physical units first) from the
    per-sample physics loss e_b (``methods._physics.physics_residual``: grid mean of
    |R|^power, plus the hard constraints when ``constraints``; with ``channel_sum`` the
    evaluator's channels are summed, not averaged).  ``weight`` [B] (PBFM: t) enters as
    ``t_weight``: "sample" mean_b(w_b e_b), "batch" mean_b(w_b) * mean_b(e_b) (the
    reference's broadcast), "none" (or no weight) mean_b(e_b).  ``spectral``: the task's
    Fourier residual in place of its evaluator residual."""
    per = physics_residual(task, task.normalizer.decode(x_norm), cond, power=power,
                           constraints=constraints, channel_sum=channel_sum,
                           spectral=spectral)
    if weight is None or t_weight == "none":
        return per.mean()
    if t_weight == "batch":
        return weight.mean() * per.mean()
    if t_weight == "sample":
        return (per * weight.reshape(-1)).mean()
    raise PcgError(f"pbfm: residual_t_weight must be batch, sample or none, got {t_weight!r}")


def config_combine(g_fm: torch.Tensor, g_res: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """ConFIG direction of two flat gradients (official ``conflictfree``); (g, used).

    On the CPU through the package's pseudo-inverse path (``use_least_square=False``:
    its default, ``torch.linalg.lstsq`` with LAPACK's gelsy, was measured to return
    results that differ in the last bits from call to call on identical input, which
    Adam then amplifies into different weights: same seed, different run).  On CUDA
    through the package's two-gradient closed form ``ConFIG_update_double`` (no
    inverse): cuSOLVER's SVD behind ``pinv`` refuses the 2 x P matrix at the ``paper``
    network's P (``CUSOLVER_STATUS_INVALID_VALUE``, H100, 2026-11-27).  The two agree to
    float32 rounding on non-parallel gradients (``tests/test_training_methods.py``)."""
    from conflictfree.grad_operator import ConFIG_update, ConFIG_update_double

    if not bool(torch.isfinite(g_res).all()) or float(g_res.norm()) == 0.0:
        return g_fm, False
    if g_fm.is_cuda:
        g = ConFIG_update_double(g_fm, g_res)
    else:
        g = ConFIG_update(torch.stack([g_fm, g_res]), use_least_square=False)
    if not bool(torch.isfinite(g).all()):
        return g_fm, False
    return g, True


def _flat(grads, params) -> torch.Tensor:
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                      for g, p in zip(grads, params, strict=True)])


@METHODS.register("pbfm")
class PBFM(Method[PBFMConfig]):
    """Flow matching + unrolled-endpoint residual loss, gradients combined by ConFIG."""

    Config = PBFMConfig
    description = "PBFM: flow matching + unrolled residual loss, ConFIG (Baldan et al. 2025)"
    #: 1: the reference's residual per benchmark and its batch t-weight (was mean |R|
    #: with a per-sample t everywhere)
    #: 2: the preset recipe's cosine lr after warm-up and its budget
    #: 3: Kolmogorov's residual loss takes the spectral divergence (the reference's
    #: torchfsm ``Div``; was central differences)
    version = 3
    preset_recipe = True

    def __init__(self, task: Task, config: PBFMConfig, device: torch.device | str = "cpu"):
        super().__init__(task, config, device)
        if config.unroll is not None and config.unroll < 1:
            raise PcgError(f"pbfm: unroll must be >= 1 or None, got {config.unroll}")
        spec = task.spec
        self.config: PBFMConfig = config
        self.net = field_backbone(config.backbone, spec, conditioned=config.conditioned,
                                  vector_cond=config.cond_input).to(self.device)
        self.ema = copy.deepcopy(self.net).requires_grad_(False)
        self.velocity = self.counted(self.ema)
        self.with_constraints = sees_constraints(task, config.conditioned)
        if config.residual_power not in (None, 1, 2):
            raise PcgError(f"pbfm: residual_power must be 1, 2 or None (per benchmark), got "
                           f"{config.residual_power}")
        self.residual = residual_spec(task, config.residual_power)

    def record_extras(self) -> dict:
        return {"residual_power": self.residual.power,
                "residual_channel_sum": self.residual.channel_sum,
                "residual_spectral": self.residual.spectral,
                "residual_t_weight": self.config.residual_t_weight}

    def modules(self) -> list[torch.nn.Module]:
        return [self.net]  # the EMA copy is not counted as parameters

    def depth(self, step: int) -> int:
        cfg = self.config
        if cfg.unroll is not None:
            return cfg.unroll
        return curriculum_depth(step, cfg.iterations, cfg.max_unroll)

    def _update_ema(self, step: int) -> None:
        ema_update(self.ema, self.net, step, self.config.ema_decay, self.config.ema_warmup)

    def fm_loss(self, x1: torch.Tensor, x0: torch.Tensor, t: torch.Tensor,
                cond: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(L_FM, x_t, v(x_t, t)) of one batch on the OT path; t [B, 1]."""
        xt, target = CondOTPath().sample(x0, x1, t)
        v = self.net(xt, t, cond)
        return (v - target).pow(2).mean(), xt, v

    def losses(self, x1: torch.Tensor, x0: torch.Tensor, t: torch.Tensor, n: int,
               cond: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(L_FM, L_R) of one batch; t [B, 1]."""
        l_fm, xt, v = self.fm_loss(x1, x0, t, cond)
        x_hat = unroll_endpoint(self.net, xt, t, n, cond, v0=v)
        spec = self.residual
        return l_fm, residual_loss(self.task, x_hat, cond, t, power=spec.power,
                                   constraints=self.with_constraints,
                                   t_weight=self.config.residual_t_weight,
                                   channel_sum=spec.channel_sum, spectral=spec.spectral)

    def fit(self, train: FieldData, progress: bool = True) -> FitStats:
        """The PBFM updates on the shared loop (``pcgbench.training.loop.train_loop``: timed,
        preemptible, resumable): each update's gradient is ConFIG's combination of the
        L_FM and L_R gradients (set by hand, ``manual_grads``), then clip, step and EMA."""
        cfg = self.config
        z = self.task.normalizer.encode(train.x).to(self.device)
        cond_all = None if train.cond is None else train.cond.to(self.device)
        gen = torch.Generator().manual_seed(self.context.seed)
        params = [p for p in self.net.parameters() if p.requires_grad]
        # running values a resumed fit continues from (restored in place)
        run: dict = {"res_losses": [], "fallbacks": 0}
        with torch.no_grad():
            for pe, p in zip(self.ema.parameters(), self.net.parameters(), strict=True):
                pe.copy_(p)
        self.net.train()

        def loss(step: int) -> torch.Tensor:
            idx = batch_indices(len(z), cfg.batch_size, gen).to(self.device)
            x1 = z[idx]
            x0 = torch.randn(x1.shape, generator=gen).to(self.device)
            t = torch.rand(len(x1), 1, generator=gen).to(self.device)
            c = None if cond_all is None else cond_all[idx]
            if not cfg.residual:
                l_fm = self.fm_loss(x1, x0, t, c)[0]
                if not torch.isfinite(l_fm):
                    return l_fm
                l_fm.backward()
                return l_fm.detach()
            l_fm, l_res = self.losses(x1, x0, t, self.depth(step), c)
            if not torch.isfinite(l_fm):
                return l_fm  # the loop raises TrainingDiverged
            g_fm = _flat(torch.autograd.grad(l_fm, params, retain_graph=True,
                                             allow_unused=True), params)
            g_res = _flat(torch.autograd.grad(l_res, params, allow_unused=True), params)
            if cfg.use_config:
                g, used = config_combine(g_fm, g_res)
            else:
                used = bool(torch.isfinite(g_res).all())
                g = g_fm + g_res if used else g_fm
            run["fallbacks"] += not used
            offset = 0
            for p in params:
                k = p.numel()
                p.grad = g[offset:offset + k].view_as(p).clone()
                offset += k
            run["res_losses"].append(float(l_res.detach()))
            return l_fm.detach()

        stats = train_loop(loss, params, iterations=cfg.iterations, lr=cfg.lr,
                           device=self.device, progress=progress, desc=f"fit {self.name}",
                           grad_clip=cfg.grad_clip, on_step=self._update_ema,
                           resume=self.resume_point([gen], [self.ema], run),
                           lr_schedule=cfg.lr_schedule, warmup=cfg.warmup,
                           manual_grads=True)
        self.net.eval()
        depth_seconds: dict[str, list[float]] = {}
        for step, sec in enumerate(stats.update_seconds):
            depth_seconds.setdefault(str(self.depth(step)), []).append(sec)
        res_losses = run["res_losses"]
        stats.extra.update({
            "residual_loss_first": res_losses[0] if res_losses else None,
            "residual_loss_final": res_losses[-1] if res_losses else None,
            "config_fallbacks": run["fallbacks"],
            "residual_terms": "none (residual=false)" if not cfg.residual
            else "evaluator + hard constraints" if self.with_constraints else "evaluator",
            "updates_per_depth": {k: len(v) for k, v in depth_seconds.items()},
            "mean_update_seconds_per_depth": {k: sum(v) / len(v)
                                              for k, v in depth_seconds.items()},
        })
        return stats

    @torch.no_grad()
    def sample(self, cond: torch.Tensor | None, n: int, generator: torch.Generator
               ) -> torch.Tensor:
        return euler_sample(self, cond, n, generator)
