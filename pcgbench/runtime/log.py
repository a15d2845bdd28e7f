"""Messages go through :mod:`logging` (``pcgbench.*`` loggers): warnings are captured,
lines carry timestamps when stderr is not a terminal (batch and SLURM logs), and tqdm bars
are redirected so a message never breaks a progress bar."""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("pcgbench")

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))}
_CONTROL.update({ord("\t"): " ", ord("\n"): " ", ord("\r"): " "})


def printable(text: object) -> str:
    """``text`` with control characters (ANSI escapes, carriage returns, bells; C0 and C1)
    written as ``\\xNN``, Unicode format characters (bidi overrides and isolates,
    zero-width spaces and joiners, byte-order marks: category Cf) as ``\\uNNNN``, and
    line breaks as spaces: a user string (a tag, a file name, a plugin's message) cannot
    move the cursor, clear the terminal, fake a line or display reversed."""
    text = str(text).translate(_CONTROL)
    if text.isascii():
        return text
    import unicodedata

    def visible(ch: str) -> str:
        if unicodedata.category(ch) != "Cf":
            return ch
        return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"

    return "".join(visible(ch) for ch in text)


def generating(task: str, split: str = "") -> str:
    """The progress label of data generation (never read as training):
    ``generating burgers train data``."""
    return f"generating {task} {split} data" if split else f"generating {task} data"


class _Printable(logging.Formatter):
    """One line per message (:func:`printable`); a captured warning without the source
    line ``warnings`` appends to it.  On a terminal a phase line (INFO) is the bare
    message; other levels are prefixed with theirs."""

    def __init__(self, fmt: str, datefmt: str, interactive: bool = False) -> None:
        super().__init__(fmt, datefmt=datefmt)
        self.interactive = interactive

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage().rstrip("\n")
        if record.name == "py.warnings" and "\n  " in text:
            text = text.rsplit("\n  ", 1)[0]
        record.msg, record.args = printable(text), None
        if self.interactive and record.levelno == logging.INFO:
            return record.msg
        return super().format(record)


def _no_executor_chatter(record: logging.LogRecord) -> bool:
    """Drop submitit's own notices below ERROR (its debug executor warns, once per job,
    where it copies its logs): the sweep prints one line per job itself."""
    where = record.pathname.replace("\\", "/")
    return record.levelno >= logging.ERROR or "/submitit/" not in where


def configure(verbose: bool = False, quiet: bool = False) -> None:
    """Idempotent set-up of the ``pcgbench`` logger and of captured warnings: each phase
    of a run is one INFO line, shown unless ``quiet`` (``verbose`` shows them even then
    and adds DEBUG detail)."""
    interactive = sys.stderr.isatty()
    fmt = ("%(levelname)s: %(message)s" if interactive
           else "%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    if not any(getattr(h, "_pcgbench", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(_Printable(fmt, datefmt="%Y-%m-%d %H:%M:%S",
                                        interactive=interactive))
        handler._pcgbench = True  # type: ignore[attr-defined]
        handler.addFilter(_no_executor_chatter)
        root.addHandler(handler)
    if _no_executor_chatter not in root.filters:  # submitit logs some notices on the root
        root.addFilter(_no_executor_chatter)  # logger itself: whatever handler is there
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    logging.getLogger("py.warnings").setLevel(logging.WARNING)
    logging.captureWarnings(True)
