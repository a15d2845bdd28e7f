"""Side-by-side measurements as records, and the machine load every measurement carries.

``benchmarks/inference_speed.py`` and ``benchmarks/training_cost.py`` time several methods
in ONE process (interleaved repeats, or consecutive configurations on the same data), so
background load hits all of them alike; run records time each method in its own process,
at its own moment, and on a shared CPU their ratios are not comparable.  The audit's
timing claims therefore read only these benchmark records (or GPU run records).

A benchmark record (JSON, ``RESULTS/benchmarks/<kind>/<task>/<preset>/<stamp>.json``)::

    {"kind": "inference_speed" | "training_cost", "task", "preset", "device_kind",
     "device", "metric": "seconds_per_sample" | "seconds_per_update" | "peak_mb",
     "values": {column: [one value per repeat / round]},
     "methods": {column: registered method name}, "load": machine_load() at start/end,
     "settings": {...}, "finished": ISO time}

``column`` is the method's name, or ``name[key=value]`` for a configuration that is not
its default (PBFM at a fixed unrolling depth: ``pbfm[unroll=2]``).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from pcgbench import environment
from pcgbench.storage import atomic_write_json


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


def write_benchmark_record(root: Path, kind: str, task: str, preset: str,
                           device: torch.device, metric: str,
                           values: dict[str, list[float]], methods: dict[str, str],
                           load: dict[str, Any], settings: dict[str, Any]) -> Path:
    """Write one side-by-side measurement (see the module docstring); returns its path."""
    stamp = environment.now().replace(":", "").replace("+", "p")
    path = (root / "benchmarks" / kind / task / preset
            / f"{stamp}-{metric}-{device.type}-{os.getpid()}.json")  # one file per metric
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {
        "kind": kind, "task": task, "preset": preset, "device_kind": device.type,
        "device": environment.device_description(device), "metric": metric,
        "values": {k: [float(x) for x in v] for k, v in values.items()},
        "methods": methods, "load": load, "settings": settings,
        "git": environment.git_hash(), "finished": environment.now()})
    return path


def load_benchmark_records(root: Path) -> list[dict[str, Any]]:
    """Every benchmark record under ``root/benchmarks`` (unreadable ones skipped, named
    in a warning)."""
    out = []
    for path in sorted((root / "benchmarks").rglob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            warnings.warn(f"skipping unreadable benchmark record {path}: "
                          f"{type(exc).__name__}", stacklevel=2)
            continue
        if isinstance(rec, dict) and isinstance(rec.get("values"), dict):
            rec["_path"] = str(path)
            out.append(rec)
    return out
