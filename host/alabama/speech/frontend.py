"""The recogniser's audio front end: WebRTC noise suppression over a whole utterance (``webrtc-noise-gain``).

Responsible for cleaning 16 kHz s16le mono PCM before the decoders see it, with WebRTC's audio processing (the
noise suppressor Home Assistant's Assist satellites run), through the ``webrtc-noise-gain`` package. Not for
decoding, gain control or voice activity: the decoders normalise gain themselves (batch CMN) and the recogniser
runs pocketsphinx's VAD on this module's output.

Measured on the tuning split only (seed 40, grammar decode + the recogniser's gate, docs/speech.md): level 2 took
commands right at 10 dB from 15 to 23 of 30 and at 5 dB from 8 to 17, but lost 3 of 60 at clean/20 dB (it eats the
onset of a clean "stop": "dr") and squashed a 48 dB quieter clean command to nothing; levels 3 and 4 found no more
commands and took 5-7 more out-of-grammar sentences; 1 helped at 10 dB only; WebRTC's AGC (auto gain 6 dBFS) on
top of level 2 lost 10 commands. So it runs only on noisy utterances: ``clean()`` estimates the utterance's SNR
(90th / 10th percentile of its 20 ms frame levels) and suppresses below NS_BELOW_DB: tuning split, grammar gate,
commands right 68 (never) -> 85 (below 10..18 dB: the same) -> 82 (always), out-of-grammar taken 2 -> 3 -> 5.
"""
import math

import numpy as np

from . import SpeechUnavailable

NOISE_SUPPRESSION = 2            # WebRTC NS level (0 off .. 4 strongest); tuning split, see above
NS_BELOW_DB = 15.0               # suppress only when the estimated SNR is under this (tuning split: 10..18 the same)
LEVEL_FRAME = 320                # samples (20 ms) per level measurement for the SNR estimate
CHUNK_BYTES = 320                # the processor takes exactly 10 ms of 16 kHz s16le mono
INSTALL_HINT = ("speech needs webrtc-noise-gain: pip install webrtc-noise-gain "
                "(or pip install 'alabama-satellite[speech]'); falling back to the echo brain")


def processor(level=NOISE_SUPPRESSION):
    """A fresh WebRTC processor (noise suppression at ``level``, no AGC); SpeechUnavailable when not installed."""
    try:
        import webrtc_noise_gain
    except ImportError as e:
        raise SpeechUnavailable(INSTALL_HINT) from e
    return webrtc_noise_gain.AudioProcessor(0, level)


def suppress(pcm, level=NOISE_SUPPRESSION):
    """``pcm`` (even length) through a fresh processor, 10 ms at a time: same length out; a last partial 10 ms
    is passed through as it is. A fresh processor per utterance: the result depends on this utterance alone."""
    if level <= 0:
        return bytes(pcm)
    ap = processor(level)
    whole = len(pcm) - len(pcm) % CHUNK_BYTES
    out = bytearray()
    view = memoryview(pcm)
    for i in range(0, whole, CHUNK_BYTES):
        out += ap.Process10ms(bytes(view[i:i + CHUNK_BYTES])).audio
    out += view[whole:]
    return bytes(out)


def snr_db(pcm):
    """A rough SNR of an utterance: 20 log10 of the 90th over the 10th percentile of its 20 ms frame rms (levels
    under 1 LSB count as 1: digital silence is not infinitely clean). 0.0 for under 10 frames."""
    x = np.frombuffer(bytes(pcm[:len(pcm) & ~1]), "<i2").astype(np.float64)
    n = len(x) // LEVEL_FRAME
    if n < 10:
        return 0.0
    rms = np.sqrt(np.mean(x[:n * LEVEL_FRAME].reshape(n, LEVEL_FRAME) ** 2, axis=1))
    return 20.0 * math.log10(max(float(np.percentile(rms, 90)), 1.0) / max(float(np.percentile(rms, 10)), 1.0))


def clean(pcm):
    """The decoders' input before the floor: ``suppress(pcm)`` when snr_db(pcm) < NS_BELOW_DB, else pcm as it is."""
    return suppress(pcm) if snr_db(pcm) < NS_BELOW_DB else bytes(pcm)
