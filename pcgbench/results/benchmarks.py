"""Side-by-side measurements as records (the machine load each carries:
:func:`pcgbench.runtime.environment.machine_load`).

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
import warnings
from pathlib import Path
from typing import Any

import torch

from pcgbench.results import layout
from pcgbench.results.files import atomic_write_json
from pcgbench.runtime import environment


def write_benchmark_record(root: Path, kind: str, task: str, preset: str,
                           device: torch.device, metric: str,
                           values: dict[str, list[float]], methods: dict[str, str],
                           load: dict[str, Any], settings: dict[str, Any]) -> Path:
    """Write one side-by-side measurement (see the module docstring); returns its path."""
    stamp = environment.now().replace(":", "").replace("+", "p")
    path = layout.benchmark_path(root, kind, task, preset, stamp, metric, device.type)
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
    for path in sorted(layout.benchmarks_root(root).rglob("*.json")):
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
