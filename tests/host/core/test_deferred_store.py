"""Partial DEFERRED captures are bounded (R10.4-d resume state, docs/core.md): an entry idle past the TTL
goes, the byte cap evicts least recently used first, an entry whose capture is open is never evicted."""
import os

from alabama.core.deferred import DEFERRED_MAX_BYTES, DEFERRED_TTL_S, DeferredStore
from alabama.core.testsat import capture_open, env
from alabama.v1 import operations_pb2 as ops

from conftest import connect, make_server


class FakeClock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def test_defaults_are_one_hour_and_64_mib():
    assert DEFERRED_TTL_S == 3600.0 and DEFERRED_MAX_BYTES == 64 * 1024 * 1024
    st = DeferredStore()
    assert (st.ttl_s, st.max_bytes) == (3600.0, 64 * 1024 * 1024)


def test_r10_4_d_idle_entry_evicted_after_ttl_open_one_kept():
    clk = FakeClock()
    st = DeferredStore(ttl_s=3600, clock=clk)
    idle, open_ = ("dev", "idle"), ("dev", "open")
    st.append(idle, st.create(idle), b"a" * 100, 1)
    st.append(open_, st.create(open_), b"b" * 50, 1)
    st.hold(open_)
    clk.t += 3600                                   # exactly the TTL: not yet idle *longer* than it
    st.sweep(force=True)
    assert set(st.keys()) == {idle, open_}
    clk.t += 1
    st.sweep(force=True)
    assert st.keys() == [open_] and st.bytes == 50 and st.evicted == 1
    clk.t += 10 * 3600                              # open for hours: still kept
    st.sweep(force=True)
    assert st.keys() == [open_]
    st.release(open_)                               # the capture ended without being resumed
    clk.t += 3601
    st.sweep(force=True)
    assert len(st) == 0 and st.bytes == 0 and st.evicted == 2


def test_sweep_runs_at_most_every_30_s_unless_forced():
    clk = FakeClock()
    st = DeferredStore(ttl_s=10, clock=clk)
    st.sweep()                                      # first sweep: nothing there; next one not before +10 s
    st.create(("d", "r"))
    clk.t += 11
    st.sweep()
    assert len(st) == 0


def test_r10_4_d_byte_cap_evicts_the_least_recently_used_never_an_open_one():
    clk = FakeClock()
    st = DeferredStore(max_bytes=1000, clock=clk)
    a, b, c, d = (("dev", x) for x in "abcd")
    for k in (a, b):
        st.append(k, st.create(k), b"x" * 400, 1)
        clk.t += 1
    ec = st.create(c)
    st.hold(c)
    clk.t += 1
    st.append(c, ec, b"y" * 150, 2)                 # 950: under the cap
    assert set(st.keys()) == {a, b, c}
    st.hold(a)                                      # a is resumed: open now, and the oldest
    clk.t += 1
    st.release(a)                                   # ...and closed again: now the most recently used
    st.append(c, ec, b"y" * 150, 3)                 # 1100 > 1000: b (least recently used) goes
    assert set(st.keys()) == {a, c} and st.bytes == 700
    ed = st.create(d)
    st.hold(d)                                      # (the pipeline holds every entry it writes to)
    st.append(d, ed, b"z" * 900, 4)                 # 1600: a goes (oldest idle); c, d open: 1200 stays over
    assert set(st.keys()) == {c, d} and st.bytes == 1200 and st.evicted == 2
    st.release(d)
    st.append(c, ec, b"y" * 10, 5)                  # d is the only idle one left
    assert st.keys() == [c] and st.bytes == 310


def test_r10_4_d_server_forgets_a_capture_never_resumed_but_keeps_an_open_one(tmp_path, run):
    """Over the wire: a dropped DEFERRED upload stays resumable, then ages out of srv.deferred after the
    TTL; a DEFERRED capture still open on a live connection is kept however long it idles."""
    async def body():
        clk = FakeClock()
        async with make_server(tmp_path, deferred_ttl=60.0) as srv:
            srv.deferred.clock = clk
            key_a, key_b = os.urandom(32), os.urandom(32)
            sat = await connect(srv, static_private=key_a)
            await sat.hello()
            cid = sat.mint()
            await sat.send(capture_open(cid, trigger=ops.BUTTON, mode=ops.DEFERRED, correlation_ref="gone"))
            for i in range(3):
                await sat.send(env(cid, "stream_chunk", seq=i, capture_ts=100 + i), b"\x01\x02" * 160)
            fence = sat.mint()
            await sat.send(env(fence, "ping", t1=1))
            await sat.expect("ping_response", fence)
            sat.stream.writer.transport.abort()           # the link drops; never resumed
            await sat.wait_closed()

            sat2 = await connect(srv, static_private=key_b)
            await sat2.hello()
            cid2 = sat2.mint()
            await sat2.send(capture_open(cid2, trigger=ops.BUTTON, mode=ops.DEFERRED, correlation_ref="open"))
            await sat2.send(env(cid2, "stream_chunk", seq=0, capture_ts=5), b"\x00" * 320)
            fence = sat2.mint()
            await sat2.send(env(fence, "ping", t1=1))
            await sat2.expect("ping_response", fence)
            for _ in range(100):                          # the server notices the drop
                if sat.device_id not in srv.connections:
                    break
                await asyncio.sleep(0.02)
            gone, kept = (sat.device_id, "gone"), (sat2.device_id, "open")
            assert srv.deferred[gone]["count"] == 3 and srv.deferred[kept]["count"] == 1
            clk.t += 61
            srv.deferred.sweep(force=True)
            assert srv.deferred.keys() == [kept] and srv.deferred.bytes == 320
            await sat2.close()
    import asyncio
    run(body())
