# dual: cpython micropython
# The DEFERRED store loads lazily (satellite.app: store_is_empty, open_deferred, IdleDeferred; docs/memory.md):
# a board whose store holds nothing does not import satellite.deferred at boot, and nothing a Deferred does on
# an empty store is lost: the store's boot recovery still runs whenever the flash holds anything for it, a
# press while offline loads the store and records, and each session's Ping round still learns this boot's
# clock offset, which a recording made later in the boot carries as its anchor (docs/deferred.md, the clock).
import os

import rt_harness as H
from test_deferred import fresh_dir
from satellite import app
from satellite import deferred as D
from satellite import runtime as RT
from satellite.hal import PRESS, RELEASE
from satellite.wire import alabama_v1 as pb

import asyncio


def _store(p, lines=None):
    return D.Store(p, 1 << 20, (lines.append if lines is not None else (lambda s: None)),
                   rng=lambda n: b"\xcd" * n).load()


def _write(path, data):
    with open(path, "w") as f:
        f.write(data)


def test_store_is_empty_exactly_when_boot_recovery_has_nothing_to_do():
    p = fresh_dir()
    assert app.store_is_empty(p)                      # no store yet: the first press creates it
    st = _store(p)
    assert app.store_is_empty(p)                      # created, nothing recorded
    rec = st.begin(320, 16000)
    assert not app.store_is_empty(p)                  # a recording the reset cut: closed at the next boot
    st.append(rec, bytearray(8 * st.recs[0].record_bytes()), 8)
    st.finish(rec)
    assert not app.store_is_empty(p)                  # queued: uploaded on the next session
    st.remove(rec)
    assert app.store_is_empty(p)                      # delivered: nothing left
    _write(p + "/idx.tmp", "half")
    assert not app.store_is_empty(p)                  # a cut rename: load removes it
    os.remove(p + "/idx.tmp")
    _write(p + "/7.rec", "x")
    assert not app.store_is_empty(p)                  # an orphan: load removes it
    os.remove(p + "/7.rec")
    _write(p + "/idx", "garbage\n")
    assert not app.store_is_empty(p)                  # unreadable: load says so and starts afresh
    _write(p + "/idx", "v1 cdcdcdcd x 0 1\n")
    assert not app.store_is_empty(p)


def _runtime():
    hal = H.FakeHal()
    rt = RT.Runtime(H.BOARD, hal, H.MemStore(), log=hal.log, options={"duplex": "full"})
    return rt, hal


def test_open_deferred_stands_in_for_an_empty_store_and_loads_one_with_work():
    rt, hal = _runtime()
    p = fresh_dir()
    d = app.open_deferred(rt, p, 1 << 20)
    assert type(d) is app.IdleDeferred and d.recording is None
    assert not d.take_gesture(1) and not d.on_done(None)
    st = _store(p)
    rec = st.begin(320, 16000)                        # the board reset while this one recorded
    st.append(rec, bytearray(8 * rec.record_bytes()), 8)
    boot = st.boot
    d = app.open_deferred(rt, p, 1 << 20)
    assert type(d) is D.Deferred
    assert d.store.boot == boot + 1 and [r.done for r in d.store.recs] == [1]    # boot recovery ran
    assert any("closed after a reset" in ln for ln in hal.lines)


class PressHal(H.FakeHal):
    """A button pressed once, released once the recorder has taken `frames` mic frames."""

    def __init__(self, frames):
        H.FakeHal.__init__(self)
        self.frames = frames
        self.pressed = False
        self.released = False
        self.leds = []

    def gesture(self):
        if not self.pressed:
            self.pressed = True
            return PRESS
        if not self.released and self.mic_frames >= self.frames:
            self.released = True
            return RELEASE
        return 0

    def led(self, phase, b):
        self.leds.append(phase)


def test_an_offline_press_loads_the_store_and_records_with_this_boots_anchor():
    hal = PressHal(20)
    rt = RT.Runtime(H.BOARD, hal, H.MemStore(), log=hal.log, options={"duplex": "full"})
    p = fresh_dir()
    idle = app.open_deferred(rt, p, 1 << 20)
    idle.offset_us = 4_000_000_000                    # learned by an earlier session of this boot
    rt.deferred = idle
    assert rt.offline()

    async def main():
        t = asyncio.create_task(rt._button_offline())   # the runtime reads the button, idle records
        for _ in range(400):
            if type(rt.deferred) is D.Deferred and rt.deferred.store.queued():
                break
            await asyncio.sleep(0.005)
        rt.stopped = True
        await asyncio.sleep(0.05)
        assert t.done()

    asyncio.run(main())
    d = rt.deferred
    assert type(d) is D.Deferred, "the press did not load the store"
    (rec,) = d.store.queued()
    assert rec.count >= 16 and rec.anchor == 4_000_000_000 and rec.boot == d.store.boot, (rec.count, rec.anchor)
    assert D.LED_QUEUED in hal.leds                   # "recording queued", as before
    st = _store(p)                                    # on flash, for the next boot
    assert [r.count for r in st.queued()] == [rec.count]


def test_an_idle_store_learns_the_clock_offset_from_each_sessions_ping_round():
    rt, sat, core, sink, hal = H.make(record_output=True)
    idle = app.IdleDeferred(rt, fresh_dir(), 1 << 20)
    rt.deferred = idle
    H.sent(core)
    pings = []

    async def main():
        t = asyncio.create_task(idle.upload(sat))
        for _ in range(400):
            if t.done():
                break
            await asyncio.sleep(0.005)
            for e, _ in H.sent(core):
                if e.op == "ping":
                    pings.append(e)
                    tc = e.ping.t1 + 3_000_000
                    H.feed(sat.link, core, pb.Envelope(id=e.id, ping_response=pb.PingResponse(
                        t1=e.ping.t1, t2=tc, t3=tc)))
        assert t.done()

    asyncio.run(main())
    assert len(pings) == 4, "the session's Ping rounds were not sent (the best of 4 is the anchor)"
    assert idle.offset_us is not None and idle.offset_us == sat.offset_us
