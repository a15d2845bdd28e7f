"""``pcgbench study``: run a controlled analytic study (paper tables)."""

from __future__ import annotations

import argparse
import typing

from pcgbench.cli._common import add_common
from pcgbench.registry import STUDIES


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("study", help="run a controlled analytic study (paper tables)")
    add_common(p)
    p.add_argument("name")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    p.add_argument("--format", choices=["md", "latex", "csv"], default="md")


def run(args: argparse.Namespace) -> None:
    study = STUDIES.get(args.name)()
    cfg = study.smoke() if args.smoke else study.config_cls()
    tables = study.run(cfg, progress=not args.quiet)
    for name, df in tables.items():
        print(f"\n## {args.name}: {name} (this run)\n")
        print(df.to_markdown(floatfmt=".10g") if args.format == "md" else
              df.to_latex(float_format=_latex_number) if args.format == "latex"
              else df.to_csv())
        paper = getattr(study, "paper_tables", {}).get(name)
        if paper is not None:
            print(f"\n## {args.name}: {name} (paper, reported)\n")
            print(paper.to_markdown(floatfmt=".10g") if args.format == "md" else
                  paper.to_latex(float_format=_latex_number) if args.format == "latex"
                  else paper.to_csv())


def _latex_number(v: float) -> str:
    """Four significant digits (pandas' default %f printed 1.9e-16 as 0.000000)."""
    return f"{v:.4g}"
