"""Built-in tasks; importing a module registers it in ``pcgbench.registry.TASKS``."""

from pcgbench.tasks import (  # noqa: F401
    burgers,
    darcy,
    kf_generation,
    kf_reconstruction,
    kolmogorov,
    navier_stokes,
)
