"""Shared test set-up: import paths for both trees, and the MicroPython twin of firmware tests.

Firmware tests under tests/firmware/ are written in the MicroPython subset and marked with the
line ``# dual: cpython micropython``. pytest runs them on CPython as usual, and this plugin runs
each marked file once more under the real ``micropython`` unix port (tests/mprun.py), reporting
one item per test function, so a firmware test that only passes on CPython fails here.
Helpers for tests live in tests/mpharness.py (``from mpharness import run_micropython``).
"""
import sys
import pathlib

import pytest

_TESTS = pathlib.Path(__file__).resolve().parent
for p in (str(_TESTS.parent / "firmware"), str(_TESTS.parent / "host"), str(_TESTS), str(_TESTS / "firmware")):
    if p not in sys.path:
        sys.path.insert(0, p)

from mpharness import ROOT, SHARED, run_micropython  # noqa: E402

DUAL_MARK = "# dual: cpython micropython"


def pytest_collect_file(parent, file_path):
    if (file_path.suffix == ".py" and file_path.name.startswith("test_")
            and "firmware" in file_path.parts and DUAL_MARK in file_path.read_text(errors="replace")[:400]):
        return MicroPythonFile.from_parent(parent, path=file_path)
    return None


class MicroPythonFile(pytest.File):
    """Runs one dual test file under micropython once; yields an item per test function."""

    def collect(self):
        import ast
        tree = ast.parse(self.path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                yield MicroPythonItem.from_parent(self, name="%s[micropython]" % node.name, fn=node.name)

    def results(self):
        if not hasattr(self, "_results"):
            r = run_micropython([str(ROOT / "tests" / "mprun.py"), str(self.path)])
            out = r.stdout.decode(errors="replace")
            res = {}
            for block in out.split("\n@@"):
                block = block.lstrip("@")
                head, _, body = block.partition("\n")
                parts = head.split(" ", 1)
                if len(parts) == 2 and parts[0] in ("PASS", "FAIL"):
                    res[parts[1].strip()] = (parts[0], body)
            self._results = (res, out, r.stderr.decode(errors="replace"), r.returncode)
        return self._results


class MicroPythonItem(pytest.Item):
    def __init__(self, *, fn, **kw):
        super().__init__(**kw)
        self.fn = fn

    def runtest(self):
        res, out, err, rc = self.parent.results()
        if self.fn not in res:
            raise MicroPythonFailure("%s did not run under micropython (rc=%s)\n%s\n%s" % (self.fn, rc, out[-3000:], err[-3000:]))
        status, body = res[self.fn]
        if status != "PASS":
            raise MicroPythonFailure(body)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MicroPythonFailure):
            return "micropython: " + str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, "micropython: %s" % self.fn


class MicroPythonFailure(AssertionError):
    pass


@pytest.fixture(scope="session")
def shared_dir():
    if not SHARED.is_dir():
        pytest.fail("shared/ not found at %s (set ALABAMA_SHARED)" % SHARED)
    return SHARED
