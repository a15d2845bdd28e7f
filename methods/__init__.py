"""Built-in methods; importing this package registers them in ``METHODS``."""

from pcgbench.methods import (
    fm_ot,  # noqa: F401
    pmosfm,  # noqa: F401
)
