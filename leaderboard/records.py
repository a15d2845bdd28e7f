"""Reading run records back from the results directory."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import MappingProxyType

from pcgbench.record import (  # noqa: F401 - re-exported
    RunRecord,
    metric_out_of_range,
    record_problem,
)


def load_records(root: Path) -> list[RunRecord]:
    """All run records under ``root/records``.  Unreadable (binary, truncated) or ill-typed
    files (:func:`record_problem`), records whose content does not match their ``digest``
    (edited or damaged) and records with a metric outside its declared range are skipped
    and named in a warning, never a crash and never shown as results."""
    from pcgbench.record import record_digest

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
        out.append(RunRecord(MappingProxyType(rec), str(path)))
    return out
