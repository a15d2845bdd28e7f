"""docs/leaderboard.md: the published set's per-task tables (generated; kept in sync by
tests/test_published.py).

    python -m pcgbench.leaderboard.published_page --write docs/leaderboard.md
"""

from __future__ import annotations

from pathlib import Path

from pcgbench.leaderboard.published import load_published

#: the page generated from the published set (tests/test_published.py keeps it in sync)
DOC = "docs/leaderboard.md"


def published_doc() -> str:
    """docs/leaderboard.md: every per-task table of the published set (``pcgbench
    leaderboard --published-only``), each with its notes, under a header saying what the
    set is and how to regenerate the page."""
    from pcgbench.leaderboard.model import task_table
    from pcgbench.leaderboard.render import table_markdown
    from pcgbench.leaderboard.tables import group_records

    records = load_published()
    groups = group_records(records)
    keys = sorted(groups)
    head = ["# Leaderboard: the published cells", "",
            "Generated from the sealed run records shipped in `published/records/` "
            "(`python -m pcgbench.leaderboard.published_page --write docs/leaderboard.md`; "
            "`tests/test_published.py` fails when this page and the records or the code "
            "disagree).  The same tables print on a fresh clone with `pcgbench leaderboard` "
            "(your own records beside them) and `pcgbench leaderboard --published-only`; "
            "`pcgbench reproduce TASK METHOD SEED` reruns one cell here and compares.  "
            "What each table's data are, and under which regime, is under it; "
            "docs/evaluation.md tells how to read one (the headline metric, the data floor, "
            "the sanity rows).", ""]
    if not keys:
        return "\n".join(head + ["No published records.", ""])
    tables = [t for task, preset in keys
              if (t := task_table(records, task, preset, groups=groups)) is not None]
    return "\n".join(head) + "\n" + "\n".join(table_markdown(t) for t in tables)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="write docs/leaderboard.md from the published set")
    ap.add_argument("--write", default=None, metavar="PATH", help="write here (else print)")
    a = ap.parse_args()
    text = published_doc()
    if a.write:
        Path(a.write).write_text(text)
    else:
        print(text, end="")
