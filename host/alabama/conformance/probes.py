"""Wire probes that read the same from either end: both conformance kits (``corekit``, ``satkit``) run them.

Responsible for the probes whose rule binds satellite and core alike (who "S C": a Ping answered on its id, a
notification never answered, unknown fields and arms tolerated, a frame split over Noise messages or two in one, a
corrupted transport tag ending the connection), the one failure type of a check (``CheckFailed``) and the frame and
error wording both kits print. Each probe works on any peer object of ``core.testsat``'s shape (``mint``, ``send``,
``send_raw``, ``stream``, ``expect``, ``received``, ``closed``), returns what passed and raises CheckFailed with a
one-line detail otherwise. Not for: verdict rows (the kits put them) or a probe only one side's rule needs.
"""
import asyncio
import time

from alabama.v1 import envelope_pb2, operations_pb2 as ops
from alabama.wire import frame as wire

from ..core import testsat as ts

_E = ops.ErrorCode
#: Seconds any one wait of a check may take (a handshake, an answer, a close).
STEP_S = 5.0
#: Seconds of silence that count as "nothing was sent" (a notification not answered, a cancelled id left alone).
QUIET_S = 1.0


class CheckFailed(Exception):
    """A check's verdict is fail; the message is its one-line detail."""


def summary(e):
    """One Envelope as a timeline line: ``op {id N extra}``."""
    op = e.WhichOneof("op") or "(unknown arm)"
    m = getattr(e, op) if op != "(unknown arm)" else None
    extra = ""
    if op == "error":
        extra = " %s %r" % (_E.Name(m.code) if m.code in _E.values() else m.code, m.message[:60])
    elif op == "hello_response":
        extra = " " + (m.WhichOneof("result") or "?")
    elif op in ("stream_chunk",):
        extra = " seq %d" % m.seq
    elif op in ("stream_end", "stream_cancel"):
        extra = " " + ops.StreamReason.Name(m.reason) if m.reason in ops.StreamReason.values() else ""
    return "%s {id %d%s}" % (op, e.id, extra)


def timeline(peer, t0, sent_as, received_as, focus=None):
    """The frames a kit's peer sent and received, as timeline lines (times from ``t0``; the middle of a long run
    elided). ``sent_as``/``received_as``: the direction labels, e.g. "sat -> core". ``focus``: the time of the frame
    that broke the rule: only the lines around it (the text rendering shows the last 12)."""
    rows = [(t, sent_as, summary(e) + (" +%d B" % n if n else "")) for t, e, n in peer.sent]
    rows += [(r.t, received_as, summary(r.env) + (" +%d B" % len(r.tail) if r.tail else "")) for r in peer.received]
    rows.sort(key=lambda x: x[0])
    if focus is not None:
        i = next((n for n, row in enumerate(rows) if row[0] >= focus), len(rows))
        rows = rows[max(0, i - 5):i + 6]
    elif len(rows) > 40:
        rows = rows[:10] + [(rows[10][0], "", "... %d frames ..." % (len(rows) - 30))] + rows[-20:]
    return ["%8.3fs  %-11s %s" % (t - t0, d, s) for t, d, s in rows]


#: A refused connection as the kits say it (the CLI tells a typo'd address by it).
NOTHING_LISTENS = "connection refused (nothing listens there)"


def why(e):
    """An exception of the network or the handshake as the end of one line."""
    if isinstance(e, ConnectionRefusedError):
        return NOTHING_LISTENS
    if isinstance(e, asyncio.TimeoutError):
        return "no answer"
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:160]


def key(field, wiretype):
    return wire.varint(field << 3 | wiretype)


def _note(peer, e):
    """Keep a frame sent raw in the peer's timeline (a kit's peer records what its send() sends)."""
    if hasattr(peer, "sent"):
        peer.sent.append((time.monotonic(), e, 0))


async def ping(peer, step_s, what="a Ping"):
    """A Ping the peer must answer (the connection is alive): its PingResponse, or CheckFailed."""
    i = peer.mint()
    await peer.send(ts.env(i, "ping", t1=time.time_ns() // 1000))
    try:
        return await peer.expect("ping_response", id_=i, timeout=step_s)
    except AssertionError:
        raise CheckFailed("%s on id %d was not answered within %.0f s%s" % (
            what, i, step_s, " (the connection is closed)" if peer.closed.is_set() else "")) from None


async def quiet(peer, pred, seconds=QUIET_S):
    """The frames matching ``pred`` the peer sent within ``seconds`` (the kit waits that long)."""
    start = len(peer.received)
    await asyncio.sleep(seconds)
    return [r for r in peer.received[start:] if pred(r)]


async def notification(peer, step_s, quiet_s=QUIET_S):
    """R10.10-b: a Ping with id 0 draws nothing within ``quiet_s``; the connection goes on."""
    await peer.send(ts.env(0, "ping", t1=time.time_ns() // 1000))
    got = await quiet(peer, lambda r: r.id == 0 and r.op in ("ping_response", "error"), quiet_s)
    if got:
        raise CheckFailed("a Ping with id 0 (a notification) drew %s" % summary(got[0].env))
    await ping(peer, step_s)
    return "a Ping with id 0 drew nothing within %g s" % quiet_s


#: The t1 of the Ping carrying unknown fields (a value the answer must echo).
UNKNOWN_T1 = 987654321


async def unknown_fields(peer, step_s):
    """R2.2-a: a Ping with unknown fields of two wire types (Ping 1000 varint, 1001 bytes) beside an unknown
    Envelope field (900) is answered: its PingResponse, or CheckFailed."""
    i = peer.mint()
    ping_no = envelope_pb2.Envelope.DESCRIPTOR.fields_by_name["ping"].number
    body = ts.env(i, "ping", t1=UNKNOWN_T1).ping.SerializeToString() + key(1000, 0) + wire.varint(7) + \
        key(1001, 2) + wire.varint(3) + b"xyz"
    header = envelope_pb2.Envelope(id=i).SerializeToString() + key(ping_no, 2) + wire.varint(len(body)) + body
    header += key(900, 2) + wire.varint(3) + b"abc"
    _note(peer, ts.env(i, "ping", t1=UNKNOWN_T1))
    await peer.send_raw(wire.encode_frame(header))
    try:
        return await peer.expect("ping_response", id_=i, timeout=step_s)
    except AssertionError:
        raise CheckFailed("a Ping carrying unknown fields (Ping fields 1000, 1001; Envelope field 900) was not "
                          "answered") from None


async def unknown_arm(peer, step_s):
    """R2.2-b: Envelopes whose only arm is unknown (field 1999), on a minted id and on id 0, leave the connection
    up (a later Ping is answered)."""
    for n in (peer.mint(), 0):
        await peer.send_raw(wire.encode_frame(envelope_pb2.Envelope(id=n).SerializeToString() + key(1999, 2)
                                              + wire.varint(2) + b"\x08\x01"))
    await asyncio.sleep(0.3)
    await ping(peer, step_s, "a Ping after two unknown Envelope arms")
    return "Envelopes whose only arm is unknown (field 1999; on a minted id and on id 0) left the connection up"


async def split_frames(peer, step_s):
    """R5.1.2-b: a Ping split over two Noise messages, then two Pings in one: all three answered."""
    i, j, k = peer.mint(), peer.mint(), peer.mint()
    pings = [ts.env(n, "ping", t1=t1) for n, t1 in ((i, 1), (j, 2), (k, 3))]
    for e in pings:
        _note(peer, e)
    f = ts.frame(pings[0])
    async with peer.write_lock:
        await peer.stream.send(f[:3])                               # one frame over two Noise messages
        await peer.stream.send(f[3:])
        await peer.stream.send(ts.frame(pings[1]) + ts.frame(pings[2]))
    for n in (i, j, k):
        try:
            await peer.expect("ping_response", id_=n, timeout=step_s)
        except AssertionError:
            raise CheckFailed("Ping %d (%s) was not answered" % (
                n, "split over two Noise messages" if n == i else "two frames in one Noise message")) from None
    return "a Ping split over two Noise messages and two Pings in one were answered"


async def bad_decrypt(peer, step_s):
    """R5-a: a transport message whose tag no longer authenticates it ends the connection."""
    msg = bytearray(peer.stream.conn.encrypt(ts.frame(ts.env(peer.mint(), "ping", t1=1))))
    msg[-1] ^= 0x01
    peer.stream.writer.write(bytes(msg))
    try:
        await asyncio.wait_for(peer.closed.wait(), step_s)
    except asyncio.TimeoutError:
        raise CheckFailed("a transport message with a corrupted tag left the connection open %.0f s" % step_s) \
            from None
    return "a transport message with a corrupted tag ended the connection"
