"""glibc malloc thresholds for training loops, set once at import (Linux/glibc only).

A fit allocates and frees the same multi-megabyte tensors every update.  With glibc's
defaults, blocks above the mmap threshold come from fresh ``mmap`` pages (returned with
``munmap``) and the heap top is trimmed back to the system above the trim threshold, so
the same pages fault in again update after update (``benchmarks/allocator_churn.py``
measures minor faults, system time and seconds per update with and without this).  Here
the mmap threshold is raised to its maximum (32 MiB on 64-bit) and trimming to 1 GiB:
freed blocks stay in the heap and are reused.  Nothing changes numerically.

Skipped where the user set any ``MALLOC_*`` variable (their choice wins), with
``PCGBENCH_MALLOPT=0``, and off glibc.  ``APPLIED`` says whether it took effect.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's maximum on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 1024 * 1024 * 1024

APPLIED = False


def apply() -> bool:
    """Set the thresholds (once); True where they took effect."""
    global APPLIED
    if APPLIED:
        return True
    if (not sys.platform.startswith("linux") or os.environ.get("PCGBENCH_MALLOPT") == "0"
            or any(k.startswith("MALLOC_") for k in os.environ)):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    APPLIED = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return APPLIED
