"""The HIL pytest plugin: options, the ``hil`` fixture, result collection and the run report.

Responsible for wiring the scenario suite to a board: ``--board sim|PORT`` picks the target (the
virtual board, or a real one on a serial port), ``--board-type NAME`` its board file, ``--report DIR``
where the run's HTML/JUnit/history go. The ``hil`` fixture gives each scenario a fresh ``Bench``
(reference core on loopback — or on ``--hil-bind`` for a real board, whose address is printed, never
contacted — with the board provisioned for it) and tears it all down after a failure or Ctrl-C too.
Load it with ``pytest -p alabama.hil.plugin`` (``alabama hil`` does). It defines no scenario itself.

A fleet (``--board`` given more than once, ``alabama.hil.fleet`` drives it) runs in two phases. ``--hil-phase
boards``: pytest-xdist with one worker per board and ``--dist each`` (every scenario goes to every worker); the
controller deals each worker its own board (``hil_board_index`` in its workerinput, a crashed worker's board to
its replacement), and each worker writes its part of the run under ``DIR/<run>/boards/<n>/``. ``--hil-phase
fleet``: one process owning every board runs the cross-board scenarios (marker ``fleet``, fixture ``fleet``: one
core serving all boards) into ``DIR/<run>/fleet/``. ``report.write_fleet`` merges the parts.
"""
import atexit
import os
import pathlib
import platform
import re
import subprocess
import time

import pytest

from alabama import REPO, carried, usage

from . import report as report_mod
from .report import board_label
from .bench import Fleet, open_scenario
from .targets import make_target

_RUN_KEY = pytest.StashKey()
_PHASES_KEY = pytest.StashKey()
_RECORD_KEY = pytest.StashKey()
#: Every bench still up, torn down at session end / exit even if a fixture finalizer never ran.
_LIVE = []


def pytest_addoption(parser):
    g = parser.getgroup("alabama-hil", "Alabama HIL bench")
    g.addoption("--board", default=None, action="append", metavar="sim|PORT",
                help="the board under test: 'sim' (virtual board) or the serial port of a real board; more than "
                     "once for a fleet (with --hil-phase, as `alabama hil` runs it)")
    g.addoption("--board-type", default=None, action="append", metavar="NAME",
                help="board file (boards/NAME.json); default: sim for the virtual board; a fleet: once for every "
                     "real board, or once per real board in --board order")
    g.addoption("--report", default=None, metavar="DIR", help="write the run report (HTML, JUnit, history) here")
    g.addoption("--hil-firmware", default=None, metavar="DIR",
                help="firmware tree the virtual board runs (default: %s)" % carried("firmware"))
    g.addoption("--hil-bind", default=None, metavar="ADDR",
                help="address the core listens on for a real board (a LAN address; default 127.0.0.1)")
    g.addoption("--hil-port", default=0, type=usage.tcp_port(zero_ok=True), metavar="N", help="TCP port the board connects to (0: any)")
    g.addoption("--hil-loopback", action="store_true",
                help="a real board's speaker is acoustically looped back into its microphone (docs/hil.md)")
    g.addoption("--hil-speaker-out", default=None, action="append", metavar="DEVICE",
                help="real board: the host's audio output (ALSA device, e.g. hw:1,0 or default) whose loudspeaker "
                     "the board's microphone hears; scenarios that feed the mic a known utterance need it")
    g.addoption("--hil-no-deploy", action="store_true", help="real board: skip `alabama deploy` at the start")
    g.addoption("--hil-long-runs", default=10, type=usage.positive(int, "exchanges"), metavar="N",
                help="back-to-back exchanges in the long-run scenario")
    g.addoption("--hil-phase", default="all", choices=("all", "boards", "fleet"),
                help="all: one board, every scenario (cross-board ones skip); boards: a fleet's per-board suite "
                     "under pytest-xdist; fleet: a fleet's cross-board scenarios, every board in this process")
    g.addoption("--hil-run-id", default=None, metavar="ID", help="the run's id (a fleet's phases share one)")
    g.addoption("--hil-unavailable", default=None, action="append", metavar="N:WHY",
                help="fleet phase: board N (1-based) is left out, for this reason")
    g.addoption("--hil-probe-json", default=None, metavar="FILE",
                help="one board: `alabama board probe --json` output shown in the report's header")


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*features): the scenario needs these board features "
                                       "(button, mic, mic_feed, speaker, heap, restart, loopback); skipped otherwise")
    config.addinivalue_line("markers", "spec(*refs): spec sections / requirement IDs the scenario guards")
    config.addinivalue_line("markers", "fleet: a cross-board scenario (several boards on one core; `fleet` fixture)")
    boards = _boards(config)
    if not boards:
        return
    phase = config.getoption("--hil-phase")
    if phase == "boards" and not hasattr(config, "workerinput"):
        # the xdist controller of a fleet: it deals the boards out and runs no scenario itself
        config.pluginmanager.register(_BoardDealer(config, len(boards)), "alabama-hil-board-dealer")
        return
    index = config.workerinput["hil_board_index"] if phase == "boards" else 0
    board = boards[index] if phase != "fleet" else "fleet of %d boards" % len(boards)
    btype = _board_type(config, index) if phase != "fleet" else "various"
    run_id = config.getoption("--hil-run-id") or time.strftime("%Y%m%d-%H%M%S") + "-%d" % (os.getpid() % 10000)
    run = {"run_id": run_id, "started": time.time(), "board": board,
           "board_type": btype or ("sim" if board == "sim" else "?"),
           "core_address": None, "firmware": _git_describe(config.getoption("--hil-firmware")),
           "host": platform.node(), "scenarios": []}
    if phase == "all" and config.getoption("--hil-probe-json"):
        run["probe"] = report_mod.read_probe(config.getoption("--hil-probe-json"))
    if phase != "all":
        run.update(phase=phase, index=index, label=board_label(index) if phase == "boards" else "cross-board",
                   status={"state": "running", "line": ""}, pid=os.getpid(),
                   worker=getattr(config, "workerinput", {}).get("workerid", "controller"))
        run["part"] = str(_part_dir(config, run))
        report_mod.write_part(run, run["part"])
    config.stash[_RUN_KEY] = run
    atexit.register(_teardown_all)


def _boards(config):
    return config.getoption("--board", None) or []


def _per_real_board(config, values, index):
    """A per-board option (--board-type, --hil-speaker-out) for board ``index``: one board takes its value as
    given; in a fleet the values go to the real boards in order (one value: every real board), none to 'sim'."""
    boards = _boards(config)
    if not values:
        return None
    if len(boards) == 1:
        return values[0]
    if boards[index] == "sim":
        return None
    k = sum(1 for b in boards[:index] if b != "sim")
    return values[0] if len(values) == 1 else values[k] if k < len(values) else None


def _board_type(config, index):
    return _per_real_board(config, config.getoption("--board-type"), index)


def _speaker_out(config, index):
    return _per_real_board(config, config.getoption("--hil-speaker-out"), index)


def _base(config):
    return pathlib.Path(config.getoption("--report") or (pathlib.Path.cwd() / "build" / "hil"))


def _part_dir(config, run):
    """Where this process's share of the run goes: the run's directory (one board), boards/<n>/ (a fleet
    worker) or fleet/ (the cross-board phase)."""
    d = _base(config) / run["run_id"]
    if run.get("phase") == "boards":
        return d / "boards" / str(run["index"] + 1)
    if run.get("phase") == "fleet":
        return d / "fleet"
    return d


def _board_down(run, state, line):
    """The board is out of the run (``failed``: never came up; ``lost``: gone mid-run); the first reason
    sticks, and a fleet's part says it at once (the merged report shows it in one line)."""
    if run.get("status", {}).get("state") in ("failed", "lost"):
        return
    run["status"] = {"state": state, "line": line}
    if run.get("part"):
        report_mod.write_part(run, run["part"])


def _one_line(exc):
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


class _BoardDealer:
    """On the xdist controller of a fleet: gives every worker a board nobody else holds (``-n`` = boards), and
    the board of a worker that died to its replacement, never another one (xdist gives the replacement the dead
    worker's pending scenarios: on a real bench they belong to that board's serial port). A board whose worker
    finished is done: it is never dealt again. The scenario a worker died in is recorded on its board as failed,
    with xdist's "worker ... crashed while running ..." reason."""

    def __init__(self, config, n):
        self.config = config
        self.free = list(range(n))
        self.orphans = []             # boards whose worker died, in order: each goes to the next replacement
        self.held = {}                # gateway id -> board index, live workers
        self.dead = {}                # gateway id -> board index, workers that died

    def _part(self, i):
        return _base(self.config) / self.config.getoption("--hil-run-id") / "boards" / str(i + 1)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        if self.orphans:
            i = self.orphans.pop(0)
        elif self.free:
            i = self.free.pop(0)
        else:
            raise pytest.UsageError("alabama hil: more workers than boards (run one worker per --board)")
        self.held[node.gateway.id] = i
        node.workerinput["hil_board_index"] = i

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        i = self.held.pop(node.gateway.id, None)
        if i is None or error is None:
            return
        self.orphans.append(i)
        line = "its bench process (%s) died: %s; a new one went on with the scenarios it had not run" % (
            node.gateway.id, _one_line(error))
        self.dead[node.gateway.id] = (i, line)
        report_mod.note_crash(self._part(i), line)

    def pytest_runtest_logreport(self, report):
        """xdist's report for the scenario a dead worker was running (``when`` is "???")."""
        node = getattr(report, "node", None)
        dead = self.dead.get(getattr(getattr(node, "gateway", None), "id", None))
        if dead is None or report.when != "???":
            return
        i, line = dead
        path, _, name = report.nodeid.partition("::")
        sc = {"nodeid": report.nodeid, "name": name.rsplit("::", 1)[-1],
              "module": pathlib.Path(path).stem, "doc": "", "requirements": [], "outcome": "failed",
              "duration": 0.0, "message": str(report.longrepr)}
        report_mod.append_scenario(self._part(i), sc)
        report_mod.note_crash(self._part(i), line.replace(" died: ", " died while running %s: " % sc["name"], 1),
                              replaces=line)


def pytest_collection_modifyitems(config, items):
    """A fleet's phases split the suite: the per-board phase runs every scenario but the cross-board ones, the
    fleet phase only those."""
    phase = config.getoption("--hil-phase", "all")
    if phase == "all" or not _boards(config):
        return
    want_fleet = phase == "fleet"
    keep = [i for i in items if (i.get_closest_marker("fleet") is not None) == want_fleet]
    drop = [i for i in items if (i.get_closest_marker("fleet") is not None) != want_fleet]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


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
def _make_target(cfg, run, index, workdir, deploy):
    return make_target(_boards(cfg)[index], _board_type(cfg, index), firmware=cfg.getoption("--hil-firmware"),
                       workdir=workdir, loopback=cfg.getoption("--hil-loopback"), deploy=deploy,
                       speaker_out=_speaker_out(cfg, index))


def _relay_port(cfg, run):
    """--hil-port N: one board's relay listens on N; a fleet's board n on N + n - 1 (their cores run at once)."""
    port = cfg.getoption("--hil-port")
    return port + run["index"] if port and run.get("phase") == "boards" else port


@pytest.fixture(scope="session")
def hil_target(request):
    """The board under test for the whole run (deployed once for a real board)."""
    cfg = request.config
    if not _boards(cfg):
        pytest.skip("HIL scenarios need --board sim|PORT (run them with `alabama hil`)")
    run = cfg.stash[_RUN_KEY]
    tgt = _make_target(cfg, run, run.get("index", 0), pathlib.Path(_part_dir(cfg, run)) / "board",
                       deploy=not cfg.getoption("--hil-no-deploy"))
    try:
        tgt.setup()
    except Exception as e:
        _board_down(run, "failed", "could not bring up %s: %s" % (tgt.name, _one_line(e)))
        raise
    bind = cfg.getoption("--hil-bind") or "127.0.0.1"
    if not tgt.virtual and bind == "127.0.0.1":
        print("\nalabama hil: a real board cannot reach 127.0.0.1 on this computer: pass --hil-bind <LAN address>")
    yield tgt
    tgt.teardown()


def _check_needs(request, targets):
    for mark in request.node.iter_markers("needs"):
        for t in targets:
            missing = [f for f in mark.args if f not in t.features]
            if missing:
                pytest.skip("needs %s, which this board (%s) does not offer%s" % (
                    ", ".join(missing), t.name,
                    " (wire an acoustic loopback, docs/hil.md, and pass --loopback)" if "loopback" in missing else
                    " (put a loudspeaker next to the board's microphone and pass --speaker-out DEVICE, docs/hil.md)"
                    if "mic_feed" in missing else ""))


def _scenario_dir(request, run):
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    return pathlib.Path(_part_dir(request.config, run)) / "scenarios" / safe


def _close_bench(request, bench, run, work):
    """Teardown shared by the ``hil`` and ``fleet`` fixtures: stop everything, pack the evidence."""
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


@pytest.fixture
def hil(request, hil_target):
    """A fresh bench for one scenario: ``hil.start_core(...)``, ``hil.provision(...)``, ``hil.boot()``..."""
    cfg = request.config
    run = cfg.stash[_RUN_KEY]
    if run.get("status", {}).get("state") == "lost":
        pytest.fail("not run: " + run["status"]["line"], pytrace=False)
    _check_needs(request, [hil_target])
    work = _scenario_dir(request, run)
    bind = cfg.getoption("--hil-bind") or "127.0.0.1"
    bench = open_scenario(hil_target, work, work / "board", bind=bind, relay_port=_relay_port(cfg, run))
    bench.long_runs = cfg.getoption("--hil-long-runs")
    _LIVE.append(bench)
    try:
        yield bench
    finally:
        _close_bench(request, bench, run, work)
        if not hil_target.present():
            _board_down(run, "lost", "%s disconnected during %s: plug it back in and run it again on its own "
                                     "(alabama hil --board %s ...)" % (hil_target.name, request.node.name,
                                                                       run["board"]))


@pytest.fixture(scope="session")
def hil_fleet_targets(request):
    """Every usable board of a fleet, set up in this process (the fleet phase: the per-board workers are done and
    have let go of them; real boards were deployed then, so not again)."""
    cfg = request.config
    boards = _boards(cfg)
    if cfg.getoption("--hil-phase") != "fleet":
        pytest.skip("cross-board scenario: needs two or more boards on one core, run as a fleet "
                    "(alabama hil --board A --board B ...); this run has %d board%s"
                    % (len(boards), "" if len(boards) == 1 else "s"))
    run = cfg.stash[_RUN_KEY]
    out = {}
    for x in cfg.getoption("--hil-unavailable") or []:
        n, _, why = x.partition(":")
        out[int(n)] = why
    usable = [i for i in range(len(boards)) if i + 1 not in out]
    if len(usable) < 2:
        pytest.skip("cross-board scenario: needs two working boards, %d left (%s)" % (
            len(usable), "; ".join("%s: %s" % (board_label(n - 1), why) for n, why in sorted(out.items()))))
    targets = []
    try:
        for i in usable:
            t = _make_target(cfg, run, i, pathlib.Path(run["part"]) / board_label(i).replace(" ", ""), deploy=False)
            t.setup()
            t.fleet_label = board_label(i)
            targets.append(t)
    except Exception:
        for t in targets:
            t.teardown()
        raise
    yield targets
    for t in targets:
        t.teardown()


@pytest.fixture
def fleet(request, hil_fleet_targets):
    """A fresh ``bench.Fleet`` for one cross-board scenario: every usable board, one core for all of them."""
    cfg = request.config
    run = cfg.stash[_RUN_KEY]
    _check_needs(request, hil_fleet_targets)
    work = _scenario_dir(request, run)
    f = Fleet(hil_fleet_targets, work, labels=[t.fleet_label for t in hil_fleet_targets],
              bind=cfg.getoption("--hil-bind") or "127.0.0.1", relay_port=cfg.getoption("--hil-port"))
    _LIVE.append(f)
    try:
        yield f
    finally:
        _close_bench(request, f, run, work)


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
    if run.get("part"):               # a fleet's part: every scenario on disk at once (a dying worker loses none)
        report_mod.append_scenario(run["part"], sc)


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
    if run.get("part"):               # a fleet's part: alabama.hil.fleet merges the parts into one report
        if run["status"]["state"] == "running":
            run["status"] = {"state": "ok", "line": ""}
        report_mod.write_part(run, run["part"])
        return
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
