"""Messages go through logging: phases at --verbose, timestamps off a terminal."""

from __future__ import annotations

import logging
import re

from pcgbench.cli import main
from pcgbench.runtime.log import configure


def test_verbose_run_logs_its_phases(dirs, caplog):
    caplog.set_level(logging.INFO, logger="pcgbench")
    assert main(["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke",
                 "--quiet", "--verbose"]) == 0
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "pcgbench")
    assert "burgers/fm_ot seed 0 [smoke]: fitting" in text and "fitted in" in text


def test_off_a_terminal_lines_carry_timestamps(capsys):
    configure(verbose=True)
    handler = next(h for h in logging.getLogger().handlers if getattr(h, "_pcgbench", False))
    line = handler.format(logging.LogRecord("pcgbench", logging.INFO, __file__, 1, "hello",
                                            None, None))
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d INFO pcgbench: hello", line), line
    configure(verbose=False)
