# dual: cpython micropython
# The dual-run harness itself: proves the same file runs on both interpreters.
import sys
from mpsupport import IS_MICROPYTHON, raises, mem_alloc_delta


def test_interpreter_matches_flag():
    assert IS_MICROPYTHON == (sys.implementation.name == "micropython")


def test_raises_reports_missing_exception():
    e = raises(ValueError, int, "x")
    assert isinstance(e, ValueError)
    try:
        raises(ValueError, int, "1")
    except AssertionError:
        pass
    else:
        raise AssertionError("raises() accepted a call that raised nothing")


def test_mem_alloc_delta_sees_allocation():
    d = mem_alloc_delta(bytearray, 256)
    if IS_MICROPYTHON:
        assert d >= 256
    else:
        assert d is None
