# dual: cpython micropython
# The runtime's watchdog rule (firmware/satellite/runtime.py, "The watchdog"; docs/reliability.md): run() arms
# hal.wdt_start with the board file's watchdog_ms, and the watchdog is fed only from the runtime's own loops
# while they make progress against a bound: the serve loop while the core is heard within the liveness limit,
# the connect/handshake polls, the backoff ticks, listening mode, a DEFERRED recording for at most its bound.
# Nothing feeds it on its own (a hung handler stops the serve loop, hence the feeding: tests/host/test_watchdog_e2e.py
# shows the reset on the virtual board). Feeding allocates nothing.
import asyncio
import time

import fakehal
import rt_harness as H
from mpsupport import IS_MICROPYTHON, mem_alloc_delta
from satellite import runtime as RT
from satellite import session as S


class WdtHal(fakehal.FakeHal):
    """FakeHal with a watchdog that records what the runtime does with it."""

    def __init__(self, fail=None):
        fakehal.FakeHal.__init__(self)
        self.armed = []
        self.feeds = 0
        self.parked = False
        self.fail = fail
        self.on_feed = None
        self.on_gesture = None

    def wdt_start(self, ms):
        if self.fail is not None:
            raise self.fail
        self.armed.append(ms)
        self.parked = False

    def wdt_feed(self):
        self.feeds += 1
        if self.on_feed is not None:
            self.on_feed()

    def wdt_park(self):
        self.parked = True

    def gesture(self):
        if self.on_gesture is not None:
            self.on_gesture()
        return 0


def _rt(board=None, **kw):
    hal = WdtHal(**kw)
    rt = RT.Runtime(board or H.BOARD, hal, H.MemStore(), log=hal.log, options={"duplex": "full"})
    return rt, hal


def _armed(rt, every_pass=True):
    rt._arm()
    if every_pass:
        rt.wdt_ms = 0                 # feed at every pass (the real rule: at most every watchdog_ms / 4)


def test_armed_with_the_board_files_timeout_or_the_30_s_default():
    rt, hal = _rt()
    assert rt.wdt_ms == 30000 and hal.armed == []            # Runtime() arms nothing: run() does
    rt._arm()
    assert hal.armed == [30000] and "watchdog armed: 30000 ms" in hal.lines[-1] and rt.watchdog == 30000
    b = dict(H.BOARD)
    b["watchdog_ms"] = 3000
    rt, hal = _rt(b)
    rt._arm()
    assert hal.armed == [3000]
    b["watchdog_ms"] = "30s"                                  # a board.json nobody validated: said, default used
    rt, hal = _rt(b)
    rt._arm()
    assert hal.armed == [30000] and "watchdog_ms '30s' is not a whole number" in hal.lines[0]


def test_a_watchdog_that_cannot_start_is_said_and_never_fed():
    rt, hal = _rt(fail=OSError(22))
    rt._arm()
    assert "watchdog NOT armed" in hal.lines[-1] and rt.watchdog is None
    rt._feed(time.ticks_ms())
    asyncio.run(rt._sleep(20))
    assert hal.feeds == 0


def test_feeding_is_throttled_to_a_quarter_of_the_timeout_and_allocates_nothing():
    rt, hal = _rt()
    rt._feed(time.ticks_ms())
    assert hal.feeds == 0                                     # not armed: nothing to feed
    rt._arm()                                                 # 30 s: at most every 7.5 s
    t = rt._fed
    rt._feed(time.ticks_add(t, 7499))
    assert hal.feeds == 0
    rt._feed(time.ticks_add(t, 7500))
    rt._feed(time.ticks_add(t, 7501))
    assert hal.feeds == 1
    rt._feed(time.ticks_add(t, 15000))
    assert hal.feeds == 2
    if IS_MICROPYTHON:                                        # the serve loop calls it every pass
        rt.wdt_ms = 0
        d = mem_alloc_delta(rt._feed, time.ticks_ms())
        assert d == 0, d


def test_the_backoff_ticking_feeds_it():
    rt, hal = _rt()
    asyncio.run(rt._sleep(30))
    assert hal.feeds == 0                                     # no watchdog armed yet: no feeding
    _armed(rt)
    asyncio.run(rt._sleep(300))
    # a tick every 50 ms feeds (rate-limited to wdt_ms/4): more than once in 300 ms, however late a loaded machine
    # wakes the sleeps (the bound was 3 in 120 ms: it failed once under the full suite's load)
    assert hal.feeds >= 2, hal.feeds


class _Sess:
    state = S.ACTIVE

    def ping(self, now):
        return None


class _Link:
    def __init__(self, rt):
        self.rt = rt

    def poll(self, buf):
        return None

    def send(self, env):
        pass


class _Sat:
    end = None


def _serve(rt, hal, passes):
    """Run the serve loop for `passes` passes (counted by its gesture polls), then stop it."""
    n = [0]

    def count():
        n[0] += 1
        if n[0] >= passes:
            rt.stopped = True
    hal.on_gesture = count
    rt.ping_ms = 3600000
    return asyncio.run(rt._serve(_Sess(), _Link(rt), _Sat()))


def test_the_serve_loop_feeds_while_the_core_is_heard_within_the_liveness_limit():
    """R10.1-b's liveness limit is the watchdog's rule: each pass feeds while the core was heard within it."""
    rt, hal = _rt()
    _armed(rt)
    rt.last_rx = time.ticks_ms()
    assert _serve(rt, hal, 6) == 4                           # _END_STOP (a const: inlined on the board)
    assert hal.feeds >= 5
    # past the limit the loop ends the connection (SILENT) before it could feed: a silent core is not progress
    rt, hal = _rt()
    _armed(rt)
    rt.last_rx = time.ticks_add(time.ticks_ms(), -(3 * 3600000 + 10000))
    rt.ping_ms = 3600000
    try:
        asyncio.run(rt._serve(_Sess(), _Link(rt), _Sat()))
        raise AssertionError("a silent core must end the session")
    except RT.L.LinkError as e:
        assert e.code == "SILENT"
    assert hal.feeds == 0


def test_waiting_for_the_hello_response_feeds_it_within_the_hello_timeout():
    """Before the HelloResponse the bound is the Hello's 10 s, not the liveness limit (short with a test ping)."""
    rt, hal = _rt()
    _armed(rt)

    class Hello(_Sess):
        state = S.HELLO_SENT
    rt.ping_ms = 1                                            # liveness limit 1 s + one frame: already past
    rt.last_rx = time.ticks_add(time.ticks_ms(), -2000)       # the Hello went out 2 s ago
    n = [0]

    def count():
        n[0] += 1
        if n[0] >= 4:
            rt.stopped = True
    hal.on_gesture = count
    asyncio.run(rt._serve(Hello(), _Link(rt), _Sat()))
    assert hal.feeds >= 3


def test_a_handler_that_blocks_the_serve_loop_stops_the_feeding():
    """What the watchdog is for: a pass that never finishes (here: the gesture poll blocks, as a frame handler
    would) is never followed by another feed. The loop is stopped from inside the blocked call after 150 ms."""
    rt, hal = _rt()
    _armed(rt)
    rt.last_rx = time.ticks_ms()
    passes = [0]
    fed = []

    def block():
        passes[0] += 1
        if passes[0] == 3:
            fed.append(hal.feeds)
            t0 = time.ticks_ms()
            while time.ticks_diff(time.ticks_ms(), t0) < 150:  # the hang (bounded here so the test ends)
                pass
            fed.append(hal.feeds)
            rt.stopped = True
    hal.on_gesture = block
    rt.ping_ms = 3600000
    asyncio.run(rt._serve(_Sess(), _Link(rt), _Sat()))
    assert fed[0] == fed[1] and fed[0] >= 2                   # fed before the hang, not during it


def test_listening_mode_feeds_it_at_each_pass():
    """No mic: listening mode polls the record every 500 ms and feeds at each poll (here: stopped at the first)."""
    b = dict(H.BOARD)
    rt, hal = _rt(b)
    rt.has_mic = False
    _armed(rt)

    def stop():
        rt.stopped = True
    hal.on_feed = stop
    asyncio.run(rt._wait_reprovision())
    assert hal.feeds == 1 and rt.state == "listening"


class _Recording:
    recording = object()


def test_a_deferred_recording_is_waited_out_feeding_only_for_its_bound():
    rt, hal = _rt()
    _armed(rt)
    rt.deferred = _Recording()
    rt.record_wait_ms = 60                  # deferred.MAX_RECORD_MS + 5 s on the board
    t0 = time.ticks_ms()

    def later():
        if time.ticks_diff(time.ticks_ms(), t0) > 200:
            rt.stopped = True
    hal.on_gesture = None
    seen = []

    async def run():
        async def stopper():
            while not rt.stopped:
                later()
                seen.append(hal.feeds)
                await asyncio.sleep_ms(10)
        asyncio.create_task(stopper())
        await rt._wait_recording()
    asyncio.run(run())
    assert seen[-1] >= 1                    # fed while the recording was within its bound
    k = 0
    while k < len(seen) and seen[k] != seen[-1]:
        k += 1
    assert k < len(seen) - 5                # then no more feeds for the last 140 ms: a stuck recording is a hang


def test_ctrl_c_parks_an_armed_watchdog_and_the_runtime_stops_feeding_it():
    rt, hal = _rt()
    rt.park_watchdog()
    assert not hal.parked                   # never armed: nothing to park
    _armed(rt)
    rt.park_watchdog()
    assert hal.parked and "watchdog parked" in hal.lines[-1] and rt.watchdog is None
    rt._feed(time.ticks_ms())
    assert hal.feeds == 0                   # the HAL's feeder has it now


def test_boot_py_parks_a_soft_reset_on_the_timer_the_esp32_hal_stops():
    """One timer id for the park feeder (hal/esp32.py PARK_TIMER): boot.py's, after a soft reset, must be the
    one Esp32Hal.wdt_start stops when the runtime takes the watchdog back, and feed within the timeout."""
    from satellite.hal import esp32 as E
    here = __file__.rpartition("/")[0] or "."
    with open(here + "/../../firmware/boot.py") as f:
        text = f.read()
    assert ("machine.Timer(%d).init(" % E.PARK_TIMER) in text and "machine.SOFT_RESET" in text
    i = text.index("WDT(timeout=") + len("WDT(timeout=")
    timeout = int(text[i:text.index(")", i)])
    i = text.index("period=") + len("period=")
    period = int(text[i:text.index(",", i)])
    assert 0 < period * 4 <= timeout, (period, timeout)
