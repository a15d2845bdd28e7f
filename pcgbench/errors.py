"""User-facing errors: one line, exit code 2, no traceback unless ``--debug``."""

from __future__ import annotations


class PcgError(Exception):
    """An error caused by user input or environment, reported as one line by the CLI."""


class UnknownNameError(PcgError, KeyError):
    """An unknown task/method/metric/preset name."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class UnsupportedError(PcgError):
    """A method that cannot run on a task (missing requirements)."""


class TrainingDiverged(PcgError):
    """Training produced a non-finite loss: the run is recorded with status ``diverged``
    (a failed run is a record, never a result)."""


class DataNotGenerated(PcgError):
    """A split that is not cached was asked for where generating it is not allowed (a
    sweep's planning step, which must not run a solver)."""
