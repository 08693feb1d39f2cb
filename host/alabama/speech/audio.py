"""Test and bench audio for the speech layer: espeak-ng utterances at 16 kHz, and broken audio paths.

Responsible for synthesising known utterances (espeak-ng, resampled by sox without dither so the
bytes are reproducible), for re-framing PCM the way a board sends it (20 ms StreamChunks), and for
the mutants the intelligibility check must catch (a byte dropped per frame, swapped bytes, an 8-bit
shift). Must not judge recognition: callers compare transcripts.
"""
import shutil
import subprocess

import numpy as np

from . import FRAME_BYTES, SAMPLE_RATE

VOICE = "en-us+f2"        # the espeak-ng voice pocketsphinx's en-us model hears best (measured)
SPEED = 150               # words per minute


#: Speech without the wake phrase (tests/host/speech/test_spotter.py and bench_spotter.py --quality: docs/speech.md's
#: 49 s corpus is this read twice in en-us at 160 wpm and once in en-us+f2).
OTHER_SPEECH = ("The weather today is cloudy with a chance of rain in the afternoon. Please buy milk, bread and "
                "apples at the market on your way home. The meeting starts at nine and ends at noon. "
                "My sister lives in a small town near the river, and she works at the library. ")


class ToolMissing(RuntimeError):
    """espeak-ng or sox is not installed; the message says which package to install."""


def _need(tool, package):
    path = shutil.which(tool)
    if not path:
        raise ToolMissing("%s not found: apt-get install %s" % (tool, package))
    return path


def espeak_wav(text, voice=VOICE, speed=SPEED, timeout=None, exe=None, pitch=None):
    """espeak-ng's WAV bytes (22050 Hz mono s16le) for text ("--": a text starting with "-" is spoken);
    pitch: espeak-ng's -p, 0..99 (None: the voice's own)."""
    cmd = [exe or _need("espeak-ng", "espeak-ng"), "-v", voice, "-s", str(speed)]
    cmd += ["-p", str(pitch)] if pitch is not None else []
    return subprocess.run(cmd + ["--stdout", "--", text], capture_output=True, check=True, timeout=timeout).stdout


def synth(text, voice=VOICE, speed=SPEED, pad=(0.3, 0.3), pitch=None):
    """16 kHz s16le mono PCM of text, with `pad` seconds of silence before/after (sox, no dither)."""
    return subprocess.run([_need("sox", "sox"), "-D", "-t", "wav", "-", "-r", str(SAMPLE_RATE), "-c", "1",
                           "-b", "16", "-e", "signed-integer", "-t", "raw", "-", "pad", str(pad[0]), str(pad[1])],
                          input=espeak_wav(text, voice, speed, pitch=pitch), capture_output=True, check=True).stdout


def silence(seconds):
    return bytes(int(seconds * SAMPLE_RATE) * 2)


def noise(seconds, rms=600, seed=1):
    """Gaussian noise, reproducible."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, rms, int(seconds * SAMPLE_RATE))
    return np.clip(x, -32768, 32767).astype("<i2").tobytes()


def frames(pcm, size=FRAME_BYTES):
    """The PCM cut as a board sends it: `size`-byte chunks (the last one may be short)."""
    return [pcm[i:i + size] for i in range(0, len(pcm), size)]


def drop_byte_per_frame(pcm, size=FRAME_BYTES):
    """Mutant: the last byte of every frame lost (every later sample's bytes then straddle)."""
    return b"".join(f[:-1] for f in frames(pcm, size))


def swap_bytes(pcm):
    """Mutant: wrong endianness (or the 16-bit halves of a 32-bit slot swapped)."""
    return np.frombuffer(pcm, "<i2").byteswap().tobytes()


def shift8(pcm):
    """Mutant: a 32->16-bit conversion off by 8 bits (samples 256x quieter)."""
    return (np.frombuffer(pcm, "<i2").astype(np.int32) >> 8).astype("<i2").tobytes()


def shift8_left(pcm):
    """Mutant: the sample taken 8 bits too low from a 32-bit slot (shifted left by 8, its high byte lost: wraps),
    as the HIL's mic_shift8."""
    return (np.frombuffer(pcm, "<i2").astype(np.int32) << 8).astype("<i2").tobytes()


#: Broken paths the transcript comparison must catch. ``shift8`` (256x quieter) is not one since issue 40: the
#: recogniser normalises each utterance's own cepstral mean, so a pure gain change is heard the same (a level
#: check, not a transcript, catches it).
MUTANTS = {"drop_byte": drop_byte_per_frame, "swap_bytes": swap_bytes, "shift8_left": shift8_left}
