"""A shared optimizer loop: timed updates (synchronized), tqdm progress, NaN guard, and
periodic verified training checkpoints so that a preempted fit resumes where it stopped."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterable

import torch
from tqdm.auto import tqdm

from pcgbench.config import LR_SCHEDULES  # noqa: F401 - re-exported
from pcgbench.errors import TrainingDiverged
from pcgbench.runtime.log import logger
from pcgbench.runtime.termination import until_terminated
from pcgbench.runtime.timing import synchronize
from pcgbench.training.state import FitStats, Resume  # noqa: F401 - Resume re-exported


def lr_factor(step: int, iterations: int, schedule: str = "constant", warmup: int = 0,
              floor: float = 0.0) -> float:
    """Multiplier of the base lr at update ``step`` (0-based) of ``iterations``: a linear
    warm-up over the first ``warmup`` updates (from 1/warmup), then ``schedule``:
    "constant" (1), "cosine" (1 -> ``floor`` on a half cosine) or "linear" (1 -> ``floor``)
    over the remaining updates.  A pure function of the step, so a resumed fit follows
    the same schedule."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"unknown lr schedule {schedule!r}; expected one of {LR_SCHEDULES}")
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    span = max(iterations - warmup, 1)
    frac = min(max((step - warmup) / span, 0.0), 1.0)
    shape = 0.5 * (1 + math.cos(math.pi * frac)) if schedule == "cosine" else 1 - frac
    return floor + (1 - floor) * shape


class WeightEMA:
    """Exponential moving average of a network's weights (Polyak averaging): after update
    k, ``ema <- d ema + (1 - d) net`` with ``d = min(decay, (1 + k) / (10 + k))`` (the
    warm-up keeps short fits from sampling their initial weights).  ``module`` is a
    frozen copy; ``copy_to(net)`` puts the averaged weights into ``net`` at the end of
    a fit (so everything downstream samples, checkpoints and builds on them)."""

    def __init__(self, net: torch.nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must lie in (0, 1), got {decay}")
        self.decay = float(decay)
        self.module = copy.deepcopy(net).requires_grad_(False)
        self._net = net

    @torch.no_grad()
    def update(self, step: int) -> None:
        d = min(self.decay, (1 + step) / (10 + step))
        for pe, p in zip(self.module.parameters(), self._net.parameters(), strict=True):
            pe.mul_(d).add_(p.detach(), alpha=1 - d)
        for be, b in zip(self.module.buffers(), self._net.buffers(), strict=True):
            be.copy_(b)

    @torch.no_grad()
    def copy_to(self, net: torch.nn.Module) -> None:
        net.load_state_dict(self.module.state_dict())


def train_loop(
    loss_fn: Callable[[int], torch.Tensor],
    params: Iterable[torch.nn.Parameter],
    *,
    iterations: int,
    lr: float,
    device: torch.device,
    progress: bool = True,
    desc: str = "train",
    grad_clip: float | None = 1.0,
    weight_decay: float = 0.0,
    on_step: Callable[[int], None] | None = None,
    resume: Resume | None = None,
    lr_schedule: str = "constant",
    warmup: int = 0,
    lr_floor: float = 0.0,
    ema: WeightEMA | None = None,
    manual_grads: bool = False,
) -> FitStats:
    """Run ``iterations`` Adam(W) updates of ``loss_fn(step)``.

    With ``manual_grads`` the loss function has set the parameters' ``.grad`` itself
    (gradients that are not one backward pass: PBFM's ConFIG combination, PCFT's
    per-time backward passes) and returns the loss only to log and check; the loop
    still clips, steps, averages and checkpoints.

    The lr at update k is ``lr * lr_factor(k, iterations, lr_schedule, warmup,
    lr_floor)``; with ``ema`` the moving average is updated after every step (and saved
    in partial checkpoints; the caller copies it into the network at the end).  Each
    update (forward, backward, step) is timed with device synchronization so the run
    record can report the median seconds per update after warm-up.  With ``resume`` the
    loop starts after the last partial checkpoint (if any) and writes one every
    ``resume.every`` updates; the caller removes it once the final model is saved."""
    params = [p for p in params if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    lr_factor(0, iterations, lr_schedule, warmup, lr_floor)  # validates the schedule
    if ema is not None and resume is not None and ema.module not in resume.modules:
        resume.modules = (*resume.modules, ema.module)
    stats = FitStats()
    start = 0 if resume is None else resume.restore(params, opt, stats, device)
    if start:
        logger.info("%s: resuming at update %d of %d from %s", desc, start, iterations,
                    resume.path if resume else "")
    bar = tqdm(range(start, iterations), desc=desc, disable=not progress, leave=True,
               dynamic_ncols=True, initial=start, total=iterations)
    # SIGTERM: this update finishes, a partial checkpoint is written, then Terminated
    stop = None if resume is None else (lambda k: resume.save(k, params, opt, stats))
    for step in until_terminated(bar, stop):
        synchronize(device)
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr * lr_factor(step, iterations, lr_schedule, warmup, lr_floor)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(step)
        if not torch.isfinite(loss):
            raise TrainingDiverged(f"{desc}: loss became non-finite at update {step}; lower the lr")
        if not manual_grads:
            loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        if ema is not None:
            ema.update(step)
        if on_step is not None:
            on_step(step)
        synchronize(device)
        stats.update_seconds.append(time.perf_counter() - t0)
        stats.losses.append(float(loss.detach()))
        if step % 20 == 0:
            bar.set_postfix(loss=f"{stats.losses[-1]:.4g}")
        if resume is not None and resume.every > 0 and (step + 1) % resume.every == 0 \
                and step + 1 < iterations:
            resume.save(step, params, opt, stats)
    return stats


def batch_indices(n: int, batch: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, n, (min(batch, n),), generator=generator)
