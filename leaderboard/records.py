"""Reading run records back from the results directory."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any


def load_records(root: Path) -> list[dict[str, Any]]:
    """All run records under ``root/records`` (unreadable files are skipped with a warning)."""
    out = []
    for path in sorted((root / "records").rglob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            warnings.warn(f"skipping unreadable record {path}: {exc}", stacklevel=2)
            continue
        rec["_path"] = str(path)
        out.append(rec)
    return out
