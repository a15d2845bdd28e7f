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
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pcgbench.leaderboard import (
    backbone_notes,
    failed_notes,
    group_records,
    reported_table,
    summary_frame,
)
from pcgbench.leaderboard.tables import LOADED_MARK, best_column, fmt_number, method_of
from pcgbench.registry import TASKS

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}
th,td{border-bottom:1px solid #ccc;padding:.25em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}
td.best{font-weight:bold;background:#eef6ee}
figure{display:inline-block;margin:.5em;vertical-align:top}
figcaption{font-size:.85em;color:#555;max-width:560px}
img{max-width:560px}
.note{color:#8a5a00}
"""


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _figure(draw: Callable[[], Any], caption: str) -> str:
    """A <figure> with the PNG that ``draw()`` returns, or '' when there is nothing to
    draw (``draw`` returns None); a figure that fails (a record or samples file whose
    content does not fit) is left out with a warning, the rest of the report is kept."""
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
    return (f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,'
            f'{_png(fig)}"><figcaption>{html.escape(caption)}</figcaption></figure>')


def table_html(mean: pd.DataFrame, std: pd.DataFrame, seeds: dict[str, int],
               reported: pd.DataFrame | None) -> str:
    head = "".join(f"<th>{html.escape(_col(m, seeds))}</th>" for m in mean.columns)
    rows = []
    for row in mean.index:
        best = best_column(mean, row)
        cells = []
        for m in mean.columns:
            s = fmt_number(mean.loc[row, m])
            if not math.isnan(std.loc[row, m]):
                s += " ± " + fmt_number(std.loc[row, m])
            s += LOADED_MARK if (row, m) in mean.attrs.get("loaded", ()) else ""
            cls = ' class="best"' if m == best else ""
            cells.append(f"<td{cls}>{html.escape(s)}</td>")
        rows.append(f"<tr><td>{html.escape(row)}</td>{''.join(cells)}</tr>")
    out = (f'<table class="leaderboard"><thead><tr><th>metric</th>{head}</tr></thead>'
           f"<tbody>{''.join(rows)}</tbody></table>")
    if reported is not None and not reported.empty:
        rhead = "".join(f"<th>paper: {html.escape(m)}</th>" for m in reported.columns)
        rrows = "".join(
            f"<tr><td>{html.escape(r)}</td>"
            + "".join(f"<td>{html.escape(fmt_number(reported.loc[r, m]))}</td>"
                      for m in reported.columns) + "</tr>" for r in reported.index)
        out += ("<p>Reported in the paper (authors' data and GPU; not measured here):</p>"
                f'<table class="reported"><thead><tr><th>metric</th>{rhead}</tr></thead>'
                f"<tbody>{rrows}</tbody></table>")
    return out


def _col(m: str, seeds: dict[str, int]) -> str:
    return m.replace("data", "data (reference)", 1) if method_of(m) == "data" \
        else f"{m} (n={seeds[m]})"


def _samples(record: dict) -> dict[str, np.ndarray] | None:
    """The record's saved samples (``samples``, ``reference`` [n, C, *spatial] of one
    shape, optional ``cond``), or None; an unreadable or malformed file is skipped and
    named in a warning."""
    path = record.get("samples_file")
    if not isinstance(path, str) or not Path(path).is_file():
        return None
    import warnings

    import h5py

    try:
        with h5py.File(path, "r") as f:
            out = {k: np.asarray(f[k]) for k in ("samples", "reference", "cond") if k in f}
        problem = ("lacks 'samples' or 'reference'" if not {"samples", "reference"} <= set(out)
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
        return None
    return out


def _field_image(ax: Any, x: np.ndarray) -> None:
    """Channel 0 of one field: an image (2-D, or the middle slice of 3-D) or a line."""
    a = x[0]
    while a.ndim > 2:
        a = a[a.shape[0] // 2]
    if a.ndim == 2:
        ax.imshow(a, cmap="RdBu_r", aspect="auto")
    else:
        ax.plot(a)
    ax.set_xticks([])
    ax.set_yticks([])


def _spectrum(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Radially averaged power of channel 0 over the last (up to 2) spatial axes, mean
    over samples: (|k| shells, power)."""
    a = x[:, 0]
    axes = tuple(range(1, a.ndim))[-2:]
    p = np.abs(np.fft.fftn(a - a.mean(0), axes=axes)) ** 2
    p = p.mean(axis=tuple(i for i in range(p.ndim) if i not in axes))
    freqs = np.meshgrid(*[np.fft.fftfreq(a.shape[i], 1 / a.shape[i]) for i in axes],
                        indexing="ij")
    k = np.rint(np.sqrt(sum(f ** 2 for f in freqs))).astype(int)
    power = np.bincount(k.ravel(), p.ravel()) / np.maximum(np.bincount(k.ravel()), 1)
    shells = np.arange(len(power))
    keep = (shells > 0) & (power > 0)
    return shells[keep], power[keep]


def task_section(task: str, preset: str, by_method: dict[str, list[dict]],
                 records: list[dict]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = tuple(TASKS.get(task).metrics) if task in TASKS else ()
    mean, std, seeds = summary_frame(by_method, order)
    bench = TASKS.get(task).paper_benchmark if task in TASKS else None
    reported = reported_table(bench) if bench else None
    parts = [f'<h2 id="{html.escape(task)}-{html.escape(preset)}">{html.escape(task)} '
             f"(preset {html.escape(preset)})</h2>", table_html(mean, std, seeds, reported)]
    from pcgbench.leaderboard.tables import table_notes

    for line in (table_notes(task, preset, by_method, mean) + backbone_notes(mean, preset)
                 + failed_notes(records, {task}, preset)):
        parts.append(f'<p class="note">{html.escape(line)}</p>')
    methods = [m for m in mean.columns if method_of(m) != "data"]
    quality = next((r for r in ("wd", "re") if r in mean.index), order[0] if order else None)

    def cost_plot() -> Any:
        pts = [(m, mean.loc["time/sample [s]", m], mean.loc[quality, m],
                mean.loc["nfe", m] if "nfe" in mean.index else float("nan"))
               for m in methods if quality is not None]
        pts = [p for p in pts if p[1] > 0 and p[2] > 0 and math.isfinite(p[1] * p[2])]
        if not pts:
            return None
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for m, x, y, nfe in pts:
            ax.scatter(x, y)
            label = m if math.isnan(nfe) else f"{m} (NFE {nfe:.0f})"
            ax.annotate(label, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        # minor labels of a short log range are crowded: small and slanted
        ax.tick_params(axis="both", which="both", labelsize=7)
        ax.tick_params(axis="x", which="both", labelrotation=45)
        ax.set_xlabel("time / sample [s]")
        ax.set_ylabel(quality)
        return fig

    def loss_plot() -> Any:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        drawn = False
        for m in methods:
            curve = (by_method[m][0].get("training") or {}).get("loss_curve")
            if curve:
                steps, vals = zip(*curve, strict=True)
                if all(v > 0 for v in vals):
                    ax.plot(steps, vals, label=m, lw=1)
                    drawn = True
        if not drawn:
            plt.close(fig)
            return None
        ax.set_yscale("log")
        ax.set_xlabel("update")
        ax.set_ylabel("training loss (each method's own objective)")
        ax.legend(fontsize=7)
        return fig

    saved = {m: s for m in methods if (s := _samples(by_method[m][0])) is not None}
    reference = next(iter(saved.values()))["reference"] if saved else None
    if reference is not None:  # one grid: every method's fields of the reference's shape
        saved = {m: s for m, s in saved.items() if s["samples"].shape[1:] == reference.shape[1:]}

    def grid_plot() -> Any:
        if reference is None:
            return None
        cols = min(3, len(reference), *(len(s["samples"]) for s in saved.values()))
        names = ["reference", *saved]
        fig, axes = plt.subplots(len(names), cols, figsize=(2.2 * cols, 1.9 * len(names)),
                                 squeeze=False)
        for i, name in enumerate(names):
            arr = reference if name == "reference" else saved[name]["samples"]
            for j in range(cols):
                _field_image(axes[i][j], arr[j])
            axes[i][0].set_ylabel(name, fontsize=7)
        return fig

    def hist_plot() -> Any:
        if reference is None:
            return None
        fig, ax = plt.subplots(figsize=(5.5, 4))
        lo, hi = np.percentile(reference[:, 0], [0.5, 99.5])
        bins = np.linspace(lo - 0.2 * (hi - lo), hi + 0.2 * (hi - lo), 60)
        ax.hist(reference[:, 0].ravel(), bins=bins, density=True, histtype="step", lw=2,
                color="k", label="reference")
        for m, s in saved.items():
            ax.hist(np.nan_to_num(s["samples"][:, 0]).ravel(), bins=bins, density=True,
                    histtype="step", label=m)
        ax.set_xlabel("value (channel 0)")
        ax.legend(fontsize=7)
        return fig

    def spectrum_plot() -> Any:
        if reference is None or reference.ndim < 3:
            return None
        fig, ax = plt.subplots(figsize=(5.5, 4))
        k, p = _spectrum(reference)
        ax.loglog(k, p, "k", lw=2, label="reference")
        for m, s in saved.items():
            if np.isfinite(s["samples"]).all():
                k, p = _spectrum(s["samples"])
                ax.loglog(k, p, lw=1, label=m)
        ax.set_xlabel("|k|")
        ax.set_ylabel("power (channel 0)")
        ax.legend(fontsize=7)
        return fig

    def residual_plot() -> Any:
        if not saved or task not in TASKS:
            return None
        import torch

        t = TASKS.get(task)(preset=preset, progress=False)
        maps = {}
        for m, s in saved.items():
            try:
                cond = None if "cond" not in s else torch.as_tensor(s["cond"][:1])
                r = t.residual(torch.as_tensor(s["samples"][:1]), cond)
            except Exception:  # noqa: BLE001 - a task without a field residual: no panel
                return None
            a = r[0].abs().numpy()
            while a.ndim > 2:
                a = a[0]
            maps[m] = a
        if not maps or next(iter(maps.values())).ndim != 2:
            return None
        fig, axes = plt.subplots(1, len(maps), figsize=(2.4 * len(maps), 2.2), squeeze=False)
        for ax, (m, a) in zip(axes[0], maps.items(), strict=True):
            ax.imshow(np.log10(a + 1e-12), aspect="auto", cmap="magma")
            ax.set_title(m, fontsize=7)
            ax.set_xticks([])
            ax.set_yticks([])
        return fig

    figs = [
        _figure(cost_plot, f"quality vs cost: {quality} against seconds per sample (log "
                           "axes), NFE in brackets"),
        _figure(loss_plot, "training-loss curves (each method's own objective)"),
        _figure(grid_plot, "samples: the same first test conditions, reference vs methods"),
        _figure(hist_plot, "value histograms of the saved samples"),
        _figure(spectrum_plot, "energy spectra (radially averaged, channel 0)"),
        _figure(residual_plot, "log10 |evaluator residual| of the first saved sample"),
    ]
    parts.append("".join(f for f in figs if f))
    return "\n".join(parts)


def build_report(records: list[dict], out: Path, task: str | None = None,
                 preset: str | None = None) -> tuple[Path, float]:
    """Write ``out/report.html``; returns (path, seconds taken)."""
    t0 = time.perf_counter()
    groups = group_records(records)
    keys = sorted(k for k in groups if task in (None, k[0]) and preset in (None, k[1]))
    sections = [task_section(t, p, groups[(t, p)], records) for t, p in keys]
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
    from pcgbench.storage import atomic_write

    atomic_write(path, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return path, time.perf_counter() - t0
