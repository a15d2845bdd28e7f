"""Built-in tasks; importing a module registers it in ``pcgbench.registry.TASKS``."""

from pcgbench.tasks import burgers  # noqa: F401
