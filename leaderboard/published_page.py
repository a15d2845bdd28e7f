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
    presets = sorted({preset for _, preset in keys})
    return ("\n".join(head) + "\n" + "".join(coverage_markdown(records, p) for p in presets)
            + "".join(cost_markdown(records, p) for p in presets)
            + "\n" + "\n".join(table_markdown(t) for t in tables))


def _seeds_label(seeds: list[int]) -> str:
    if not seeds:
        return "–"
    s = sorted(seeds)
    span = (f"{s[0]}–{s[-1]}" if s == list(range(s[0], s[-1] + 1)) and len(s) > 2
            else ", ".join(map(str, s)))
    return f"{len(s)} ({span})"


def coverage_markdown(records: list, preset: str) -> str:
    """How much of the paper's matrices (``pcgbench sweep --matrix main`` / ``suite``) the
    published set holds at ``preset``: per task and paper column, the seeds of its scored,
    current, default-column cells (``–``: none yet; ``withheld``: measured and judged
    doubtful, ``published/withheld.json``; ``n/a``: the paper's table has no value there,
    not in its matrix).  ``pcgbench sweep --matrix M --preset P --seeds 0 1 2 --dry-run``
    lists and prices what is left."""
    from pcgbench.leaderboard.published import default_cells, withheld
    from pcgbench.paper.cost import matrix

    seeds: dict[tuple[str, str], list[int]] = {}
    for r in default_cells(records, preset):
        if isinstance(r.get("seed"), int):
            seeds.setdefault((r.task, r.method), []).append(r.get("seed"))
    held = {(w["task"], w["method"]) for w in withheld(preset=preset)}

    def cell(task: str, method: str, columns: list[str]) -> str:
        if method not in columns:
            return "n/a"
        got = sorted(set(seeds.get((task, method), [])))
        return "withheld" if not got and (task, method) in held else _seeds_label(got)

    out = []
    for name, title in (("main", "the main table"), ("suite", "the constrained-PDE suite")):
        m = matrix(name)
        methods = list(dict.fromkeys(x for ms in m.values() for x in ms))
        want = sum(len(ms) for ms in m.values())
        full = sum(1 for t, ms in m.items() for x in ms if len(seeds.get((t, x), [])) >= 3)
        rows = ["| task | " + " | ".join(methods) + " |",
                "|---|" + "---|" * len(methods)]
        for task, ms in m.items():
            rows.append(f"| {task} | " + " | ".join(cell(task, x, ms) for x in methods)
                        + " |")
        out += [f"## Coverage of {title} at `{preset}`", "",
                f"Published seeds per paper column (`pcgbench sweep --matrix {name}`): "
                f"{full} of {want} cells have seeds 0–2 or more; `pcgbench sweep --matrix "
                f"{name} --preset {preset} --seeds 0 1 2 --dry-run` lists and prices the "
                "rest (`–`: none yet; `withheld`: measured, judged doubtful, named under "
                "its table; `n/a`: the paper's table has no value there).", "", *rows, ""]
    return "\n".join(out)


def matrix_runs(records: list, preset: str, columns: dict[str, list[str]]) -> list:
    """The published runs a matrix (task -> its columns) consists of at ``preset``: the
    scored, current, default-column records of its columns, plus the records of the
    shared backbones those columns sampled (a record's ``pretrained``), each once."""
    from pcgbench.leaderboard.published import default_cells

    ok = default_cells(records, preset)
    want = {(t, m) for t, ms in columns.items() for m in ms}
    want |= {(r.task, r.get("pretrained")) for r in ok
             if (r.task, r.method) in want and r.get("pretrained")}
    return [r for r in ok if (r.task, r.method) in want]


def cost_markdown(records: list, preset: str) -> str:
    """What the published runs of each matrix took (:mod:`pcgbench.results.cost`): per
    task, the runs, their core-hours, how many took over 10 core-minutes, the longest."""
    from pcgbench.paper.cost import matrix
    from pcgbench.results.cost import TARGET_CORE_SECONDS, CostSummary, run_cost

    def row(name: str, s: CostSummary) -> str:
        lg = s.longest
        longest = "–" if lg is None else (
            f"{lg.core_seconds / 60:.0f} ({lg.method}, seed {lg.seed})")
        return (f"| {name} | {s.runs} | {s.core_hours:.2f} | {s.over_target} | "
                f"{longest} |")

    out = [f"## What the published runs took at `{preset}`", "",
           "Measured, not priced: each record's own wall seconds (its fit, sampling and "
           "evaluation; plus its fit's seconds where it reused a checkpoint fitted earlier "
           "for the same cell) times its torch threads (`pcgbench.results.cost`).  A method "
           "that samples a shared backbone counts its sampling; the backbone's record (FM-OT, "
           "FFM) counts the fit, once; a fit resumed from a partial checkpoint counts the "
           "process that finished it.  On the machines the records name (2-core VMs; most "
           "fits single-threaded, two at a time, so each record's `load` is near 2), not a "
           "property of the code; `pcgbench sweep --dry-run` prices from a short probe "
           f"instead ([paper_cost.md](paper_cost.md)).  Target (issue 61): every run within "
           f"{TARGET_CORE_SECONDS / 60:.0f} core-minutes, the main table within 12 "
           "core-hours.", ""]
    for name, title in (("main", "main table"), ("suite", "constrained-PDE suite")):
        columns = matrix(name)
        costs = [c for r in matrix_runs(records, preset, columns)
                 if (c := run_cost(r)) is not None]
        if not costs:
            continue
        out += [f"**The {title}** (`--matrix {name}`):", "",
                "| task | runs | core-hours | runs over 10 core-min | longest (core-min) |",
                "|---|---|---|---|---|"]
        out += [row(t, CostSummary.of(c for c in costs if c.task == t)) for t in columns
                if any(c.task == t for c in costs)]
        out += [row("**all**", CostSummary.of(costs)), ""]
    return "\n".join(out) + "\n"


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
