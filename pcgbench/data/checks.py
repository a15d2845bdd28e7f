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
  size, mtime and inode) is memoized per process.  An HDF5 file's external links and
  virtual datasets read other files: those are hashed with it (:func:`h5_linked_files`).
* :func:`read_array`: what a loader reads from a data file, checked before any byte is
  read: real floating-point values (integers with a note; bool, complex, strings
  refused) whose selection fits the memory available (:func:`check_memory`).
* :func:`require_file`: a path that must be a regular file; a directory, FIFO, socket or
  device is named as what it is, not "not found".
"""

from __future__ import annotations

import hashlib
import math
import stat
import warnings
from pathlib import Path
from typing import Any, Protocol

import numpy as np
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
    ``--data-file`` names (None without one), and of every file their HDF5 external links
    and virtual datasets read (:func:`h5_linked_files`; a file without links hashes as
    before)."""
    if task.data_file is None:
        return None
    files = task.external_files(Path(task.data_file))
    if not files:
        path = Path(task.data_file)
        kind = path_kind(path) if "{split}" not in str(path) else "missing"
        if kind == "a directory":
            raise PcgError(f"--data-file {str(path)!r} is a directory holding no data files")
        if kind not in (None, "missing"):
            raise PcgError(f"--data-file {str(path)!r} is {kind}, not a data file")
        raise PcgError(f"--data-file {str(path)!r}: data file(s) not found")
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + file_digest(f).encode() + b"\n")
        for target in h5_linked_files(f):
            h.update(b"linked:" + str(target).encode() + b"\0" + file_digest(target).encode()
                     + b"\n")
    return f"sha256:{h.hexdigest()}"


_LINKS: dict[tuple[str, int, int, int], list[Path]] = {}


def h5_linked_files(path: Path) -> list[Path]:
    """The files (resolved paths, sorted) that the HDF5 file ``path`` reads through its
    external links and virtual datasets, followed into those files in turn; empty for a
    file that is not HDF5 or has neither.  A link or virtual source whose file is not
    there is one line (HDF5 would read fill values or fail in the middle of a load).
    Memoized like :func:`file_digest` (on the linking file's size, mtime and inode)."""
    out: list[Path] = []
    seen = {Path(path).resolve()}
    todo = [Path(path)]
    while todo:
        for target in _direct_links(todo.pop()):
            if target not in seen:
                seen.add(target)
                out.append(target)
                todo.append(target)
    return sorted(out)


def _direct_links(path: Path) -> list[Path]:
    try:
        st = path.stat()
    except OSError as exc:
        raise PcgError(f"--data-file {str(path)!r} cannot be read "
                       f"({exc.strerror or exc})") from exc
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _LINKS or not all(t.is_file() for t in _LINKS[key]):
        _LINKS[key] = _scan_links(path)  # (again where a target went: its one line)
    return _LINKS[key]


def _scan_links(path: Path) -> list[Path]:
    import h5py

    try:
        if not h5py.is_hdf5(path):
            return []
        f = h5py.File(path, "r")
    except OSError:
        return []  # not readable as HDF5: the loader says what it is
    found: set[Path] = set()
    with f:
        groups: list[Any] = [f]
        datasets: list[Any] = []
        f.visititems(lambda _name, obj: (groups if isinstance(obj, h5py.Group)
                                         else datasets).append(obj))
        for group in groups:
            for name in group:
                link = group.get(name, getlink=True)
                if isinstance(link, h5py.ExternalLink):
                    found.add(_external_target(path, group, name, link))
        for ds in datasets:
            if isinstance(ds, h5py.Dataset) and ds.is_virtual:
                for src in ds.virtual_sources():
                    if src.file_name != ".":
                        found.add(_virtual_source(path, ds.name, src.file_name))
    return sorted(found)


def _external_target(path: Path, group: Any, name: str, link: Any) -> Path:
    """The file HDF5 opens for the external link ``group[name]`` (its own resolution)."""
    where = f"{group.name.rstrip('/')}/{name}"
    try:
        obj = group.get(name)
        target = Path(obj.file.filename) if obj is not None else None
    except (KeyError, OSError, RuntimeError, ValueError):
        target = None
    if target is None or not target.is_file():
        raise PcgError(f"--data-file {str(path)!r}: {where!r} is an external link to "
                       f"{link.filename!r}:{link.path!r}, which cannot be opened")
    return target.resolve()


def _virtual_source(path: Path, dataset: str, name: str) -> Path:
    """The source file ``name`` of a virtual dataset of ``path``: absolute, else beside
    the virtual dataset's file, else relative to the working directory."""
    candidates = [Path(name)] if Path(name).is_absolute() else [path.parent / name,
                                                                 Path(name)]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise PcgError(f"--data-file {str(path)!r}: virtual dataset {dataset!r} maps the file "
                   f"{name!r}, which is not there (HDF5 would read fill values for it)")


def path_kind(path: Path) -> str | None:
    """None for a regular file (or a link to one), else what the path is: "missing", "a
    directory", "a FIFO (named pipe)", "a socket", "a character device", "a block device",
    "a broken symbolic link"."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if path.is_symlink() else "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def require_file(path: Path, what: str, missing: str = "not found") -> Path:
    """``path`` when it is a regular file; else one line: ``"<what> '<path>' <missing>"``
    where nothing is there, or naming what is there (a directory, a FIFO, ...)."""
    kind = path_kind(Path(path))
    if kind is None:
        return Path(path)
    if kind == "missing":
        raise PcgError(f"{what} {str(path)!r} {missing}")
    raise PcgError(f"{what} {str(path)!r} is {kind}, not a data file")


def available_memory() -> int | None:
    """Bytes of memory this process may still allocate (Linux MemAvailable); None where
    unknown (then no read is refused for its size)."""
    from pcgbench.runtime.timing import free_memory_bytes

    return free_memory_bytes(torch.device("cpu"))


def _size(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n / 1e3:.3g} kB"


def check_memory(shape: tuple[int, ...], bytes_per_value: int, what: str,
                 extra: int = 0) -> None:
    """One line when ``shape`` values of ``bytes_per_value`` bytes each (plus ``extra``
    bytes of buffers) exceed the memory available (:func:`available_memory`); called
    before reading them."""
    need = math.prod(int(s) for s in shape) * int(bytes_per_value) + int(extra)
    free = available_memory()
    if free is not None and need > free:
        dims = " x ".join(f"{int(s):,}" for s in shape) or "a scalar"
        raise PcgError(f"{what}: reading {dims} values needs ~{_size(need)} of memory, more "
                       f"than the {_size(free)} available (a truncated or wrong file, or a "
                       "machine with too little memory for it)")


def selection_shape(shape: tuple[int, ...], sel: Any) -> tuple[int, ...]:
    """The shape ``array[sel]`` has for an array of ``shape``, computed without data (basic
    indexing: integers, slices, ``...``); the whole ``shape`` for anything else."""
    items = sel if isinstance(sel, tuple) else (sel,)
    if all(s is Ellipsis or isinstance(s, slice | int | np.integer) for s in items):
        probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=tuple(shape),
                                                strides=(0,) * len(shape))
        try:
            return tuple(probe[sel].shape)
        except IndexError:
            return tuple(shape)
    return tuple(shape)


def check_dtype(dtype: Any, what: str, notes: dict[str, str] | None = None) -> None:
    """Real floating-point data pass; integers pass with a warning (and a line in
    ``notes``, a task's ``data_notes``); bool, complex, strings and anything else are one
    line naming the dtype (numpy would turn them into numbers without a word, or discard
    an imaginary part with only a warning)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return
    if dt.kind in "iu":
        text = f"{what} holds {dt} integers, read as floating point"
        warnings.warn(text, stacklevel=3)
        if notes is not None:
            prev = notes.get("integer_data")
            if prev is None or text not in prev:
                notes["integer_data"] = text if prev is None else f"{prev}; {text}"
        return
    kind = {"b": "bool", "c": f"complex ({dt})", "S": "byte-string", "U": "string",
            "O": "object", "V": f"structured ({dt})", "M": "datetime", "m": "timedelta"}
    raise PcgError(f"{what} holds {kind.get(dt.kind, str(dt))} values; expected real "
                   "floating-point numbers (integers are read with a note)")


def check_read(ds: Any, sel: Any = Ellipsis, *, what: str, dtype: Any = np.float64,
               notes: dict[str, str] | None = None) -> None:
    """Whether ``ds[sel]`` (an h5py dataset or a numpy/memory-mapped array) may be read as
    a ``dtype`` array, from its dtype and shape alone: :func:`check_dtype`, then
    :func:`check_memory` on the selection's shape (the stored values and, where the dtype
    changes, the converted copy)."""
    check_dtype(ds.dtype, what, notes)
    out = np.dtype(dtype)
    stored = np.dtype(ds.dtype)
    check_memory(selection_shape(tuple(ds.shape), sel),
                 stored.itemsize + (0 if stored == out else out.itemsize), what)


def read_array(ds: Any, sel: Any = Ellipsis, *, what: str, dtype: Any = np.float64,
               notes: dict[str, str] | None = None) -> np.ndarray:
    """``ds[sel]`` as a ``dtype`` array, read only after :func:`check_read` passed."""
    check_read(ds, sel, what=what, dtype=dtype, notes=notes)
    return np.asarray(ds[sel], dtype=np.dtype(dtype))


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
    for other, theirs in seen.items():
        known = set(theirs)
        shared = sum(1 for h in hashes if h in known)  # rows of this split found in other
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

