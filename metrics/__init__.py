"""Built-in metrics; importing this package registers them in ``METRICS``."""

from __future__ import annotations

from . import (  # noqa: F401
    constraint_error,
    distribution,
    ensemble,
    feature_distance,
    moments,
    reconstruction,
    residual,
    spectral,
    structure,
    velocity_gradient,
)
from .distribution import (
    blowup_fraction,
    finite_rows,
    js_divergence,
    nonfinite_fraction,
    wasserstein1,
)
from .moments import energy_distance, mmse, smse
from .residual import residual_error

BASIC_METRICS: tuple[str, ...] = ("re", "wd", "js", "mmse", "smse", "energy")

__all__ = [
    "BASIC_METRICS",
    "distribution",
    "energy_distance",
    "finite_rows",
    "js_divergence",
    "mmse",
    "moments",
    "nonfinite_fraction",
    "blowup_fraction",
    "residual",
    "residual_error",
    "smse",
    "wasserstein1",
]
