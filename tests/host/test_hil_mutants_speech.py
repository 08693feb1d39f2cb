"""Each scenario can fail (test_hil_mutants.py): the mutants of group "speech" (hil_mutant_support.GROUPS), in a file of
their own so another worker runs them."""
import pytest

from hil_mutant_support import check_mutant_makes_its_scenario_fail, group


@pytest.mark.slow
@pytest.mark.parametrize("mutant", group("speech"), ids=[m.name for m in group("speech")])
def test_mutant_makes_its_scenario_fail(mutant, tmp_path):
    check_mutant_makes_its_scenario_fail(mutant, tmp_path)
