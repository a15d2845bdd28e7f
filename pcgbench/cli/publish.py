"""``pcgbench publish``: copy this results directory's scored default-column records of a
preset into the published set the repository ships (``published/records``; maintainers)."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

from pcgbench.cli._common import add_common, names
from pcgbench.presets import DEFAULT_PRESET, PRESETS
from pcgbench.registry import METHODS, TASKS


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("publish", help="copy scored default-column records into the "
                       "published set shipped in the repository (maintainers)")
    add_common(p)
    p.add_argument("--preset", default=DEFAULT_PRESET, help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--task", nargs="+", default=None, metavar="T", help=names(TASKS, "task"))
    p.add_argument("--method", nargs="+", default=None, metavar="M",
                   help=names(METHODS, "method") + "; the data floor and sanity rows of "
                   "each task go with them")
    p.add_argument("--to", default=None, metavar="DIR",
                   help="the published set (default: the package's published/ directory, "
                   "the repository's in a checkout)")
    p.add_argument("--samples", type=int, default=8, metavar="N",
                   help="ship the first N saved samples (and test fields) of each cell's "
                   "lowest seed beside its record, for the report's figures (0: none)")
    p.add_argument("--dry-run", action="store_true", help="list what would be copied")


def run(args: argparse.Namespace) -> None:

    from pcgbench.errors import PcgError
    from pcgbench.leaderboard.published import published_root, relative_name
    from pcgbench.leaderboard.sanity import is_reference
    from pcgbench.leaderboard.tables import is_ok
    from pcgbench.presets import check_preset
    from pcgbench.results.files import atomic_write, results_dir
    from pcgbench.results.layout import in_records, records_root, samples_path
    from pcgbench.results.store import load_records

    check_preset(args.preset)
    for t in args.task or ():
        TASKS.get(t)
    for m in args.method or ():
        METHODS.get(m)
    dest = Path(args.to).expanduser() if args.to else published_root()
    if dest is None:
        raise PcgError("the published set is off ($PCGBENCH_PUBLISHED=none): give --to DIR")
    chosen = []
    for rec in load_records(results_dir(args.results)):
        if rec.get("preset") != args.preset or rec.variant or not is_ok(rec):
            continue  # only scored, current, default-column cells are published
        if args.task and rec.task not in args.task:
            continue
        if args.method and rec.method not in args.method and not is_reference(rec.method):
            continue
        chosen.append(rec)
    if not chosen:
        raise PcgError(f"no scored default-column records at preset {args.preset!r} to "
                       "publish under " + str(results_dir(args.results)))
    replaced = shipped = 0
    lowest: dict[tuple, int] = {}
    for rec in chosen:
        cell = (rec.task, rec.get("preset"), rec.method)
        lowest[cell] = min(lowest.get(cell, 1 << 30), int(rec.get("seed", 0)))
    for rec in chosen:
        rel = relative_name(rec)
        target = in_records(dest, rel)
        # another identity of the same cell and seed (older code, another default) goes
        stale = [p for p in target.parent.glob(f"seed{rec.get('seed', 0)}-*.json")
                 if p.name != target.name]
        if args.dry_run:
            print(f"would publish {rel}" + (f" (replacing {len(stale)})" if stale else ""))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        data = Path(str(rec.path)).read_bytes()
        atomic_write(target, lambda p, data=data: p.write_bytes(data))
        for p in stale:
            p.unlink()
            samples_path(p).unlink(missing_ok=True)
        replaced += len(stale)
        if (args.samples > 0 and rec.samples_file and Path(rec.samples_file).is_file()
                and int(rec.get("seed", 0)) == lowest[(rec.task, rec.get("preset"),
                                                       rec.method)]):
            _ship_samples(Path(rec.samples_file), samples_path(target),
                          args.samples)
            shipped += 1
    if not args.dry_run:
        print(f"published {len(chosen)} record(s) to {records_root(dest)}"
              + (f" ({replaced} older one(s) of the same cells removed)" if replaced else "")
              + (f"; the first {args.samples} samples of {shipped} cell(s) beside them"
                 if shipped else ""))


def _ship_samples(src: Path, out: Path, n: int) -> None:
    """The first ``n`` rows of a samples file, in the same layout, at ``out``."""
    import h5py
    import torch

    from pcgbench.stages.measure import write_samples_file

    with h5py.File(src, "r") as f:
        rows = {k: torch.from_numpy(f[k][:n]) for k in ("samples", "reference", "cond")
                if k in f}
    write_samples_file(out, rows["samples"], rows["reference"], rows.get("cond"))
