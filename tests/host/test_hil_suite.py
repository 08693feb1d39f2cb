"""`alabama hil --board sim`: the whole scenario suite against the virtual board, its report, and the report
rendered in headless Chromium (the screenshot is kept next to the report: build/hil-ci/report.png)."""
import json
import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from alabama.hil import report

ROOT = pathlib.Path(__file__).resolve().parents[2]
REPORT_DIR = ROOT / "build" / "hil-ci"

pytestmark = pytest.mark.slow


def run_hil(*args, timeout=1500):
    cmd = [sys.executable, "-m", "alabama.cli", "hil", "--board", "sim"] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT),
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def suite():
    before = len(report.load_history(REPORT_DIR))
    r = run_hil("--report", str(REPORT_DIR), "--long-runs", "6")
    return r, before


def test_whole_suite_passes_on_the_virtual_board(suite):
    r, _ = suite
    tail = "\n".join((r.stdout + r.stderr).splitlines()[-60:])
    assert r.returncode == 0, "alabama hil --board sim failed:\n" + tail


def test_report_lists_every_scenario(suite):
    r, before = suite
    listed = run_hil("--list")
    names = {line.split("::")[-1] for line in listed.stdout.splitlines() if "::" in line}
    assert len(names) >= 20, listed.stdout[-2000:]
    suite_el = ET.parse(REPORT_DIR / "junit.xml").getroot().find("testsuite")
    cases = {c.get("name") for c in suite_el.findall("testcase")}
    assert cases == names
    page = (REPORT_DIR / "report.html").read_text()
    for n in names:
        assert n in page
    for section in ("Frame timeline", "Core conformance report", "Serial log", "<polygon", "handshake",
                    "Device health"):
        assert section in page, section
    runs = report.load_history(REPORT_DIR)
    assert len(runs) == before + 1
    last = runs[-1]["measurements"]
    for m in ("handshake_ms", "reply_latency_ms", "cancel_silence_ms", "reconnect_ms", "heap_free_bytes",
              "frames_dropped", "frames_late"):
        assert m in last, m


@pytest.mark.skipif(report.find_chromium() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_report_screenshot_in_headless_chromium(suite):
    png = REPORT_DIR / "report.png"
    if png.exists():
        png.unlink()
    r = report.screenshot(REPORT_DIR / "report.html", png, height=3000)
    assert r.returncode == 0, r.stderr[-800:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    dom = report.dump_dom(REPORT_DIR / "report.html")
    assert "Alabama HIL run" in dom and dom.count("<details") >= 20


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


def test_hil_says_what_to_install_without_pytest_timeout(monkeypatch, capsys):
    """Without pytest-timeout (an install that skipped it) `alabama hil` is one line saying what to install,
    not a traceback, and exits 1; a negative --timeout is a usage error."""
    import importlib.util
    from alabama import cli
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pytest_timeout" else real(name, *a))
    assert cli.main(["hil", "--board", "sim", "--list"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pytest-timeout" in err[0] and "pip install" in err[0], err
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert cli.main(["hil", "--board", "sim", "--timeout", "-1"]) == 2
    assert "--timeout -1" in capsys.readouterr().err
