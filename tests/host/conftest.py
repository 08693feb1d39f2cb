"""Fixtures shared by the host tests.

* ``core``: the reference core (CoreServer on 127.0.0.1, a port the OS picks, so parallel workers never
  collide) on its own event-loop thread (vb_support.CoreThread), its state under the test's tmp_path/core.
* the marker ``needs_micropython`` (``pytestmark = pytest.mark.needs_micropython``): the test skips where
  there is no micropython unix port (mpharness.micropython_cmd() asks alabama.local, the one place that looks).
* ``serial_port``: the path of a pseudo-terminal that stands for a board's serial port where a command opens the
  port before it does anything (`alabama flash`); /dev/null is refused there as no terminal.
"""
import logging
import os

import pytest

from mpharness import micropython_cmd
from vb_support import CoreThread


def _micropython_missing():
    try:
        micropython_cmd()
    except Exception:           # the finder's "no micropython command" error, whichever class it raises
        return True
    return False


def pytest_collection_modifyitems(config, items):
    if not any(item.get_closest_marker("needs_micropython") for item in items) or not _micropython_missing():
        return
    skip = pytest.mark.skip(reason="no micropython unix port")
    for item in items:
        if item.get_closest_marker("needs_micropython"):
            item.add_marker(skip)


@pytest.fixture
def core(tmp_path):
    """A reference core on its own thread, data in tmp_path/core; .port, .key, .call(coro), .run(fn)."""
    c = CoreThread(tmp_path / "core").start()
    yield c
    c.close()


@pytest.fixture
def serial_port():
    """A free serial port for a command's port check: a pty's terminal end (nothing answers on it)."""
    master, slave = os.openpty()
    yield os.ttyname(slave)
    os.close(slave)
    os.close(master)


@pytest.fixture(scope="module", autouse=True)
def _alabama_log_levels():
    """A test module may quiet the core's loggers (the fault and DEFERRED benches set alabama.core to ERROR);
    the next module in the same worker gets them back as they were, so its caplog sees the core's warnings."""
    names = ("alabama", "alabama.core")
    saved = [(n, logging.getLogger(n).level) for n in names]
    yield
    for n, level in saved:
        logging.getLogger(n).setLevel(level)


class Ran:
    """What a run of the command left, as subprocess.run's result has it (returncode, stdout, stderr)."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def call(capsys, monkeypatch):
    """`alabama ARGV` in this process (cwd: where it runs), as `run` gives it from a process: for the mistakes said
    before anything starts, where a process of its own proves nothing more and costs ~0.5 s of imports."""
    from alabama import cli as alabama_cli

    def go(*argv, cwd=None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            status = alabama_cli.main(list(argv))
        except SystemExit as e:
            status = e.code
        r = capsys.readouterr()
        return Ran(status, r.out, r.err)
    return go
