"""`alabama demo` end to end (the `make demo` path): exits 0 after a completed exchange, prints the §4-style
timeline, writes a reply WAV whose length is what the board reported playing; with pocketsphinx the core's
speech brain prints what it heard through the board and answers it (issue 28)."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import wave


def test_demo_completes_with_timeline_and_reply(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "alabama")
    out = tmp_path / "reply.wav"
    p = subprocess.run([exe, "demo", "--dir", str(tmp_path / "w"), "--out", str(out)], capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    text = p.stdout
    for needle in ("Sat → Core  CaptureOpen", "Sat → Core  StreamChunk", "Sat → Core  StreamEnd",
                   "Core → Sat  MediaRenderOpen", "Sat → Core  PlaybackDone", "Core → Sat  Response",
                   "no violations", "handshake done (IK)"):
        assert needle in text, needle
    if importlib.util.find_spec("pocketsphinx") and shutil.which("espeak-ng"):
        assert 'heard: "what time is it" intent time' in text, text
        both = p.stdout + p.stderr
        assert both.count('heard: "what time is it"') == 1, both     # the demo's echo, not the root log too
    frames = int(re.search(r"reply     : (\d+) frames", text).group(1))
    with wave.open(str(out)) as w:
        assert w.getnframes() == frames > 8000


def test_demo_ambient_wakes_on_the_default_wake_word_without_a_button(tmp_path):
    """`make demo-ambient`: the board streams ambiently from connect, "Alexa" (the core's default wake word, the
    microWakeWord model: issue 40) makes the core ask for a capture, the board supersedes its ambient stream,
    the turn is heard and answered, ambient resumes."""
    import pytest
    if not (importlib.util.find_spec("pocketsphinx") and shutil.which("espeak-ng")):
        pytest.skip("the ambient demo needs pocketsphinx and espeak-ng")
    if not importlib.util.find_spec("pymicro_wakeword"):
        pytest.skip("the ambient demo's default wake word needs pymicro-wakeword")
    exe = os.path.join(os.path.dirname(sys.executable), "alabama")
    p = subprocess.run([exe, "demo", "--ambient", "--dir", str(tmp_path / "w"), "--out", str(tmp_path / "r.wav")],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    text = p.stdout
    assert "button    : press" not in text, text
    for needle in ("the core listens for 'alexa' (microWakeWord model)", "'Alexa,' (en-us)",
                   "wake word 'Alexa' heard on ambient capture", "Core → Sat  RequestCapture",
                   "Sat → Core  StreamCancel     {id 3, SUPERSEDED}", "correlation_ref 'wake-3-",
                   'heard: "what time is it" intent time', "ambient streaming again on capture", "no violations"):
        assert needle in text, needle


def test_demo_wake_phrase_is_a_custom_phrase_for_the_ambient_demo_only(tmp_path):
    """`--wake-phrase TEXT` picks the keyphrase spotter for the hands-free demo; without --ambient, or empty, it
    is one line and exit 2, a usage mistake (nothing starts)."""
    exe = os.path.join(os.path.dirname(sys.executable), "alabama")
    for args, says in ((["--wake-phrase", "hey alabama"], "add --ambient"),
                       (["--ambient", "--wake-phrase", " "], "--wake-phrase is empty")):
        p = subprocess.run([exe, "demo", "--dir", str(tmp_path / "w")] + args, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "Traceback" not in p.stderr and not (tmp_path / "w").exists()


def test_demo_turn_off_the_light_reaches_the_boards_lamp(tmp_path):
    """Issue 40 item 5: the virtual board declares light.set (its simulated lamp), so the demo's speech brain
    Invokes it through the board for "turn off the light" and the board logs the lamp off."""
    import pytest
    if not (importlib.util.find_spec("pocketsphinx") and shutil.which("espeak-ng")):
        pytest.skip("the light demo needs pocketsphinx and espeak-ng")
    exe = os.path.join(os.path.dirname(sys.executable), "alabama")
    p = subprocess.run([exe, "demo", "--say", "turn off the light", "--dir", str(tmp_path / "w"), "--out",
                        str(tmp_path / "r.wav")], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    text = p.stdout
    for needle in ('heard: "turn off the light" intent light {"on": false, "tool": "light.set"}',
                   "Core → Sat  Invoke", "Sat → Core  ToolResult", "board     : light off (light.set", "no violations"):
        assert needle in text, needle


def test_heard_tap_prints_a_pipeline_line_once_and_passes_warnings_on():
    """The demo's tap catches the speech brain's INFO line; the root's (stderr) handler must not print it as
    well (it did: `make demo` showed `heard: "..."` twice), while a WARNING still reaches it, once."""
    import logging
    from alabama.demo import heard_tap

    class Count(logging.Handler):
        def __init__(self):
            super().__init__()
            self.msgs = []

        def emit(self, record):
            self.msgs.append(record.getMessage())

    root, root_count = logging.getLogger(), Count()
    plog = logging.getLogger("alabama.core.pipeline")
    old_root, old_level, old_prop = root.level, plog.level, plog.propagate
    root.addHandler(root_count)
    root.setLevel(logging.WARNING)               # `alabama demo` without -v
    plog.setLevel(logging.NOTSET)
    try:
        with heard_tap() as tap:
            plog.info('dev: heard: "what time is it" intent time')
            plog.warning("dev: something the user must see")
        assert tap.lines == ['heard: "what time is it" intent time']
        assert root_count.msgs == ["dev: something the user must see"]
        assert (plog.level, plog.propagate) == (logging.NOTSET, old_prop)   # given back
        root.setLevel(logging.INFO)              # `alabama -v demo`: the log shows INFO lines, once
        root_count.msgs.clear()
        with heard_tap():
            plog.info("dev: heard: x")
        assert root_count.msgs == ["dev: heard: x"]
    finally:
        root.removeHandler(root_count)
        root.setLevel(old_root)
        plog.setLevel(old_level)
        plog.propagate = old_prop
