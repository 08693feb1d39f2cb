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
import atexit
import os
import pathlib
import shutil
import sys
import tempfile

import pytest

_TESTS = pathlib.Path(__file__).resolve().parent
for p in (str(_TESTS.parent / "firmware"), str(_TESTS.parent / "host"), str(_TESTS), str(_TESTS / "firmware")):
    if p not in sys.path:
        sys.path.insert(0, p)

from alabama import mpcompat  # noqa: E402
mpcompat.install()          # the CPython stand-ins firmware modules import plainly (micropython.const, ticks_*)
from mpharness import MP32, MP32_HEAP, ROOT, SHARED, micropython32_cmd, run_micropython  # noqa: E402

# Scratch files of firmware tests (mpsupport.scratch): one directory per test process, this one and the
# micropython runs it starts (they inherit the variable). Set in every process, not inherited from the xdist
# controller: workers and other worktrees run the same tests at the same time.
os.environ["ALABAMA_TEST_TMP"] = tempfile.mkdtemp(prefix="alabama-test-")
atexit.register(shutil.rmtree, os.environ["ALABAMA_TEST_TMP"], True)

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


# --- several workers (pytest-xdist: `make test` runs `pytest -n auto --dist loadfile`) --------------------------
# loadfile keeps every test of a file on one worker: MicroPythonFile runs a dual file once per interpreter and
# caches the results on its node (and both interpreters' runs share /tmp names: MicroPython has no getpid);
# module-scoped fixtures (a bench, a report directory under build/) are brought up once. Every test gets its
# own tmp_path and ports the OS picks; what workers share is the tree's build/ directory, and there the virtual
# board compiles the firmware into build/sim/<key> (sim.VirtualBoard.install, deploy.stage) and rewrites its
# stamps and manifests on every start. So the controller builds that cache once before the workers start, and
# within the workers one install runs at a time (a file lock): no board copies a half-written .mpy or manifest.
# Boards started by CLI subprocesses (hil, demo, board sim --web) find the cache built.
_SIM_LOCK = ROOT / "build" / ".sim-install.lock"
#: per test file, the seconds its tests took in the last whole `make test` run (.pytest_cache): the files are
#: handed out slowest first, so no long file starts last on one worker while the other has nothing left
_DURATIONS = "alabama/file-durations"


def _xdist_controller(config):
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def pytest_configure(config):
    _generous_event_waits()
    if hasattr(config, "workerinput"):
        _lock_sim_installs()
        return
    if _xdist_controller(config):
        _prebuild_sim_firmware()
    config.pluginmanager.register(_FileDurations(config), "alabama-file-durations")


def _prebuild_sim_firmware():
    import tempfile
    from alabama import local
    from alabama.board import sim
    for find in (sim.micropython32, lambda: local.find_micropython(RuntimeError)):
        try:
            mp = find()
            if mp:
                with tempfile.TemporaryDirectory() as flash, _sim_lock():
                    sim.VirtualBoard(flash, micropython=mp).install()
        except Exception:       # no such interpreter, or a build error: the tests that start boards report it
            pass


def _sim_lock():
    import contextlib
    import fcntl

    @contextlib.contextmanager
    def held():
        _SIM_LOCK.parent.mkdir(parents=True, exist_ok=True)
        with open(_SIM_LOCK, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
    return held()


def _lock_sim_installs():
    from alabama.board import sim
    install = sim.VirtualBoard.install

    def locked_install(self):
        with _sim_lock():
            return install(self)
    sim.VirtualBoard.install = locked_install


#: The least a virtual board's log wait (VirtualBoard.wait_log) waits in a test process, in seconds. The timeouts
#: written in the tests (often 5 s) are what the line takes on an idle machine; at more workers than cores, beside
#: a HIL run, a line that comes in 1 s idle can take 10. A line that comes returns the wait at once, so a passing test
#: is no slower; only a missing line fails later. No test uses a log wait's timeout as its check (a line that must
#: NOT come is checked by reading the lines after a fixed window). ALABAMA_TEST_WAIT_FLOOR_S=0 turns it off.
WAIT_FLOOR_S = float(os.environ.get("ALABAMA_TEST_WAIT_FLOOR_S", "30"))


def _generous_event_waits():
    from alabama.board import sim
    wait_log = sim.VirtualBoard.wait_log
    if WAIT_FLOOR_S <= 0 or getattr(wait_log, "floored", False):
        return

    def floored(self, pattern, timeout=10.0, start=0):
        return wait_log(self, pattern, max(timeout, WAIT_FLOOR_S), start)
    floored.floored = True
    sim.VirtualBoard.wait_log = floored


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    cache = getattr(config, "cache", None)
    durations = cache.get(_DURATIONS, None) if cache is not None else None
    if config.getvalue("dist") != "loadfile" or not durations:
        return None                       # xdist's own (loadfile: files with the most tests first)
    from xdist.scheduler import LoadFileScheduling
    # a file the last run did not have (new, or split from a long one) goes first: it may be long, and a long file
    # started last is the one thing that stretches a loadfile run; a short one first costs nothing
    unknown = max(durations.values(), default=0.0) + 1.0

    class SlowestFileFirst(LoadFileScheduling):
        def _assign_work_unit(self, node):
            if not getattr(self, "_ordered", False):
                units = sorted(self.workqueue.items(), key=lambda kv: -durations.get(kv[0], unknown))
                self.workqueue.clear()
                self.workqueue.update(units)
                self._ordered = True
            super()._assign_work_unit(node)
    return SlowestFileFirst(config, log)


class _FileDurations:
    """Sums each test file's setup/call/teardown seconds; a whole run (the test paths, no -k/-m) keeps them in
    .pytest_cache for the next run's order (pytest_xdist_make_scheduler above)."""

    def __init__(self, config):
        self.config = config
        self.seen = {}

    def pytest_runtest_logreport(self, report):
        f = report.nodeid.split("::")[0]
        self.seen[f] = self.seen.get(f, 0.0) + report.duration

    def pytest_sessionfinish(self, session, exitstatus):
        c = self.config
        cache = getattr(c, "cache", None)
        whole = c.args_source == pytest.Config.ArgsSource.TESTPATHS and not c.option.keyword \
            and not c.option.markexpr
        if self.seen and cache is not None and whole and exitstatus in (0, 1):
            cache.set(_DURATIONS, {f: round(s, 1) for f, s in self.seen.items()})
