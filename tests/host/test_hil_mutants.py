"""Each scenario can fail: a deliberately broken firmware build (alabama.hil.mutants) makes the scenario
that guards the broken behaviour FAIL — while the same scenarios pass on the real firmware (read from the whole-suite
run of test_hil_suite.py, `test_every_scenario_a_mutant_guards_passed_in_the_whole_suite`: not a second run here).

The mutant runs are split over this file (group "a"), test_hil_mutants_b.py and test_hil_mutants_speech.py
(hil_mutant_support.GROUPS), so that three workers share them."""
import pytest

from alabama.hil import mutants
from alabama.hil.targets import default_firmware

from hil_mutant_support import GROUPS, check_mutant_makes_its_scenario_fail, group


def test_at_least_five_mutants_each_apply_to_the_current_firmware(tmp_path):
    assert len(mutants.MUTANTS) >= 5
    assert len({m.name for m in mutants.MUTANTS}) == len(mutants.MUTANTS)
    for m in mutants.MUTANTS:
        out = mutants.apply(m, default_firmware(), tmp_path / m.name)
        for rel, old, new in m.edits:
            text = (out / rel).read_text()
            assert new in text and text != (default_firmware() / rel).read_text()


def test_every_mutant_runs_in_exactly_one_file():
    """A mutant added to the catalogue must be given a group (hil_mutant_support.GROUPS), or it would never run."""
    grouped = [n for names in GROUPS.values() for n in names]
    assert sorted(grouped) == sorted(m.name for m in mutants.MUTANTS), "add the new mutant to hil_mutant_support.GROUPS"


def test_stale_mutant_is_refused(tmp_path):
    m = mutants.Mutant("gone", "x", "nothing", [("satellite/session.py", "this text is not in the firmware", "")])
    with pytest.raises(mutants.StaleMutant, match="update the mutant"):
        mutants.apply(m, default_firmware(), tmp_path / "gone")


@pytest.mark.slow
@pytest.mark.parametrize("mutant", group("a"), ids=[m.name for m in group("a")])
def test_mutant_makes_its_scenario_fail(mutant, tmp_path):
    check_mutant_makes_its_scenario_fail(mutant, tmp_path)
