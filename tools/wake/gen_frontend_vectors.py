"""Generate tests/firmware/data/wake_frontend.z: audio and pymicro-features' features for the frontend tests.

Responsible for: the seeded test corpus of the wake-word frontend (espeak-ng speech, loud clipped speech,
silence, dither, noise, full-scale tones, square waves, clipping, DC) and the reference features that
pymicro-features 2.0.2 (TFLite-Micro's microfrontend, the one microWakeWord uses) computes from it.
Not for: the firmware (satellite/wake/frontend.py), which tests/firmware/test_wake_frontend.py feeds the
same audio to on CPython and both MicroPython builds, comparing every uint16.

The file is one zlib stream (MicroPython reads it with deflate.DeflateIO): b"MWF1", a segment count, then
per segment: a name (u8 length + ASCII), a coding (u8: 0 s16 LE, 1 G.711 mu-law bytes, which keeps the
speech compact), its number of 10 ms steps (u16), the audio (16 kHz mono: steps * 320 or * 160 bytes),
its number of feature frames (u16) and the features (frames * 40 u16 LE). The audio both frontends see
is the decoded s16 (ulaw_decode). Every segment is a fresh stream (the frontend is reset between them).

    .venv/bin/python tools/wake/gen_frontend_vectors.py          # synthesize (espeak-ng) and rewrite the file
    .venv/bin/python tools/wake/gen_frontend_vectors.py --check  # recompute the features of the stored
                                                                 # audio with pymicro-features; exit 1 on drift

--check does not re-synthesize: espeak-ng's output changes between its versions, the stored audio is the
corpus. tests/host/test_wake_frontend_ref.py runs --check.
"""
import argparse
import pathlib
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "firmware" / "data" / "wake_frontend.z"
MAGIC = b"MWF1"
RATE = 16000
STEP = 160                       # samples per 10 ms step
STEP_BYTES = 2 * STEP
CHANNELS = 40
SCALE = 0.0390625                # pymicro-features returns uint16 * FLOAT32_SCALE (micro_features.cpp)
WBITS = 12                       # a 4 KB window to decompress on the board-sized heaps

RAW, ULAW = 0, 1

# (voice, words per minute, pitch, gain, text): the speech segments
SPEECH = (
    ("en-us", 160, 50, 1.0, "okay nabu, what time is it"),
    ("en+f3", 150, 70, 0.3, "hey jarvis, lights on"),
    ("en-us+m3", 175, 35, 6.0, "alexa, set a timer"),          # loud: clipped at full scale
)


def ulaw_decode(b):
    """G.711 mu-law byte -> s16 (the same few lines as tests/firmware/test_wake_frontend.py's)."""
    b = ~b & 0xFF
    t = (((b & 0x0F) << 3) + 0x84) << ((b & 0x70) >> 4)
    return 0x84 - t if b & 0x80 else t - 0x84


_ULAW = np.array([ulaw_decode(b) for b in range(256)])
_ULAW_ORDER = np.argsort(_ULAW, kind="stable")


def ulaw_encode(x):
    """The mu-law byte whose decoded value is nearest to each s16 sample (a table search, exact by
    construction: encode then decode is what the files hold)."""
    v = _ULAW[_ULAW_ORDER]
    i = np.clip(np.searchsorted(v, x), 1, 255)
    left = np.abs(x - v[i - 1]) <= np.abs(v[i] - x)
    return _ULAW_ORDER[np.where(left, i - 1, i)].astype(np.uint8)


class VectorError(Exception):
    """The corpus cannot be made or read; the message says what to do."""


def reference_features(pcm):
    """pymicro-features' uint16 features of s16 LE `pcm`, fed 10 ms at a time as microWakeWord does."""
    from pymicro_features import MicroFrontend
    fe = MicroFrontend()
    frames = []
    for i in range(0, len(pcm) - STEP_BYTES + 1, STEP_BYTES):
        out = fe.process_samples(pcm[i:i + STEP_BYTES])
        if out.features:
            q = [v / SCALE for v in out.features]
            u = [int(v) for v in q]
            if q != u or len(u) != CHANNELS:      # the scale is a power of two: exact, or the package changed
                raise VectorError("pymicro-features returned features that are not uint16 * %g" % SCALE)
            frames.append(u)
    return frames


def _espeak(voice, wpm, pitch, text):
    from alabama import audio
    exe = shutil.which("espeak-ng")
    if not exe:
        raise VectorError("espeak-ng is not installed: apt-get install espeak-ng")
    raw = subprocess.run([exe, "-v", voice, "-s", str(wpm), "-p", str(pitch), "--stdout", text],
                         capture_output=True, timeout=60, check=True).stdout
    rate, ch, data = audio.parse(raw)
    return np.frombuffer(audio.resample(data, rate, ch, RATE, 1), dtype="<i2").astype(np.float64)


def _s16(x):
    return np.clip(np.round(x), -32768, 32767).astype("<i2")


def segments():
    """[(name, s16 LE bytes)], each a whole number of steps."""
    rng = np.random.default_rng(37)
    t = lambda steps: np.arange(steps * STEP) / RATE          # noqa: E731
    segs = []
    for i, (voice, wpm, pitch, gain, text) in enumerate(SPEECH):
        x = _espeak(voice, wpm, pitch, text) * gain
        segs.append(("speech%d %s" % (i, voice), ULAW, ulaw_encode(_s16(x))))
    square = lambda steps, half: np.where((np.arange(steps * STEP) // half) % 2 == 0, 32767, -32768)  # noqa: E731
    tone = _s16(32767 * np.sin(2 * np.pi * 2000 * t(50)))
    segs += [
        ("silence", RAW, np.zeros(80 * STEP)),
        ("dither", RAW, rng.integers(-1, 2, 60 * STEP)),
        ("noise", RAW, _s16(rng.normal(0, 300, 60 * STEP))),
        ("noise full scale", RAW, _s16(rng.uniform(-32768, 32768, 30 * STEP))),
        ("fade in", ULAW, ulaw_encode(_s16(np.linspace(0, 1, 40 * STEP) * rng.normal(0, 8000, 40 * STEP)))),
        ("sine 125 Hz full scale", RAW, _s16(32767 * np.sin(2 * np.pi * 125 * t(50)))),
        ("sine 1 kHz full scale", RAW, _s16(32767 * np.sin(2 * np.pi * 1000 * t(50)))),
        ("sine 3 kHz full scale", RAW, _s16(32767 * np.sin(2 * np.pi * 3000 * t(50)))),
        ("sine 6.5 kHz full scale", RAW, _s16(32767 * np.sin(2 * np.pi * 6500 * t(40)))),
        ("square 250 Hz full scale", RAW, square(50, 32)),
        ("square 1 kHz full scale", RAW, square(50, 8)),
        ("sine 440 Hz clipped x4", RAW, _s16(4 * 32767 * np.sin(2 * np.pi * 440 * t(50)))),
        ("dc -32768", RAW, np.full(20 * STEP, -32768)),
        ("2 kHz tone then silence", RAW, np.concatenate([tone, np.zeros(50 * STEP)])),
    ]
    out = []
    for name, coding, x in segs:
        n = len(x) // STEP * STEP
        data = x[:n].astype(np.uint8 if coding == ULAW else "<i2").tobytes()
        out.append((name, coding, data))
    return out


def pcm_of(coding, data):
    """The s16 LE audio of a segment's stored bytes."""
    if coding == RAW:
        return bytes(data)
    return np.array([ulaw_decode(b) for b in range(256)], dtype="<i2")[np.frombuffer(data, np.uint8)].tobytes()


def encode(segs):
    body = [MAGIC, struct.pack("<H", len(segs))]
    for name, coding, data in segs:
        pcm = pcm_of(coding, data)
        feats = reference_features(pcm)
        nb = name.encode()
        body += [struct.pack("<B", len(nb)), nb, struct.pack("<BH", coding, len(pcm) // STEP_BYTES), data,
                 struct.pack("<H", len(feats)), struct.pack("<%dH" % (CHANNELS * len(feats)), *sum(feats, []))]
    c = zlib.compressobj(9, zlib.DEFLATED, WBITS)
    return c.compress(b"".join(body)) + c.flush()


def decode(blob):
    """[(name, pcm, features as a flat list)] of a file's bytes."""
    try:
        raw = zlib.decompress(blob)
    except zlib.error as e:
        raise VectorError("%s is damaged (%s): regenerate it with tools/wake/gen_frontend_vectors.py" % (OUT, e))
    if raw[:4] != MAGIC:
        raise VectorError("%s is not a frontend vector file: regenerate it with tools/wake/gen_frontend_vectors.py"
                          % OUT)
    try:
        return _segments(raw)
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise VectorError("%s is damaged (%s): regenerate it with tools/wake/gen_frontend_vectors.py" % (OUT, e))


def _segments(raw):
    pos = 6
    out = []
    for _ in range(struct.unpack_from("<H", raw, 4)[0]):
        n = raw[pos]
        name = raw[pos + 1:pos + 1 + n].decode()
        pos += 1 + n
        coding, steps = struct.unpack_from("<BH", raw, pos)
        size = steps * (STEP if coding == ULAW else STEP_BYTES)
        pcm = pcm_of(coding, raw[pos + 3:pos + 3 + size])
        pos += 3 + size
        nf = struct.unpack_from("<H", raw, pos)[0]
        feats = list(struct.unpack_from("<%dH" % (CHANNELS * nf), raw, pos + 2))
        pos += 2 + 2 * CHANNELS * nf
        out.append((name, pcm, feats))
    return out


def check():
    """Drift: the stored features are what pymicro-features computes from the stored audio now."""
    segs = decode(OUT.read_bytes())
    drift = []
    for name, pcm, feats in segs:
        now = sum(reference_features(pcm), [])
        if now != feats:
            drift.append(name)
    return segs, drift


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when pymicro-features disagrees with the file")
    a = ap.parse_args(argv)
    try:
        if a.check:
            segs, drift = check()
            if drift:
                print("%s: pymicro-features now computes other features for %s: regenerate with "
                      "tools/wake/gen_frontend_vectors.py" % (OUT.relative_to(ROOT), ", ".join(drift)))
                return 1
            return 0
        blob = encode(segments())
        OUT.write_bytes(blob)
        segs = decode(blob)
        print("%s: %d bytes, %d segments, %d feature frames" % (
            OUT.relative_to(ROOT), len(blob), len(segs), sum(len(f) for _, _, f in segs) // CHANNELS))
        return 0
    except VectorError as e:
        print(e)
        return 1
    except ImportError:
        print("pymicro-features is not installed: pip install -e '.[test]'")
        return 1


if __name__ == "__main__":
    sys.exit(main())
