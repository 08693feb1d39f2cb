"""Each scenario can fail: a deliberately broken firmware build (alabama.hil.mutants) makes the scenario
that guards the broken behaviour FAIL — while the same scenarios pass on the real firmware."""
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


def run_hil(firmware, k, report_dir, timeout=900):
    cmd = [sys.executable, "-m", "alabama.cli", "hil", "--board", "sim", "-k", k, "--report", str(report_dir)]
    if firmware is not None:
        cmd += ["--firmware", str(firmware)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT), stdin=subprocess.DEVNULL)
    suite = ET.parse(pathlib.Path(report_dir) / "junit.xml").getroot().find("testsuite")
    outcomes = {}
    for c in suite.findall("testcase"):
        outcomes[c.get("name")] = ("failed" if c.find("failure") is not None else "error" if c.find("error") is not None
                                   else "skipped" if c.find("skipped") is not None else "passed")
    return r, outcomes


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


def test_at_least_five_mutants_each_apply_to_the_current_firmware(tmp_path):
    assert len(mutants.MUTANTS) >= 5
    assert len({m.name for m in mutants.MUTANTS}) == len(mutants.MUTANTS)
    for m in mutants.MUTANTS:
        out = mutants.apply(m, default_firmware(), tmp_path / m.name)
        for rel, old, new in m.edits:
            text = (out / rel).read_text()
            assert new in text and text != (default_firmware() / rel).read_text()


def test_stale_mutant_is_refused(tmp_path):
    m = mutants.Mutant("gone", "x", "nothing", [("satellite/session.py", "this text is not in the firmware", "")])
    with pytest.raises(mutants.StaleMutant, match="update the mutant"):
        mutants.apply(m, default_firmware(), tmp_path / "gone")


@pytest.mark.slow
def test_guarded_scenarios_pass_on_the_real_firmware(tmp_path):
    k = " or ".join("(%s)" % m.scenario for m in mutants.MUTANTS if runnable(m))
    r, outcomes = run_hil(None, k, tmp_path / "rep")
    assert outcomes and all(o == "passed" for o in outcomes.values()), (outcomes, r.stdout[-3000:])


@pytest.mark.slow
@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=[m.name for m in mutants.MUTANTS])
def test_mutant_makes_its_scenario_fail(mutant, tmp_path):
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
