"""The path of one run through the code, as a reader follows it: which files a
``pcgbench run`` goes through and how often it comes back to one it left (issue 51's
"stops" and "re-entries").

The run's call tree is traced (``sys.setprofile``) over this repository's files, each
function expanded at its first call only (a loop's repeats and a helper's later calls add
nothing a reader has not seen), then walked depth first.  A stop is a change of file on
that walk -- into a callee in another file, or back to the caller's file on return; a
re-entry is a stop into a file the walk has been in before.  Module bodies (imports) are
left out.  ``--core`` keeps only the harness's own files (``pcgbench/``), leaving out
tasks, methods and metrics, which a run reaches through the registries.

Usage (a smoke run into a fresh results directory; ``PYTHONPATH=<checkout>`` traces
another checkout)::

    python benchmarks/run_path.py --core -- run --task burgers --method pmosfm \\
        --preset smoke --results /tmp/rp --data-dir /tmp/rp-data --quiet
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
from pathlib import Path
from types import FrameType
from typing import Any

FOLDERS = ("pcgbench", "tasks", "methods", "metrics", "leaderboard", "paper")


@functools.cache
def _ours(filename: str, root: Path, core: bool) -> str | None:
    """``filename`` relative to the traced checkout, or None outside its source tree."""
    try:
        rel = Path(filename).resolve().relative_to(root)
    except ValueError:
        return None
    if not rel.parts or rel.parts[0] not in (("pcgbench",) if core else FOLDERS):
        return None
    if str(rel) == "pcgbench/__init__.py":  # the source-tree import finder
        return None
    return str(rel)


def walk(argv: list[str], core: bool, within: str | None = None
         ) -> tuple[list[str], collections.Counter[str]]:
    """The files of the depth-first walk of ``pcgbench <argv>``'s first-call tree, one
    entry per stop (consecutive entries differ); with ``within`` (``file:function``, e.g.
    ``pcgbench/stages/runner.py:run``) only the walk inside that function's first call.  Also
    returns, per file, how many first calls came into it from another file (a return to
    a caller is a stop, not a call)."""
    import pcgbench
    from pcgbench.cli import main

    root = Path(pcgbench.__file__).resolve().parents[1]
    seen: set[tuple[str, int]] = set()
    stack: list[tuple[int, str, bool]] = []  # (frame id, file, expanded)
    muted = [0]  # depth inside a function already expanded
    path: list[str] = []
    inside = [within is None]  # recording: the whole run, or inside ``within``
    target = tuple(within.split(":")) if within else None
    depth = [0]
    target_done = [False]
    calls: collections.Counter[str] = collections.Counter()

    def visit(file: str) -> None:
        if inside[0] and (not path or path[-1] != file):
            path.append(file)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return") or frame.f_code.co_name.startswith("<"):
            return
        file = _ours(frame.f_code.co_filename, root, core)
        if file is None:
            return
        if event == "call":
            if (target and not inside[0] and not target_done[0]
                    and (file, frame.f_code.co_name) == target):
                inside[0], depth[0] = True, len(stack)
            key = (frame.f_code.co_filename, frame.f_code.co_firstlineno)
            expanded = not muted[0] and key not in seen
            seen.add(key)
            if expanded and inside[0] and stack and stack[-1][1] != file:
                calls[file] += 1
            stack.append((id(frame), file, expanded))
            if expanded:
                visit(file)
            else:
                muted[0] += 1
            return
        if not stack or stack[-1][0] != id(frame):
            return
        _, _, expanded = stack.pop()
        if not expanded:
            muted[0] -= 1
        elif stack:
            visit(stack[-1][1])
        if target and inside[0] and len(stack) == depth[0]:
            inside[0], target_done[0] = False, True

    sys.setprofile(profile)
    try:
        main(argv)
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
    return path, calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", action="store_true", help="only pcgbench/ files")
    ap.add_argument("--show", action="store_true", help="print the walk")
    ap.add_argument("--within", metavar="FILE:FUNCTION",
                    help="only the walk inside this function's first call "
                         "(e.g. pcgbench/stages/runner.py:run)")
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the pcgbench arguments")
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    path, calls = walk(argv, args.core, args.within)
    entered: collections.Counter[str] = collections.Counter(path)
    reentries = len(path) - len(entered)
    if args.show:
        print(" -> ".join(path))
    print(f"{len(path)} stops in {len(entered)} files, {reentries} of them re-entries"
          f"{' (pcgbench/ only)' if args.core else ''}"
          f"{f' inside {args.within}' if args.within else ''}")
    for file, n in entered.most_common(8):
        print(f"  {n:4d}  {file}")
    for name in ("pcgbench/stages/runner.py", "pcgbench/stages/plan.py",
                 "pcgbench/stages/record.py"):
        print(f"  {name}: entered {entered[name]} times, called into from another file "
              f"{calls[name]} times")
    return 0


if __name__ == "__main__":
    sys.exit(main())
