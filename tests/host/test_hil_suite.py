"""`alabama hil --board sim`: the whole scenario suite against the virtual board, its report, and the report
rendered in headless Chromium (the screenshot is kept next to the report: build/hil-ci/report.png). Ctrl-C and a
scenario past --timeout are test_hil_suite_teardown.py (a file of their own: another worker runs them while the
whole suite runs here)."""
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from alabama.hil import report

from hil_mutant_support import guarded_pattern, junit_outcomes

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


def test_every_scenario_a_mutant_guards_passed_in_the_whole_suite(suite):
    """The scenarios the mutant firmwares of alabama.hil.mutants must make fail (test_hil_mutants*.py) pass on the
    real firmware: passed, not skipped, in this whole-suite run (no second run of them)."""
    listed = run_hil("--list", "-k", guarded_pattern())
    guarded = {line.split("::")[-1] for line in listed.stdout.splitlines() if "::" in line}
    assert guarded, listed.stdout[-2000:] + listed.stderr[-2000:]
    outcomes = junit_outcomes(REPORT_DIR)
    assert {n: outcomes.get(n) for n in guarded} == dict.fromkeys(guarded, "passed")


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
    with pytest.raises(SystemExit) as e:          # argparse's usage error (alabama.usage): one line, status 2
        cli.main(["hil", "--board", "sim", "--timeout", "-1"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timeout" in err[0] and "-1" in err[0], err
