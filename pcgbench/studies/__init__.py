"""Controlled analytic studies; importing this package registers them in ``STUDIES``."""

from pcgbench.studies import conditioning, ellipse

__all__ = ["conditioning", "ellipse"]
