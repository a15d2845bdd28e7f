"""Behaviour-identity check for refactors: records and tables before/after, diffed.

A refactor that claims "no behaviour change" runs the smoke sweep with the old code and with
the new, then compares

* every record, with the fields that legitimately differ between two runs removed (wall
  times, machine load, memory, timestamps, paths, the git commit, the record digest);
  everything else -- metrics, configs, NFE, losses, parameters -- must be equal;
* every printed table (``leaderboard`` per task in md / csv / latex, the suite and ablation
  tables, ``audit``, ``protocol``, ``list``) rendered by *each* code from the *same* records,
  which must be byte-identical.

Usage::

    OMP_NUM_THREADS=1 python -m pcgbench sweep --preset smoke --seeds 0 --executor debug \\
        --results OLD/res --data-dir DATA --device cpu          # in a checkout of the old code
    (the same with NEW/res in the new checkout)
    python benchmarks/smoke_identity.py snapshot --code OLDCHECKOUT --records OLD/res \\
        --tables-from OLD/res --out OLD/snap
    python benchmarks/smoke_identity.py snapshot --code NEWCHECKOUT --records NEW/res \\
        --tables-from OLD/res --out NEW/snap
    python benchmarks/smoke_identity.py diff OLD/snap NEW/snap   # exit 1 on any difference
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: record fields that differ between two runs of identical code (dotted paths; a prefix
#: removes a whole sub-tree)
VOLATILE = (
    "checkpoint", "digest", "started", "finished", "git", "wall_seconds", "fit_wall_seconds",
    "inference", "load", "memory", "device", "samples_file", "data_file_path",
    "training.fit_seconds", "training.seconds_per_update", "versions",
    "pretrained.checkpoint", "pretrained.record", "backbone_training", "created",
    "training.calibration_seconds", "method_info.calibration_seconds",
    "training.mean_update_seconds_per_depth",
)

#: table commands, each run once per task where it names ``{task}``
TABLE_COMMANDS = (
    ("leaderboard_{task}.md", ["leaderboard", "--task", "{task}", "--preset", "smoke"]),
    ("leaderboard_{task}.csv", ["leaderboard", "--task", "{task}", "--preset", "smoke",
                                "--format", "csv"]),
    ("leaderboard_{task}.tex", ["leaderboard", "--task", "{task}", "--preset", "smoke",
                                "--format", "latex"]),
    ("leaderboard_{task}_variants.md", ["leaderboard", "--task", "{task}", "--preset",
                                        "smoke", "--variants"]),
)
GLOBAL_COMMANDS = (
    ("suite.md", ["leaderboard", "--suite", "constrained_pde", "--preset", "smoke"]),
    ("ablation.md", ["leaderboard", "--ablation", "one_step", "--preset", "smoke"]),
    ("audit.txt", ["audit", "--preset", "smoke"]),
    ("protocol.txt", ["protocol"]),
    ("list.txt", ["list"]),
)


def _drop(record: dict[str, Any], dotted: str) -> None:
    head, _, rest = dotted.partition(".")
    if head not in record:
        return
    if not rest:
        del record[head]
    elif isinstance(record[head], dict):
        _drop(record[head], rest)


def normalized(record: dict[str, Any]) -> dict[str, Any]:
    """The record without its run-to-run volatile fields (see ``VOLATILE``)."""
    out = json.loads(json.dumps(record))
    for path in VOLATILE:
        _drop(out, path)
    return out


def _records(results: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((results / "records").rglob("*.json")):
        record = json.loads(path.read_text())
        key = "/".join(
            str(record.get(k)) for k in ("task", "preset", "method", "variant", "seed")
        )
        out[key] = normalized(record)
    return out


def _tasks(code: Path) -> list[str]:
    text = _cli(code, ["list"], results=None)
    names: list[str] = []
    in_tasks = False
    for line in text.splitlines():
        if in_tasks and not line.startswith(" "):
            break
        if in_tasks:
            names.append(line.split()[0])
        in_tasks = in_tasks or line.startswith("tasks:")
    return names


def _cli(code: Path, argv: list[str], results: Path | None) -> str:
    env = dict(os.environ, PYTHONPATH=str(code), OMP_NUM_THREADS="1", COLUMNS="200")
    cmd = [sys.executable, "-m", "pcgbench", *argv]
    if results is not None:
        cmd += ["--results", str(results)]
    done = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True)
    return f"rc={done.returncode}\n{done.stdout}{done.stderr}"


def snapshot(code: Path, records: Path, tables_from: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "records.json").write_text(json.dumps(_records(records), indent=1, sort_keys=True))
    tables = out / "tables"
    tables.mkdir(exist_ok=True)
    for name, argv in GLOBAL_COMMANDS:
        (tables / name).write_text(_cli(code, argv, tables_from))
    for task in _tasks(code):
        for name, argv in TABLE_COMMANDS:
            filled = [a.replace("{task}", task) for a in argv]
            (tables / name.replace("{task}", task)).write_text(_cli(code, filled, tables_from))
    print(f"snapshot of {code} -> {out}")


def diff(a: Path, b: Path, subset: bool = False) -> int:
    """Every record and table of ``a`` against ``b``; ``subset``: ``b`` is a sweep of part
    of ``a``'s matrix (a cheaper check), so only the records ``b`` holds are compared and
    the count of those left out is printed."""
    bad = 0
    ra, rb = ({k: normalized(r) for k, r in json.loads((p / "records.json").read_text()).items()}
              for p in (a, b))
    left_out = 0
    if subset:
        left_out = len(set(ra) - set(rb))
        ra = {k: v for k, v in ra.items() if k in rb}
    for key in sorted(set(ra) | set(rb)):
        if key not in ra or key not in rb:
            print(f"record {key}: only in {'after' if key not in ra else 'before'}")
            bad += 1
        elif ra[key] != rb[key]:
            lines = difflib.unified_diff(
                json.dumps(ra[key], indent=1, sort_keys=True).splitlines(),
                json.dumps(rb[key], indent=1, sort_keys=True).splitlines(), lineterm="", n=0)
            print(f"record {key} differs:\n" + "\n".join(list(lines)[2:12]))
            bad += 1
    names = sorted({p.name for snap in (a, b) for p in (snap / "tables").iterdir()})
    for name in names:
        pa, pb = a / "tables" / name, b / "tables" / name
        if not (pa.exists() and pb.exists()):
            print(f"table {name}: only in one snapshot")
            bad += 1
        elif pa.read_text() != pb.read_text():
            lines = difflib.unified_diff(pa.read_text().splitlines(),
                                         pb.read_text().splitlines(), lineterm="", n=0)
            print(f"table {name} differs:\n" + "\n".join(list(lines)[2:12]))
            bad += 1
    print(f"{len(ra)} records, {len(names)} tables compared: {bad} difference(s)"
          + (f" ({left_out} records of the before snapshot not in the after sweep: "
             "--subset)" if subset else ""))
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot", help="normalized records + rendered tables")
    snap.add_argument("--code", type=Path, required=True, help="checkout whose CLI renders")
    snap.add_argument("--records", type=Path, required=True, help="results dir to normalize")
    snap.add_argument("--tables-from", type=Path, required=True,
                      help="results dir the tables are rendered from (the same for both)")
    snap.add_argument("--out", type=Path, required=True)
    dif = sub.add_parser("diff", help="compare two snapshots (exit 1 on a difference)")
    dif.add_argument("before", type=Path)
    dif.add_argument("after", type=Path)
    dif.add_argument("--subset", action="store_true",
                     help="the after sweep covers part of the matrix (e.g. --tasks burgers "
                          "darcy): compare only its records")
    args = parser.parse_args()
    if args.command == "snapshot":
        snapshot(args.code.resolve(), args.records.resolve(), args.tables_from.resolve(),
                 args.out.resolve())
        return 0
    return diff(args.before, args.after, args.subset)


if __name__ == "__main__":
    sys.exit(main())
