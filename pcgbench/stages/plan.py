"""A run resolved once: :func:`resolve` turns :class:`RunOptions` into a :class:`RunPlan` --
the task and the method built, the config layers kept apart (preset, task recipe, sampling
protocol, ``--set``), the resolved and default configs, the protocol entry, the identity
key, the record and checkpoint paths and the variant label.  Everything that needs to
know what a run *is* (``run``, ``sweep`` planning, ``show-config``, the pretrained step
of ``run``, the leaderboard's staleness check) reads it from here.

Layout under the results directory::

    records/<task>/<preset>/<method>/seed<seed>-<hash>.json
    checkpoints/<task>/<preset>/<method>/seed<seed>-<hash>.pt

``<hash>`` covers the task parameters, the data source, the method config, seed, preset,
device kind and code versions, so a changed config never reuses a stale checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pcgbench.config import apply_overrides, check_config, to_dict
from pcgbench.errors import DataNotGenerated, PcgError, UnsupportedError
from pcgbench.method import Method, RunContext, method_lineage
from pcgbench.paper.protocol import protocol_for, protocol_overrides
from pcgbench.presets import check_preset
from pcgbench.registry import METHODS, TASKS
from pcgbench.results import layout
from pcgbench.results.files import results_dir as default_results_dir
from pcgbench.results.identity import (
    fit_key,
    legacy_keys,
    record_extra,
    run_key,
)
from pcgbench.runtime import environment
from pcgbench.stages.guard import guarded
from pcgbench.task import Task

#: the schema version every run key carries (``record_version``)
#: the sampling batch size of the default column (``--batch-size``)
DEFAULT_SAMPLE_BATCH = 64
#: what a ``--tag`` may hold: it is printed in markdown, LaTeX, CSV and on terminals
TAG_PATTERN = r"[A-Za-z0-9_.+=,-]{1,64}"
#: partial training checkpoints (``--checkpoint-every``) per preset: none at smoke
CHECKPOINT_EVERY = {"smoke": 0, "cpu": 200, "gpu": 500, "paper": 1000}


@dataclass(frozen=True)
class RunOptions:
    """What the user asked for (``pcgbench run`` flags); :func:`resolve` makes it a plan."""

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
    timing_repeats: int | None = None  # None: 3, extra timed batches bounded (measure.py)
    tag: str | None = None  # a user label for a variant column (``tag:NAME``)
    save_samples: int | None = None  # samples kept next to the record; None: preset default
    checkpoint_every: int | None = None  # partial training checkpoints; None: preset default
    max_minutes: float | None = None  # stop the run (one line) after this wall time


def check_options(opts: RunOptions) -> None:
    """Refuse (one line) options no run accepts: unknown preset, seed out of range,
    negative counts, a non-positive time limit, an unprintable tag."""
    check_preset(opts.preset)
    if not 0 <= opts.seed < 2**32:
        raise PcgError(f"--seed must be an integer in [0, 2**32), got {opts.seed}")
    if opts.save_samples is not None and opts.save_samples < 0:
        raise PcgError(f"--save-samples must be >= 0, got {opts.save_samples}")
    if opts.checkpoint_every is not None and opts.checkpoint_every < 0:
        raise PcgError(f"--checkpoint-every must be >= 0, got {opts.checkpoint_every}")
    if (opts.timing_repeats is not None and opts.timing_repeats < 1) or opts.sample_batch < 1:
        raise PcgError(f"--timing-repeats and --batch-size must be >= 1, got "
                       f"{opts.timing_repeats} and {opts.sample_batch}")
    if opts.max_minutes is not None and not (0 < opts.max_minutes < math.inf):
        raise PcgError(f"--max-minutes must be a positive number, got {opts.max_minutes}")
    check_tag(opts.tag)


def check_tag(tag: str | None) -> None:
    if tag is not None and not re.fullmatch(TAG_PATTERN, tag):
        raise PcgError(f"--tag {tag!r}: use 1 to 64 letters, digits and _ . + = , -")


def seed_everything(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_task(opts: RunOptions) -> Task:
    task_cls = TASKS.get(opts.task)
    if opts.data_file and "{split}" not in opts.data_file:
        from pcgbench.data.checks import path_kind

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


# -- the config, layer by layer -------------------------------------------------------------

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


@dataclass(frozen=True)
class ConfigLayers:
    """A run's config as its layers, applied in this order: the preset's defaults, the
    task's recipe departures, the paper's sampler settings for (task, method) (the
    protocol; none at ``smoke``), then the user's ``--set`` / ``--chart``.  The default
    column is the first three."""

    preset: Any
    recipe: dict[str, Any]
    protocol: dict[str, Any]
    user: dict[str, Any]

    @classmethod
    def of(cls, task: Task | type[Task], method_cls: type[Method], preset: str,
           user: dict[str, Any] | None = None) -> ConfigLayers:
        task_name = task.name
        return cls(preset=method_cls.Config.for_preset(preset),
                   recipe=recipe_overrides(task, method_cls, preset),
                   protocol=protocol_overrides(task_name, method_cls, preset),
                   user=dict(user or {}))

    def default(self) -> Any:
        """The config of the method's default leaderboard column."""
        return apply_overrides(self.preset, {**self.recipe, **self.protocol})

    def resolved(self) -> Any:
        """The config the run uses."""
        return apply_overrides(self.preset, {**self.recipe, **self.protocol, **self.user})


def user_overrides(opts: RunOptions) -> dict[str, Any]:
    """The ``--set`` overrides with ``--chart`` as one of them."""
    out = dict(opts.overrides)
    if opts.chart is not None:
        out["chart"] = opts.chart
    return out


def default_config(task: Task | type[Task], method_cls: type[Method], preset: str) -> Any:
    """The config of a method's default leaderboard column: the preset's defaults with
    the task's recipe departures and the sampling protocol applied (no --set, --chart or
    --data-file)."""
    return ConfigLayers.of(task, method_cls, preset).default()


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


def _config_layers(task: Task, opts: RunOptions
                   ) -> tuple[type[Method], ConfigLayers, Any, Any]:
    """(method class, layers, resolved config, default config), the config checked."""
    method_cls = METHODS.get(opts.method)
    reason = method_cls.unsupported_reason(task)
    if reason:
        raise UnsupportedError(reason)
    layers = ConfigLayers.of(task, method_cls, opts.preset, user_overrides(opts))
    config, default = layers.resolved(), layers.default()
    check_config(config)
    check_backbone_modes(config, task, default)
    method_cls.validate_config(config)
    return method_cls, layers, config, default


def method_config(task: Task, opts: RunOptions) -> tuple[type[Method], Any]:
    """The method class and the config a run of ``opts`` uses (no network built)."""
    method_cls, _, config, _ = _config_layers(task, opts)
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


def _construct(method_cls: type[Method], task: Task, config: Any,
               device: torch.device) -> Method:
    return guarded(method_cls.name or method_cls.__name__, "__init__",
                   lambda: method_cls(task, config, device))


def build_method(task: Task, opts: RunOptions, device: torch.device) -> Method:
    method_cls, config = method_config(task, opts)
    return _construct(method_cls, task, config, device)


# -- identity ---------------------------------------------------------------------------------

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


def _planned(task: Task, opts: RunOptions, method_cls: type[Method], config: Any
             ) -> Method | MethodIdentity:
    """The method as planning sees it, without running a solver: built where that reads
    no uncached data, else its :class:`MethodIdentity` (a one-line :class:`PcgError` for a
    method that builds on another and needs the data to be built)."""
    try:
        return _construct(method_cls, task, config, torch.device("cpu"))
    except DataNotGenerated:
        if method_cls.pretrained_name is not Method.pretrained_name:
            raise PcgError(f"{task.name}/{opts.method}: cannot be planned before the data "
                           f"exist (pcgbench data generate --task {task.name})") from None
        return MethodIdentity(method_cls.name, config, method_cls.version_on(task.name))


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = list(v) if isinstance(v, tuple) else v
    return out


def data_label(task: Task) -> str | None:
    """``data=<file name>@<first 8 hex digits of its content digest>`` (None without a
    --data-file): two files of one name but other contents are two columns."""
    from pcgbench.data.checks import data_digest

    digest = data_digest(task)
    if digest is None:
        return None
    return f"data={Path(str(task.data_file)).name}@{digest.split(':', 1)[1][:8]}"


def variant_label(task: Task, config: Any, default: Any, opts: RunOptions) -> str | None:
    """None for the method's default column, else a name for the variant: the fields of
    ``config`` that differ from the ``default`` config, the data file (:func:`data_label`),
    a sampling batch size other than the default and the ``--tag`` (its own namespace,
    ``tag:NAME``), e.g. ``iterations=5``, ``sample_batch=4`` or ``iterations=5,tag:fast``
    (shown as ``fm_ot[iterations=5]``)."""
    base = _flat(to_dict(default))
    mine = _flat(to_dict(config))
    diff = [f"{k}={mine[k]}" for k in sorted(mine) if mine[k] != base.get(k)]
    if (data := data_label(task)) is not None:
        diff.append(data)
    if opts.sample_batch != DEFAULT_SAMPLE_BATCH:
        diff.append(f"sample_batch={opts.sample_batch}")
    if opts.tag is not None:
        diff.append(f"tag:{opts.tag}")
    return ",".join(diff) or None


def run_context(opts: RunOptions) -> RunContext:
    """Where a run of ``opts`` fits: seed, preset, results and data directories (so a
    method built on another finds that one's checkpoint there), partial checkpoints."""
    every = (CHECKPOINT_EVERY.get(opts.preset, 0) if opts.checkpoint_every is None
             else opts.checkpoint_every)
    return RunContext(seed=opts.seed, preset=opts.preset, results_dir=opts.results_dir,
                      data_dir=opts.data_dir, progress=opts.progress, checkpoint_every=every)


# -- the plan ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunPlan:
    """One run, resolved: the built ``task`` and ``method`` (a :class:`MethodIdentity`
    where a sweep plans before the data exist), the config ``layers`` and the ``default``
    column's config, the sampling ``protocol`` block of the record, the identity ``key``
    and ``record_extra``, where its record and checkpoint go, and its ``variant`` label
    (None: the default column).  The method's config is ``method.config``."""

    options: RunOptions
    device: torch.device
    root: Path
    task: Task
    method: Any  # Method | MethodIdentity
    layers: ConfigLayers
    default: Any
    protocol: dict[str, Any]
    key: dict[str, Any]
    record_extra: dict[str, Any]
    record_path: Path
    checkpoint: Path
    variant: str | None
    #: where a record of this same run written before a config field was added lies
    #: (:func:`pcgbench.results.identity.legacy_keys`: newest first); () when there is none
    legacy_paths: tuple[Path, ...] = ()

    @property
    def record_paths(self) -> tuple[Path, ...]:
        """Every name a record of this run may have: today's, then the legacy ones."""
        return (self.record_path, *self.legacy_paths)

    @property
    def config(self) -> Any:
        return self.method.config

    @property
    def where(self) -> str:
        """``task/method seed S [preset]`` for log lines."""
        o = self.options
        return f"{self.task.name}/{self.method.name} seed {o.seed} [{o.preset}]"


def resolve(opts: RunOptions, *, planning: bool = False, task: Task | None = None,
            device: torch.device | None = None,
            identity_device: torch.device | None = None) -> RunPlan:
    """The plan of ``opts``.  A run (``planning`` False) checks the options
    (:func:`check_options`), seeds the RNGs and builds the
    method on the run's device (its networks initialised from the seed), with its
    :class:`RunContext`; planning builds on the CPU, leaves ``task`` in planning mode and
    may return a :class:`MethodIdentity`.  ``task`` reuses an already built task (a
    sweep plans many runs of one); ``device`` overrides ``opts.device`` (the pretrained
    run of a fit: the caller's device); ``identity_device``: the key names this device's
    kind while the method is built on ``opts.device`` (``show-config --device``, which
    builds on the CPU)."""
    if not planning:
        check_options(opts)
    dev = device if device is not None else environment.resolve_device(opts.device)
    if not planning:
        seed_everything(opts.seed)
    task = task if task is not None else build_task(opts)
    if planning:
        task.generation_allowed = False
    method_cls, layers, config, default = _config_layers(task, opts)
    if planning:
        method: Any = _planned(task, opts, method_cls, config)
    else:
        method = _construct(method_cls, task, config, dev)
        method.context = run_context(opts)
    root = default_results_dir(opts.results_dir)
    key = run_key(task, method, opts, identity_device or dev)
    extra = record_extra(opts)
    path = layout.record_path(root, key, extra)
    olds = legacy_keys(key, method.config)
    legacy = tuple(layout.record_path(root, old, extra) for old in olds)
    ckpt = layout.checkpoint_path(root, fit_key(key, method.config))
    if not ckpt.exists():  # the fit saved under a name from before an added field
        for old in olds:
            if (named := layout.checkpoint_path(root, fit_key(old, method.config))).exists():
                ckpt = named
                break
    entry = protocol_for(task.name, method_cls)
    protocol = {**entry.as_record(), "applied": bool(layers.protocol),
                "overridden": sorted(set(opts.overrides) & set(entry.settings))}
    return RunPlan(options=opts, device=dev, root=root, task=task, method=method,
                   layers=layers, default=default, protocol=protocol, key=key,
                   record_extra=extra, record_path=path, checkpoint=ckpt,
                   variant=variant_label(task, method.config, default, opts),
                   legacy_paths=legacy)


def record_path(opts: RunOptions) -> Path:
    """Where the record of a run would be written (builds task and method; runs no
    solver: planning mode)."""
    return resolve(opts, planning=True).record_path


def record_paths(opts: RunOptions) -> tuple[Path, ...]:
    """Every name a record of the run may have (:attr:`RunPlan.record_paths`): where it
    would be written, then where one written before a config field was added lies."""
    return resolve(opts, planning=True).record_paths
