"""`alabama hil --board sim` torn down mid-run: Ctrl-C, and a scenario past --timeout, both leave no process behind and
still write the report (split from test_hil_suite.py, whose module-scoped whole-suite run is one worker's ~3 min)."""
import json
import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def run_hil(*args, timeout=1500):
    cmd = [sys.executable, "-m", "alabama.cli", "hil", "--board", "sim"] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT),
                          stdin=subprocess.DEVNULL)


def _processes_under(path):
    """pids whose working directory lies under ``path`` (the virtual board runs in its flash dir)."""
    out = []
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cwd = os.readlink(d / "cwd")
            except OSError:
                continue
            if cwd.startswith(str(path)):
                out.append(int(d.name))
    return out


@pytest.mark.skipif(not pathlib.Path("/proc/self/cwd").exists(), reason="needs /proc to find leftover processes")
def test_ctrl_c_tears_everything_down_and_still_reports(tmp_path):
    import signal
    import time
    rep = tmp_path / "rep"
    cmd = [sys.executable, "-m", "alabama.cli", "hil", "--board", "sim", "-k", "long_run", "--long-runs", "50",
           "--report", str(rep)]
    p = subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL,
                         # a shell's background job inherits SIGINT ignored, and Python then never raises
                         # KeyboardInterrupt: give the child Ctrl-C as a terminal would
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _processes_under(rep):
            time.sleep(0.2)
        assert _processes_under(rep), "the virtual board never started"
        time.sleep(3)                      # mid-scenario: exchanges under way
        p.send_signal(signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            # stuck: have it print every thread's stack (alabama.cli registers SIGUSR1) and fail with that
            p.send_signal(signal.SIGUSR1)
            time.sleep(2)
            p.kill()
            out, _ = p.communicate(timeout=10)
            raise AssertionError("still running 60 s after Ctrl-C; its threads:\n"
                                 + out.decode(errors="replace")[-6000:])
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 2, out.decode(errors="replace")[-2000:]
    time.sleep(0.5)
    assert _processes_under(rep) == [], "processes left running after Ctrl-C"
    assert (rep / "report.html").exists() and (rep / "junit.xml").exists()
    run = json.loads(next(rep.glob("*/run.json")).read_text())
    assert [s["name"] for s in run["scenarios"]] == ["test_long_run_back_to_back"]


@pytest.mark.skipif(not pathlib.Path("/proc/self/cwd").exists(), reason="needs /proc to find leftover processes")
def test_a_scenario_past_its_timeout_fails_and_the_run_still_reports(tmp_path):
    """`--timeout S`: a scenario still running after S seconds (here the long run asked for 500 exchanges, far
    more than 20 s) fails with pytest-timeout's Timeout and its stacks, its board and core are torn down, and the
    report is written: a board that stops answering costs one scenario, not a bench that never ends."""
    rep = tmp_path / "rep"
    r = run_hil("-k", "long_run", "--long-runs", "500", "--timeout", "20", "--report", str(rep), timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-2000:]
    assert "+ Timeout +" in out and "FAILED" in out and "test_long_run_back_to_back" in out, out[-2000:]
    cases = {tc.get("name"): [c.tag for c in tc] for tc in ET.parse(str(rep / "junit.xml")).iter("testcase")}
    assert "failure" in cases.get("test_long_run_back_to_back", []), cases
    assert (rep / "report.html").exists()
    assert _processes_under(rep) == [], "processes left running after the timeout"
