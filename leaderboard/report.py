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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pcgbench.leaderboard import (
    group_records,
)
from pcgbench.leaderboard.tables import (
    LOADED_MARK,
    best_column,
    fmt_number,
    method_of,
    row_label,
)
from pcgbench.record import RunRecord
from pcgbench.registry import TASKS

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
            loaded = (row, m) in mean.attrs.get("loaded", ())
            s += LOADED_MARK if loaded and not math.isnan(mean.loc[row, m]) else ""
            cls = ' class="best"' if m == best else ""
            cells.append(f"<td{cls}>{html.escape(s)}</td>")
        rows.append(f"<tr><td>{html.escape(row_label(row))}</td>{''.join(cells)}</tr>")
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


def _samples(record: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
    """The record's saved samples (``samples``, ``reference`` [n, C, *spatial] of one
    shape, optional ``cond``), or None; an unreadable or malformed file is skipped and
    named in a warning."""
    path = RunRecord.from_json(record).samples_file
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


def axis_names(task: str, ndim: int) -> tuple[str, ...]:
    """The names of a field's ``ndim`` axes: the task's ``field_axes`` (e.g. ``("t",
    "x")``), else ``x, y, z`` (arrays indexed ``ij``)."""
    cls = TASKS.lookup(task)
    names = getattr(cls, "field_axes", None) if cls is not None else None
    if names is not None and len(names) == ndim:
        return tuple(names)
    return ("x", "y", "z")[:ndim] if ndim <= 3 else tuple(f"axis {i}" for i in range(ndim))


def plane(a: np.ndarray, names: tuple[str, ...]) -> tuple[np.ndarray, str, str]:
    """(image, vertical axis name, horizontal axis name) of one field ``a [*spatial]``
    with two or more axes: the plane of ``x`` and ``y`` when the field has both (else
    ``x`` and the axis before it, else its last two axes), other axes at their middle
    index; ``x`` runs horizontally (the image's last axis), the other axis upward
    (``origin="lower"``)."""
    idx = {n: i for i, n in enumerate(names)}
    if "x" in idx and "y" in idx:
        v, h = idx["y"], idx["x"]
    elif "x" in idx:
        h = idx["x"]
        v = h - 1 if h > 0 else h + 1
    else:
        v, h = a.ndim - 2, a.ndim - 1
    sl = tuple(slice(None) if i in (v, h) else a.shape[i] // 2 for i in range(a.ndim))
    img = a[sl]
    return (img if v < h else img.T), names[v], names[h]


def _log_axis(ax: Any, which: str, values: list[float]) -> None:
    """A log axis padded around ``values`` with readable tick labels: decades, plus 2 and
    5 times them when the range spans less than two decades, every integer multiple
    under one decade; no minor labels."""
    from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter

    lo, hi = min(values), max(values)
    pad = max(hi / lo, 1.0) ** 0.08 * 1.3
    getattr(ax, f"set_{which}scale")("log")
    getattr(ax, f"set_{which}lim")(lo / pad, hi * pad)
    axis = ax.xaxis if which == "x" else ax.yaxis
    decades = math.log10(hi * pad / (lo / pad))
    subs = (1.0,) if decades >= 2 else (1.0, 2.0, 5.0) if decades >= 0.7 else tuple(
        float(s) for s in range(1, 10))
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(LogFormatterSciNotation(labelOnlyBase=False))
    axis.set_minor_formatter(NullFormatter())


def _spectrum(x: np.ndarray, c: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Radially averaged power of channel ``c`` over the last (up to 2) spatial axes, mean
    over samples: (|k| shells, power)."""
    a = x[:, c]
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


def task_section(task: str, preset: str, by_method: Mapping[str, list[RunRecord]],
                 records: list[RunRecord]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pcgbench.leaderboard.model import task_table

    order = tuple(TASKS.get(task).metrics) if task in TASKS else ()
    table = task_table(records, task, preset, groups={(task, preset): by_method})
    assert table is not None
    mean, std, seeds, reported = table.mean, table.std, table.seeds, table.reported
    parts = [f'<h2 id="{html.escape(task)}-{html.escape(preset)}">{html.escape(task)} '
             f"(preset {html.escape(preset)})</h2>", table_html(mean, std, seeds, reported)]
    for line in table.notes + table.remarks:
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
        fig, ax = plt.subplots(figsize=(5.0, 3.6))
        for i, (m, x, y, nfe) in enumerate(pts):  # names in a legend: none runs off
            label = m if math.isnan(nfe) else f"{m} (NFE {nfe:.0f})"
            ax.scatter(x, y, s=45, marker="osD^vP*Xh<>"[i % 11], label=label, zorder=3)
        _log_axis(ax, "x", [p[1] for p in pts])
        _log_axis(ax, "y", [p[2] for p in pts])
        ax.grid(True, which="major", alpha=0.3)
        ax.tick_params(axis="both", which="both", labelsize=9)
        ax.set_xlabel("time / sample [s] (log scale)", fontsize=10)
        ax.set_ylabel(f"{quality} (log scale; lower is better)", fontsize=10)
        ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False,
                  ncol=2)
        return fig

    def loss_plot() -> Any:
        fig, ax = plt.subplots(figsize=(5.0, 3.6))
        drawn = False
        for m in methods:
            curve = RunRecord.from_json(by_method[m][0]).training.get("loss_curve")
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

    spec = TASKS.get(task)(preset=preset, progress=False).spec if task in TASKS else None
    # unconditional tasks: a column's sample is an independent draw, not the test row's
    unconditional = spec is not None and spec.unconditional
    rows = {"reference": reference, **{m: s["samples"] for m, s in saved.items()}}

    n_channels = 0 if reference is None else reference.shape[1]
    channels = [spec.channel_names[c] if spec is not None and c < len(spec.channel_names)
                else f"channel {c}" for c in range(n_channels)]

    def grid_plot(c: int) -> Any:
        """Channel ``c`` of the first rows of every sample set (one figure per channel:
        methods can agree on one channel and differ on another, e.g. Darcy's p and K)."""
        if reference is None:
            return None
        channel = channels[c]
        cols = min(3, *(len(a) for a in rows.values()))
        names = axis_names(task, reference.ndim - 2)
        # one colour scale for every panel: the reference's range over the shown fields
        shown = np.concatenate([reference[j, c].ravel() for j in range(cols)])
        lo, hi = float(np.nanmin(shown)), float(np.nanmax(shown))
        fig, axes = plt.subplots(len(rows), cols, figsize=(2.6 * cols + 1.4, 2.1 * len(rows)),
                                 squeeze=False, constrained_layout=True)
        for i, (name, arr) in enumerate(rows.items()):
            for j in range(cols):
                ax = axes[i][j]
                field = np.nan_to_num(arr[j, c], nan=0.0)
                if field.ndim == 1:  # a 1-D field: a line on the shared value range
                    ax.plot(field, lw=1)
                    ax.set_ylim(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo))
                    vname, hname = channel, names[0]
                else:
                    img, vname, hname = plane(field, names)
                    im = ax.imshow(img, origin="lower", aspect="auto", cmap="RdBu_r",
                                   vmin=lo, vmax=hi, interpolation="nearest")
                ax.tick_params(labelsize=8)
                if i == 0:
                    ax.set_title(f"test row {j + 1} / draw {j + 1}" if unconditional
                                 else f"test condition {j + 1}", fontsize=9)
                if i == len(rows) - 1:
                    ax.set_xlabel(f"{hname} [grid index]", fontsize=9)
                if j == 0:
                    ax.set_ylabel(f"{name}\n{vname} [grid index]", fontsize=9)
            if reference.ndim > 3:
                fig.colorbar(im, ax=list(axes[i]), label=f"{channel} (one scale)",
                             extend="both", shrink=0.9).ax.tick_params(labelsize=8)
        return fig

    def channel_axes() -> tuple[Any, list[Any]]:
        """One panel per channel (methods can agree on one channel and not another)."""
        fig, axes = plt.subplots(1, n_channels, figsize=(4.2 * n_channels, 3.6),
                                 squeeze=False)
        return fig, list(axes[0])

    def hist_plot() -> Any:
        if reference is None:
            return None
        fig, axes = channel_axes()
        for c, ax in enumerate(axes):
            lo, hi = np.percentile(reference[:, c], [0.5, 99.5])
            pad = 0.2 * (hi - lo) if hi > lo else 0.5 * max(abs(lo), 1.0)  # constant channel
            bins = np.linspace(lo - pad, hi + pad, 60)
            ax.hist(reference[:, c].ravel(), bins=bins, density=True, histtype="step",
                    lw=2, color="k", label="reference")
            for m, s in saved.items():
                ax.hist(np.nan_to_num(s["samples"][:, c]).ravel(), bins=bins, density=True,
                        histtype="step", label=m)
            ax.set_xlabel(f"value ({channels[c]})")
            ax.set_ylabel("density")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        return fig

    def spectrum_plot() -> Any:
        if reference is None or reference.ndim < 3:
            return None
        fig, axes = channel_axes()
        for c, ax in enumerate(axes):
            k, p = _spectrum(reference, c)
            ax.loglog(k, p, "k", lw=2, label="reference")
            for m, s in saved.items():
                if np.isfinite(s["samples"]).all():
                    k, p = _spectrum(s["samples"], c)
                    ax.loglog(k, p, lw=1, label=m)
            ax.set_xlabel("|k|")
            ax.set_ylabel(f"power ({channels[c]})")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        return fig

    def residual_plot() -> Any:
        if not saved or task not in TASKS:
            return None
        import torch

        t = TASKS.get(task)(preset=preset, progress=False)
        maps = {}
        for m, arr in rows.items():  # the reference first: the evaluator's floor
            try:
                s = saved.get(m, next(iter(saved.values())))
                cond = None if "cond" not in s else torch.as_tensor(s["cond"][:1])
                r = t.residual(torch.as_tensor(arr[:1]).double(), cond)
            except Exception:  # noqa: BLE001 - a task without a field residual: no panel
                return None
            a = np.log10(r[0].abs().numpy() + 1e-30)
            while a.ndim > reference.ndim - 2:  # [components, *spatial]: their largest
                a = a.max(0)
            maps[m] = a
        first = next(iter(maps.values()))
        if first.ndim < 2:
            return None
        names = axis_names(task, first.ndim)
        planes = {m: plane(a, names) for m, a in maps.items()}
        hi = max(float(np.nanmax(p[0])) for p in planes.values())
        lo = max(min(float(np.nanpercentile(p[0], 1)) for p in planes.values()), hi - 8)
        fig, axes = plt.subplots(1, len(maps), figsize=(2.6 * len(maps) + 1.2, 2.6),
                                 squeeze=False, constrained_layout=True)
        for j, (ax, (m, (img, vname, hname))) in enumerate(
                zip(axes[0], planes.items(), strict=True)):
            im = ax.imshow(img, origin="lower", aspect="auto", cmap="magma", vmin=lo, vmax=hi,
                           interpolation="nearest")
            ax.set_title(m, fontsize=9)
            ax.tick_params(labelsize=8)
            ax.set_xlabel(f"{hname} [grid index]", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{vname} [grid index]", fontsize=9)
        fig.colorbar(im, ax=list(axes[0]), label="log10 |evaluator residual|", extend="both",
                     shrink=0.9).ax.tick_params(labelsize=8)
        return fig

    def qr_plot() -> Any:
        """Q-R joint PDFs of the velocity gradient (3-D velocity fields only)."""
        if reference is None or reference.ndim != 5 or reference.shape[1] < 3:
            return None
        import torch

        from pcgbench.metrics.velocity_gradient import Q_RANGE, R_RANGE, qr_histogram

        bins = 40
        dr, dq = (R_RANGE[1] - R_RANGE[0]) / bins, (Q_RANGE[1] - Q_RANGE[0]) / bins
        pdfs = {}
        for m, arr in rows.items():
            u = torch.as_tensor(np.asarray(arr[:, :3], dtype=np.float64))
            if not bool(torch.isfinite(u).all()):
                continue
            h = qr_histogram(u, bins).numpy()
            with np.errstate(divide="ignore", invalid="ignore"):
                logp = np.where(h > 0, np.log10(h / (dr * dq)), np.nan)
            logp[[0, -1], :] = np.nan  # the edge bins also hold the clipped mass
            logp[:, [0, -1]] = np.nan
            pdfs[m] = logp
        finite = [p for p in pdfs.values() if np.isfinite(p).any()]
        if "reference" not in pdfs or not finite:
            return None
        hi = math.ceil(2 * max(float(np.nanmax(p)) for p in finite)) / 2
        levels = np.linspace(hi - 4.0, hi, 9)  # four decades in half-decade steps
        rc = R_RANGE[0] + dr * (np.arange(bins) + 0.5)
        qc = Q_RANGE[0] + dq * (np.arange(bins) + 0.5)
        rl = np.linspace(*R_RANGE, 401)
        fig, axes = plt.subplots(1, len(pdfs), figsize=(2.9 * len(pdfs) + 1.2, 3.0),
                                 squeeze=False, constrained_layout=True, sharey=True)
        for j, (ax, (m, logp)) in enumerate(zip(axes[0], pdfs.items(), strict=True)):
            cs = ax.contourf(rc, qc, np.clip(logp, levels[0], None).T, levels=levels,
                             cmap="viridis", extend="min")
            ax.plot(rl, -3.0 * np.cbrt(rl**2 / 4.0), "k--", lw=0.8)  # Vieillefosse line
            ax.axhline(0, color="grey", lw=0.5)
            ax.axvline(0, color="grey", lw=0.5)
            ax.set_title(m, fontsize=9)
            ax.tick_params(labelsize=8)
            ax.set_xlabel("R* = R / <Q_W>^(3/2)", fontsize=9)
            if j == 0:
                ax.set_ylabel("Q* = Q / <Q_W>", fontsize=9)
        fig.colorbar(cs, ax=list(axes[0]), label="log10 joint PDF",
                     shrink=0.9).ax.tick_params(labelsize=8)
        return fig

    figs = [
        _figure(cost_plot, f"quality vs cost: {quality} against seconds per sample (log "
                           "axes), NFE in brackets"),
        _figure(loss_plot, "training-loss curves (each method's own objective)"),
        *(_figure(lambda c=c: grid_plot(c),
                  (f"samples ({name}): the first test rows and each method's first draws "
                   "(unconditional task: a draw is an independent sample, not a "
                   "reconstruction of the row above it)" if unconditional else
                   f"samples ({name}): the same first test conditions, reference vs "
                   "methods") + ", one colour scale (the reference's range)", wide=True)
          for c, name in enumerate(channels)),
        _figure(hist_plot, "value histograms of the saved samples, one panel per channel",
                wide=n_channels > 2),
        _figure(spectrum_plot, "energy spectra (radially averaged), one panel per channel",
                wide=n_channels > 2),
        _figure(residual_plot, "log10 |evaluator residual| of the first test condition: "
                               "the real field (reference: the evaluator's floor) and each "
                               "method's sample, one colour scale", wide=True),
        _figure(qr_plot, "Q-R joint PDFs of the velocity gradient (each set normalized by "
                         "its own <Q_W>, the qr_* metrics' statistic; dashed: the "
                         "Vieillefosse line)", wide=True),
    ]
    parts.append('<div class="figs">' + "".join(f for f in figs if f) + "</div>")
    return "\n".join(parts)


def build_report(records: list[RunRecord], out: Path, task: str | None = None,
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
