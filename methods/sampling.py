"""The public toolkit for methods written outside the package (plugins, see
``docs/adding-a-method.md``): the base class of a sampler on the shared pretrained
backbone, the projection helpers the built-in samplers use, and the flow methods' shared
sizing and Euler solver.  The names are re-exported from private modules, whose layout
may change; import them from here.

- :class:`BackboneSampler`: a sampling-time method on the shared FM-OT/FFM backbone
  (``velocity``, ``noise``, ``constraint_fn``, ``decode``, ``prepare_cond``).
- :func:`shared_jacobian`, :func:`orthogonal_projector`, :func:`apply_projector`,
  :func:`gauss_newton_project`: constraint Jacobians and projections.
- :func:`preset_backbone`, :data:`PRESET_RECIPE` (budget and optimization recipe),
  :data:`PRESET_BUDGET` (its ``(iterations, batch_size)``), :func:`euler_solve`: size and
  train a learned network like every flow method, integrate a velocity field;
  :class:`CondOTPath`: the conditional OT path (``sample(x0, x1, t) -> (x_t, target)``).
"""

from pcgbench.methods._flow import (
    PRESET_BUDGET,
    PRESET_RECIPE,
    CondOTPath,
    euler_solve,
    preset_backbone,
)
from pcgbench.methods._sampling import (
    BackboneSampler,
    apply_projector,
    gauss_newton_project,
    orthogonal_projector,
    shared_jacobian,
)

__all__ = ["PRESET_BUDGET", "PRESET_RECIPE", "BackboneSampler", "CondOTPath",
           "apply_projector", "euler_solve", "gauss_newton_project", "orthogonal_projector",
           "preset_backbone", "shared_jacobian"]
