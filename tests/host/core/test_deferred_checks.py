"""The reference core's DEFERRED checks and clock mapping (issue 13): a DEFERRED CaptureOpen without a
correlation_ref (R10.4-d), a gap in a RELIABLE deferred upload (R10.10-c), a chunk stored twice (R10.4-d)
are each flagged in the conformance report; every DEFERRED open is answered with its high-water-mark
CaptureAck (0 for a new recording); the whole recording draws a Response; and the report says when the
recording was spoken: capture_ts (satellite clock) mapped to wall clock through the core's Ping round."""
import time

from alabama.core.testsat import capture_open, env
from alabama.v1 import operations_pb2 as ops

from conftest import connect, make_server
from test_rules import RecordingBrain as TextBrain      # keeps every turn's audio, answers with text only


SAT_CLOCK_BEHIND_US = 987_654_321_000      # the satellite's monotonic clock = wall clock - this


def chunks(n, t0, step=20_000):
    return [(bytes([i & 0xFF]) * 640, t0 + step * i) for i in range(n)]


async def upload(sat, cid, ref, items, skip=()):
    await sat.send(capture_open(cid, trigger=ops.BUTTON, mode=ops.DEFERRED, correlation_ref=ref))
    seq = 0
    for i, (data, ts) in enumerate(items):
        if i in skip:
            continue
        await sat.send(env(cid, "stream_chunk", seq=seq, capture_ts=ts), data)
        seq += 1
    await sat.send(env(cid, "stream_end", reason=ops.COMPLETE))
    return await sat.expect("response", cid, timeout=10)


async def answer_pings(sat):
    """Answer the core's Pings on the satellite's own clock (wall - SAT_CLOCK_BEHIND_US)."""
    seen = 0
    while not sat.closed.is_set():
        for r in sat.received[seen:]:
            if r.op == "ping":
                now = time.time_ns() // 1000 - SAT_CLOCK_BEHIND_US
                await sat.send(env(r.id, "ping_response", t1=r.env.ping.t1, t2=now, t3=now))
        seen = len(sat.received)
        await __import__("asyncio").sleep(0.002)


def test_r10_4_d_deferred_open_without_correlation_ref_is_flagged(tmp_path, run):
    async def body():
        async with make_server(tmp_path, brain=TextBrain()) as srv:
            sat = await connect(srv)
            await sat.hello()
            await upload(sat, sat.mint(), "", chunks(3, 1_000_000))
            rep = srv.reports_for(sat.device_id)[-1]
            assert rep.checks() == {"deferred_no_correlation_ref"} and rep.rules() == {"R10.4-d"}
            # with the handle: clean, and the open itself draws the high-water mark (0: nothing held yet)
            cid = sat.mint()
            await upload(sat, cid, "rec-a", chunks(3, 2_000_000))
            assert [r.env.capture_ack.stored for r in sat.received if r.op == "capture_ack" and r.id == cid][0] == 0
            assert rep.checks() == {"deferred_no_correlation_ref"}
            await sat.close()
    run(body())


def test_r10_10_c_a_gap_in_a_deferred_upload_is_flagged(tmp_path, run):
    async def body():
        brain = TextBrain()
        async with make_server(tmp_path, brain=brain) as srv:
            sat = await connect(srv)
            await sat.hello()
            await upload(sat, sat.mint(), "rec-gap", chunks(10, 1_000_000), skip={4, 5})   # two chunks never sent
            rep = srv.reports_for(sat.device_id)[-1]
            assert [v.check for v in rep.violations] == ["deferred_gap"] and rep.rules() == {"R10.10-c"}
            assert "chunks are missing" in rep.violations[0].detail
            # a contiguous upload is clean
            await upload(sat, sat.mint(), "rec-ok", chunks(10, 9_000_000))
            assert len(rep.violations) == 1
            await sat.close()
    run(body())


def test_r10_4_d_a_chunk_sent_twice_is_flagged_and_stored_once(tmp_path, run):
    async def body():
        brain = TextBrain()
        async with make_server(tmp_path, brain=brain) as srv:
            sat = await connect(srv)
            await sat.hello()
            items = chunks(6, 1_000_000)
            await upload(sat, sat.mint(), "rec-dup", items[:4] + [items[3]] + items[4:])
            rep = srv.reports_for(sat.device_id)[-1]
            assert [v.check for v in rep.violations] == ["deferred_duplicate"]
            assert brain.turns[-1].audio == b"".join(d for d, _ in items)
            await sat.close()
    run(body())


def test_deferred_recording_is_mapped_to_the_wall_clock_when_it_was_spoken(tmp_path, run):
    """The satellite's clock is SAT_CLOCK_BEHIND_US behind the wall clock; the recording was spoken 5 s
    ago. The core's own Ping round (sent on the DEFERRED open) gives the offset; its report says when."""
    import asyncio

    async def body():
        async with make_server(tmp_path, brain=TextBrain()) as srv:
            sat = await connect(srv, auto_ping=False)
            await sat.hello()
            pinger = asyncio.ensure_future(answer_pings(sat))
            spoken = time.time_ns() // 1000 - 5_000_000
            items = chunks(25, spoken - SAT_CLOCK_BEHIND_US)
            await upload(sat, sat.mint(), "rec-clock", items)
            rep = srv.reports_for(sat.device_id)[-1]
            (d,) = rep.deferred
            assert d["correlation_ref"] == "rec-clock" and d["chunks"] == 25 and d["bytes"] == 25 * 640
            # a Ping round's offset is off by at most half its round trip (the asymmetry of the two legs; this
            # satellite answers within 2 ms of polling, and a loaded machine stretches either leg)
            tol = max(5_000, d["rtt_us"] // 2 + 1_000)
            assert abs(d["offset_us"] + SAT_CLOCK_BEHIND_US) < tol, (d["offset_us"] + SAT_CLOCK_BEHIND_US, d)
            assert abs(d["spoken_at_us"] - spoken) < tol, (d["spoken_at_us"] - spoken, d)
            assert rep.as_dict()["deferred"] == [d] and rep.clean
            pinger.cancel()
            await sat.close()
    run(body())


def test_r10_4_d_a_recording_whose_response_was_lost_is_answered_again_not_processed_twice(tmp_path, run):
    """The link drops after the core answered: the device never saw the Response and reopens the same
    correlation_ref. The core re-issues the full high-water mark, the device sends only StreamEnd, and the
    core answers again without a second turn: the recording is delivered exactly once."""
    import os

    async def body():
        brain = TextBrain()
        async with make_server(tmp_path, brain=brain) as srv:
            key = os.urandom(32)
            sat = await connect(srv, static_private=key)
            await sat.hello()
            await upload(sat, sat.mint(), "rec-once", chunks(12, 1_000_000))
            await sat.close()
            sat2 = await connect(srv, static_private=key)
            await sat2.hello()
            cid = sat2.mint()
            await sat2.send(capture_open(cid, trigger=ops.BUTTON, mode=ops.DEFERRED, correlation_ref="rec-once"))
            assert (await sat2.expect("capture_ack", cid)).env.capture_ack.stored == 12
            await sat2.send(env(cid, "stream_end", reason=ops.COMPLETE))
            await sat2.expect("response", cid, timeout=10)
            assert len(brain.turns) == 1
            assert sum(len(r.deferred) for r in srv.reports_for(sat2.device_id)) == 1
            assert all(r.clean for r in srv.reports_for(sat2.device_id))
            await sat2.close()
    run(body())
