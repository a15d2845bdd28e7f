"""Checks every loaded split passes before a method sees it, and the content identity of
external data files.

* :func:`check_split`: every split of every task (generated or ``--data-file``) must be
  non-empty and finite (fields and conditions), and share no row with another loaded
  split of the same task (a row-hash check: identical fields in train and test make the
  test a memorization test).  One-line :class:`PcgError` naming the source, the split and
  the row count.  A task whose reference protocol has a known overlap declares it
  (``Task.overlap_reason``, default ``split_overlap_reason``): then the overlap is a
  warning and is counted in the record (``data_overlap``), never silent.
* :func:`data_digest`: a SHA-256 over the contents of the files a ``--data-file`` names
  (``Task.external_files``), so runs and checkpoints are keyed by what was read, not by
  a path whose contents may have been replaced.  The digest of an unchanged file (same
  size, mtime and inode) is memoized per process.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any, Protocol

import torch

from pcgbench.errors import PcgError
from pcgbench.fields import FieldData


class GuardedTask(Protocol):
    """What the guards need of a task (:class:`pcgbench.task.Task` provides it)."""

    name: str
    data_file: Any
    split_overlaps: dict[str, int]
    _row_hashes: dict[str, Any]

    def external_files(self, path: Path) -> list[Path]: ...

    def overlap_reason(self, pair: str) -> str: ...

_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (memoized on path, size, mtime and inode)."""
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
        if key not in _DIGESTS:
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            _DIGESTS[key] = h.hexdigest()
    except OSError as exc:
        raise PcgError(f"--data-file {str(path)!r} cannot be read "
                       f"({exc.strerror or exc})") from exc
    return _DIGESTS[key]


def data_digest(task: GuardedTask) -> str | None:
    """``sha256:<hex>`` over the names and contents of every file the task's
    ``--data-file`` names (None without one)."""
    if task.data_file is None:
        return None
    files = task.external_files(Path(task.data_file))
    if not files:
        raise PcgError(f"--data-file {str(task.data_file)!r}: data file(s) not found")
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + file_digest(f).encode() + b"\n")
    return f"sha256:{h.hexdigest()}"


def _bad_rows(t: torch.Tensor) -> int:
    if not t.is_floating_point() and not t.is_complex():
        return 0
    return int((~torch.isfinite(t.reshape(len(t), -1))).any(dim=1).sum()) if len(t) else 0


def row_hashes(data: FieldData) -> list[bytes]:
    """One 16-byte BLAKE2b digest of every row's field bytes."""
    x = data.x.detach().cpu().contiguous()
    flat = x.reshape(len(x), -1).view(torch.uint8) if len(x) else x
    return [hashlib.blake2b(row.numpy().tobytes(), digest_size=16).digest() for row in flat]


def check_split(task: GuardedTask, split: str, data: FieldData, source: str) -> None:
    """Refuse (one line) an empty split, non-finite fields or conditions, and rows shared
    with another split of ``task`` already loaded; records overlap counts of a task that
    declares its protocol's overlap in ``task.split_overlaps``."""
    if len(data) == 0:
        raise PcgError(f"{source}: split {split!r} of {task.name!r} has no rows")
    for what, t in (("fields", data.x), ("conditions", data.cond)):
        if t is None:
            continue
        if len(t) != len(data):
            raise PcgError(f"{source}: split {split!r} has {len(data)} fields but {len(t)} "
                           "conditions")
        bad = _bad_rows(t)
        if bad:
            raise PcgError(f"{source}: split {split!r} of {task.name!r} has {bad} of "
                           f"{len(t)} rows with non-finite (NaN/Inf) {what}")
    hashes = row_hashes(data)
    seen = task._row_hashes
    mine = set(hashes)
    for other, theirs in seen.items():
        shared = sum(1 for h in theirs if h in mine)
        if not shared:
            continue
        pair = "/".join(sorted((split, other), key=("train", "val", "test").index))
        reason = task.overlap_reason(pair)
        if not reason:
            raise PcgError(f"{source}: {shared} of {len(hashes)} {split} rows of {task.name!r} "
                           f"are identical to {other} rows; the splits must be disjoint "
                           "(a test on training data measures memorization)")
        task.split_overlaps[pair] = shared
        warnings.warn(f"{task.name}: {shared} {split} rows equal {other} rows ({reason}); "
                      "counted in the record as data_overlap", stacklevel=3)
    seen[split] = hashes


def external_files(path: Path) -> list[Path]:
    """The files a ``--data-file`` value names: the per-split files of a ``{split}``
    template, every regular file directly in a directory, or the file itself."""
    text = str(path)
    if "{split}" in text:
        files = [Path(text.replace("{split}", s)) for s in ("train", "val", "test")]
        return [f for f in files if f.is_file()]
    if path.is_dir():
        return sorted(f for f in path.iterdir() if f.is_file() and not f.name.startswith("."))
    return [path] if path.is_file() else []

