"""What a result *is*: the keys a record or checkpoint is named by, and the code versions
they carry -- each computed in one function here.

* :func:`code_versions`: the nonzero code versions a result depends on (also what the
  registered code is at today, for staleness);
* :func:`run_key`: a fitted-and-sampled run (task params, data source by content, method
  config, seed, preset, device kind, record layout, code versions);
* :func:`fit_key`: the checkpoint's identity (the run key less sampling-only fields);
* :func:`reference_key`: the ``data`` floor and the sanity rows;
* :func:`stale_versions`: where a record's versions are behind today's code.

Paths are :mod:`pcgbench.results.layout`'s (the hash of a key names the file).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pcgbench.results.record import SCHEMA_VERSION

if TYPE_CHECKING:
    import torch

    from pcgbench.task import Task


class RunOptions(Protocol):
    """What identity reads of a run's options (:class:`pcgbench.stages.plan.RunOptions`)."""

    seed: int
    preset: str
    sample_batch: int
    tag: str | None

#: the record layout a key names (bumped with the record schema)
RECORD_VERSION = SCHEMA_VERSION


def code_versions(task: Any, method: Any = None, *, reference: bool = False,
                  pretrained: Iterable[str] | None = None,
                  extra: Mapping[str, int] | None = None) -> dict[str, int]:
    """The nonzero code versions a result depends on: the task's (``version``,
    ``data_version``), its reference's (``reference``: the ``data`` floor and sanity rows),
    the method's and those of the methods it builds on (``pretrained``: names; by default
    the built method's :meth:`~pcgbench.method.Method.pretrained_name`; a name not
    registered here is left out), and ``extra`` (the sanity rows' own).  ``task`` and
    ``method`` are instances or registered classes.  Zeros are left out so results from
    before versioning keep their identity."""
    versions = {"task": task.version, "data": task.data_version}
    if reference:
        versions["reference"] = task.reference_version()
    if method is not None:
        versions["method"] = _method_version(method, task.name)
        if pretrained is None and not isinstance(method, type):
            pretrained = [n for n in [method.pretrained_name()] if n is not None]
    versions.update(pretrained_versions(pretrained or (), task.name))
    versions.update(extra or {})
    return {k: v for k, v in versions.items() if v}


def _method_version(method: Any, task: str) -> int:
    """A method's version on ``task`` (:meth:`Method.version_on`; a bare identity
    without it, e.g. :class:`pcgbench.stages.plan.MethodIdentity`, carries its own)."""
    on = getattr(method, "version_on", None)
    return int(on(task)) if on is not None else int(method.version)


def pretrained_versions(names: Iterable[str], task: str) -> dict[str, int]:
    """``pretrained:<name>``: the version on ``task`` of each registered method named
    (others left out: a plug-in not imported here)."""
    from pcgbench.registry import METHODS

    return {f"pretrained:{n}": base.version_on(task) for n in names
            if (base := METHODS.lookup(n)) is not None}


def with_versions(key: dict[str, Any], versions: dict[str, int]) -> dict[str, Any]:
    """``key`` with its ``code_versions`` (left out when there are none)."""
    return {**key, "code_versions": versions} if versions else key


def run_key(task: Task, method: Any, opts: RunOptions, device: torch.device | None = None
            ) -> dict[str, Any]:
    """What a fitted model is: task parameters, data source (a ``--data-file`` by the
    SHA-256 of its contents, :func:`pcgbench.data.checks.data_digest`), method config, seed,
    preset, the kind of device it trained on and the code versions."""
    from pcgbench.config import to_dict
    from pcgbench.data.checks import data_digest

    return with_versions({
        "task": task.name,
        "task_params": task.params_dict(),
        "data_file": data_digest(task),
        "method": method.name,
        "config": to_dict(method.config),
        "seed": opts.seed,
        "preset": opts.preset,
        "device_kind": device.type if device is not None else "cpu",
        "record_version": RECORD_VERSION,
    }, code_versions(task, method))


def legacy_keys(key: dict[str, Any], config: Any) -> list[dict[str, Any]]:
    """The names the run ``key`` had before ``config``'s ``added_at_default`` fields came
    (declared in the order they came): without the newest field, then without the two
    newest, ..., each while the fields left out hold their declared value (what ran
    before them); [] when the newest is not at that value (nothing older is this run)."""
    added = list((getattr(type(config), "added_at_default", {}) or {}).items())
    cfg = key.get("config", {})
    out: list[dict[str, Any]] = []
    for i in range(len(added) - 1, -1, -1):
        name, value = added[i]
        if name not in cfg or cfg[name] != value:
            break
        drop = {k for k, _ in added[i:]}
        out.append({**key, "config": {k: v for k, v in cfg.items() if k not in drop}})
    return out


def legacy_key(key: dict[str, Any], config: Any) -> dict[str, Any] | None:
    """The oldest of :func:`legacy_keys` (every added field left out), or None."""
    keys = legacy_keys(key, config)
    return keys[-1] if keys else None


def fit_key(key: dict[str, Any], config: Any) -> dict[str, Any]:
    """The checkpoint's identity: the run key without the config's ``sampling_only``
    fields (a sampler-only change reuses the fitted model)."""
    skip = getattr(type(config), "sampling_only", frozenset())
    if not skip:
        return key
    return {**key, "config": {k: v for k, v in key["config"].items() if k not in skip}}


def record_extra(opts: RunOptions) -> dict[str, Any]:
    """The sampling settings a record's identity adds to the run key."""
    return {"sample_batch": opts.sample_batch, "tag": opts.tag}


def reference_key(task: Task, preset: str, method: str,
                  extra_versions: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The identity of a reference record (the ``data`` floor or a sanity row ``method``):
    task parameters, data identity, preset, the reference's code version (+
    ``extra_versions``)."""
    from pcgbench.data.checks import data_digest

    key = {"task": task.name, "task_params": task.params_dict(), "data_file": data_digest(task),
           "method": method, "config": {}, "seed": 0, "preset": preset,
           "record_version": RECORD_VERSION}
    return with_versions(key, code_versions(task, reference=True, extra=extra_versions))


def stale_versions(have: Mapping[str, int], task: str, method: str,
                   pretrained: str | None = None) -> list[str]:
    """``name have < now`` for each code version a record of (``task``, ``method``) carries
    below today's registered code (the ``data`` floor also on its reference's version);
    unregistered tasks and methods (a plug-in not imported) count as current."""
    from pcgbench.registry import METHODS, TASKS

    now: dict[str, int] = {}
    if (task_cls := TASKS.lookup(task)) is not None:
        now.update(code_versions(task_cls, reference=method == "data"))
    if (method_cls := METHODS.lookup(method)) is not None:
        now["method"] = method_cls.version_on(task)
    names = [k.split(":", 1)[1] for k in have if k.startswith("pretrained:")]
    now.update(pretrained_versions(names + ([pretrained] if pretrained else []), task))
    return [f"{k} {have.get(k, 0)} < {v}" for k, v in sorted(now.items())
            if have.get(k, 0) < v]
