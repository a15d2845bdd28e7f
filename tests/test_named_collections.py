"""Every named collection is the one generic :class:`pcgbench.registry.Registry`: an
unknown name is one line with the closest match and the known names."""

from __future__ import annotations

import pytest

from pcgbench.errors import PcgError, UnknownNameError
from pcgbench.leaderboard.ablation import ABLATIONS, ablation_layout
from pcgbench.leaderboard.suite import SUITES, suite_layout
from pcgbench.methods.onestep import OBJECTIVES
from pcgbench.registry import METHODS, METRICS, STUDIES, TASKS, Registry
from pcgbench.stages import tune
from pcgbench.task import NORMALIZERS, Normalizer

COLLECTIONS = {"tasks": TASKS, "methods": METHODS, "metrics": METRICS, "studies": STUDIES,
               "objectives": OBJECTIVES, "normalizers": NORMALIZERS, "suites": SUITES,
               "ablations": ABLATIONS, "tune studies": tune.TUNE_STUDIES}


@pytest.mark.parametrize("name", sorted(COLLECTIONS))
def test_each_collection_is_a_registry_with_entries(name):
    reg = COLLECTIONS[name]
    assert isinstance(reg, Registry) and reg.names()
    first = reg.names()[0]
    assert reg[first] is reg.get(first)


@pytest.mark.parametrize("lookup, typo, expect", [
    (suite_layout, "constrained_pd", "did you mean 'constrained_pde'"),
    (ablation_layout, "one_stp", "did you mean 'one_step'"),
    (tune.get_study, "pmosfm_delta_lw", "did you mean 'pmosfm_delta_law'"),
    (NORMALIZERS.get, "mean_mod", "did you mean 'mean_mode'"),
])
def test_an_unknown_name_is_one_line_with_the_closest_and_the_known_names(lookup, typo,
                                                                          expect):
    with pytest.raises(UnknownNameError) as info:
        lookup(typo)
    message = str(info.value)
    assert expect in message and "known: " in message and "\n" not in message


def test_a_normalizer_must_be_a_normalizer_and_names_are_unique():
    with pytest.raises(PcgError, match="not a subclass"):
        NORMALIZERS.add("not_one", int)
    with pytest.raises(PcgError, match="duplicate"):
        NORMALIZERS.add("channel", type("Other", (Normalizer,), {}))
