"""Scoring: every metric of a task on samples against reference fields (each checked
against its declared bounds), the data reference's own metrics (the floor), and a run's
status (``ok`` / ``diverged`` / ``invalid``) from its fit and samples.  Pure functions of
tensors and fit statistics; the evaluation stage of a run (:mod:`pcgbench.stages.evaluate`),
the data floor and sanity rows (:mod:`pcgbench.stages.record`) and ``tune`` score with
them."""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

from pcgbench.errors import PcgError
from pcgbench.method import FitStats, Method
from pcgbench.metric import MetricContext
from pcgbench.registry import METRICS
from pcgbench.results.record import within_bounds
from pcgbench.task import Task


def metric_value(name: str, value: Any) -> float | None:
    """A metric's result as a float, else a one-line :class:`PcgError` naming the metric:
    a number (Python, NumPy, or a one-element tensor/array) that fits a float and lies in
    the metric's declared ``bounds``.  NaN is kept (tables show ``nan``), except from a
    metric whose NaN means "does not apply" (``Metric.nan_means_not_applicable``): None,
    shown as '–'."""
    import numpy as np

    what = f"metric {name!r} returned"
    if torch.is_tensor(value) or isinstance(value, np.ndarray):
        if value.numel() if torch.is_tensor(value) else value.size != 1:
            raise PcgError(f"{what} an array of shape {tuple(value.shape)}; expected one number")
        value = value.reshape(()).item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PcgError(f"{what} a {type(value).__name__} ({str(value)[:40]!r}); expected a "
                       "number")
    try:
        out = float(value)
    except OverflowError:
        raise PcgError(f"{what} an integer of {len(str(abs(value)))} digits, which overflows "
                       "a float") from None
    cls = METRICS.get(name)
    if math.isnan(out) and getattr(cls, "nan_means_not_applicable", False):
        return None
    lo, hi = getattr(cls, "bounds", (-math.inf, math.inf))
    if not math.isnan(out) and not within_bounds(out, (lo, hi)):
        raise PcgError(f"{what} {out:.6g}, outside its declared range [{lo:g}, {hi:g}]")
    return out


def evaluate(task: Task, samples: torch.Tensor, reference: torch.Tensor,
             cond: torch.Tensor | None, reference_cond: torch.Tensor | None,
             metrics: tuple[str, ...] | None = None) -> dict[str, float | None]:
    """Every metric of ``task`` (or ``metrics``) on ``samples`` vs ``reference`` (+ the
    non-finite and blow-up fractions); a metric that raises or returns anything but an
    in-range number is a one-line :class:`PcgError` naming it."""
    from pcgbench.metric import sharing
    from pcgbench.sample_health import blowup_fraction, nonfinite_fraction

    ctx = MetricContext(task=task, cond=cond, reference_cond=reference_cond)
    out: dict[str, float | None] = {}
    # the same two tensor objects for every metric, so ctx.cache and the metrics' shared
    # helpers (finite rows, float64 copies) share work
    x, ref = samples.detach().cpu(), reference.detach().cpu()
    with sharing():
        _evaluate_metrics(task.metrics if metrics is None else metrics, x, ref, ctx, out)
    out["nonfinite_fraction"] = nonfinite_fraction(x)
    out["blowup_fraction"] = blowup_fraction(x, ref)
    return out


def _evaluate_metrics(names: tuple[str, ...], x: torch.Tensor, ref: torch.Tensor,
                      ctx: MetricContext, out: dict[str, float | None]) -> None:
    """Every metric in ``names`` into ``out`` (see :func:`evaluate`)."""
    for name in names:
        metric = METRICS.get(name)()
        try:
            with torch.no_grad():
                value = metric(x, ref, ctx)
        except (PcgError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - a (plugin) metric's own failure
            text = str(exc).strip()
            raise PcgError(f"metric {name!r} failed: {type(exc).__name__}: "
                           f"{text.splitlines()[0] if text else ''}") from exc
        out[name] = metric_value(name, value)


#: a fit whose loss ends this many times above its lowest running median diverged (the
#: cpu runs so far: at most 191 x for a healthy fit, Drifting on dynamic stall, whose
#: loss is a squared drift norm; 7,000 x for Shortcut there, which blew up in its last
#: 35 updates, 3.8e4 -> 1.7e10)
LOSS_GROWTH_LIMIT = 1e3


def loss_growth(losses: list[float]) -> float:
    """The median of the last window of losses over the lowest median of any window
    (window: 1/20 of the updates, at least 5): robust to single spikes and to noisy
    minibatch losses; 1 for a fit that ends at its best, 0 when there are too few."""
    n = len(losses)
    w = max(5, n // 20)
    if n < 2 * w:
        return 0.0
    import numpy as np

    windows = np.lib.stride_tricks.sliding_window_view(np.asarray(losses, float), w)
    medians = np.median(windows, axis=1)
    lowest = float(medians.min())
    if lowest <= 0:  # a loss that reaches 0 (or is signed) has no growth ratio
        return 0.0
    return float(medians[-1]) / lowest


def config_problem(config: Any) -> str | None:
    """Why a run of ``config`` is recorded ``invalid`` whatever it produces (a config that
    trains or samples nothing), or None; ``show-config`` says the same."""
    for name in (getattr(config, "budget_field", None), "steps"):
        if name and getattr(config, name, None) == 0:
            return f"the config trains or samples nothing ({name}=0)"
    return None


def run_status(method: Method, fit_stats: FitStats, metrics: dict[str, float]
               ) -> tuple[str, str | None]:
    """``("ok" | "diverged" | "invalid", reason)`` of a finished run.  A run whose config
    trains or samples nothing, whose training loss is non-finite or diverged
    (:func:`loss_growth` over ``LOSS_GROWTH_LIMIT``), or any of whose samples
    is non-finite or blown up (``blowup_fraction``) is recorded as such and never scored
    as a success (the leaderboard leaves it out of the means and says so)."""
    problem = config_problem(method.config)
    if problem is not None:
        return "invalid", problem
    if any(not math.isfinite(v) for v in fit_stats.losses):
        return "diverged", "the training loss became non-finite"
    growth = loss_growth(fit_stats.losses)
    if growth > LOSS_GROWTH_LIMIT:
        return "diverged", (f"the training loss diverged: it ended {growth:.3g} x above its "
                            f"lowest running median (limit {LOSS_GROWTH_LIMIT:g} x)")
    frac = metrics.get("nonfinite_fraction")
    if frac is not None and (math.isnan(frac) or frac > 0):
        return "diverged", f"{frac:.1%} of the samples are non-finite"
    blown = metrics.get("blowup_fraction")
    if blown is not None and blown > 0:
        from pcgbench.sample_health import BLOWUP_FACTOR

        return "diverged", (f"{blown:.1%} of the samples blew up (|x| > {BLOWUP_FACTOR:g} x "
                            "the test data's largest magnitude)")
    return "ok", None


def reference_metrics(task: Task) -> tuple[dict[str, float], dict[str, float], str]:
    """``(means, stds, note)``: each metric of the task's data reference against the
    test split (:meth:`Task.data_reference`), averaged over its
    :meth:`Task.reference_draws` draws (stds over the draws; empty for one draw)."""
    draws = task.reference_draws()
    runs = []
    for d in range(draws):
        # one draw: called without it, as a plug-in's data_reference(self) may be written
        ref, target, note = task.data_reference(d) if draws > 1 else task.data_reference()
        runs.append(evaluate(task, ref.x, target.x, ref.cond, target.cond))
    if draws == 1:
        return runs[0], {}, note
    means, stds = mean_over_draws(runs)
    return means, stds, note


def mean_over_draws(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, float]]:
    """Per metric over evaluations of several draws: the mean of the finite values (else
    the first draw's value) and, with two or more finite values, their std."""
    means: dict[str, Any] = {}
    stds: dict[str, float] = {}
    for name in runs[0]:
        vals = [r[name] for r in runs if isinstance(r.get(name), int | float)]
        finite = [float(v) for v in vals if math.isfinite(v)]
        means[name] = statistics.fmean(finite) if finite else runs[0].get(name)
        if len(finite) > 1:
            stds[name] = statistics.stdev(finite)
    return means, stds
