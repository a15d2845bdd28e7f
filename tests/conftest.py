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
# Under pytest-xdist every worker is one of several processes on the cores: the runs a test
# starts (in-process commands and subprocesses alike) take one thread each, as the
# command-line thread policy does when OMP_NUM_THREADS is set.  Without it each worker's
# runs spread over every core and spin against the others (measured: the suite on two
# workers took longer than on one).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true",
                     help="the full set: the slow tests too (marker 'slow'; skipped by default)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--slow") and config.option.markexpr == "not slow":
        config.option.markexpr = ""  # pyproject's addopts deselect them; --slow keeps them


@pytest.fixture(scope="session", autouse=True)
def _isolated_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pcgbench-home")
    old = {k: os.environ.get(k) for k in ("PCGBENCH_RESULTS", "PCGBENCH_DATA",
                                          "PCGBENCH_PUBLISHED")}
    os.environ["PCGBENCH_RESULTS"] = str(root / "results")
    os.environ["PCGBENCH_DATA"] = str(root / "data")
    # the repository's published records stay out of every table a test builds
    # (tests/test_published.py turns them on where it means to)
    os.environ["PCGBENCH_PUBLISHED"] = "none"
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
    """Every run record under ``root/records`` but the sanity rows' (the fakes every run's
    data stage scores beside the floor; tests/test_sanity.py reads those)."""
    from pcgbench.sanity import SANITY_ROWS

    records = [json.loads(p.read_text()) for p in sorted((root / "records").rglob("*.json"))]
    return [r for r in records if r.get("method") not in SANITY_ROWS]


def cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    """``pcgbench ARGV`` in this process: (exit code, stdout, stderr), argparse's exits
    included."""
    from pcgbench.cli import main

    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse
        rc = exc.code
    got = capsys.readouterr()
    return rc, got.out, got.err


def assert_clean_error(rc: int, err: str, needle: str) -> None:
    """A bad input's error: exit 2, one line naming ``needle``, no traceback, no colour."""
    line = err.strip()
    assert rc == 2, (rc, line)
    assert "Traceback" not in line and len(line.splitlines()) == 1, line
    assert needle in line, (needle, line)
    assert "\x1b" not in line
