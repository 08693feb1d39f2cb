"""The core's per-frame fast paths give exactly what the general paths give.

* ``wire.parse_chunk_header`` (StreamChunk header without pb2) against upb on canonical, mutated and
  random headers;
* ``CoreSession.receive_data`` with the fast framing path against the same session with it off
  (decoder + pb2 for every frame), over random frame mixes split at random points;
* ``NoiseConnection.decrypt_stream`` against ``NoiseConnection.receive`` + ``read_plaintext`` over
  random splits, and on tampered / truncated input (same error code, connection failed for good).
"""
import os

import pytest
from hypothesis import given, settings, strategies as st
from google.protobuf.message import DecodeError

from alabama.core import session as cs
from alabama.core.session import Admission, CoreSession
from alabama.core.testsat import capture_open, env, frame, hello
from alabama.noise.state import NoiseError, public_key
from alabama.noise.transport import NoiseConnection
from alabama.v1 import envelope_pb2, operations_pb2 as ops
from alabama.wire import frame as wire
from alabama.wire.frame import parse_chunk_header as _parse_chunk


def chunk_header(id_, seq, ts=0):
    e = envelope_pb2.Envelope(id=id_)
    e.stream_chunk.seq = seq
    e.stream_chunk.capture_ts = ts
    e.stream_chunk.SetInParent()
    return e.SerializeToString()


def upb(h):
    e = envelope_pb2.Envelope()
    try:
        e.ParseFromString(h)
    except DecodeError:
        return "undecodable"
    if e.WhichOneof("op") != "stream_chunk":
        return "other"
    return e.id, e.stream_chunk.seq, e.stream_chunk.capture_ts


U32 = st.integers(0, 2 ** 32 - 1)
U64 = st.integers(0, 2 ** 64 - 1)


@given(U32, U32, U64)
def test_parse_chunk_canonical_equals_upb(id_, seq, ts):
    h = chunk_header(id_, seq, ts)
    assert _parse_chunk(h) == upb(h) == (id_, seq, ts)


@given(U32, U32, U64, st.data())
@settings(max_examples=400)
def test_parse_chunk_mutated_never_disagrees_with_upb(id_, seq, ts, data):
    h = bytearray(chunk_header(id_, seq, ts))
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "append"]))
        i = data.draw(st.integers(0, len(h)))
        b = data.draw(st.integers(0, 255))
        if kind == "flip" and i < len(h):
            h[i] = b
        elif kind == "insert":
            h.insert(i, b)
        elif kind == "delete" and i < len(h):
            del h[i]
        else:
            h.append(b)
    h = bytes(h)
    got = _parse_chunk(h)
    if got is not None:       # the fast path only ever answers where upb gives the same answer
        assert got == upb(h)


@given(st.binary(max_size=40))
@settings(max_examples=400)
def test_parse_chunk_random_bytes(h):
    got = _parse_chunk(h)
    if got is not None:
        assert got == upb(h)


def test_read_varint_bounds_at_32_and_64_bits():
    assert wire.read_varint(b"\xff\xff\xff\xff\x0f", 0, 5) == (0xFFFFFFFF, 5)
    assert wire.read_varint(b"\xff\xff\xff\xff", 0, 4) == (None, 5)             # incomplete: one more byte
    with pytest.raises(wire.FrameError) as ei:
        wire.read_varint(b"\xff\xff\xff\xff\x10", 0, 5, "total_len")
    assert ei.value.code == wire.VARINT_TOO_LONG and "total_len varint over 5 bytes / 32 bits" in str(ei.value)
    assert wire.read_varint(b"\xff" * 9 + b"\x01", 0, 10, bits=64) == (2 ** 64 - 1, 10)
    with pytest.raises(wire.FrameError):
        wire.read_varint(b"\xff" * 9 + b"\x02", 0, 10, bits=64)


def test_parse_chunk_refuses_what_pb2_must_decide():
    base = chunk_header(3, 7)
    assert _parse_chunk(base) == (3, 7, 0)
    assert _parse_chunk(b"\x42\x00") == (0, 0, 0)                   # id 0, empty chunk
    assert _parse_chunk(base + b"\x08\x05") is None                 # id repeated after the chunk (last wins)
    assert _parse_chunk(b"\x08\x03\x42\x02\x18\x01") is None        # unknown field inside the chunk
    assert _parse_chunk(b"\x08\x03\x42\x04\x10\x01\x08\x02") is None  # fields out of order
    assert _parse_chunk(b"\x08\x80\x80\x80\x80\x10\x42\x00") is None  # id over 32 bits (pb2 truncates)
    assert _parse_chunk(b"\x08\x03\x4a\x00") is None                # stream_end


# ------------------------------------------------------------------------------------ session level
def make(fast):
    wall = iter(range(1_000_000, 10 ** 12, 1000))
    s = CoreSession(lambda surface: Admission(Admission.ACCEPT, trust="paired"), clock=lambda: 100.0,
                    wall_us=lambda: next(wall))
    s._slow_framing = not fast
    return s


def summary(s, events):
    rep = s.report.as_dict()
    for k in ("started", "ended"):
        rep.pop(k, None)
    for v in rep["violations"]:
        v.pop("t", None)
    evs = [(type(e).__name__, sorted((k, v if not isinstance(v, (bytes, bytearray, memoryview)) else bytes(v))
                                     for k, v in e.__dict__.items() if k in ("id", "seq", "data", "capture_ts", "kind",
                                                                             "reason")))
           for e in events]
    return rep, evs, s.data_to_send(), s.phase


FRAMES = st.sampled_from(["chunk", "chunk_gap", "chunk_ts", "chunk_unknown_id", "end", "cancel", "open",
                          "ping", "long_tail", "noncanonical", "oversize", "garbage", "hl_over_total"])


def build(kind, seq, rnd):
    if kind == "chunk":
        return wire.encode_frame(chunk_header(3, seq), rnd(rnd_len(seq)))
    if kind == "chunk_gap":
        return wire.encode_frame(chunk_header(3, seq + 2), b"\x01\x02")
    if kind == "chunk_ts":
        return wire.encode_frame(chunk_header(5, seq, 10 ** 12 + seq), b"\x00" * 4)
    if kind == "chunk_unknown_id":
        return wire.encode_frame(chunk_header(41, seq), b"xy")
    if kind == "end":
        return frame(env(3, "stream_end", reason=ops.PTT_RELEASE))
    if kind == "cancel":
        return frame(env(5, "stream_cancel", reason=ops.STOPPED))
    if kind == "open":
        return frame(capture_open(7 + 2 * (seq % 5), trigger=ops.TRIGGER_UNSPECIFIED))
    if kind == "ping":
        return frame(env(9 + 2 * seq, "ping", t1=seq))
    if kind == "long_tail":      # total_len needs a 3-byte varint: the decoder's part
        return wire.encode_frame(chunk_header(3, seq), b"\x07" * 20000)
    if kind == "noncanonical":   # id after the chunk: pb2 decides
        return wire.encode_frame(chunk_header(3, seq) + b"\x08\x03", b"z")
    if kind == "oversize":
        return wire.encode_frame(chunk_header(3, seq), b"\x00" * 70000)
    if kind == "hl_over_total":  # header_len 5 in a 3-byte frame: FrameError, close
        return b"\x03\x05\x42\x00\x00"
    return b"\x85\x80\x80\x80\x80\x80"   # a 6-byte varint: FrameError, close


def rnd_len(seq):
    return (seq * 37) % 700


@given(st.lists(FRAMES, min_size=1, max_size=40), st.lists(st.integers(1, 3000), max_size=12), st.randoms())
@settings(max_examples=150, deadline=None)
def test_receive_data_fast_equals_general(kinds, cuts, r):
    def rnd(n):
        return bytes(r.getrandbits(8) for _ in range(n))
    stream = frame(hello()) + frame(capture_open(3, trigger=ops.TRIGGER_UNSPECIFIED)) + \
        frame(capture_open(5, mode=ops.DEFERRED, trigger=ops.TRIGGER_UNSPECIFIED, correlation_ref="r"))
    stream += b"".join(build(k, i, rnd) for i, k in enumerate(kinds))
    pieces, pos = [], 0
    for c in sorted(set(cuts)):
        if c < len(stream):
            pieces.append(stream[pos:c])
            pos = c
    pieces.append(stream[pos:])
    results = []
    for fast in (True, False):
        s = make(fast)
        events = []
        for p in pieces:
            events += s.receive_data(p)
        results.append(summary(s, events))
    assert results[0] == results[1]


def test_fast_path_is_taken_for_plain_chunks():
    s = make(True)
    s.receive_data(frame(hello()) + frame(capture_open(3, trigger=ops.TRIGGER_UNSPECIFIED)))
    s.data_to_send()
    calls = []
    s._frame = lambda h, t: calls.append(h)      # the pb2 path, which must not run
    evs = s.receive_data(b"".join(wire.encode_frame(chunk_header(3, i), b"\x01" * 640) for i in range(5)))
    assert calls == [] and [(type(e), e.id, e.seq, len(e.data)) for e in evs] == [(cs.ChunkReceived, 3, i, 640)
                                                                                  for i in range(5)]
    assert s.report.frames_in == 7 and s.report.clean


# ------------------------------------------------------------------------------------ Noise
def pair():
    sk = os.urandom(32)
    i = NoiseConnection(True, os.urandom(32), pattern="IK", remote_static=public_key(sk))
    r = NoiseConnection(False, sk)
    r.receive(i.start())
    i.receive(r.data_to_send())
    assert i.handshake_done and r.handshake_done
    return i, r


@given(st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=20),
       st.lists(st.integers(1, 6000), max_size=10))
@settings(max_examples=100, deadline=None)
def test_decrypt_stream_equals_receive(msgs, cuts):
    i, r = pair()
    wire_bytes = b"".join(i.encrypt(m) for m in msgs)
    pieces, pos = [], 0
    for c in sorted(set(cuts)):
        if c < len(wire_bytes):
            pieces.append(wire_bytes[pos:c])
            pos = c
    pieces.append(wire_bytes[pos:])
    got = b"".join(r.decrypt_stream(p) for p in pieces)
    assert got == b"".join(msgs)
    assert not r._in and r.received_messages == sum(1 for m in msgs if m)


@pytest.mark.parametrize("where", [2, 20, -1])
def test_decrypt_stream_tampered_fails_like_receive(where):
    results = []
    for fn in ("fast", "general"):
        i, r = pair()
        data = bytearray(i.encrypt(b"a" * 100) + i.encrypt(b"b" * 50))
        data[where] ^= 1
        try:
            if fn == "fast":
                r.decrypt_stream(bytes(data))
            else:
                r.receive(bytes(data))
            results.append(("ok", r.read_plaintext()))
        except NoiseError as e:
            results.append((type(e).__name__, e.code, r.closed))
    assert results[0] == results[1] and results[0][0] != "ok"
    assert results[0][2] is True


@pytest.mark.parametrize("n", [0, 1, 255, 2 ** 32 - 1, 2 ** 32, 2 ** 63, 2 ** 64 - 2])
def test_cipher_state_nonce_is_the_specs_at_every_width(n):
    """R5-b: the inlined nonce ((n << 32) as 12 LE bytes) is Noise's 32 zero bits + 64-bit LE counter."""
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
    from alabama.noise.state import CipherState
    key = bytes(range(32))
    a, b = CipherState(), CipherState()
    a.initialize_key(key)
    b.initialize_key(key)
    a.set_nonce(n)
    b.set_nonce(n)
    want = ChaCha20Poly1305(key).encrypt(b"\x00" * 4 + n.to_bytes(8, "little"), b"frame", b"ad")
    assert a.encrypt_with_ad(b"ad", b"frame") == want
    assert b.decrypt_with_ad(b"ad", want) == b"frame" and a.n == b.n == n + 1


@given(st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=10))
@settings(max_examples=50, deadline=None)
def test_encrypt_one_message_path_equals_the_general_path(msgs):
    """NoiseConnection.encrypt's one-message path (bytes up to MAX_PLAINTEXT) gives byte for byte what the
    general path (any other buffer type, or longer) gives from the same cipher state."""
    i1, _ = pair()
    i2 = NoiseConnection.restore_established(b"\x00" * 32, i1.export_established())
    for m in msgs:
        assert i1.encrypt(m) == i2.encrypt(bytearray(m))
    assert i1._send.n == i2._send.n == sum(1 for m in msgs if m)
