"""Where things live on disk, and atomic writes (temp file + rename)."""

from __future__ import annotations

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
    if os.environ.get(env):
        return _expand(os.environ[env], f"${env}")
    base = os.environ.get("XDG_CACHE_HOME") or str(_expand("~", "home") / ".cache")
    return Path(base) / "pcgbench" / leaf


def data_dir(override: Path | str | None = None) -> Path:
    """The dataset cache: ``--data-dir``, else ``$PCGBENCH_DATA``, else ~/.cache/pcgbench/data."""
    return _expand(override, "--data-dir") if override else _user_dir("PCGBENCH_DATA", "data")


def results_dir(override: Path | str | None = None) -> Path:
    """Run records and checkpoints: ``--results``, else ``$PCGBENCH_RESULTS``, else
    ~/.cache/pcgbench/results."""
    return (_expand(override, "--results") if override
            else _user_dir("PCGBENCH_RESULTS", "results"))


def ensure_writable(path: Path) -> Path:
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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; make it a normal file
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


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


def remove_orphan_temps(root: Path, older_than: float = 3600.0) -> int:
    """Delete temp files (``.name.XXXX.tmp``) that killed writes left under ``root``,
    older than ``older_than`` seconds (younger ones may belong to a running write)."""
    import time

    removed = 0
    now = time.time()
    for sub in ("records", "checkpoints"):
        for p in (root / sub).rglob(".*.tmp") if (root / sub).exists() else ():
            try:
                if now - p.stat().st_mtime > older_than:
                    p.unlink()
                    removed += 1
            except OSError:
                continue
    return removed
