"""Timing and memory measurement: synchronized, after warm-up, medians of repeats."""

from __future__ import annotations

import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PhaseTimer:
    """Accumulates synchronized wall time per named phase (e.g. network / decode)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        synchronize(self.device)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            synchronize(self.device)
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


def timed_median(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 1
                 ) -> tuple[float, list[float]]:
    """Median wall seconds of ``fn`` over ``repeats`` synchronized calls after ``warmup``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, repeats)):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def median_after_warmup(values: list[float], warmup_fraction: float = 0.1, min_warmup: int = 1
                        ) -> float | None:
    """Median of per-update seconds after dropping the first updates (warm-up)."""
    if not values:
        return None
    skip = min(len(values) - 1, max(min_warmup, int(len(values) * warmup_fraction)))
    return statistics.median(values[skip:])


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    """(peak MiB, what was measured): CUDA max allocated on GPU, process peak RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    return peak_rss_mb(), "process_peak_rss"
