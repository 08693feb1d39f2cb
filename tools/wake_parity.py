#!/usr/bin/env python3
"""`make wake-parity`: the firmware's wake-model interpreter against pymicro-wakeword (TFLite) over a seeded corpus,
for the four shipped models: every inference's uint8 probability and detection compared, and the detection figures
(positives woken, false accepts per hour) of both engines.

Corpus (all generated here, deterministic for a seed): positives are each model's wake phrase spoken by espeak-ng in
8 voices x 3 variants x 3 speeds x 3 pitches (216 clips), each mixed with white noise at one of clean / 20 / 10 dB
SNR; negatives are at least 30 minutes of espeak-ng sentences from a fixed word list (none of the wake words) in the
same voices, white and pink noise, tones and silence. espeak-ng is not a real voice: the figures say how the two
engines compare on the same input, not how well a model wakes on people.

The firmware side is satellite.wake.model itself, run by the micropython unix port (viper kernels) on the same uint16
feature frames pymicro-features gives the reference. Prints a table and writes build/wake-parity/report.json; exits 1
when any probability or detection differs.
Run: .venv/bin/python tools/wake_parity.py [--minutes 30] [--models okay_nabu,...] [--seed 37]"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))

from alabama import audio  # noqa: E402
from alabama.local import find_micropython  # noqa: E402
from alabama.wake import reference as R  # noqa: E402

VOICES = ("en", "en-us", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
VARIANTS = ("", "+f2", "+m3")
SPEEDS = (120, 150, 180)
PITCHES = (35, 50, 70)
SNRS = (None, 20, 10)
PHRASES = {"okay_nabu": "okay nabu", "hey_jarvis": "hey jarvis", "alexa": "alexa", "hey_mycroft": "hey mycroft"}
WORDS = ("the weather is nice today and we should go for a walk in the park before dinner time the kitchen "
         "light is on please turn off the music play something quiet how long until the train arrives set a timer "
         "for ten minutes what is on the calendar tomorrow remind me to call my sister open the window a little "
         "bit the children are asleep upstairs so keep it down we need more milk bread eggs and coffee this "
         "evening the football match starts at eight o clock my phone battery is almost empty").split()

# the firmware side, run by micropython: model file, features (uint16 LE, frames x 40), clip lengths (uint32 LE),
# output (2 bytes per inference: probability, detected)
_RUNNER = r"""
import sys, array
sys.path.insert(0, %(fw)r)
from satellite.wake import model as M
m = M.load(open(%(model)r, "rb"))
assert M.VIPER
lens = array.array("I", open(%(lens)r, "rb").read())
f = open(%(feats)r, "rb")
out = open(%(out)r, "wb")
buf = array.array("H", bytes(80))
res = bytearray(2)
for n in lens:
    m.reset()
    for _ in range(n):
        f.readinto(buf)
        p = m.step(buf)
        if p >= 0:
            res[0] = p
            res[1] = 1 if m.detected else 0
            out.write(res)
out.close()
"""


def _say(text, voice, speed, pitch, tmp):
    wav = pathlib.Path(tmp) / "s.wav"
    subprocess.run(["espeak-ng", "-w", str(wav), "-v", voice, "-s", str(speed), "-p", str(pitch), text],
                   check=True, capture_output=True)
    rate, ch, width, pcm = audio.read(str(wav))
    return np.frombuffer(audio.resample(audio.to_s16(pcm, width), rate, ch, 16000, 1), "<i2").astype(np.float64)


def _mix(x, snr, rng):
    if snr is None:
        return x
    p = np.mean(x ** 2) + 1e-9
    return x + rng.normal(0, np.sqrt(p / 10 ** (snr / 10)), len(x))


def _pcm(x):
    return np.clip(np.round(x), -32768, 32767).astype("<i2").tobytes()


def positives(model, rng, tmp):
    clips = []
    pad = np.zeros(8000)
    i = 0
    for voice in VOICES:
        for var in VARIANTS:
            for speed in SPEEDS:
                for pitch in PITCHES:
                    x = _say(PHRASES[model], voice + var, speed, pitch, tmp)
                    x = _mix(np.concatenate([pad, x, pad]), SNRS[i % len(SNRS)], rng)
                    clips.append(R.features_of(_pcm(x)))
                    i += 1
    return clips


def negatives(minutes, rng, tmp):
    """Chunks of about a minute each, until `minutes` of audio."""
    chunks, total, k = [], 0, 0
    while total < minutes * 60 * 16000:
        kind = k % 5
        n = 60 * 16000
        if kind in (0, 1, 2):
            parts, got = [], 0
            while got < n:
                words = " ".join(rng.choice(WORDS, size=int(rng.integers(6, 16))))
                voice = VOICES[int(rng.integers(len(VOICES)))] + VARIANTS[int(rng.integers(len(VARIANTS)))]
                x = _say(words, voice, int(rng.choice(SPEEDS)), int(rng.choice(PITCHES)), tmp)
                x = _mix(x, (None, 20, 10)[int(rng.integers(3))], rng)
                parts += [x, np.zeros(int(rng.integers(1600, 8000)))]
                got += len(x) + len(parts[-1])
            x = np.concatenate(parts)[:n]
        elif kind == 3:
            white = rng.normal(0, float(rng.choice([100, 1000, 6000])), n)
            pink = np.cumsum(rng.normal(0, 1, n))
            pink -= np.convolve(pink, np.ones(400) / 400, "same")
            x = np.where(np.arange(n) < n // 2, white, pink * 300)
        else:
            t = np.arange(n) / 16000
            f = 100 + 3000 * (t / 60)
            x = 6000 * np.sin(2 * np.pi * np.cumsum(f) / 16000) * (np.arange(n) % 32000 < 24000)
        chunks.append(R.features_of(_pcm(x)))
        total += n
        k += 1
    return chunks


def reference(model, clips):
    probs, hits = [], []
    for c in clips:
        p, h = R.run_reference(model, c)
        probs += p
        hits += h
    return probs, hits


def firmware(model, clips, work):
    blob = R.compile_named(model)
    mf = work / (model + ".aww")
    mf.write_bytes(blob)
    feats, lens, out = work / "feats.bin", work / "lens.bin", work / "out.bin"
    feats.write_bytes(b"".join(c.astype("<u2").tobytes() for c in clips))
    lens.write_bytes(np.array([len(c) for c in clips], "<u4").tobytes())
    runner = work / "runner.py"
    runner.write_text(_RUNNER % {"fw": str(ROOT / "firmware"), "model": str(mf), "feats": str(feats),
                                 "lens": str(lens), "out": str(out)})
    subprocess.run([find_micropython(), "-X", "heapsize=4m", str(runner)], check=True)
    r = np.frombuffer(out.read_bytes(), np.uint8).reshape(-1, 2)
    return [int(v) for v in r[:, 0]], [bool(v) for v in r[:, 1]]


def _per_clip(clips, hits):
    woke, i = [], 0
    for c in clips:
        n = len(c) // 3
        woke.append(any(hits[i:i + n]))
        i += n
    return woke


def _events(hits):
    return sum(1 for a, b in zip([False] + hits, hits) if b and not a)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="negative audio, minutes (default 30)")
    ap.add_argument("--models", default=",".join(R.BUILTIN))
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--out", default=str(ROOT / "build" / "wake-parity"))
    a = ap.parse_args()
    if not shutil.which("espeak-ng"):
        sys.exit("wake_parity: espeak-ng is not installed (apt-get install espeak-ng)")
    outdir = pathlib.Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    report = {"seed": a.seed, "negative_minutes": a.minutes, "models": {}}
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        neg = negatives(a.minutes, np.random.default_rng(a.seed), tmp)
        neg_hours = sum(len(c) for c in neg) * 0.01 / 3600
        print("negatives: %d chunks, %.1f min of features (%.0f s)" % (len(neg), neg_hours * 60, time.time() - t0),
              flush=True)
        for model in a.models.split(","):
            pos = positives(model, np.random.default_rng(a.seed + 1), tmp)
            row = {"positives": len(pos)}
            for label, clips in (("pos", pos), ("neg", neg)):
                rp, rh = reference(model, clips)
                fp, fh = firmware(model, clips, work)
                same_p = sum(1 for x, y in zip(rp, fp) if x == y)
                row[label] = {"inferences": len(rp), "equal_probabilities": same_p,
                              "max_abs_diff": max((abs(x - y) for x, y in zip(rp, fp)), default=0),
                              "equal_detections": sum(1 for x, y in zip(rh, fh) if x == y),
                              "reference_detections": _events(rh), "firmware_detections": _events(fh)}
                ok &= len(rp) == len(fp) and same_p == len(rp) and rh == fh
                if label == "pos":
                    row[label]["reference_woken"] = sum(_per_clip(clips, rh))
                    row[label]["firmware_woken"] = sum(_per_clip(clips, fh))
            row["neg"]["hours"] = round(neg_hours, 3)
            row["neg"]["reference_fa_per_hour"] = round(row["neg"]["reference_detections"] / neg_hours, 2)
            row["neg"]["firmware_fa_per_hour"] = round(row["neg"]["firmware_detections"] / neg_hours, 2)
            report["models"][model] = row
            p, n = row["pos"], row["neg"]
            print("%-12s positives %d: woken %d (TFLite %d); probabilities equal %d/%d; negatives %.2f h: "
                  "probabilities equal %d/%d, false accepts %d (TFLite %d); detections equal %s  [%.0f s]"
                  % (model, len(pos), p["firmware_woken"], p["reference_woken"], p["equal_probabilities"],
                     p["inferences"], neg_hours, n["equal_probabilities"], n["inferences"], n["firmware_detections"],
                     n["reference_detections"], p["equal_detections"] == p["inferences"] and
                     n["equal_detections"] == n["inferences"], time.time() - t0), flush=True)
    report["seconds"] = round(time.time() - t0)
    (outdir / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    print("report: %s" % (outdir / "report.json"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
