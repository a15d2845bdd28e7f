"""pcgbench: a benchmark harness for physics-constrained generative models.

The distribution maps the top-level folders ``tasks/ methods/ metrics/ leaderboard/ paper/
published/`` of the source tree to ``pcgbench.tasks`` ... (setuptools ``package-dir``).  When Python
imports this package from a source checkout -- ``python -m pcgbench`` run in the
repository root puts the checkout first on ``sys.path``, ahead of an installed wheel --
those sub-packages are not below this folder; :func:`_map_source_tree` then maps them to
the checkout's folders, as the installed layout does, so the checkout runs as a whole.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

from pcgbench.runtime import allocator as _allocator
from pcgbench.runtime import threads as _threads

# before anything imports torch: idle OpenMP threads must not spin (pcgbench.runtime.threads)
_threads.prepare_environment()
# freed training tensors stay in the heap instead of faulting in again (pcgbench.runtime.allocator)
_allocator.apply()

#: sub-package -> folder of the source tree (pyproject.toml ``package-dir``)
SOURCE_FOLDERS = {"tasks": "tasks", "methods": "methods", "metrics": "metrics",
                  "leaderboard": "leaderboard", "paper": "paper", "published": "published"}
#: mapped when present, not required of a checkout (data, no code)
DATA_FOLDERS = frozenset({"published"})


class _SourceTreeFinder(importlib.abc.MetaPathFinder):
    """Finds ``pcgbench.<name>`` in ``<root>/<folder>`` for the mapped sub-packages."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001 - importlib's
        head, _, name = fullname.partition(".")
        if head != __name__ or name not in SOURCE_FOLDERS:
            return None
        folder = self.root / SOURCE_FOLDERS[name]
        if not (folder / "__init__.py").is_file():
            return None  # a data folder this copy lacks (the published records)
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


def _map_source_tree() -> None:
    here = Path(__file__).resolve().parent
    root = here.parent
    if (here / "tasks").is_dir() or not (root / "pyproject.toml").is_file():
        return  # an installed package (the sub-packages are below it)
    if not all((root / f / "__init__.py").is_file() for n, f in SOURCE_FOLDERS.items()
               if n not in DATA_FOLDERS):
        return
    if not any(isinstance(f, _SourceTreeFinder) for f in sys.meta_path):
        # first: an editable install of *another* checkout maps the same names to its
        # own folders, and its finder would otherwise pair this checkout's core with
        # that checkout's tasks and methods
        sys.meta_path.insert(0, _SourceTreeFinder(root))


_map_source_tree()
