"""``pcgbench protocol``: the sampling protocol per (task, method) -- the paper's NFE next
to ours, and the settings that give it."""

from __future__ import annotations

import argparse
import typing

from pcgbench.cli._common import add_common
from pcgbench.errors import PcgError
from pcgbench.presets import PRESETS
from pcgbench.registry import METHODS, TASKS


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("protocol", help="the sampling protocol per (task, method): the "
                       "paper's NFE next to ours, and the settings that give it")
    add_common(p)
    p.add_argument("--task", nargs="+", default=None, help="only these tasks")
    p.add_argument("--methods", nargs="+", default=None, metavar="METHOD",
                   help="only these methods")
    p.add_argument("--preset", default="paper", help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--format", choices=["md", "csv"], default="md")


def run(args: argparse.Namespace) -> None:
    import pandas as pd

    from pcgbench.config import to_dict
    from pcgbench.paper.protocol import protocol_for, protocol_overrides
    from pcgbench.presets import check_preset

    check_preset(args.preset)
    tasks = args.task or TASKS.names()
    methods = args.methods or METHODS.names()
    for name in (*tasks, *methods):  # unknown names -> one-line did-you-mean errors
        (TASKS if name in tasks else METHODS).get(name)
    rows = []
    for t in tasks:
        task = TASKS.get(t)(preset="smoke", progress=False)
        for m in methods:
            cls = METHODS.get(m)
            if cls.unsupported_reason(task):
                continue
            entry = protocol_for(t, cls)
            applied = protocol_overrides(t, cls, args.preset)
            config = cls.Config.for_preset(args.preset).replace(**applied)
            fields = to_dict(config)
            rows.append({
                "task": t, "method": m,
                "paper NFE": "-" if entry.nfe is None else entry.nfe,
                "source": entry.source,
                "settings": ", ".join(f"{k}={fields[k]}" for k in entry.settings) or "-",
                "our NFE": cls.nominal_nfe(config),
            })
    if not rows:
        raise PcgError("no supported (task, method) pair in the selection")
    df = pd.DataFrame(rows)
    if args.format == "csv":
        print(df.to_csv(index=False), end="")
        return
    print(f"sampling protocol at preset {args.preset!r} (applied at: paper, cpu; "
          "smoke keeps method defaults)\n")
    print(df.to_markdown(index=False))
