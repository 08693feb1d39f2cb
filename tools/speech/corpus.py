"""Seeded speech corpus: espeak-ng utterances in many voices, speeds, pitches and noises, as WAVs + a JSON index.

Responsible for generating test audio deterministically from a seed (the same seed gives the same bytes: espeak-ng and
sox without dither are deterministic, noise comes from numpy's seeded generator) and for splitting it into a TUNING set
and a HELD-OUT set that share no voice, no speed, no pitch and no command phrasing, so a threshold tuned on one is
measured on material it has never seen. Not responsible for judging recognition (tools/speech/accuracy.py does) and
never writes outside its output directory (build/..., not committed).

Library use (the wake-word measurement builds its own item lists on the same pieces)::

    from corpus import Clip, render, voices, write
    pcm = render(Clip("hey alabama", "en-gb-x-rp+f3", 150, 40, snr=10, noise="pink", lead=0.4), seed=7)

Command line::

    .venv/bin/python tools/speech/corpus.py [--seed 40] [--out build/speech-corpus] [--commands 120] [--oog 40]
                                            [--junk 24]
"""
import argparse
import json
import pathlib
import random
import sys
import wave
import zlib
from typing import NamedTuple

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "host"))

from alabama.speech import SAMPLE_RATE, audio, intents  # noqa: E402

TUNE = "tune"
HELD = "held"
SPLITS = (TUNE, HELD)

#: espeak-ng's English voices (espeak-ng --voices=en, the gmw ones: the mbrola voices need extra packages) and
#: variants (espeak-ng-data/voices/!v). Each split gets its own accents x variants: no voice is in both.
ACCENTS = {TUNE: ("en-us", "en-gb", "en-gb-x-rp", "en-029"),
           HELD: ("en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-us-nyc")}
VARIANTS = {TUNE: ("", "+f2", "+m3", "+f4", "+m5", "+klatt"),
            HELD: ("+m2", "+f1", "+f3", "+m1", "+m4", "+klatt3", "+m7", "+f5")}
SPEEDS = {TUNE: (135, 150, 170), HELD: (125, 145, 155, 180)}     # words per minute
PITCHES = {TUNE: (35, 50, 65), HELD: (30, 45, 60, 75)}          # espeak-ng -p, 0..99 (default 50)
SNRS = (None, 20, 10, 5)                                          # dB; None: clean
NOISES = {TUNE: ("white", "brown"), HELD: ("pink", "hum")}

#: In-grammar command phrasings (every sentence intents.grammar() accepts, with its intent), split so that no phrasing
#: is tuned on and then measured: the held-out half is what accuracy.py publishes.
_NUMS = sorted(intents.NUMBERS, key=intents.NUMBERS.get)
COMMANDS = {
    TUNE: (["what time is it", "what is the time", "stop", "turn the light on", "turn light off", "turn on the light"]
           + ["set a timer for %s minutes" % n for n in _NUMS[0::2] if n != "one"] + ["set a timer for one minute"]),
    HELD: (["tell me the time", "cancel", "turn the light off", "turn off the light", "turn light on"]
           + ["set a timer for %s minutes" % n for n in _NUMS[1::2]]),
}
#: Out-of-grammar sentences: near misses first (command words in other sentences), then ordinary requests.
OUT_OF_GRAMMAR = {
    TUNE: ("what time does the bakery open", "set the table for dinner", "turn left at the next light",
           "the timer on the oven is broken", "stop by the store on your way home", "tell me a story about the sea",
           "is it going to rain tomorrow", "play some music in the kitchen", "the light in the hall is too bright",
           "what is the capital of france", "remind me to call my mother", "how do you spell necessary",
           "five minutes is not enough time", "my brother lives in chicago"),
    HELD: ("how far away is the moon tonight", "what is the time zone of tokyo", "turn the page and keep reading",
           "set a course for the northern islands", "cancel my dentist appointment", "who won the game last night",
           "how many minutes are in an hour", "the lights went out during the storm", "tell me the news",
           "please open the garage door", "what is the weather like in paris", "add eggs to the shopping list",
           "twenty people came to the party", "i would like a cup of tea"),
}
#: Syllables for babble junk (speech-like, no words), split too.
SYLLABLES = {TUNE: "ba ko ti mu ne ra so gi lu pe da vo".split(), HELD: "ka mo ri tu se ni lo fa bu ze go pi".split()}
JUNK_KINDS = ("babble", "reversed", "noise", "tones")


class Clip(NamedTuple):
    text: str                 # what espeak-ng says ("" for noise/tones junk)
    voice: str                # espeak-ng voice, e.g. "en-us+m2"
    speed: int                # wpm
    pitch: int                # espeak-ng -p
    snr: object = None        # dB (speech rms / noise rms over the speech part), None: clean
    noise: str = "white"      # white | pink | brown | hum
    lead: float = 0.3         # seconds of quiet (or noise) before the speech
    tail: float = 0.5         # ... and after: an endpointer's closing quiet
    junk: str = ""            # "" | babble | reversed | noise | tones


def voices(split):
    """The espeak-ng voice strings of a split (accent x variant): none appears in the other split."""
    return [a + v for a in ACCENTS[split] for v in VARIANTS[split]]


def _espeak(text, voice, speed, pitch):
    return audio.synth(text, voice, speed, pad=(0, 0), pitch=pitch)


def noise(kind, n, rng):
    """n float samples of unit rms noise: white, pink (1/f), brown (1/f^2) or mains hum with harmonics + hiss."""
    if kind == "hum":
        t = np.arange(n) / SAMPLE_RATE
        f = rng.choice((50.0, 60.0))
        x = sum(np.sin(2 * np.pi * f * k * t + rng.uniform(0, 6.28)) / k for k in (1, 2, 3, 5))
        x = x + 0.3 * rng.normal(size=n)
    else:
        x = rng.normal(size=n)
        if kind in ("pink", "brown"):
            spec = np.fft.rfft(x)
            f = np.arange(1, len(spec) + 1, dtype=float)
            spec /= np.sqrt(f) if kind == "pink" else f
            x = np.fft.irfft(spec, n)
    x = x - x.mean()
    return x / (np.sqrt(np.mean(x * x)) or 1.0)


def _junk_signal(clip, rng):
    n = int(rng.uniform(1.0, 2.5) * SAMPLE_RATE)
    if clip.junk == "noise":
        x = noise(rng.choice(("white", "pink", "brown")), n, rng) * rng.uniform(800, 4000)
        env = np.minimum(1.0, np.abs(np.sin(np.linspace(0, np.pi * rng.integers(1, 4), n))) * 3)  # bursts
        return x * env
    t = np.arange(n) / SAMPLE_RATE                                   # tones: a few beeps and a sweep
    f0, f1 = rng.uniform(200, 900), rng.uniform(900, 3000)
    sweep = np.sin(2 * np.pi * (f0 + (f1 - f0) * t / t[-1] / 2) * t)
    beeps = np.sin(2 * np.pi * rng.choice((440.0, 660.0, 880.0)) * t) * (np.sin(2 * np.pi * 3 * t) > 0)
    return (sweep + beeps) * 4000


def render(clip, seed=0):
    """16 kHz s16le mono PCM of a clip: speech (or junk) with clip.lead/tail quiet around it, noise over all of it at
    clip.snr relative to the speech part's rms. Deterministic in (clip, seed)."""
    rng = np.random.default_rng(_clip_seed(clip, seed))
    if clip.junk in ("noise", "tones"):
        speech = _junk_signal(clip, rng)
    else:
        speech = np.frombuffer(_espeak(clip.text, clip.voice, clip.speed, clip.pitch), "<i2").astype(float)
        if clip.junk == "reversed":
            speech = speech[::-1]
    lead, tail = int(clip.lead * SAMPLE_RATE), int(clip.tail * SAMPLE_RATE)
    x = np.concatenate([np.zeros(lead), speech, np.zeros(tail)])
    if clip.snr is not None:
        voiced = speech[np.abs(speech) > 0.05 * (np.abs(speech).max() or 1)]
        rms = np.sqrt(np.mean(voiced * voiced)) if len(voiced) else 1000.0
        x = x + noise(clip.noise, len(x), rng) * rms / 10 ** (clip.snr / 20.0)
    return np.clip(np.round(x), -32768, 32767).astype("<i2").tobytes()


def _clip_seed(clip, seed):
    """A stable per-clip seed (Python's hash() of strings changes per process)."""
    return [seed, zlib.crc32(json.dumps(list(clip)).encode())]


def plan(seed, split, commands=120, oog=40, junk=24):
    """The clips of one split, chosen by a seeded generator: (kind, Clip, expected intent or None) triples.
    Every command phrasing and out-of-grammar sentence of the split is used about equally often; voices, speeds,
    pitches, SNRs and noises are drawn from the split's own lists (SNR: a quarter clean, a quarter each 20/10/5 dB)."""
    rng = random.Random("%s/%s" % (seed, split))
    vs = voices(split)

    def draw(text, i, junk_kind=""):
        return Clip(text, rng.choice(vs), rng.choice(SPEEDS[split]), rng.choice(PITCHES[split]), SNRS[i % 4],
                    rng.choice(NOISES[split]), round(rng.uniform(0.2, 0.6), 2), 0.5, junk_kind)

    out = []
    for i in range(commands):
        text = COMMANDS[split][i % len(COMMANDS[split])]
        want = intents.parse(text, ("light.set",))
        out.append(("command", draw(text, i), [want.name, want.slots]))
    for i in range(oog):
        out.append(("oog", draw(OUT_OF_GRAMMAR[split][i % len(OUT_OF_GRAMMAR[split])], i), None))
    for i in range(junk):
        kind = JUNK_KINDS[i % len(JUNK_KINDS)]
        if kind == "babble":
            syl = SYLLABLES[split]
            text = " ".join(rng.choice(syl) + rng.choice(syl) for _ in range(rng.randint(2, 5)))
        elif kind == "reversed":
            text = rng.choice(OUT_OF_GRAMMAR[split] + tuple(COMMANDS[split]))
        else:
            text = ""
        out.append(("junk", draw(text, i, kind), None))
    return out


def write(out_dir, seed, items_by_split):
    """Render every clip to OUT/SPLIT/NNNN.wav and write OUT/index.json; returns the index (a dict)."""
    out_dir = pathlib.Path(out_dir)
    index = {"seed": seed, "sample_rate": SAMPLE_RATE, "tools": ["light.set"], "clips": []}
    for split, items in items_by_split.items():
        (out_dir / split).mkdir(parents=True, exist_ok=True)
        for n, (kind, clip, want) in enumerate(items):
            path = out_dir / split / ("%04d.wav" % n)
            with wave.open(str(path), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(SAMPLE_RATE)
                w.writeframes(render(clip, seed))
            index["clips"].append(dict(clip._asdict(), file=str(path.relative_to(out_dir)), split=split, kind=kind,
                                       intent=want))
    (out_dir / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return index


def read_pcm(path):
    with wave.open(str(path), "rb") as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (SAMPLE_RATE, 1, 2):
            raise ValueError("%s: expected 16 kHz mono s16le" % path)
        return w.readframes(w.getnframes())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=40)
    p.add_argument("--out", default=str(ROOT / "build" / "speech-corpus"))
    p.add_argument("--commands", type=int, default=120, help="in-grammar command clips per split")
    p.add_argument("--oog", type=int, default=40, help="out-of-grammar sentences per split")
    p.add_argument("--junk", type=int, default=24, help="junk clips per split (babble, reversed speech, noise, tones)")
    p.add_argument("--split", choices=SPLITS, action="append", help="only this split (repeatable; default both)")
    a = p.parse_args(argv)
    if min(a.commands, a.oog, a.junk) < 0:
        p.error("counts must be >= 0")
    try:
        items = {s: plan(a.seed, s, a.commands, a.oog, a.junk) for s in (a.split or SPLITS)}
        index = write(a.out, a.seed, items)
    except audio.ToolMissing as e:
        sys.exit("corpus: %s" % e)
    n = len(index["clips"])
    print("corpus: %d clips (seed %d, %s) in %s" % (n, a.seed, ", ".join(items), a.out))


if __name__ == "__main__":
    main()
