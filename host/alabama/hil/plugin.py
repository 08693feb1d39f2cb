"""The HIL pytest plugin: options, the ``hil`` fixture, result collection and the run report.

Responsible for wiring the scenario suite to a board: ``--board sim|PORT`` picks the target (the
virtual board, or a real one on a serial port), ``--board-type NAME`` its board file, ``--report DIR``
where the run's HTML/JUnit/history go. The ``hil`` fixture gives each scenario a fresh ``Bench``
(reference core on loopback — or on ``--hil-bind`` for a real board, whose address is printed, never
contacted — with the board provisioned for it) and tears it all down after a failure or Ctrl-C too.
Load it with ``pytest -p alabama.hil.plugin`` (``alabama hil`` does). It defines no scenario itself.
"""
import atexit
import os
import pathlib
import platform
import re
import subprocess
import time

import pytest

from alabama import REPO

from . import report as report_mod
from .bench import open_scenario
from .targets import make_target

_RUN_KEY = pytest.StashKey()
_PHASES_KEY = pytest.StashKey()
_RECORD_KEY = pytest.StashKey()
#: Every bench still up, torn down at session end / exit even if a fixture finalizer never ran.
_LIVE = []


def pytest_addoption(parser):
    g = parser.getgroup("alabama-hil", "Alabama HIL bench")
    g.addoption("--board", default=None, metavar="sim|PORT",
                help="the board under test: 'sim' (virtual board) or the serial port of a real board")
    g.addoption("--board-type", default=None, metavar="NAME",
                help="board file (boards/NAME.json); default: sim for the virtual board")
    g.addoption("--report", default=None, metavar="DIR", help="write the run report (HTML, JUnit, history) here")
    g.addoption("--hil-firmware", default=None, metavar="DIR",
                help="firmware tree the virtual board runs (default: the repository's firmware/)")
    g.addoption("--hil-bind", default=None, metavar="ADDR",
                help="address the core listens on for a real board (a LAN address; default 127.0.0.1)")
    g.addoption("--hil-port", default=0, type=int, metavar="N", help="TCP port the board connects to (0: any)")
    g.addoption("--hil-loopback", action="store_true",
                help="a real board's speaker is acoustically looped back into its microphone (docs/hil.md)")
    g.addoption("--hil-speaker-out", default=None, metavar="DEVICE",
                help="real board: the host's audio output (ALSA device, e.g. hw:1,0 or default) whose loudspeaker "
                     "the board's microphone hears; scenarios that feed the mic a known utterance need it")
    g.addoption("--hil-no-deploy", action="store_true", help="real board: skip `alabama deploy` at the start")
    g.addoption("--hil-long-runs", default=10, type=int, metavar="N",
                help="back-to-back exchanges in the long-run scenario")


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*features): the scenario needs these board features "
                                       "(button, mic, mic_feed, speaker, heap, restart, loopback); skipped otherwise")
    config.addinivalue_line("markers", "spec(*refs): spec sections / requirement IDs the scenario guards")
    if config.getoption("--board", None) is None:
        return
    run = {"run_id": time.strftime("%Y%m%d-%H%M%S") + "-%d" % (os.getpid() % 10000),
           "started": time.time(), "board": config.getoption("--board"),
           "board_type": config.getoption("--board-type") or ("sim" if config.getoption("--board") == "sim" else "?"),
           "core_address": None, "firmware": _git_describe(config.getoption("--hil-firmware")),
           "host": platform.node(), "scenarios": []}
    config.stash[_RUN_KEY] = run
    atexit.register(_teardown_all)


def _git_describe(fw):
    root = pathlib.Path(fw) if fw else REPO / "firmware"
    try:
        r = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=10"],
                           capture_output=True, timeout=10, text=True)
        desc = r.stdout.strip() if r.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        desc = "unknown"
    return desc + ("" if not fw else " (tree %s)" % fw)


def _teardown_all():
    while _LIVE:
        b = _LIVE.pop()
        b.close()


# ---------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def hil_target(request):
    """The board under test for the whole run (deployed once for a real board)."""
    cfg = request.config
    board = cfg.getoption("--board")
    if board is None:
        pytest.skip("HIL scenarios need --board sim|PORT (run them with `alabama hil`)")
    run = cfg.stash[_RUN_KEY]
    base = pathlib.Path(cfg.getoption("--report") or (pathlib.Path.cwd() / "build" / "hil"))
    tgt = make_target(board, cfg.getoption("--board-type"), firmware=cfg.getoption("--hil-firmware"),
                      workdir=base / run["run_id"] / "board", loopback=cfg.getoption("--hil-loopback"),
                      deploy=not cfg.getoption("--hil-no-deploy"), speaker_out=cfg.getoption("--hil-speaker-out"))
    tgt.setup()
    bind = cfg.getoption("--hil-bind") or "127.0.0.1"
    if not tgt.virtual and bind == "127.0.0.1":
        print("\nalabama hil: a real board cannot reach 127.0.0.1 on this computer: pass --hil-bind <LAN address>")
    yield tgt
    tgt.teardown()


@pytest.fixture
def hil(request, hil_target):
    """A fresh bench for one scenario: ``hil.start_core(...)``, ``hil.provision(...)``, ``hil.boot()``..."""
    cfg = request.config
    for mark in request.node.iter_markers("needs"):
        missing = [f for f in mark.args if f not in hil_target.features]
        if missing:
            pytest.skip("needs %s, which this board (%s) does not offer%s" % (
                ", ".join(missing), hil_target.name,
                " (wire an acoustic loopback, docs/hil.md, and pass --loopback)" if "loopback" in missing else
                " (put a loudspeaker next to the board's microphone and pass --speaker-out DEVICE, docs/hil.md)"
                if "mic_feed" in missing else ""))
    run = cfg.stash[_RUN_KEY]
    base = pathlib.Path(cfg.getoption("--report") or (pathlib.Path.cwd() / "build" / "hil"))
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    work = base / run["run_id"] / "scenarios" / safe
    bind = cfg.getoption("--hil-bind") or "127.0.0.1"
    bench = open_scenario(hil_target, work, work / "board", bind=bind, relay_port=cfg.getoption("--hil-port"))
    bench.long_runs = cfg.getoption("--hil-long-runs")
    _LIVE.append(bench)
    try:
        yield bench
    finally:
        errors = bench.close()
        if bench in _LIVE:
            _LIVE.remove(bench)
        if bench.core is not None and run["core_address"] is None:
            run["core_address"] = "%s:%d" % bench.core.address
        try:
            rec = bench.artifacts(work / "artifacts")
        except Exception as e:  # noqa: BLE001 — a lost artifact must not hide the scenario's outcome
            rec = {"notes": ["artifacts: %s" % e]}
        rec.setdefault("notes", []).extend(errors)
        request.node.stash[_RECORD_KEY] = rec


# ---------------------------------------------------------------------------------------- results
_CURRENT_KEY = pytest.StashKey()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.config.stash[_CURRENT_KEY] = item
    outcome = yield
    if outcome.excinfo is None:      # interrupted (Ctrl-C): leave it for sessionfinish to record
        item.config.stash[_CURRENT_KEY] = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    phases = item.stash.setdefault(_PHASES_KEY, {})
    phases[rep.when] = rep
    if rep.when == "teardown" and _RUN_KEY in item.config.stash:
        _record(item, phases)


def _record(item, phases, interrupted=False):
    run = item.config.stash[_RUN_KEY]
    setup, callr, tear = phases.get("setup"), phases.get("call"), phases.get("teardown")
    if interrupted:
        outcome_s = "error"
    elif setup is not None and setup.skipped:
        outcome_s = "skipped"
    elif setup is not None and setup.failed:
        outcome_s = "error"
    elif callr is not None and callr.failed:
        outcome_s = "failed"
    elif callr is not None and callr.skipped:
        outcome_s = "skipped"
    elif tear is not None and tear.failed:
        outcome_s = "error"
    else:
        outcome_s = "passed"
    msg = "interrupted (Ctrl-C): the bench was torn down mid-scenario" if interrupted else ""
    for r in (setup, callr, tear):
        if not interrupted and r is not None and (r.failed or r.skipped):
            if r.skipped and isinstance(r.longrepr, tuple):
                msg = str(r.longrepr[2])
            else:
                msg = r.longreprtext
            break
    fn = getattr(item, "function", None)
    doc = (fn.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ") if fn else ""
    doc = re.sub(r"\s+", " ", doc)
    refs = [a for m in item.iter_markers("spec") for a in m.args]
    rec = item.stash.get(_RECORD_KEY, {})
    sc = {"nodeid": item.nodeid, "name": item.name, "module": item.module.__name__.rsplit(".", 1)[-1]
          if getattr(item, "module", None) else "", "doc": doc, "requirements": refs, "outcome": outcome_s,
          "duration": round(sum(r.duration for r in phases.values()), 3), "message": msg}
    sc.update(rec)
    run["scenarios"].append(sc)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _teardown_all()
    cfg = session.config
    if _RUN_KEY not in cfg.stash:
        return
    run = cfg.stash[_RUN_KEY]
    item = cfg.stash.get(_CURRENT_KEY, None)
    if item is not None:          # interrupted mid-scenario: its fixtures were torn down, record what ran
        _record(item, item.stash.get(_PHASES_KEY, {}), interrupted=True)
        cfg.stash[_CURRENT_KEY] = None
    run["duration"] = round(time.time() - run["started"], 3)
    run["argv"] = list(cfg.invocation_params.args)
    out = cfg.getoption("--report")
    if not out or cfg.option.collectonly:
        return
    paths = report_mod.write(run, out)
    tr = cfg.pluginmanager.get_plugin("terminalreporter")
    line = "alabama hil: report %s (JUnit %s)" % (paths["html"], paths["junit"])
    if tr is not None:
        tr.write_line(line)
    else:
        print(line)
