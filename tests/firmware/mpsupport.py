# Helpers for dual tests: the same calls work on CPython (under pytest) and on micropython.
import sys

try:
    import os
    _env = os.getenv
except (ImportError, AttributeError):
    _env = lambda k, d=None: d

IS_MICROPYTHON = sys.implementation.name == "micropython"


def shared_path(*parts):
    base = _env("ALABAMA_SHARED")
    if not base:
        here = __file__.rpartition("/")[0] or "."
        base = here + "/../../../shared"
    return "/".join((base,) + parts)


_scratch_n = [0]


def scratch(tag):
    """A path for a test's scratch file or directory, unique to this test process: tests/conftest.py gives
    every pytest process its own ALABAMA_TEST_TMP (the unix port has no os.getpid, and several test runs, from
    xdist workers or other worktrees, share /tmp)."""
    _scratch_n[0] += 1
    base = _env("ALABAMA_TEST_TMP") or "/tmp"      # tests/conftest.py sets it; /tmp for a file run by hand
    return "%s/%s-%d" % (base, tag, _scratch_n[0])


def load_json(*parts):
    import json
    with open(shared_path(*parts)) as f:
        return json.load(f)


def unhex(s):
    return bytes.fromhex(s) if s else b""


def raises(exc, fn, *args):
    """Call fn(*args) and return the exception it raised; fail if it raised nothing or another kind."""
    try:
        fn(*args)
    except exc as e:
        return e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn), exc.__name__))


def mem_alloc_delta(fn, *args):
    """Bytes of heap allocated by one call of fn(*args) (micropython), or None on CPython."""
    if not IS_MICROPYTHON:
        return None
    import gc
    gc.collect()
    gc.disable()
    try:
        a = gc.mem_alloc()
        fn(*args)
        return gc.mem_alloc() - a
    finally:
        gc.enable()
