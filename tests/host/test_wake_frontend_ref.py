"""The wake-word frontend against the reference library itself (issue 37 item 1).

pymicro-features 2.0.2 ships TFLite-Micro's microfrontend as a C extension whose stage functions are
exported symbols; ctypes calls them here. So: the generated tables (tools/wake/gen_frontend_tables.py)
equal the ones the reference's own *PopulateState builds; the stored reference features
(tools/wake/gen_frontend_vectors.py) are what pymicro-features computes now (drift); and each firmware
stage (satellite/wake/frontend.py, pure; the dual test holds viper to it) equals the reference's stage on
inputs the speech corpus never reaches: saturated FFT input, filterbank sums above 2**32, noise estimates
in every bit position, the Sqrt32 0xFFFF cap, uint32 wrap in the noise reduction.
"""
import ctypes
import pathlib
import random
import sys
from array import array
from ctypes import POINTER, Structure, c_float, c_int, c_int16, c_int32, c_size_t, c_uint16, c_uint32, c_uint64, c_void_p

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "wake"))
import gen_frontend_tables as GT  # noqa: E402
import gen_frontend_vectors as GV  # noqa: E402

from satellite.wake import _frontend_tables as T  # noqa: E402
from satellite.wake import frontend as FE  # noqa: E402

mfc = pytest.importorskip("micro_features_cpp", reason="pymicro-features is not installed: pip install -e '.[test]'")
LIB = ctypes.CDLL(mfc.__file__)


class WindowConfig(Structure):
    _fields_ = [("size_ms", c_size_t), ("step_size_ms", c_size_t)]


class WindowState(Structure):
    _fields_ = [("size", c_size_t), ("coefficients", POINTER(c_int16)), ("step", c_size_t),
                ("input", POINTER(c_int16)), ("input_used", c_size_t), ("output", POINTER(c_int16)),
                ("max_abs_output_value", c_int16)]


class FftState(Structure):
    _fields_ = [("input", POINTER(c_int16)), ("output", POINTER(c_int16)), ("fft_size", c_size_t),
                ("input_size", c_size_t), ("scratch", c_void_p), ("scratch_size", c_size_t)]


class FilterbankConfig(Structure):
    _fields_ = [("num_channels", c_int), ("upper_band_limit", c_float), ("lower_band_limit", c_float),
                ("output_scale_shift", c_int)]


class FilterbankState(Structure):
    _fields_ = [("num_channels", c_int), ("start_index", c_int), ("end_index", c_int),
                ("channel_frequency_starts", POINTER(c_int16)), ("channel_weight_starts", POINTER(c_int16)),
                ("channel_widths", POINTER(c_int16)), ("weights", POINTER(c_int16)),
                ("unweights", POINTER(c_int16)), ("work", POINTER(c_uint64))]


class NoiseReductionConfig(Structure):
    _fields_ = [("smoothing_bits", c_int), ("even_smoothing", c_float), ("odd_smoothing", c_float),
                ("min_signal_remaining", c_float)]


class NoiseReductionState(Structure):
    _fields_ = [("smoothing_bits", c_int), ("even_smoothing", c_uint16), ("odd_smoothing", c_uint16),
                ("min_signal_remaining", c_uint16), ("num_channels", c_int), ("estimate", POINTER(c_uint32))]


class PcanConfig(Structure):
    _fields_ = [("enable_pcan", c_int), ("strength", c_float), ("offset", c_float), ("gain_bits", c_int)]


class PcanState(Structure):
    _fields_ = [("enable_pcan", c_int), ("noise_estimate", POINTER(c_uint32)), ("num_channels", c_int),
                ("gain_lut", POINTER(c_int16)), ("snr_shift", c_int32)]


class LogScaleState(Structure):
    _fields_ = [("enable_log", c_int), ("scale_shift", c_int)]


LIB.LogScaleApply.restype = POINTER(c_uint16)
LIB.FilterbankSqrt.restype = POINTER(c_uint32)
LIB.PcanGainControlPopulateState.argtypes = [POINTER(PcanConfig), POINTER(PcanState), POINTER(c_uint32), c_int,
                                             c_uint16, c_int32]


def _i16(b):
    return list(array("h", b))


def reference_states():
    """The reference's states, populated by its own functions with pymicro-features' configuration."""
    w = WindowState()
    assert LIB.WindowPopulateState(ctypes.byref(WindowConfig(GT.WINDOW_MS, GT.STEP_MS)), ctypes.byref(w), GT.SAMPLE_RATE)
    fft = FftState()
    assert LIB.FftPopulateState(ctypes.byref(fft), c_size_t(w.size))
    fb = FilterbankState()
    assert LIB.FilterbankPopulateState(ctypes.byref(FilterbankConfig(GT.NUM_CHANNELS, GT.UPPER_HZ, GT.LOWER_HZ, 7)),
                                       ctypes.byref(fb), GT.SAMPLE_RATE, fft.fft_size // 2 + 1)
    nr = NoiseReductionState()
    assert LIB.NoiseReductionPopulateState(ctypes.byref(NoiseReductionConfig(
        GT.NR_SMOOTHING_BITS, GT.NR_EVEN, GT.NR_ODD, GT.NR_MIN_REMAINING)), ctypes.byref(nr), GT.NUM_CHANNELS)
    pc = PcanState()
    assert LIB.PcanGainControlPopulateState(ctypes.byref(PcanConfig(1, GT.PCAN_STRENGTH, GT.PCAN_OFFSET,
                                                                     GT.PCAN_GAIN_BITS)), ctypes.byref(pc),
                                            nr.estimate, GT.NUM_CHANNELS, GT.NR_SMOOTHING_BITS,
                                            GT.input_correction_bits())
    return {"window": w, "fft": fft, "fb": fb, "nr": nr, "pcan": pc, "log": LogScaleState(1, GT.LOG_SCALE_SHIFT)}


@pytest.fixture(scope="module")
def ref():
    return reference_states()


def test_wake_frontend_tables_module_is_generated():
    assert GT.main(["--check"]) == 0


def test_wake_frontend_tables_equal_the_references_own(ref):
    w, fb, nr, pc = ref["window"], ref["fb"], ref["nr"], ref["pcan"]
    assert _i16(T.HANN) == w.coefficients[:w.size]
    assert (T.BIN_START, T.BIN_END) == (fb.start_index, fb.end_index)
    # the reference's padded per-channel weights, as a dense channel x bin matrix, against ours unpadded
    n1 = GT.NUM_CHANNELS + 1
    theirs_w = [[0] * GT.SPECTRUM for _ in range(n1)]
    theirs_uw = [[0] * GT.SPECTRUM for _ in range(n1)]
    for c in range(n1):
        for j in range(fb.channel_widths[c]):
            k = fb.channel_weight_starts[c] + j
            theirs_w[c][fb.channel_frequency_starts[c] + j] += fb.weights[k]
            theirs_uw[c][fb.channel_frequency_starts[c] + j] += fb.unweights[k]
    edges, ws, uws = _i16(T.EDGES), _i16(T.W), _i16(T.UW)
    ours_w = [[0] * GT.SPECTRUM for _ in range(n1)]
    ours_uw = [[0] * GT.SPECTRUM for _ in range(n1)]
    for c in range(n1):
        for b in range(edges[c], edges[c + 1]):
            ours_w[c][b] = ws[b - T.BIN_START]
            ours_uw[c][b] = uws[b - T.BIN_START]
    assert ours_w == theirs_w and ours_uw == theirs_uw
    assert (T.NR_EVEN, T.NR_ODD, T.NR_MIN_REMAINING) == (nr.even_smoothing, nr.odd_smoothing,
                                                          nr.min_signal_remaining)
    assert T.PCAN_SNR_SHIFT == pc.snr_shift
    gain = _i16(T.GAIN)
    read = [i for i in range(GT.WDF_LUT_SIZE) if i < 2 or (i + 6) % 4 != 3]   # the 4th of 4 is never read
    assert [gain[i] for i in read] == [pc.gain_lut[i] for i in read]


def test_wake_frontend_reference_vectors_do_not_drift():
    assert GV.main(["--check"]) == 0
    segs = GV.decode(GV.OUT.read_bytes())
    assert sum(len(f) for _, _, f in segs) // GV.CHANNELS >= 1000


def test_wake_frontend_fft_and_energy_equal_the_references_stages(ref):
    fft, fb = ref["fft"], ref["fb"]
    rnd = random.Random(37)
    for trial in range(60):
        if trial % 3 == 0:
            x = [rnd.choice((-32768, 32767, 0, -1)) for _ in range(480)]
        else:
            amp = rnd.choice((1, 100, 16383, 32767))
            x = [max(-32768, min(32767, rnd.randint(-amp, amp))) for _ in range(480)]
        shift = rnd.choice((0, 0, 1, 4, 15))
        inp = (c_int16 * 480)(*x)
        LIB.FftCompute(ctypes.byref(fft), inp, shift)
        energy = (c_int32 * GT.SPECTRUM)()
        LIB.FilterbankConvertFftComplexToEnergy(ctypes.byref(fb), fft.output, energy)
        xa = array("h", x + [0] * 32)
        c = array("h", bytes(1024))
        e = array("i", bytes(1024))
        FE.fft(xa, shift, c, array("h", T.TW))
        FE.energy(c, array("h", T.STW), e)
        assert list(e[T.BIN_START:T.BIN_END]) == list(energy[T.BIN_START:T.BIN_END]), (trial, shift)


def test_wake_frontend_filterbank_equals_the_references_stage(ref):
    fb = ref["fb"]
    rnd = random.Random(38)
    for trial in range(60):
        top = rnd.choice((1 << 8, 1 << 20, 1 << 26, 1 << 31))
        en = [rnd.randrange(top) if rnd.random() < 0.7 else top - 1 for _ in range(GT.SPECTRUM)]
        if trial == 0:
            en = [65535 ** 2 // 4096 + 1] * GT.SPECTRUM       # sums just under 2**32: Sqrt32 and its cap
        shift = rnd.choice((0, 3, 9, 15))
        energy = (c_int32 * GT.SPECTRUM)(*en)
        LIB.FilterbankAccumulateChannels(ctypes.byref(fb), energy)
        theirs = LIB.FilterbankSqrt(ctypes.byref(fb), shift)[:GT.NUM_CHANNELS]
        sig = array("i", bytes(4 * GT.NUM_CHANNELS))
        FE.filterbank(array("i", en), array("h", T.W), array("h", T.UW), T.EDGES, sig, shift)
        assert list(sig) == theirs, (trial, shift)


def test_wake_frontend_sqrt_rounding_and_cap_equal_the_reference(ref):
    """One channel's sum placed exactly at the rounding boundaries, 0xFFFF**2 + k and around 2**32."""
    fb = ref["fb"]
    lo_chan = 0                                  # channel 0 = triangle 1's weights + triangle 0's unweights
    edges, ws, uws = _i16(T.EDGES), _i16(T.W), _i16(T.UW)
    b = next(i for i in range(edges[1], edges[2]) if ws[i - T.BIN_START] == max(ws[edges[1] - T.BIN_START:edges[2] - T.BIN_START]))
    wt = ws[b - T.BIN_START]
    for target in (0xFFFF ** 2 + 0xFFFF, 0xFFFF ** 2 + 0x10000, (1 << 32) - 1, (1 << 32) + 5, 4, 6, 2 ** 40 + 3):
        en = [0] * GT.SPECTRUM
        en[b] = -(-target // wt)                 # the sum lands in [target, target + wt)
        energy = (c_int32 * GT.SPECTRUM)(*en)
        LIB.FilterbankAccumulateChannels(ctypes.byref(fb), energy)
        theirs = LIB.FilterbankSqrt(ctypes.byref(fb), 0)[lo_chan]
        sig = array("i", bytes(4 * GT.NUM_CHANNELS))
        FE.filterbank(array("i", en), array("h", T.W), array("h", T.UW), T.EDGES, sig, 0)
        assert sig[lo_chan] == theirs, hex(target)


def test_wake_frontend_noise_pcan_log_equal_the_references_stages(ref):
    nr, pc, lg = ref["nr"], ref["pcan"], ref["log"]
    rnd = random.Random(39)
    n = GT.NUM_CHANNELS
    est = array("H", bytes(4 * n))
    for i in range(n):
        nr.estimate[i] = 0
    for trial in range(400):
        if trial % 50 == 0:                      # estimates in every bit position, then let them evolve
            for i in range(n):
                v = rnd.getrandbits(32) >> rnd.randrange(32)
                nr.estimate[i] = v
                est[2 * i], est[2 * i + 1] = v >> 16, v & 0xFFFF
        top = rnd.choice((2, 1 << 8, 1 << 16, 1 << 22, 1 << 24))
        sig = [rnd.randrange(top) for _ in range(n)]
        cs = (c_uint32 * n)(*sig)
        LIB.NoiseReductionApply(ctypes.byref(nr), cs)
        LIB.PcanGainControlApply(ctypes.byref(pc), cs)
        theirs = LIB.LogScaleApply(ctypes.byref(lg), cs, n, GT.input_correction_bits())[:n]
        out = array("H", bytes(2 * n))
        FE.post(array("i", sig), est, T.GAIN, T.LOG, out)
        assert list(out) == theirs, trial
        assert [(est[2 * i] << 16) | est[2 * i + 1] for i in range(n)] == nr.estimate[:n], trial
