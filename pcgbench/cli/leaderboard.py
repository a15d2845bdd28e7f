"""``pcgbench leaderboard``: paper-style tables from all recorded runs."""

from __future__ import annotations

import argparse
import typing

from pcgbench.cli._common import add_allow_unsealed, add_common, add_published, table_records
from pcgbench.errors import PcgError
from pcgbench.registry import METHODS, TASKS


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("leaderboard", help="paper-style tables from all recorded runs")
    add_common(p)
    add_allow_unsealed(p)
    add_published(p)
    kind = p.add_mutually_exclusive_group()  # one kind of table: a task's, a suite's, an ablation's
    kind.add_argument("--task", default=None)
    p.add_argument("--preset", default=None)
    p.add_argument("--format", choices=["md", "latex", "csv"], default="md")
    p.add_argument("--standalone", action="store_true",
                   help="with --format latex: a complete document that compiles with "
                   "pdflatex as printed (else table floats needing booktabs and graphicx)")
    p.add_argument("--no-reported", action="store_true",
                   help="omit the paper's reported values")
    kind.add_argument("--suite", default=None, choices=["constrained_pde"],
                   help="one table of a task suite in the paper's layout (rows dataset x "
                   "metric, columns methods)")
    kind.add_argument("--ablation", default=None, choices=["one_step"],
                   help="an ablation table in the paper's layout: one_step = benchmarks x "
                   "PMosFM one-step objectives (--set objective=...), energy distance")
    p.add_argument("--rows", nargs="+", default=None, metavar="ROW",
                   help="only these rows, in this order: metric names or nfe, time, train, "
                   "memory, params (e.g. --rows re wd js nfe time)")
    p.add_argument("--methods", nargs="+", default=None, metavar="METHOD",
                   help="only these method columns (the data reference column stays)")
    p.add_argument("--no-sanity", action="store_true",
                   help="hide the sanity rows' columns (noise, shuffle, blur, phase, gaussian, "
                   "train_copy: fakes scored like the data floor); their verdicts still mark "
                   "the metrics that do not see structure (docs/evaluation.md)")
    p.add_argument("--variants", action="store_true",
                   help="also show variant columns (runs with --set/--chart/--data-file/--tag"
                   "), each its own column, e.g. fm_ot[iterations=5]")


def run(args: argparse.Namespace) -> None:
    from pcgbench.leaderboard import failed_notes
    from pcgbench.leaderboard.text import latex_output
    from pcgbench.results.files import results_dir

    if args.standalone and args.format != "latex":
        raise PcgError("--standalone applies to --format latex only")
    root = results_dir(args.results)
    unsealed = bool(getattr(args, "allow_unsealed", False))  # --allow-unsealed
    if args.preset is not None:
        from pcgbench.presets import check_preset

        check_preset(args.preset)
    from pcgbench.leaderboard.sanity import REFERENCE_COLUMNS

    for m in args.methods or ():
        if m not in REFERENCE_COLUMNS:
            METHODS.get(m.split("[", 1)[0])  # unknown method -> did-you-mean error
    if args.ablation is not None:
        from pcgbench.leaderboard.ablation import render_ablation

        if args.rows or args.methods:
            raise PcgError("--ablation is its own table: --rows/--methods do not apply")
        text = render_ablation(table_records(args, root, unsealed), args.ablation,
                               args.format, args.preset, reported=not args.no_reported,
                               sanity=not getattr(args, "no_sanity", False))
        print(latex_output([text], args.standalone) if args.format == "latex" else text)
        return
    if args.suite is not None:
        from pcgbench.leaderboard.suite import render_suite

        if args.rows or args.methods:
            raise PcgError("--rows/--methods apply to per-task tables, not to --suite")
        records = table_records(args, root, unsealed)
        text = render_suite(records, args.suite, args.format, args.preset,
                            reported=not args.no_reported)
        print(latex_output([text], args.standalone) if args.format == "latex" else text)
        if args.format == "md":
            from pcgbench.leaderboard.suite import suite_layout
            from pcgbench.leaderboard.text import md_text

            for line in failed_notes(records, {t for t, _ in suite_layout(args.suite).datasets},
                                     args.preset):
                print(f"\n{md_text(line)}")
        return
    from pcgbench.leaderboard.model import task_table
    from pcgbench.leaderboard.render import table_csv, table_latex, table_markdown
    from pcgbench.leaderboard.tables import group_records

    records = table_records(args, root, unsealed)
    groups = group_records(records, variants=args.variants)
    if args.task is not None:
        TASKS.get(args.task)  # unknown task -> did-you-mean error
    keys = sorted(k for k in groups if (args.task in (None, k[0]))
                  and (args.preset in (None, k[1])))
    if not keys:
        raise PcgError(f"no run records under {root}"
                       + (f" for task {args.task!r}" if args.task else "")
                       + "; run `pcgbench run --task T --method M` first")
    tables = [task_table(records, task, preset, rows=args.rows, methods=args.methods,
                         reported=not args.no_reported, groups=groups,
                         sanity=not getattr(args, "no_sanity", False))
              for task, preset in keys]
    tables = [t for t in tables if t is not None]
    if args.format == "csv":  # one CSV for all tasks: task and preset columns
        print(table_csv(tables), end="")
    elif args.format == "latex":
        print(latex_output([table_latex(t) for t in tables], args.standalone))
    else:
        for table in tables:
            print(table_markdown(table))
