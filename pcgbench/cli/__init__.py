"""Command-line interface: one module per command (``add_parser(sub)`` and ``run(args)``).

User errors (unknown names, unsupported combinations, bad input, unwritable
directories) print one line and exit with code 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import typing
import warnings
from collections.abc import Sequence
from importlib import import_module

from pcgbench.errors import PcgError
from pcgbench.registry import load_plugin
from pcgbench.runtime.log import printable


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2), like every other bad input."""

    def error(self, message: str) -> typing.NoReturn:
        if "not allowed with argument" in message:  # an argparse exclusive group
            message += " (they are mutually exclusive)"
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


#: command -> module with ``add_parser(sub)`` and ``run(args)`` (the order of ``--help``)
COMMANDS = {"run": "run", "list": "listing", "leaderboard": "leaderboard",
            "protocol": "protocol", "show-config": "show_config", "audit": "audit",
            "sweep": "sweep", "tune": "tune", "report": "report", "data": "data",
            "study": "study", "sanity": "sanity", "reproduce": "reproduce",
            "publish": "publish"}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pcgbench",
        description="Benchmark suite for physics-constrained generative models.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        import_module(f"pcgbench.cli.{module}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from pcgbench.runtime.termination import handling

    _encodable_streams()
    with handling():  # SIGTERM: a clean stop (a fit's partial checkpoint first), exit 143
        return _main(argv)


#: what tables and messages print beyond ASCII, as ASCII, for a stream whose encoding
#: cannot hold them (``LC_ALL=C``, ``PYTHONIOENCODING=ascii``); anything else becomes a
#: backslash escape
ASCII_FALLBACK = str.maketrans({"±": "+-", "†": "+", "‡": "++", "✓": "yes", "✗": "x",
                                "×": "x", "–": "-", "—": "--", "≤": "<=", "≥": ">=",
                                "→": "->", "≈": "~", "·": ".", "−": "-", "²": "^2",
                                "³": "^3", "ν": "nu"})


class _SafeStream:
    """stdout or stderr as every command writes it: :data:`ASCII_FALLBACK` (then
    backslash escapes) where the encoding cannot hold a character, and a failed write (a
    full disk or ``/dev/full`` behind it) raised as an OSError naming the stream instead
    of an anonymous one; everything else is the wrapped stream's."""

    def __init__(self, stream: typing.TextIO, name: str, ascii_only: bool) -> None:
        self._stream, self._name, self._ascii = stream, name, ascii_only

    def _guard(self, call: typing.Callable[[], typing.Any]) -> typing.Any:
        try:
            return call()
        except BrokenPipeError:
            raise
        except OSError as exc:
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, self._name) from None

    def write(self, text: str) -> int:
        if self._ascii:
            text = text.translate(ASCII_FALLBACK)
        return self._guard(lambda: self._stream.write(text))

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def __getattr__(self, name: str) -> typing.Any:
        return getattr(self._stream, name)


def _encodable_streams() -> None:
    """Wrap stdout and stderr in :class:`_SafeStream` (transliterating where their
    encoding cannot hold what tables print: an ASCII locale); a closed stream (None), or
    one that is not a reconfigurable text stream (captured by a test), is left alone."""
    for name, label in (("stdout", "standard output"), ("stderr", "standard error")):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _SafeStream) or not hasattr(
                stream, "reconfigure"):
            continue
        try:
            "±‡✓é".encode(getattr(stream, "encoding", None) or "ascii")
            ascii_only = False
        except (UnicodeEncodeError, LookupError):
            ascii_only = True
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                continue
        setattr(sys, name, _SafeStream(stream, label, ascii_only))


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a bad command line (one line printed), or --help (0)
        if exc.code in (0, None):
            raise
        return int(exc.code) if isinstance(exc.code, int) else 2
    if args.quiet:
        os.environ["TQDM_DISABLE"] = "1"
    from tqdm.contrib.logging import logging_redirect_tqdm

    from pcgbench.runtime.log import configure

    configure(verbose=args.verbose, quiet=args.quiet)
    from pcgbench.results.files import storage_error
    from pcgbench.runtime.termination import EXIT_CODE, Terminated

    try:
        from pcgbench.runtime import threads

        try:
            threads.apply(getattr(args, "threads_policy", None), getattr(args, "threads", None))
        except ValueError as exc:
            raise PcgError(str(exc)) from None
        for module in args.plugin:
            load_plugin(module)
        with logging_redirect_tqdm():
            rc = import_module(f"pcgbench.cli.{COMMANDS[args.command]}").run(args) or 0
        if sys.stdout is not None:  # None: started with stdout closed (`>&-`)
            sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:  # `pcgbench leaderboard | head -1`: the reader left
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as a tool killed by it
    except PcgError as exc:
        if args.debug:
            raise
        from pcgbench.stages.executor import SweepStopped

        if isinstance(exc, SweepStopped):  # a stop, not an error: as `run` documents
            print(f"pcgbench: {printable(exc)}", file=sys.stderr)
            return EXIT_CODE
        print(f"pcgbench: error: {printable(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a storage fault the code did not name (full disk, ...)
        if args.debug or exc.errno not in STORAGE_ERRNOS:
            raise
        path = exc.filename if exc.filename is not None else "a file"
        if path == "standard output":  # the interpreter's last flush must not fail again
            _silence_stdout()
        print(f"pcgbench: error: {printable(storage_error(path, exc, 'use'))}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pcgbench: interrupted (completed records are kept; rerun to resume)",
              file=sys.stderr)
        return 130
    except Terminated:
        print("pcgbench: stopped by SIGTERM (completed records and a fit's partial "
              "checkpoint are kept; rerun to resume)", file=sys.stderr)
        return EXIT_CODE
    return rc


def _storage_errnos() -> frozenset[int]:
    import errno

    names = ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EACCES", "EPERM", "ENOTDIR", "EISDIR",
             "EEXIST", "ENAMETOOLONG", "EIO", "ENOENT", "ELOOP", "EMFILE", "ENFILE")
    return frozenset(getattr(errno, n) for n in names if hasattr(errno, n))


#: OSErrors reported as one line (the path and the cause) instead of a traceback
STORAGE_ERRNOS = _storage_errnos()


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again
    (the recipe of Python's signal documentation for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured)
        pass


if __name__ == "__main__":
    warnings.simplefilter("default")
    sys.exit(main())
