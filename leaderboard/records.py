"""Reading run records back from the results directory."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pcgbench.record import (  # noqa: F401 - re-exported
    RunRecord,
    metric_out_of_range,
    record_integrity,
    record_problem,
)


def _parse(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(the JSON object of a file that is a run record, '') or (None, why it is not one):
    not a regular file (an empty directory, a device, a FIFO: never opened), unreadable, not
    JSON, or JSON without a task and a method."""
    try:
        if not path.is_file():
            return None, "not a regular file"
        rec = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError: ValueError
        return None, type(exc).__name__
    if not isinstance(rec, dict):
        return None, f"a JSON {type(rec).__name__}"
    if "task" not in rec or "method" not in rec:
        return None, "no task and method"
    return rec, ""


#: how many unusable records ``load_records`` names one by one; more are summed up
NAMED_SKIPS = 10


def load_records(root: Path, allow_unsealed: bool = False) -> list[RunRecord]:
    """All run records under ``root/records``.  A record that cannot be used -- ill-typed
    anywhere (:data:`pcgbench.record.RECORD_SCHEMA`), of a newer layout, without a
    ``digest`` (unless ``allow_unsealed``: imported on purpose, and said once), with
    content that does not match its digest (edited or damaged) or with a metric outside
    its range -- is skipped and named in one warning each (the first ``NAMED_SKIPS``, then
    one line with the total); files that are no records at
    all (unreadable, binary, not a JSON object, without task and method) are counted in
    one summary warning.  Never a crash, and nothing skipped is shown as a result."""
    out = []
    junk: list[tuple[Path, str]] = []
    unsealed = skipped = 0
    for path in sorted((root / "records").rglob("*.json")):
        if path.is_dir() and any(path.iterdir()):
            continue  # a folder named like a record, holding files: a method's (``x.json``)
        rec, why = _parse(path)
        if rec is None:
            junk.append((path, why))
            continue
        problem = record_integrity(rec, allow_unsealed)
        if problem is not None:
            skipped += 1
            if skipped <= NAMED_SKIPS:
                warnings.warn(f"skipping record {path}: {problem}", stacklevel=2)
            continue
        unsealed += "digest" not in rec
        out.append(RunRecord(MappingProxyType(rec), str(path)))
    if skipped > NAMED_SKIPS:
        warnings.warn(f"skipped {skipped} records that cannot be used in all (the first "
                      f"{NAMED_SKIPS} named above; edited, damaged, ill-typed or newer): "
                      "they count in no table", stacklevel=2)
    if junk:
        (first, why), n = junk[0], len(junk)
        warnings.warn(f"skipped {n} file{'s' if n > 1 else ''} that {'are' if n > 1 else 'is'} "
                      f"not {'records' if n > 1 else 'a record'} under {root / 'records'} "
                      f"(unreadable, or not a JSON run record; e.g. {first}: {why})",
                      stacklevel=2)
    if unsealed:
        warnings.warn(f"imported {unsealed} unsealed record(s) without a digest "
                      "(--allow-unsealed): their content is not verified", stacklevel=2)
    return out
