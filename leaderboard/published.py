"""The published record set: sealed run records measured by the maintainers and shipped in
the repository (``published/records/<task>/<preset>/<method>/``, the results layout), read
by ``leaderboard``, ``report``, ``audit`` and ``sanity`` beside the user's own records.

A published record is a run record like any other (verified the same way: schema, digest,
metric ranges) and enters a table only as what it is:

* where the user has a record of the same identity (the same file name: the run key's
  hash -- task parameters, data source, method config, seed, preset, device kind, code
  versions -- and sampling settings), the user's own record is used and the published one
  is not read;
* where the registered code has moved on since it was measured (a task, data or method
  ``version`` above the record's, or another default config), it is *stale*: named under
  the table, never scored (:func:`pcgbench.leaderboard.tables.stale_reason`);
* every table says which of its columns came from the published set (commit, machine,
  date) and which were measured here (:func:`provenance_notes`).

Data identity across machines: a generated dataset is part of a cell's identity through
the task's parameters and ``data_version`` (the solver's code), not through the bytes of a
file; a dataset loaded with ``--data-file`` is identified by its SHA-256.  Regenerated
data agree with the published cells' to the solver's floating-point reproducibility
(``pcgbench reproduce`` measures the agreement cell by cell; docs/leaderboard.md).

``$PCGBENCH_PUBLISHED`` points at another published set (a directory holding
``records/``); ``none`` (or ``--no-published``) reads none.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path

from pcgbench.results.record import RunRecord, as_records

#: the environment variable that moves (or, with ``none``, disables) the published set
ENV = "PCGBENCH_PUBLISHED"


def published_root() -> Path | None:
    """The directory holding the published ``records/`` (None: disabled)."""
    env = os.environ.get(ENV)
    if env is not None:
        return None if env.strip().lower() in ("", "none", "off") else Path(env).expanduser()
    from importlib.resources import files

    return Path(str(files("pcgbench.published")))


def is_published(record: RunRecord) -> bool:
    """Whether ``record`` was read from the published set."""
    root = published_root()
    return bool(root is not None and record.path
                and Path(record.path).resolve().is_relative_to(root.resolve()))


def default_cells(records: Iterable[RunRecord], preset: str) -> list[RunRecord]:
    """The scored, current, default-column (no variant) records at ``preset``: the cells a
    table, its coverage and its cost count."""
    from pcgbench.leaderboard.tables import is_ok

    return [r for r in records if r.get("preset") == preset and not r.variant and is_ok(r)]


def relative_name(record: RunRecord) -> str | None:
    """``<task>/<preset>/<method>/<file>`` of a record read from a results layout: its
    identity (the file name is the hash of its run key and sampling settings)."""
    from pcgbench.results.layout import identity_name

    if not record.path or len(Path(record.path).parts) < 4:
        return None
    return identity_name(record.path)


def load_published(allow_unsealed: bool = False) -> list[RunRecord]:
    """Every usable record of the published set ([] where there is none or it is off);
    one that cannot be used is named and skipped, as a local one."""
    from pcgbench.results.layout import has_records
    from pcgbench.results.store import load_records

    root = published_root()
    if root is None or not has_records(root):
        return []
    return load_records(root, allow_unsealed)


def combine(local: Iterable[RunRecord], published: Iterable[RunRecord]) -> list[RunRecord]:
    """The user's records and the published ones, without a published record whose
    identity the user has measured (the user's is shown)."""
    local = list(local)
    mine = {relative_name(r) for r in local}
    return local + [r for r in published if relative_name(r) not in mine]


#: the file of cells measured but withheld from the published set as doubtful
WITHHELD_FILE = "withheld.json"


def withheld(task: str | None = None, preset: str | None = None) -> list[dict[str, str]]:
    """The withheld cells (``published/withheld.json``: a list of ``{task, preset, method,
    reason, doc}``): measured by the maintainers, judged doubtful (e.g. samples that look
    like noise where a simpler method's do not) and so never published or scored; the
    tables name them instead.  Filtered to ``task`` / ``preset`` where given."""
    import json

    root = published_root()
    path = None if root is None else root / WITHHELD_FILE
    if path is None or not path.is_file():
        return []
    out = []
    for item in json.loads(path.read_text()):
        if not all(isinstance(item.get(k), str) for k in ("task", "preset", "method",
                                                            "reason")):
            continue
        if (task is None or item["task"] == task) and (preset is None
                                                      or item["preset"] == preset):
            out.append(item)
    return out


def withheld_notes(task: str, preset: str, shown: Iterable[str] = ()) -> list[str]:
    """One line per withheld cell of (``task``, ``preset``): what it is and why; where the
    table still shows that column it is the user's own measurement."""
    shown = set(shown)
    lines = []
    for item in withheld(task, preset):
        doc = f" ({item['doc']})" if item.get("doc") else ""
        mine = ("; the column shown is measured here" if item["method"] in shown else "")
        lines.append(f"withheld from the published set as doubtful: {item['method']} -- "
                     f"{item['reason']}{doc}{mine}")
    return lines


def provenance(records: Iterable[RunRecord]) -> str:
    """``commit abc1234, cpu (x86_64, 1 threads), 2026-12-04`` of a set of records: their
    commits, machines and finishing dates (ranges where they differ)."""
    recs = as_records(records)
    commits = sorted({str(r["git"])[:7] for r in recs if r.get("git")})
    machines = sorted({str(r["device"]) for r in recs if r.get("device")})
    days = sorted({str(r.get("finished") or r.get("started"))[:10] for r in recs
                   if r.get("finished") or r.get("started")})
    parts = []
    if commits:
        parts.append(f"commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}")
    parts += machines
    if days:
        parts.append(days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}")
    return "; ".join(parts) or "no provenance recorded"


def provenance_notes(by_method: Mapping[str, list[RunRecord]]) -> list[str]:
    """One line saying which columns of a table are published cells (and whence) and
    which were measured here; nothing when no column uses a published record."""
    pub: dict[str, list[RunRecord]] = {}
    here: list[str] = []
    for column, recs in by_method.items():
        recs = as_records(recs)
        mine = [r for r in recs if is_published(r)]
        if mine:
            pub[column] = mine
        if len(mine) < len(recs):
            here.append(column)
    if not pub:
        return []
    from pcgbench.leaderboard.sanity import is_reference

    allp = [r for rs in pub.values() for r in rs]
    cells = [f"{c} (seeds {_seeds(rs)})" for c, rs in pub.items() if not is_reference(c)]
    refs = [c for c in pub if is_reference(c)]
    if refs:
        cells.append("the data floor and sanity rows" if len(refs) > 1 else refs[0])
    line = (f"published cells (the repository's published/ set: {provenance(allp)}): "
            + ", ".join(cells))
    if here:
        line += "; measured here: " + ", ".join(here)
    return [line]


def _seeds(records: list[RunRecord]) -> str:
    seeds = sorted({int(r.get("seed", 0)) for r in records})
    return ", ".join(map(str, seeds))


def cell_spread(records: Iterable[RunRecord], metric: str) -> float | None:
    """The standard deviation over seeds of ``metric`` in a cell's records (None with
    fewer than two finite values)."""
    vals = [float(v) for r in records
            if isinstance(v := RunRecord.from_json(r).metrics.get(metric), int | float)]
    vals = [v for v in vals if v == v and abs(v) != float("inf")]
    return statistics.stdev(vals) if len(vals) > 1 else None

