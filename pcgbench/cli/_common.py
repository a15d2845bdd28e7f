"""What every command shares: the common options, help texts naming registered entries,
the default preset."""

from __future__ import annotations

import argparse

from pcgbench.errors import PcgError
from pcgbench.presets import DEFAULT_PRESET


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (it may register tasks/methods/metrics)")
    p.add_argument("--results", default=None,
                   help="results directory (default $PCGBENCH_RESULTS, "
                   "else ~/.cache/pcgbench/results)")
    p.add_argument("--data-dir", default=None,
                   help="dataset cache (default $PCGBENCH_DATA or ~/.cache/pcgbench/data)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars and no phase lines (warnings and errors only)")
    p.add_argument("--verbose", action="store_true",
                   help="phase lines even with --quiet, and debug detail (timestamped "
                   "when not on a terminal)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch intra-op threads (default: the thread policy's)")
    p.add_argument("--threads-policy", default=None,
                   choices=["auto", "default", "passive", "one", "free"],
                   help="CPU threads: auto (default; $PCGBENCH_THREADS_POLICY), free (idle "
                   "cores at start, passive waits), passive, one, default (torch's own); "
                   "docs/protocols.md 'Thread policy'")


def add_allow_unsealed(p: argparse.ArgumentParser) -> None:
    """``--allow-unsealed``: also read records without a ``digest`` (hand-written or
    imported; their content cannot be verified).  Without it they are named and skipped,
    like an edited record."""
    p.add_argument("--allow-unsealed", action="store_true",
                   help="also read run records that carry no digest (written or converted "
                   "by hand; unverified, and said so); by default they are named and "
                   "skipped like edited records")


def add_published(p: argparse.ArgumentParser) -> None:
    """``--no-published``: leave out the repository's published records."""
    which = p.add_mutually_exclusive_group()
    which.add_argument("--no-published", action="store_true",
                       help="only this results directory's records: leave out the published "
                       "set shipped in the repository (published/; $PCGBENCH_PUBLISHED)")
    which.add_argument("--published-only", action="store_true",
                       help="only the published set's records (what docs/leaderboard.md "
                       "shows), none of this results directory's")


def table_records(args: argparse.Namespace, root, unsealed: bool = False) -> list:
    """The records a table reads: the results directory's, plus the published set's
    unless ``--no-published`` (a published record the user has measured is not read);
    with ``--published-only`` the published set's alone."""
    from pcgbench.leaderboard.published import combine, load_published
    from pcgbench.results.store import load_records

    if getattr(args, "published_only", False):
        return load_published(unsealed)
    local = load_records(root, unsealed)
    if getattr(args, "no_published", False):
        return local
    return combine(local, load_published(unsealed))


def names(registry, kind: str) -> str:
    """Help text listing a registry's names (a --plugin or an installed entry point may add
    more, so they are listed, not enforced as argparse choices)."""
    try:
        names = ", ".join(registry.names())
    except PcgError:  # a broken entry point must not break --help
        names = "see `pcgbench list`"
    return f"{kind}: {names} (a --plugin may add more; `pcgbench list {kind}s` describes them)"


def one_line(obj_doc: str | None) -> str:
    return (obj_doc or "").strip().splitlines()[0] if obj_doc else ""


def default_preset(args: argparse.Namespace) -> None:
    """Fill ``args.preset`` when not given: ``gpu`` where ``--device`` resolves to CUDA
    (said on the first line), else ``cpu``."""
    if args.preset is None:
        from pcgbench.presets import default_preset

        args.preset, why = default_preset(args.device)
        if args.preset != DEFAULT_PRESET:
            print(f"preset {args.preset} ({why}; --preset cpu for the CPU preset)")
