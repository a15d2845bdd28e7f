"""Where every result lives under a results directory -- the one module that spells the
layout (records, checkpoints, samples, benchmark records, tune results, sweep logs).

::

    <results>/records/<task>/<preset>/<method>/seed<S>-<hash of the run key>.json
    <results>/records/<task>/<preset>/<method>/seed<S>-<hash>.samples.h5   (beside it)
    <results>/checkpoints/<task>/<preset>/<method>/seed<S>-<hash of the fit key>.pt
    <results>/benchmarks/<kind>/<task>/<preset>/<stamp>-<metric>-<device>-<pid>.json
    <results>/tune/<study>/...                                              (pcgbench.stages.tune)
    <results>/sweep_logs/                                                   (submitit logs)

A published record set (``published/``) has the same ``records/`` tree.  The identity a
hash is taken of is :mod:`pcgbench.results.identity`'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pcgbench.results.files import config_hash, remove_orphan_temps

RECORDS = "records"
CHECKPOINTS = "checkpoints"
BENCHMARKS = "benchmarks"
TUNE = "tune"
SWEEP_LOGS = "sweep_logs"
#: the suffix of the samples file saved beside a record
SAMPLES_SUFFIX = ".samples.h5"


def records_root(root: Path) -> Path:
    """The folder every run record lies under."""
    return root / RECORDS


def has_records(root: Path) -> bool:
    return records_root(root).is_dir()


def cell_folder(root: Path, task: str, preset: str, method: str) -> Path:
    """The records of one (task, preset, method): every seed and variant."""
    return records_root(root) / task / preset / method


def _cell(key: dict[str, Any]) -> Path:
    return Path(key["task"]) / key["preset"] / key["method"]


def record_path(root: Path, key: dict[str, Any], record_extra: dict[str, Any] | None = None
                ) -> Path:
    """A record's path: named by the whole run ``key`` and ``record_extra`` (sampling
    settings such as the batch size), so another batch size is a new record."""
    name = f"seed{key['seed']}-{config_hash({**key, **(record_extra or {})})}.json"
    return records_root(root) / _cell(key) / name


def checkpoint_path(root: Path, fit_key: dict[str, Any]) -> Path:
    """A checkpoint's path, named by the fit's identity
    (:func:`pcgbench.results.identity.fit_key`)."""
    return root / CHECKPOINTS / _cell(fit_key) / f"seed{fit_key['seed']}-{config_hash(fit_key)}.pt"


def partial_checkpoint_path(checkpoint: Path) -> Path:
    """Where a fit that will be saved at ``checkpoint`` keeps its resumable partial state."""
    return checkpoint.with_name(checkpoint.stem + ".partial.pt")


def samples_path(record: Path | str) -> Path:
    """The samples file beside a record."""
    return Path(record).with_suffix(SAMPLES_SUFFIX)


def identity_name(path: Path | str) -> str:
    """``<task>/<preset>/<method>/<file>`` of a record or checkpoint path: the same name
    in any results dir or published set."""
    return "/".join(Path(path).parts[-4:])


def in_records(root: Path, name: str) -> Path:
    """The record of identity name ``name`` (:func:`identity_name`) under ``root``."""
    return records_root(root) / name


def benchmark_path(root: Path, kind: str, task: str, preset: str, stamp: str, metric: str,
                   device_kind: str) -> Path:
    """One side-by-side benchmark record (one file per metric and process)."""
    return (root / BENCHMARKS / kind / task / preset
            / f"{stamp}-{metric}-{device_kind}-{os.getpid()}.json")


def benchmarks_root(root: Path) -> Path:
    return root / BENCHMARKS


def study_folder(root: Path, study: str) -> Path:
    """Where ``pcgbench tune <study>`` keeps its results, summaries and floors."""
    return root / TUNE / study


def sweep_logs(root: Path) -> Path:
    return root / SWEEP_LOGS


#: the folders killed writes may leave temp files in
WRITTEN_FOLDERS = (RECORDS, CHECKPOINTS)


def remove_interrupted_writes(root: Path, older_than: float = 3600.0) -> int:
    """Delete the temp files killed writes left in ``root``'s records and checkpoints
    (:func:`pcgbench.results.files.remove_orphan_temps`); returns how many."""
    return remove_orphan_temps(root, older_than, WRITTEN_FOLDERS)
