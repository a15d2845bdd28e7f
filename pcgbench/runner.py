"""One run: fit (or reuse a cached checkpoint) -> sample the test conditions -> evaluate ->
write one JSON run record atomically.  Records are the source of truth for every table.

Layout under the results directory::

    records/<task>/<preset>/<method>/seed<seed>-<hash>.json
    checkpoints/<task>/<preset>/<method>/seed<seed>-<hash>.pt

``<hash>`` covers the task parameters, the method config, seed and preset, so a changed
config never reuses a stale checkpoint, and a run whose record exists is skipped unless
``force`` (free resume).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pcgbench import environment, threads
from pcgbench.checkpoints import check_state, load_checkpoint, save_checkpoint
from pcgbench.config import apply_overrides, check_config, to_dict
from pcgbench.errors import DataNotGenerated, PcgError, TrainingDiverged, UnsupportedError
from pcgbench.log import logger
from pcgbench.method import FitStats, Method, RunContext, method_lineage
from pcgbench.metric import MetricContext
from pcgbench.network import parameter_count
from pcgbench.paper.protocol import protocol_for, protocol_overrides
from pcgbench.presets import check_preset
from pcgbench.record import (
    SCHEMA_VERSION,
    RecordError,
    RunRecord,
    seal_record,
)
from pcgbench.registry import METHODS, METRICS, TASKS
from pcgbench.storage import (
    atomic_write,
    atomic_write_json,
    config_hash,
    ensure_writable,
    make_dir,
    remove_orphan_temps,
)
from pcgbench.storage import results_dir as default_results_dir
from pcgbench.task import Task
from pcgbench.timing import (
    median_after_warmup,
    peak_memory_mb,
    reset_peak_memory,
    synchronize,
)

RECORD_VERSION = SCHEMA_VERSION


@dataclass(frozen=True)
class RunOptions:
    task: str
    method: str
    seed: int = 0
    preset: str = "cpu"
    device: str = "auto"
    overrides: dict[str, Any] = field(default_factory=dict)
    chart: str | None = None
    results_dir: str | None = None
    data_dir: str | None = None
    data_file: str | None = None
    force: bool = False
    progress: bool = True
    sample_batch: int = 64
    timing_repeats: int = 3
    tag: str | None = None  # a user label for a variant column (``tag:NAME``)
    save_samples: int | None = None  # samples kept next to the record; None: preset default
    checkpoint_every: int | None = None  # partial training checkpoints; None: preset default
    max_minutes: float | None = None  # stop the run (one line) after this wall time


def seed_everything(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_task(opts: RunOptions) -> Task:
    task_cls = TASKS.get(opts.task)
    if opts.data_file and "{split}" not in opts.data_file:
        from pcgbench.dataguard import path_kind

        kind = path_kind(Path(opts.data_file).expanduser())
        if kind == "missing":
            raise PcgError(f"--data-file {opts.data_file!r}: no such file or directory")
        if kind not in (None, "a directory"):  # a directory: some tasks read one
            raise PcgError(f"--data-file {opts.data_file!r} is {kind}, not a data file")
    return task_cls(
        preset=opts.preset,
        data_dir=Path(opts.data_dir) if opts.data_dir else None,
        data_file=Path(opts.data_file).expanduser() if opts.data_file else None,
        progress=opts.progress,
    )


def recipe_overrides(task: Task | type[Task], method_cls: type[Method], preset: str
                     ) -> dict[str, Any]:
    """The task's departures from the preset recipe for this method: ``Task.recipe_overrides``
    where the method is trained from scratch with the recipe, then the task's
    ``method_overrides`` of the method's registered name and of the registered methods
    it subclasses (the most specific last)."""
    task_cls = task if isinstance(task, type) else type(task)
    out = dict(task_cls.recipe_overrides.get(preset, {})) if method_cls.preset_recipe else {}
    for name in method_lineage(method_cls)[::-1]:
        out.update(task_cls.method_overrides.get(name, {}).get(preset, {}))
    return out


def method_config(task: Task, opts: RunOptions) -> tuple[type[Method], Any]:
    """The method class and the config a run of ``opts`` uses (no network built)."""
    method_cls = METHODS.get(opts.method)
    reason = method_cls.unsupported_reason(task)
    if reason:
        raise UnsupportedError(reason)
    config = method_cls.Config.for_preset(opts.preset)
    # the task's recipe departures, the paper's sampler settings for this (task, method),
    # then the user's --set
    overrides = {**recipe_overrides(task, method_cls, opts.preset),
                 **protocol_overrides(task.name, method_cls, opts.preset), **opts.overrides}
    if opts.chart is not None:
        overrides["chart"] = opts.chart
    config = apply_overrides(config, overrides)
    check_config(config)
    check_backbone_modes(config, task, default_config(task, method_cls, opts.preset))
    method_cls.validate_config(config)
    return method_cls, config


def check_backbone_modes(config: Any, task: Task, default: Any = None,
                         prefix: str = "") -> None:
    """Refuse (one line) an FNO backbone config whose ``modes`` exceeds what the task's
    grid has on every axis, ``max(mode_caps(spatial_shape))``: the layers would clip it
    and the record would name modes the run never used.  A value equal to the
    ``default`` config's (the preset's, whose documented meaning is "capped per dim by
    the grid size") is left alone, so default columns keep their identity."""
    from pcgbench.backbones import BackboneConfig
    from pcgbench.backbones.fno import mode_caps

    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        base = getattr(default, f.name, None) if default is not None else None
        if isinstance(value, BackboneConfig):
            shape = tuple(int(n) for n in task.spec.spatial_shape)
            if value.kind != "fno" or not shape:
                continue
            most = max(mode_caps(shape))
            if value.modes > most and getattr(base, "modes", None) != value.modes:
                grid = " x ".join(str(n) for n in shape)
                raise PcgError(f"config {prefix}{f.name}.modes={value.modes}: an FNO on the "
                               f"{grid} grid of {task.name!r} uses at most {most} Fourier "
                               f"modes per dim; set {prefix}{f.name}.modes <= {most}")
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_backbone_modes(value, task, base, f"{prefix}{f.name}.")


def build_method(task: Task, opts: RunOptions, device: torch.device) -> Method:
    method_cls, config = method_config(task, opts)
    return _guarded(method_cls.name or method_cls.__name__, "__init__",
                    lambda: method_cls(task, config, device))


@dataclass(frozen=True)
class MethodIdentity:
    """What a run's identity needs of a method (:func:`run_key`) where building it would
    read data that do not exist yet (a sweep's planning step): name, config, version,
    and no pretrained method (only such a method is identified this way)."""

    name: str
    config: Any
    version: int

    def pretrained_name(self) -> None:
        return None


def planned_method(task: Task, opts: RunOptions) -> Method | MethodIdentity:
    """The method of ``opts`` as planning sees it, without running a solver: built where
    that reads no uncached data, else its :class:`MethodIdentity` (raises
    :class:`PcgError` for a method that builds on another and needs the data to be
    built).  ``task`` is left in planning mode (``generation_allowed`` False)."""
    task.generation_allowed = False
    try:
        return build_method(task, opts, torch.device("cpu"))
    except DataNotGenerated:
        method_cls, config = method_config(task, opts)
        if method_cls.pretrained_name is not Method.pretrained_name:
            raise PcgError(f"{task.name}/{opts.method}: cannot be planned before the data "
                           f"exist (pcgbench data generate --task {task.name})") from None
        return MethodIdentity(method_cls.name, config, method_cls.version)


def code_versions(task: Task, method: Method | None = None) -> dict[str, int]:
    """The nonzero code versions a result depends on: the task's (``version``,
    ``data_version``), the method's and that of the pretrained method it builds on.
    Zeros are left out so results from before versioning keep their identity."""
    versions = {"task": task.version, "data": task.data_version}
    if method is not None:
        versions["method"] = method.version
        pretrained = method.pretrained_name()
        if pretrained is not None:
            versions[f"pretrained:{pretrained}"] = METHODS.get(pretrained).version
    return {k: v for k, v in versions.items() if v}


def _with_versions(key: dict[str, Any], versions: dict[str, int]) -> dict[str, Any]:
    return {**key, "code_versions": versions} if versions else key


def run_key(task: Task, method: Method, opts: RunOptions,
            device: torch.device | None = None) -> dict[str, Any]:
    """What a fitted model is: task parameters, data source (a ``--data-file`` by the
    SHA-256 of its contents, :func:`pcgbench.dataguard.data_digest`), method config, seed,
    preset, the kind of device it trained on and the code versions (the checkpoint's
    identity)."""
    from pcgbench.dataguard import data_digest

    return _with_versions({
        "task": task.name,
        "task_params": task.params_dict(),
        "data_file": data_digest(task),
        "method": method.name,
        "config": to_dict(method.config),
        "seed": opts.seed,
        "preset": opts.preset,
        "device_kind": (device or torch.device("cpu")).type,
        "record_version": RECORD_VERSION,
    }, code_versions(task, method))


def default_config(task: Task | type[Task], method_cls: type[Method], preset: str) -> Any:
    """The config of a method's default leaderboard column: the preset's defaults with
    the task's recipe departures and the sampling protocol applied (no --set, --chart or
    --data-file)."""
    return apply_overrides(method_cls.Config.for_preset(preset),
                           {**recipe_overrides(task, method_cls, preset),
                            **protocol_overrides(task.name, method_cls, preset)})


def default_config_dict(task: str, method: str, preset: str) -> dict[str, Any] | None:
    """:func:`default_config` as a run record stores it (JSON types), or None where the
    task or method is not registered here or the preset unknown."""
    task_cls, method_cls = TASKS.lookup(task), METHODS.lookup(method)
    if task_cls is None or method_cls is None:
        return None
    try:
        config = default_config(task_cls, method_cls, preset)
    except (PcgError, KeyError, ValueError, TypeError):
        return None
    return json.loads(json.dumps(to_dict(config)))


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = list(v) if isinstance(v, tuple) else v
    return out


#: the sampling batch size of the default column (``--batch-size``)
DEFAULT_SAMPLE_BATCH = 64
#: what a ``--tag`` may hold: it is printed in markdown, LaTeX, CSV and on terminals
TAG_PATTERN = r"[A-Za-z0-9_.+=,-]{1,64}"


def check_tag(tag: str | None) -> None:
    import re

    if tag is not None and not re.fullmatch(TAG_PATTERN, tag):
        raise PcgError(f"--tag {tag!r}: use 1 to 64 letters, digits and _ . + = , -")


def data_label(task: Task) -> str | None:
    """``data=<file name>@<first 8 hex digits of its content digest>`` (None without a
    --data-file): two files of one name but other contents are two columns."""
    from pcgbench.dataguard import data_digest

    digest = data_digest(task)
    if digest is None:
        return None
    return f"data={Path(str(task.data_file)).name}@{digest.split(':', 1)[1][:8]}"


def variant_label(task: Task, method: Method, opts: RunOptions) -> str | None:
    """None for the method's default column, else a name for the variant: the fields that
    differ from the default config, the data file (:func:`data_label`), a sampling batch
    size other than the default and the ``--tag`` (its own namespace, ``tag:NAME``), e.g.
    ``iterations=5``, ``sample_batch=4`` or ``iterations=5,tag:fast`` (shown as
    ``fm_ot[iterations=5]``)."""
    default = _flat(to_dict(default_config(task, type(method), opts.preset)))
    mine = _flat(to_dict(method.config))
    diff = [f"{k}={mine[k]}" for k in sorted(mine) if mine[k] != default.get(k)]
    if (data := data_label(task)) is not None:
        diff.append(data)
    if opts.sample_batch != DEFAULT_SAMPLE_BATCH:
        diff.append(f"sample_batch={opts.sample_batch}")
    if opts.tag is not None:
        diff.append(f"tag:{opts.tag}")
    return ",".join(diff) or None


def fit_key(key: dict[str, Any], config: Any) -> dict[str, Any]:
    """The checkpoint's identity: the run key without the config's ``sampling_only``
    fields (a sampler-only change reuses the fitted model)."""
    skip = getattr(type(config), "sampling_only", frozenset())
    if not skip:
        return key
    return {**key, "config": {k: v for k, v in key["config"].items() if k not in skip}}


def _paths(root: Path, key: dict[str, Any], record_extra: dict[str, Any] | None = None,
           config: Any = None) -> tuple[Path, Path]:
    """(record path, checkpoint path).  The checkpoint is named by the fit's identity
    (``key`` without the config's sampling-only fields); the record by the whole key and
    ``record_extra`` (sampling settings such as the batch size), so a run with another
    batch size or Euler step count is a new record reusing the checkpoint."""
    sub = Path(key["task"]) / key["preset"] / key["method"]
    ck = sub / f"seed{key['seed']}-{config_hash(fit_key(key, config))}"
    rk = sub / f"seed{key['seed']}-{config_hash({**key, **(record_extra or {})})}"
    records, ckpts = root / "records", root / "checkpoints"
    return records / rk.with_suffix(".json"), ckpts / ck.with_suffix(".pt")


def record_path(opts: RunOptions) -> Path:
    """Where the record of a run would be written (builds task and method; runs no
    solver: :func:`planned_method`)."""
    task = build_task(opts)
    method = planned_method(task, opts)
    root = default_results_dir(opts.results_dir)
    device = environment.resolve_device(opts.device)
    return _paths(root, run_key(task, method, opts, device), _record_extra(opts),
                  method.config)[0]


def _record_extra(opts: RunOptions) -> dict[str, Any]:
    return {"sample_batch": opts.sample_batch, "tag": opts.tag}


def _guarded(name: str, phase: str, call: Any) -> Any:
    """Run a method's ``fit``/``sample``: a bug in a (third-party) method is one line
    naming the method and the phase (the traceback with --debug), not a traceback."""
    try:
        return call()
    except (PcgError, KeyboardInterrupt):
        raise
    except SystemExit as exc:  # a method must not end the process: a failed run
        raise PcgError(f"method {name!r} called sys.exit({exc.code!r}) in {phase}; the run "
                       "failed (no record written)") from exc
    except Exception as exc:  # noqa: BLE001
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise PcgError(f"method {name!r} failed in {phase}: {type(exc).__name__}: {msg} "
                       "(--debug shows the traceback)") from exc


def run_context(opts: RunOptions) -> RunContext:
    """Where a run of ``opts`` fits: seed, preset, results and data directories (so a
    method built on another finds that one's checkpoint there), partial checkpoints."""
    every = (CHECKPOINT_EVERY.get(opts.preset, 0) if opts.checkpoint_every is None
             else opts.checkpoint_every)
    return RunContext(seed=opts.seed, preset=opts.preset, results_dir=opts.results_dir,
                      data_dir=opts.data_dir, progress=opts.progress, checkpoint_every=every)


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


def _fit_or_load(method: Method, task: Task, ckpt: Path, opts: RunOptions,
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
        check_state(_guarded(method.name, "state_dict", method.state_dict), owner)
        updates = getattr(method.config, "iterations", None)
        logger.info("%s/%s seed %d [%s]: fitting%s", task.name, method.name, opts.seed,
                    opts.preset, f" ({updates} updates)" if updates else "")
        t0 = time.perf_counter()
        stats = _guarded(method.name, "fit", lambda: method.fit(train, progress=opts.progress))
        stats = check_fit_stats(stats, owner)
        state = _guarded(method.name, "state_dict", method.state_dict)
        check_state(state, owner)
        save_checkpoint(ckpt, state, stats)
        logger.info("%s/%s seed %d: fitted in %.1f s -> %s", task.name, method.name,
                    opts.seed, time.perf_counter() - t0, ckpt)
        partial.unlink(missing_ok=True)  # the final model is safe: the partial is spent
        return method, stats, False


#: partial training checkpoints (``--checkpoint-every``) per preset: none at smoke
CHECKPOINT_EVERY = {"smoke": 0, "cpu": 200, "gpu": 500, "paper": 1000}


def partial_checkpoint(ckpt: Path) -> Path:
    """Where a fit that will be saved at ``ckpt`` keeps its resumable partial state."""
    return ckpt.with_name(ckpt.stem + ".partial.pt")


def load_or_fit(task: Task, method_name: str, ctx: RunContext, device: torch.device) -> Method:
    """Build ``method_name`` with its preset defaults for (task, preset, seed) and load its
    cached checkpoint, fitting and caching it first when there is none."""
    opts = RunOptions(task=task.name, method=method_name, seed=ctx.seed, preset=ctx.preset,
                      results_dir=ctx.results_dir, data_dir=ctx.data_dir,
                      progress=ctx.progress, data_file=None if task.data_file is None
                      else str(task.data_file))
    seed_everything(ctx.seed)  # as in run(): network init depends on the seed
    method = build_method(task, opts, device)
    method.context = ctx
    _, ckpt = _paths(ensure_writable(default_results_dir(ctx.results_dir)),
                     run_key(task, method, opts, device), None, method.config)
    method, _, _ = _fit_or_load(method, task, ckpt, opts, device)
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


def _check_samples(samples: torch.Tensor, task: Task, n: int, method: str,
                   device: torch.device | None = None) -> None:
    """What ``sample`` returned, checked at the boundary (one line naming the method): a
    dense real floating-point tensor on the run's device or the CPU, of the task's
    shape.  Non-finite values pass: the run records them (status diverged)."""
    if not torch.is_tensor(samples):
        raise PcgError(f"method {method!r} returned a {type(samples).__name__} from sample(); "
                       "expected a torch.Tensor [n, C, *spatial]")
    where = samples.device
    allowed = {"cpu"} | ({device.type} if device is not None else set())
    if samples.is_meta or (device is not None and where.type not in allowed):
        raise PcgError(f"method {method!r} returned samples on the {where} device from "
                       f"sample(); expected them on {device or 'cpu'} or the CPU")
    if samples.layout != torch.strided:
        raise PcgError(f"method {method!r} returned a {samples.layout} tensor from sample(); "
                       "expected a dense tensor")
    if not samples.is_floating_point():
        raise PcgError(f"method {method!r} returned samples of dtype "
                       f"{str(samples.dtype).removeprefix('torch.')} from sample(); expected "
                       "real floating-point values")
    expected = (n, *task.spec.field_shape)
    if tuple(samples.shape) != expected:
        raise PcgError(
            f"method {method!r} returned samples of shape {tuple(samples.shape)}; "
            f"task {task.name!r} expects {expected}"
        )


def metric_value(name: str, value: Any) -> float | None:
    """A metric's result as a float, else a one-line :class:`PcgError` naming the metric:
    a number (Python, NumPy, or a one-element tensor/array) that fits a float and lies in
    the metric's declared ``bounds``.  NaN is kept (tables show ``nan``), except from a
    metric whose NaN means "does not apply" (``Metric.nan_means_not_applicable``): None,
    shown as '–'."""
    import numpy as np

    what = f"metric {name!r} returned"
    if torch.is_tensor(value) or isinstance(value, np.ndarray):
        if value.numel() if torch.is_tensor(value) else value.size != 1:
            raise PcgError(f"{what} an array of shape {tuple(value.shape)}; expected one number")
        value = value.reshape(()).item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PcgError(f"{what} a {type(value).__name__} ({str(value)[:40]!r}); expected a "
                       "number")
    try:
        out = float(value)
    except OverflowError:
        raise PcgError(f"{what} an integer of {len(str(abs(value)))} digits, which overflows "
                       "a float") from None
    cls = METRICS.get(name)
    if math.isnan(out) and getattr(cls, "nan_means_not_applicable", False):
        return None
    lo, hi = getattr(cls, "bounds", (-math.inf, math.inf))
    tol = 1e-9 * max(1.0, abs(lo) if math.isfinite(lo) else 1.0,
                     abs(hi) if math.isfinite(hi) else 1.0)
    if not math.isnan(out) and not lo - tol <= out <= hi + tol:
        raise PcgError(f"{what} {out:.6g}, outside its declared range [{lo:g}, {hi:g}]")
    return out


def evaluate(task: Task, samples: torch.Tensor, reference: torch.Tensor,
             cond: torch.Tensor | None, reference_cond: torch.Tensor | None
             ) -> dict[str, float | None]:
    """Every metric of ``task`` on ``samples`` vs ``reference`` (+ the non-finite and
    blow-up fractions); a metric that raises or returns anything but an in-range number
    is a one-line :class:`PcgError` naming it."""
    from pcgbench.metric import sharing
    from pcgbench.sample_health import blowup_fraction, nonfinite_fraction

    ctx = MetricContext(task=task, cond=cond, reference_cond=reference_cond)
    out: dict[str, float | None] = {}
    # the same two tensor objects for every metric, so ctx.cache and the metrics' shared
    # helpers (finite rows, float64 copies) share work
    x, ref = samples.detach().cpu(), reference.detach().cpu()
    with sharing():
        _evaluate_metrics(task, x, ref, ctx, out)
    out["nonfinite_fraction"] = nonfinite_fraction(x)
    out["blowup_fraction"] = blowup_fraction(x, ref)
    return out


def _evaluate_metrics(task: Task, x: torch.Tensor, ref: torch.Tensor, ctx: MetricContext,
                      out: dict[str, float | None]) -> None:
    """Every metric of ``task`` into ``out`` (see :func:`evaluate`)."""
    for name in task.metrics:
        metric = METRICS.get(name)()
        try:
            with torch.no_grad():
                value = metric(x, ref, ctx)
        except (PcgError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - a (plugin) metric's own failure
            text = str(exc).strip()
            raise PcgError(f"metric {name!r} failed: {type(exc).__name__}: "
                           f"{text.splitlines()[0] if text else ''}") from exc
        out[name] = metric_value(name, value)


def _json_safe(x: Any) -> Any:
    """Non-finite floats as the strings ``"nan"``, ``"inf"``, ``"-inf"`` (JSON has none;
    ``null`` would read as "not measured")."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return x


#: samples kept per run by default (``--save-samples N`` overrides; 0 keeps none)
SAVED_SAMPLES = {"smoke": 0, "cpu": 64, "gpu": 64, "paper": 64}


def loss_curve(losses: list[float], points: int = 200) -> list[list[float]]:
    """[[update, loss], ...]: the training-loss curve subsampled to <= ``points`` pairs
    (evenly spaced updates, the last one included)."""
    n = len(losses)
    if n == 0:
        return []
    m = min(points, n)
    idx = sorted({round(i * (n - 1) / max(m - 1, 1)) for i in range(m)})
    return [[i, losses[i]] for i in idx]


def _save_samples(record_path: Path, samples: torch.Tensor, reference: torch.Tensor,
                  cond: torch.Tensor | None, opts: RunOptions) -> str | None:
    """The first N generated samples, the same test fields and their conditions, as HDF5
    beside the record (atomic); N = ``opts.save_samples`` or the preset's default."""
    n = SAVED_SAMPLES.get(opts.preset, 0) if opts.save_samples is None else opts.save_samples
    n = min(int(n), len(samples))
    if n <= 0:
        return None
    out = record_path.with_suffix(".samples.h5")
    write_samples_file(out, samples[:n], reference[:n], None if cond is None else cond[:n])
    return str(out)


def write_samples_file(out: Path, samples: torch.Tensor, reference: torch.Tensor,
                       cond: torch.Tensor | None) -> None:
    """``samples``, the ``reference`` test fields and their ``cond`` as HDF5 at ``out``
    (atomic): the ``.samples.h5`` layout the report reads."""
    import h5py

    def write(tmp: Path) -> None:
        with h5py.File(tmp, "w") as f:
            f.create_dataset("samples", data=samples.detach().cpu().float().numpy(),
                             compression="gzip")
            f.create_dataset("reference", data=reference.cpu().float().numpy(),
                             compression="gzip")
            if cond is not None:
                f.create_dataset("cond", data=cond.cpu().float().numpy())
            f.attrs["note"] = "first n generated samples, the same test fields, conditions"

    atomic_write(out, write)


#: a fit whose loss ends this many times above its lowest running median diverged (the
#: cpu runs so far: at most 191 x for a healthy fit, Drifting on dynamic stall, whose
#: loss is a squared drift norm; 7,000 x for Shortcut there, which blew up in its last
#: 35 updates, 3.8e4 -> 1.7e10)
LOSS_GROWTH_LIMIT = 1e3


def loss_growth(losses: list[float]) -> float:
    """The median of the last window of losses over the lowest median of any window
    (window: 1/20 of the updates, at least 5): robust to single spikes and to noisy
    minibatch losses; 1 for a fit that ends at its best, 0 when there are too few."""
    n = len(losses)
    w = max(5, n // 20)
    if n < 2 * w:
        return 0.0
    import numpy as np

    windows = np.lib.stride_tricks.sliding_window_view(np.asarray(losses, float), w)
    medians = np.median(windows, axis=1)
    lowest = float(medians.min())
    if lowest <= 0:  # a loss that reaches 0 (or is signed) has no growth ratio
        return 0.0
    return float(medians[-1]) / lowest


def config_problem(config: Any) -> str | None:
    """Why a run of ``config`` is recorded ``invalid`` whatever it produces (a config that
    trains or samples nothing), or None; ``show-config`` says the same."""
    for name in ("iterations", "steps"):
        if getattr(config, name, None) == 0:
            return f"the config trains or samples nothing ({name}=0)"
    return None


def run_status(method: Method, fit_stats: FitStats, metrics: dict[str, float]
               ) -> tuple[str, str | None]:
    """``("ok" | "diverged" | "invalid", reason)`` of a finished run.  A run whose config
    trains or samples nothing, whose training loss is non-finite or diverged
    (:func:`loss_growth` over ``LOSS_GROWTH_LIMIT``), or any of whose samples
    is non-finite or blown up (``blowup_fraction``) is recorded as such and never scored
    as a success (the leaderboard leaves it out of the means and says so)."""
    problem = config_problem(method.config)
    if problem is not None:
        return "invalid", problem
    if any(not math.isfinite(v) for v in fit_stats.losses):
        return "diverged", "the training loss became non-finite"
    growth = loss_growth(fit_stats.losses)
    if growth > LOSS_GROWTH_LIMIT:
        return "diverged", (f"the training loss diverged: it ended {growth:.3g} x above its "
                            f"lowest running median (limit {LOSS_GROWTH_LIMIT:g} x)")
    frac = metrics.get("nonfinite_fraction")
    if frac is not None and (math.isnan(frac) or frac > 0):
        return "diverged", f"{frac:.1%} of the samples are non-finite"
    blown = metrics.get("blowup_fraction")
    if blown is not None and blown > 0:
        from pcgbench.sample_health import BLOWUP_FACTOR

        return "diverged", (f"{blown:.1%} of the samples blew up (|x| > {BLOWUP_FACTOR:g} x "
                            "the test data's largest magnitude)")
    return "ok", None


def data_reference_record(task: Task, opts: RunOptions) -> Path:
    """The ``data`` column: each metric for an independent draw of real data
    (:meth:`Task.data_reference`) against the test set; the reference floor every table
    needs.  Its identity carries the reference's code version (``reference``)."""
    from pcgbench.dataguard import data_digest

    root = ensure_writable(default_results_dir(opts.results_dir))
    key = {"task": task.name, "task_params": task.params_dict(), "data_file": data_digest(task),
           "method": "data", "config": {}, "seed": 0, "preset": opts.preset,
           "record_version": RECORD_VERSION}
    versions = code_versions(task)
    if task.reference_version():
        versions["reference"] = task.reference_version()
    key = _with_versions(key, versions)
    path, _ = _paths(root, key)
    existing = None if opts.force else _read_record(path)  # a corrupt one is regenerated
    if existing is not None and set(task.metrics) <= set(existing.get("metrics") or {}):
        return path
    try:
        metrics, spread, note = reference_metrics(task)
    except PcgError as exc:
        raise PcgError(f"{exc} (on the data probe: reference vs test, before any fit)") from exc
    record = {**key, "variant": data_label(task), "metrics": metrics, "nfe": 0,
              "reference_draws": task.reference_draws(),
              "data_file_path": opts.data_file, "created": environment.now(),
              "note": note,
              "versions": environment.package_versions(), "git": environment.git_hash()}
    if spread:
        record["metrics_std"] = spread
    if task.split_overlaps:
        record["data_overlap"] = dict(task.split_overlaps)
    if task.data_notes:
        record["data_notes"] = dict(task.data_notes)
    write_record(path, record)
    return path


def reference_metrics(task: Task) -> tuple[dict[str, float], dict[str, float], str]:
    """``(means, stds, note)``: each metric of the task's data reference against the
    test split (:meth:`Task.data_reference`), averaged over its
    :meth:`Task.reference_draws` draws (stds over the draws; empty for one draw)."""
    draws = task.reference_draws()
    runs = []
    for d in range(draws):
        # one draw: called without it, as a plug-in's data_reference(self) may be written
        ref, target, note = task.data_reference(d) if draws > 1 else task.data_reference()
        runs.append(evaluate(task, ref.x, target.x, ref.cond, target.cond))
    if draws == 1:
        return runs[0], {}, note
    means, stds = {}, {}
    for name in runs[0]:
        vals = [r[name] for r in runs if isinstance(r.get(name), int | float)]
        finite = [float(v) for v in vals if math.isfinite(v)]
        means[name] = statistics.fmean(finite) if finite else runs[0][name]
        if len(finite) > 1:
            stds[name] = statistics.stdev(finite)
    return means, stds, note


def write_record(path: Path, record: dict[str, Any]) -> RunRecord:
    """Write a run record atomically with its content digest (``digest``,
    :func:`pcgbench.record.record_digest`); metrics outside their declared ``bounds``
    and ill-typed fields (:func:`pcgbench.record.record_problem`) are refused.  Returns the
    record as written."""
    deadline_check()  # a --max-minutes that passed (and was swallowed) writes no record
    record = _json_safe(record)
    for name, value in (record.get("metrics") or {}).items():
        if name in METRICS and isinstance(value, int | float):
            metric_value(name, value)
    written = RunRecord.from_json(seal_record(record), str(path))
    atomic_write_json(path, written.to_json())
    return written


def run(opts: RunOptions) -> tuple[RunRecord, Path, bool]:
    """Execute one run.  Returns (record, path, skipped)."""
    check_preset(opts.preset)
    if not 0 <= opts.seed < 2**32:
        raise PcgError(f"--seed must be an integer in [0, 2**32), got {opts.seed}")
    if opts.save_samples is not None and opts.save_samples < 0:
        raise PcgError(f"--save-samples must be >= 0, got {opts.save_samples}")
    if opts.checkpoint_every is not None and opts.checkpoint_every < 0:
        raise PcgError(f"--checkpoint-every must be >= 0, got {opts.checkpoint_every}")
    if opts.timing_repeats < 1 or opts.sample_batch < 1:
        raise PcgError(f"--timing-repeats and --batch-size must be >= 1, got "
                       f"{opts.timing_repeats} and {opts.sample_batch}")
    if opts.max_minutes is not None and not (0 < opts.max_minutes < math.inf):
        raise PcgError(f"--max-minutes must be a positive number, got {opts.max_minutes}")
    check_tag(opts.tag)
    device = environment.resolve_device(opts.device)
    seed_everything(opts.seed)
    task = build_task(opts)
    method = build_method(task, opts, device)
    method.context = run_context(opts)
    root = ensure_writable(default_results_dir(opts.results_dir))
    remove_orphan_temps(root)
    key = run_key(task, method, opts, device)
    path, ckpt = _paths(root, key, _record_extra(opts), method.config)
    variant = variant_label(task, method, opts)
    from filelock import FileLock

    make_dir(path.parent)
    # identical concurrent runs: the first does the work, the others wait and skip
    with FileLock(f"{path}.lock"):
        existing = _read_record(path) if not opts.force else None
        if existing is not None:
            # the floor of this cell, where a code change made the old one stale
            data_reference_record(task, opts)
            return existing, path, True
        with time_limit(opts.max_minutes):
            return _execute(opts, task, method, device, key, path, ckpt, variant)


@dataclass(frozen=True)
class Fitted:
    """A method fitted (or loaded from its verified checkpoint) as :func:`run` fits it."""

    task: Task
    method: Method
    stats: FitStats
    reused: bool
    checkpoint: Path


def fit_only(opts: RunOptions) -> Fitted:
    """Fit the method of ``opts`` -- the same identity, checkpoint, lock and resume as
    :func:`run` -- without sampling or evaluating any split (``pcgbench tune`` scores it
    on the val split itself).  A diverged fit raises :class:`TrainingDiverged`."""
    check_preset(opts.preset)
    device = environment.resolve_device(opts.device)
    seed_everything(opts.seed)
    task = build_task(opts)
    method = build_method(task, opts, device)
    method.context = run_context(opts)
    root = ensure_writable(default_results_dir(opts.results_dir))
    key = run_key(task, method, opts, device)
    _, ckpt = _paths(root, key, _record_extra(opts), method.config)
    with time_limit(opts.max_minutes):
        method, stats, reused = _fit_or_load(method, task, ckpt, opts, device)
    return Fitted(task, method, stats, reused, ckpt)


def sample_rows(method: Method, rows: Any, batch: int, gen: torch.Generator,
                device: torch.device) -> torch.Tensor:
    """One sample per row (condition) of ``rows`` (a :class:`FieldData`), in batches of
    ``batch``, untimed; shape and finiteness are the caller's to check."""
    samples, _ = _sample_untimed(method, rows, batch, gen, device)
    _check_samples(samples, method.task, len(rows), method.name)
    return samples


class RunTimeLimit(PcgError):
    """The run passed ``--max-minutes``."""


#: the message of the --max-minutes that has passed in the current :func:`time_limit`
#: (None: none passed, or no limit)
_deadline: list[str | None] = [None]
#: seconds between repeats of an expired limit whose exception something swallowed
DEADLINE_REPEAT_SECONDS = 5.0


def deadline_check() -> None:
    """Raise :class:`RunTimeLimit` where the current ``--max-minutes`` has passed (code
    that catches broad exceptions calls this before treating one as its own failure)."""
    if _deadline[0] is not None:
        raise RunTimeLimit(_deadline[0])


@contextlib.contextmanager
def time_limit(minutes: float | None) -> Iterator[None]:
    """Raise :class:`RunTimeLimit` in the main thread after ``minutes`` (SIGALRM; a no-op
    without a limit, off the main thread or where there is no ``setitimer``).  A fit
    stopped this way resumes from its last partial checkpoint when rerun.  Wherever the
    limit lands it stays the limit: the alarm repeats every ``DEADLINE_REPEAT_SECONDS``
    until the block ends, :func:`deadline_check` raises it, :func:`write_record` writes
    nothing after it, and a block that completes after it (its exception swallowed)
    raises it on exit."""
    import signal
    import threading

    if (minutes is None or threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "setitimer")):
        yield
        return
    message = (f"the run passed --max-minutes {minutes:g} and was stopped (no record; a "
               "rerun resumes from the last partial checkpoint)")

    def expire(signum: int, frame: Any) -> None:
        _deadline[0] = message
        raise RunTimeLimit(message)

    outer = _deadline[0]
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, minutes * 60.0, DEADLINE_REPEAT_SECONDS)
    try:
        yield
        passed = _deadline[0] is not None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _deadline[0] = outer
    if passed:
        raise RunTimeLimit(message)


#: warn before a fit with this many times the preset's default updates
BUDGET_RATIO_WARNING = 100
#: or whose estimated duration (from recorded s/update) exceeds this many seconds
BUDGET_SECONDS_WARNING = 3600.0


def recorded_seconds_per_update(task: str, preset: str, method: str,
                                results: str | None) -> float | None:
    """The median training s/update recorded for (task, preset, method) in the results
    directory (None where none is recorded)."""
    folder = default_results_dir(results) / "records" / task / preset / method
    values = []
    for p in sorted(folder.glob("*.json"))[:50] if folder.is_dir() else ():
        try:
            v = (json.loads(p.read_text()).get("training") or {}).get("seconds_per_update")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(v, int | float) and math.isfinite(v) and v > 0:
            values.append(float(v))
    return statistics.median(values) if values else None


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def warn_budget(task: Task, method: Method, opts: RunOptions) -> None:
    """Warn before a fit whose ``iterations`` is far above the preset's default: with the
    estimated time where a s/update of this (task, preset, method) is recorded."""
    iters = getattr(method.config, "iterations", None)
    default = getattr(default_config(task, type(method), opts.preset), "iterations", None)
    if not isinstance(iters, int) or not isinstance(default, int) or default <= 0:
        return
    ratio = iters / default
    spu = recorded_seconds_per_update(task.name, opts.preset, method.name, opts.results_dir)
    if ratio <= 1 or (ratio < BUDGET_RATIO_WARNING
                      and (spu is None or iters * spu < BUDGET_SECONDS_WARNING)):
        return
    import warnings

    estimate = ("" if spu is None else
                f": ~{_duration(iters * spu)} at the {spu:.3g} s/update recorded for "
                f"{method.name} on {task.name} at {opts.preset}")
    warnings.warn(f"iterations={iters} is {ratio:.3g} x the {opts.preset} default ({default})"
                  f"{estimate}; --max-minutes bounds the run", stacklevel=2)


def _read_record(path: Path) -> RunRecord | None:
    """The stored record, or None when there is none or it is unreadable (a corrupt,
    unsealed or ill-typed record does not block a rerun; it is replaced, with a warning).
    A record written by a newer pcgbench is refused (one line), never overwritten."""
    from pcgbench.record import NEWER, record_integrity

    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or "metrics" not in record:
            raise ValueError("not a run record")
        problem = record_integrity(record)
        if problem is not None and NEWER in problem:
            raise PcgError(f"run record {path}: {problem}; it is left as it is")
        if problem is not None:
            raise ValueError(problem)
        return RunRecord.from_json(record, str(path))
    except (OSError, ValueError, RecordError) as exc:
        import warnings

        warnings.warn(f"run record {path} is unreadable ({exc}); rerunning", stacklevel=2)
        return None


@dataclass
class Sampled:
    """What sampling the test split produced: the samples (CPU), the counted NFE per
    batch and its mean, the timing block of the record, and the peak memory."""

    samples: torch.Tensor
    nfe: float | int
    nfe_per_batch: list[int]
    inference: dict[str, Any]
    peak_mb: float


def _sample_and_time(method: Method, task: Task, test: Any, opts: RunOptions,
                     device: torch.device) -> Sampled:
    """Sample every test condition in batches; NFE is counted on every batch (never
    computed by formula); inference time is synchronized, after the warm-up (the first
    batch), the median over the full-size production batches, with extra timed batches
    only when there are fewer than ``timing_repeats`` of them (a slow sampler then costs
    no more than its own work)."""
    test = task.dataset("test")
    n = len(test)
    batch = min(opts.sample_batch, n)
    gen = torch.Generator(device="cpu").manual_seed(10_000 + opts.seed)
    # progress: one tick per counted network call (the samplers' steps), over every batch
    full = (n - batch) // batch  # full-size production batches after the first
    n_batches = -(-n // batch) + max(0, opts.timing_repeats - full)
    from tqdm.auto import tqdm

    nominal = str(type(method).nominal_nfe(method.config))
    bar = tqdm(total=int(nominal) * n_batches if nominal.isdigit() else None,
               desc=f"sampling {method.name}", unit="net call", leave=True,
               disable=not opts.progress)
    method.nfe.listener = bar.update
    try:
        return _sample_batches(method, task, opts, device, test, n, batch, gen, bar,
                               n_batches)
    finally:
        method.nfe.listener = None
        bar.close()


def _sample_batches(method: Method, task: Task, opts: RunOptions, device: torch.device,
                    test: Any, n: int, batch: int, gen: torch.Generator, bar: Any,
                    n_batches: int) -> Sampled:
    """The body of :func:`_sample_and_time` (``bar`` ticks on every counted call)."""

    def cond_slice(i: int, j: int) -> torch.Tensor | None:
        return None if test.cond is None else test.cond[i:j].to(device)

    reset_peak_memory(device)
    method.nfe.reset()
    t_first = time.perf_counter()
    first = _guarded(method.name, "sample",
                     lambda: method.sample(cond_slice(0, batch), batch, gen))
    t_first = time.perf_counter() - t_first
    nfe_per_batch = [method.nfe.count]
    _check_samples(first, task, batch, method.name, device)
    if method.nfe.count and bar.total != method.nfe.count * n_batches:
        bar.total = method.nfe.count * n_batches  # the counted calls, not the formula
    bar.set_postfix_str(f"1/{n_batches} batches done", refresh=False)

    breakdowns: list[dict[str, float]] = []
    repeats: list[float] = []

    def timed(cond: torch.Tensor | None, size: int, g: torch.Generator) -> torch.Tensor:
        method.nfe.reset()
        synchronize(device)
        t0 = time.perf_counter()
        out = _guarded(method.name, "sample", lambda: method.sample(cond, size, g))
        synchronize(device)
        _check_samples(out, task, size, method.name, device)
        nfe_per_batch.append(method.nfe.count)  # adaptive samplers vary per batch
        bar.set_postfix_str(f"{len(nfe_per_batch)}/{n_batches} batches done", refresh=False)
        if size == batch:
            repeats.append(time.perf_counter() - t0)
            breakdowns.append(dict(method.sample_breakdown))
        return out

    chunks = [first.detach().cpu()]
    for i in range(batch, n, batch):
        j = min(n, i + batch)
        chunks.append(timed(cond_slice(i, j), j - i, gen).detach().cpu())
    extra = opts.timing_repeats - len(repeats)
    per = statistics.median(repeats) if repeats else t_first
    if extra > 0 and extra * per > BUDGET_SECONDS_WARNING / 6:
        import warnings

        warnings.warn(f"--timing-repeats {opts.timing_repeats}: {extra} extra timed batches of "
                      f"~{per:.3g} s, ~{_duration(extra * per)}; --max-minutes bounds the run",
                      stacklevel=2)
    for _ in range(extra):
        timed(cond_slice(0, batch), batch, torch.Generator(device="cpu").manual_seed(1))
    per_batch = statistics.median(repeats)
    nfe: float | int = statistics.fmean(nfe_per_batch)
    if all(v == nfe_per_batch[0] for v in nfe_per_batch):
        nfe = nfe_per_batch[0]
    breakdown = {
        k: sorted(b.get(k, 0.0) for b in breakdowns)[len(breakdowns) // 2] / batch
        for k in (breakdowns[0] if breakdowns else {})
    }
    synchronize(device)
    samples = torch.cat(chunks)
    sample_peak, _ = peak_memory_mb(device)

    inference = {"seconds_per_sample": per_batch / batch, "seconds_per_batch": per_batch,
                 "batch_size": batch, "repeats_seconds": repeats,
                 "breakdown_seconds_per_sample": breakdown}
    return Sampled(samples, nfe, nfe_per_batch, inference, sample_peak)


def _sample_untimed(method: Method, test: Any, batch: int, gen: torch.Generator,
                    device: torch.device) -> tuple[torch.Tensor, int]:
    """Every test condition sampled in batches of ``batch`` (samples on the CPU, batches)."""
    n, chunks = len(test), []
    for i in range(0, n, batch):
        cond = None if test.cond is None else test.cond[i:i + batch].to(device)
        size = min(batch, n - i)
        out = _guarded(method.name, "sample", lambda c=cond, k=size: method.sample(c, k, gen))
        _check_samples(out, method.task, size, method.name, device)
        chunks.append(out.detach().cpu())
    return torch.cat(chunks), len(chunks)


def diagnostic_samples(method: Method, task: Task, test: Any, opts: RunOptions,
                       device: torch.device) -> dict[str, dict[str, Any]]:
    """The test split sampled again under each of the method class's
    ``diagnostic_sampling`` configurations (sampling-only fields of the same fitted
    weights; the run's own seeded generator), evaluated like the run: name ->
    {overrides, nfe, metrics}.  Untimed; the run's config is restored afterwards."""
    out: dict[str, dict[str, Any]] = {}
    config = method.config
    for name, over in type(method).diagnostic_sampling.items():
        method.config = config.replace(**over)
        try:
            gen = torch.Generator(device="cpu").manual_seed(10_000 + opts.seed)
            method.nfe.reset()
            samples, n_batches = _sample_untimed(method, test, opts.sample_batch, gen, device)
            nfe = method.nfe.count / n_batches
            if not bool(torch.isfinite(samples).all()):
                out[name] = {"overrides": over, "nfe": nfe, "metrics": {},
                             "status": "non-finite samples"}
                continue
            out[name] = {"overrides": over, "nfe": nfe,
                         "metrics": evaluate(task, samples, test.x, test.cond, test.cond)}
        finally:
            method.config = config
    return out


def _execute(opts: RunOptions, task: Task, method: Method, device: torch.device,
             key: dict[str, Any], path: Path, ckpt: Path, variant: str | None
             ) -> tuple[RunRecord, Path, bool]:
    started = environment.now()
    t_start = time.perf_counter()
    task.check_splits()  # finite, non-empty and disjoint splits before any fit
    data_reference_record(task, opts)  # also probes every metric on real data
    warn_budget(task, method, opts)
    reset_peak_memory(device)
    from pcgbench.benchrecords import machine_load

    load = {"fit": {"start": machine_load()}}
    try:
        method, fit_stats, reused = _fit_or_load(method, task, ckpt, opts, device)
    except TrainingDiverged as exc:  # a failed run is recorded, not scored
        record = {**key, **_record_extra(opts), "variant": variant,
                  "config_hash": config_hash(key), "data_file_path": opts.data_file,
                  "status": "diverged", "status_reason": str(exc), "metrics": {},
                  "nfe": None, "device": environment.device_description(device),
                  "versions": environment.package_versions(), "git": environment.git_hash(),
                  "started": started, "finished": environment.now(),
                  "wall_seconds": time.perf_counter() - t_start}
        return write_record(path, record), path, False
    train_peak, mem_kind = peak_memory_mb(device)
    if reused or not fit_stats.update_seconds:
        # no optimizer update ran (a reused checkpoint, or a sampling-time method that
        # loads its backbone): the window holds loading, not training
        train_peak = None
    load["fit"]["end"] = machine_load()
    t_fit = time.perf_counter() - t_start

    test = task.dataset("test")
    where = f"{task.name}/{method.name} seed {opts.seed} [{opts.preset}]"
    logger.info("%s: sampling %d test conditions (batches of %d)", where, len(test),
                min(opts.sample_batch, len(test)))
    load["sample"] = {"start": machine_load()}
    sampled = _sample_and_time(method, task, test, opts, device)
    load["sample"]["end"] = machine_load()
    samples, n = sampled.samples, len(test)

    logger.info("%s: evaluating %d metrics on %d samples", where, len(task.metrics), n)
    try:
        metrics = evaluate(task, samples, test.x, test.cond, test.cond)
    except PcgError as exc:  # keep what the fit and sampling produced
        kept = _save_samples(path, samples, test.x, test.cond,
                             dataclasses.replace(opts, save_samples=n))
        raise PcgError(f"{exc}; no record written, the {n} samples are kept in {kept}") from exc
    samples_file = _save_samples(path, samples, test.x, test.cond, opts)
    status, reason = run_status(method, fit_stats, metrics)
    diagnostics = diagnostic_samples(method, task, test, opts, device) if status == "ok" else {}

    record = {
        **key,
        **_record_extra(opts),
        "variant": variant,
        "config_hash": config_hash(key),
        "status": status,
        "status_reason": reason,
        "metrics": metrics,
        "nfe": sampled.nfe,  # mean over every sampled batch (equal for fixed-step samplers)
        "nfe_per_batch": sampled.nfe_per_batch,
        "inference": sampled.inference,
        "training": {
            "seconds_per_update": median_after_warmup(fit_stats.update_seconds),
            "updates": len(fit_stats.update_seconds),
            "fit_seconds": sum(fit_stats.update_seconds),
            "final_loss": fit_stats.losses[-1] if fit_stats.losses else None,
            "loss_curve": loss_curve(fit_stats.losses),
            "checkpoint_reused": reused,
            **fit_stats.extra,
        },
        "samples_file": samples_file,
        "memory": {"train_peak_mb": train_peak, "sample_peak_mb": sampled.peak_mb,
                   "kind": mem_kind},
        # 1-min load average and CPU count at start and end of fit and of sampling
        "load": load,
        # the CPU thread policy in force (pcgbench.threads)
        "threads": threads.current().as_record(),
        "method_info": method.record_extras(),
        # the same weights under the class's diagnostic samplers (never a column)
        **({"diagnostics": diagnostics} if diagnostics else {}),
        "pretrained": method.pretrained_name(),
        "protocol": {**protocol_for(task.name, type(method)).as_record(),
                     "applied": bool(protocol_overrides(task.name, type(method), opts.preset)),
                     "overridden": sorted(set(opts.overrides) & set(
                         protocol_for(task.name, type(method)).settings))},
        "parameters": parameter_count(*method.modules()),
        "n_samples": n,
        "device": environment.device_description(device),
        "versions": environment.package_versions(),
        "git": environment.git_hash(),
        "started": started,
        "finished": environment.now(),
        "wall_seconds": time.perf_counter() - t_start,
        "fit_wall_seconds": t_fit,
        "checkpoint": str(ckpt),
        "data_file_path": opts.data_file,
    }
    if task.split_overlaps:
        record["data_overlap"] = dict(task.split_overlaps)
    if task.data_notes:
        record["data_notes"] = dict(task.data_notes)
    return write_record(path, record), path, False
