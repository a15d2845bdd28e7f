"""Provenance for run records: package versions, git hash, device, timestamps."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

PACKAGES = ("pcgbench", "torch", "numpy", "scipy", "pandas", "POT", "h5py")


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    out["python"] = platform.python_version()
    return out


def git_hash() -> str | None:
    """The commit of the source tree pcgbench is imported from (None outside a checkout)."""
    here = Path(__file__).resolve().parent
    try:
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    try:  # a slow `git status` must not lose a record after all the compute
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here, capture_output=True, text=True, timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return res.stdout.strip() + "-unknown-status"
    return res.stdout.strip() + ("-dirty" if dirty else "")


def full_fp32() -> dict[str, str]:
    """Make every float32 matmul and convolution IEEE float32 on CUDA, as on the CPU
    (torch's default lets cuDNN convolutions use TF32, a 10-bit mantissa: the U-Net
    backbone and convolutional metrics would then compute differently on a GPU);
    returns the settings now in force."""
    backends = torch.backends
    mods = {"matmul": getattr(backends.cuda, "matmul", None),
            "conv": getattr(backends.cudnn, "conv", None),
            "rnn": getattr(backends.cudnn, "rnn", None)}
    if all(hasattr(m, "fp32_precision") for m in mods.values()):
        for m in mods.values():
            m.fp32_precision = "ieee"
        return {k: str(m.fp32_precision) for k, m in mods.items()}
    backends.cuda.matmul.allow_tf32 = False  # torch before the fp32_precision API
    backends.cudnn.allow_tf32 = False
    return {"matmul": "ieee", "conv": "ieee", "rnn": "ieee"}


def resolve_device(name: str = "auto") -> torch.device:
    """The device of a run (``auto``: CUDA when present); float32 is IEEE on it
    (:func:`full_fp32`)."""
    from pcgbench.errors import PcgError

    full_fp32()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise PcgError(f"--device {name!r} is not a device; use auto, cpu, cuda or "
                       "cuda:<index>") from exc
    if dev.type not in ("cpu", "cuda"):
        raise PcgError(f"--device {name!r}: only auto, cpu, cuda and cuda:<index> are "
                       "supported")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PcgError("--device cuda requested but CUDA is not available; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise PcgError(f"--device {name!r}: only {torch.cuda.device_count()} CUDA device(s)")
    return dev


def device_description(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# -- the machine load every measurement carries ----------------------------------
def load_average() -> float | None:
    """The 1-minute load average (None where the OS does not report one)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def machine_load() -> dict[str, Any]:
    """{"load1": 1-minute load average, "cpus": logical CPU count} now."""
    return {"load1": load_average(), "cpus": os.cpu_count()}


def _points(load: Any) -> list[tuple[float, int]]:
    """Every (load1, cpus) of a load block, however nested (start/end, fit/sample)."""
    out = []
    stack: list[Any] = [load]
    while stack:
        d = stack.pop()
        if not isinstance(d, dict):
            continue
        if "load1" in d:
            lo, c = d.get("load1"), d.get("cpus")
            if isinstance(lo, int | float) and isinstance(c, int):
                out.append((float(lo), c))
        else:
            stack.extend(d.values())
    return out


def was_loaded(load: dict[str, Any] | None) -> bool | None:
    """Whether a load block ({"start"/"end": machine_load(), or phases of them}) saw a
    1-minute load average above the CPU count (None: not recorded)."""
    points = _points(load)
    return any(lo > c for lo, c in points) if points else None


def describe_load(load: dict[str, Any] | None) -> str:
    """E.g. "1-min load 2.4-3.1 on 2 CPUs: LOADED (load > CPUs)", or "load not recorded"."""
    points = _points(load)
    if not points:
        return "load not recorded"
    loads = [lo for lo, _ in points]
    loaded = any(lo > c for lo, c in points)
    return (f"1-min load {min(loads):.2g}-{max(loads):.2g} on {max(c for _, c in points)} "
            "CPUs: " + ("LOADED (load > CPUs)" if loaded else "not loaded"))
