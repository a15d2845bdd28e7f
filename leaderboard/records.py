"""Reading run records back from the results directory."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any


def load_records(root: Path) -> list[dict[str, Any]]:
    """All run records under ``root/records``; unreadable (binary, truncated) or ill-typed
    files are skipped and named in a warning, never a crash."""
    out = []
    for path in sorted((root / "records").rglob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            warnings.warn(f"skipping unreadable record {path}: {type(exc).__name__}",
                          stacklevel=2)
            continue
        if (not isinstance(rec, dict) or not isinstance(rec.get("metrics", {}), dict)
                or not isinstance(rec.get("task", ""), str)
                or not isinstance(rec.get("method", ""), str)):
            warnings.warn(f"skipping ill-typed record {path}", stacklevel=2)
            continue
        rec["_path"] = str(path)
        out.append(rec)
    return out
