"""The report's figures, one plain function each: quality vs cost, loss curves, sample
grids, value histograms, spectra, evaluator-residual maps and Q-R joint PDFs.  Each returns a
matplotlib figure, or None where it has nothing to draw."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from pcgbench.registry import TASKS
from pcgbench.results.record import RunRecord


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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


def radial_spectrum(x: np.ndarray, c: int = 0) -> tuple[np.ndarray, np.ndarray]:
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



def cost_figure(mean: pd.DataFrame, methods: list[str], quality: str | None) -> Any:
    """Quality vs cost: ``quality`` against seconds per sample (log axes), NFE in the legend."""
    plt = _pyplot()
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


def loss_figure(by_method: Mapping[str, list[RunRecord]], methods: list[str]) -> Any:
    """Training-loss curves (each method's own objective); None without positive curves."""
    plt = _pyplot()
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


def sample_grid_figure(rows: Mapping[str, np.ndarray], c: int, channel: str, task: str,
                       unconditional: bool) -> Any:
    """Channel ``c`` of the first rows of every sample set (one figure per channel:
    methods can agree on one channel and differ on another, e.g. Darcy's p and K);
    ``rows``: "reference" first, then each method's saved samples."""
    reference = rows["reference"]
    if reference is None:
        return None
    plt = _pyplot()
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


def _channel_axes(n_channels: int) -> tuple[Any, list[Any]]:
    """One panel per channel (methods can agree on one channel and not another)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, n_channels, figsize=(4.2 * n_channels, 3.6),
                             squeeze=False)
    return fig, list(axes[0])


def histogram_figure(reference: np.ndarray | None, saved: Mapping[str, dict[str, np.ndarray]],
                     channels: list[str]) -> Any:
    """Value histograms of the saved samples, one panel per channel."""
    if reference is None:
        return None
    fig, axes = _channel_axes(reference.shape[1])
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


def spectrum_figure(reference: np.ndarray | None, saved: Mapping[str, dict[str, np.ndarray]],
                    channels: list[str]) -> Any:
    """Radially averaged energy spectra, one panel per channel."""
    if reference is None or reference.ndim < 3:
        return None
    fig, axes = _channel_axes(reference.shape[1])
    for c, ax in enumerate(axes):
        k, p = radial_spectrum(reference, c)
        ax.loglog(k, p, "k", lw=2, label="reference")
        for m, s in saved.items():
            if np.isfinite(s["samples"]).all():
                k, p = radial_spectrum(s["samples"], c)
                ax.loglog(k, p, lw=1, label=m)
        ax.set_xlabel("|k|")
        ax.set_ylabel(f"power ({channels[c]})")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def residual_figure(task: str, preset: str, rows: Mapping[str, np.ndarray | None],
                    saved: Mapping[str, dict[str, np.ndarray]]) -> Any:
    """log10 |evaluator residual| of the first row of the reference and of each method."""
    reference = rows["reference"]
    if not saved or task not in TASKS or reference is None:
        return None
    plt = _pyplot()
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


def qr_figure(rows: Mapping[str, np.ndarray | None]) -> Any:
    """Q-R joint PDFs of the velocity gradient (3-D velocity fields only)."""
    reference = rows["reference"]
    if reference is None or reference.ndim != 5 or reference.shape[1] < 3:
        return None
    plt = _pyplot()
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
