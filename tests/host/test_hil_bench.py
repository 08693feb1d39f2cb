"""The bench's core side against the host test satellite (no micropython): recording, relay controls,
raw injection, restart, and a scenario's teardown packing its evidence."""
import asyncio
import time

import pytest

from alabama.core import testsat as T
from alabama.hil import measures
from alabama.hil.corehost import CoreHost
from alabama.hil.timeline import CORE_TO_SAT, NOTE, SAT_TO_CORE, Timeline
from alabama.v1 import operations_pb2 as ops
from alabama.wire import frame as wire


@pytest.fixture
def host(tmp_path):
    tl = Timeline()
    h = CoreHost(str(tmp_path / "core"), tl, ping_interval=0).start()
    yield h
    h.stop()


def _sat(host, **kw):
    return T.TestSatellite(*host.address, server_key=host.public_key, **kw)


def test_frames_recorded_both_ways_through_the_relay(host):
    async def go():
        sat = _sat(host)
        await sat.connect()
        await sat.hello()
        cid = sat.mint()
        await sat.send(T.capture_open(cid, trigger=ops.BUTTON))
        await sat.stream_audio(cid, T.tone(200))
        await sat.send(T.env(cid, "stream_end", reason=ops.PTT_RELEASE))
        await sat.expect("response", cid, timeout=10)
        await sat.close()
        return cid
    cid = host.call(go())
    tl = host.timeline
    hello = tl.wait(SAT_TO_CORE, "hello", timeout=1)
    assert hello is not None and hello.session == "s1"
    assert tl.first(CORE_TO_SAT, "hello_response").t >= hello.t
    assert [e.seq for e in tl.find(SAT_TO_CORE, "stream_chunk", cid)] == list(range(10))
    ro = tl.first(CORE_TO_SAT, "media_render_open")
    assert ro is not None and ro.id % 2 == 0
    assert tl.wait(SAT_TO_CORE, "playback_done", ro.id, timeout=2) is not None
    assert tl.wait(CORE_TO_SAT, "response", cid, timeout=2) is not None
    assert len(measures.handshakes(tl)) == 1
    assert tl.wait(NOTE, pred=lambda e: "closed by the board" in e.summary, timeout=2) is not None
    assert host.reports()[0]["noise_pattern"] == "IK"


def test_silence_keeps_tcp_open_and_passes_nothing(host):
    async def go():
        sat = _sat(host, auto_ping=False)
        await sat.connect()
        await sat.hello()
        host.relay.silence()
        n = len(sat.received)
        await sat.send(T.env(sat.mint(), "ping", t1=1))
        await asyncio.sleep(0.5)
        silent = len(sat.received) == n and not sat.closed.is_set()
        await sat.close()
        return silent
    assert host.call(go())
    assert host.timeline.first(CORE_TO_SAT, "ping_response") is None


def test_cut_then_restart_keeps_address_and_key(host):
    addr, key = host.address, host.public_key
    device_key = bytes(range(32))

    async def connect():
        sat = _sat(host, static_private=device_key)
        await sat.connect()
        await sat.hello()
        return sat
    sat = host.call(connect())
    assert host.cut() == 1
    host.call(sat.wait_closed(3))
    host.restart(down_s=0.2)
    assert host.address == addr and host.public_key == key
    sat2 = host.call(connect())
    host.call(sat2.close())
    pats = [r["admission"] for r in host.reports()]
    assert pats == ["new_guest", "known_guest"]


def test_inject_puts_raw_frames_on_the_wire(host):
    async def go():
        sat = _sat(host)
        await sat.connect()
        await sat.hello()
        return sat
    sat = host.call(go())
    did = host.wait_device(timeout=5)
    arm = wire.encode_frame(wire.varint(1 << 3) + wire.varint(40) + wire.varint(117 << 3 | 2) + b"\x00")
    host.inject(did, arm, note="unknown arm")
    ev = host.timeline.wait(CORE_TO_SAT, "unknown_arm", timeout=3)
    assert ev is not None and ev.id == 40

    async def received():
        for _ in range(50):
            if any(r.id == 40 for r in sat.received):
                break
            await asyncio.sleep(0.02)
        r = [r for r in sat.received if r.id == 40]
        await sat.close()
        return r
    got = host.call(received())
    assert got and got[0].op is None


def test_bench_close_never_raises_and_packs_evidence(tmp_path):
    from alabama.hil.bench import Bench
    from alabama.hil.targets import Target

    class Dead(Target):
        name = "dead"

        def stop(self):
            raise RuntimeError("board wedged")

        def log_text(self):
            return "boot\nwedged\n"

    b = Bench(Dead(), tmp_path / "w")
    b.start_core()
    b.note("hello")
    errors = b.close()
    assert errors == ["board stop: board wedged"]
    rec = b.artifacts(tmp_path / "a")
    assert rec["serial_log"] == "boot\nwedged\n" and (tmp_path / "a" / "serial.log").exists()
    assert any("hello" in r["summary"] for r in rec["timeline"])
    with pytest.raises(AssertionError, match="expected Core \u2192 Sat ping within 0.1 s"):
        b.expect(CORE_TO_SAT, "ping", timeout=0.1)
