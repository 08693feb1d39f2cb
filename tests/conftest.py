"""Shared test set-up: import paths for both trees, and the MicroPython twin of firmware tests.

Firmware tests under tests/firmware/ are written in the MicroPython subset and marked with the
line ``# dual: cpython micropython``. pytest runs them on CPython as usual, and this plugin runs
each marked file twice more (tests/mprun.py), reporting one item per test function and interpreter,
so a firmware test that only passes on CPython fails here:

* ``[micropython]``: the unix port from PyPI (64-bit, the venv's ``micropython``);
* ``[micropython32]`` (marker ``mp32``): the 32-bit unix port built by ``make mp32`` (tools/mp32) —
  31-bit small ints and 32-bit viper ints as on the ESP32-S3. Where that build is missing the items
  skip, saying how to build it; under CI (``CI`` set) they fail instead, so CI always proves 32-bit.
Helpers for tests live in tests/mpharness.py (``from mpharness import run_micropython``).
"""
import os
import sys
import pathlib

import pytest

_TESTS = pathlib.Path(__file__).resolve().parent
for p in (str(_TESTS.parent / "firmware"), str(_TESTS.parent / "host"), str(_TESTS), str(_TESTS / "firmware")):
    if p not in sys.path:
        sys.path.insert(0, p)

from alabama import mpcompat  # noqa: E402
mpcompat.install()          # the CPython stand-ins firmware modules import plainly (micropython.const, ticks_*)
from mpharness import MP32, MP32_HEAP, ROOT, SHARED, micropython32_cmd, run_micropython  # noqa: E402

DUAL_MARK = "# dual: cpython micropython"


def pytest_collect_file(parent, file_path):
    if (file_path.suffix == ".py" and file_path.name.startswith("test_")
            and "firmware" in file_path.parts and DUAL_MARK in file_path.read_text(errors="replace")[:400]):
        return MicroPythonFile.from_parent(parent, path=file_path)
    return None


class MicroPythonFile(pytest.File):
    """Runs one dual test file once per interpreter; yields an item per test function and interpreter."""

    def collect(self):
        import ast
        tree = ast.parse(self.path.read_text())
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        for tag in ("micropython", "micropython32"):
            for fn in names:
                item = MicroPythonItem.from_parent(self, name="%s[%s]" % (fn, tag), fn=fn, tag=tag)
                if tag == "micropython32":
                    item.add_marker(pytest.mark.mp32)
                yield item

    def _run(self, tag):
        args = [str(ROOT / "tests" / "mprun.py"), str(self.path)]
        if tag == "micropython":
            return run_micropython(args)
        cmd = micropython32_cmd()
        if cmd is None:
            why = "no 32-bit micropython at %s: run `make mp32` (tools/mp32/build.sh)" % MP32
            if os.environ.get("CI"):
                pytest.fail(why, pytrace=False)
            pytest.skip(why)
        return run_micropython(args, micropython=cmd, heap=MP32_HEAP)

    def results(self, tag):
        cache = self.__dict__.setdefault("_results", {})
        if tag not in cache:
            r = self._run(tag)
            out = r.stdout.decode(errors="replace")
            res = {}
            for block in out.split("\n@@"):
                block = block.lstrip("@")
                head, _, body = block.partition("\n")
                parts = head.split(" ", 1)
                if len(parts) == 2 and parts[0] in ("PASS", "FAIL"):
                    res[parts[1].strip()] = (parts[0], body)
            cache[tag] = (res, out, r.stderr.decode(errors="replace"), r.returncode)
        return cache[tag]


class MicroPythonItem(pytest.Item):
    def __init__(self, *, fn, tag, **kw):
        super().__init__(**kw)
        self.fn = fn
        self.tag = tag

    def runtest(self):
        res, out, err, rc = self.parent.results(self.tag)
        if self.fn not in res:
            raise MicroPythonFailure("%s did not run under %s (rc=%s)\n%s\n%s" % (
                self.fn, self.tag, rc, out[-3000:], err[-3000:]))
        status, body = res[self.fn]
        if status != "PASS":
            raise MicroPythonFailure(body)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MicroPythonFailure):
            return self.tag + ": " + str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, "%s: %s" % (self.tag, self.fn)


class MicroPythonFailure(AssertionError):
    pass


@pytest.fixture(scope="session")
def shared_dir():
    if not SHARED.is_dir():
        pytest.fail("shared/ not found at %s (set ALABAMA_SHARED)" % SHARED)
    return SHARED
