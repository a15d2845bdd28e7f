"""How many import floors the harness core has (issue 62: "a core a newcomer reads in one
look").

The core is ``pcgbench/`` without the command-line layer (``pcgbench/cli``) and without
the plug-in folders (tasks, methods, metrics, leaderboard, paper).  Every import statement
counts (module level, function level, ``TYPE_CHECKING``), as in
``tests/test_architecture.py``; a module's floor is 0 when it imports no other core
module, else one above the highest floor it imports.  The graph has no cycles (that test),
so floors are well defined.  ``--show`` prints each floor's modules.

Usage (``--root`` measures another checkout)::

    python benchmarks/import_floors.py [--root CHECKOUT] [--show]
"""

from __future__ import annotations

import argparse
import ast
import functools
import sys
from pathlib import Path


def core_modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in (root / "pcgbench").rglob("*.py"):
        rel = path.relative_to(root).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        if len(parts) > 1 and parts[1] == "cli":
            continue
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    package = package.rsplit(".", 1)[0]
                base = f"{package}.{base}" if base else package
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target != "pcgbench":
                found.add(target)
    return found


def floors(root: Path) -> dict[str, int]:
    known = core_modules(root)
    graph = {n: imports(n, p, known) for n, p in known.items()}

    @functools.cache
    def floor(n: str, depth: int = 0) -> int:
        if depth > len(graph):
            raise SystemExit(f"import cycle through {n}")
        return 1 + max((floor(m, depth + 1) for m in graph[n]), default=-1)

    return {n: floor(n) for n in sorted(graph)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--show", action="store_true")
    args = ap.parse_args()
    got = floors(args.root.resolve())
    top = max(got.values())
    print(f"{len(got)} core modules on {top + 1} import floors (0-{top}) in {args.root}")
    if args.show:
        for f in range(top + 1):
            print(f"  {f:2d}: " + ", ".join(n.removeprefix("pcgbench.")
                                            for n, v in got.items() if v == f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
