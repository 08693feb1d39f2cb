"""Generate firmware/satellite/wake/_frontend_tables.py: the constant tables of the wake-word audio frontend.

Responsible for: the window, FFT twiddles, mel filterbank weights, PCAN gain LUT and log LUT that
TFLite-Micro's audio frontend (as pymicro-features 2.0.2 configures it for microWakeWord: 16 kHz, 30 ms
window, 10 ms step, 40 channels 125-7500 Hz, PCAN strength 0.95 offset 80 gain_bits 21, log scale_shift 6)
computes at start-up, computed here the same way. Not for: the per-frame arithmetic (satellite/wake/frontend.py).

Why generated, not computed on the board: the reference computes these tables in single-precision C
(cosf, log1pf, powf; float32 rounding after every operation) and the kiss_fft twiddles in double. The
firmware's floats differ between ports (the esp32 port and our 32-bit build: float32 with MicroPython's
own libm; the 64-bit unix port: double), so computing them on the board would be a different table on
each. Generated as bytes constants they are also free on a frozen image (they stay in flash) and a
one-off ~3.5 KB on the .mpy set. Here the float32 arithmetic is numpy's float32 and the transcendental
functions are the C library's own cosf/log1pf/powf (ctypes), the calls the reference makes;
tests/host/test_wake_frontend_ref.py checks every table against the reference library's own
*PopulateState functions.

    .venv/bin/python tools/wake/gen_frontend_tables.py          # rewrite the module
    .venv/bin/python tools/wake/gen_frontend_tables.py --check  # exit 1 when the committed module differs
"""
import argparse
import ctypes
import ctypes.util
import math
import pathlib
import struct
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "firmware" / "satellite" / "wake" / "_frontend_tables.py"

# pymicro-features 2.0.2 src/micro_features.cpp init_cfg (the microWakeWord configuration)
SAMPLE_RATE = 16000
WINDOW_MS, STEP_MS = 30, 10
NUM_CHANNELS = 40
LOWER_HZ, UPPER_HZ = 125.0, 7500.0
NR_SMOOTHING_BITS = 10
NR_EVEN, NR_ODD, NR_MIN_REMAINING = 0.025, 0.06, 0.05
PCAN_STRENGTH, PCAN_OFFSET, PCAN_GAIN_BITS = 0.95, 80.0, 21
LOG_SCALE_SHIFT = 6
# TFLite-Micro microfrontend constants (window.h, filterbank.h, noise_reduction.h, pcan_gain_control*.h)
WINDOW_BITS = 12
FILTERBANK_BITS = 12
NOISE_REDUCTION_BITS = 14
PCAN_SNR_BITS = 12
WDF_BITS = 32                     # kWideDynamicFunctionBits
WDF_LUT_SIZE = 4 * WDF_BITS - 3

WINDOW = WINDOW_MS * SAMPLE_RATE // 1000          # 480
STEP = STEP_MS * SAMPLE_RATE // 1000              # 160
FFT_SIZE = 1 << (WINDOW - 1).bit_length()         # 512
SPECTRUM = FFT_SIZE // 2 + 1                      # 257
NCFFT = FFT_SIZE // 2                             # the complex FFT inside the real one: 256 = 4**4

# log_lut.c: kLogLut, the 129 (+1 pad, never read) segment corrections of log2's fractional part (kLogSegments 128)
LOG_LUT = (
    0, 224, 442, 654, 861, 1063, 1259, 1450, 1636, 1817, 1992, 2163, 2329, 2490, 2646, 2797, 2944, 3087,
    3224, 3358, 3487, 3611, 3732, 3848, 3960, 4068, 4172, 4272, 4368, 4460, 4549, 4633, 4714, 4791, 4864,
    4934, 5001, 5063, 5123, 5178, 5231, 5280, 5326, 5368, 5408, 5444, 5477, 5507, 5533, 5557, 5578, 5595,
    5610, 5622, 5631, 5637, 5640, 5641, 5638, 5633, 5626, 5615, 5602, 5586, 5568, 5547, 5524, 5498, 5470,
    5439, 5406, 5370, 5332, 5291, 5249, 5203, 5156, 5106, 5054, 5000, 4944, 4885, 4825, 4762, 4697, 4630,
    4561, 4490, 4416, 4341, 4264, 4184, 4103, 4020, 3935, 3848, 3759, 3668, 3575, 3481, 3384, 3286, 3186,
    3084, 2981, 2875, 2768, 2659, 2549, 2437, 2323, 2207, 2090, 1971, 1851, 1729, 1605, 1480, 1353, 1224,
    1094, 963, 830, 695, 559, 421, 282, 142, 0, 0)

F = np.float32
_libm = ctypes.CDLL(ctypes.util.find_library("m"))
for _name, _n in (("cosf", 1), ("log1pf", 1), ("powf", 2)):
    getattr(_libm, _name).restype = ctypes.c_float
    getattr(_libm, _name).argtypes = [ctypes.c_float] * _n


def cosf(x):
    return F(_libm.cosf(float(x)))


def log1pf(x):
    return F(_libm.log1pf(float(x)))


def powf(x, y):
    return F(_libm.powf(float(x), float(y)))


def window():
    """window_util.c WindowPopulateState: a periodic Hann window in q12, float32 throughout."""
    arg = F(math.pi) * F(2.0) / F(WINDOW)
    out = []
    for i in range(WINDOW):
        v = F(0.5) - F(0.5) * cosf(arg * (F(i) + F(0.5)))
        out.append(int(np.floor(v * F(1 << WINDOW_BITS) + F(0.5))))
    return out


def _q15(phase):
    """_kiss_fft_guts.h KISS_FFT_COS/SIN for FIXED_POINT 16: floor(.5 + 32767*cos(phase)), in double."""
    return int(math.floor(0.5 + 32767 * math.cos(phase))), int(math.floor(0.5 + 32767 * math.sin(phase)))


def twiddles():
    """kiss_fft_alloc (forward) for the 256-point complex FFT: (r, i) per index."""
    pi = 3.141592653589793238462643383279502884197169399375105820974944
    return [_q15(-2 * pi * i / NCFFT) for i in range(NCFFT)]


def super_twiddles():
    """kiss_fftr_alloc (forward): the real FFT's split twiddles, NCFFT/2 of them."""
    return [_q15(-3.14159265358979323846264338327 * ((i + 1) / NCFFT + .5)) for i in range(NCFFT // 2)]


def _mel(freq):
    return F(1127.0) * log1pf(F(freq) / F(700.0))


def filterbank():
    """filterbank_util.c FilterbankPopulateState, kept unpadded: (start, end, edges, weights, unweights).

    Every spectrum bin in [start, end) belongs to one of the NUM_CHANNELS + 1 triangles; edges[c] is the
    first bin of triangle c (edges[NUM_CHANNELS + 1] = end); weights/unweights are per bin from start.
    The reference pads each channel to 4-aligned blocks of zero weights: zeros add nothing, so the
    padding is left out (the sums are the same)."""
    n1 = NUM_CHANNELS + 1
    mel_low = _mel(LOWER_HZ)
    mel_hi = _mel(UPPER_HZ)
    spacing = (mel_hi - mel_low) / F(n1)
    centers = [mel_low + spacing * F(i + 1) for i in range(n1)]
    hz_per_sbin = F(0.5) * F(SAMPLE_RATE) / (F(SPECTRUM) - F(1))
    start = int(F(1.5) + F(LOWER_HZ) / hz_per_sbin)
    edges, weights, unweights = [], [], []
    freq_start = start
    for chan in range(n1):
        fi = freq_start
        while _mel(F(fi) * hz_per_sbin) <= centers[chan]:
            fi += 1
        edges.append(freq_start)
        denom = mel_low if chan == 0 else centers[chan - 1]
        for f in range(freq_start, fi):
            w = (centers[chan] - _mel(F(f) * hz_per_sbin)) / (centers[chan] - denom)
            weights.append(int(np.floor(w * F(1 << FILTERBANK_BITS) + F(0.5))))
            unweights.append(int(np.floor((F(1.0) - w) * F(1 << FILTERBANK_BITS) + F(0.5))))
        freq_start = fi
    end = freq_start
    edges.append(end)
    assert end < SPECTRUM
    return start, end, edges, weights, unweights


def input_correction_bits():
    """frontend_util.c: MostSignificantBit32(fft_size) - 1 - kFilterbankBits / 2 (= 3)."""
    return FFT_SIZE.bit_length() - 1 - FILTERBANK_BITS // 2


def _gain(input_bits, x):
    """pcan_gain_control_util.c PcanGainLookupFunction."""
    xf = F(x) / F(1 << input_bits)
    g = F(1 << PCAN_GAIN_BITS) * powf(xf + F(PCAN_OFFSET), -F(PCAN_STRENGTH))
    if g > F(0x7FFF):
        return 0x7FFF
    return int(g + F(0.5))          # C's (int16_t) cast truncates toward zero


def gain_lut():
    """pcan_gain_control_util.c PcanGainControlPopulateState: 125 entries; the 4th of every interval's
    four is never read (left uninitialised by the reference, 0 here)."""
    input_bits = NR_SMOOTHING_BITS - input_correction_bits()
    lut = [0] * WDF_LUT_SIZE
    lut[0] = _gain(input_bits, 0)
    lut[1] = _gain(input_bits, 1)
    for interval in range(2, WDF_BITS + 1):
        x0 = 1 << (interval - 1)
        x1 = x0 + (x0 >> 1)
        x2 = x0 + (x0 - 1) if interval == WDF_BITS else 2 * x0
        y0, y1, y2 = _gain(input_bits, x0), _gain(input_bits, x1), _gain(input_bits, x2)
        a1 = 4 * (y1 - y0) - (y2 - y0)
        a2 = (y2 - y0) - a1
        b = 4 * interval - 6
        lut[b], lut[b + 1], lut[b + 2] = y0, a1, a2
    return lut


def check_gain_bounds(lut):
    """What lets the firmware skip the reference's int32/int16 wrap emulation in WideDynamicFunction: for
    every interval and 10-bit fraction, the interpolation stays inside int32 and the gain in [0, 32767]."""
    for n in range(2, WDF_BITS + 1):
        b = 4 * n - 6
        for f in range(1024):
            r = ((lut[b + 2] * f) >> 5) + lut[b + 1] * 32
            assert -(1 << 31) <= r * f < 1 << 31, (n, f)
            g = ((r * f + 16384) >> 15) + lut[b]
            assert 0 <= g <= 0x7FFF, (n, f, g)
    assert all(0 <= v <= 0x7FFF for v in lut[:2])


def nr_params():
    """noise_reduction_util.c: the q14 smoothing coefficients (float32 products truncated to uint16)."""
    q = F(1 << NOISE_REDUCTION_BITS)
    return int(F(NR_EVEN) * q), int(F(NR_ODD) * q), int(F(NR_MIN_REMAINING) * q)


def _h(vals):
    return struct.pack("<%dh" % len(vals), *vals)


def _bytes_lines(name, data):
    out = ["%s = (" % name]
    for i in range(0, len(data), 40):
        out.append("    %r" % data[i:i + 40])
    out.append(")")
    return out


def generate():
    start, end, edges, weights, unweights = filterbank()
    even, odd, min_rem = nr_params()
    tw = twiddles()
    stw = super_twiddles()
    check_gain_bounds(gain_lut())
    assert min(weights + unweights) >= 0 and max(weights + unweights) <= 1 << FILTERBANK_BITS
    for w in range(len(edges) - 2):       # firmware bounds (frontend.py filterbank): the limbs stay below 2**31
        up = sum(weights[edges[w + 1] - start:edges[w + 2] - start])
        down = sum(unweights[edges[w] - start:edges[w + 1] - start])
        assert up < 1 << 15 and down < 1 << 15 and up + down < 65000
    lines = [
        "# GENERATED by tools/wake/gen_frontend_tables.py: do not edit (run it; tests/host/test_wake_frontend_ref.py",
        "# checks it is current and equal to TFLite-Micro's own tables as pymicro-features 2.0.2 builds them).",
        '"""Constant tables of the wake-word audio frontend (satellite/wake/frontend.py); not for code."""',
        "from micropython import const",
        "",
        "WINDOW = const(%d)        # samples per window (30 ms)" % WINDOW,
        "STEP = const(%d)          # samples per step (10 ms)" % STEP,
        "CHANNELS = const(%d)" % NUM_CHANNELS,
        "BIN_START = const(%d)       # first spectrum bin of the filterbank" % start,
        "BIN_END = const(%d)        # one past its last" % end,
        "NR_SMOOTHING_BITS = const(%d)" % NR_SMOOTHING_BITS,
        "NR_EVEN = const(%d)       # q14 noise-estimate smoothing, even channels" % even,
        "NR_ODD = const(%d)        # odd channels" % odd,
        "NR_MIN_REMAINING = const(%d)" % min_rem,
        "PCAN_SNR_SHIFT = const(%d)" % (PCAN_GAIN_BITS - input_correction_bits() - PCAN_SNR_BITS),
        "LOG_CORRECTION_BITS = const(%d)" % input_correction_bits(),
        "LOG_SCALE_SHIFT = const(%d)" % LOG_SCALE_SHIFT,
        "",
        "# int16 LE tables",
        "# HANN: the q12 window, WINDOW entries; TW: the 256-point FFT's q15 twiddles, (r, i) pairs;",
        "# STW: the real FFT's 128 split twiddles, (r, i) pairs; EDGES: first bin of each of the CHANNELS + 1",
        "# triangles, then BIN_END; W / UW: q12 weight and 1 - weight per bin from BIN_START;",
        "# GAIN: PCAN's wide-dynamic-function LUT (125 entries); LOG: log2's 129 segment corrections + 1 pad (uint16).",
    ]
    lines += _bytes_lines("HANN", _h(window()))
    lines += _bytes_lines("TW", _h([v for p in tw for v in p]))
    lines += _bytes_lines("STW", _h([v for p in stw for v in p]))
    lines += _bytes_lines("EDGES", _h(edges))
    lines += _bytes_lines("W", _h(weights))
    lines += _bytes_lines("UW", _h(unweights))
    lines += _bytes_lines("GAIN", _h(gain_lut()))
    lines += _bytes_lines("LOG", struct.pack("<%dH" % len(LOG_LUT), *LOG_LUT))
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed module differs")
    a = ap.parse_args(argv)
    text = generate()
    if a.check:
        if not OUT.exists() or OUT.read_text() != text:
            print("%s is out of date: run tools/wake/gen_frontend_tables.py" % OUT.relative_to(ROOT))
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
