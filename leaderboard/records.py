"""Reading run records back from the results directory."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

_NUM = (int, float)
_NONFINITE = ("nan", "inf", "-inf", "Infinity", "-Infinity", "NaN")


def _number(v: Any, optional: bool = True) -> bool:
    if v is None:
        return optional
    return (isinstance(v, _NUM) and not isinstance(v, bool)) or v in _NONFINITE


#: top-level fields a table, a note or the report reads, and their types (a field that is
#: absent is fine; one of another type makes the record ill-typed)
_FIELDS: dict[str, Any] = {
    "task": str, "method": str, "preset": str, "status": str,
    "seed": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "variant": (str, type(None)), "status_reason": (str, type(None)),
    "pretrained": (str, type(None)), "samples_file": (str, type(None)),
    "created": str, "started": str, "finished": str, "note": str,
    "metrics": dict, "config": dict, "task_params": dict, "method_info": (dict, type(None)),
    "protocol": (dict, type(None)), "inference": (dict, type(None)),
    "training": (dict, type(None)), "memory": (dict, type(None)),
    "nfe": _number, "parameters": _number, "wall_seconds": _number,
    "code_versions": lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, int) and not isinstance(x, bool)
        for k, x in v.items()),
    "nfe_per_batch": lambda v: isinstance(v, list) and all(_number(x, False) for x in v),
}
_NESTED_NUMBERS = {"inference": ("seconds_per_sample", "seconds_per_batch", "batch_size"),
                   "training": ("seconds_per_update", "updates", "fit_seconds", "final_loss"),
                   "memory": ("train_peak_mb", "sample_peak_mb")}


def record_problem(rec: Any) -> str | None:
    """Why a parsed record cannot be used by a table or report (a field of the wrong
    type, a metric that is not a number, a malformed loss curve), or None."""
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not an object"
    for name, kind in _FIELDS.items():
        if name not in rec:
            continue
        v = rec[name]
        ok = kind(v) if callable(kind) and not isinstance(kind, type) else isinstance(v, kind)
        if not ok:
            return f"field {name!r} is {json.dumps(v, default=str)[:40]}"
    for name, value in (rec.get("metrics") or {}).items():
        if not isinstance(name, str) or not _number(value):
            return f"metric {name!r} is {json.dumps(value, default=str)[:40]}"
    for block, keys in _NESTED_NUMBERS.items():
        for k in keys:
            if k in (rec.get(block) or {}) and not _number(rec[block][k]):
                return f"field {block}.{k} is {json.dumps(rec[block][k], default=str)[:40]}"
    curve = (rec.get("training") or {}).get("loss_curve")
    if curve is not None and not (isinstance(curve, list) and all(
            isinstance(p, list) and len(p) == 2 and all(_number(x, False) for x in p)
            for p in curve)):
        return "field training.loss_curve is not a list of [update, loss] pairs"
    return None


def metric_out_of_range(rec: dict[str, Any]) -> str | None:
    """The first finite metric outside its registered metric's declared ``bounds``."""
    from pcgbench.registry import METRICS

    for name, value in (rec.get("metrics") or {}).items():
        cls = METRICS.lookup(name)
        if cls is None or not isinstance(value, _NUM) or not math.isfinite(value):
            continue
        lo, hi = getattr(cls, "bounds", (-math.inf, math.inf))
        tol = 1e-9 * max(1.0, *(abs(b) for b in (lo, hi) if math.isfinite(b)))
        if not lo - tol <= value <= hi + tol:
            return f"metric {name} = {value:.6g} is outside its range [{lo:g}, {hi:g}]"
    return None


def load_records(root: Path) -> list[dict[str, Any]]:
    """All run records under ``root/records``.  Unreadable (binary, truncated) or ill-typed
    files (:func:`record_problem`), records whose content does not match their ``digest``
    (edited or damaged) and records with a metric outside its declared range are skipped
    and named in a warning, never a crash and never shown as results."""
    from pcgbench.storage import record_digest

    out = []
    for path in sorted((root / "records").rglob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError: ValueError
            warnings.warn(f"skipping unreadable record {path}: {type(exc).__name__}",
                          stacklevel=2)
            continue
        problem = record_problem(rec)
        if problem is None and "digest" in rec and rec["digest"] != record_digest(rec):
            problem = "its content does not match its digest (edited or damaged)"
        if problem is None:
            problem = metric_out_of_range(rec)
        if problem is not None:
            warnings.warn(f"skipping record {path}: {problem}", stacklevel=2)
            continue
        rec["_path"] = str(path)
        out.append(rec)
    return out
