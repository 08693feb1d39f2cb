"""Spec §2.2 / §10.10 forward compatibility: a newer core sends what this board has never heard of.

The bench puts raw frames on the wire that the reference core's API would never produce: an Envelope
whose only arm is unknown (with an id and as a notification), and known operations carrying unknown
fields (inside the operation, and varint fields beside it in the Envelope). The board must not act on
the unknown, must not drop the connection, and must keep serving what it does understand.
"""
import pytest

from alabama.hil import steps
from alabama.hil.timeline import CORE_TO_SAT, NOTE, SAT_TO_CORE
from alabama.v1 import envelope_pb2, content_pb2
from alabama.wire import frame as wire

RAW_ID = 0x7FFE0000
INJECTED = ("terminal_unmatched", "error_unmatched")


def _field(num, wt, payload):
    return wire.varint(num << 3 | wt) + payload


def _len_field(num, data):
    return _field(num, 2, wire.varint(len(data)) + data)


def unknown_arm_frame(id_, arm=117, body=b"\x0a\x05hello\x10\x07"):
    """An Envelope with only ``id`` and an arm number this schema does not have (a newer operation)."""
    hdr = (_field(1, 0, wire.varint(id_)) if id_ else b"") + _len_field(arm, body)
    return wire.encode_frame(hdr)


def ping_with_unknowns(id_, t1):
    """A Ping carrying unknown fields of every wire type inside the Ping, and an unknown varint field
    beside the arm in the Envelope."""
    ping = envelope_pb2.Envelope()
    ping.ping.t1 = t1
    body = (ping.ping.SerializeToString() + _field(900, 0, wire.varint(300)) + _field(901, 1, b"\x01" * 8)
            + _len_field(902, b"newer") + _field(903, 5, b"\x02" * 4))
    hdr = _field(1, 0, wire.varint(id_)) + _len_field(5, body) + _field(2000, 0, wire.varint(7))
    return wire.encode_frame(hdr)


def _connections(hil):
    return [e for e in hil.tl.find(NOTE) if e.summary.startswith("board connects")]


@pytest.mark.spec("§2.2", "§10.10", "R2.2-b", "R10.10-b")
@pytest.mark.needs("mic", "speaker")
def test_r2_2_b_unknown_envelope_arm(hil):
    """Unknown Envelope arms — on a core id and as an id-0 notification — are not acted on and do not cost the
    connection: no new TCP connection, Pings still answered, and a full voice exchange still completes."""
    hil.start_core()
    hil.provision("ik")
    did = hil.boot()
    m = hil.tl.mark()
    hil.core.inject(did, unknown_arm_frame(RAW_ID), note="bench: unknown Envelope arm 117 on id %d" % RAW_ID)
    hil.core.inject(did, unknown_arm_frame(0, arm=4000), note="bench: unknown Envelope arm 4000, id 0")
    hil.expect(CORE_TO_SAT, "unknown_arm", after=m, what="the injected frame on the wire")
    hil.expect_none(SAT_TO_CORE, None, id_=0, after=m, within=1.0,
                    pred=lambda e: e.op == "error", what="an answer to an id-0 notification (R10.10-b)")
    offset, rtt = hil.core.call(hil.core.server.ping(did))
    assert rtt is not None
    hil.target.set_mic(steps.utterance_wav(hil.workdir / "utterance.wav"))
    steps.requested_exchange(hil, "after-unknown-arm")
    assert len(_connections(hil)) == 1, "the board reconnected after an unknown arm (R2.2-b)"
    hil.assert_conformant(allow=INJECTED)


@pytest.mark.spec("§2.2", "R2.2-a", "R10.2-a")
def test_r2_2_a_unknown_fields(hil):
    """Known operations with unknown fields (every wire type inside a Ping; a varint beside it in the
    Envelope) are handled as if the fields were absent: the Ping is answered on its id with t1 echoed."""
    hil.start_core()
    hil.provision("ik")
    did = hil.boot()
    m = hil.tl.mark()
    hil.core.inject(did, ping_with_unknowns(RAW_ID, 987654321), note="bench: Ping with unknown fields")
    pr = hil.expect(SAT_TO_CORE, None, id_=RAW_ID, after=m, what="the answer to the Ping with unknown fields")
    assert pr.op == "ping_response", "a Ping with unknown fields drew %s: %s" % (pr.op, pr.summary)
    assert pr.env.ping_response.t1 == 987654321
    assert pr.env.ping_response.t3 >= pr.env.ping_response.t2
    assert len(_connections(hil)) == 1
    hil.assert_conformant(allow=INJECTED)


@pytest.mark.spec("§2.2", "R2.2-a", "R10.8-a")
@pytest.mark.needs("speaker")
def test_r2_2_a_render_with_unknown_fields(hil):
    """A render whose MediaRenderOpen, StreamChunks and StreamEnd carry unknown fields plays normally and ends
    with PlaybackDone{frames} = the samples sent."""
    hil.start_core()
    hil.provision("ik")
    did = hil.boot()
    rid = RAW_ID + 2
    fmt = content_pb2.AudioFormat(encoding=content_pb2.PCM_S16LE, sample_rate=16000, channels=1, sample_bits=16)
    op = envelope_pb2.Envelope()
    op.media_render_open.target = 1
    op.media_render_open.format.CopyFrom(fmt)
    frames = [wire.encode_frame(_field(1, 0, wire.varint(rid)) + _len_field(
        12, op.media_render_open.SerializeToString() + _len_field(700, b"future")))]
    pcm = steps.tone(400)
    piece = 640
    for seq, pos in enumerate(range(0, len(pcm), piece)):
        ch = envelope_pb2.Envelope()
        ch.stream_chunk.seq = seq
        body = ch.stream_chunk.SerializeToString() + _field(701, 0, wire.varint(1))
        frames.append(wire.encode_frame(_field(1, 0, wire.varint(rid)) + _len_field(8, body), pcm[pos:pos + piece]))
    end = envelope_pb2.Envelope()
    end.stream_end.reason = 1
    frames.append(wire.encode_frame(_field(1, 0, wire.varint(rid)) + _len_field(
        9, end.stream_end.SerializeToString() + _len_field(702, b"x"))))
    m = hil.tl.mark()
    # one frame per Noise message, as the core writes them: the satellite's receive buffer holds one message
    # of its max_frame_bytes (docs/memory.md), not a whole render packed into one
    for k, f in enumerate(frames):
        hil.core.inject(did, f, note="bench: a 400 ms render with unknown fields everywhere" if k == 0 else None)
    done = hil.expect(SAT_TO_CORE, "playback_done", rid, after=m, timeout=10)
    assert done.env.playback_done.frames == len(pcm) // 2, done.summary
    hil.assert_conformant(allow=INJECTED)
