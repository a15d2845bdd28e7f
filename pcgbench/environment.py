"""Provenance for run records: package versions, git hash, device, timestamps."""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

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
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=here, capture_output=True, text=True, timeout=5,
    ).stdout.strip()
    return res.stdout.strip() + ("-dirty" if dirty else "")


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        from pcgbench.errors import PcgError

        raise PcgError("--device cuda requested but CUDA is not available; use --device cpu")
    return dev


def device_description(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
