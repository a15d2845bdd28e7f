"""The published record set: shipped sealed and in sync with docs/leaderboard.md, shown on a
fresh results directory with its provenance, replaced by a user's own record of the same
identity, named (never scored) when stale, and `pcgbench reproduce` comparing a rerun
with it metric by metric."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from conftest import cli

from pcgbench.leaderboard import published as pub
from pcgbench.leaderboard import published_page
from pcgbench.registry import METHODS
from pcgbench.results.record import seal_record

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def shipped(monkeypatch):
    """The repository's own published set (conftest turns it off for every other test)."""
    monkeypatch.delenv(pub.ENV, raising=False)
    return pub.published_root()


def test_every_shipped_record_is_sealed_usable_and_the_page_is_in_sync(shipped):
    files = sorted((shipped / "records").rglob("*.json"))
    assert files, "the repository ships no published records"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a record skipped for any reason fails here
        records = pub.load_published()
    assert len(records) == len(files)
    assert all(pub.is_published(r) for r in records)
    page = (REPO / published_page.DOC).read_text()
    assert page == published_page.published_doc(), (
        "docs/leaderboard.md is out of sync with published/ or the code: regenerate it with "
        "`python -m pcgbench.leaderboard.published_page --write docs/leaderboard.md`")


def test_a_fresh_results_directory_shows_the_published_table(dirs, shipped, capsys):
    rc, out, err = cli(capsys, ["leaderboard", "--task", "burgers", "--preset", "cpu"])
    assert rc == 0, err
    assert "fm_ot (n=3)" in out and "published cells (the repository's published/ set" in out
    rc, out, _ = cli(capsys, ["leaderboard", "--task", "burgers", "--no-published"])
    assert rc == 2 and "no run records" in _  # the user's own directory alone is empty


def test_withheld_cells_are_registered_unpublished_and_named_under_their_table(shipped,
                                                                              capsys):
    from pcgbench.registry import TASKS

    items = pub.withheld()
    assert json.loads((shipped / pub.WITHHELD_FILE).read_text()) == items  # all well-formed
    for item in items:
        TASKS.get(item["task"]), METHODS.get(item["method"])
        assert (REPO / item["doc"].split(",")[0]).is_file()
        cell = shipped / "records" / item["task"] / item["preset"] / item["method"]
        assert not any(cell.glob("*.json")), f"{cell} is withheld but published"
        rc, out, err = cli(capsys, ["leaderboard", "--task", item["task"], "--preset",
                                    item["preset"], "--published-only"])
        assert rc == 0, err
        assert f"withheld from the published set as doubtful: {item['method']}" in out


@pytest.fixture
def smoke_set(dirs, monkeypatch, capsys):
    """Two smoke seeds of fm_ot on burgers run into results A and published to P; the
    environment then points at an empty results directory B and the published set P."""
    a, p = dirs / "A", dirs / "P"
    rc, _, err = cli(capsys, ["run", "--task", "burgers", "--method", "fm_ot", "--preset",
                              "smoke", "--seed", "0", "1", "--quiet", "--results", str(a),
                              "--save-samples", "4"])
    assert rc == 0, err
    rc, out, err = cli(capsys, ["publish", "--preset", "smoke", "--results", str(a),
                                "--to", str(p)])
    assert rc == 0 and "published 9 record(s)" in out, err  # data floor + 6 fakes + 2 seeds
    monkeypatch.setenv(pub.ENV, str(p))
    monkeypatch.setenv("PCGBENCH_RESULTS", str(dirs / "B"))
    return a, p


def test_published_cells_are_marked_and_the_users_own_record_replaces_one(smoke_set, capsys):
    a, _ = smoke_set
    rc, out, _ = cli(capsys, ["leaderboard", "--task", "burgers", "--preset", "smoke"])
    assert rc == 0 and "fm_ot (n=2)" in out and "fm_ot (seeds 0, 1)" in out
    # results A holds the same identities: its records are read, the published ones not
    rc, out, _ = cli(capsys, ["leaderboard", "--task", "burgers", "--preset", "smoke",
                              "--results", str(a)])
    assert rc == 0 and "fm_ot (n=2)" in out and "published cells" not in out


def test_reproduce_agrees_on_a_deterministic_rerun_and_flags_a_changed_value(smoke_set,
                                                                             capsys):
    _, p = smoke_set
    rc, out, err = cli(capsys, ["reproduce", "burgers", "fm_ot", "1", "--preset", "smoke",
                                "--quiet"])
    assert rc == 0, err
    assert "identical" in out and "DIFFERS" not in out and "metrics agree" in out
    # every record keeps its splits' SHA-256: the rerun's data are the published cell's
    assert "data: test, train, val identical to the published cell's (SHA-256)" in out
    # a published value moved far beyond the cell's seed spread: named, exit status 1
    (path,) = (p / "records" / "burgers" / "smoke" / "fm_ot").glob("seed1-*.json")
    rec = json.loads(path.read_text())
    rec.pop("digest")
    rec["metrics"]["structure"] *= 10
    rec["data_checksums"]["train"] = "0" * 64  # as if the solver gave other bytes there
    path.write_text(json.dumps(seal_record(rec)))
    rc, out, _ = cli(capsys, ["reproduce", str(path), "--preset", "smoke", "--quiet"])
    assert rc == 1 and "structure" in out and "DIFFERS (beyond the seed spread" in out
    assert "data: the train split(s) DIFFER from the published cell's" in out
    # a metric every published seed scored the same (a saturated classifier): said so
    for f in (p / "records" / "burgers" / "smoke" / "fm_ot").glob("seed*-*.json"):
        rec = json.loads(f.read_text())
        rec.pop("digest")
        rec["metrics"]["c2st"] = 0.123
        f.write_text(json.dumps(seal_record(rec)))
    rc, out, _ = cli(capsys, ["reproduce", str(path), "--preset", "smoke", "--quiet"])
    assert rc == 1 and "every published seed scored 0.123: a spread of 0" in out


def test_reproduce_refuses_an_unknown_or_stale_cell_in_one_line(smoke_set, capsys,
                                                                monkeypatch):
    rc, _, err = cli(capsys, ["reproduce", "burgers", "fm_ot", "7", "--preset", "smoke"])
    assert rc == 2 and "no published record of burgers/fm_ot seed 7" in err
    assert len(err.strip().splitlines()) == 1
    monkeypatch.setattr(METHODS.get("fm_ot"), "version", METHODS.get("fm_ot").version + 1)
    rc, _, err = cli(capsys, ["reproduce", "burgers", "fm_ot", "0", "--preset", "smoke"])
    assert rc == 2 and "is stale here" in err
    # and the table names the stale cells instead of scoring them
    rc, out, _ = cli(capsys, ["leaderboard", "--task", "burgers", "--preset", "smoke"])
    assert rc == 0 and "fm_ot (n=" not in out and "rerun" in out


def test_a_sweep_counts_published_cells_as_done(smoke_set, capsys):
    argv = ["sweep", "--dry-run", "--preset", "smoke", "--tasks", "burgers", "--methods",
            "fm_ot", "--seeds", "0", "1", "2"]
    rc, out, err = cli(capsys, argv)
    assert rc == 0, err
    assert "1 run(s) to do" in out and "2 published" in out
    rc, out, _ = cli(capsys, [*argv, "--no-published"])
    assert rc == 0 and "3 run(s) to do" in out


def test_the_report_draws_the_published_cells_samples(smoke_set, capsys, tmp_path):
    _, p = smoke_set
    (h5,) = (p / "records" / "burgers" / "smoke" / "fm_ot").glob("*.samples.h5")
    assert h5.name.startswith("seed0-")  # the lowest seed's, beside its record
    rc, out, err = cli(capsys, ["report", "--task", "burgers", "--preset", "smoke", "--out",
                                str(tmp_path / "rep")])
    assert rc == 0, err
    page = (tmp_path / "rep" / "report.html").read_text()
    assert 'alt="samples (u)' in page and "skipping samples" not in err


def test_a_published_backbone_is_rerun_only_where_a_method_here_needs_its_checkpoint(
        smoke_set, capsys):
    """Records ship without checkpoints: a sampling-time method planned on a fresh machine
    needs its backbone's weights, so the sweep runs (and prices) the published backbone for
    that seed once, as a backbone job; seeds where nothing needs it stay published."""
    rc, out, err = cli(capsys, ["sweep", "--dry-run", "--preset", "smoke", "--tasks",
                                "burgers", "--methods", "cocogen", "--seeds", "0"])
    assert rc == 0, err
    assert ("backbone burgers/fm_ot seed 0 (published; its checkpoint is needed here)"
            in " ".join(out.split()))
    assert "method   burgers/cocogen seed 0" in out
    rc, out, err = cli(capsys, ["sweep", "--dry-run", "--preset", "smoke", "--tasks",
                                "burgers", "--methods", "fm_ot", "--seeds", "0", "1"])
    assert rc == 0 and "0 run(s) to do" in out and "2 published" in out, err


def test_the_page_says_how_much_of_the_papers_matrices_is_published(smoke_set):
    from pcgbench.leaderboard.published_page import coverage_markdown

    text = coverage_markdown(pub.load_published(), "smoke")
    assert "## Coverage of the main table at `smoke`" in text
    assert "## Coverage of the constrained-PDE suite at `smoke`" in text
    burgers = next(line for line in text.splitlines() if line.startswith("| burgers |"))
    cells = [c.strip() for c in burgers.strip("|").split("|")]
    header = next(line for line in text.splitlines() if line.startswith("| task |"))
    names = [c.strip() for c in header.strip("|").split("|")]
    assert cells[names.index("fm_ot")] == "2 (0, 1)"  # two smoke seeds published
    assert cells[names.index("pmosfm")] == "–"  # a paper column with nothing yet
    assert cells[names.index("pcft")] == "n/a"  # not a column of burgers' paper table
    assert "0 of 40 cells have seeds 0–2" in text  # two seeds are not a full cell
    # the suite's Navier-Stokes row: D-Flow and PBFM are empty in the paper's table
    ns = next(line for line in text.splitlines() if line.startswith("| navier_stokes |"))
    suite_header = [line for line in text.splitlines() if line.startswith("| task |")][1]
    ns_cells = dict(zip([c.strip() for c in suite_header.strip("|").split("|")],
                        [c.strip() for c in ns.strip("|").split("|")], strict=True))
    assert ns_cells["dflow"] == ns_cells["pbfm"] == "n/a" and ns_cells["pmosfm"] == "–"
    assert "of 33 cells" in text
