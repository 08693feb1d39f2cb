"""The board image's wake path, end to end on the four shipped models: the 32-bit build (build/mp32, which has the C
modules _wake_c and _wake_fe_c built in, as the board image does) runs satellite.wake.model on its default kernels
(C, the whole program in one call) over the same uint16 feature frames as pymicro-wakeword's TFLite runtime: every
uint8 probability and every detection identical (issue 37 item 2's proof, for the C path). Skips, saying how to
build it, without build/mp32; fails under CI."""
import os
import shutil
import subprocess
import wave

import numpy as np
import pytest

from mpharness import MP32, MP32_HEAP, micropython32_cmd, run_micropython

pytest.importorskip("pymicro_wakeword", reason="pymicro-wakeword has no wheel for this platform")

from alabama.board.fwset import FIRMWARE  # noqa: E402
from alabama.wake import reference as R  # noqa: E402

_RUNNER = r"""
import sys, array
sys.path.insert(0, %(fw)r)
from satellite.wake import model as M
assert M.IMPL == "c", M.IMPL
m = M.load(open(%(model)r, "rb"))
raw = open(%(feats)r, "rb").read()
buf = array.array("H", bytes(80))
out = bytearray()
for k in range(len(raw) // 80):
    for i in range(40):
        buf[i] = raw[80 * k + 2 * i] | (raw[80 * k + 2 * i + 1] << 8)
    p = m.step(buf)
    if p >= 0:
        out.append(p)
        out.append(1 if m.detected else 0)
open(%(out)r, "wb").write(out)
"""


def _stream(seed, words, tmp_path):
    """Noise, a tone, a slow walk, then the wake word spoken twice by espeak-ng (when installed): enough to move
    every model's output."""
    rng = np.random.default_rng(seed)
    t = np.arange(16000)
    x = np.concatenate([rng.normal(0, 3000, 16000), 8000 * np.sin(2 * np.pi * 440 * t / 16000),
                        rng.normal(0, 1, 16000).cumsum() * 200, rng.normal(0, 30, 16000)])
    parts = [np.clip(x, -32768, 32767).astype("<i2")]
    exe = shutil.which("espeak-ng")
    if exe:
        wav = tmp_path / "w.wav"
        subprocess.run([exe, "-w", str(wav), "-s", "140", words], check=True, capture_output=True)
        with wave.open(str(wav)) as r:
            y = np.frombuffer(r.readframes(r.getnframes()), "<i2").astype(np.float64)
            sr = r.getframerate()
        n = int(len(y) * 16000 / sr)
        y = np.interp(np.arange(n) * sr / 16000, np.arange(len(y)), y).astype("<i2")
        parts += [y, np.zeros(8000, "<i2"), y, np.zeros(8000, "<i2")]
    return np.concatenate(parts).tobytes()


@pytest.fixture(scope="module")
def mp32():
    cmd = micropython32_cmd()
    if cmd is None:
        why = "no 32-bit micropython at %s: run `make mp32` (tools/mp32/build.sh)" % MP32
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return cmd


@pytest.mark.parametrize("model", R.BUILTIN)
def test_c_path_on_the_32bit_build_equals_tflite(model, mp32, tmp_path):
    frames = R.features_of(_stream(7, ", ".join(m.replace("_", " ") for m in [model] + list(R.BUILTIN)), tmp_path))
    rp, rh = R.run_reference(model, frames)
    (tmp_path / "m.aww").write_bytes(R.compile_named(model))
    (tmp_path / "f.bin").write_bytes(np.asarray(frames, dtype="<u2").tobytes())
    script = tmp_path / "run.py"
    script.write_text(_RUNNER % {"fw": str(FIRMWARE), "model": str(tmp_path / "m.aww"),
                                 "feats": str(tmp_path / "f.bin"), "out": str(tmp_path / "out.bin")})
    r = run_micropython([str(script)], micropython=mp32, heap=MP32_HEAP)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    out = (tmp_path / "out.bin").read_bytes()
    probs, hits = list(out[0::2]), [bool(v) for v in out[1::2]]
    assert len(probs) == len(rp) > 100
    assert probs == rp                                 # every uint8 probability, bit for bit
    assert hits == [bool(h) for h in rh]
    assert len(set(probs)) >= 2                        # the stream moves the model: not a constant output
