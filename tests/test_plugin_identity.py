"""Plugins are loaded by path identity, not by stem (issue 63): two files named alike in
different folders are two plugins; the same file twice is loaded once; a real clash (two
files registering one name) is one line naming both files; the sanity rows' names are
reserved."""

from __future__ import annotations

import pytest

from pcgbench.errors import PcgError
from pcgbench.registry import METHODS, RESERVED, load_plugin
from pcgbench.sanity import SANITY_ROWS

PLUGIN = '''
from pcgbench.methods.fm_ot import FMOT
from pcgbench.registry import METHODS


@METHODS.register("{name}")
class Mine(FMOT):
    """a test plugin"""
'''


@pytest.fixture
def restore_methods():
    METHODS.names()  # discovered first: the snapshot holds every built-in method
    before = dict(METHODS._objects)
    yield
    METHODS._objects.clear()
    METHODS._objects.update(before)


@pytest.mark.parametrize("stems", [("mymethod", "mymethod"), ("méthode", "mèthode")])
def test_same_stem_in_two_folders_is_two_plugins(tmp_path, restore_methods, stems):
    for i, stem in enumerate(stems):
        folder = tmp_path / f"v{i + 1}"
        folder.mkdir()
        (folder / f"{stem}.py").write_text(PLUGIN.format(name=f"mine_v{i + 1}"))
        load_plugin(str(folder / f"{stem}.py"))
    assert METHODS.lookup("mine_v1") is not None and METHODS.lookup("mine_v2") is not None
    load_plugin(str(tmp_path / "v1" / f"{stems[0]}.py"))  # the same file again: once


def test_a_real_clash_names_both_files(tmp_path, restore_methods):
    for i in (1, 2):
        folder = tmp_path / f"v{i}"
        folder.mkdir()
        (folder / "clash.py").write_text(PLUGIN.format(name="mine_clash"))
    load_plugin(str(tmp_path / "v1" / "clash.py"))
    with pytest.raises(PcgError) as info:
        load_plugin(str(tmp_path / "v2" / "clash.py"))
    text = str(info.value)
    assert "duplicate method name 'mine_clash'" in text
    assert str(tmp_path / "v1" / "clash.py") in text and str(tmp_path / "v2" / "clash.py") \
        in text and "\n" not in text


def test_the_sanity_rows_are_reserved_method_names():
    assert set(SANITY_ROWS) <= set(RESERVED["method"])
    with pytest.raises(PcgError, match="reserved"):
        METHODS.add("noise", object)
