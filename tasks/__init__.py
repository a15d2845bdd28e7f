"""Built-in tasks; importing a module registers it in ``pcgbench.registry.TASKS``."""

from pcgbench.tasks import (  # noqa: F401
    burgers,
    burgers_bc,
    burgers_ic,
    darcy,
    dynamic_stall,
    heat,
    kf_generation,
    kf_reconstruction,
    kolmogorov,
    navier_stokes,
    reaction_diffusion_ic,
    turbulence_mass_transfer,
)
from pcgbench.tasks.hit import forecasting, reconstruction  # noqa: F401
