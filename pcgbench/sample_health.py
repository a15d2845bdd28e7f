"""Sample health: the non-finite and blow-up fractions every run records and its status
check reads (core: the harness refuses a run on them; the metrics are leaves)."""

from __future__ import annotations

import torch

__all__ = ["BLOWUP_FACTOR", "blowup_fraction", "nonfinite_fraction"]


def nonfinite_fraction(samples: torch.Tensor) -> float:
    """Fraction of samples (rows of dim 0) containing any non-finite value; nan if empty."""
    n = int(samples.shape[0])
    if n == 0:
        return float("nan")
    if not (samples.is_floating_point() or samples.is_complex()):
        return 0.0  # bool and integer values are all finite
    bad = ~torch.isfinite(samples.reshape(n, -1)).all(dim=1)
    return float(bad.sum().item()) / n


#: a finite sample larger than this many times the reference's largest magnitude is a
#: blow-up, not a draw from any tail (PCFM on Darcy reached 1e17 in normalized units)
BLOWUP_FACTOR = 1e3


def blowup_fraction(samples: torch.Tensor, reference: torch.Tensor,
                    factor: float = BLOWUP_FACTOR) -> float:
    """Fraction of samples (rows of dim 0) whose largest |value| exceeds ``factor`` x
    the largest finite |value| of ``reference`` (non-finite samples count too: they are
    ``nonfinite_fraction``'s as well); nan if empty."""
    n = int(samples.shape[0])
    if n == 0:
        return float("nan")
    ref = reference.detach()
    if not (ref.is_floating_point() or ref.is_complex()):  # bool/int: widened for |.|
        ref = ref.to(torch.float64)
    if not (samples.is_floating_point() or samples.is_complex()):
        samples = samples.to(torch.float64)
    mags = torch.where(torch.isfinite(ref), ref.abs(), torch.zeros((), dtype=ref.dtype))
    scale = float(mags.max()) if mags.numel() else 0.0
    # each row's largest |value| (nan when it has one: amax propagates it) in its own
    # dtype, then widened: the same peaks as widening every value first
    peak = samples.reshape(n, -1).detach().abs().amax(dim=1).to("cpu", torch.float64)
    peak = torch.nan_to_num(peak, nan=float("inf"))
    return float((peak > factor * scale).sum().item()) / n
