"""``pcgbench list``: tasks, methods, metrics, presets, studies, objectives."""

from __future__ import annotations

import argparse
import typing

from pcgbench.cli._common import add_common, one_line
from pcgbench.errors import PcgError
from pcgbench.presets import PRESETS
from pcgbench.registry import METHODS, METRICS, STUDIES, TASKS
from pcgbench.runtime.log import printable


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("list", help="list tasks, methods, metrics, presets, studies, "
                       "objectives")
    add_common(p)
    p.add_argument("what", nargs="?", default="all",
                   choices=["all", "tasks", "methods", "metrics", "presets", "studies",
                            "objectives"])


def run(args: argparse.Namespace) -> None:
    from pcgbench.methods.onestep import OBJECTIVES

    def safe(describe, name: str) -> str:
        # one broken third-party entry (a plugin that fails to import) must not break the
        # listing of everything else
        try:
            return describe(name)
        except PcgError as exc:
            return f"(cannot be loaded: {exc})"

    def task_line(name: str) -> str:
        cls = TASKS.get(name)
        desc = cls.description or one_line(cls.__doc__)
        charts = list(cls(preset="smoke", progress=False).charts())
        return desc + (f" [charts: {', '.join(charts)}]" if charts else "")

    def method_line(name: str) -> str:
        cls = METHODS.get(name)
        return cls.description or one_line(cls.__doc__)

    def metric_line(name: str) -> str:
        cls = METRICS.get(name)
        return cls.description or one_line(cls.__doc__)

    sections = {
        "tasks": [(n, safe(task_line, n)) for n in TASKS.names()],
        "methods": [(n, safe(method_line, n)) for n in METHODS.names()],
        "metrics": [(n, safe(metric_line, n)) for n in METRICS.names()],
        "presets": list(PRESETS.items()),
        "studies": [(n, safe(lambda k: one_line(STUDIES.get(k).__doc__), n))
                    for n in STUDIES.names()],
        # PMosFM's one-step objectives (--method pmosfm --set objective=NAME)
        "objectives": [(n, safe(lambda k: one_line(OBJECTIVES.get(k).__doc__), n))
                       for n in OBJECTIVES.names()],
    }
    shown = {k: v for k, v in sections.items() if args.what in ("all", k)}
    width = max((len(printable(n)) for items in shown.values() for n, _ in items), default=0)
    for section, items in shown.items():
        if args.what == "all":
            print(f"{section}:")
        for name, desc in items:
            desc = printable(desc)  # a plug-in's docstring: no terminal escapes
            line = f"{printable(name):<{width}}  {desc}"
            print(f"  {line}" if args.what == "all" else line)
