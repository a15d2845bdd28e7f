"""``pcgbench show-config``: the resolved config of a (task, method, preset) -- preset
defaults, the sampling protocol, then ``--set``."""

from __future__ import annotations

import argparse
import typing

from pcgbench.cli._common import add_common, names
from pcgbench.presets import DEFAULT_PRESET, PRESETS
from pcgbench.registry import METHODS, TASKS


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("show-config", help="the resolved config of a (task, method, preset): "
                       "preset defaults, the sampling protocol, then --set")
    add_common(p)
    p.add_argument("--task", required=True, help=names(TASKS, "task"))
    p.add_argument("--method", required=True, help=names(METHODS, "method"))
    p.add_argument("--preset", default=DEFAULT_PRESET, help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--chart", default=None)
    p.add_argument("--device", default="cpu")


def run(args: argparse.Namespace) -> int:
    """Prints the resolved config; the same validation as ``run`` (a config ``run``
    refuses is refused here, one line, exit 2), and exit 1 with the reason on stderr for a
    config ``run`` would record as invalid (as ``run`` exits 1 for it)."""
    import json
    import sys

    import torch

    from pcgbench.config import parse_assignments, to_dict
    from pcgbench.presets import check_preset
    from pcgbench.results.files import config_hash
    from pcgbench.stages.plan import RunOptions, resolve
    from pcgbench.stages.scoring import config_problem

    check_preset(args.preset)
    opts = RunOptions(task=args.task, method=args.method, preset=args.preset,
                      overrides=parse_assignments(args.set), chart=args.chart,
                      progress=False, device="cpu")
    # built on the CPU; the identity names the asked --device
    plan = resolve(opts, identity_device=torch.device(args.device))
    method, variant = plan.method, plan.variant
    print(f"# {args.task}/{args.method} preset {args.preset}: "
          f"{'default column' if variant is None else f'variant [{variant}]'}; "
          f"config hash {config_hash(plan.key)}")
    print(json.dumps(to_dict(method.config), indent=2, sort_keys=True))
    problem = config_problem(method.config)
    if problem is not None:
        print(f"pcgbench: `run` records this config as invalid, not scored: {problem}",
              file=sys.stderr)
        return 1
    return 0
