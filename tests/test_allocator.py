"""glibc malloc thresholds at import (pcgbench.runtime.allocator): applied on Linux/glibc, skipped
where the user chose (any MALLOC_* variable, PCGBENCH_MALLOPT=0)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

PROBE = "import pcgbench, pcgbench.runtime.allocator as a; print(a.APPLIED)"


def _applied(**env: str) -> str:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("MALLOC_") and k != "PCGBENCH_MALLOPT"}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc only")
def test_thresholds_are_set_at_import_unless_the_user_chose():
    assert _applied() == "True"
    assert _applied(PCGBENCH_MALLOPT="0") == "False"
    assert _applied(MALLOC_ARENA_MAX="2") == "False"  # the user's malloc settings win
