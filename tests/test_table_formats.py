"""``leaderboard --format latex`` is LaTeX only (headings and notes as captions and text in
the table floats), ``--standalone`` compiles with pdflatex as printed (every table within
the page, no overfull box), and the notes a markdown table carries are in the LaTeX too.
``--format csv``: one ``metric`` column, one ``method`` key with a display ``label`` for
measured and paper rows alike, paper rows without preset or seeds, floats without binary
parsing noise."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from pcgbench.cli import main
from pcgbench.registry import METHODS, TASKS
from pcgbench.results.record import seal_record


def _record(root: Path, task: str, method: str, seed: int, metrics: dict, **extra) -> None:
    variant = extra.pop("variant", None)
    path = root / "records" / task / "cpu" / method / f"seed{seed}-{variant or 'x'}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    versions = {"method": METHODS.get(method).version} if method in METHODS else {}
    versions.update(task=TASKS.get(task).version, data=TASKS.get(task).data_version)
    if method == "data" and TASKS.get(task).reference_version():
        versions["reference"] = TASKS.get(task).reference_version()
    loaded = {"start": {"load1": 9.0, "cpus": 2}, "end": {"load1": 9.0, "cpus": 2}}
    path.write_text(json.dumps(seal_record({
        "task": task, "method": method, "seed": seed, "preset": "cpu", "metrics": metrics,
        "nfe": 1 if method.startswith("pmosfm") else 20, "finished": f"t{seed}",
        "variant": variant, "code_versions": versions, "parameters": 123456,
        "inference": {"seconds_per_sample": 0.0123},
        "training": {"seconds_per_update": 1.3545741875000203},
        "memory": {"train_peak_mb": 812.5, "kind": "cpu_peak_rss_delta"},
        "load": {"fit": loaded, "sample": loaded}, **extra})))


@pytest.fixture()
def records(tmp_path, monkeypatch):
    root = tmp_path / "results"
    monkeypatch.setenv("PCGBENCH_RESULTS", str(root))
    base = {"re": 1.88, "wd": 0.3, "js": 0.05, "mmse": 0.01, "smse": 0.002, "energy": 0.4}
    methods = ("fm_ot", "pmosfm", "pmosfm_tuned", "pcfm", "eci", "dflow", "cocogen",
               "diffusionpde", "pbfm", "pidm")
    for task in ("burgers", "dynamic_stall"):
        _record(root, task, "data", 0, {**base, "wd": 0.01})
        for i, m in enumerate(methods):
            for seed in (0, 1):
                _record(root, task, m, seed, {k: v * (1 + 0.1 * i + 0.01 * seed)
                                              for k, v in base.items()})
    _record(root, "burgers", "fm_ot", 0, base, variant="tag:a_b%c&d#e")
    _record(root, "burgers", "pcfm", 2, base, status="diverged",
            status_reason="non-finite samples")
    return root


def _latex(capsys, *extra: str) -> str:
    capsys.readouterr()
    assert main(["leaderboard", "--format", "latex", *extra]) == 0
    return capsys.readouterr().out


def _compile(tex: str, tmp: Path) -> str:
    """pdflatex's log of ``tex`` (asserting rc 0 and no overfull box)."""
    (tmp / "t.tex").write_text(tex)
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "t.tex"],
                          cwd=tmp, capture_output=True, text=True, timeout=120)
    log = (tmp / "t.log").read_text(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert "Overfull \\hbox" not in log, log
    assert (tmp / "t.pdf").stat().st_size > 0
    return log


def test_latex_is_latex_only_and_carries_every_note(records, capsys):
    tex = _latex(capsys, "--variants")
    lines = tex.splitlines()
    assert lines[0].startswith("% pcgbench tables: needs \\usepackage{booktabs,graphicx}")
    assert not any(line.startswith("#") for line in lines)  # no markdown heading
    assert tex.count(r"\begin{table}") == 4 and r"\caption{burgers (preset cpu)" in tex
    assert r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}" in tex
    for note in ("under-trained", "excluded from the means", "data: our IF-RK4",
                 "SURROGATE", "departs in", "timing measured while"):
        assert note in tex, note
    assert "†" not in tex and "±" not in tex and r"$^{\dagger}$" in tex
    assert r"fm\_ot[tag:a\_b\%c\&d\#e]" in tex
    standalone = _latex(capsys, "--standalone", "--task", "burgers")
    assert standalone.startswith(r"\documentclass") and standalone.rstrip().endswith(
        r"\end{document}")
    assert main(["leaderboard", "--standalone"]) == 2
    assert "--standalone applies to --format latex only" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="pdflatex not installed (Debian: texlive-latex-base "
                    "texlive-latex-recommended)")
def test_standalone_latex_compiles_with_pdflatex(records, capsys, tmp_path):
    _compile(_latex(capsys, "--standalone", "--variants"), tmp_path)
    # the fragment compiles inside a document that loads the packages it names
    fragment = _latex(capsys, "--task", "dynamic_stall")
    doc = (r"\documentclass{article}\usepackage{booktabs,graphicx}\begin{document}"
           + fragment + r"\end{document}")
    _compile(doc, tmp_path)


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
def test_suite_and_ablation_latex_compile(tmp_path, monkeypatch, capsys):
    root = tmp_path / "results"
    monkeypatch.setenv("PCGBENCH_RESULTS", str(root))
    suite = {"mmse": 0.01, "smse": 0.002, "ce_ic": 5.0, "ce_cl": 0.02, "feature_fd": 1.5}
    for m in ("data", "ffm", "eci", "pcfm"):
        _record(root, "heat", m, 0, suite)
    for objective in ("native", "meanflow", "imf"):
        _record(root, "burgers", "pmosfm", 0, {"energy": 0.07},
                variant=None if objective == "native" else f"objective={objective}",
                config={"objective": objective})
    for args in (["--suite", "constrained_pde"], ["--ablation", "one_step"]):
        tex = _latex(capsys, *args, "--standalone")
        assert r"\caption{" in tex and "##" not in tex
        _compile(tex, tmp_path)


def test_csv_has_metric_method_label_and_clean_numbers(records, capsys):
    capsys.readouterr()
    assert main(["leaderboard", "--format", "csv", "--task", "burgers", "--variants"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("task,preset,metric,method,label,mean,std,seeds,"
                                           "source,")
    assert "0.030699999999999998" not in text and "1.3545741875000203" not in text
    df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    assert set(df["source"]) == {"measured", "paper"}
    paper, ours = df[df["source"] == "paper"], df[df["source"] == "measured"]
    assert (paper["preset"] == "").all() and (paper["seeds"] == "").all()
    assert (ours["preset"] == "cpu").all() and (ours["seeds"] != "").all()
    # one key joins our column and the paper's row; the label is the paper's name
    for frame in (paper, ours):
        fm = frame[(frame["method"] == "fm_ot") & (frame["metric"] == "re")]
        assert list(fm["label"]) == ["FM-OT"]
    assert paper[(paper["method"] == "pbfm") & (paper["metric"] == "re")]["mean"].item() \
        == "0.0307"
    assert "fm_ot[tag:a_b%c&d#e]" in set(ours["method"])
    assert ours[ours["method"] == "data"]["label"].iloc[0] == "data (reference)"
    assert {"data", "loaded", "departs_from_paper"} <= set(df.columns)
    assert (paper["loaded"] == "False").all()
    train = ours[(ours["metric"] == "train [s/update]") & (ours["method"] == "fm_ot")]
    assert train["mean"].item() == "1.354574188" and train["loaded"].item() == "True"


def test_burgers_tables_explain_the_residual_floor(records, capsys):
    """The Burgers ``re`` note: the data column is the evaluator's floor and smoother
    fields score below it -- checked on real (smoke) data: the same trajectories with
    their fronts smeared (Fourier modes |k| > 4 removed) have a lower ``re``."""
    import torch

    from pcgbench.metrics.residual import residual_error
    from pcgbench.registry import TASKS

    capsys.readouterr()
    assert main(["leaderboard", "--task", "burgers"]) == 0
    note = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("re: "))
    assert "floor" in note and "0.00435" in note
    task = TASKS.get("burgers")(preset="smoke", progress=False)
    x = task.generate("test").x
    xh = torch.fft.rfft(x.double(), dim=-1)
    xh[..., 5:] = 0
    smooth = torch.fft.irfft(xh, n=x.shape[-1], dim=-1).float()
    assert residual_error(smooth, task) < residual_error(x, task)


def test_one_renderer_formats_every_table():
    """Tables are models (``leaderboard/model.py``) rendered by ``leaderboard/render.py``:
    no other leaderboard module calls tabulate, and no module of the leaderboard or the
    CLI imports another module's private (underscore) name."""
    import ast

    root = Path(__file__).resolve().parents[1]
    for path in [*(root / "leaderboard").glob("*.py"), *(root / "pcgbench" / "cli").glob("*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names]
                assert not [n for n in names if n.startswith("_")], (path.name, names)
                if path.parent.name == "leaderboard" and path.name != "render.py":
                    assert node.module != "tabulate", path.name
            elif isinstance(node, ast.Import) and path.parent.name == "leaderboard":
                assert path.name == "render.py" or all(a.name != "tabulate"
                                                       for a in node.names), path.name


def test_latex_sets_any_name_it_cannot_typeset_as_its_code_point():
    """A name pdflatex's default fonts cannot set (CJK, symbols without a mapping) is
    written as its code point; Latin-1 letters and the mapped symbols stay (issue 63)."""
    from pcgbench.leaderboard.text import latex_escape

    assert latex_escape("données_日本.h5") == r"données\_\texttt{[U+65E5]}\texttt{[U+672C]}.h5"
    assert latex_escape("± ‡ ×") == r"$\pm$ $^{\ddagger}$ $\times$"
    assert latex_escape("a\u202eb") == r"a\textbackslash{}u202eb"  # a format character


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
def test_standalone_latex_compiles_whatever_a_data_file_is_called(tmp_path, monkeypatch,
                                                                   capsys):
    root = tmp_path / "results"
    monkeypatch.setenv("PCGBENCH_RESULTS", str(root))
    label = "data=données_日本✓.h5@0123abcd"
    _record(root, "burgers", "data", 0, {"re": 2.4, "wd": 0.07}, variant=label)
    _record(root, "burgers", "fm_ot", 0, {"re": 2.0, "wd": 0.08},
            variant=f"iterations=2,{label}")
    tex = _latex(capsys, "--standalone", "--variants", "--task", "burgers")
    assert "日" not in tex and "[U+65E5]" in tex
    _compile(tex, tmp_path)
