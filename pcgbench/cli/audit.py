"""``pcgbench audit``: the paper's own claims (quoted, with location), each judged on our
records by a stated statistical rule."""

from __future__ import annotations

import argparse
import typing

from pcgbench.cli._common import add_allow_unsealed, add_common, add_published, table_records
from pcgbench.presets import DEFAULT_PRESET, PRESETS


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("audit", help="the paper's own claims (quoted, with location), each "
                       "judged on our records by a stated statistical rule")
    add_common(p)
    add_allow_unsealed(p)
    add_published(p)
    p.add_argument("--preset", default=DEFAULT_PRESET, help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="device kind of the records judged (never pooled)")
    p.add_argument("--method", choices=["pmosfm", "pmosfm_tuned"], default="pmosfm",
                   help="the column judged: the paper's PMosFM (default) or ours")
    p.add_argument("--format", choices=["md", "csv"], default="md")


def run(args: argparse.Namespace) -> None:
    import pandas as pd

    from pcgbench.paper.audit import RULE, audit_rows, regime_notes
    from pcgbench.presets import check_preset
    from pcgbench.results.benchmarks import load_benchmark_records
    from pcgbench.results.files import results_dir

    check_preset(args.preset)
    root = results_dir(args.results)
    unsealed = bool(getattr(args, "allow_unsealed", False))  # --allow-unsealed
    records = table_records(args, root, unsealed)
    rows = audit_rows(records, args.preset, args.device,
                      load_benchmark_records(root), args.method)
    df = pd.DataFrame(rows)
    if args.format == "csv":
        print(df.to_csv(index=False), end="")
        return
    print(f"# audit of the PMosFM paper's claims: `{args.method}` at preset {args.preset!r}, "
          f"{args.device} records\n\nRule: {RULE}.  Paper values are the authors' (their "
          "data and GPU); ours are in the lines below.\n")
    for cid, group in df.groupby("id", sort=False):
        first = group.iloc[0]
        print(f"## {cid} ({first['location']})\n\n> {first['quote']}\n\n"
              f"Test: {first['test']}\n")
        print(group[["task", "ours", "verdict", "data"]].to_markdown(index=False) + "\n")
    counts = df["verdict"].str.split(":").str[0].value_counts()
    print(", ".join(f"{k}: {v}" for k, v in counts.items()) + "\n")
    for task in dict.fromkeys(df["task"]):
        line = df.loc[df["task"] == task, "provenance"].iloc[0]
        if line:
            print(f"data ({task}): {line}")
    # the regime: which compared columns had not learned the data (> 2x the floor)
    regime = regime_notes(records, list(dict.fromkeys(df["task"])), args.preset, args.device)
    if regime:
        print("\n" + "\n".join(regime))
    from pcgbench.leaderboard.tables import failed_notes

    failed = failed_notes(records, set(df["task"]), args.preset)
    if failed:  # the runs no verdict counted: a seed that failed is a fact, not a gap
        print("\n" + "\n".join(failed))
