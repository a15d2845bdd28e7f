"""`pcgbench report`: a self-contained HTML page, checked in a real headless Chromium
(Debian's chromium + chromium-driver, driven by selenium; skipped where they are absent)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pcgbench.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def report(tmp_path_factory, monkeypatch_module) -> Path:
    root = tmp_path_factory.mktemp("report")
    monkeypatch_module.setenv("PCGBENCH_RESULTS", str(root / "results"))
    monkeypatch_module.setenv("PCGBENCH_DATA", str(root / "data"))
    for method in ("fm_ot", "pmosfm"):
        assert main(["run", "--task", "burgers", "--method", method, "--preset", "smoke",
                     "--save-samples", "4", "--quiet"]) == 0
    assert main(["report", "--out", str(root / "out")]) == 0
    return root / "out" / "report.html"


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_report_is_self_contained(report: Path):
    page = report.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "http://" not in page and "https://" not in page  # nothing fetched
    assert page.count("<table") >= 2 and page.count("data:image/png;base64,") >= 4
    assert "fm_ot (n=1)" in page and "data (reference)" in page


def test_report_loads_in_headless_chromium(report: Path, tmp_path: Path):
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (CHROMIUM and DRIVER):
        pytest.skip("no chromium/chromedriver (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1300,2400"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    try:
        driver.get(report.as_uri())
        assert driver.title == "pcgbench report"
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        tables = driver.find_elements("css selector", "table")
        assert len(tables) >= 2
        assert all(len(t.find_elements("css selector", "tbody tr")) > 0 for t in tables)
        images = driver.find_elements("css selector", "figure img")
        assert len(images) >= 4
        for img in images:
            w = driver.execute_script("return arguments[0].complete && "
                                      "arguments[0].naturalWidth", img)
            assert w and w > 50, img.get_attribute("alt")
        shot = tmp_path / "report.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        driver.quit()


def test_report_variants_are_shown_on_request_and_counted_otherwise(report: Path, capsys):
    """``report`` leaves variant columns out by default and says how many; ``--variants``
    shows each (issue 63); the sanity rows stand beside the data column, never as a
    method's samples."""
    assert main(["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke",
                 "--set", "iterations=2", "--quiet"]) == 0
    out_dir = report.parent
    capsys.readouterr()
    assert main(["report", "--out", str(out_dir)]) == 0
    assert "left out 1 variant column(s)" in capsys.readouterr().out
    assert "fm_ot[iterations=2]" not in report.read_text()
    assert main(["report", "--out", str(out_dir), "--variants"]) == 0
    assert "left out" not in capsys.readouterr().out
    page = report.read_text()
    assert "fm_ot[iterations=2]" in page and "noise (sanity)" in page
    assert main(["report", "--out", str(out_dir), "--no-sanity"]) == 0
    assert "noise (sanity)" not in report.read_text()
