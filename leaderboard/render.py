"""Every table's text, from the models of :mod:`pcgbench.leaderboard.model`: a
:class:`Grid` as a markdown, LaTeX or HTML table (one cell loop: :func:`cell_text`); a
:class:`TaskTable` as markdown (the table, its notes, then its remarks), LaTeX (everything
inside the float), long CSV (one frame for many tables, with task and preset columns) or
the HTML report's table; a :class:`LayoutTable` (a suite, an ablation) in any of the
three text formats; a command's own text cells (:func:`text_table`).  No other module
formats a table."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

import pandas as pd
from tabulate import tabulate

from pcgbench.leaderboard.model import (
    Cell,
    Grid,
    LayoutTable,
    TaskTable,
    measured_grid,
    reported_grid,
)
from pcgbench.leaderboard.tables import REPORTED_CAPTION, annotate_frame, long_frame
from pcgbench.leaderboard.text import (
    booktabs,
    fmt_number,
    latex_escape,
    latex_float,
    md_escape,
    md_text,
    render_notes,
    to_csv,
)
from pcgbench.runtime.log import printable

#: between a value and its spread, per format
PLUS_MINUS = {"md": " ± ", "latex": " $\\pm$ ", "html": " ± "}


def cell_text(cell: Cell, fmt: str, escape: Callable[[str], str] = str) -> str:
    """A cell as ``fmt`` ('md', 'latex', 'html') prints it: value (or ``text``), spread and
    suffix, each through ``escape``; bold where best (HTML marks it with a class)."""
    s = escape(cell.text if cell.text is not None else fmt_number(cell.value))
    if cell.spread is not None:
        s += PLUS_MINUS[fmt] + escape(fmt_number(cell.spread))
    s += escape(cell.suffix)
    if not cell.best or fmt == "html":
        return s
    return f"**{s}**" if fmt == "md" else f"\\textbf{{{s}}}"


def tabular(grid: Grid, fmt: str) -> str:
    """The grid as a pipe table ('md') or a ``latex_raw`` tabular ('latex'): headers and
    labels escaped for the format, cells too unless ``grid.verbatim``."""
    esc = latex_escape if fmt == "latex" else md_escape
    cells = [[esc(label) for label in labels]
             + [cell_text(c, fmt, str if grid.verbatim else esc) for c in row]
             for labels, row in grid.rows]
    return tabulate(cells, headers=[esc(h) for h in grid.headers],
                    tablefmt="pipe" if fmt == "md" else "latex_raw", disable_numparse=True)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], fmt: str = "md") -> str:
    """A table of cells a command has already formatted as text (``tune``'s stage table,
    ``reproduce``'s agreement, the paper's cost table): a markdown pipe table ('md', cells
    escaped) or CSV ('csv', as :func:`to_csv` writes every CSV)."""
    if fmt == "csv":
        return to_csv(pd.DataFrame([list(r) for r in rows], columns=list(headers)))
    if fmt != "md":
        raise ValueError(f"text_table: unknown format {fmt!r} (md, csv)")
    grid = Grid(title="", headers=tuple(headers),
                rows=tuple(((), tuple(Cell(text=c) for c in r)) for r in rows))
    return tabular(grid, "md")


def grid_markdown(grid: Grid) -> str:
    """A heading (the paper's values: a caption line), the table, its notes."""
    title = f"{md_text(grid.title)}:" if grid.reported else f"## {md_text(grid.title)}"
    return f"{title}\n\n{tabular(grid, 'md')}" + render_notes(list(grid.notes), "md")


def grid_latex(grid: Grid) -> str:
    """One table float: the title as its caption, the notes inside it."""
    return latex_float(booktabs(tabular(grid, "latex")), grid.title, grid.notes)


def grid_html(grid: Grid, css_class: str) -> str:
    """An HTML table (class ``css_class``); the best cell of a row has class ``best``."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in grid.headers)
    best = ' class="best"'
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(label)}</td>" for label in labels)
        + "".join(f"<td{best if c.best else ''}>{html.escape(cell_text(c, 'html'))}</td>"
                  for c in cells) + "</tr>"
        for labels, cells in grid.rows)
    return (f'<table class="{css_class}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def format_table(mean: pd.DataFrame, std: pd.DataFrame, seeds: dict[str, int], fmt: str,
                 reported: pd.DataFrame | None = None, caption: str = "",
                 notes: list[str] | None = None) -> str:
    """Render as markdown ('md'), LaTeX ('latex') or CSV ('csv').  LaTeX is one float per
    table (:func:`~pcgbench.leaderboard.text.latex_float`: ``caption``, booktabs, names
    escaped, kept within the text width, ``notes`` under the measured table); markdown and
    CSV leave the notes to the caller."""
    if fmt == "csv":
        return to_csv(long_frame(mean, std, seeds, reported))
    grid = measured_grid(mean, std, seeds, caption or "Measured", notes or [])
    rep = reported_grid(reported) if reported is not None else None
    if fmt == "md":
        return tabular(grid, "md") + (f"\n\n{grid_markdown(rep)}" if rep else "")
    return grid_latex(grid) + (f"\n\n{grid_latex(rep)}" if rep else "")


def table_markdown(table: TaskTable) -> str:
    """A heading, the table with its notes, then one paragraph per remark (names and
    notes escaped as the table's cells: :func:`~pcgbench.leaderboard.text.md_text`)."""
    body = (format_table(table.mean, table.std, table.seeds, "md", table.reported)
            + render_notes(table.notes, "md"))
    return "\n".join([f"\n## {md_text(table.task)} (preset {md_text(table.preset)})\n", body,
                      *(f"\n{md_text(line)}" for line in table.remarks)])


def table_latex(table: TaskTable) -> str:
    """One table float; every note and remark inside it."""
    return format_table(
        table.mean, table.std, table.seeds, "latex", table.reported,
        caption=f"{table.task} (preset {table.preset}): mean ± std over n seeds; best in bold",
        notes=table.notes + table.remarks)


def table_csv(tables: Sequence[TaskTable]) -> str:
    """Every table as long rows (metric, method, value, ...) with task and preset columns
    (paper rows carry no preset)."""
    frames = []
    for t in tables:
        frame = annotate_frame(long_frame(t.mean, t.std, t.seeds, t.reported), t.task,
                               t.preset, t.mean)
        frame.insert(0, "preset", [t.preset if src == "measured" else ""
                                   for src in frame["source"]])
        frame.insert(0, "task", t.task)
        for col in ("method", "label"):  # no control characters
            frame[col] = frame[col].map(printable)
        frames.append(frame)
    return to_csv(pd.concat(frames, ignore_index=True)) if frames else ""


def table_html(table: TaskTable) -> str:
    """The HTML report's table: the measured grid, then the paper's rows under a caption
    (non-finite metrics and the paper's row names as the report has always shown them:
    '–' and the metric keys)."""
    out = grid_html(measured_grid(table.mean, table.std, table.seeds, nonfinite=False),
                    "leaderboard")
    if table.reported is not None and not table.reported.empty:
        out += (f"<p>{REPORTED_CAPTION}:</p>"
                + grid_html(reported_grid(table.reported, label=str), "reported"))
    return out


def layout_text(table: LayoutTable, fmt: str) -> str:
    """A suite or ablation table as markdown ('md'), LaTeX ('latex': a line between the
    floats is a ``%`` comment) or CSV ('csv': its long frames, a blank line apart)."""
    if fmt == "csv":
        return "\n\n".join(to_csv(frame) for frame in table.long)
    latex = fmt == "latex"
    return "\n\n".join(
        (grid_latex(b) if latex else grid_markdown(b)) if isinstance(b, Grid)
        else (f"% {b}" if latex else b) for b in table.blocks)
