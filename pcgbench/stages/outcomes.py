"""What each run stage returns -- the typed results the stages exchange (plan -> fit ->
measure -> evaluate -> record): :class:`Fitted` (:mod:`pcgbench.stages.fit`),
:class:`Sampled` (:mod:`pcgbench.stages.measure`), :class:`Evaluation`
(:mod:`pcgbench.stages.evaluate`).  A stage imports the results it reads from here, never the
stage that produced them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pcgbench.method import FitStats, Method
from pcgbench.task import Task


@dataclass(frozen=True)
class Fitted:
    """A method fitted (or loaded from its verified checkpoint): what the fit stage returns."""

    task: Task
    method: Method
    stats: FitStats
    reused: bool
    checkpoint: Path
    #: peak memory of the fit (None where no optimizer update ran) and its kind
    train_peak_mb: float | None = None
    memory_kind: str | None = None
    #: the machine's load at the start and end of the fit
    load: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sampled:
    """What sampling the test split produced: the samples (CPU), the counted NFE per
    batch and its mean, the timing block of the record, and the peak memory."""

    samples: torch.Tensor
    nfe: float | int
    nfe_per_batch: list[int]
    inference: dict[str, Any]
    peak_mb: float
    #: the machine's load at the start and end of sampling (:func:`measure`)
    load: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    """What the evaluation stage returns: the metrics, the run's status and its reason,
    the diagnostic samplers' results (only for an ``ok`` run) and the saved samples file."""

    metrics: dict[str, float | None]
    status: str
    reason: str | None
    diagnostics: dict[str, dict[str, Any]]
    samples_file: str | None
