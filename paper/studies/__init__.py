"""Controlled analytic studies; importing this package registers them in ``STUDIES``."""

from pcgbench.paper.studies import conditioning, ellipse

__all__ = ["conditioning", "ellipse"]
