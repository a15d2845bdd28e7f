"""A shared optimizer loop: timed updates (synchronized), tqdm progress, NaN guard."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import torch
from tqdm.auto import tqdm

from pcgbench.errors import TrainingDiverged
from pcgbench.method import FitStats
from pcgbench.timing import synchronize


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
) -> FitStats:
    """Run ``iterations`` Adam(W) updates of ``loss_fn(step)``.

    Each update (forward, backward, step) is timed with device synchronization so the
    run record can report the median seconds per update after warm-up."""
    params = [p for p in params if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    stats = FitStats()
    bar = tqdm(range(iterations), desc=desc, disable=not progress, leave=False, dynamic_ncols=True)
    for step in bar:
        synchronize(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(step)
        if not torch.isfinite(loss):
            raise TrainingDiverged(f"{desc}: loss became non-finite at update {step}; lower the lr")
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        if on_step is not None:
            on_step(step)
        synchronize(device)
        stats.update_seconds.append(time.perf_counter() - t0)
        stats.losses.append(float(loss.detach()))
        if step % 20 == 0:
            bar.set_postfix(loss=f"{stats.losses[-1]:.4g}")
    return stats


def batch_indices(n: int, batch: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, n, (min(batch, n),), generator=generator)
