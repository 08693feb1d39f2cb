"""The board wakes by itself, end to end on the virtual board (issue 37 item 3): `alabama demo --wake` (`make
demo-wake`) speaks "okay nabu, what time is it" into the sim mic, the board's own frontend and model (okay_nabu,
compiled onto it by deploy) open CaptureOpen{AUDIO, WAKEWORD, LIVE} with no button, the core hears the question
only and answers; and a board whose wake engine cannot run (the same model at the sim's default 320k heap: a real
MemoryError) says so in device.info, does not crash-loop, and still captures by button."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from alabama.board import boards, sim
from alabama.board import logwords as lw

import vb_support

pytestmark = pytest.mark.needs_micropython
pytest.importorskip("pymicro_wakeword", reason="pymicro-wakeword (the shipped models) has no wheel here")


def test_demo_wake_the_board_wakes_by_itself_and_the_core_answers_the_question(tmp_path):
    import importlib.util
    if not (importlib.util.find_spec("pocketsphinx") and shutil.which("espeak-ng")):
        pytest.skip("the wake demo needs pocketsphinx and espeak-ng")
    exe = os.path.join(os.path.dirname(sys.executable), "alabama")
    p = subprocess.run([exe, "demo", "--wake", "--dir", str(tmp_path / "w"), "--out", str(tmp_path / "r.wav")],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    text = p.stdout
    assert "button    : press" not in text, text
    for needle in ("wake word okay_nabu detected", "Sat → Core  CaptureOpen      {id 11, AUDIO, WAKEWORD",
                   "LIVE}", 'heard: "what time is it" intent time', "Core → Sat  Response         {id 11",
                   "no violations"):
        assert needle in text, needle
    assert "nabu" not in text[text.index("heard: "):].splitlines()[0]      # the core never heard the word


def test_a_board_whose_wake_engine_does_not_fit_says_so_and_captures_by_button(core, tmp_path):
    wake = boards.with_wake(boards.load("sim"))
    wake.heap = wake.data["heap"] = boards.load("sim").heap    # 320k: the .mpy firmware leaves ~84 KB, not one piece
    flash = pathlib.Path(tmp_path) / "flash"
    token, _ = core.run(core.core.mint_token, 600)
    sim.provision(flash, "127.0.0.1", core.port, core.key, token, 0)
    vb = sim.VirtualBoard(flash, board=wake, speaker=tmp_path / "speaker.wav")
    vb.start()
    try:
        vb.wait_log(lw.PAIRED, 30)
        why = vb.wait_log(lw.WAKE_CANNOT_RUN, 10).group(1)
        assert "okay_nabu does not fit the free heap" in why, why
        dev = vb_support.device_id(vb)
        info = json.loads(core.call(core.core.invoke(dev, "device.info", "{}")).content[0].text)
        assert info["wake"] is None and info["wake_error"] == why
        assert info["settings"]["capture_mode"] == "wake"       # the setting stands; the board says why it cannot
        m = vb.mark()
        vb.press()
        vb.wait_log(lw.CAPTURE_OPENED_BUTTON, 5, m)
        vb.release()
        vb.wait_log(lw.capture_done(), 15, m)
        time.sleep(0.5)
        log = vb.log_text()
        assert log.count("wake: cannot run") == 1, log          # said once: no retry loop, no reset
        assert "boot 2" not in log
    finally:
        vb.stop()
