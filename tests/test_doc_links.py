"""Every relative link of the README and docs/ points at a file that exists (issue 62's
"docs true after the move"; anchors are not checked here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks aside
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor of this page
        path = target.split("#", 1)[0]
        if path and not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


SOURCE = [p for folder in ("pcgbench", "tasks", "methods", "metrics", "leaderboard", "paper",
                           "benchmarks", "tests")
          for p in sorted((ROOT / folder).rglob("*.py")) if p != Path(__file__).resolve()]
CITATION = re.compile(r"docs/([\w./-]+\.md)(?:,? ?(?:\"(\w[^\"]*)\"|'(\w[^']*)'))?")


def _headings(page: Path) -> set[str]:
    return {re.sub(r"\s+", " ", m.group(1)).strip()
            for m in re.finditer(r"^#+\s+(.+)$", page.read_text(), flags=re.M)}


def _citations(path: Path) -> list[tuple[str, str | None]]:
    """(page, section or None) of every ``docs/<page>.md ["Section"]`` a source file
    cites, comment markers and line breaks joined away (a section may wrap)."""
    text = " ".join(re.sub(r"^\s*(#:?)?\s*", "", line)
                    for line in path.read_text().splitlines())
    return [(m.group(1), m.group(2) or m.group(3)) for m in CITATION.finditer(text)]


@pytest.mark.parametrize("source", SOURCE, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_citations_name_a_page_and_a_section_that_exist(source: Path) -> None:
    """A comment or message citing ``docs/page.md "Section"`` names a page that exists and
    a heading it has (or one that starts with it and a space: ``"Darcy"`` for "Darcy
    (`darcy`; ...)"); the protocols index (``docs/protocols.md``) is cited only with a
    section, never bare (it holds no content of its own)."""
    bad = []
    for page, section in _citations(source):
        target = ROOT / "docs" / page
        if not target.is_file():
            bad.append(f"docs/{page}: no such page")
        elif section is not None and not any(h == section or h.startswith(section + " ")
                                             for h in _headings(target)):
            bad.append(f'docs/{page} "{section}": no such heading')
        elif section is None and page == "protocols.md":
            bad.append("docs/protocols.md cited bare: cite the page it points to")
    assert not bad, f"{source.relative_to(ROOT)}: {bad}"
