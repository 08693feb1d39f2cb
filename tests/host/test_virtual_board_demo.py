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
    frames = int(re.search(r"reply     : (\d+) frames", text).group(1))
    with wave.open(str(out)) as w:
        assert w.getnframes() == frames > 8000
