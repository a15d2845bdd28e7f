"""The evaluation stage of a run: the samples scored against the test fields
(:func:`pcgbench.stages.scoring.evaluate`) and the run's status, and each diagnostic sampler's
samples scored the same way.  No sampling and no file written here: the samples come from
the measurement stage (:mod:`pcgbench.stages.measure`), the samples file is the runner's."""

from __future__ import annotations

from typing import Any

import torch

from pcgbench.runtime.log import logger
from pcgbench.stages.outcomes import Evaluation, Fitted, Sampled
from pcgbench.stages.plan import RunPlan
from pcgbench.stages.scoring import evaluate, run_status
from pcgbench.task import Task


def evaluate_diagnostic(task: Task, overrides: dict[str, Any], nfe: float,
                        samples: torch.Tensor) -> dict[str, Any]:
    """One diagnostic sampler's result (:func:`pcgbench.stages.measure.diagnostic_samples`),
    evaluated like the run against the test split: {overrides, nfe, metrics} (no metrics
    and a ``status`` for non-finite samples)."""
    if not bool(torch.isfinite(samples).all()):
        return {"overrides": overrides, "nfe": nfe, "metrics": {},
                "status": "non-finite samples"}
    test = task.dataset("test")
    return {"overrides": overrides, "nfe": nfe,
            "metrics": evaluate(task, samples, test.x, test.cond, test.cond)}


def evaluate_run(plan: RunPlan, fitted: Fitted, sampled: Sampled) -> Evaluation:
    """The evaluation stage: every metric on the samples against the test fields, and the
    run's status (no sampling, no file written: the diagnostic samplers' samples come from
    the measurement stage, the samples file from the runner).  A metric that fails raises
    its one-line :class:`PcgError`."""
    task = plan.task
    test = task.dataset("test")
    logger.info("%s: evaluating %d metrics on %d samples", plan.where, len(task.metrics),
                len(test))
    metrics = evaluate(task, sampled.samples, test.x, test.cond, test.cond)
    status, reason = run_status(fitted.method, fitted.stats, metrics)
    return Evaluation(metrics, status, reason, {}, None)
