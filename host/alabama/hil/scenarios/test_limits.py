"""Spec §6.1 frame size limits and §10.3 stream counts, both ways.

The board must keep every frame under the core's Accepted.max_frame_bytes and its open captures under
Accepted.max_concurrent_streams; the core (here made to misbehave on purpose with raw frames) sending a
frame over the board's Hello.max_frame_bytes or more render streams than it advertised must draw a typed
Error on the offending id (or, for an undecodable oversize header, a clean close) — never a crash.
"""
import pytest

from alabama.hil import steps
from alabama.hil.timeline import CORE_TO_SAT, SAT_TO_CORE
from alabama.v1 import envelope_pb2, operations_pb2 as ops, content_pb2
from alabama.wire import frame as wire

#: Ids the bench mints for raw frames: even (core parity) and far from what the core's own counter reaches.
RAW_ID = 0x7FFF0000
#: Checks the core reports when the board answers frames the bench injected behind the core's back.
INJECTED = ("terminal_unmatched", "error_unmatched")


def _total_len(row):
    return len(wire.varint(row.header)) + row.header + row.tail


def padded_ping(id_, total_len, t1=1234):
    """A Ping frame whose total_len is exactly ``total_len``: the padding rides an unknown field (1000) of the
    Ping message, which a receiver skips (R2.2-a)."""
    for pad in range(total_len):
        ping = envelope_pb2.Envelope()
        ping.ping.t1 = t1
        body = ping.ping.SerializeToString() + _unknown_bytes(1000, b"p" * pad)
        hdr = envelope_pb2.Envelope(id=id_).SerializeToString() + _unknown_bytes(5, body)
        t = wire.frame_total_len(len(hdr), 0)
        if t == total_len:
            return wire.encode_frame(hdr)
        if t > total_len:
            break
    raise ValueError("cannot pad a Ping to total_len %d" % total_len)


def _unknown_bytes(field, data):
    return wire.varint(field << 3 | 2) + wire.varint(len(data)) + data


@pytest.mark.spec("§6.1", "R6.1-b", "§10.10")
@pytest.mark.needs("mic", "speaker")
def test_r6_1_b_board_frames_fit_core_limit(hil):
    """The core advertises max_frame_bytes 400: every frame the board sends after the Hello fits it (its 640-byte
    20 ms mic chunks must be split), and the exchange still completes."""
    hil.start_core(max_frame_bytes=400)
    hil.provision("ik")
    hil.boot()
    hil.target.set_mic(steps.utterance_wav(hil.workdir / "utterance.wav"))
    m = hil.tl.mark()
    hil.core.call(hil.core.server.request_capture(hil.device_id, "small-frames"), timeout=15)
    co = hil.expect(SAT_TO_CORE, "capture_open", after=m)
    hil.expect(SAT_TO_CORE, "stream_chunk", co.id, after=m, timeout=5,
               what="a capture chunk under the core's 400-byte max_frame_bytes (a 20 ms mic frame is 640 B: "
                    "the board must split it across chunks, R6.1-b)")
    ex = steps.finish_exchange(hil, co, m)
    over = [e for e in hil.tl.find(SAT_TO_CORE) if e.op not in ("hello", "note") and _total_len(e) > 400]
    assert not over, "%d board frames over the core's 400-byte limit, e.g. %s total_len %d" % (
        len(over), over[0].op, _total_len(over[0]))
    audio = sum(e.tail for e in hil.tl.find(SAT_TO_CORE, "stream_chunk", ex["co"].id))
    assert audio >= 16000, "only %d bytes of audio reached the core" % audio
    hil.assert_conformant()


@pytest.mark.spec("§6.1", "R6.1-a", "R6.1-c", "R2.2-a")
def test_r6_1_c_core_frame_over_board_limit(hil):
    """A frame of exactly the board's max_frame_bytes is taken (a padded Ping is answered); one byte more is
    refused with Error{FRAME_TOO_LARGE} on its id or a close — never answered as if it were fine — and the
    session (or the next one) carries on."""
    hil.start_core()
    hil.provision("ik")
    hil.boot()
    hello = hil.expect(SAT_TO_CORE, "hello")
    limit = hello.env.hello.max_frame_bytes or 65516
    m = hil.tl.mark()
    hil.core.inject(hil.device_id, padded_ping(RAW_ID, limit), note="bench: Ping of total_len %d (= limit)" % limit)
    pr = hil.expect(SAT_TO_CORE, None, id_=RAW_ID, after=m, what="an answer to the at-limit Ping")
    assert pr.op == "ping_response", "a frame of exactly max_frame_bytes drew %s: %s" % (pr.op, pr.summary)
    assert pr.env.ping_response.t1 == 1234
    m = hil.tl.mark()
    hil.core.inject(hil.device_id, padded_ping(RAW_ID + 2, limit + 1),
                    note="bench: Ping of total_len %d (limit + 1)" % (limit + 1))
    ans = hil.tl.wait(SAT_TO_CORE, None, RAW_ID + 2, m, timeout=3)
    if ans is not None:
        assert ans.op == "error" and ans.env.error.code == ops.FRAME_TOO_LARGE, (
            "an over-limit frame drew %s: %s" % (ans.op, ans.summary))
    else:
        closed = [e for e in hil.tl.find("note", after=m) if "closed by the board" in e.summary]
        assert closed, "the over-limit frame drew neither Error{FRAME_TOO_LARGE} nor a close"
        hil.core.wait_device(timeout=20)
    did = hil.core.wait_device(timeout=20)
    offset, rtt = hil.core.call(hil.core.server.ping(did))
    assert rtt is not None and rtt < 2_000_000
    hil.assert_conformant(allow=INJECTED)


def _raw_render_open(id_, rate=16000):
    env = envelope_pb2.Envelope(id=id_)
    mro = env.media_render_open
    mro.target = 1   # CAPABILITY_SPEAKER
    mro.format.encoding, mro.format.sample_rate = content_pb2.PCM_S16LE, rate
    mro.format.channels, mro.format.sample_bits = 1, 16
    return wire.encode_frame(env.SerializeToString())


@pytest.mark.spec("§10.3", "R10.3-c", "R10.8-a")
@pytest.mark.needs("mic", "speaker")
def test_r10_3_c_core_opens_too_many_renders(hil):
    """While the reply plays, the core opens more render streams than the board's Hello.max_concurrent_streams:
    each extra Open draws an Error on its own id (TOO_MANY_STREAMS, or UNAVAILABLE from a one-speaker board),
    the playing render is untouched and ends with PlaybackDone{frames} = what was sent."""
    hil.start_core(brain=steps.ToneBrain(2500))
    hil.provision("ik")
    did = hil.boot()
    limit = hil.expect(SAT_TO_CORE, "hello").env.hello.max_concurrent_streams or 8
    hil.target.set_mic(steps.utterance_wav(hil.workdir / "utterance.wav"))
    m = hil.tl.mark()
    hil.core.call(hil.core.server.request_capture(did, "renders"), timeout=15)
    ro = hil.expect(CORE_TO_SAT, "media_render_open", after=m, timeout=20)
    extra = [RAW_ID + 2 * k for k in range(limit + 1)]
    for i in extra:
        hil.core.inject(did, _raw_render_open(i))
    for i in extra:
        ans = hil.expect(SAT_TO_CORE, None, id_=i, after=m, what="the answer to the extra render %d" % i)
        assert ans.op == "error" and ans.env.error.code in (ops.TOO_MANY_STREAMS, ops.UNAVAILABLE), (
            "extra render %d drew %s %s" % (i, ans.op, ans.summary))
    done = hil.expect(SAT_TO_CORE, "playback_done", ro.id, after=m, timeout=15)
    sent = steps.sent_render_bytes(hil, ro.id)
    assert done.env.playback_done.frames * 2 == sent, "%s, the core sent %d frames" % (done.summary, sent // 2)
    hil.assert_conformant(allow=INJECTED)


@pytest.mark.spec("§10.3", "§10.4", "R10.3-c", "R10.4-a", "R10.4-b")
@pytest.mark.needs("mic")
def test_r10_3_c_board_respects_core_stream_limit(hil):
    """The core allows one open stream (Accepted.max_concurrent_streams 1). The board streams ambiently; a
    RequestCapture makes it supersede the ambient capture instead of opening a second stream, the answer is the
    correlated CaptureOpen, and the ambient capture resumes on a new id after the requested one closes."""
    hil.start_core(max_concurrent_streams=1)
    hil.provision("ik")
    did = hil.boot()
    steps.go_ambient(hil)
    hil.target.set_mic(steps.utterance_wav(hil.workdir / "utterance.wav"))
    m2 = hil.tl.mark()
    hil.core.call(hil.core.server.request_capture(did, "while-ambient"), timeout=15)
    co = hil.expect(SAT_TO_CORE, "capture_open", after=m2, pred=lambda e: e.env.capture_open.correlation_ref)
    steps.finish_exchange(hil, co, m2)
    hil.expect(SAT_TO_CORE, "capture_open", after=hil.tl.index_of(co) + 1, timeout=10,
               pred=lambda e: e.id > co.id and not e.env.capture_open.trigger, what="the ambient capture resumed")
    hil.assert_conformant()
