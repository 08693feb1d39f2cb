# dual: cpython micropython
# The board wakes by itself (issue 37 item 3): satellite.device's wake loop (capture_mode wake) and the runtime's
# wake engine, with a test double in place of the detector (it fires on the chunks a test names) so that each rule
# of the glue is checked on its own: a detection opens CaptureOpen{AUDIO, WAKEWORD, LIVE} and the LED shows it at
# once, the capture owns the mic, the mic is off while the core thinks, a full-duplex board hears the word over its
# reply (a barge-in, spec 4.3) and a half-duplex one does not, the setting switches the mode and the model, a board
# whose engine cannot run says so in device.info and still captures by button, and 0 B per idle chunk.
# The real frontend + model on spoken audio: tests/host/test_wake_detect.py; end to end: test_wake_e2e.py.
import rt_harness as H
from mpsupport import mem_alloc_delta, raises

from satellite import device as D
from satellite.hal import PRESS, RELEASE
from satellite.wire import alabama_v1 as pb
from satellite import wake as WK
from satellite.wake import detector as W


class FakeDetector:
    """Stands in for satellite.wake.detector.Detector: feed() is True on the chunks numbered in `fire`."""

    def __init__(self, name="okay_nabu"):
        self.name = name
        self.word = name
        self.fed = 0
        self.fire = []
        self.resets = 0

    def reset(self):
        self.resets += 1

    def feed(self, buf, pos, n):
        self.fed += 1
        return self.fed in self.fire


class LedHal(H.FakeHal):
    def __init__(self):
        H.FakeHal.__init__(self)
        self.leds = []
        self.mic_on = False

    def led(self, phase, level):
        self.leds.append(phase)

    def mic_open(self, rate, n):
        H.FakeHal.mic_open(self, rate, n)
        self.mic_on = True

    def mic_close(self):
        self.mic_on = False


def _board(**wake):
    b = dict(H.BOARD)
    b["settings"] = {"capture_mode": "wake"}
    b["wake"] = {"models": ["okay_nabu", "hey_jarvis"]}      # as deploy writes /board.json
    b["wake"].update(wake)
    return b


def _deployed(words):
    """The models the runtime finds on the flash at boot (satellite.wake.deployed), as a test names them."""
    saved = WK.deployed
    WK.deployed = lambda d=None: list(words)
    return saved


def _make(words=("okay_nabu", "hey_jarvis"), det=None, board=None, hal=None):
    saved_dep = _deployed(words)
    saved = W.load
    engines = {}

    def load(name, rate=16000):                   # the runtime's loader, over doubles
        if det is not None and name == det.name:
            return det
        if name not in engines:
            engines[name] = FakeDetector(name)
        return engines[name]
    W.load = load
    try:
        rt, sat, core, sink, hal = H.make(board=board or _board(), hal=hal or LedHal(), record_output=True)
    finally:
        W.load = saved
        WK.deployed = saved_dep
    D.WAKE_WORDS[:] = []
    return rt, sat, core, hal


def _ticks(sat, buf, n):
    for _ in range(n):
        sat.wake_tick(buf)


def _opens(core):
    return [e for e, _ in H.sent(core) if e.op == "capture_open"]


def test_a_detection_opens_a_live_wakeword_capture_and_lights_the_led_at_once():
    det = FakeDetector()
    det.fire = [3]
    rt, sat, core, hal = _make(det=det)
    assert rt.wake is det and sat.waking
    H.sent(core)
    buf = bytearray(2 * sat.nframes)
    _ticks(sat, buf, 2)
    assert not _opens(core) and hal.mic_on          # idle: the mic feeds the detector, nothing goes up
    sat.wake_tick(buf)
    o = _opens(core)
    assert len(o) == 1
    c = o[0].capture_open
    assert c.trigger == pb.Trigger.WAKEWORD and c.mode == pb.CaptureMode.LIVE and c.kind == pb.MediaKind.AUDIO
    assert hal.leds[-1] == 1                         # LISTENING before any PipelineState from the core
    assert sat.capture_id == o[0].id and not sat.capture_ambient and not sat.capture_ptt
    assert "sat: wake word okay_nabu detected" in hal.lines


def test_the_capture_owns_the_mic_and_the_mic_is_off_while_the_core_thinks():
    det = FakeDetector()
    det.fire = [1]
    rt, sat, core, hal = _make(det=det)
    buf = bytearray(2 * sat.nframes)
    sat.wake_tick(buf)
    cid = sat.capture_id
    fed = det.fed
    _ticks(sat, buf, 5)
    assert det.fed == fed                            # the capture loop takes the chunks now, not the detector
    sat.end_capture(pb.StreamReason.END_DETECTED)    # the core's endpointer ends it: the turn is pending
    _ticks(sat, buf, 3)
    assert det.fed == fed and not hal.mic_on
    H.feed(sat.link, core, pb.Envelope(id=cid, response=pb.Response()))
    resets = det.resets
    _ticks(sat, buf, 3)
    assert det.fed == fed + 3 and hal.mic_on         # idle again: listening, with a fresh window
    assert det.resets == resets + 1


def _open_render(sat, core, rid=2):
    H.feed(sat.link, core, pb.Envelope(id=rid, media_render_open=pb.MediaRenderOpen(
        target=pb.CapabilityKind.CAPABILITY_SPEAKER, format=D.audio_format(16000))))
    assert sat.render_id == rid


def test_full_duplex_hears_the_word_over_its_reply_a_barge_in():
    det = FakeDetector()
    rt, sat, core, hal = _make(det=det)
    assert sat.wake_barge
    buf = bytearray(2 * sat.nframes)
    _open_render(sat, core)
    H.sent(core)
    det.fire = [det.fed + 2]
    _ticks(sat, buf, 2)
    o = _opens(core)
    assert len(o) == 1 and o[0].capture_open.trigger == pb.Trigger.WAKEWORD
    assert sat.render_muted                          # silenced at once; the core cancels its render (BARGE_IN)
    assert "sat: barge-in over render 2 (wake word)" in hal.lines


def test_half_duplex_cannot_listen_while_it_plays():
    det = FakeDetector()
    board = _board()
    board["duplex"] = "half"
    rt, sat, core, hal = _make(det=det, board=board)
    sat.half = True                  # the harness runs the session full duplex (its options); the board says half
    sat.wake_barge = False           # as Runtime derives it from a half-duplex board (the test below)
    buf = bytearray(2 * sat.nframes)
    _ticks(sat, buf, 2)
    _open_render(sat, core)
    fed = det.fed
    det.fire = [fed + 1, fed + 2]
    _ticks(sat, buf, 4)
    assert det.fed == fed and not hal.mic_on and not _opens(core)


def test_barge_in_by_voice_needs_full_duplex_and_a_board_file_can_turn_it_off():
    from satellite import runtime as RT
    half = _board()
    half["duplex"] = "half"
    assert not RT.Runtime(half, H.FakeHal(), H.MemStore()).wake_barge_in
    assert RT.Runtime(_board(), H.FakeHal(), H.MemStore()).wake_barge_in
    assert not RT.Runtime(_board(barge_in=False), H.FakeHal(), H.MemStore()).wake_barge_in
    rt, sat, core, hal = _make(det=FakeDetector(), board=_board(barge_in=False))
    assert not sat.wake_barge


def test_the_settings_offer_the_deployed_models_and_switch_mode_and_model():
    det = FakeDetector()
    rt, sat, core, hal = _make(det=det)
    D.WAKE_WORDS[:] = ["okay_nabu", "hey_jarvis"]
    try:
        d = {x.key: x for x in D.descriptors(rt.settings)}
        assert list(d["capture_mode"].options) == ["ptt", "ambient", "wake"]
        assert list(d["wake_word"].options) == ["okay_nabu", "hey_jarvis"]
        assert d["wake_word"].value.string_value == "okay_nabu"      # none chosen: the first deployed
        assert D.check_setting_raw("wake_word", "alexa") is None
        saved = W.load
        W.load = lambda name, rate=16000: FakeDetector(name)
        try:
            H.feed(sat.link, core, pb.Envelope(id=2, settings_write=pb.SettingsWrite(
                key="wake_word", value=pb.SettingValue(string_value="hey_jarvis"))))
        finally:
            W.load = saved
        assert rt.wake.name == "hey_jarvis" and rt.settings["wake_word"] == "hey_jarvis"
        H.feed(sat.link, core, pb.Envelope(id=4, settings_write=pb.SettingsWrite(
            key="capture_mode", value=pb.SettingValue(string_value="ptt"))))
        assert sat.wake_tick(bytearray(2 * sat.nframes)) == -1 and not hal.mic_on
    finally:
        D.WAKE_WORDS[:] = []
    D.WAKE_WORDS[:] = []
    assert not [x for x in D.descriptors(rt.settings) if x.key == "wake_word"]   # no model: no such setting


def test_a_board_whose_engine_cannot_run_says_so_and_captures_by_button():
    saved_dep = _deployed(["okay_nabu"])
    saved = W.load

    def oom(name, rate=16000):
        raise MemoryError("memory allocation failed, allocating 54254 bytes")
    W.load = oom
    try:
        hal = LedHal()
        rt, sat, core, sink, hal = H.make(board=_board(), hal=hal, record_output=True)
    finally:
        W.load = saved
        WK.deployed = saved_dep
        D.WAKE_WORDS[:] = []
    assert rt.wake is None and not sat.waking
    assert "MemoryError" in rt.wake_error
    info = rt.info()
    assert info["wake"] is None and "MemoryError" in info["wake_error"]
    assert [ln for ln in hal.lines if ln.startswith("sat: wake: cannot run (MemoryError")]
    assert sat.wake_tick(bytearray(640)) == -1
    sat.started(4096)                                # a new session: not tried again (no crash loop, one log line)
    assert len([ln for ln in hal.lines if ln.startswith("sat: wake: cannot run")]) == 1
    H.sent(core)
    sat.gesture(PRESS)
    o = _opens(core)
    assert len(o) == 1 and o[0].capture_open.trigger == pb.Trigger.BUTTON
    sat.gesture(RELEASE)


def test_a_board_without_a_usable_mic_says_so():
    hal = LedHal()
    hal.mic_supported = False                        # an ES7210 board on the official image (docs/boards.md)
    hal.mic_error = "ES7210 needs MCLK"
    rt, sat, core, hal = _make(det=FakeDetector(), hal=hal)
    assert rt.wake is None and not sat.waking and rt.wake_error == "no usable microphone: ES7210 needs MCLK"


def test_the_real_loader_refuses_what_it_cannot_run():
    e = raises(W.WakeUnavailable, W.load, "okay_nabu", 16000, "/nonexistent-wake-dir")
    assert "no wake model okay_nabu deployed" in str(e)
    e = raises(W.WakeUnavailable, W.load, "okay_nabu", 48000)
    assert "48000 Hz" in str(e)


def test_an_idle_chunk_allocates_nothing():
    det = FakeDetector()
    rt, sat, core, hal = _make(det=det)
    buf = bytearray(2 * sat.nframes)
    _ticks(sat, buf, 3)
    d = mem_alloc_delta(_ticks, sat, buf, 50)
    assert d is None or d == 0, d


class _AlwaysModel:
    """A model double that says "detected" at every inference (every 3rd frame), as a loud wake word would."""
    name = wake_word = "always"

    def __init__(self):
        self.detected = False
        self.frames = 0

    def reset(self):
        self.frames = 0

    def step(self, feat):
        self.frames += 1
        if self.frames % 3:
            return -1
        self.detected = True
        return 255


class _Frontend:
    viper = False

    def __init__(self):
        self.steps = 0

    def reset(self):
        pass

    def step(self, src, pos, out):
        self.steps += 1
        return True


def _chunks_to_hit(det, buf, limit=200):
    for k in range(1, limit):
        if det.feed(buf, 0, 320):
            return k
    return None


def test_the_refractory_time_counts_heard_audio_and_a_gap_ends_it():
    det = W.Detector(_AlwaysModel(), _Frontend(), refractory_ms=1000)
    buf = bytearray(640)
    assert _chunks_to_hit(det, buf) == 2             # the 3rd 10 ms frame's inference fires
    k = _chunks_to_hit(det, buf)
    assert 50 <= k <= 52, k                          # not before 1000 ms of audio (50 chunks of 20 ms) were heard
    det.feed(buf, 0, 320)
    det.reset()                                      # the mic was away (a capture took it): the hold is over
    assert _chunks_to_hit(det, buf) == 2


def test_odd_chunks_are_cut_into_whole_10ms_steps():
    fe = _Frontend()
    det = W.Detector(_AlwaysModel(), fe)
    buf = bytearray(2 * 250)
    for _ in range(8):                               # 8 x 250 samples = 2000 = 12 whole steps + 80 carried
        det.feed(buf, 0, 250)
    assert fe.steps == 12
    det.feed(buf, 0, 250)                            # + 250: 330 = 2 steps, 10 carried
    assert fe.steps == 14
