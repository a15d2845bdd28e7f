"""Sanity rows: fakes scored like the data floor, and whether a metric sees them.

A metric may rank, select or headline on a task only where fields that are *not* the
physics score clearly worse than real data there.  Each fake below is built from the very
pair the ``data (reference)`` column scores (:meth:`Task.data_reference`: the reference
rows and the test target), so a fake's ratio to the floor reads "how much worse than real
data", 1.0 = as good as real data.  Every fake keeps what one family of metrics looks at
and destroys what the physics needs:

========== ============================================================================
noise      per-pixel Gaussian with the train split's per-pixel mean and std (keeps the
           one-point statistics at every pixel; no spatial correlation at all)
shuffle    each reference field with its grid points randomly permuted (one permutation
           per field, shared by its channels): every value right, the structure gone
blur       each reference field smoothed by a Gaussian of ``BLUR_SIGMA`` grid cells along
           every spatial axis (reflecting edges): the large scales right, the fronts and
           small scales gone (a too-smooth field)
phase      each reference field's Fourier amplitudes kept, its phases randomized (per field
           and channel): the power spectrum exactly right, the shocks/vortices gone
gaussian   a Gaussian with the train split's mean and full covariance (sum of the centred
           training fields with N(0, 1/(n-1)) weights): mean, variance and two-point
           correlations right, every higher-order statistic Gaussian
train_copy for each test row the training field with the nearest condition (unconditional:
           a random draw of train): what memorization scores.  On tasks whose floor is
           itself a draw of train it is scored like the floor by construction
========== ============================================================================

``STRUCTURE_FAKES`` (all but ``train_copy``) decide whether a metric *sees structure* on a
task (:func:`verdict`).  Everything here is a function of the task's data and a seed: no
model, no method."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from pcgbench.fields import FieldData
from pcgbench.task import Task

#: the version of the fakes' construction (part of every sanity record's identity)
SANITY_VERSION = 1
#: the seed of every fake's generator (with the draw and the fake's index)
SANITY_SEED = 7_411
#: how many draws of each fake the sanity rows average (at most the floor's draws)
SANITY_DRAWS = 4
#: the smoothing width of ``blur`` in grid cells
BLUR_SIGMA = 1.5
#: a fake is "clearly worse" than the floor when its score is beyond the floor's spread by
#: this many standard deviations AND at least ``SEE_RATIO`` x the floor (both)
SEE_SIGMAS = 3.0
SEE_RATIO = 1.5


@dataclass(frozen=True)
class Fake:
    """One sanity row: its name, what it keeps and destroys (one line each), and its
    builder ``(task, reference, target, generator) -> fields`` (the fields to score
    against ``target``, with the conditions they answer)."""

    name: str
    keeps: str
    destroys: str
    build: Callable[[Task, FieldData, FieldData, np.random.Generator], FieldData]


def _spatial_axes(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


def _noise(task: Task, ref: FieldData, target: FieldData, rng: np.random.Generator
           ) -> FieldData:
    train = task.dataset("train").x.to(torch.float64)
    mean, std = train.mean(dim=0), train.std(dim=0)
    z = torch.from_numpy(rng.standard_normal((len(ref), *train.shape[1:])))
    return FieldData((mean + std * z).to(ref.x.dtype), ref.cond)


def _shuffle(task: Task, ref: FieldData, target: FieldData, rng: np.random.Generator
             ) -> FieldData:
    x = ref.x
    n, c = x.shape[:2]
    flat = x.reshape(n, c, -1)
    perm = torch.from_numpy(np.argsort(rng.random((n, flat.shape[-1])), axis=1))
    out = torch.gather(flat, 2, perm[:, None, :].expand(n, c, -1))
    return FieldData(out.reshape(x.shape).clone(), ref.cond)


def _blur(task: Task, ref: FieldData, target: FieldData, rng: np.random.Generator
          ) -> FieldData:
    from scipy.ndimage import gaussian_filter

    x = ref.x.detach().to("cpu", torch.float64).numpy()
    sigma = [0.0, 0.0] + [BLUR_SIGMA] * (x.ndim - 2)
    out = gaussian_filter(x, sigma=sigma, mode="reflect", truncate=3.0)
    return FieldData(torch.from_numpy(out).to(ref.x.dtype), ref.cond)


def _phase(task: Task, ref: FieldData, target: FieldData, rng: np.random.Generator
           ) -> FieldData:
    x = ref.x.detach().to("cpu", torch.float64)
    dims = _spatial_axes(x)
    spatial = tuple(x.shape[2:])
    f = torch.fft.rfftn(x, dim=dims)
    # the phases of a real white-noise field: Hermitian-symmetric, so the result is real
    w = torch.fft.rfftn(torch.from_numpy(rng.standard_normal(tuple(x.shape))), dim=dims)
    rot = w / w.abs().clamp_min(1e-300)
    # keep each field's mean (the zero mode) as it is
    rot[(slice(None), slice(None)) + (0,) * len(dims)] = 1.0
    out = torch.fft.irfftn(f * rot, s=spatial, dim=dims)
    return FieldData(out.to(ref.x.dtype), ref.cond)


def _gaussian(task: Task, ref: FieldData, target: FieldData, rng: np.random.Generator
              ) -> FieldData:
    train = task.dataset("train").x.to(torch.float64)
    n = train.shape[0]
    flat = train.reshape(n, -1)
    mean = flat.mean(dim=0)
    centred = flat - mean
    w = torch.from_numpy(rng.standard_normal((len(ref), n))) / math.sqrt(max(n - 1, 1))
    out = mean + w @ centred
    return FieldData(out.reshape(len(ref), *train.shape[1:]).to(ref.x.dtype), ref.cond)


def _train_copy(task: Task, ref: FieldData, target: FieldData, rng: np.random.Generator
                ) -> FieldData:
    train = task.dataset("train")
    m = len(target)
    if target.cond is None or train.cond is None:
        idx = rng.choice(len(train), m, replace=len(train) < m)
    else:
        a = train.cond.reshape(len(train), -1).to(torch.float64)
        b = target.cond.reshape(m, -1).to(torch.float64)
        scale = a.std(dim=0).clamp_min(1e-12)
        d = torch.cdist(b / scale, a / scale)
        idx = d.argmin(dim=1).numpy()
    return FieldData(train.x[torch.as_tensor(idx)].clone(), target.cond)


FAKES: dict[str, Fake] = {f.name: f for f in (
    Fake("noise", "the per-pixel mean and std of the train split",
         "every spatial correlation", _noise),
    Fake("shuffle", "every value of each real field (its histogram exactly)",
         "where the values are (the field's structure)", _shuffle),
    Fake("blur", f"the large scales (real fields smoothed, sigma {BLUR_SIGMA:g} cells)",
         "fronts, shocks and small scales", _blur),
    Fake("phase", "each real field's Fourier amplitudes (its power spectrum exactly)",
         "the phases: shocks, fronts and coherent structures", _phase),
    Fake("gaussian", "the train split's mean and full covariance",
         "every statistic beyond the second order", _gaussian),
    Fake("train_copy", "real training fields (the nearest-condition ones)",
         "novelty: what memorization scores", _train_copy),
)}
#: the fakes a metric must tell from data to "see structure"
STRUCTURE_FAKES: tuple[str, ...] = ("noise", "shuffle", "blur", "phase", "gaussian")
SANITY_ROWS: tuple[str, ...] = tuple(FAKES)


def fake_fields(task: Task, name: str, draw: int = 0) -> tuple[FieldData, FieldData]:
    """``(fake, target)``: sanity row ``name``'s fields for draw ``draw`` (built from the
    floor's pair :meth:`Task.data_reference` of the same draw) and the test fields they
    are scored against.  Deterministic in (task data, name, draw)."""
    fake = FAKES[name]
    draws = task.reference_draws()
    ref, target, _ = task.data_reference(draw % draws) if draws > 1 else task.data_reference()
    rng = np.random.default_rng([SANITY_SEED, draw, list(FAKES).index(name)])
    return fake.build(task, ref, target, rng), target


def sanity_draws(task: Task) -> int:
    """How many draws of each fake a sanity row averages."""
    return max(1, min(SANITY_DRAWS, task.reference_draws()))


# -- the verdict --------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """Whether ``metric`` sees structure on a task: every fake in ``STRUCTURE_FAKES`` that
    was scored lies beyond the floor (:func:`beyond_floor`).  ``worst`` is the fake
    closest to the data (its ``ratio`` = its score over the floor; for a metric ranked by
    distance from the data's value, its distance over the floor's spread scale)."""

    metric: str
    sees: bool
    worst: str | None
    ratio: float
    missed: tuple[str, ...]
    reason: str = ""

    def footnote(self) -> str:
        if self.reason:
            return f"{self.metric}: {self.reason}"
        return (f"{self.metric}: does not see structure here ({', '.join(self.missed)} "
                f"{'score' if len(self.missed) > 1 else 'scores'} like data; {self.worst} "
                f"{fmt_ratio(self.ratio)} the floor)")


def fmt_ratio(r: float) -> str:
    if not math.isfinite(r):
        return "inf x" if r > 0 else "n/a"
    return f"{r:,.0f}x" if r >= 100 else f"{r:.3g}x"


def score(value: float, floor: float, two_sided: bool) -> float:
    """A score on the metric's own ranking scale: the value, or for a metric ranked by
    distance from the data's value, ``|value - floor|``."""
    return abs(value - floor) if two_sided else value


def beyond_floor(value: float, floor: float, spread: float, two_sided: bool,
                 higher_is_better: bool = False, chance: float = 0.0) -> bool:
    """The rule: a fake's (mean) value lies clearly worse than the floor when it is worse
    by more than ``SEE_SIGMAS`` floor spreads (the std of the floor's draws; 0 where the
    floor is one draw) AND by at least ``SEE_RATIO`` x: for a lower-is-better metric
    ``value > max(floor + 3 s, 1.5 floor)``; for a higher-is-better one the mirror image
    ``value < min(floor - 3 s, floor / 1.5)``; for a metric ranked by distance from the
    data's value ``|value - floor| > max(3 s, 0.5 |floor|)``.  Values are taken from the
    metric's ``chance`` level (0.5 for a classifier's accuracy).  NaN is never beyond."""
    if not (math.isfinite(value) and math.isfinite(floor)):
        return bool(math.isinf(value) and not two_sided and not higher_is_better)
    value, floor = value - chance, floor - chance
    s = spread if math.isfinite(spread) else 0.0
    if two_sided:
        return abs(value - floor) > max(SEE_SIGMAS * s, (SEE_RATIO - 1.0) * abs(floor))
    if higher_is_better:
        return value < min(floor - SEE_SIGMAS * s, floor / SEE_RATIO)
    return value > max(floor + SEE_SIGMAS * s, SEE_RATIO * floor)


def ratio_to_floor(value: float, floor: float, spread: float, two_sided: bool,
                   chance: float = 0.0) -> float:
    """What tables print for a fake: its value over the floor (1.0 = as good as data),
    both taken from the metric's ``chance`` level; for a two-sided metric
    ``1 + |value - floor| / |floor|`` (1.0 = the data's value)."""
    if not (math.isfinite(value) and math.isfinite(floor)):
        return math.nan
    value, floor = value - chance, floor - chance
    if two_sided:
        return 1.0 + abs(value - floor) / abs(floor) if floor else math.inf
    if floor == 0:
        return 1.0 if value == 0 else math.inf
    return value / floor


def verdict(metric: str, floor: float, spread: float, fakes: Mapping[str, float],
            two_sided: bool = False, higher_is_better: bool = False, chance: float = 0.0
            ) -> Verdict:
    """The verdict of ``metric`` on one task from the floor's mean and spread and each
    fake's mean value (:func:`beyond_floor` for every scored ``STRUCTURE_FAKES`` row)."""
    scored = {k: v for k, v in fakes.items() if k in STRUCTURE_FAKES and v is not None
              and not (isinstance(v, float) and math.isnan(v))}
    if floor is None or not math.isfinite(floor) or not scored:
        return Verdict(metric, False, None, math.nan, (),
                       reason="no floor or no sanity row scored: not tested")
    ratios = {k: ratio_to_floor(v, floor, spread, two_sided, chance)
              for k, v in scored.items()}
    missed = tuple(k for k, v in scored.items()
                   if not beyond_floor(v, floor, spread, two_sided, higher_is_better, chance))
    if higher_is_better:
        worst = max(ratios, key=lambda k: ratios[k] if math.isfinite(ratios[k]) else -1)
    else:
        worst = min(ratios, key=lambda k: ratios[k] if math.isfinite(ratios[k]) else math.inf)
    return Verdict(metric, not missed, worst, ratios[worst], missed)
