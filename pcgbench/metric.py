"""The Metric interface: a small class per metric with ``higher_is_better`` declared.

A metric compares generated samples with reference samples, both in physical units
[N, C, *spatial], with a ``MetricContext`` giving the task and the conditions.
"""

from __future__ import annotations

import contextlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
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
    #: the values the metric can take (closed interval; NaN aside): a result outside is
    #: refused at write and a record holding one is flagged at read
    bounds: ClassVar[tuple[float, float]] = (-math.inf, math.inf)
    #: NaN from this metric means "does not apply here" (e.g. a reconstruction score
    #: where no test condition is matched, as in the data column): recorded as null and
    #: shown as '–'.  Otherwise a NaN is a result, recorded and shown as ``nan``
    nan_means_not_applicable: ClassVar[bool] = False
    #: ranked by distance from the data's own value (the ``data (reference)`` column)
    #: instead of lower/higher-is-better: for a metric the data themselves score away
    #: from 0 (a residual on a coarse grid, an ensemble width), where a field smoother or
    #: narrower than the data would otherwise rank best
    two_sided: ClassVar[bool] = False
    #: the value two identical distributions score in expectation (0 for a distance; 0.5
    #: for a classifier's accuracy): ratios to the data floor are taken from it
    chance: ClassVar[float] = 0.0

    @abstractmethod
    def __call__(
        self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext
    ) -> float: ...


#: common ``bounds``: distances and errors; divergences in nats; probabilities / TV
NONNEGATIVE: tuple[float, float] = (0.0, math.inf)
JS_NATS: tuple[float, float] = (0.0, math.log(2.0))
UNIT: tuple[float, float] = (0.0, 1.0)


# -- results shared by the metrics of one evaluation ---------------------------------------
#: results shared by the metrics of one evaluation (:func:`sharing`); None outside one
_SHARED: dict[tuple, tuple[tuple[torch.Tensor, ...], tuple[int, ...], Any]] | None = None


@contextlib.contextmanager
def sharing() -> Iterator[None]:
    """Within this block, :func:`shared` computes each result once for the same tensor
    objects (the runner's ``evaluate``: every metric gets the same two tensors, so the
    finite-row masks and float64 copies are not recomputed per metric)."""
    global _SHARED
    previous, _SHARED = _SHARED, {}
    try:
        yield
    finally:
        _SHARED = previous


def shared(name: str, tensors: tuple[torch.Tensor, ...], compute: Callable[[], Any]) -> Any:
    """``compute()``, reused inside :func:`sharing` while ``tensors`` are the same objects,
    unchanged in place (their ``_version``); computed afresh outside it."""
    if _SHARED is None:
        return compute()
    key = (name, *(id(t) for t in tensors))
    versions = tuple(t._version for t in tensors)
    hit = _SHARED.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], tensors, strict=True)) \
            and hit[1] == versions:
        return hit[2]
    value = compute()
    _SHARED[key] = (tensors, versions, value)  # holds the tensors: ids stay unique
    return value
