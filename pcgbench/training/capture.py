"""CUDA-graph capture of a network call that is launch-bound (PMosFM's one-step sampler:
one small network call per batch, on a GPU dominated by kernel-launch overhead).

:class:`GraphedModule` wraps a module: on a CUDA device, without autograd, each new input
signature (shapes, dtypes, device of the tensor arguments) is captured once into a CUDA
graph (after warm-up calls on a side stream, as ``torch.cuda.graphs`` requires) and
replayed afterwards: the inputs are copied into the graph's static buffers, the graph
replays, and a copy of its static output is returned.  Everywhere else (CPU, gradients
enabled, non-tensor arguments other than None) it calls the module directly, so it is
inert on CPU.  A capture that fails (an operation that cannot be captured) is warned
about once and the module is then called eagerly for good: the fallback.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

#: input signatures captured at most (e.g. the full batch and the last partial one)
MAX_GRAPHS = 4
#: warm-up calls on a side stream before a capture
WARMUP_CALLS = 3


class GraphedModule(nn.Module):
    """``module(*args)`` replayed from CUDA graphs where possible (module docstring)."""

    def __init__(self, module: nn.Module, enabled: bool = True):
        super().__init__()
        self.module = module
        self.enabled = enabled
        self.failed: str | None = None  # why capture was abandoned (then always eager)
        self._graphs: dict[tuple, tuple[list[torch.Tensor | None], torch.Tensor,
                                        torch.cuda.CUDAGraph]] = {}

    @staticmethod
    def _key(args: tuple[Any, ...]) -> tuple | None:
        key = []
        for a in args:
            if a is None:
                key.append(None)
            elif isinstance(a, torch.Tensor) and a.is_cuda:
                key.append((tuple(a.shape), a.dtype, a.device))
            else:
                return None
        return tuple(key)

    def captures(self) -> int:
        """How many input signatures are captured."""
        return len(self._graphs)

    def forward(self, *args: Any) -> torch.Tensor:
        if not self.enabled or self.failed or torch.is_grad_enabled():
            return self.module(*args)
        key = self._key(args)
        if key is None:
            return self.module(*args)
        entry = self._graphs.get(key)
        if entry is None:
            if len(self._graphs) >= MAX_GRAPHS:
                return self.module(*args)
            try:
                entry = self._capture(args)
            except Exception as exc:  # noqa: BLE001 - any capture failure: eager
                self.failed = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
                warnings.warn(f"CUDA-graph capture failed ({self.failed}); calling the "
                              "network eagerly", stacklevel=2)
                torch.cuda.synchronize()
                return self.module(*args)
            self._graphs[key] = entry
        static_in, static_out, graph = entry
        for buf, a in zip(static_in, args, strict=True):
            if buf is not None:
                buf.copy_(a)
        graph.replay()
        return static_out.clone()

    def _capture(self, args: tuple[Any, ...]):
        static_in = [None if a is None else a.detach().clone() for a in args]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_CALLS):
                self.module(*static_in)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self.module(*static_in)
        return static_in, static_out, graph
