"""``pcgbench sanity``: the sanity rows (noise, shuffled, blurred, phase-randomized and
Gaussian fakes, training copies) scored like the data floor on each task, and whether each
metric tells them from real data there (docs/evaluation.md "Sanity rows")."""

from __future__ import annotations

import argparse
import typing

from pcgbench.cli._common import add_common, names
from pcgbench.presets import DEFAULT_PRESET, PRESETS
from pcgbench.registry import TASKS


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("sanity", help="sanity rows (fakes) against the data floor: which "
                       "metric sees structure on which task")
    add_common(p)
    p.add_argument("--preset", default=DEFAULT_PRESET, help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--task", nargs="+", default=None, metavar="T",
                   help=names(TASKS, "task") + "; default: every task but registered "
                   "parameter variants")
    p.add_argument("--format", choices=["md", "csv"], default="md",
                   help="md: one table per task and a summary; csv: one row per "
                   "(task, metric) verdict")


def run(args: argparse.Namespace) -> None:
    from pcgbench.errors import PcgError
    from pcgbench.leaderboard import load_records
    from pcgbench.leaderboard.render import grid_markdown
    from pcgbench.leaderboard.sanity_tables import sanity_grid, sanity_summary
    from pcgbench.leaderboard.text import to_csv
    from pcgbench.presets import check_preset
    from pcgbench.results.files import results_dir
    from pcgbench.stages.plan import RunOptions, build_task
    from pcgbench.stages.record import data_reference_record, sanity_records

    check_preset(args.preset)
    tasks = args.task or [n for n in TASKS.names() if not TASKS.get(n).variant_of]
    for t in tasks:
        TASKS.get(t)  # unknown name: one line, did-you-mean
    for t in tasks:
        opts = RunOptions(task=t, method="data", preset=args.preset, results_dir=args.results,
                          data_dir=args.data_dir, progress=not args.quiet)
        task = build_task(opts)
        task.check_splits()
        data_reference_record(task, opts)
        sanity_records(task, opts)
    records = load_records(results_dir(args.results))
    if args.format == "csv":
        print(to_csv(sanity_summary(records, tasks, args.preset)), end="")
        return
    out = []
    for t in tasks:
        grid = sanity_grid(records, t, args.preset)
        if grid is None:
            raise PcgError(f"no data floor or sanity records for {t!r} at {args.preset!r}")
        out.append(grid_markdown(grid))
    summary = sanity_summary(records, tasks, args.preset)
    lines = ["## Summary: metrics that see structure (every sanity row clearly worse than "
             "the floor)", ""]
    for t in tasks:
        rows = summary[summary["task"] == t]
        seeing = [m + (" (headline)" if h else "") for m, s, h in
                  zip(rows["metric"], rows["sees"], rows["headline"], strict=True) if s]
        lines.append(f"- {t}: {', '.join(seeing) if seeing else 'none'}")
    print("\n\n".join(out) + "\n\n" + "\n".join(lines))
