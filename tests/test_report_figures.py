"""The report's figures say what they show: field axes named per task (x, t / x, y), one
colour scale for reference and samples with a labelled colour bar, a Q-R joint-PDF panel
on 3-D velocity tasks, and every image shown at (nearly) its natural size in a real
headless Chromium, with no blank tail under the last figure."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from pcgbench.leaderboard.figures import axis_names, plane
from pcgbench.leaderboard.report import build_report, task_section
from pcgbench.registry import METHODS, TASKS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def test_axis_names_and_planes():
    assert axis_names("burgers", 2) == ("t", "x")
    assert axis_names("navier_stokes", 3) == ("t", "y", "x")
    assert axis_names("darcy", 2) == ("x", "y")
    assert axis_names("hit_forecasting", 3) == ("x", "y", "z")
    a = np.arange(12.0).reshape(3, 4)
    img, v, h = plane(a, ("t", "x"))
    assert (v, h) == ("t", "x") and np.array_equal(img, a)  # x across, t upward
    img, v, h = plane(a, ("x", "y"))
    assert (v, h) == ("y", "x") and np.array_equal(img, a.T)  # ij arrays: x across
    cube = np.arange(4 * 5 * 6.0).reshape(4, 5, 6)
    img, v, h = plane(cube, ("x", "y", "z"))
    assert (v, h) == ("y", "x") and np.array_equal(img, cube[:, :, 3].T)
    img, v, h = plane(cube, ("t", "y", "x"))
    assert (v, h) == ("y", "x") and np.array_equal(img, cube[2])


def test_spectrum_reads_the_channel_it_is_asked_for():
    from pcgbench.leaderboard.figures import radial_spectrum

    x = np.linspace(0, 2 * np.pi, 32, endpoint=False)
    a = np.zeros((3, 2, 32, 32))
    phase = np.arange(3)[:, None, None]
    a[:, 0] = np.sin(3 * x[None, :, None] + phase)  # |k| = 3 on channel 0
    a[:, 1] = np.sin(5 * x[None, None, :] + phase)  # |k| = 5 on channel 1
    for c, k_peak in ((0, 3), (1, 5)):
        k, p = radial_spectrum(a, c)
        assert k[np.argmax(p)] == k_peak


def _solenoidal(n: int, k: int, seed: int) -> np.ndarray:
    """``[n, 4, k, k, k]``: random divergence-free velocities (u, v, w) and a pressure."""
    import torch

    from pcgbench.tasks.hit.solver import random_solenoidal_field

    u = random_solenoidal_field(k, n, 2.0, 1.0, torch.Generator().manual_seed(seed))
    p = torch.zeros(n, 1, k, k, k, dtype=u.dtype)
    return torch.cat([u, p], 1).float().numpy()


def _records(root: Path) -> list[dict]:
    rng = np.random.default_rng(0)
    fields = {"burgers": rng.standard_normal((4, 1, 11, 32)).cumsum(-1) / 5,
              "hit_forecasting": _solenoidal(4, 8, 0)}
    out = []
    for task, ref in fields.items():
        for i, method in enumerate(("data", "fm_ot", "pmosfm")):
            rec = {"task": task, "method": method, "seed": 0, "preset": "smoke",
                   "status": "ok", "metrics": {"wd": 0.1 * (i + 1), "re": 1.0 + i},
                   "nfe": 0 if method == "data" else 20 if method == "fm_ot" else 1,
                   "inference": {"seconds_per_sample": 10.0 ** -(i + 1)},
                   "training": {"seconds_per_update": 0.1, "loss_curve": [[0, 2.0], [9, 1.0]]},
                   "code_versions": {"task": TASKS.get(task).version,
                                     "data": TASKS.get(task).data_version},
                   "finished": "1"}
            if method == "data" and TASKS.get(task).reference_version():
                rec["code_versions"]["reference"] = TASKS.get(task).reference_version()
            if method != "data":
                rec["code_versions"]["method"] = METHODS.get(method).version
                path = root / f"{task}-{method}.samples.h5"
                noise = 0.3 * rng.standard_normal(ref.shape).astype(np.float32)
                samples = (_solenoidal(4, 8, i) if task == "hit_forecasting"
                           else ref + noise)
                with h5py.File(path, "w") as f:
                    f["samples"], f["reference"] = samples, ref
                rec["samples_file"] = str(path)
            out.append(rec)
    return out


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[list[dict], Path]:
    root = tmp_path_factory.mktemp("figs")
    return _records(root), root


def test_sections_label_and_scale_their_figures(synthetic):
    from pcgbench.leaderboard import group_records

    records, _ = synthetic
    groups = group_records(records)
    burgers = task_section("burgers", "smoke", groups[("burgers", "smoke")], records)
    hit = task_section("hit_forecasting", "smoke", groups[("hit_forecasting", "smoke")],
                       records)
    assert "one colour scale" in burgers and "Q-R joint PDFs" not in burgers
    assert "Q-R joint PDFs of the velocity gradient" in hit
    # one sample grid per channel (methods may agree on one channel and not another)
    hit_names = TASKS.get("hit_forecasting")(preset="smoke", progress=False).spec.channel_names
    assert burgers.count('class="wide"') == 2
    # histograms and spectra: one panel per channel (wide figures from 3 channels on)
    assert hit.count('class="wide"') == 4 + len(hit_names) and len(hit_names) > 1
    assert all(f"{what}, one panel per channel" in hit
               for what in ("value histograms of the saved samples",
                            "energy spectra (radially averaged)"))
    assert all(f"samples ({name})" in hit for name in hit_names)
    # an unconditional task's draws are not reconstructions of the test rows above them
    assert "not a reconstruction of the row above it" in burgers
    assert "the same first test conditions" in hit and "reconstruction of the row" not in hit


def test_a_constant_channel_draws_without_numeric_warnings(synthetic):
    """The synthetic HIT pressure is all zeros: its histogram gets a non-degenerate bin
    range (zero-width bins divided by zero in the density)."""
    import warnings

    from pcgbench.leaderboard import group_records

    records, _ = synthetic
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        hit = task_section("hit_forecasting", "smoke",
                           group_records(records)[("hit_forecasting", "smoke")], records)
    assert "figure left out" not in hit


@pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="no chromium/chromedriver")
def test_every_figure_is_readable_at_100_percent(synthetic, tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    records, _ = synthetic
    page, _ = build_report(records, tmp_path / "out")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1300,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    try:
        driver.get(page.as_uri())
        sizes = driver.execute_script(
            "return [...document.images].map(i => [i.alt, i.naturalWidth, i.clientWidth])")
        assert len(sizes) >= 12
        for alt, natural, shown in sizes:  # never shrunk below 60 % (text stays legible)
            assert natural > 50 and shown >= 0.6 * natural, (alt, natural, shown)
        width = driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= 1300  # nothing runs off to the side
        tail = driver.execute_script(
            "const f = [...document.querySelectorAll('figure')].pop();"
            "return document.documentElement.scrollHeight - f.getBoundingClientRect().bottom"
            " - window.scrollY")
        assert tail < 150  # no blank stretch under the last figure
    finally:
        driver.quit()
