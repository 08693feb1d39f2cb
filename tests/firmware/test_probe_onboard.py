# dual: cpython micropython
# The board probe's on-board module (firmware/probe/alabama_probe.py): the microphone statistics on known
# recordings (a tone of known amplitude, all-zero, stuck and clipped frames) and the stages' limits. The set
# leaving flash once loaded is tests/host/test_board_probe.py's (onboard/probe_set.py on the unix port).
import sys

_here = __file__.rpartition("/")[0] or "."
_probe_dir = _here + "/../../firmware/probe"
if _probe_dir not in sys.path:
    sys.path.insert(0, _probe_dir)

import alabama_probe as P
from mpsupport import raises

N = 320       # samples in a 20 ms frame at 16 kHz (the module's _NFRAMES)


def _frames(*frames):
    """A recording: each frame a function i -> sample (s16), N samples each."""
    b = bytearray(2 * N * len(frames))
    k = 0
    for f in frames:
        for i in range(N):
            v = f(i)
            b[k] = v & 0xFF
            b[k + 1] = (v >> 8) & 0xFF
            k += 2
    return b


def test_the_tone_table_is_a_cosine_in_q10():
    import math
    for k in range(16):
        assert abs(P._COS[k] - 1024 * math.cos(2 * math.pi * k / 16)) < 0.6


def test_a_played_tone_is_measured_at_its_amplitude():
    t = P._tone()
    rec = t + t + t                             # three frames of the probe's own 1 kHz tone
    s = P.stats(rec, 1)                          # the first frame left out, as the mic's start-up is
    assert s["frames"] == 2 and s["samples"] == 2 * N
    assert abs(s["tone_amp"] - P.TONE_AMP) < P.TONE_AMP * 0.01
    assert abs(s["rms"] - P.TONE_AMP / 2 ** 0.5) < P.TONE_AMP * 0.01
    assert abs(s["dc"]) < 1
    assert s["zero_frames"] == 0 and s["stuck_frames"] == 0 and s["clipped"] == 0


def test_zero_stuck_and_clipped_frames_are_counted_apart():
    rec = _frames(lambda i: 0, lambda i: -5, lambda i: 32767 if i & 1 else -32768, lambda i: 100)
    s = P.stats(rec, 0)
    assert s["frames"] == 4
    assert s["zero_frames"] == 1                # all zeros: not also "stuck"
    assert s["stuck_frames"] == 2               # -5 repeated and 100 repeated
    assert s["clipped"] == N                    # every sample of the third frame is at full scale
    assert abs(s["dc"] - (-5 * N + (-N // 2) + 100 * N) / (4 * N)) < 1e-3
    # a constant has no 1 kHz component; full-scale alternation (8 kHz) has none either
    assert s["tone_amp"] < 1


def test_a_quiet_room_has_no_tone():
    x = [1]

    def noise(i):
        x[0] = (x[0] * 1103515245 + 12345) & 0x7FFFFFFF
        return ((x[0] >> 16) & 0xFF) - 128
    s = P.stats(_frames(noise, noise, noise, noise), 0)
    assert 50 < s["rms"] < 100                  # uniform in -128..127: rms ~74
    assert s["tone_amp"] < 10


def test_stage_limits_are_checked_before_anything_is_allocated():
    # the host asks for at most _MAX_SECONDS of audio; more is refused, not allocated
    raises(ValueError, P.audio, 10 ** 9)
    raises(ValueError, P.audio, 100)
    raises(ValueError, P.ggwave, 0)
    raises(ValueError, P.ggwave, 11)


def test_an_esp32_module_without_idf_heap_info_gives_no_regions():
    # the virtual board may put a simulated esp32 (flash partitions only) on the path: no heap figures from it
    class _NoHeap:
        HEAP_DATA = 4
    old = sys.modules.get("esp32")
    sys.modules["esp32"] = _NoHeap()
    try:
        assert P.idf_heap() is None and P.internal_free(P.idf_heap()) is None
    finally:
        if old is None:
            del sys.modules["esp32"]
        else:
            sys.modules["esp32"] = old
    assert P.internal_free([[300000, 200000, 1, 1], [8 * 1024 * 1024, 8000000, 1, 1]]) == 200000


def test_a_stage_that_runs_out_of_heap_reports_it_and_the_probe_goes_on():
    # the no-PSRAM devkit (130k): the ggwave receiver's 16 KB did not fit after the firmware (measured on the
    # frozen 32-bit build at that heap); the stage's figure is None with the reason, not the end of the probe
    out = []
    emit = P.emit
    P.emit = out.append
    try:
        def hungry(n):
            raise MemoryError("memory allocation failed, allocating %d bytes" % n)

        def fine(n):
            P.emit({"ggwave_us": n})
        P.guarded("ggwave", hungry, 16384)
        P.guarded("ggwave", fine, 7)
        raises(ValueError, P.guarded, "ggwave", P.ggwave, 0)      # any other error still ends the stage
    finally:
        P.emit = emit
    assert out[0]["ggwave"] is None and "out of heap" in out[0]["ggwave_note"] and "16384" in out[0]["ggwave_note"]
    assert out[1] == {"ggwave_us": 7} and len(out) == 2
