"""One run: plan -> data -> fit -> measure -> evaluate -> record.

:func:`run` resolves the options once into a :class:`~pcgbench.stages.plan.RunPlan` (identity,
paths, configs), checks the data and its reference floor, fits the method or loads its
verified checkpoint (:mod:`pcgbench.stages.fit`), samples and times the test split
(:mod:`pcgbench.stages.measure`), evaluates it (:mod:`pcgbench.stages.evaluate`) and writes one JSON
run record atomically (:mod:`pcgbench.stages.record`).  Records are the source of truth
for every table; a run whose record exists is skipped unless ``force`` (free resume), and
identical concurrent runs do the work once (a file lock on the record).

``__all__`` is the public run API (run, fit_only, RunOptions, record_path); scripts, plug-ins
and tests import a stage's functions from the stage's own module.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from pcgbench.errors import PcgError, TrainingDiverged
from pcgbench.results.files import ensure_writable
from pcgbench.results.record import RunRecord
from pcgbench.results.store import read_record
from pcgbench.stages.budget import warn_budget
from pcgbench.stages.evaluate import evaluate_diagnostic, evaluate_run
from pcgbench.stages.fit import fit
from pcgbench.stages.guard import time_limit
from pcgbench.stages.measure import diagnostic_samples, measure, save_samples
from pcgbench.stages.outcomes import Evaluation, Fitted, Sampled
from pcgbench.stages.plan import RunOptions, RunPlan, record_path, resolve
from pcgbench.stages.record import (
    data_reference_record,
    failed_record,
    open_record,
    prepare_data,
    run_record,
    sanity_records,
    write_record,
)

#: the public run API: a run, a fit alone, its options and where its record goes; every
#: stage is imported from its own module (:mod:`pcgbench.stages.plan`, :mod:`pcgbench.stages.fit`,
#: :mod:`pcgbench.stages.measure`, :mod:`pcgbench.stages.evaluate`, :mod:`pcgbench.stages.record`)
__all__ = ["RunOptions", "fit_only", "record_path", "run"]


def run(opts: RunOptions) -> tuple[RunRecord, Path, bool]:
    """Execute one run.  Returns (record, path, skipped)."""
    from filelock import FileLock

    plan = resolve(opts)
    path = open_record(plan)
    # identical concurrent runs: the first does the work, the others wait and skip
    with FileLock(f"{path}.lock"):
        existing = read_record(path) if not opts.force else None
        if existing is None and not opts.force:
            # the same run recorded before a config field was added (its old name)
            for old in plan.legacy_paths:
                if old.exists() and (existing := read_record(old)) is not None:
                    path = old
                    break
        if existing is not None and not rescorable(existing, plan):
            # the floor of this cell, where a code change made the old one stale
            data_reference_record(plan.task, opts)
            sanity_records(plan.task, opts)
            return existing, path, True
        with time_limit(opts.max_minutes):
            return _execute(plan), path, False


def rescorable(record: RunRecord, plan: RunPlan) -> bool:
    """Whether an ``ok`` record lacks a metric the task now reports (a metric added since
    it ran) while its verified checkpoint is still there: then the run samples and
    evaluates again from that checkpoint (no refit) and its record is rewritten."""
    missing = set(plan.task.metrics) - set(record.metrics)
    if not missing or record.status != "ok" or not plan.checkpoint.exists():
        return False
    from pcgbench.runtime.log import logger

    logger.info(f"re-scoring {plan.record_path.name} from its checkpoint: it lacks "
                f"{', '.join(sorted(missing))}")
    return True


def _execute(plan: RunPlan) -> RunRecord:
    clock = prepare_data(plan)
    o = plan.options
    warn_budget(plan.task.name, plan.method.name, o.preset, o.results_dir,
                plan.config.training_updates(), plan.default.training_updates(),
                plan.config.budget_field)
    try:
        fitted = fit(plan)
    except TrainingDiverged as exc:  # a failed run is recorded, not scored
        return write_record(plan.record_path, failed_record(plan, str(exc), clock))
    fit_seconds = time.perf_counter() - clock.t0
    sampled = measure(plan, fitted.method)
    result = _evaluate(plan, fitted, sampled)
    return write_record(plan.record_path,
                        run_record(plan, fitted, sampled, result, clock, fit_seconds))


def _evaluate(plan: RunPlan, fitted: Fitted, sampled: Sampled) -> Evaluation:
    """Evaluation, the first samples saved beside the record, then (for an ``ok`` run)
    the diagnostic samplers evaluated; a metric that fails keeps every sample on disk
    (named in the one-line error) and writes no record."""
    test = plan.task.dataset("test")
    n = len(test)
    try:
        result = evaluate_run(plan, fitted, sampled)
    except PcgError as exc:  # keep what the fit and sampling produced
        kept = save_samples(plan.record_path, sampled.samples, test.x, test.cond,
                            dataclasses.replace(plan.options, save_samples=n))
        raise PcgError(f"{exc}; no record written, the {n} samples are kept in {kept}") from exc
    samples_file = save_samples(plan.record_path, sampled.samples, test.x, test.cond,
                                plan.options)
    diagnostics = ({name: evaluate_diagnostic(plan.task, over, nfe, samples)
                    for name, over, nfe, samples in diagnostic_samples(plan, fitted.method)}
                   if result.status == "ok" else {})
    return dataclasses.replace(result, diagnostics=diagnostics, samples_file=samples_file)


def fit_only(opts: RunOptions) -> Fitted:
    """Fit the method of ``opts`` -- the same identity, checkpoint, lock and resume as
    :func:`run` -- without sampling or evaluating any split (``pcgbench tune`` scores it
    on the val split itself).  A diverged fit raises :class:`TrainingDiverged`."""
    from pcgbench.presets import check_preset

    check_preset(opts.preset)
    plan = resolve(opts)
    ensure_writable(plan.root)
    with time_limit(opts.max_minutes):
        return fit(plan)
