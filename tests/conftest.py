"""Keep every test's data cache and results out of the user's home directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

# Test problems are tiny: one thread is faster and immune to oversubscription when other
# processes share the cores (measured: 2 threads under load ran ~100x slower).
torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _isolated_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pcgbench-home")
    old = {k: os.environ.get(k) for k in ("PCGBENCH_RESULTS", "PCGBENCH_DATA")}
    os.environ["PCGBENCH_RESULTS"] = str(root / "results")
    os.environ["PCGBENCH_DATA"] = str(root / "data")
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture()
def dirs(tmp_path, monkeypatch):
    """A fresh results and data directory for one test (through the environment)."""
    monkeypatch.setenv("PCGBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("PCGBENCH_DATA", str(tmp_path / "data"))
    return tmp_path


def read_records(root: Path) -> list[dict]:
    """Every run record under ``root/records``."""
    return [json.loads(p.read_text()) for p in sorted((root / "records").rglob("*.json"))]
