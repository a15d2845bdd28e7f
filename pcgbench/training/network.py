"""The one wrapper through which every learned-network call passes, so NFE is counted.

NFE is the number of forward calls of a learned network per sampled batch: the runner
resets the counter, samples one batch and reads it.  It is never computed by formula.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class NFECounter:
    """A mutable count shared by all wrapped networks of one method."""

    def __init__(self) -> None:
        self.count = 0
        #: called after every counted call while set (the runner's sampling progress bar)
        self.listener: Callable[[], object] | None = None

    def reset(self) -> None:
        self.count = 0


class CountedNetwork(nn.Module):
    """Wraps a network; each forward call adds one to ``counter.count``."""

    def __init__(self, net: nn.Module, counter: NFECounter):
        super().__init__()
        self.net = net
        # not a submodule/buffer: the counter is bookkeeping, never saved
        object.__setattr__(self, "counter", counter)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.counter.count += 1
        if self.counter.listener is not None:
            self.counter.listener()
        return self.net(*args, **kwargs)


def parameter_count(*modules: nn.Module) -> int:
    """Trainable-size count over the modules, each parameter once (a module stored twice,
    e.g. inside a solver wrapper, does not double the count)."""
    unique = {id(p): p for m in modules for p in m.parameters()}
    return sum(p.numel() for p in unique.values())
