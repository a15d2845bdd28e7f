"""Reading and writing run records: the one place a record file is opened.

* :func:`write_record` seals a record (its content digest) and writes it atomically;
* :func:`read_record` reads one back for reuse (None where it is absent or unusable);
* :func:`load_records` reads every record of a results directory (or a published set)
  for the tables, naming and skipping what cannot be used;
* :func:`cell_records` reads the records of one (task, preset, method).

Every read checks the record's schema and seal (:func:`pcgbench.results.record.
record_integrity`); nothing outside this module parses a record file.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pcgbench.errors import PcgError
from pcgbench.results import layout
from pcgbench.results.files import atomic_write_json
from pcgbench.results.record import (
    NEWER,
    RecordError,
    RunRecord,
    record_integrity,
    seal_record,
)


def write_record(path: Path, record: dict[str, Any]) -> RunRecord:
    """Seal ``record`` (``digest``) and write it atomically at ``path``; an ill-typed
    record is refused (:class:`RecordError`).  Returns the record as written."""
    written = RunRecord.from_json(seal_record(record), str(path))
    atomic_write_json(path, written.to_json())
    return written


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


def read_record(path: Path) -> RunRecord | None:
    """The stored record, or None when there is none or it is unreadable (a corrupt,
    unsealed or ill-typed record does not block a rerun; it is replaced, with a warning).
    A record written by a newer pcgbench is refused (one line), never overwritten."""
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or "metrics" not in record:
            raise ValueError("not a run record")
        problem = record_integrity(record)
        if problem is not None and NEWER in problem:
            raise PcgError(f"run record {path}: {problem}; it is left as it is")
        if problem is not None:
            raise ValueError(problem)
        return RunRecord.from_json(record, str(path))
    except (OSError, ValueError, RecordError) as exc:
        warnings.warn(f"run record {path} is unreadable ({exc}); rerunning", stacklevel=2)
        return None


def cell_records(root: Path, task: str, preset: str, method: str, limit: int | None = None
                 ) -> list[RunRecord]:
    """The sound, sealed records of one (task, preset, method) under ``root`` (the first
    ``limit`` files by name); unusable ones are left out silently (a cost estimate, not a
    table)."""
    folder = layout.cell_folder(root, task, preset, method)
    out = []
    for path in sorted(folder.glob("*.json"))[:limit] if folder.is_dir() else ():
        rec, _ = _parse(path)
        if rec is not None and record_integrity(rec) is None:
            out.append(RunRecord(MappingProxyType(rec), str(path)))
    return out


#: how many unusable records ``load_records`` names one by one; more are summed up
NAMED_SKIPS = 10


def load_records(root: Path, allow_unsealed: bool = False) -> list[RunRecord]:
    """All run records under ``root``'s records folder.  A record that cannot be used --
    ill-typed anywhere (:data:`pcgbench.results.record.RECORD_SCHEMA`), of a newer layout,
    without a ``digest`` (unless ``allow_unsealed``: imported on purpose, and said once),
    with content that does not match its digest (edited or damaged) or with a metric
    outside its range -- is skipped and named in one warning each (the first
    ``NAMED_SKIPS``, then one line with the total); files that are no records at all
    (unreadable, binary, not a JSON object, without task and method) are counted in one
    summary warning.  Never a crash, and nothing skipped is shown as a result."""
    out = []
    junk: list[tuple[Path, str]] = []
    unsealed = skipped = 0
    records = layout.records_root(root)
    for path in sorted(records.rglob("*.json")):
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
                      f"not {'records' if n > 1 else 'a record'} under {records} "
                      f"(unreadable, or not a JSON run record; e.g. {first}: {why})",
                      stacklevel=2)
    if unsealed:
        warnings.warn(f"imported {unsealed} unsealed record(s) without a digest "
                      "(--allow-unsealed): their content is not verified", stacklevel=2)
    return out
