"""``pcgbench reproduce``: rerun one published cell here and compare, metric by metric.

Exit status: 0 when every metric agrees (identical, or within the published cell's
spread over its seeds), 1 when one differs beyond it, 2 for a bad input (no such
published cell, or a stale one: the code here would run something else)."""

from __future__ import annotations

import argparse
import math
import typing

from pcgbench.cli._common import add_common
from pcgbench.presets import DEFAULT_PRESET, PRESETS


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("reproduce", help="rerun one published cell here and compare each "
                       "metric with the published value (exit 1 when one disagrees)")
    add_common(p)
    p.add_argument("cell", nargs="+", metavar="CELL",
                   help="TASK METHOD SEED, or the path of a published record")
    p.add_argument("--preset", default=DEFAULT_PRESET, help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--keep", action="store_true",
                   help="run into the results directory (the new record then shows in your "
                   "tables instead of the published one); default: a temporary one")


def _find(args: argparse.Namespace) -> tuple[typing.Any, list[typing.Any]]:
    """(the published record of the cell, every published record of its column)."""
    from pathlib import Path

    from pcgbench.errors import PcgError
    from pcgbench.leaderboard.published import load_published

    published = load_published()
    if not published:
        raise PcgError("no published records here (the published/ set is empty or off)")
    if len(args.cell) == 1:
        path = Path(args.cell[0]).expanduser().resolve()
        hits = [r for r in published if r.path and Path(r.path).resolve() == path]
        if not hits:
            raise PcgError(f"{args.cell[0]} is not a record of the published set")
    elif len(args.cell) == 3:
        task, method, seed = args.cell
        try:
            s = int(seed)
        except ValueError:
            raise PcgError(f"SEED must be an integer, got {seed!r}") from None
        hits = [r for r in published if r.task == task and r.method == method
                and r.get("seed") == s and r.get("preset") == args.preset and not r.variant]
        if not hits:
            raise PcgError(f"no published record of {task}/{method} seed {s} at preset "
                           f"{args.preset!r} (`pcgbench leaderboard --task {task}` shows "
                           "the published cells)")
    else:
        raise PcgError("CELL is TASK METHOD SEED or one record path")
    rec = max(hits, key=lambda r: str(r.get("finished") or ""))
    column = [r for r in published if r.task == rec.task and r.method == rec.method
              and r.get("preset") == rec.get("preset") and not r.variant]
    return rec, column


def data_agreement(published: typing.Any, here: typing.Any) -> str:
    """One line: whether the rerun's data splits are byte-identical to the published
    cell's (the SHA-256 each record keeps), which differ, or that the published record
    predates the checksums."""
    if not isinstance(published, dict) or not published:
        return ("data: the published record keeps no data checksums (written before they "
                "were recorded): a difference below cannot be told from the data's")
    if not isinstance(here, dict):
        here = {}
    common = sorted(set(published) & set(here))
    differ = [s for s in common if published[s] != here[s]]
    if not common:
        return "data: no split checksum to compare"
    if differ:
        return (f"data: the {', '.join(differ)} split(s) DIFFER from the published cell's "
                f"(SHA-256; {', '.join(s for s in common if s not in differ) or 'none'} "
                "identical): the solver gave other bytes on this machine")
    return f"data: {', '.join(common)} identical to the published cell's (SHA-256)"


def run(args: argparse.Namespace) -> int:
    import tempfile
    import time

    from pcgbench.errors import PcgError
    from pcgbench.leaderboard.published import cell_spread, provenance, relative_name
    from pcgbench.leaderboard.tables import is_ok, stale_reason
    from pcgbench.presets import check_preset
    from pcgbench.results.layout import identity_name
    from pcgbench.stages.plan import record_paths
    from pcgbench.stages.runner import RunOptions, run

    check_preset(args.preset)
    pub, column = _find(args)
    if (why := stale_reason(pub)) is not None:
        raise PcgError(f"the published cell {relative_name(pub)} is stale here ({why}): "
                       "the code here would run something else")
    column = [r for r in column if is_ok(r)]
    with tempfile.TemporaryDirectory(prefix="pcgbench-reproduce-") as tmp:
        opts = RunOptions(task=pub.task, method=pub.method, seed=int(pub.get("seed", 0)),
                          preset=str(pub.get("preset")), device=str(pub.get("device_kind")
                                                                    or "cpu"),
                          results_dir=args.results if args.keep else tmp,
                          data_dir=args.data_dir, force=args.keep,
                          progress=not args.quiet)
        names = record_paths(opts)
        if relative_name(pub) not in {identity_name(p) for p in names}:
            raise PcgError(f"the published cell {relative_name(pub)} is not what this code "
                           f"runs for it ({names[0].name}): another identity")
        t0 = time.perf_counter()
        new, path, _ = run(opts)
        wall = time.perf_counter() - t0
    print(f"reproduce {pub.task}/{pub.method} seed {pub.get('seed')} at preset "
          f"{pub.get('preset')}: published {provenance([pub])}; rerun here in {wall:.0f} s"
          + (f" ({path})" if args.keep else ""))
    print(data_agreement(pub.get("data_checksums"), new.get("data_checksums")))
    if new.status != "ok":
        print(f"the rerun {new.status}: {new.status_reason}")
        return 1
    rows, bad = [], 0
    for metric, p in pub.metrics.items():
        v = new.metrics.get(metric)
        if not isinstance(p, int | float) or not isinstance(v, int | float):
            continue
        spread = cell_spread(column, metric)
        diff = abs(float(v) - float(p))
        if diff <= 1e-12 * max(abs(float(p)), 1e-300):
            verdict = "identical"
        elif spread is not None and math.isfinite(spread) and diff <= spread:
            verdict = f"within the seed spread ({spread:.3g})"
        else:
            if spread is None:
                verdict = "DIFFERS (no seed spread to compare: one published seed)"
            elif spread == 0:
                # e.g. a classifier saturated at 1 on every seed: nothing to compare with
                verdict = (f"DIFFERS (every published seed scored {float(p):.6g}: a spread "
                           "of 0, so any change differs)")
            else:
                verdict = f"DIFFERS (beyond the seed spread {spread:.3g})"
            bad += 1
        rows.append((metric, f"{float(p):.6g}", f"{float(v):.6g}", verdict))
    from pcgbench.leaderboard.render import text_table

    print(text_table(["metric", "published", "here", "agreement"], rows))
    print(f"{len(rows) - bad} of {len(rows)} metrics agree" + (
        "" if not bad else f"; {bad} differ beyond the published cell's seed spread"))
    return 1 if bad else 0
