"""The fit stage of a run: load the verified checkpoint of a plan, or fit the method and
write it (a file lock makes concurrent runs fit once; partial checkpoints make a stopped fit
resumable), with the pretrained method it builds on injected first (:func:`prepare`)."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import torch

from pcgbench.errors import PcgError
from pcgbench.method import FitStats, Method, RunContext
from pcgbench.results.checkpoints import check_state, load_checkpoint, save_checkpoint
from pcgbench.results.files import ensure_writable
from pcgbench.runtime.log import logger
from pcgbench.runtime.timing import peak_memory_mb, reset_peak_memory
from pcgbench.stages.guard import deadline_check, guarded
from pcgbench.stages.outcomes import Fitted
from pcgbench.stages.plan import RunOptions, RunPlan, resolve, seed_everything
from pcgbench.task import Task


def prepare(method: Method, device: torch.device | None = None) -> Method:
    """Inject the pretrained method ``method`` builds on (``pretrained_name``): fitted
    once per (task, task preset, seed) with its preset defaults and cached as that
    method's own checkpoint, so a plain ``pcgbench run --method fm_ot`` and every
    sampling-time method share it.  Returns ``method``."""
    name = method.pretrained_name()
    if name is not None and getattr(method, "_pretrained", None) is None:
        ctx = method.context
        if ctx.preset != method.task.preset:  # built outside the runner (tests, scripts)
            ctx = dataclasses.replace(ctx, preset=method.task.preset)
        method.use_pretrained(load_or_fit(method.task, name, ctx, device or method.device))
    return method


def fit_or_load(method: Method, task: Task, ckpt: Path, opts: RunOptions,
                device: torch.device) -> tuple[Method, FitStats, bool]:
    """(method, fit stats, reused).  Loads the verified checkpoint (digest, complete
    state, finite weights, strict module loads); otherwise -- none, or one that fails
    verification (warned) -- fits a method rebuilt from scratch (never one a failed load
    left half-loaded) and writes the checkpoint.  A file lock on the checkpoint makes
    concurrent runs fit it once."""
    from filelock import FileLock

    ckpt.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{ckpt}.lock"):
        prepare(method, device)
        if ckpt.exists() and not opts.force:
            try:
                expected = set(method.state_dict())
                state, fit = load_checkpoint(ckpt, device, expected)
                method.load_state_dict(state)
                logger.info("%s/%s seed %d: verified checkpoint %s", task.name, method.name,
                            opts.seed, ckpt)
                return method, FitStats(**fit), True
            except Exception as exc:  # noqa: BLE001 - a corrupt checkpoint is refitted
                deadline_check()  # --max-minutes passed inside the load: not a corrupt file
                import warnings

                warnings.warn(f"checkpoint {ckpt} failed verification "
                              f"({type(exc).__name__}: {exc}); refitting from scratch",
                              stacklevel=2)
                context = method.context
                seed_everything(opts.seed)
                method = type(method)(task, method.config, device)
                method.context = context
                prepare(method, device)
        partial = partial_checkpoint(ckpt)
        if opts.force:
            partial.unlink(missing_ok=True)  # --force: a fit from scratch
        method.context = dataclasses.replace(method.context, partial_path=str(partial))
        train = task.dataset("train")
        owner = f"method {method.name!r}"
        check_state(guarded(method.name, "state_dict", method.state_dict), owner)
        updates = method.config.training_updates()
        logger.info("%s/%s seed %d [%s]: fitting%s", task.name, method.name, opts.seed,
                    opts.preset, f" ({updates} updates)" if updates else "")
        t0 = time.perf_counter()
        stats = guarded(method.name, "fit", lambda: method.fit(train, progress=opts.progress))
        stats = check_fit_stats(stats, owner)
        state = guarded(method.name, "state_dict", method.state_dict)
        check_state(state, owner)
        save_checkpoint(ckpt, state, stats)
        logger.info("%s/%s seed %d: fitted in %.1f s -> %s", task.name, method.name,
                    opts.seed, time.perf_counter() - t0, ckpt)
        partial.unlink(missing_ok=True)  # the final model is safe: the partial is spent
        return method, stats, False


def partial_checkpoint(ckpt: Path) -> Path:
    """Where a fit that will be saved at ``ckpt`` keeps its resumable partial state."""
    from pcgbench.results.layout import partial_checkpoint_path

    return partial_checkpoint_path(ckpt)


def load_or_fit(task: Task, method_name: str, ctx: RunContext, device: torch.device) -> Method:
    """Build ``method_name`` with its preset defaults for (task, preset, seed) and load its
    cached checkpoint, fitting and caching it first when there is none."""
    opts = RunOptions(task=task.name, method=method_name, seed=ctx.seed, preset=ctx.preset,
                      results_dir=ctx.results_dir, data_dir=ctx.data_dir,
                      progress=ctx.progress, data_file=None if task.data_file is None
                      else str(task.data_file))
    plan = resolve(opts, task=task, device=device)  # seeds, builds: as a run of its own
    method = plan.method
    method.context = ctx
    ensure_writable(plan.root)
    method, _, _ = fit_or_load(method, task, plan.checkpoint, opts, device)
    return method


def check_fit_stats(stats: Any, owner: str) -> FitStats:
    """What ``fit`` returned, checked at the boundary (one line naming the method): a
    :class:`FitStats` whose ``update_seconds`` and ``losses`` are lists of real numbers
    (returned as floats; a non-finite loss stays, :func:`run_status` records it as
    diverged) and whose ``extra`` is a dict with string keys."""
    if not isinstance(stats, FitStats):
        raise PcgError(f"{owner}: fit() returned {type(stats).__name__}, not the FitStats "
                       "of its updates (pcgbench.method.FitStats)")
    import numpy as np

    lists: dict[str, list[float]] = {}
    for name in ("update_seconds", "losses"):
        values = getattr(stats, name)
        if not isinstance(values, list | tuple):
            raise PcgError(f"{owner}: fit() returned FitStats.{name} as a "
                           f"{type(values).__name__}; expected a list of numbers")
        for i, v in enumerate(values):
            if isinstance(v, bool | np.bool_) or not isinstance(v, int | float | np.integer
                                                                 | np.floating):
                hint = " (append loss.item())" if torch.is_tensor(v) else ""
                raise PcgError(f"{owner}: fit() returned FitStats.{name}[{i}] = "
                               f"{str(v)[:40]!r}, a {type(v).__name__}; expected a real "
                               f"number{hint}")
        lists[name] = [float(v) for v in values]
    if any(not (math.isfinite(v) and v >= 0) for v in lists["update_seconds"]):
        raise PcgError(f"{owner}: fit() returned FitStats.update_seconds with a negative or "
                       "non-finite duration")
    if not isinstance(stats.extra, dict) or not all(isinstance(k, str) for k in stats.extra):
        raise PcgError(f"{owner}: fit() returned FitStats.extra as a "
                       f"{type(stats.extra).__name__}; expected a dict with string keys")
    return FitStats(update_seconds=lists["update_seconds"], losses=lists["losses"],
                    extra=stats.extra)


def fit(plan: RunPlan) -> Fitted:
    """The fit stage of ``plan``: its method fitted, or loaded from its verified checkpoint,
    with the fit's peak memory and the machine's load before and after.  A diverged fit
    raises :class:`~pcgbench.errors.TrainingDiverged`."""
    from pcgbench.runtime.environment import machine_load

    reset_peak_memory(plan.device)
    start = machine_load()
    method, stats, reused = fit_or_load(plan.method, plan.task, plan.checkpoint,
                                        plan.options, plan.device)
    peak, kind = peak_memory_mb(plan.device)
    if reused or not stats.update_seconds:
        # no optimizer update ran (a reused checkpoint, or a sampling-time method that
        # loads its backbone): the window holds loading, not training
        peak = None
    return Fitted(plan.task, method, stats, reused, plan.checkpoint, train_peak_mb=peak,
                  memory_kind=kind, load={"start": start, "end": machine_load()})
