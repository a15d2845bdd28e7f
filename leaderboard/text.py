"""Text primitives every table shares: how a number prints (:func:`fmt_number`), names
and notes escaped for markdown and LaTeX, the LaTeX float and document around tables, the
notes under a table, and CSV text.  Pure functions of strings and frames."""

from __future__ import annotations

import math

import pandas as pd

from pcgbench.runtime.log import printable


def fmt_number(v: float | None) -> str:
    """How every table prints a number: '–' for None or NaN, ``0``, scientific with 4
    significant digits at or above 1e4 or below 1e-3 in magnitude, else 4 significant
    digits (``inf`` and ``-inf`` as Python writes them)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-3:
        return f"{v:.3e}"
    return f"{v:.4g}"


_LATEX_SPECIAL = {"_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
                  "\\": r"\textbackslash{}", "{": r"\{", "}": r"\}",
                  "^": r"\textasciicircum{}", "~": r"\textasciitilde{}"}
#: the non-ASCII characters tables and notes print, as text pdflatex sets (its utf8 input
#: encoding leaves e.g. the dagger undefined)
_LATEX_SPECIAL.update({"†": r"$^{\dagger}$", "‡": r"$^{\ddagger}$", "–": "--", "—": "---",
                       "±": r"$\pm$",
                       "×": r"$\times$", "≤": r"$\leq$", "≥": r"$\geq$", "→": r"$\to$",
                       "≈": r"$\approx$", "ν": r"$\nu$", "²": r"\textsuperscript{2}",
                       "³": r"\textsuperscript{3}", "·": r"$\cdot$", "−": "-",
                       # the default OT1 font sets these as other glyphs (¡ ¿ —)
                       "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"})


def latex_escape(text: str) -> str:
    """A plain-text cell (method, variant, metric and file names) as LaTeX text: every
    special character escaped (``\\ { } ^ ~ _ % & # $``) and control characters written
    out, so a name cannot run a command (``\\input``) or break the table; a character
    pdflatex's default fonts cannot set (beyond the Latin-1 letters its utf8 input
    encoding maps, e.g. 日) as its code point, ``[U+65E5]`` in typewriter type, so
    ``--standalone`` compiles whatever a name holds."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) if _settable(ch)
                   else f"\\texttt{{[U+{ord(ch):04X}]}}" for ch in printable(text))


def _settable(ch: str) -> bool:
    """ASCII, a character with a mapping above, or a Latin-1 letter (À-ÿ but × ÷)."""
    return ch.isascii() or ch in _LATEX_SPECIAL or (
        "\u00c0" <= ch <= "\u00ff" and ch not in "\u00d7\u00f7")


#: markdown characters that format wherever they stand (a backslash first: it escapes)
_MD_ALWAYS = frozenset("\\`*~")
#: what after ``<`` makes a closing tag, a comment, a declaration or an instruction
_MD_TAG_MARKS = frozenset("/!?")


def md_text(text: str) -> str:
    """Plain text (a name, a note) as markdown that renders as that text: control
    characters written out (:func:`pcgbench.runtime.log.printable`), and every character that
    could format, link or inject HTML backslash-escaped -- ``\\ ` * ~`` always, ``_``
    except inside a word (``fm_ot`` stays as typed: it cannot emphasise there), ``<``
    where it could open a tag, comment or autolink (``<script>``, ``<img``, ``</``,
    ``<!``), ``&`` where it could start an entity, and the ``(`` of a link ``](`` -- so a
    method, variant, data-file or device name prints as itself, as in the HTML report."""
    text = printable(text)
    out = []
    for i, ch in enumerate(text):
        before = text[i - 1] if i else ""
        after = text[i + 1] if i + 1 < len(text) else ""
        if (ch in _MD_ALWAYS
                or ch == "_" and not (before.isalnum() and after.isalnum())
                or ch == "<" and (after.isalpha() or after in _MD_TAG_MARKS)
                or ch == "&" and (after.isalnum() or after == "#")
                or ch == "(" and before == "]"):
            out.append("\\")
        out.append(ch)
    return "".join(out)


def md_escape(text: str) -> str:
    """A plain-text cell of a markdown (pipe) table: :func:`md_text`, and ``|`` escaped
    so a name cannot split a column (nor a line break a row)."""
    return md_text(text).replace("|", "\\|")


def booktabs(table: str) -> str:
    """tabulate's ``latex_raw`` output with booktabs rules (\\toprule, \\midrule,
    \\bottomrule) instead of \\hline: compiles with ``\\usepackage{booktabs}``."""
    lines = table.splitlines()
    idx = [i for i, line in enumerate(lines) if line.strip() == r"\hline"]
    if len(idx) >= 3:
        lines[idx[0]], lines[idx[1]], lines[idx[-1]] = r"\toprule", r"\midrule", r"\bottomrule"
    return "\n".join(lines)


#: how every CSV writes a float: 10 significant digits (no binary parsing noise such as
#: 0.030699999999999998 for a transcribed 0.0307; more than a float32 metric carries)
CSV_FLOAT_FORMAT = "%.10g"


def to_csv(frame: pd.DataFrame) -> str:
    """A long frame as CSV text: floats by :data:`CSV_FLOAT_FORMAT`, missing as empty,
    text cells through :func:`pcgbench.runtime.log.printable` (control and format characters
    written out, as in every other format)."""
    frame = frame.copy()
    for col in frame.columns:
        if pd.api.types.is_object_dtype(frame[col]) or pd.api.types.is_string_dtype(frame[col]):
            frame[col] = [printable(v) if isinstance(v, str) else v for v in frame[col]]
    return frame.to_csv(index=False, float_format=CSV_FLOAT_FORMAT)


#: the LaTeX packages every table needs (booktabs rules; graphicx scales wide tables)
LATEX_PACKAGES = ("booktabs", "graphicx")


def latex_float(tabular: str, caption: str, notes: list[str] | tuple[str, ...] = ()) -> str:
    """One table as a LaTeX ``table`` float: the caption (escaped), the tabular scaled
    down to the text width when it is wider (never up), the notes under it in small
    type (:func:`render_notes`).  Needs :data:`LATEX_PACKAGES`."""
    return "\n".join([
        r"\begin{table}[!htbp]", r"\centering", rf"\caption{{{latex_escape(caption)}}}",
        r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%",
        tabular + "}" + render_notes(list(notes), "latex"), r"\end{table}"])


def latex_output(blocks: list[str], standalone: bool = False) -> str:
    """LaTeX as printed by the CLI: the blocks (floats, ``%`` comments) after a comment
    naming the packages they need, or (``standalone``) a complete article that compiles
    with pdflatex as printed, blocks separated by ``\\clearpage`` (no float queue
    overflows however many tables)."""
    packages = ",".join(LATEX_PACKAGES)
    if not standalone:
        return (f"% pcgbench tables: needs \\usepackage{{{packages}}} (or use --standalone "
                "for a complete document)\n\n" + "\n\n".join(blocks))
    return "\n".join([
        r"\documentclass[10pt]{article}", r"\usepackage[margin=2cm]{geometry}",
        f"\\usepackage{{{packages}}}",
        r"\begin{document}", "\n\n\\clearpage\n\n".join(blocks), r"\end{document}", ""])


def render_notes(lines: list[str], fmt: str) -> str:
    """The notes under a table: markdown paragraphs, or LaTeX text after the tabular
    (escaped, small type); '' for none."""
    if not lines:
        return ""
    if fmt == "latex":
        return ("\n\\par\\smallskip{\\footnotesize\\raggedright\\noindent "
                + " \\\\\n".join(latex_escape(line) for line in lines) + "\\par}")
    return "".join(f"\n\n{md_text(line)}" for line in lines)
