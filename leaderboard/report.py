"""``pcgbench report``: one self-contained static HTML page from the run records (no
server, no network): per (task, preset) the leaderboard table (the same numbers as
``pcgbench leaderboard``, data column and the paper's reported rows labelled), its notes,
and matplotlib figures embedded as PNG: quality vs cost, training-loss curves, sample
grids (reference vs each method on the same test conditions), value histograms, energy
spectra and residual maps (from the samples saved next to the records, ``--save-samples``).
"""

from __future__ import annotations

import base64
import html
import io
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pcgbench.leaderboard.figures import (
    cost_figure,
    histogram_figure,
    loss_figure,
    qr_figure,
    residual_figure,
    sample_grid_figure,
    spectrum_figure,
)
from pcgbench.leaderboard.model import task_table
from pcgbench.leaderboard.render import table_html
from pcgbench.leaderboard.tables import group_records
from pcgbench.registry import TASKS
from pcgbench.results.layout import samples_path
from pcgbench.results.record import RunRecord
from pcgbench.runtime.log import printable

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}
th,td{border-bottom:1px solid #ccc;padding:.25em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}
td.best{font-weight:bold;background:#eef6ee}
.figs{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:.5em 1em;
align-items:start}
figure{margin:.5em 0}
figure.wide{grid-column:1/-1}
figcaption{font-size:.85em;color:#555}
img{max-width:100%;height:auto}
.note{color:#8a5a00}
"""


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _figure(draw: Callable[[], Any], caption: str, wide: bool = False) -> str:
    """A <figure> with the PNG that ``draw()`` returns (``wide``: the full width of the
    page), or '' when there is nothing to draw (``draw`` returns None); a figure that
    fails (a record or samples file whose content does not fit) is left out with a
    warning, the rest of the report is kept."""
    import warnings

    try:
        fig = draw()
    except Exception as exc:  # noqa: BLE001 - one bad input must not take the report down
        import matplotlib.pyplot as plt

        plt.close("all")
        warnings.warn(f"report figure {caption[:60]!r} left out: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''}", stacklevel=2)
        return f'<p class="note">figure left out ({html.escape(type(exc).__name__)})</p>'
    if fig is None:
        return ""
    cls = ' class="wide"' if wide else ""
    return (f'<figure{cls}><img alt="{html.escape(caption)}" src="data:image/png;base64,'
            f'{_png(fig)}"><figcaption>{html.escape(caption)}</figcaption></figure>')


def _samples_file_problem(path: str) -> str | None:
    """Why a record's ``samples_file`` cannot be opened as one (it is missing, a
    directory, a device, a FIFO or a socket: never opened, so a FIFO cannot hang the
    report), or None for a regular file."""
    try:
        p = Path(path)
        if not p.exists():
            return "does not exist"
        if p.is_dir():
            return "is a directory"
        if not p.is_file():
            return "is not a regular file (a device, FIFO or socket)"
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte, no permission
        return f"cannot be examined ({type(exc).__name__})"
    return None


def _samples_path(record: Mapping[str, Any]) -> str | None:
    """The record's ``samples_file``, or the one beside the record where that is not at
    hand (moved with its record: a copied results dir, the published set)."""
    rec = RunRecord.from_json(record)
    path = rec.samples_file
    beside = (str(samples_path(rec.path))
              if rec.path and str(rec.path).endswith(".json") else None)
    if beside and (not path or _samples_file_problem(path)) and Path(beside).is_file():
        return beside
    return path


def _has_samples(record: Mapping[str, Any]) -> bool:
    """Whether a record's samples file (or one moved beside it) is a regular file."""
    path = _samples_path(record)
    return bool(path) and _samples_file_problem(path) is None


def _samples(record: Mapping[str, Any], problems: list[str] | None = None
             ) -> dict[str, np.ndarray] | None:
    """The record's saved samples (``samples``, ``reference`` [n, C, *spatial] of one
    shape, optional ``cond``), or None; a samples file that is missing, not a regular
    file, unreadable or malformed is skipped, named in a warning and appended to
    ``problems`` (the report names it under the table)."""
    path = _samples_path(record)
    if not path:
        return None
    import warnings

    problem = _samples_file_problem(path)
    out: dict[str, np.ndarray] = {}
    if problem is None:
        import h5py

        try:
            with h5py.File(path, "r") as f:
                out = {k: np.asarray(f[k]) for k in ("samples", "reference", "cond") if k in f}
            problem = ("lacks 'samples' or 'reference'"
                       if not {"samples", "reference"} <= set(out)
                       else "samples and reference differ in shape"
                       if out["samples"].shape[1:] != out["reference"].shape[1:]
                       else "has no rows or no field axes" if out["samples"].ndim < 3
                       or not len(out["samples"]) or not len(out["reference"])
                       else "is not numeric" if not all(np.issubdtype(a.dtype, np.number)
                                                        for a in out.values()) else None)
        except Exception as exc:  # noqa: BLE001 - corrupt HDF5, wrong kind of file, ...
            problem = f"is unreadable ({type(exc).__name__})"
    if problem:
        warnings.warn(f"skipping samples file {path}: {problem}", stacklevel=2)
        if problems is not None:
            problems.append(f"samples file {path} {problem}: its figures are left out")
        return None
    return out


def task_section(task: str, preset: str, by_method: Mapping[str, list[RunRecord]],
                 records: list[RunRecord], sanity: bool = True) -> str:
    order = tuple(TASKS.get(task).metrics) if task in TASKS else ()
    table = task_table(records, task, preset, groups={(task, preset): by_method},
                       sanity=sanity)
    assert table is not None
    mean = table.mean
    parts = [f'<h2 id="{html.escape(task)}-{html.escape(preset)}">{html.escape(task)} '
             f"(preset {html.escape(preset)})</h2>", table_html(table)]
    for line in table.notes + table.remarks:
        parts.append(f'<p class="note">{html.escape(line)}</p>')
    from pcgbench.leaderboard.sanity import is_reference

    methods = [m for m in mean.columns if not is_reference(m)]
    headline = getattr(TASKS.lookup(task), "headline", None)
    quality = next((r for r in (headline, "wd", "re") if r and r in mean.index),
                   order[0] if order else None)

    saved: dict[str, dict[str, np.ndarray]] = {}
    for m in methods:
        bad: list[str] = []
        # the first seed whose samples are at hand (the published set ships one per cell)
        with_file = [r for r in by_method[m] if _has_samples(r)] or by_method[m][:1]
        if (s := _samples(with_file[0], bad)) is not None:
            saved[m] = s
        # named under the table, as on stderr
        parts += [f'<p class="note">{html.escape(printable(f"{m}: {line}"))}</p>'
                  for line in bad]
    reference = next(iter(saved.values()))["reference"] if saved else None
    if reference is not None:  # one grid: every method's fields of the reference's shape
        saved = {m: s for m, s in saved.items()
                 if s["samples"].shape[1:] == reference.shape[1:]}

    spec = TASKS.get(task)(preset=preset, progress=False).spec if task in TASKS else None
    # unconditional tasks: a column's sample is an independent draw, not the test row's
    unconditional = spec is not None and spec.unconditional
    rows = {"reference": reference, **{m: s["samples"] for m, s in saved.items()}}

    n_channels = 0 if reference is None else reference.shape[1]
    channels = [spec.channel_names[c] if spec is not None and c < len(spec.channel_names)
                else f"channel {c}" for c in range(n_channels)]

    grid = ("samples ({}): the first test rows and each method's first draws (unconditional "
            "task: a draw is an independent sample, not a reconstruction of the row above "
            "it)" if unconditional else
            "samples ({}): the same first test conditions, reference vs methods")
    figs = [
        _figure(lambda: cost_figure(mean, methods, quality),
                f"quality vs cost: {quality} against seconds per sample (log axes), NFE in "
                "brackets"),
        _figure(lambda: loss_figure(by_method, methods),
                "training-loss curves (each method's own objective)"),
        *(_figure(lambda c=c, name=name: sample_grid_figure(rows, c, name, task, unconditional),
                  grid.format(name) + ", one colour scale (the reference's range)", wide=True)
          for c, name in enumerate(channels)),
        _figure(lambda: histogram_figure(reference, saved, channels),
                "value histograms of the saved samples, one panel per channel",
                wide=n_channels > 2),
        _figure(lambda: spectrum_figure(reference, saved, channels),
                "energy spectra (radially averaged), one panel per channel",
                wide=n_channels > 2),
        _figure(lambda: residual_figure(task, preset, rows, saved),
                "log10 |evaluator residual| of the first test condition: the real field "
                "(reference: the evaluator's floor) and each method's sample, one colour scale",
                wide=True),
        _figure(lambda: qr_figure(rows),
                "Q-R joint PDFs of the velocity gradient (each set normalized by its own "
                "<Q_W>, the qr_* metrics' statistic; dashed: the Vieillefosse line)", wide=True),
    ]
    parts.append('<div class="figs">' + "".join(f for f in figs if f) + "</div>")
    return "\n".join(parts)


def build_report(records: list[RunRecord], out: Path, task: str | None = None,
                 preset: str | None = None, variants: bool = False, sanity: bool = True
                 ) -> tuple[Path, float]:
    """Write ``out/report.html`` (``variants``: variant columns too, each its own;
    ``sanity``: the sanity rows' columns); returns (path, seconds taken)."""
    t0 = time.perf_counter()
    groups = group_records(records, variants=variants)
    keys = sorted(k for k in groups if task in (None, k[0]) and preset in (None, k[1]))
    sections = [task_section(t, p, groups[(t, p)], records, sanity) for t, p in keys]
    toc = "".join(f'<li><a href="#{html.escape(t)}-{html.escape(p)}">{html.escape(t)} '
                  f"({html.escape(p)})</a></li>" for t, p in keys)
    page = ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>pcgbench report</title><link rel=\"icon\" href=\"data:,\">"
            f"<style>{_CSS}</style></head><body><h1>pcgbench report</h1>"
            f"<p>{len(records)} run record(s); generated {time.strftime('%Y-%m-%d %H:%M')}"
            "</p>"
            f"<ul>{toc}</ul>{''.join(sections)}</body></html>")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    from pcgbench.results.files import atomic_write

    atomic_write(path, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return path, time.perf_counter() - t0
