"""`alabama hil` driving a fleet: two virtual boards in parallel (one pytest-xdist worker each, distinct flash dirs
and ports), the cross-board scenarios on one core, one merged report with a column per board and the probe
figures in its header; a board that fails to come up or vanishes mid-run costs its own column only."""
import json
import os
import pathlib
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from alabama.errors import UsageError
from alabama.hil import fleet as fleet_mod
from alabama.hil import report

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: Two quick per-board scenarios (one exchange, one admission) and both cross-board ones: enough to prove the
#: matrix without running the whole suite twice.
PICK = "test_4_1_voice_exchange or test_r7_3_a_guest_xx or pair_at_once or barge_in_while"
CROSS = ["test_fleet_barge_in_while_another_streams", "test_fleet_two_boards_pair_at_once"]


def probe_doc(board="sim", port="sim", sim=True, ratio=1.0):
    """A probe report as `alabama board probe --json` writes it (format 1)."""
    return {"probe": 1, "board": board, "port": port, "sim": sim, "image": {"flash": "8MB", "psram": "octal"},
            "figures": [{"name": "gc heap total", "value": 130000 * ratio, "unit": "B", "estimate": 130000,
                         "ratio": ratio, "source": "micropython.mem_info()", "note": ""},
                        {"name": "AEAD per 20 ms frame pair", "value": None, "unit": "us", "estimate": 410,
                         "ratio": None, "source": "ticks_us", "note": "no _aead_c in this image"}],
            "patch": {}}


def run_hil(args, env=None, timeout=1200):
    cmd = [sys.executable, "-m", "alabama.cli", "hil"] + list(args)
    e = dict(os.environ, **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT), env=e,
                          stdin=subprocess.DEVNULL)


def _matrix(page):
    """{scenario: [outcome per board column]} read off the page's "Scenarios × boards" table."""
    table = page.split("<h2>Scenarios \u00d7 boards</h2>", 1)[1].split("</table>", 1)[0]
    out = {}
    for row in re.findall(r"<tr><td>(test_[^<]+)</td>(.*?)</tr>", table):
        out[row[0]] = re.findall(r"class=\"badge (\w+)\"|class='cell req'>(not run)", row[1])
        out[row[0]] = [a or b for a, b in out[row[0]]]
    return out


@pytest.mark.slow
@pytest.mark.needs_micropython
def test_two_virtual_boards_in_parallel_then_together(tmp_path):
    """`--board sim --board sim`: each board runs the picked scenarios in its own worker (distinct workers, flash
    dirs and relay ports), then both cross-board scenarios run with one core serving both; the merged report has
    a column per board, the cross-board results, both boards' probe figures in its header; exit 0."""
    probes = []
    for i, ratio in enumerate((1.0, 2.0)):
        f = tmp_path / ("probe%d.json" % i)
        f.write_text(json.dumps(probe_doc(ratio=ratio)))
        probes += ["--probe-json", str(f)]
    rep = tmp_path / "rep"
    r = run_hil(["--board", "sim", "--board", "sim", "-k", PICK, "--report", str(rep)] + probes)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    page = (rep / "report.html").read_text()
    assert "board 1: sim (sim)" in page and "board 2: sim (sim)" in page
    m = _matrix(page)
    assert m == {"test_4_1_voice_exchange": ["passed", "passed"], "test_r7_3_a_guest_xx": ["passed", "passed"]}, m
    cross = page.split("<h2>Cross-board scenarios", 1)[1].split("<h2>", 1)[0]
    for name in CROSS:
        assert re.search(r">%s</a></td><td><span class=\"badge passed\">" % name, cross), name
    header = page.split("</header>", 1)[0]
    assert header.count("<div class='probe'>") == 2 and "gc heap total" in header and "2.00\u00d7" in header
    assert "virtual board: the simulator's figures" in header
    run = json.loads(next(rep.glob("*/run.json")).read_text())
    b1, b2 = run["boards"]
    assert b1["worker"] != b2["worker"] and b1["pid"] != b2["pid"], "both boards ran in one worker"
    assert b1["core_address"] != b2["core_address"], "both boards' relays on one port"
    flash = {str(p.relative_to(rep)) for p in rep.glob("*/boards/*/scenarios/*/board/flash")}
    assert len(flash) == 4 and {f.split("/")[2] for f in flash} == {"1", "2"}, flash
    assert [s["outcome"] for s in run["cross"]["scenarios"]] == ["passed", "passed"]
    assert all(len(s["boards"]) == 2 for s in run["cross"]["scenarios"])
    suites = ET.parse(rep / "junit.xml").getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == ["alabama-hil[board 1: sim (sim)]", "alabama-hil[board 2: sim (sim)]",
                                               "alabama-hil[cross-board]"]
    assert "fleet report" in r.stdout


@pytest.mark.slow
@pytest.mark.needs_micropython
def test_a_board_that_cannot_deploy_costs_its_column_only(tmp_path):
    """A real board whose port does not exist next to a virtual one: its column says in one line what was found
    and what to do, the virtual board runs its scenarios, the cross-board ones skip saying why, exit 1."""
    rep = tmp_path / "rep"
    port = str(tmp_path / "ttyFLEET-gone")
    r = run_hil(["--board", port, "--board", "sim", "--board-type", "devkitc1-inmp441", "--bind", "127.0.0.1",
                 "-k", "test_r7_3_a_guest_xx or pair_at_once", "--report", str(rep)],
                env={"ALABAMA_WIFI_SSID": "bench", "ALABAMA_WIFI_PASSPHRASE": "x"}, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    said = [ln for ln in r.stdout.splitlines() if ln.startswith("alabama hil: board 1")]
    assert len(said) == 1 and "does not exist" in said[0] and "plug the board in" in said[0], r.stdout[-2000:]
    page = (rep / "report.html").read_text()
    assert _matrix(page) == {"test_r7_3_a_guest_xx": ["error", "passed"]}
    head = page.split("<h2>Scenarios \u00d7 boards</h2>", 1)[1].split("</tr>", 1)[0]
    assert head.count("class='down'") == 1 and "could not bring up devkitc1-inmp441 on %s" % port in head
    run = json.loads(next(rep.glob("*/run.json")).read_text())
    (skip,) = run["cross"]["scenarios"]
    assert skip["outcome"] == "skipped" and "needs two working boards, 1 left (board 1: could not bring up" \
        in skip["message"], skip["message"]


VANISH = '''
"""Test helper: board 2 of a fleet is a virtual board whose port goes away after its first scenario."""
from alabama.hil import plugin, targets


class Vanishing(targets.SimTarget):
    scenarios = 0

    def begin_scenario(self, workdir, t0=None):
        self.scenarios += 1
        if self.scenarios > 1:
            raise targets.BenchError("no such port")
        super().begin_scenario(workdir, t0)

    def present(self):
        return False


def pytest_configure(config):
    if getattr(config, "workerinput", {}).get("hil_board_index") == 1:
        plugin.make_target = lambda board, board_type=None, firmware=None, workdir=None, **kw: Vanishing(
            "sim", firmware=firmware, workdir=workdir)
'''


@pytest.mark.slow
@pytest.mark.needs_micropython
def test_a_board_that_vanishes_mid_run_says_so_and_the_other_goes_on(tmp_path):
    """Board 2 disappears after its first scenario (a test plugin makes its port vanish, as unplugging does): its
    later scenario is not attempted (one line: disconnected during which scenario, what to do), board 1 runs
    everything, the cross-board scenarios skip, exit 1."""
    (tmp_path / "fleet_vanish.py").write_text(VANISH)
    rep = tmp_path / "rep"
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p])}
    pick = "test_r7_3_a_guest_xx or test_r7_3_pre_provisioned_ik or pair_at_once"
    r = run_hil(["--board", "sim", "--board", "sim", "-k", pick, "--report", str(rep), "--", "-p", "fleet_vanish"],
                env=env, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    page = (rep / "report.html").read_text()
    m = _matrix(page)
    assert m["test_r7_3_a_guest_xx"] == ["passed", "passed"], m
    assert m["test_r7_3_pre_provisioned_ik"] == ["passed", "error"], m
    run = json.loads(next(rep.glob("*/run.json")).read_text())
    st = run["boards"][1]["status"]
    assert st["state"] == "lost" and "disconnected during test_r7_3_a_guest_xx" in st["line"], st
    later = [s for s in run["boards"][1]["scenarios"] if s["name"] == "test_r7_3_pre_provisioned_ik"][0]
    assert later["message"].startswith("not run: "), later["message"][:300]
    assert run["boards"][0]["status"]["state"] == "ok"
    (skip,) = run["cross"]["scenarios"]
    assert skip["outcome"] == "skipped" and "board 2: virtual board (sim) disconnected" in skip["message"], skip


KILL = '''
"""Test helper: board 2's bench process is killed in the middle of its second scenario, once board 1 has finished
(so board 1 is free when the replacement worker starts), and only once (a marker file). The wait for board 1 has a
deadline far past any load (board 1's three scenarios); the marker says whether board 1 had finished, so a run where
it had not fails saying so instead of passing without the free board the check is about."""
import json, os, pathlib, time
from alabama.hil import targets

MARK = pathlib.Path(os.environ["FLEET_KILL_MARK"])
BOARD1_DEADLINE_S = 600


class Killed(targets.SimTarget):
    scenarios = 0

    def begin_scenario(self, workdir, t0=None):
        super().begin_scenario(workdir, t0)
        self.scenarios += 1
        if self.scenarios == 2 and not MARK.exists():
            done = pathlib.Path(os.environ["FLEET_KILL_WAIT"])
            end = time.monotonic() + BOARD1_DEADLINE_S
            state = None
            while state != "ok" and time.monotonic() < end:
                parts = list(done.glob("*/boards/1/board.json"))
                try:
                    state = parts and json.loads(parts[0].read_text()).get("status", {}).get("state")
                except ValueError:          # caught mid-write: read it again
                    state = None
                if state != "ok":
                    time.sleep(0.1)
            MARK.write_text("killed" if state == "ok" else "killed before board 1 finished (%s)" % state)
            os._exit(9)


def pytest_configure(config):
    if getattr(config, "workerinput", {}).get("hil_board_index") == 1:
        from alabama.hil import plugin
        plugin.make_target = lambda board, board_type=None, firmware=None, workdir=None, **kw: Killed(
            "sim", firmware=firmware, workdir=workdir)
'''


@pytest.mark.slow
@pytest.mark.needs_micropython
def test_a_dead_workers_replacement_gets_its_board_and_the_scenario_it_died_in_is_failed(tmp_path):
    """Board 2's worker is killed mid-scenario after board 1 has finished: its replacement drives board 2 (never
    board 1, whose scenarios run once), the scenario it died in is reported failed with xdist's "crashed while
    running" reason (not "not run"), the crash note names that scenario, the JUnit file counts every scenario of
    both boards, and the cross-board phase still runs with both boards."""
    (tmp_path / "fleet_kill.py").write_text(KILL)
    rep = tmp_path / "rep"
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p]), "FLEET_KILL_MARK": str(tmp_path / "killed"), "FLEET_KILL_WAIT": str(rep)}
    pick = "test_r7_3_a_guest_xx or test_r7_3_pre_provisioned_ik or test_4_1_voice_exchange or pair_at_once"
    r = run_hil(["--board", "sim", "--board", "sim", "-k", pick, "--report", str(rep), "--", "-p", "fleet_kill"],
                env=env, timeout=1500)
    out = r.stdout + r.stderr
    assert (tmp_path / "killed").exists(), out[-3000:]
    assert (tmp_path / "killed").read_text() == "killed", (tmp_path / "killed").read_text()
    assert r.returncode == 1, out[-3000:]
    run = json.loads(next(rep.glob("*/run.json")).read_text())
    b1, b2 = run["boards"]
    names1 = [s["name"] for s in b1["scenarios"]]
    assert len(names1) == len(set(names1)) == 3, names1
    assert b1["status"]["state"] == "ok" and not b1.get("crashes"), b1
    by = {s["name"]: s for s in b2["scenarios"]}
    assert sorted(by) == sorted(names1), sorted(by)
    dead = [s for s in b2["scenarios"] if "crashed while running" in s["message"]]
    assert len(dead) == 1 and dead[0]["outcome"] == "failed", b2["scenarios"]
    assert b2["status"]["state"] == "ok", b2["status"]
    (note,) = b2["crashes"]
    assert "died while running %s" % dead[0]["name"] in note, note
    m = _matrix((rep / "report.html").read_text())
    assert m[dead[0]["name"]] == ["passed", "failed"], m
    assert all("not run" not in v for v in m.values()), m
    # the cross-board phase ran with both boards (board 2 was not marked lost, so it was not skipped); whether the
    # pairing race itself passes is the cross scenario's business (test_two_virtual_boards_in_parallel_then_together)
    (cross,) = run["cross"]["scenarios"]
    assert cross["outcome"] != "skipped" and len(cross.get("boards") or ()) == 2, (cross["outcome"],
                                                                                    cross["message"][-1500:])
    suites = ET.parse(rep / "junit.xml").getroot().findall("testsuite")
    assert [int(s.get("tests")) for s in suites] == [3, 3, 1], [s.attrib for s in suites]


# ---------------------------------------------------------------------------------------------- no board needed
def _argv(*a):
    import argparse
    from alabama.hil import cli
    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers())
    return cli.pytest_argv(p.parse_args(["hil"] + list(a)))


def test_fleet_options_are_checked_before_anything_runs(tmp_path):
    """Per-board options must fit the boards (one line each); one board's argv is what it always was."""
    real = ["--bind", "10.0.0.2"]
    with pytest.raises(UsageError, match="given 2 times for 3 real boards"):
        _argv("--board", "/dev/a", "--board", "/dev/b", "--board", "/dev/c", "--board-type", "x", "--board-type", "y",
              *real)
    with pytest.raises(UsageError, match="/dev/a is given twice"):
        _argv("--board", "/dev/a", "--board", "/dev/a", "--board-type", "x", *real)
    with pytest.raises(UsageError, match="one loudspeaker per real board"):
        _argv("--board", "/dev/a", "--board", "/dev/b", "--board-type", "x", "--speaker-out", "hw:1", *real)
    bad = tmp_path / "probe.json"
    bad.write_text('{"probe": 2}')
    with pytest.raises(UsageError, match="not a probe report.*alabama board probe --json"):
        _argv("--board", "sim", "--board", "sim", "--probe-json", str(bad))
    with pytest.raises(UsageError, match="given 3 times for 2 boards"):
        _argv("--board", "sim", "--board", "sim", *["--probe-json", str(bad)] * 3)
    one = _argv("--board", "/dev/ttyX", "--board-type", "devkitc1-inmp441", *real)
    assert one[one.index("--board"):one.index("--board") + 2] == ["--board", "/dev/ttyX"]
    assert one.count("--board") == 1 and one.count("--board-type") == 1 and "--hil-phase" not in one


def test_per_board_options_go_to_the_real_boards_in_order():
    from alabama.hil import plugin

    class Cfg:
        def __init__(self, **o):
            self.o = o

        def getoption(self, name, default=None):
            return self.o.get(name, default)
    c = Cfg(**{"--board": ["sim", "/dev/a", "/dev/b"], "--board-type": ["ta", "tb"]})
    assert [plugin._board_type(c, i) for i in range(3)] == [None, "ta", "tb"]
    c = Cfg(**{"--board": ["/dev/a", "sim", "/dev/b"], "--board-type": ["t"]})
    assert [plugin._board_type(c, i) for i in range(3)] == ["t", None, "t"]
    c = Cfg(**{"--board": ["sim"], "--board-type": ["sim"]})
    assert plugin._board_type(c, 0) == "sim"


def test_merge_shows_a_dead_part_and_a_bad_probe_in_one_line_each(tmp_path):
    """A worker killed mid-write (its last scenario line cut short, its session never ended) and a probe file
    that is not one: the merged page says so in its columns, keeps what was recorded, marks the rest not run."""
    run_id = "r1"
    sc = {"name": "test_a", "outcome": "passed", "duration": 1.0, "module": "m", "nodeid": "m::test_a"}
    b1 = tmp_path / run_id / "boards" / "1"
    report.write_part({"label": "board 1", "board": "sim", "board_type": "sim", "status": {"state": "ok"},
                       "scenarios": []}, b1)
    report.append_scenario(b1, sc)
    report.append_scenario(b1, dict(sc, name="test_b"))
    b2 = tmp_path / run_id / "boards" / "2"
    report.write_part({"label": "board 2", "board": "/dev/x", "board_type": "t",
                       "status": {"state": "running", "line": ""}}, b2)
    report.append_scenario(b2, sc)
    with open(b2 / report.PART_SCENARIOS, "a") as f:
        f.write('{"name": "test_b", "outc')
    (b2 / report.PROBE_FILE).write_text("not json")
    (b1 / report.PROBE_FILE).write_text(json.dumps(probe_doc(board="devkitc1", port="/dev/a", sim=False)))
    paths, fleet = report.write_fleet(tmp_path, run_id, [("board 1", "sim"), ("board 2", "/dev/x"),
                                                         ("board 3", "/dev/y")])
    page = paths["html"].read_text()
    assert _matrix(page) == {"test_a": ["passed", "passed", "not run"], "test_b": ["passed", "not run", "not run"]}
    probs = [report.board_problems(b) for b in fleet["boards"]]
    assert probs[0] == []
    assert len(probs[1]) == 2 and "stopped before the end" in probs[1][0] and "is not JSON" in probs[1][1]
    assert probs[2] == ["no result: its bench process never started (see the terminal output)"]
    assert "virtual board" not in page.split("</header>")[0] and "devkitc1" in page.split("</header>")[0]
    assert len(ET.parse(paths["junit"]).getroot().findall("testsuite")) == 3


def test_exit_status_of_the_two_phases():
    s = fleet_mod.exit_status
    assert s(0, 0, False) == 0 and s(0, 5, False) == 0 and s(5, 0, False) == 0 and s(5, 5, False) == 5
    assert s(1, 0, False) == 1 and s(0, 1, False) == 1 and s(0, 0, True) == 1 and s(2, 5, True) == 2


def test_one_boards_report_shows_its_probe_in_the_header(tmp_path):
    """`alabama hil --board PORT --probe-json FILE`: the single-board page carries the same header block; a figure
    more than 1.5x off its estimate is flagged, a chip's figures are not labelled as the simulator's."""
    run = {"run_id": "r", "board": "/dev/a", "board_type": "devkitc1-inmp441", "scenarios": [],
           "probe": probe_doc(board="devkitc1-inmp441", port="/dev/a", sim=False, ratio=0.5)}
    head = report.render_html(run, {}, []).split("</header>")[0]
    assert "gc heap total" in head and "class='num off'>0.50\u00d7" in head and "simulator" not in head
    run["probe"]["figures"][0]["ratio"] = 1.2
    assert "num off" not in report.render_html(run, {}, []).split("</header>")[0]


def test_probe_option_probes_every_board_in_order_and_a_failed_probe_costs_its_figures_only(tmp_path, monkeypatch):
    """`alabama hil --probe` (issue 30): each board is probed before the suite (its board file: --board-type as the
    suite reads it), the reports become the run's --probe-json files in --board order; a probe that fails is a
    report with no figures and its one-line reason, shown in the header, and the boards still run."""
    import argparse
    from alabama.board import probe
    from alabama.hil import cli
    calls = []

    def fake_probe(target, board=None, bind=None, workdir=None, out=print, **kw):
        calls.append((target, board, bind))
        if target == "/dev/b":
            raise probe.ProbeError("/dev/b answers but is not a MicroPython board: flash MicroPython first")
        return {"probe": probe.PROBE_FORMAT, "board": board or "sim", "port": target, "sim": target == "sim",
                "image": {}, "figures": [{"name": "x25519_ms", "value": 1.0, "unit": "ms", "estimate": 2.0,
                                          "ratio": 0.5, "source": "docs/benchmarks.md", "note": ""}]}
    monkeypatch.setattr(probe, "run_probe", fake_probe)
    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers())
    args = p.parse_args(["hil", "--board", "/dev/a", "--board", "sim", "--board", "/dev/b", "--board-type", "ta",
                         "--board-type", "tb", "--bind", "10.0.0.2", "--probe", "--report", str(tmp_path)])
    lines = []
    cli.probe_boards(args, out=lines.append)
    assert calls == [("/dev/a", "ta", "10.0.0.2"), ("sim", None, "10.0.0.2"), ("/dev/b", "tb", "10.0.0.2")]
    reps = [report.read_probe(f) for f in args.probe_json]
    assert [r["port"] for r in reps] == ["/dev/a", "sim", "/dev/b"]
    assert reps[0]["figures"][0]["name"] == "x25519_ms" and reps[2]["figures"] == []
    assert "not a MicroPython board" in reps[2]["error"]
    assert any("probe of board 3 (/dev/b) failed" in ln for ln in lines)
    assert "the probe failed: /dev/b answers" in report.probe_html(reps[2])
    assert "the probe failed" not in report.probe_html(reps[0])
    first = list(args.probe_json)
    args.probe_json = None
    cli.probe_boards(args, out=lines.append)          # a second run into the same --report: its own files
    assert not set(first) & set(args.probe_json) and all(pathlib.Path(f).exists() for f in first + args.probe_json)
    args.probe_json = [args.probe_json[0]]
    with pytest.raises(UsageError, match="--probe or --probe-json, not both"):
        cli.probe_boards(args)


def test_a_fleet_without_xdist_is_one_line_before_any_probe(monkeypatch, capsys):
    """A maker's install without pytest-xdist: `alabama hil --board sim --board sim --probe` says in one line what
    to install, before it probes a board (it probed every board first, then failed), and the advice is the extra
    that installs it (`pip install -e .` would not: pytest-xdist is no runtime dependency)."""
    import importlib.util
    from alabama import cli
    from alabama.hil import cli as hil_cli
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xdist" else real(name, *a))
    probed = []
    monkeypatch.setattr(hil_cli, "probe_boards", lambda args, out=print: probed.append(args.board))
    assert cli.main(["hil", "--board", "sim", "--board", "sim", "--probe"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs pytest-xdist, not installed" in err[0] and "[hil]" in err[0], err
    assert probed == []
    monkeypatch.setattr(importlib.util, "find_spec", real)
