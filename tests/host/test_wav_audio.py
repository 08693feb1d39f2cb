"""alabama.audio: the one WAV reader/writer of the host tools, on good files and on the edges."""
import io
import struct
import wave

import numpy as np
import pytest

from alabama import audio


def _wav(pcm, rate=16000, channels=1, width=2):
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(pcm)
    return out.getvalue()


PCM = struct.pack("<6h", 0, 1000, -1000, 32767, -32768, 7)


def _streaming(size):
    return audio.stream_header(22050, size) + PCM


PARSED = [(_wav(PCM), (16000, 1, PCM)), (_wav(PCM, 44100, 2), (44100, 2, PCM)), (_streaming(0), (22050, 1, PCM)),
          (_streaming(0xFFFFFFFF), (22050, 1, PCM)), (_streaming(4), (22050, 1, PCM[:4])),
          # a chunk before fmt (LIST), as some writers put one
          (b"RIFF\0\0\0\0WAVE" + b"LIST" + struct.pack("<I", 4) + b"abcd" + _wav(PCM)[12:], (16000, 1, PCM))]


@pytest.mark.parametrize("wav, want", PARSED)
def test_parse_reads_rate_channels_and_the_data_chunk(wav, want):
    assert audio.parse(wav) == want


def test_parse_streaming_header_runs_to_the_end():
    assert audio.parse(_streaming(0xFFFFFFFF)) == (22050, 1, PCM)
    assert audio.parse(_streaming(0)) == (22050, 1, PCM)


@pytest.mark.parametrize("bad, message", [(b"", "not a WAV"), (b"RIFX\0\0\0\0WAVE", "not a WAV"),
                                          (b"RIFF\0\0\0\0AVI fmt ", "not a WAV"),
                                          (_wav(PCM)[:36], "WAV without data")])
def test_parse_errors_are_typed_and_say_what(bad, message):
    with pytest.raises(audio.WavError, match=message):
        audio.parse(bad)


def test_read_write_roundtrip_path_bytes_and_file(tmp_path):
    p = audio.write(tmp_path / "a.wav", PCM, 8000)
    assert audio.read(p) == (8000, 1, 2, PCM)
    assert audio.read(p.read_bytes()) == (8000, 1, 2, PCM)
    with open(p, "rb") as f:
        assert audio.read(f) == (8000, 1, 2, PCM)
    h = audio.info(p)
    assert (h.nchannels, h.sampwidth, h.framerate, h.nframes) == (1, 2, 8000, 6)


def test_write_clips_and_truncates_samples_like_the_tools_did():
    blob = audio.write(io.BytesIO(), np.array([0.9, -1.7, 40000.0, -40000.0, 123.4]), 16000).getvalue()
    assert audio.read(blob)[3] == struct.pack("<5h", 0, -1, 32767, -32768, 123)


@pytest.mark.parametrize("bad", [b"hello, not a wav", b"RIFF\x10\0\0\0WAVEfmt ", b""])
def test_read_refuses_what_is_not_a_pcm_wav(bad):
    with pytest.raises(audio.WavError, match="not a PCM WAV file"):
        audio.read(bad)


def test_read_refuses_a_missing_file_with_oserror(tmp_path):
    with pytest.raises(OSError):
        audio.read(tmp_path / "none.wav")


def test_sample_widths():
    u8 = bytes([0, 128, 255])
    assert audio.to_s16(u8, 1) == struct.pack("<3h", -32768, 0, 32512)
    assert audio.to_s16(PCM, 2) == PCM
    with pytest.raises(audio.WavError, match="3-byte samples"):
        audio.to_s16(b"\0" * 6, 3)
    with pytest.raises(audio.WavError, match="3-byte samples"):
        audio.to_float(b"\0" * 6, 3)
    assert list(audio.to_float(u8, 1)) == [-1.0, 0.0, 127 / 128]
    assert list(audio.to_float(struct.pack("<2i", 1 << 30, -(1 << 31)), 4)) == [0.5, -1.0]


def test_stereo_becomes_mono():
    st = struct.pack("<4h", 100, 300, -32768, -32768)
    assert audio.resample(st, 16000, 2, 16000, 1) == struct.pack("<2h", 200, -32768)
    assert list(audio.to_float(st, 2, 2)) == [200 / 32768, -1.0]
    assert audio.resample(struct.pack("<2h", 5, -5), 16000, 1, 16000, 2) == struct.pack("<4h", 5, 5, -5, -5)


def test_resample_lengths_identity_and_rms():
    x = (9000 * np.sin(np.arange(4410) / 7.0)).astype("<i2").tobytes()
    assert audio.resample(x, 8000, 1, 8000, 1) == x
    assert len(audio.resample(x, 22050, 1, 48000, 2)) == 2 * 2 * round(4410 * 48000 / 22050)
    # a sine resampled keeps its level (linear interpolation of a slow sine loses < 1 %)
    assert audio.rms(audio.resample(x, 44100, 1, 16000, 1)) == pytest.approx(audio.rms(x), rel=0.01)
    assert len(audio.resample(x, 44100, 1, 16000, 1)) == 2 * round(4410 * 16000 / 44100)
    assert audio.resample(b"", 44100, 1, 16000, 1) == b""
    assert audio.rms(x) == pytest.approx(9000 / 2 ** 0.5, rel=0.01)
    assert audio.rms(b"") == 0.0
    assert audio.rms(struct.pack("<2h", 3, -4)) == pytest.approx(12.5 ** 0.5)


def test_stream_header_is_what_wave_reads():
    h = audio.info(audio.stream_header(16000, 4) + b"\1\0\2\0")
    assert (h.nchannels, h.sampwidth, h.framerate, h.nframes) == (1, 2, 16000, 2)
