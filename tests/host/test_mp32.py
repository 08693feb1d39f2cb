"""The 32-bit test interpreter (tools/mp32) really has the board's integer widths, so the dual tests it runs
prove what they claim: 31-bit small ints, 32-bit viper ints, single-precision floats, 4-byte words."""
import os

import pytest

from mpharness import MP32, micropython32_cmd, run_micropython

PROBE = r'''
import gc, sys, micropython
print("maxsize", sys.maxsize)

@micropython.viper
def add(x: int, y: int) -> int:
    return x + y

print("viper", add(1 << 30, 1 << 30), add(0x7FFFFFFF, 1))
print("float", 16777217.0 == 16777216.0)

def alloc():
    a = 1 << 29
    gc.collect()
    m0 = gc.mem_alloc()
    c = a + a          # 2**30: past the 31-bit small-int range, a heap object on a 32-bit port
    m1 = gc.mem_alloc()
    d = (a - 1) + 1    # 2**29: still a small int
    m2 = gc.mem_alloc()
    return m1 - m0, m2 - m1

print("alloc", *alloc())
'''


@pytest.fixture(scope="module")
def mp32():
    cmd = micropython32_cmd()
    if cmd is None:
        why = "no 32-bit micropython at %s: run `make mp32`" % MP32
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return cmd


def _probe(cmd):
    r = run_micropython(["-c", PROBE], micropython=cmd, timeout=30)
    assert r.returncode == 0, r.stderr.decode()
    return {line.split()[0]: line.split()[1:] for line in r.stdout.decode().splitlines()}


def test_mp32_has_the_boards_integer_widths(mp32):
    out = _probe(mp32)
    assert out["maxsize"] == [str(2 ** 31 - 1)]
    # viper ints are 32-bit machine words: 2**30 + 2**30 wraps to the sign bit.
    assert out["viper"] == [str(-2 ** 31), str(-2 ** 31)]
    # single precision: 2**24 + 1 is not representable
    assert out["float"] == ["True"]
    grew, small = (int(x) for x in out["alloc"])
    assert grew > 0, "2**30 should be a heap int on a 32-bit port"
    assert small == 0


def test_the_pypi_unix_port_is_64_bit_so_the_32_bit_leg_adds_something():
    """If the PyPI interpreter were 32-bit already, the mp32 leg would be a duplicate; this says when it is not."""
    out = _probe(None)
    assert out["maxsize"] == [str(2 ** 63 - 1)]
    assert out["viper"][0] == str(2 ** 31)
