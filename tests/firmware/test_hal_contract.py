# dual: cpython micropython
# The HAL contract (the comments in firmware/satellite/hal/__init__.py) as ONE checklist, check(rig), run
# against every HAL in the tree: esp32 on tests/firmware/fake_machine (a full-duplex board with a 32-bit
# mic, a half-duplex codec board with an expander amp, and a board whose mic the official image cannot
# drive, with a panel), the simulated HAL (unix port; on CPython once time.ticks_* exist there), and the
# test HALs fakehal.FakeHal and fakehal.MicHal. A rig only says how time passes for its HAL, how its button
# is worked and where its speaker's output can be seen; every HAL gets the same checks.
import json
import os

import fake_machine as FM
import fakehal
from mpsupport import IS_MICROPYTHON, mem_alloc_delta, raises, scratch
from satellite.hal import LONG, PRESS, RELEASE

_HERE = __file__.rpartition("/")[0] or "."
RATE = 16000
N = 320                               # one 20 ms chunk at 16 kHz
POS = 3                               # an odd byte offset: the frame tail after a header can be anywhere

REQUIRED = ("log", "set_volume", "set_mic_gain", "set_led_brightness", "led", "gesture", "network_up",
            "mic_open", "mic_wait_ms", "mic_take", "mic_skip", "mic_close",
            "spk_open", "spk_wait_ms", "spk_write", "spk_drain_ms", "spk_stop", "spk_close")
HEALTH = ("rssi", "reset_cause", "flash_free", "mic_lost_frames")
WDT = ("wdt_start", "wdt_feed", "wdt_park")
WDT_MS = 4000


def _sleep_ms(ms):
    import time
    if hasattr(time, "sleep_ms"):
        time.sleep_ms(ms)
    else:
        time.sleep(ms / 1000)


class Rig:
    """A HAL under test and how to drive it. The defaults fit a HAL without a clock or a button."""

    display = False                   # the board file has a "display" section
    host_skip = ()                    # optional members that need the board itself (esp32 rssi: `network`)

    def __init__(self, name, hal):
        self.name = name
        self.hal = hal

    def wait(self, ms):
        """Let `ms` of time pass (a clock-less HAL: the next call is simply later)."""

    def button(self, kind):
        """Work the button ("short" or "long") and return every gesture the HAL reported; None: no button."""
        return None

    def played(self):
        """Everything the speaker played since spk_open, after spk_close; None where it cannot be seen."""
        return None

    def watchdog(self):
        """What the HAL's watchdog looks like from outside: (timeout ms armed, feeds so far, parked), or None
        where it cannot be seen (a HAL without one)."""
        return None

    def done(self):
        pass


def _drain(hal, got):
    g = hal.gesture()
    while g:
        got.append(g)
        g = hal.gesture()


def _ready(rig, wait_ms):
    """Poll a *_wait_ms member until it says 0, letting the time it names pass; each answer is ms >= 0."""
    for _ in range(500):
        d = wait_ms()
        assert type(d) is int and d >= 0, (rig.name, d)
        if d == 0:
            return
        rig.wait(d)
    raise AssertionError("%s: never ready (%s)" % (rig.name, wait_ms))


def _alloc(fn, *args):
    """Bytes one call of fn(*args) allocates (micropython); on CPython the call still happens, counted 0."""
    if IS_MICROPYTHON:
        return mem_alloc_delta(fn, *args)
    fn(*args)
    return 0


def _fill(buf, v):
    for i in range(len(buf)):
        buf[i] = v


def _count(buf, a, b, v):
    k = 0
    for i in range(a, b):
        if buf[i] == v:
            k += 1
    return k


def check(rig):
    """The checklist: members, call shapes, units, gestures, optional members, 0 B on the hot path."""
    hal = rig.hal
    who = rig.name
    # -- required members and their shapes ------------------------------------------------------------
    for name in REQUIRED:
        assert callable(getattr(hal, name, None)), (who, "missing", name)
    assert hal.muted is False or hal.muted is True, (who, "muted", hal.muted)
    co = hal.network_up(None)         # a coroutine (the one async member): made, never run here
    assert hasattr(co, "send") and hasattr(co, "close"), (who, "network_up is not a coroutine")
    co.close()
    hal.log("hal contract: " + who)
    hal.set_volume(16384)
    hal.set_mic_gain(256)
    hal.set_led_brightness(50)
    for phase in range(6):            # PipelineState 0..4 and deferred.LED_QUEUED
        hal.led(phase, 50)
    hal.led(0, 0)

    # -- gestures: 0 when idle (and 0 B: the serve loop polls every few ms), the codes in their order ---
    assert hal.gesture() == 0, who
    d = _alloc(hal.gesture)
    assert d == 0, (who, "gesture() allocates", d)
    for kind, want in (("short", [PRESS, RELEASE]), ("long", [PRESS, LONG, RELEASE])):
        got = rig.button(kind)
        if got is None:
            continue
        for g in got:
            assert g in (PRESS, RELEASE, LONG), (who, "gesture code", g)
        assert got == want, (who, kind, got)
        assert hal.gesture() == 0, (who, "a gesture is reported once")

    # -- optional members: as documented when present, defaults when absent ------------------------------
    opts = getattr(hal, "options", None)
    if opts is not None:
        assert type(opts) is dict, who
        assert opts.get("duplex", "full") in ("full", "half"), (who, opts)
    supported = getattr(hal, "mic_supported", True)
    assert supported is True or supported is False, (who, "mic_supported", supported)
    if not supported:
        err = getattr(hal, "mic_error", "")
        assert type(err) is str and err, (who, "mic_supported False says why in mic_error")
        raises(Exception, hal.mic_open, RATE, N)
    busy = getattr(hal, "mic_busy", None)
    if busy is not None:
        assert busy() is False, (who, "mic_busy before any mic_open")
    for name in HEALTH:
        f = getattr(hal, name, None)
        if f is None or name in rig.host_skip:
            continue
        try:
            v = f()
        except (OSError, ValueError, AttributeError):
            continue                  # health reports null
        if name == "rssi":
            assert v is None or type(v) is int, (who, name, v)
        elif name == "reset_cause":
            assert type(v) is str and v, (who, name, v)
        else:
            assert type(v) is int and v >= 0, (who, name, v)
    # -- the watchdog: all three members or none; harmless before wdt_start; feeding allocates nothing -------
    have = [getattr(hal, name, None) is not None for name in WDT]
    assert have in ([True] * 3, [False] * 3), (who, "wdt_start/wdt_feed/wdt_park come together", have)
    if have[0]:
        hal.wdt_feed()
        hal.wdt_park()
        seen = rig.watchdog()
        assert seen is None or seen[0] == 0, (who, "nothing armed before wdt_start", seen)
        hal.wdt_start(WDT_MS)
        for measure in (False, True):
            before = rig.watchdog()
            if measure:
                d = _alloc(hal.wdt_feed)
                assert d == 0, (who, "wdt_feed allocates", d)
            else:
                hal.wdt_feed()
            after = rig.watchdog()
            if after is not None:
                assert after[0] == WDT_MS and not after[2], (who, "armed with the timeout given", after)
                assert after[1] == before[1] + 1, (who, "each wdt_feed reaches the watchdog", before, after)
        hal.wdt_park()
        parked = rig.watchdog()
        assert parked is None or parked[2], (who, "wdt_park hands it to a feeder", parked)
        hal.wdt_start(WDT_MS)          # the runtime takes it back (a second run() after a Ctrl-C and Ctrl-D)
        again = rig.watchdog()
        assert again is None or not again[2], (who, "wdt_start ends a park", again)
    pl = getattr(hal, "provision_led", None)
    assert pl is None or callable(pl), who
    panel = getattr(hal, "panel", None)
    if panel is not None:
        p = panel()
        if not rig.display:
            assert p is None, (who, "a panel without a display section")
        else:
            assert p is not None and panel() is p, (who, "panel() is made once")
            assert p.width > 0 and p.height > 0 and len(p.fb) == 2 * p.width * p.height, (who, "panel fb")
            assert type(p.phase) is int, who
            p.phase = 1
            p.backlight(100)
            p.flush(0, 1)
            p.flush()

    # -- microphone --------------------------------------------------------------------------------------
    if supported:
        hal.mic_close()               # idempotent: never opened
        hal.mic_open(RATE, N)
        if busy is not None:
            assert busy() is True, (who, "mic_busy after mic_open")
        dst = bytearray(POS + 2 * N + 5)
        for sentinel in (0xA5, 0x5A, 0xA5):
            _fill(dst, sentinel)
            _ready(rig, hal.mic_wait_ms)
            hal.mic_take(dst, POS, N)
            # exactly 2*N bytes at POS: nothing before or after, (nearly) every byte inside written
            assert _count(dst, 0, POS, sentinel) == POS, (who, "mic_take wrote before pos")
            assert _count(dst, POS + 2 * N, len(dst), sentinel) == 5, (who, "mic_take wrote past 2*nframes")
            assert _count(dst, POS, POS + 2 * N, sentinel) < N // 2, (who, "mic_take left its chunk unwritten")
        _ready(rig, hal.mic_wait_ms)
        hal.mic_skip()
        _ready(rig, hal.mic_wait_ms)
        d = _alloc(hal.mic_take, dst, POS, N)
        assert d == 0, (who, "mic_take allocates", d)
        _ready(rig, hal.mic_wait_ms)
        d = _alloc(hal.mic_skip)
        assert d == 0, (who, "mic_skip allocates", d)
        d = _alloc(hal.mic_wait_ms)
        assert d == 0, (who, "mic_wait_ms allocates", d)
        hal.mic_close()
        if busy is not None:
            assert busy() is False, (who, "mic_busy after mic_close")
        hal.mic_close()               # idempotent: closed twice

    # -- speaker -----------------------------------------------------------------------------------------
    src = bytearray(POS + 2 * N)
    for i in range(N):
        src[POS + 2 * i] = (i * 7) & 0xFF
        src[POS + 2 * i + 1] = (i >> 3) & 0x7F
    assert hal.spk_write(src, POS, N) == 0, (who, "spk_write before spk_open plays nothing")
    hal.spk_open(RATE, N)
    _ready(rig, hal.spk_wait_ms)
    assert hal.spk_write(src, POS, N) == N, who                # unity volume: src as it is
    hal.set_volume(0)
    _ready(rig, hal.spk_wait_ms)
    assert hal.spk_write(src, POS, N) == N, who                # volume 0: silence
    hal.set_volume(16384)
    _ready(rig, hal.spk_wait_ms)
    d = _alloc(hal.spk_write, src, POS, N)
    assert d == 0, (who, "spk_write allocates", d)
    _ready(rig, hal.spk_wait_ms)
    d = _alloc(hal.spk_wait_ms)
    assert d == 0, (who, "spk_wait_ms allocates", d)
    _ready(rig, hal.spk_drain_ms)                              # what was written plays out
    hal.spk_stop()
    hal.spk_stop()                    # idempotent
    hal.spk_close()
    hal.spk_close()                   # idempotent
    out = rig.played()
    if out is not None:
        assert len(out) >= 6 * N, (who, "played", len(out))
        assert out[:2 * N] == src[POS:], (who, "s16 mono at unity volume plays unchanged")
        assert out[2 * N:4 * N] == bytes(2 * N), (who, "volume 0 (q14) is silence")

    # -- half duplex: the HAL frees the shared bus itself if the mic is still open ---------------------------
    if supported and busy is not None and (opts or {}).get("duplex") == "half":
        hal.mic_open(RATE, N)
        hal.spk_open(RATE, N)
        assert busy() is False, (who, "half duplex: spk_open closes the mic")
        hal.mic_close()
        hal.spk_close()
    rig.done()


# -- esp32 on the fake machine ------------------------------------------------------------------------------
class _PinMachine(FM.FakeMachine):
    """The fake machine whose Pins file themselves under .pins[id] (the latest one made for an id): the rig
    presses the very pin the HAL reads. A subclass here, so FakeMachine itself costs what it did
    (tests/host/test_memory_fit.py builds one)."""

    def __init__(self):
        FM.FakeMachine.__init__(self)
        pins = self.pins = {}

        class BoardPin(FM.Pin):
            def __init__(self, pin_id, mode=-1, pull=-1, value=None):
                FM.Pin.__init__(self, pin_id, mode, pull, value)
                pins[pin_id] = self
        self.Pin = BoardPin
        wdt = self.wdt = {"timeout": 0, "feeds": 0, "timer": None}

        class WDT:                    # ports/esp32/machine_wdt.c: one task-WDT user; WDT() again reconfigures
            def __init__(self, id=0, timeout=5000):
                assert timeout > 0
                wdt["timeout"] = timeout

            def feed(self):
                wdt["feeds"] += 1

        class Timer:                  # ports/esp32/machine_timer.c: Timer(id) of a known id is that timer
            def __init__(self, id):
                self.id = id

            def init(self, period=-1, callback=None, mode=1):
                assert period > 0 and mode == 1
                wdt["timer"] = (self.id, period, callback)
                callback(self)        # one tick now: the feeder feeds

            def deinit(self):
                if wdt["timer"] is not None and wdt["timer"][0] == self.id:
                    wdt["timer"] = None
        self.WDT = WDT
        self.Timer = Timer


class Esp32Rig(Rig):
    host_skip = ("rssi",)             # imports `network`, which only the board has

    def __init__(self, board_name, board=None):
        from satellite.hal import esp32 as E
        if board is None:
            with open(_HERE + "/../../boards/%s.json" % board_name) as f:
                board = json.load(f)
        fm = _PinMachine()
        fm.PWRON_RESET = 1
        fm.reset_cause = lambda: 1
        hal = E.Esp32Hal(board, machine=fm, neopixel=FM.FakeNeoPixelModule(), clock=fm.clock)
        self.lines = []
        hal.log = self.lines.append
        Rig.__init__(self, "esp32 " + board_name, hal)
        self.fm = fm
        self.board = board
        self.display = bool(board.get("display"))

    def wait(self, ms):
        self.fm.advance_us(1000 * ms)

    def button(self, kind):
        b = (self.board.get("buttons") or [None])[0]
        if b is None:
            return None
        pin = self.fm.pins[b["pin"]]
        active = b.get("active_level", 0)
        got = []

        def hold(ms):                 # time passes, the serve loop polls every 10 ms
            t = 0
            while t < ms:
                self.fm.advance_us(10000)
                t += 10
                _drain(self.hal, got)
        pin.value(active)
        hold(1600 if kind == "long" else 200)
        pin.value(1 - active)
        hold(100)
        return got

    def watchdog(self):
        w = self.fm.wdt
        return (w["timeout"], w["feeds"], w["timer"] is not None)

    def played(self):
        c = self.fm.controllers[self.board["audio"]["speaker"].get("i2s_id", 1)]
        return bytes(c.played)


def test_esp32_hal_keeps_the_contract_on_the_fake_machine():
    for name in ("devkitc1-inmp441", "atoms3r-echobase", "esp32-s3-box-3"):
        check(Esp32Rig(name))


# -- the simulated HAL (virtual board) -----------------------------------------------------------------------
class _Lines:
    def __init__(self):
        self.text = []

    def write(self, s):
        self.text.append(s)


class SimRig(Rig):
    def __init__(self, SimHal):
        hal = SimHal({"id": "sim", "duplex": "full", "audio": {"mic": {"rates": [RATE]}}}, out=_Lines())
        hal.mic_path = None           # silence, whatever ALABAMA_SIM_MIC says
        hal.spk_path = scratch("hal-contract.wav")
        hal.wdt_path = hal.spk_path + ".wdt"      # the supervisor's heartbeat file (docs/virtual-board.md)
        self.stamps = []
        Rig.__init__(self, "sim", hal)

    def watchdog(self):
        """The heartbeat file as the supervisor reads it: its timeout line (0: parked). A feed rewrites it: each
        look that finds the line counts one feed and empties the file, so only the next feed brings it back."""
        try:
            with open(self.hal.wdt_path, "rb") as f:
                text = f.read()
        except OSError:
            return (0, 0, False)
        ms = int(text.split()[0]) if text.split() else -1
        if ms > 0:
            with open(self.hal.wdt_path, "wb") as f:
                f.write(b"")                      # the next feed must bring the line back
            self.stamps.append(ms)
        return (ms if ms > 0 else self.stamps[-1] if ms == 0 and self.stamps else 0, len(self.stamps), ms == 0)

    def wait(self, ms):
        _sleep_ms(ms)                 # the sim paces by the real clock

    def button(self, kind):
        import asyncio
        for cmd in (("press", "release") if kind == "short" else ("long",)):
            assert asyncio.run(self.hal.command(cmd)) == "ok"
        got = []
        _drain(self.hal, got)
        return got

    def played(self):
        with open(self.hal.spk_path, "rb") as f:
            return f.read()[44:]      # the WAV header, then what was played

    def done(self):
        os.remove(self.hal.spk_path)
        try:
            os.remove(self.hal.wdt_path)
        except OSError:
            pass


def test_sim_hal_keeps_the_contract():
    if not IS_MICROPYTHON:
        return                        # the sim HAL is unix-port code (stream write(buf, n)): checked there
    from satellite.hal.sim import SimHal
    check(SimRig(SimHal))


# -- the test HALs -------------------------------------------------------------------------------------------
def test_fake_hal_of_the_runtime_harness_keeps_the_contract():
    check(Rig("fakehal.FakeHal", fakehal.FakeHal()))


def test_mic_hal_of_the_listening_tests_keeps_the_contract():
    check(Rig("fakehal.MicHal", fakehal.MicHal(bytes(range(256)) * 6)))


def test_gesture_codes_are_three_distinct_nonzero_small_ints():
    assert sorted((PRESS, RELEASE, LONG)) == [1, 2, 3]
