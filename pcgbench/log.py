"""Messages go through :mod:`logging` (``pcgbench.*`` loggers): warnings are captured,
lines carry timestamps when stderr is not a terminal (batch and SLURM logs), and tqdm bars
are redirected so a message never breaks a progress bar."""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("pcgbench")


def configure(verbose: bool = False) -> None:
    """Idempotent set-up of the ``pcgbench`` logger and of captured warnings."""
    interactive = sys.stderr.isatty()
    fmt = ("%(levelname)s: %(message)s" if interactive
           else "%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    if not any(getattr(h, "_pcgbench", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(fmt, datefmt="%Y-%m-%d %H:%M:%S"))
        handler._pcgbench = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    logger.setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("py.warnings").setLevel(logging.WARNING)
    logging.captureWarnings(True)
