"""Before/after table of the run records of two results directories (e.g. a fix's effect).

Matches records by (task, preset, method or method[variant], seed) -- the newest record
of each in each directory -- and prints one row per match with the chosen metrics and
costs side by side (``before -> after``).  ``--where-before/--where-after KEY=VALUE`` keep
only records whose method config has that value (records written before variants were
recorded).  Metrics a task does not record are left out of its rows.

    python benchmarks/compare_runs.py --before /tmp/res_before --after /tmp/res_after \
        --methods dflow diffusionpde --preset cpu
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tabulate import tabulate

COLUMNS = ("ce_ic", "ce_bc", "ce_cl", "mmse", "smse", "re", "wd", "js")


def newest(root: Path, where: dict[str, str] | None = None) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for path in sorted((root / "records").rglob("*.json")):
        try:
            r = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        config = r.get("config") or {}
        if where and any(k in config and str(config[k]) != v for k, v in where.items()):
            continue
        method = r.get("method")
        if r.get("variant"):  # a variant is its own identity (e.g. dflow[steps=6])
            method = f"{method}[{r['variant']}]"
        key = (r.get("task"), r.get("preset"), method, r.get("seed"))
        if key not in out or r.get("finished", "") >= out[key].get("finished", ""):
            out[key] = r
    return out


def _f(v) -> str:
    if v is None:
        return "-"
    v = float(v)
    return f"{v:.3g}" if 1e-3 <= abs(v) < 1e4 or v == 0 else f"{v:.2e}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--methods", nargs="+", default=None)
    ap.add_argument("--tasks", nargs="+", default=None)
    ap.add_argument("--preset", default=None)
    ap.add_argument("--columns", nargs="+", default=list(COLUMNS))
    ap.add_argument("--where-before", nargs="+", default=[], metavar="KEY=VALUE")
    ap.add_argument("--where-after", nargs="+", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    wb = dict(kv.split("=", 1) for kv in args.where_before)
    wa = dict(kv.split("=", 1) for kv in args.where_after)
    before, after = newest(Path(args.before), wb), newest(Path(args.after), wa)
    rows = []
    for key in sorted(set(before) | set(after), key=lambda k: tuple(map(str, k))):
        task, preset, method, seed = key
        if ((args.methods and method.split("[", 1)[0] not in args.methods)
                or (args.tasks and task not in args.tasks)
                or (args.preset and preset != args.preset)):
            continue
        b, a = before.get(key, {}), after.get(key, {})
        row = {"task": task, "method": method, "seed": seed}
        for c in args.columns:
            vb, va = (b.get("metrics") or {}).get(c), (a.get("metrics") or {}).get(c)
            if vb is not None or va is not None:
                row[c] = f"{_f(vb)} -> {_f(va)}"
        row["nfe"] = f"{b.get('nfe', '-')} -> {a.get('nfe', '-')}"
        sb = (b.get("inference") or {}).get("seconds_per_sample")
        sa = (a.get("inference") or {}).get("seconds_per_sample")
        row["s/sample"] = f"{_f(sb)} -> {_f(sa)}"
        rows.append(row)
    print(tabulate(rows, headers="keys", tablefmt="github"))


if __name__ == "__main__":
    main()
