"""Running `alabama hil --board sim` on a mutant firmware, for test_hil_mutants*.py. Responsible for: the run and its
JUnit outcomes, whether a mutant can run here (the speech layer), and the split of alabama.hil.mutants.MUTANTS over
the test files. Not for: the mutants themselves (alabama.hil.mutants).

`--dist loadfile` runs a file on one worker, so sixteen ~15-30 s `alabama hil` runs in one file bound the whole run:
GROUPS splits them over three files by name; test_hil_mutants.py checks that every mutant is in exactly one."""
import hashlib
import pathlib
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from alabama.hil import mutants
from alabama.hil.targets import default_firmware

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: file -> the mutants it runs (test_hil_mutants.py, _b.py, _speech.py), balanced by serial runs' seconds at load ~5
#: (a: ~44 + no_liveness_timeout ~25; b: ~69)
GROUPS = {
    "a": ["seq_steps_by_two", "no_playback_done_on_cancel", "pin_on_xx", "even_capture_ids", "xx_fallback",
          "no_liveness_timeout"],
    "b": ["no_stop", "retry_after_closed", "unknown_arm_drops", "no_backoff", "ping_wrong_t1"],
    "speech": ["mic_drops_a_byte", "mic_swaps_bytes", "mic_shift8", "wake_pre_roll", "wake_deaf_while_playing"],
}


def group(name):
    """The mutants of GROUPS[name], in the catalogue's order (a name no longer in the catalogue is an error)."""
    by_name = {m.name: m for m in mutants.MUTANTS}
    return [by_name[n] for n in GROUPS[name]]


def run_hil(firmware, k, report_dir, timeout=900):
    cmd = [sys.executable, "-m", "alabama.cli", "hil", "--board", "sim", "-k", k, "--report", str(report_dir)]
    if firmware is not None:
        cmd += ["--firmware", str(firmware)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT), stdin=subprocess.DEVNULL)
    return r, junit_outcomes(report_dir)


def junit_outcomes(report_dir):
    """{scenario name: "passed" | "failed" | "error" | "skipped"} from an `alabama hil` report's junit.xml."""
    suite = ET.parse(pathlib.Path(report_dir) / "junit.xml").getroot().find("testsuite")
    outcomes = {}
    for c in suite.findall("testcase"):
        outcomes[c.get("name")] = ("failed" if c.find("failure") is not None else "error" if c.find("error") is not None
                                   else "skipped" if c.find("skipped") is not None else "passed")
    return outcomes


def guarded_pattern():
    """The -k expression selecting every scenario a runnable mutant must make fail."""
    return " or ".join("(%s)" % m.scenario for m in mutants.MUTANTS if runnable(m))


def speech_missing():
    """Why the speech layer (pocketsphinx, espeak-ng, sox) cannot run here, or None."""
    import importlib.util
    if importlib.util.find_spec("pocketsphinx") is None:
        return "pocketsphinx is not installed (pip install pocketsphinx)"
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            return "%s is not installed (apt-get install %s)" % (tool, tool)
    return None


def runnable(mutant):
    return "speech" not in mutant.needs or speech_missing() is None


def check_mutant_makes_its_scenario_fail(mutant, tmp_path):
    if not runnable(mutant):
        pytest.skip("mutant %s's scenario needs the speech layer: %s" % (mutant.name, speech_missing()))
    fw = mutants.apply(mutant, default_firmware(), tmp_path / "firmware")
    try:
        r, outcomes = run_hil(fw, mutant.scenario, tmp_path / "rep")
    finally:   # the virtual board caches a compiled tree per firmware path: drop this throwaway one
        key = hashlib.sha256(str(fw.resolve()).encode()).hexdigest()[:12]
        shutil.rmtree(ROOT / "build" / "sim" / key, ignore_errors=True)
    assert outcomes, r.stdout[-2000:]
    assert r.returncode == 1, "exit %d\n%s" % (r.returncode, r.stdout[-3000:])
    failed = [n for n, o in outcomes.items() if o == "failed"]
    assert failed, "mutant %s (%s): no scenario failed: %s" % (mutant.name, mutant.breaks, outcomes)
    assert not [n for n, o in outcomes.items() if o == "error"], "bench errors, not scenario failures: %s" % outcomes
