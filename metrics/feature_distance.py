"""Fréchet distance of encoder features: ``feature_fd`` (a fixed random-CNN suite encoder).

FD = ||mu_1 - mu_2||^2 + Tr(S_1 + S_2 - 2 (S_1 S_2)^(1/2)) of Gaussian fits to features.  The
constrained-PDE suite's FPD uses the pretrained Poseidon-B encoder (mean of its last hidden state;
1-D (nt, nx) arrays as images; REFERENCES.md "Constrained-PDE suite", "Metrics"); its weights
cannot be downloaded here, so ``feature_fd`` uses a download-free encoder (ours) and is NOT
comparable with the paper's FPD (its display name says so; never in one leaderboard row).
Each field [C, *spatial] ((nt, nx) 1-D, (nt, ny, nx) Navier-Stokes) is (1) standardized per
channel by the REFERENCE set's mean and std (pooled over samples and grid); (2) resampled
(multi)linearly, corners aligned, to a canonical grid (256; 64 x 64; 16 x 32 x 32) with d
coordinate channels in [-1, 1] added; (3) passed through three random conv blocks (kernel 3, zero
padding, widths 16, 32, 32, ReLU, 2x average pooling; weights N(0, 2 / fan_in), biases
N(0, 0.5^2), seed ``ENCODER_SEED``) and averaged over space; (4) the 32 features are centred by
the reference features' mean and divided by their RMS deviation (one scale for all).  The value
depends on the seed, is asymmetric (the reference sets the scales) and is biased up by finite
samples (the leaderboard's ``data`` column, real val vs test, is the floor).
``fpd_poseidon`` would load a local Poseidon-B checkpoint (``PCGBENCH_POSEIDON_CHECKPOINT``) but
needs Poseidon's ``scOT`` package (not on PyPI), so it stops with a one-line error.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F

from pcgbench.errors import PcgError
from pcgbench.metric import NONNEGATIVE, Metric, MetricContext
from pcgbench.registry import METRICS

from .distribution import check_pair, finite_rows

ENCODER_SEED = 2024
WIDTHS = (16, 32, 32)
BIAS_STD = 0.5
CANONICAL_GRID = {1: (256,), 2: (64, 64), 3: (16, 32, 32)}
CHUNK = 256  # fields encoded per batch
POSEIDON_ENV = "PCGBENCH_POSEIDON_CHECKPOINT"


# -- Fréchet distance ------------------------------------------------------------------------
def _sqrt_psd(s: torch.Tensor) -> torch.Tensor:
    w, v = torch.linalg.eigh(s)
    return (v * w.clamp_min(0.0).sqrt()) @ v.T


def frechet_distance(mu1: torch.Tensor, s1: torch.Tensor, mu2: torch.Tensor,
                     s2: torch.Tensor) -> float:
    """||mu1 - mu2||^2 + Tr(S1 + S2 - 2 (S1 S2)^(1/2)) in float64, by the symmetric route
    Tr((S1 S2)^(1/2)) = sum sqrt(eig(S1^(1/2) S2 S1^(1/2))) (eigen-decompositions of
    symmetric PSD matrices, negative round-off eigenvalues clipped), clamped at 0."""
    mu1, mu2 = mu1.to(torch.float64), mu2.to(torch.float64)
    s1 = 0.5 * (s1 + s1.T).to(torch.float64)
    s2 = 0.5 * (s2 + s2.T).to(torch.float64)
    r1 = _sqrt_psd(s1)
    m = r1 @ s2 @ r1
    tr_sqrt = torch.linalg.eigvalsh(0.5 * (m + m.T)).clamp_min(0.0).sqrt().sum()
    d = (mu1 - mu2).pow(2).sum() + torch.trace(s1) + torch.trace(s2) - 2.0 * tr_sqrt
    return max(0.0, float(d))


def gaussian_fit(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased covariance (N - 1) of features [N, F]."""
    f = features.to(torch.float64)
    return f.mean(dim=0), torch.cov(f.T, correction=1).reshape(f.shape[1], f.shape[1])


def frechet_distance_of_features(a: torch.Tensor, b: torch.Tensor) -> float:
    """FD between Gaussian fits of two feature sets [N, F] (NaN if either has < 2 rows)."""
    if a.shape[0] < 2 or b.shape[0] < 2:
        return float("nan")
    return frechet_distance(*gaussian_fit(a), *gaussian_fit(b))


# -- the suite encoder -----------------------------------------------------------------------
class RandomConvEncoder:
    """The fixed random-CNN suite encoder for fields with ``ndim`` spatial axes (see the
    module docstring); ``reference`` sets the input standardization."""

    def __init__(self, channels: int, ndim: int, seed: int = ENCODER_SEED):
        if ndim not in CANONICAL_GRID:
            raise PcgError(f"feature_fd needs a field with 1-3 spatial axes, got {ndim}")
        self.ndim = ndim
        self.grid = CANONICAL_GRID[ndim]
        gen = torch.Generator().manual_seed(seed)
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        c_in = channels + ndim
        for width in WIDTHS:
            fan_in = c_in * 3**ndim
            w = torch.randn((width, c_in, *(3,) * ndim), generator=gen) * (2.0 / fan_in) ** 0.5
            b = torch.randn(width, generator=gen) * BIAS_STD
            self.layers.append((w, b))
            c_in = width
        self.conv = (F.conv1d, F.conv2d, F.conv3d)[ndim - 1]
        self.pool = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[ndim - 1]
        self.mode = ("linear", "bilinear", "trilinear")[ndim - 1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Features [N, WIDTHS[-1]] of already standardized fields x [N, C, *spatial]."""
        out = []
        for i in range(0, x.shape[0], CHUNK):
            h = F.interpolate(x[i:i + CHUNK].float(), size=self.grid, mode=self.mode,
                              align_corners=True)
            axes = [torch.linspace(-1.0, 1.0, n) for n in self.grid]
            coords = torch.stack(torch.meshgrid(*axes, indexing="ij"))
            h = torch.cat([h, coords.expand(h.shape[0], *coords.shape)], dim=1)
            for w, b in self.layers:
                h = self.pool(F.relu(self.conv(h, w, b, padding=1)), 2)
            out.append(h.flatten(2).mean(dim=2))
        return torch.cat(out).to(torch.float64)


def suite_features(samples: torch.Tensor, reference: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference-standardized suite-encoder features of (samples, reference)."""
    dims = [0] + list(range(2, reference.ndim))
    ref = reference.to(torch.float64)
    mean = ref.mean(dim=dims, keepdim=True)
    std = ref.std(dim=dims, keepdim=True, correction=0).clamp_min(1e-12)
    enc = RandomConvEncoder(reference.shape[1], reference.ndim - 2)
    fs = enc((samples.to(torch.float64) - mean) / std)
    fr = enc((ref - mean) / std)
    fmean = fr.mean(dim=0)
    scale = (fr - fmean).pow(2).mean().sqrt()
    scale = scale if float(scale) > 1e-12 * (1.0 + float(fmean.abs().max())) else 1.0
    return (fs - fmean) / scale, (fr - fmean) / scale


def feature_frechet_distance(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """FD of the suite encoder's features; non-finite rows dropped; identical sets give
    exactly 0."""
    check_pair(samples, reference)
    x, y = finite_rows(samples).detach().cpu(), finite_rows(reference).detach().cpu()
    if x.shape[0] < 2 or y.shape[0] < 2:
        return float("nan")
    if x.shape == y.shape and torch.equal(x, y):
        return 0.0
    return frechet_distance_of_features(*suite_features(x, y))


@METRICS.register("feature_fd")
class FeatureFrechetDistance(Metric):
    """Fréchet distance of fixed random-CNN features (the suite encoder; NOT Poseidon FPD)."""

    bounds = NONNEGATIVE

    higher_is_better = False
    display_name = "FD (random-CNN features)"
    description = ("Fréchet distance of fixed random-CNN features (suite encoder; not "
                   "comparable with the paper's Poseidon FPD)")

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext
                 ) -> float:
        return feature_frechet_distance(samples, reference)


def poseidon_encoder(checkpoint: str | os.PathLike[str]) -> None:
    """Would load a local Poseidon-B checkpoint; always raises a one-line PcgError that
    names what is missing (see the module docstring)."""
    path = Path(checkpoint).expanduser()
    if not path.exists():
        raise PcgError(f"Poseidon checkpoint {str(path)!r} does not exist")
    try:
        import scOT  # noqa: F401
    except ImportError:
        raise PcgError(
            "Poseidon FPD needs Poseidon's `scOT` package (camlab-ethz/poseidon; not on "
            "PyPI), which is not installed; use feature_fd (download-free suite encoder)"
        ) from None
    raise PcgError(
        "Poseidon FPD is not implemented: its encoder interface could not be installed or "
        "tested here; use feature_fd (download-free suite encoder)")


@METRICS.register("fpd_poseidon")
class PoseidonFPD(Metric):
    """Fréchet Poseidon distance from a local Poseidon-B checkpoint (not available: raises
    a one-line error naming what is missing)."""

    bounds = NONNEGATIVE

    higher_is_better = False
    display_name = "FPD (Poseidon-B)"
    description = (f"Poseidon FPD from a local checkpoint (${POSEIDON_ENV}); not available "
                   "without Poseidon's scOT package")

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext
                 ) -> float:
        checkpoint = os.environ.get(POSEIDON_ENV)
        if not checkpoint:
            raise PcgError(f"metric fpd_poseidon needs {POSEIDON_ENV}=<local Poseidon-B "
                           "checkpoint directory>; it cannot be downloaded here")
        poseidon_encoder(checkpoint)
        return float("nan")  # unreachable: poseidon_encoder raises
