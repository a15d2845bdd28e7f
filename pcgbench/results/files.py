"""Where things live on disk, and atomic writes (temp file + rename)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pcgbench.errors import PcgError


def _expand(path: Path | str, what: str) -> Path:
    try:
        return Path(path).expanduser()
    except RuntimeError as exc:  # '~nouser/x': no such user
        raise PcgError(f"{what} {str(path)!r}: cannot expand '~' ({exc})") from exc


def _user_dir(env: str, leaf: str) -> Path:
    value = os.environ.get(env)
    if value is not None and value != "" and not value.strip():
        raise PcgError(f"${env} is blank ({value!r}); unset it or name a directory")
    if value:
        return _expand(value, f"${env}")
    base = os.environ.get("XDG_CACHE_HOME") or str(_expand("~", "home") / ".cache")
    return Path(base) / "pcgbench" / leaf


def _blank(value: Path | str | None, what: str) -> None:
    if value is not None and not str(value).strip():
        raise PcgError(f"{what} is blank ({str(value)!r}); name a directory")


def data_dir(override: Path | str | None = None) -> Path:
    """The dataset cache: ``--data-dir``, else ``$PCGBENCH_DATA``, else ~/.cache/pcgbench/data."""
    _blank(override, "--data-dir")
    return _expand(override, "--data-dir") if override else _user_dir("PCGBENCH_DATA", "data")


def results_dir(override: Path | str | None = None) -> Path:
    """Run records and checkpoints: ``--results``, else ``$PCGBENCH_RESULTS``, else
    ~/.cache/pcgbench/results."""
    _blank(override, "--results")
    return (_expand(override, "--results") if override
            else _user_dir("PCGBENCH_RESULTS", "results"))


def storage_error(path: Path | str, exc: OSError, doing: str = "write") -> PcgError:
    """One line naming the path and the cause of a failed filesystem operation (a full
    disk, a file-size limit, a read-only or immutable directory, a file in the way)."""
    return PcgError(f"cannot {doing} {str(path)!r}: {exc.strerror or exc}"
                    + (f" [{errno_name(exc)}]" if exc.errno else ""))


def errno_name(exc: OSError) -> str:
    import errno

    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def make_dir(path: Path) -> Path:
    """``mkdir -p``, a failure as one line (:func:`storage_error`)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(path, exc, "create the directory") from exc
    return path


def ensure_writable(path: Path) -> Path:
    """``path`` as a writable directory (made if absent), else one line saying what is in
    the way: a regular file, a symlink loop or a dangling link, or no write permission."""
    if path.is_symlink() and not path.exists():
        try:
            path.resolve(strict=True)
        except RuntimeError:  # Python < 3.13: a loop
            raise PcgError(f"directory {str(path)!r} is a symlink loop") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PcgError(f"directory {str(path)!r} is a symlink loop") from None
            raise PcgError(f"directory {str(path)!r} is a dangling symlink (to "
                           f"{os.readlink(path)!r})") from None
    if path.exists() and not path.is_dir():
        raise PcgError(f"{str(path)!r} is a file, not a directory: pass a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, delete=True)
        probe.close()
    except OSError as exc:
        raise PcgError(f"directory {str(path)!r} is not writable ({exc.strerror or exc})") from exc
    return path


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temp file beside ``path``, then rename it into place, so a
    reader never sees a half-written file and an interrupted write leaves nothing."""
    make_dir(path.parent)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise storage_error(path, exc) from exc
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; make it a normal file
        os.replace(tmp, path)
    except OSError as exc:  # ENOSPC, EFBIG, EROFS, EACCES, ...: the old file is kept
        raise storage_error(path, exc) from exc
    except RuntimeError as exc:  # h5py reports a failed system call as "errno = N"
        import re

        found = re.search(r"errno = (\d+)", str(exc))
        if found is None:
            raise
        code = int(found.group(1))
        raise storage_error(path, OSError(code, os.strerror(code))) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def atomic_write_json(path: Path, obj: Any) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())

    atomic_write(path, write)


def config_hash(obj: Any, length: int = 12) -> str:
    import hashlib

    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def remove_orphan_temps(root: Path, older_than: float = 3600.0,
                        subdirs: tuple[str, ...] = (".",)) -> int:
    """Delete temp files (``.name.XXXX.tmp``) that killed writes left under
    ``root/<subdir>`` (``"."``: all of ``root``; a results directory's folders:
    :func:`pcgbench.results.layout.remove_interrupted_writes`), older than ``older_than`` seconds
    (younger ones may belong to a running write)."""
    import time

    removed = 0
    now = time.time()
    for sub in subdirs:
        for p in (root / sub).rglob(".*.tmp") if (root / sub).exists() else ():
            try:
                if now - p.stat().st_mtime > older_than:
                    p.unlink()
                    removed += 1
            except OSError:
                continue
    return removed
