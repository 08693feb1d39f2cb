# dual: cpython micropython
# Audio conversion (satellite.audio): I2S 32-bit/stereo -> s16 mono, volume/gain, the jitter ring;
# viper against pure against an independent struct-based reference, and zero allocation on micropython.
import struct

from mpsupport import IS_MICROPYTHON, mem_alloc_delta

from satellite import audio, _audio_pure as P

try:
    from satellite import _audio_viper as V
except (ImportError, SyntaxError, NameError):
    V = None

IMPLS = [P] + ([V] if V is not None else [])


def _rng(seed):
    x = [seed]

    def nxt():
        x[0] = (x[0] * 1103515245 + 12345) & 0x7FFFFFFF
        return x[0]
    return nxt


def _sat(v):
    return 32767 if v > 32767 else (-32768 if v < -32768 else v)


def _ref_mic(raw, nframes, bits, channels, sel, gain, shift):
    out = []
    ss = bits // 8
    fmtc = "<i" if bits == 32 else "<h"
    for i in range(nframes):
        base = i * ss * channels
        left = struct.unpack(fmtc, raw[base:base + ss])[0]
        if bits == 32:
            left >>= 16
        s = left
        if channels == 2:
            right = struct.unpack(fmtc, raw[base + ss:base + 2 * ss])[0]
            if bits == 32:
                right >>= 16
            if sel == 1:
                s = right
            elif sel == 2:
                s = (left + right) >> 1
        out.append(_sat((s * gain) >> shift))
    return struct.pack("<%dh" % nframes, *out)


def _ref_spk(pcm, nframes, bits, channels, gain, shift):
    out = bytearray()
    for i in range(nframes):
        s = struct.unpack("<h", pcm[2 * i:2 * i + 2])[0]
        s = _sat((s * gain) >> shift)
        for _ in range(channels):
            out += struct.pack("<i", s << 16) if bits == 32 else struct.pack("<h", s)
    return bytes(out)


def _raw(n, seed, extremes=True):
    r = _rng(seed)
    b = bytearray(n)
    for i in range(n):
        b[i] = r() & 0xFF
    if extremes and n >= 8:
        b[0:4] = b"\x00\x00\x00\x80"   # most negative 32-bit / 16-bit top half
        b[4:8] = b"\xff\xff\xff\x7f"   # most positive, bit 31 clear, 30..0 set
    return b


def test_r_hal_mic_conversion_matches_reference_all_formats():
    n = 37
    for bits in (16, 32):
        for channels in (1, 2):
            for sel in (0, 1, 2):
                for gain, shift in ((256, 8), (4057, 8), (0, 8), (16384, 14), (1, 0)):
                    raw = _raw(n * bits // 8 * channels, bits + channels * 7 + sel + gain)
                    want = _ref_mic(raw, n, bits, channels, sel, gain, shift)
                    fmt = audio.fmt_code(bits, channels, sel, shift)
                    for impl in IMPLS:
                        dst = bytearray(3 + 2 * n + 3)
                        impl.mic_to_s16(dst, 3, raw, n, fmt, gain)
                        assert bytes(dst[3:3 + 2 * n]) == want, (impl, bits, channels, sel, gain)
                        assert dst[0:3] == b"\x00\x00\x00" and dst[3 + 2 * n:] == b"\x00\x00\x00"


def test_r_hal_speaker_conversion_matches_reference_all_formats():
    n = 29
    for bits in (16, 32):
        for channels in (1, 2):
            for gain, shift in ((16384, 14), (8192, 14), (0, 14), (1000, 8)):
                pcm = _raw(5 + 2 * n, bits * channels + gain)
                want = _ref_spk(bytes(pcm[5:]), n, bits, channels, gain, shift)
                fmt = audio.fmt_code(bits, channels, 0, shift)
                for impl in IMPLS:
                    dst = bytearray(len(want) + 4)
                    impl.s16_to_spk(dst, pcm, 5, n, fmt, gain)
                    assert bytes(dst[:len(want)]) == want, (impl, bits, channels, gain)
                    assert dst[len(want):] == b"\x00\x00\x00\x00"


def test_r_hal_inmp441_32bit_left_slot_to_s16():
    # INMP441: 24-bit sample left-justified in a 32-bit slot; s16 is the top half (HARDWARE.md).
    raw = struct.pack("<3i", 0x12345600, -0x12345600, 0x7FFFFF00)
    for impl in IMPLS:
        out = bytearray(6)
        impl.mic_to_s16(out, 0, raw, 3, audio.fmt_code(32, 1, 0, 8), 256)
        assert struct.unpack("<3h", out) == (0x1234, -0x1235, 0x7FFF)


def test_r_hal_gain_and_volume_tables():
    assert audio.mic_gain_q8(0) == 256 and audio.mic_gain_q8(6) == 511 and audio.mic_gain_q8(99) == 4057
    assert audio.volume_q14(100) == 16384 and audio.volume_q14(0) == 0 and audio.volume_q14(50) == 4096
    assert audio.select_code("right") == 1 and audio.select_code("both") == 2 and audio.select_code("left") == 0


def test_r_hal_jitter_ring_wraps_and_drops_excess():
    r = audio.JitterRing(10)
    src = bytes(range(1, 17))
    assert r.write(src, 0, 6) == 6 and r.available() == 6
    out = bytearray(16)
    assert r.read(out, 0, 4) == 4 and bytes(out[:4]) == bytes([1, 2, 3, 4])
    assert r.write(src, 6, 8) == 8                 # wraps: 2 left + 8 = 10
    assert r.write(src, 14, 2) == 0 and r.dropped == 2
    assert r.read(out, 1, 16) == 10
    assert bytes(out[1:11]) == bytes([5, 6, 7, 8, 9, 10, 11, 12, 13, 14])
    assert r.available() == 0 and r.read(out, 0, 4) == 0
    assert r.write(src, 0, 3) == 2                 # whole samples only


def _steady(ring, src, dst, raw, fmt_in, fmt_out):
    i = 0
    while i < 50:
        audio.mic_to_s16(dst, 1, raw, 160, fmt_in, 300)
        ring.write(dst, 1, 320)
        ring.read(src, 0, 320)
        audio.s16_to_spk(raw, src, 0, 160, fmt_out, 9000)
        i += 1


def test_r_hal_conversion_and_ring_allocate_nothing():
    ring = audio.JitterRing(1000)
    src = bytearray(640)
    dst = bytearray(700)
    raw = bytearray(1280)
    fi = audio.fmt_code(32, 2, 2, 8)
    fo = audio.fmt_code(32, 2, 0, 14)
    _steady(ring, src, dst, raw, fi, fo)
    d = mem_alloc_delta(_steady, ring, src, dst, raw, fi, fo)
    if IS_MICROPYTHON:
        assert audio.VIPER
        assert d == 0, d
