"""WAV files and s16le PCM for the host tools: read, write, convert, resample, measure.

The one place the demo, the web board, the HIL bench and report, sound provisioning, the soak tool and the
tests turn audio into bytes and back. Files go through the stdlib ``wave``; ``parse`` is the lenient reader
for WAVs held in memory with a streaming header (espeak-ng --stdout writes sizes it cannot know yet).
Samples are s16le unless a name says otherwise. No I/O beyond the file named, no audio devices.
Import it lazily from CLI modules: it imports numpy (~0.3 s).
"""
import io
import math
import struct
import wave

import numpy as np

from .errors import AlabamaError

#: The data size a streaming header carries while the file is still being written.
STREAMING = 0xFFFFFFFF - 36


class WavError(AlabamaError, ValueError):
    """Not a WAV this module can use; the message says what is wrong."""


def parse(wav):
    """(rate, channels, s16le data) of a PCM WAV held in memory; a data size of 0 or 0xFFFFFFFF means
    "to the end" (a streaming header). Assumes 16-bit samples, as espeak writes."""
    if wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
        raise WavError("not a WAV")
    pos, rate, channels = 12, 22050, 1
    while pos + 8 <= len(wav):
        cid, size = wav[pos:pos + 4], int.from_bytes(wav[pos + 4:pos + 8], "little")
        if cid == b"fmt ":
            channels = int.from_bytes(wav[pos + 10:pos + 12], "little")
            rate = int.from_bytes(wav[pos + 12:pos + 16], "little")
        if cid == b"data":
            end = len(wav) if size in (0, 0xFFFFFFFF) else pos + 8 + size
            return rate, channels, wav[pos + 8:end]
        pos += 8 + size
    raise WavError("WAV without data")


def _open(src):
    """A wave reader on a path, a file object or the bytes of a file; WavError when it is not a PCM WAV."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        src = io.BytesIO(src)
    try:
        return wave.open(src if hasattr(src, "read") else str(src), "rb")
    except (wave.Error, EOFError, struct.error) as e:
        raise WavError("not a PCM WAV file (%s)" % (str(e) or "it ends early")) from None


def info(src):
    """The header (nchannels, sampwidth, framerate, nframes, ...) of a WAV; OSError when it cannot be opened."""
    with _open(src) as w:
        return w.getparams()


def read(src):
    """(rate, channels, sample width in bytes, frames) of a PCM WAV: a path, a file object or its bytes."""
    with _open(src) as w:
        try:
            return w.getframerate(), w.getnchannels(), w.getsampwidth(), w.readframes(w.getnframes())
        except (wave.Error, EOFError, struct.error) as e:
            raise WavError("not a PCM WAV file (%s)" % e) from None


def to_s16(pcm, width):
    """8-bit unsigned or 16-bit signed samples as s16le bytes."""
    if width == 1:
        return ((np.frombuffer(pcm, np.uint8).astype("<i2") - 128) << 8).astype("<i2").tobytes()
    if width != 2:
        raise WavError("%d-byte samples: only 8- and 16-bit PCM convert to s16" % width)
    return bytes(pcm)


def to_float(pcm, width, channels=1):
    """Mono float samples in [-1, 1] from 8-bit unsigned, 16- or 32-bit signed PCM (channels averaged)."""
    dtype = {1: np.uint8, 2: "<i2", 4: "<i4"}.get(width)
    if dtype is None:
        raise WavError("%d-byte samples: only 8-, 16- and 32-bit PCM are read" % width)
    x = np.frombuffer(pcm[: len(pcm) - len(pcm) % (width * channels)], dtype=dtype).astype(np.float64)
    if width == 1:
        x = (x - 128.0) / 128.0
    else:
        x /= float(1 << (8 * width - 1))
    if channels > 1:
        x = x.reshape(-1, channels).mean(axis=1)
    return x


def write(dest, pcm, rate, channels=1):
    """A 16-bit PCM WAV at ``dest`` (a path or a file object). ``pcm`` is s16le bytes, or samples (any
    numbers: clipped to s16, then truncated toward zero). Returns dest."""
    if not isinstance(pcm, (bytes, bytearray, memoryview)):
        pcm = np.clip(np.asarray(pcm), -32768, 32767).astype("<i2").tobytes()
    with wave.open(dest if hasattr(dest, "write") else str(dest), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return dest


def stream_header(rate, nbytes=STREAMING):
    """A 16-bit mono PCM WAV header; the default size marks a stream still being written."""
    return (b"RIFF" + struct.pack("<I", min(36 + nbytes, 0xFFFFFFFF)) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, rate, 2 * rate, 2, 16) + b"data" + struct.pack("<I", nbytes))


def resample(pcm, src_rate, src_channels, dst_rate, dst_channels):
    """s16le PCM converted exactly to (dst_rate, dst_channels): linear interpolation, channel mix/dup."""
    x = np.frombuffer(pcm, dtype="<i2")
    if src_channels > 1:
        x = x[: len(x) - len(x) % src_channels].reshape(-1, src_channels).astype(np.float64).mean(axis=1)
    else:
        x = x.astype(np.float64)
    n_in = len(x)
    if n_in and src_rate != dst_rate:
        n_out = int(round(n_in * dst_rate / src_rate))
        pos = np.arange(n_out) * (src_rate / dst_rate)
        x = np.interp(pos, np.arange(n_in), x)
    y = np.clip(np.round(x), -32768, 32767).astype("<i2")
    if dst_channels > 1:
        y = np.repeat(y, dst_channels)
    return y.tobytes()


#: The rate of the board's microphone WAV (the simulated HAL reads 16 kHz mono s16le).
MIC_RATE = 16000


def to_mic_wav(src, dest, rate=MIC_RATE):
    """Any PCM WAV (8/16-bit, mono/stereo, 4-192 kHz; a path, a file object or its bytes) written at ``dest`` as
    the microphone's 16 kHz mono s16 WAV. Returns its duration in seconds. Raises WavError saying what is
    wrong, OSError when a path cannot be read. The one converter of the web board's chosen WAV, `board sim
    --mic` and `board mic`."""
    rate_in, ch, width, pcm = read(src)
    if width not in (1, 2):
        raise WavError("the WAV has %d-byte samples: the mic takes 8- or 16-bit PCM" % width)
    if not 1 <= ch <= 2 or not 4000 <= rate_in <= 192000:
        raise WavError("the WAV is %d channels at %d Hz: the mic takes mono or stereo, 4-192 kHz" % (ch, rate_in))
    out = resample(to_s16(pcm, width), rate_in, ch, rate, 1)
    write(dest, out, rate)
    return len(out) / (2.0 * rate)


def rms(pcm):
    """RMS of s16le samples: one exact float64 dot product (runs per chunk: no temporaries beyond one)."""
    n = len(pcm) // 2
    if not n:
        return 0.0
    x = np.frombuffer(pcm, dtype="<i2", count=n).astype(np.float64)
    return math.sqrt(x.dot(x) / n)
