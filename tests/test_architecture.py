"""The layering docs/ARCHITECTURE.md promises, read off the source (every import statement,
function-level and ``TYPE_CHECKING`` ones included): no import cycles, and the harness core
imports no task, method or metric (only the command-line layer, ``pcgbench.cli``, wires
everything together)."""

from __future__ import annotations

import ast
from pathlib import Path

from pcgbench import SOURCE_FOLDERS

ROOT = Path(__file__).resolve().parents[1]
#: folders of the source tree -> the package they are imported as
PACKAGES = {"pcgbench": "pcgbench", **{f: f"pcgbench.{n}" for n, f in SOURCE_FOLDERS.items()}}
LEAVES = ("tasks", "methods", "metrics")


def modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts
                     if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules ``name`` imports (a ``from package import module`` counts as the
    module; anything else as the deepest known package of the name)."""
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
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def layer(module: str) -> str:
    for folder in SOURCE_FOLDERS:
        if module == f"pcgbench.{folder}" or module.startswith(f"pcgbench.{folder}."):
            return folder
    if module == "pcgbench.cli" or module.startswith("pcgbench.cli."):
        return "cli"
    return "core"


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycles():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_core_imports_no_task_method_or_metric():
    bad = sorted(f"{a} -> {b}" for a, targets in graph().items() for b in targets
                 if layer(a) == "core" and layer(b) in LEAVES)
    assert bad == []


def test_tasks_methods_and_metrics_do_not_import_each_other_sideways():
    """A metric knows no method, a method no metric; tasks know neither (a method may
    name a task only through the registry)."""
    bad = sorted(f"{a} -> {b}" for a, targets in graph().items() for b in targets
                 if layer(a) in LEAVES and layer(b) in LEAVES and layer(a) != layer(b))
    assert bad == []


def private_imports(root: Path = ROOT) -> list[str]:
    """``from <module> import _name`` of another module's private name (a module whose
    own name starts with ``_``, such as ``pcgbench.tasks._pcfm_files``, is a package's
    internal module and may be imported by name), in the source tree and benchmarks/
    (tests may reach into what they test)."""
    known = modules()
    found = []
    folders = [*PACKAGES, "benchmarks"]
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                base = node.module or ""
                if node.level:
                    mod = next((n for n, p in known.items() if p == path), "")
                    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
                    for _ in range(node.level - 1):
                        package = package.rsplit(".", 1)[0]
                    base = f"{package}.{base}" if base else package
                if base.split(".")[0] != "pcgbench":
                    continue
                for alias in node.names:
                    name = alias.name
                    if (name.startswith("_") and not name.startswith("__")
                            and f"{base}.{name}" not in known):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: "
                                     f"from {base} import {name}")
    return found


def test_no_module_imports_another_modules_private_names():
    assert private_imports() == []


def test_the_private_import_finder_finds_one(tmp_path):
    (tmp_path / "pcgbench").mkdir()
    (tmp_path / "pcgbench" / "a.py").write_text("from pcgbench.b import _hidden, shown\n")
    for folder in [*PACKAGES, "benchmarks"]:
        (tmp_path / folder).mkdir(exist_ok=True)
    assert private_imports(tmp_path) == ["pcgbench/a.py:1: from pcgbench.b import _hidden"]


def test_no_source_or_shipped_file_is_git_ignored():
    """A new source module or a published samples file under an ignore pattern would be
    left out of every commit (``results/`` once matched ``pcgbench/results/``; ``*.h5``
    the published samples): a clean clone would miss it."""
    import shutil
    import subprocess

    import pytest

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = [str(p.relative_to(ROOT)) for p in modules().values()]
    files += [str(p.relative_to(ROOT)) for p in (ROOT / "published").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts]
    out = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT,
                         input="\n".join(files), capture_output=True, text=True)
    assert out.stdout.split() == []


def test_every_name_imported_from_pcgbench_exists():
    """Every ``from pcgbench.X import name`` in the source, the benchmarks and the tests --
    function-level ones included, which no linter resolves -- names a module or an
    attribute that exists (a moved or renamed name fails here, not in a user's run)."""
    import importlib

    bad = []
    for folder in (*PACKAGES, "benchmarks", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.ImportFrom) and not node.level and node.module
                        and node.module.split(".")[0] == "pcgbench"):
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                try:
                    module = importlib.import_module(node.module)
                except ImportError as exc:
                    bad.append(f"{where}: {node.module} ({exc})")
                    continue
                for alias in node.names:
                    if alias.name == "*" or hasattr(module, alias.name):
                        continue
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        bad.append(f"{where}: {node.module}.{alias.name}")
    assert bad == []


def test_every_table_is_formatted_by_the_leaderboard_s_renderer():
    """Only ``leaderboard/render.py`` (and its text helpers) format a table: no other module
    imports ``tabulate`` (a command's own cells go through ``render.text_table``)."""
    allowed = {"pcgbench.leaderboard.render", "pcgbench.leaderboard.text"}
    users = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "tabulate" for n in names) and name not in allowed:
                users.append(name)
    assert users == []


def test_the_leaderboard_imports_no_method():
    """Tables know records, not methods: a paper's method-specific layout (the one-step
    ablation's objectives and their column names) lives in ``paper/``."""
    edges = graph()
    bad = sorted(f"{m} -> {t}" for m, targets in edges.items() if layer(m) == "leaderboard"
                 for t in targets if layer(t) == "methods")
    assert bad == []
