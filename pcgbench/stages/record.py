"""Run records out: the one place a record is built (from a plan and what its stages
returned), checked, sealed and written, and read back for reuse.  The schema both sides
share is :class:`pcgbench.results.record.RunRecord`'s; the metric-bounds tolerance is
:func:`pcgbench.results.record.within_bounds`."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pcgbench.errors import PcgError
from pcgbench.registry import METRICS
from pcgbench.results import layout, store
from pcgbench.results.files import (
    config_hash,
    ensure_writable,
    make_dir,
)
from pcgbench.results.files import results_dir as default_results_dir
from pcgbench.results.identity import reference_key
from pcgbench.results.record import RunRecord
from pcgbench.results.store import read_record
from pcgbench.runtime import environment, threads
from pcgbench.runtime.timing import median_after_warmup
from pcgbench.stages.guard import deadline_check
from pcgbench.stages.outcomes import Evaluation, Fitted, Sampled
from pcgbench.stages.plan import RunOptions, RunPlan, data_label
from pcgbench.stages.scoring import mean_over_draws, metric_value, reference_metrics
from pcgbench.task import Task
from pcgbench.training.network import parameter_count


@dataclass(frozen=True)
class Clock:
    """When a run started: the wall-clock time stamp and the ``time.perf_counter`` value."""

    started: str
    t0: float


def _provenance(plan: RunPlan, clock: Clock) -> dict[str, Any]:
    return {"device": environment.device_description(plan.device),
            "versions": environment.package_versions(), "git": environment.git_hash(),
            "started": clock.started, "finished": environment.now(),
            "wall_seconds": time.perf_counter() - clock.t0}


def _data_fields(task: Task) -> dict[str, Any]:
    from pcgbench.data.cache import cached_checksums

    out: dict[str, Any] = {}
    try:
        sums = cached_checksums(task)
    except Exception:  # noqa: BLE001 - a task outside the cache (plug-in data): none
        sums = {}
    if sums:  # SHA-256 of each split's arrays: provenance, not identity (reproduce compares)
        out["data_checksums"] = sums
    if task.split_overlaps:
        out["data_overlap"] = dict(task.split_overlaps)
    if task.data_notes:
        out["data_notes"] = dict(task.data_notes)
    return out


def failed_record(plan: RunPlan, reason: str, clock: Clock) -> dict[str, Any]:
    """The record of a run whose fit diverged: recorded (status ``diverged``), never scored."""
    key = plan.key
    return {**key, **plan.record_extra, "variant": plan.variant,
            "config_hash": config_hash(key), "data_file_path": plan.options.data_file,
            "status": "diverged", "status_reason": reason, "metrics": {}, "nfe": None,
            **_provenance(plan, clock)}


def run_record(plan: RunPlan, fitted: Fitted, sampled: Sampled, result: Evaluation,
               clock: Clock, fit_wall_seconds: float) -> dict[str, Any]:
    """The record of a finished run: its identity (``plan``), the fit (``fitted``), the
    sampling and its timing (``sampled``), the metrics and status (``result``)."""
    key, method, stats = plan.key, fitted.method, fitted.stats
    provenance = _provenance(plan, clock)
    return {
        **key,
        **plan.record_extra,
        "variant": plan.variant,
        "config_hash": config_hash(key),
        "status": result.status,
        "status_reason": result.reason,
        "metrics": result.metrics,
        "nfe": sampled.nfe,  # mean over every sampled batch (equal for fixed-step samplers)
        "nfe_per_batch": sampled.nfe_per_batch,
        "inference": sampled.inference,
        "training": {
            "seconds_per_update": median_after_warmup(stats.update_seconds),
            "updates": len(stats.update_seconds),
            "fit_seconds": sum(stats.update_seconds),
            "final_loss": stats.losses[-1] if stats.losses else None,
            "loss_curve": loss_curve(stats.losses),
            "checkpoint_reused": fitted.reused,
            **stats.extra,
        },
        "samples_file": result.samples_file,
        "memory": {"train_peak_mb": fitted.train_peak_mb, "sample_peak_mb": sampled.peak_mb,
                   "kind": fitted.memory_kind},
        # 1-min load average and CPU count at start and end of fit and of sampling
        "load": {"fit": fitted.load, "sample": sampled.load},
        # the CPU thread policy in force (pcgbench.runtime.threads)
        "threads": threads.current().as_record(),
        "method_info": method.record_extras(),
        # the same weights under the class's diagnostic samplers (never a column)
        **({"diagnostics": result.diagnostics} if result.diagnostics else {}),
        "pretrained": method.pretrained_name(),
        "protocol": plan.protocol,
        "parameters": parameter_count(*method.modules()),
        "n_samples": len(sampled.samples),
        **provenance,
        "fit_wall_seconds": fit_wall_seconds,
        "checkpoint": str(plan.checkpoint),
        "data_file_path": plan.options.data_file,
        **_data_fields(plan.task),
    }


def loss_curve(losses: list[float], points: int = 200) -> list[list[float]]:
    """[[update, loss], ...]: the training-loss curve subsampled to <= ``points`` pairs
    (evenly spaced updates, the last one included)."""
    n = len(losses)
    if n == 0:
        return []
    m = min(points, n)
    idx = sorted({round(i * (n - 1) / max(m - 1, 1)) for i in range(m)})
    return [[i, losses[i]] for i in idx]


def json_safe(x: Any) -> Any:
    """Non-finite floats as the strings ``"nan"``, ``"inf"``, ``"-inf"`` (JSON has none;
    ``null`` would read as "not measured")."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x


def write_record(path: Path, record: dict[str, Any]) -> RunRecord:
    """Write a run record atomically with its content digest (``digest``,
    :func:`pcgbench.results.record.record_digest`); metrics outside their declared ``bounds``
    and ill-typed fields (:func:`pcgbench.results.record.record_problem`) are refused.  Returns the
    record as written."""
    deadline_check()  # a --max-minutes that passed (and was swallowed) writes no record
    record = json_safe(record)
    for name, value in (record.get("metrics") or {}).items():
        if name in METRICS and isinstance(value, int | float):
            metric_value(name, value)
    return store.write_record(path, record)


def open_record(plan: RunPlan) -> Path:
    """The record's folder made (the results directory checked writable, temp files of
    interrupted writes removed); returns the record's path."""
    layout.remove_interrupted_writes(ensure_writable(plan.root))
    make_dir(plan.record_path.parent)
    return plan.record_path


def prepare_data(plan: RunPlan) -> Clock:
    """The data stage: every split loaded and checked (finite, non-empty, disjoint) and
    the ``data`` reference record and the sanity rows' records written (the floor also
    probes every metric on real data) before any fit.  Returns the run's :class:`Clock`,
    started before the checks."""
    clock = Clock(environment.now(), time.perf_counter())
    plan.task.check_splits()
    data_reference_record(plan.task, plan.options)
    sanity_records(plan.task, plan.options)
    return clock


def _current(path: Path, task: Task, opts: RunOptions) -> bool:
    """Whether the reference record at ``path`` exists, is sound and holds every metric
    of the task (else it is recomputed)."""
    existing = None if opts.force else read_record(path)  # a corrupt one is regenerated
    return existing is not None and set(task.metrics) <= set(existing.get("metrics") or {})


def sanity_records(task: Task, opts: RunOptions) -> list[Path]:
    """The sanity rows (:mod:`pcgbench.sanity`): each fake scored against the test set
    by every metric of the task exactly as the ``data`` floor is (mean over
    :func:`~pcgbench.sanity.sanity_draws` draws, their std as ``metrics_std``), one sealed
    record per fake (``method`` = the fake's reserved name), once per task x preset x data
    identity."""
    from pcgbench.sanity import FAKES, SANITY_VERSION, fake_fields, sanity_draws

    root = ensure_writable(default_results_dir(opts.results_dir))
    paths = []
    for name, fake in FAKES.items():
        key = reference_key(task, opts.preset, name, {"sanity": SANITY_VERSION})
        path = layout.record_path(root, key)
        paths.append(path)
        if _current(path, task, opts):
            continue
        draws = sanity_draws(task)
        runs = []
        for d in range(draws):
            fields, target = fake_fields(task, name, d)
            runs.append(_evaluate_fake(task, name, fields, target))
        means, spread = mean_over_draws(runs)
        record = {**key, "variant": data_label(task), "metrics": means, "nfe": 0,
                  "reference_draws": draws, "data_file_path": opts.data_file,
                  "created": environment.now(),
                  "note": f"sanity row {name!r}: keeps {fake.keeps}; destroys {fake.destroys}",
                  "versions": environment.package_versions(), "git": environment.git_hash()}
        if spread:
            record["metrics_std"] = spread
        write_record(path, {**record, **_data_fields(task)})
    return paths


def _evaluate_fake(task: Task, name: str, fields: Any, target: Any) -> dict[str, Any]:
    """Every metric of the task on one sanity row's fields, as :func:`evaluate`; a metric
    that fails on a fake (a plug-in's, say, that scores only real data) is recorded as
    not measured there, with one warning naming it: the row is an instrument check, never
    a reason to stop the run it is part of."""
    from pcgbench.stages.scoring import evaluate

    try:
        return evaluate(task, fields.x, target.x, fields.cond, target.cond)
    except PcgError:
        pass
    import warnings

    out: dict[str, Any] = {}
    for metric in task.metrics:
        try:
            out.update(evaluate(task, fields.x, target.x, fields.cond, target.cond, (metric,)))
        except PcgError as exc:
            warnings.warn(f"sanity row {name!r} of {task.name!r}: {exc}; {metric} recorded as "
                          "not measured there", stacklevel=2)
            out[metric] = None
    return out


def data_reference_record(task: Task, opts: RunOptions) -> Path:
    """The ``data`` column: each metric for an independent draw of real data
    (:meth:`Task.data_reference`) against the test set; the reference floor every table
    needs.  Its identity carries the reference's code version (``reference``)."""
    root = ensure_writable(default_results_dir(opts.results_dir))
    key = reference_key(task, opts.preset, "data")
    path = layout.record_path(root, key)
    if _current(path, task, opts):
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
    write_record(path, {**record, **_data_fields(task)})
    return path
