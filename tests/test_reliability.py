"""The bad-input battery, kept as tests: every bad input is one line on stderr, exit 2,
no traceback (without --debug).  Cheap cases only (each fails before any training)."""

from __future__ import annotations

import pytest

from pcgbench.cli import main

RUN = ["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--quiet"]

# (argv, a substring of the one-line error)
CASES: list[tuple[list[str], str]] = [
    # unknown names
    (["run", "--task", "burgrs", "--method", "fm_ot"], "did you mean 'burgers'"),
    (["run", "--task", "burgers", "--method", "fmot"], "did you mean 'fm_ot'"),
    (["run", "--task", "", "--method", "fm_ot"], "unknown task"),
    (["run", "--task", "burgers", "--method", "../../x"], "unknown method"),
    (["run", "--task", "burgers", "--method", "fm_ot", "--preset", "huge"], "unknown preset"),
    (["run", "--task", "burgers", "--method", "fm_ot", "--preset", ""], "unknown preset"),
    (["leaderboard", "--preset", "smok"], "unknown preset 'smok'"),
    (["leaderboard", "--methods", "nope"], "unknown method 'nope'"),
    (["leaderboard", "--task", "nope"], "unknown task"),
    (["leaderboard", "--suite", "nope"], "invalid choice"),
    (["leaderboard", "--suite", "constrained_pde", "--task", "heat"], "exclusive"),
    (["leaderboard", "--format", "xml"], "invalid choice"),
    (["protocol", "--task", "nope"], "unknown task"),
    (["protocol", "--methods", "nope"], "unknown method"),
    (["protocol", "--preset", "nope"], "unknown preset"),
    (["show-config", "--task", "burgers", "--method", "nope"], "unknown method"),
    (["show-config", "--task", "nope", "--method", "fm_ot"], "unknown task"),
    (["show-config", "--task", "burgers", "--method", "fm_ot", "--preset", "x"],
     "unknown preset"),
    (["study", "nope"], "unknown study"),
    (["data", "verify", "--task", "nope"], "unknown task"),
    (["data", "verify", "--task", "burgers", "--split", "bogus"], "invalid choice"),
    (["data", "explode", "--task", "burgers"], "invalid choice"),
    (["list", "gizmos"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
    (["run", "--task", "burgers"], "required: --method"),
    (["run", "--method", "fm_ot"], "required: --task"),
    # unsupported combinations
    (["run", "--task", "burgers", "--method", "eci", "--preset", "smoke", "--quiet", "--set",
      "constraints=['nope']"], "no constraint 'nope'"),
    (["run", "--task", "burgers", "--method", "pcfm", "--preset", "smoke", "--set",
      "constraints=nope"], "no constraint 'nope'"),
    # numbers
    ([*RUN, "--seed", "-1"], "--seed must be an integer"),
    ([*RUN, "--seed", "4294967296"], "--seed must be an integer"),
    ([*RUN, "--seed", "one"], "invalid int value"),
    ([*RUN, "--batch-size", "0"], "--batch-size must be >= 1"),
    ([*RUN, "--batch-size", "-3"], "--batch-size must be >= 1"),
    ([*RUN, "--batch-size", "x"], "invalid int value"),
    ([*RUN, "--timing-repeats", "0"], "--timing-repeats"),
    ([*RUN, "--save-samples", "-2"], "--save-samples must be >= 0"),
    # devices
    ([*RUN, "--device", "gpu0"], "is not a device"),
    ([*RUN, "--device", "cuda:x"], "is not a device"),
    ([*RUN, "--device", "meta"], "only auto, cpu, cuda"),
    ([*RUN, "--device", ""], "is not a device"),
    # paths
    ([*RUN, "--results", "~nouser_pcgbench/x"], "cannot expand '~'"),
    ([*RUN, "--data-dir", "~nouser_pcgbench/x"], "cannot expand '~'"),
    (["run", "--task", "kolmogorov", "--method", "fm_ot", "--preset", "smoke",
      "--data-file", "/nonexistent/file.h5"], "no such file"),
    (["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--data-file",
      "/nonexistent/{split}.h5"], "not found"),
    # plugins
    ([*RUN, "--plugin", "a b"], "malformed --plugin"),
    ([*RUN, "--plugin", "surely_missing_plugin_xyz"], "cannot be imported"),
    ([*RUN, "--plugin", "/nonexistent/plugin.py"], "no such file"),
    # --set
    ([*RUN, "--set", "novalue"], "malformed --set"),
    ([*RUN, "--set", "=3"], "malformed --set"),
    ([*RUN, "--set", "nosuchkey=1"], "unknown config key"),
    ([*RUN, "--set", "backbone.nosuch=1"], "unknown config key"),
    ([*RUN, "--set", "backbone=3"], "is a group"),
    ([*RUN, "--set", "lr.x=3"], "has no fields"),
]
for field, bad, needle in [
    ("iterations", "abc", "expects an integer"), ("iterations", "1.5", "expects an integer"),
    ("iterations", "-1", "integer >= 0"), ("iterations", "True", "expects an integer"),
    ("iterations", "[1]", "expects an integer"), ("iterations", "None", "expects an integer"),
    ("batch_size", "0", "integer >= 1"), ("batch_size", "-2", "integer >= 1"),
    ("batch_size", "2.0", "expects an integer"), ("steps", "-5", "integer >= 0"),
    ("steps", "ten", "expects an integer"), ("lr", "nan", "finite"), ("lr", "inf", "finite"),
    ("lr", "-inf", "finite"), ("lr", "0", "> 0"), ("lr", "-1e-3", "> 0"),
    ("lr", "abc", "a number"), ("lr", "True", "a number"), ("lr", "[1]", "a number"),
    ("ot_coupling", "maybe", "true or false"), ("ot_coupling", "2", "true or false"),
    ("ot_coupling", "[]", "true or false"), ("backbone.width", "0", "integer >= 1"),
    ("backbone.width", "8.5", "expects an integer"), ("backbone.modes", "-1", "integer >= 1"),
    ("backbone.layers", "zero", "expects an integer"), ("backbone.kind", "3", "a string"),
    ("backbone.embed_dim", "0", "integer >= 1"),
]:
    CASES.append(([*RUN, "--set", f"{field}={bad}"], needle))
for method, field, bad, needle in [
    ("pmosfm", "gamma", "nan", "finite"), ("pmosfm", "delta_range", "0.5", "expects a list"),
    ("pmosfm", "delta_range", "[0.1]", "a list of 2"), ("pmosfm", "whitening_rank", "x",
                                                      "an integer"),
    ("pmosfm", "chart", "3", "a string or None"), ("pcfm", "constraints", "3", "a list"),
    ("pcfm", "damping", "nan", "finite"), ("pcfm", "relaxed", "sometimes", "true or false"),
    ("eci", "n_mix", "-1", "integer >= 0"), ("dflow", "history_size", "0", "integer >= 1"),
    ("diffusionpde", "guidance", "abc", "a number or None"),
    ("diffusionpde", "power_iters", "1.5", "an integer"), ("pbfm", "unroll", "x",
                                                            "an integer or None"),
    ("pidm", "c_res", "inf", "finite"), ("cocogen", "corrections", "-1", "integer >= 0"),
]:
    CASES.append((["run", "--task", "burgers", "--method", method, "--preset", "smoke",
                   "--quiet", "--set", f"{field}={bad}"], needle))


def test_the_battery_is_large():
    assert len(CASES) >= 80


@pytest.mark.parametrize(("argv", "needle"), CASES, ids=[" ".join(a)[-60:] for a, _ in CASES])
def test_bad_input_is_one_line_exit_2(argv, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PCGBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("PCGBENCH_DATA", str(tmp_path / "data"))
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse errors
        rc = exc.code
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc == 2, (argv, err, captured.out[-500:])
    assert needle in err, (needle, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_data_dir_that_is_a_file_fails_before_generating(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main([*RUN, "--data-dir", str(blocker)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not writable" in err and len(err.splitlines()) == 1


def test_method_that_raises_or_returns_numpy_is_one_line(tmp_path, monkeypatch, capsys):
    import numpy as np

    from pcgbench.methods.fm_ot import FMOT
    from pcgbench.registry import METHODS

    class Raises(FMOT):
        def fit(self, train, progress=True):
            raise ZeroDivisionError("oops\nmore")

    class Numpy(FMOT):
        def sample(self, cond, n, generator):
            return np.zeros((n, *self.task.spec.field_shape))

    for name, cls in (("raises_in_fit", Raises), ("returns_numpy", Numpy)):
        if name not in METHODS:
            METHODS.add(name, cls)
    monkeypatch.setenv("PCGBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("PCGBENCH_DATA", str(tmp_path / "data"))
    run = ["run", "--task", "burgers", "--preset", "smoke", "--quiet", "--method"]
    assert main([*run, "raises_in_fit"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'raises_in_fit' failed in fit: ZeroDivisionError: oops" in err
    assert len(err.splitlines()) == 1
    assert main([*run, "returns_numpy", "--set", "iterations=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "returned a ndarray" in err and len(err.splitlines()) == 1
