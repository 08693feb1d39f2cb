"""A mutant firmware that breaks one rule fails that row of `alabama conformance satellite` (so rows can fail):
the half MUTANT_ROWS_A of satkit_support's table (split in two files so two workers share the ~30 s runs)."""
import pytest

from satkit_support import MUTANT_ROWS_A, check_mutant_fails_its_row


@pytest.mark.needs_micropython
@pytest.mark.slow
@pytest.mark.parametrize("name,rid", MUTANT_ROWS_A, ids=[m for m, _ in MUTANT_ROWS_A])
def test_a_mutant_firmware_fails_its_row(name, rid, tmp_path):
    check_mutant_fails_its_row(name, rid, tmp_path)
