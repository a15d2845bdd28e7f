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


def _status_kib(field: str) -> int | None:
    """A ``/proc/self/status`` field in KiB (VmRSS, VmHWM), or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


#: the RSS (KiB) when the CPU peak was last reset, or None where it cannot be reset
_rss_baseline: int | None = None


def reset_peak_memory(device: torch.device) -> None:
    """Start a peak-memory window: CUDA's peak statistics; on CPU (Linux) the process's
    high-water mark VmHWM (``/proc/self/clear_refs`` 5) and the RSS at this moment. Where
    the reset does not take (VmHWM still above the RSS afterwards, as in some sandboxes)
    the window is not started and :func:`peak_memory_mb` says so."""
    global _rss_baseline
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    _rss_baseline = None
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return
    hwm, rss = _status_kib("VmHWM"), _status_kib("VmRSS")
    if hwm is not None and rss is not None and hwm <= rss + _SLACK_KIB:
        _rss_baseline = rss


#: KiB of disagreement between VmHWM and VmRSS read a moment apart that is not a fault
_SLACK_KIB = 4096


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    """(peak MiB since :func:`reset_peak_memory`, what was measured): CUDA max allocated
    on GPU ("cuda_max_allocated"); on CPU the growth of the process's resident set over
    the window, VmHWM - RSS at the reset ("cpu_peak_rss_delta"); where the kernel does not
    keep VmHWM up to date (below the RSS now), the RSS now - RSS at the reset, a lower
    bound ("cpu_rss_delta_now"); where the peak cannot be reset, the process's lifetime
    peak RSS ("process_peak_rss")."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    hwm, rss = _status_kib("VmHWM"), _status_kib("VmRSS")
    if _rss_baseline is not None and hwm is not None and rss is not None:
        if hwm + _SLACK_KIB < rss:
            return max(rss - _rss_baseline, 0) / 1024, "cpu_rss_delta_now"
        return max(max(hwm, rss) - _rss_baseline, 0) / 1024, "cpu_peak_rss_delta"
    return peak_rss_mb(), "process_peak_rss"


def free_memory_bytes(device: torch.device) -> int | None:
    """Bytes free on ``device``: CUDA's ``mem_get_info``; on the CPU, Linux's
    MemAvailable (None where neither is known)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
