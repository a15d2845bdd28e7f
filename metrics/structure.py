"""Metrics that see spatial structure: ``increments`` (the distribution of spatial
increments at several lags: a structure-function distance) and ``c2st`` (a classifier
two-sample test on per-field structure features).

Both were added because the pooled-value metrics (``wd``, ``js``) and the mean/covariance
ones (``mmse``, ``smse``, ``energy``) cannot tell real fields from the sanity rows
(:mod:`pcgbench.sanity`) on every task: a per-pixel Gaussian or a field with its grid
points shuffled keeps what they look at.  See docs/evaluation.md "Sanity rows".
"""

from __future__ import annotations

import numpy as np
import torch

from pcgbench.metric import NONNEGATIVE, UNIT, Metric, MetricContext
from pcgbench.registry import METRICS

from .distribution import check_pair, finite_rows, shared, wasserstein1_1d

#: the lags (grid cells) of ``increments``; a lag is used on an axis of n cells when
#: r <= n // 4
LAGS: tuple[int, ...] = (1, 2, 4, 8)
#: values per pool (side, channel, axis, lag); larger pools are evenly strided
INCREMENT_MAX_VALUES = 200_000


def _lags(n: int) -> list[int]:
    return [r for r in LAGS if r <= max(1, n // 4)]


def _increments(x: torch.Tensor, axis: int, r: int) -> torch.Tensor:
    """``x(.., i + r, ..) - x(.., i, ..)`` along ``axis`` (no wrap), [N, C, ...]."""
    n = x.shape[axis]
    return x.narrow(axis, r, n - r) - x.narrow(axis, 0, n - r)


def _pool(d: torch.Tensor, c: int) -> np.ndarray:
    v = d[:, c].reshape(-1)
    if v.numel() > INCREMENT_MAX_VALUES:
        idx = torch.arange(INCREMENT_MAX_VALUES, dtype=torch.int64) * v.numel() \
            // INCREMENT_MAX_VALUES
        v = v[idx]
    return v.detach().to("cpu", torch.float64).numpy()


def increment_distance(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """INC = mean over channels c, spatial axes a and lags r (``LAGS``, r <= n_a / 4) of
    W1(P^gen_{c,a,r}, P^ref_{c,a,r}) / std(P^ref_{c,a,r}), P_{c,a,r} the pooled increments
    x(i + r e_a) - x(i) of channel c (the distribution behind the structure functions
    S_p(r) = <|delta_r x|^p>); a reference pool with std 0 is skipped.  Dimensionless:
    1 is a shift of one increment std.  Non-finite samples are dropped."""
    check_pair(samples, reference)
    # increments in the fields' own precision (float32: differences of neighbours);
    # only the strided pools go to float64 for the exact W1
    x = finite_rows(samples).detach().cpu()
    y = finite_rows(reference).detach().cpu()
    if x.shape[0] == 0 or y.shape[0] == 0 or x.ndim < 3:
        return float("nan")
    if not x.is_floating_point():
        x, y = x.double(), y.double()
    vals = []
    for axis in range(2, x.ndim):
        for r in _lags(x.shape[axis]):
            dx, dy = _increments(x, axis, r), _increments(y, axis, r)
            for c in range(x.shape[1]):
                py = _pool(dy, c)
                sd = float(py.std())
                if not sd > 0:
                    continue
                vals.append(wasserstein1_1d(_pool(dx, c), py) / sd)
    return float(np.mean(vals)) if vals else float("nan")


@METRICS.register("increments")
class IncrementDistance(Metric):
    """INC = mean over (channel, axis, lag r in 1, 2, 4, 8 with r <= n/4) of the W1
    distance between the generated and reference distributions of spatial increments
    x(i + r) - x(i), over the reference increments' std (the structure-function
    distribution); see :func:`increment_distance`."""

    bounds = NONNEGATIVE
    higher_is_better = False
    description = ("W1 of spatial-increment distributions (lags 1-8) over their std, "
                   "mean over channels, axes and lags")

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext
                 ) -> float:
        return increment_distance(samples, reference)


# -- classifier two-sample test -------------------------------------------------------------
#: per side, at most this many fields (the first ones) enter the classifier test
C2ST_MAX_SAMPLES = 1000
C2ST_SEED = 2_024
C2ST_FOLDS = 2


def _skew_kurt(d: torch.Tensor, dims: tuple[int, ...]) -> list[torch.Tensor]:
    """Per field and channel: log-variance, skewness and log-kurtosis over ``dims``
    (central moments by products, in the input's precision)."""
    c = d - d.mean(dim=dims, keepdim=True)
    c2 = c * c
    v = c2.mean(dim=dims).clamp_min(1e-30)
    skew = (c2 * c).mean(dim=dims) / v.pow(1.5)
    kurt = (c2 * c2).mean(dim=dims) / (v * v)
    return [v.log(), skew, kurt.clamp_min(1e-30).log()]


def structure_features(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Per-field features [N, F] of ``x [N, C, *spatial]`` after dividing channel c by
    ``scale[c]``: per channel, the field's mean, log-variance, skewness, log-kurtosis,
    min and max; per channel, axis and lag (``LAGS``) the log-variance, skewness and
    log-kurtosis of its increments; per channel the log energy in octave bands of the
    radial wavenumber (1, 2-3, 4-7, ...)."""
    # float32 is ample for per-field moments of fields scaled to unit std (sums of at
    # most ~1e6 terms); float64 only where the input is
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    x = x.detach().to("cpu", dtype) / scale.to(dtype).view(1, -1, *([1] * (x.ndim - 2)))
    n, c = x.shape[:2]
    dims = tuple(range(2, x.ndim))
    feats: list[torch.Tensor] = [x.mean(dim=dims)]
    feats += _skew_kurt(x, dims)
    flat = x.reshape(n, c, -1)
    feats += [flat.amin(dim=2), flat.amax(dim=2)]
    for axis in dims:
        for r in _lags(x.shape[axis]):
            feats += _skew_kurt(_increments(x, axis, r), dims)
    # octave-band energies of the (mean-removed) field
    spatial = tuple(x.shape[2:])
    f = torch.fft.rfftn(x - x.mean(dim=dims, keepdim=True), dim=dims)
    power = f.real ** 2 + f.imag ** 2
    freqs = [torch.fft.fftfreq(s, dtype=dtype) * s for s in spatial[:-1]]
    freqs.append(torch.fft.rfftfreq(spatial[-1], dtype=dtype) * spatial[-1])
    k = torch.stack(torch.meshgrid(*freqs, indexing="ij")).pow(2).sum(0).sqrt()
    kmax = min(spatial) / 2
    lo = 1.0
    while lo <= kmax:
        band = (k >= lo) & (k < 2 * lo)
        if bool(band.any()):
            e = power[..., band].sum(dim=-1)
            feats.append((e + 1e-30).log())
        lo *= 2
    return torch.cat([f.reshape(n, -1) for f in feats], dim=1).to(torch.float64)


def _feature_pair(samples: torch.Tensor, reference: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The :func:`structure_features` of the finite rows of both sets, channels scaled by
    the reference's std (computed once per evaluation for ``structure`` and ``c2st``:
    :func:`pcgbench.metric.shared`); None when a set is empty or the fields have no
    spatial axis."""
    check_pair(samples, reference)

    def compute() -> tuple[torch.Tensor, torch.Tensor] | None:
        x, y = finite_rows(samples), finite_rows(reference)
        if x.shape[0] == 0 or y.shape[0] == 0 or x.ndim < 3:
            return None
        dims = tuple(range(2, y.ndim))
        scale = y.detach().to("cpu", torch.float64).std(dim=(0, *dims)).clamp_min(1e-12)
        fx = torch.nan_to_num(structure_features(x, scale), nan=0.0, posinf=1e6, neginf=-1e6)
        fy = torch.nan_to_num(structure_features(y, scale), nan=0.0, posinf=1e6, neginf=-1e6)
        return fx, fy

    return shared("structure_features", (samples, reference), compute)


#: standardized features are clipped to +-this many reference stds (one wild feature must
#: not outweigh the rest)
STRUCTURE_CLIP = 5.0


def structure_distance(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """STRUCT = mean over the per-field :func:`structure_features` f (those the reference
    set does not hold constant) of W1(f_gen, f_ref) after standardizing f by the reference
    set's mean and std and clipping to +-``STRUCTURE_CLIP``: how far the distribution of
    each field's statistics (value and increment moments, band energies) lies from the
    data's, in reference stds.  0 for identical sets; a set whose every feature is
    off by more than the clip scores about ``STRUCTURE_CLIP``."""
    pair = _feature_pair(samples, reference)
    if pair is None:
        return float("nan")
    fx, fy = pair
    mu, sd = fy.mean(dim=0), fy.std(dim=0)
    keep = sd > 1e-12 * (1.0 + mu.abs())
    if not bool(keep.any()):
        return float("nan")
    zx = ((fx[:, keep] - mu[keep]) / sd[keep]).clamp(-STRUCTURE_CLIP, STRUCTURE_CLIP)
    zy = ((fy[:, keep] - mu[keep]) / sd[keep]).clamp(-STRUCTURE_CLIP, STRUCTURE_CLIP)
    return float(np.mean([wasserstein1_1d(zx[:, j].numpy(), zy[:, j].numpy())
                          for j in range(zy.shape[1])]))


@METRICS.register("structure")
class StructureDistance(Metric):
    """STRUCT = mean over per-field structure features (value moments, increment moments
    at lags 1-8 per axis, octave-band spectral energies) of the W1 distance between the
    generated and reference distributions of that feature, in reference stds (clipped at
    5); see :func:`structure_distance`."""

    bounds = NONNEGATIVE
    higher_is_better = False
    description = ("W1 of per-field structure statistics (value/increment moments, band "
                   "energies), in reference stds, mean over statistics")

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext
                 ) -> float:
        return structure_distance(samples, reference)


def c2st_accuracy(samples: torch.Tensor, reference: torch.Tensor, seed: int = C2ST_SEED
                  ) -> float:
    """Classifier two-sample test: the held-out accuracy of a linear classifier told to
    separate generated from reference fields on :func:`structure_features`
    (standardized on the pooled sets): linear discriminant analysis with Ledoit-Wolf
    shrinkage (closed form, so fast and deterministic), ``C2ST_FOLDS``-fold stratified
    cross-fitting with equal class sizes (each set's first rows).  0.5 =
    indistinguishable, 1 = always told apart."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.model_selection import StratifiedKFold

    check_pair(samples, reference)
    pair = _feature_pair(samples, reference)
    m = 0 if pair is None else min(pair[0].shape[0], pair[1].shape[0], C2ST_MAX_SAMPLES)
    if pair is None or m < 2 * C2ST_FOLDS:
        return float("nan")
    feats = torch.cat([pair[0][:m], pair[1][:m]]).numpy()
    mu, sd = feats.mean(axis=0), feats.std(axis=0)
    keep = sd > 0
    if not keep.any():
        return 0.5  # every feature constant on both sets: nothing tells them apart
    feats = (feats[:, keep] - mu[keep]) / sd[keep]
    labels = np.r_[np.ones(m), np.zeros(m)]
    folds = StratifiedKFold(n_splits=C2ST_FOLDS, shuffle=True, random_state=seed)
    correct = 0
    for tr, te in folds.split(feats, labels):
        clf = LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")
        clf.fit(feats[tr], labels[tr])
        correct += int((clf.predict(feats[te]) == labels[te]).sum())
    return correct / (2 * m)


@METRICS.register("c2st")
class ClassifierTwoSampleTest(Metric):
    """C2ST = held-out accuracy of a linear classifier (shrinkage LDA) separating generated
    from reference fields on per-field structure features (value moments, increment
    moments at lags 1-8, octave-band spectral energies), 2-fold cross-fitted; 0.5 =
    indistinguishable from real data, 1 = always told apart.  See
    :func:`c2st_accuracy`."""

    bounds = UNIT
    higher_is_better = False
    chance = 0.5  # ratios to the floor: of the accuracy above chance
    description = ("Classifier two-sample test: held-out accuracy telling samples from real "
                   "fields on structure features (0.5 = indistinguishable)")

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext
                 ) -> float:
        return c2st_accuracy(samples, reference)

