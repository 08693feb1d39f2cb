"""A mutant firmware that breaks one rule fails that row of `alabama conformance satellite` (so rows can fail):
the half MUTANT_ROWS_A of satkit_support's table (two files, so two workers share the ~10-20 s runs)."""
from satkit_support import MUTANT_ROWS_A, mutant_row_test

test_a_mutant_firmware_fails_its_row = mutant_row_test(MUTANT_ROWS_A)
