"""The Metric interface: a small class per metric with ``higher_is_better`` declared.

A metric compares generated samples with reference samples, both in physical units
[N, C, *spatial], with a ``MetricContext`` giving the task and the conditions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from pcgbench.task import Task


@dataclass(frozen=True)
class MetricContext:
    """Everything a metric may need besides the two sample sets."""

    task: Task
    cond: torch.Tensor | None = None  # conditions of the generated samples
    reference_cond: torch.Tensor | None = None
    # work shared by the metrics of one evaluation (e.g. the pooled distance matrix of
    # ``energy`` and ``mmd``); entries keep the tensors they were computed from
    cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


class Metric(ABC):
    name: ClassVar[str] = ""
    higher_is_better: ClassVar[bool] = False
    description: ClassVar[str] = ""
    #: how tables name the row when the bare name could be misread (e.g. a gap, not a rate)
    label: ClassVar[str] = ""

    @abstractmethod
    def __call__(
        self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext
    ) -> float: ...
