"""``pcgbench report``: one self-contained static HTML report of the recorded runs."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

from pcgbench.cli._common import add_allow_unsealed, add_common, add_published, table_records
from pcgbench.errors import PcgError
from pcgbench.registry import TASKS


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("report", help="one self-contained static HTML report of the "
                       "recorded runs: tables, sample grids, spectra, histograms, loss "
                       "curves, quality vs cost")
    add_common(p)
    add_allow_unsealed(p)
    add_published(p)
    p.add_argument("--task", default=None)
    p.add_argument("--preset", default=None)
    p.add_argument("--out", default="pcgbench_report", help="output directory")
    p.add_argument("--no-sanity", action="store_true",
                   help="hide the sanity rows' columns (their verdicts still mark blind metrics)")
    p.add_argument("--variants", action="store_true",
                   help="also show variant columns (runs with --set/--chart/--data-file/"
                   "--tag), each its own column, as `leaderboard --variants`")


def run(args: argparse.Namespace) -> None:
    from pcgbench.leaderboard.report import build_report
    from pcgbench.results.files import ensure_writable, results_dir

    if args.task is not None:
        TASKS.get(args.task)
    if args.preset is not None:
        from pcgbench.presets import check_preset

        check_preset(args.preset)
    root = results_dir(args.results)
    unsealed = bool(getattr(args, "allow_unsealed", False))  # --allow-unsealed
    records = table_records(args, root, unsealed)
    if not records:
        raise PcgError(f"no run records under {root}; run `pcgbench run` first")
    out = ensure_writable(Path(args.out).expanduser())
    variants = bool(getattr(args, "variants", False))
    path, seconds = build_report(records, out, args.task, args.preset, variants=variants,
                                 sanity=not getattr(args, "no_sanity", False))
    print(f"report: {path} ({path.stat().st_size / 1024:.0f} KiB, {seconds:.1f} s)")
    if not variants:
        from pcgbench.leaderboard.tables import group_records

        shown = group_records(records)
        every = group_records(records, variants=True)
        left = sum(len(set(cols) - set(shown.get(key, {}))) for key, cols in every.items()
                   if (args.task in (None, key[0])) and (args.preset in (None, key[1])))
        if left:
            print(f"left out {left} variant column(s) (runs with --set/--chart/--data-file/"
                  "--tag): --variants shows them")
