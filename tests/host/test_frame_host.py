"""Host frame codec (alabama.wire.frame) against the firmware FrameReader, on random frames and splits."""
import pytest
from hypothesis import given, settings, strategies as st

from alabama.errors import AlabamaError
from alabama.wire import frame as H
from satellite.wire import frame as F


def fw_events(data, cuts, limit=None, max_frame=256, buf_size=None):
    """Events of the firmware reader fed data split at cuts: ("F", h, t) / ("O", h, n) / ("E", code)."""
    r = F.FrameReader(max_frame, bytearray(buf_size) if buf_size else None)
    if limit is not None:
        r.set_limit(limit)
    out = []
    bounds = [0] + sorted(set(c for c in cuts if 0 < c < len(data))) + [len(data)]
    try:
        for a, b in zip(bounds, bounds[1:]):
            pos = a
            while pos < b:
                k = r.feed(data, pos, b)
                pos += k
                progressed = k > 0
                while True:
                    kind = r.next()
                    if kind == F.FRAME:
                        out.append(("F", bytes(r.header()), bytes(r.tail())))
                    elif kind == F.OVERSIZE:
                        out.append(("O", bytes(r.header()), r.total_len))
                    else:
                        break
                    progressed = True
                assert progressed, "firmware reader stalled"
                assert r.buffered() <= len(r.buf)
    except F.FrameError as e:
        out.append(("E", e.code))
    return out


def host_events(data, cuts, limit=None, max_frame=256, buf_size=None):
    d = H.FrameDecoder(max_frame, buf_size)
    if limit is not None:
        d.set_limit(limit)
    cap = buf_size or (max_frame or H.DEFAULT_MAX_FRAME_BYTES) + H.PREFIX_MAX_BYTES
    out = []
    bounds = [0] + sorted(set(c for c in cuts if 0 < c < len(data))) + [len(data)]
    try:
        for a, b in zip(bounds, bounds[1:]):
            d.feed(memoryview(data)[a:b])
            assert d.buffered() <= cap  # nothing held past the buffer bound
            for ev in d:
                if isinstance(ev, H.Oversize):
                    out.append(("O", ev.header, ev.total_len))
                else:
                    h, t = ev
                    out.append(("F", h, t))
    except H.FrameError as e:
        out.append(("E", e.code))
    return out


frames_st = st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=400)), max_size=8)


def model(frames, limit, cap):
    """What a correct reader reports for well-formed frames under total_len limit `limit`."""
    out = []
    for h, t in frames:
        total = H.frame_total_len(len(h), len(t))
        if total <= limit:
            out.append(("F", h, t))
        elif len(H.varint(total)) + len(H.varint(len(h))) + len(h) <= cap:
            out.append(("O", h, total))
        else:
            out.append(("E", "HEADER_TOO_LARGE"))
            break
    return out


@settings(max_examples=300, deadline=None)
@given(frames=frames_st, cuts=st.lists(st.integers(0, 4000), max_size=12),
       limit=st.sampled_from([0, 20, 64, 200, 256]))
def test_r5_1_2_b_r6_a_random_frames_random_splits_agree(frames, cuts, limit):
    data = b"".join(F.encode_frame(h, t) for h, t in frames)
    assert data == b"".join(H.encode_frame(h, t) for h, t in frames)
    eff = min(limit or H.DEFAULT_MAX_FRAME_BYTES, 256)
    want = model(frames, eff, 256 + H.PREFIX_MAX_BYTES)
    assert fw_events(data, cuts, limit) == want
    assert host_events(data, cuts, limit) == want


@settings(max_examples=150, deadline=None)
@given(frames=frames_st, cuts=st.lists(st.integers(0, 4000), max_size=6))
def test_r6_1_c_oversize_in_stream_stays_in_sync_small_buffer(frames, cuts):
    # 50-byte limit with a 60-byte buffer: many frames are oversize, some headers cannot be held
    data = b"".join(H.encode_frame(h, t) for h, t in frames)
    want = model(frames, 50, 60)
    assert fw_events(data, cuts, 50, max_frame=50) == want
    assert host_events(data, cuts, 50, max_frame=50) == want


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=600), cuts=st.lists(st.integers(0, 600), max_size=8),
       limit=st.sampled_from([None, 0, 16, 100]))
def test_random_bytes_same_events_and_codes(data, cuts, limit):
    fw = fw_events(data, cuts, limit, max_frame=100)
    assert fw == host_events(data, cuts, limit, max_frame=100)
    for ev in fw:
        assert ev[0] in ("F", "O") or ev[1] in ("VARINT_TOO_LONG", "HEADER_LEN_OVER_TOTAL",
                                                "HEADER_TOO_LARGE", "FRAME_TOO_LARGE")


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=1, max_size=40), prefix=st.sampled_from(
    [b"\xed\xff\x03", b"\xec\xff\x03", b"\xec\xff\x83\x00", b"\xff\xff\x03", b"\x80\x80\x04", b"\xeb\xff\x03"]),
    cuts=st.lists(st.integers(0, 50), max_size=4))
def test_r6_1_a_handshake_ceiling_prefixes_agree(data, prefix, cuts):
    # Large claimed lengths before set_limit: both reject over 65519 whole-frame bytes outright.
    stream = prefix + data
    fw = fw_events(stream, cuts, None, max_frame=0)
    assert fw == host_events(stream, cuts, None, max_frame=0)
    claimed = 0
    for i, c in enumerate(prefix):
        claimed |= (c & 0x7F) << (7 * i)
    if claimed + len(prefix) > H.HANDSHAKE_CEILING:
        assert fw == [("E", "FRAME_TOO_LARGE")]
    else:
        assert ("E", "FRAME_TOO_LARGE") not in fw


def test_r6_a_host_encode_layout():
    assert H.encode_frame(b"\x08\x01", b"tail") == b"\x07\x02\x08\x01tail"
    assert H.encode_frame(b"") == b"\x01\x00"
    assert H.frame_size(200, 3) == 207 == F.frame_size(200, 3)
    assert H.varint(0xFFFFFFFF) == b"\xff\xff\xff\xff\x0f"
    with pytest.raises(H.FrameError):
        H.varint(1 << 32)


def test_host_constants_match_firmware():
    for name in ("DEFAULT_MAX_FRAME_BYTES", "HANDSHAKE_CEILING", "VARINT_MAX_BYTES", "PREFIX_MAX_BYTES",
                 "UINT32_MAX", "VARINT_TOO_LONG", "HEADER_LEN_OVER_TOTAL", "HEADER_TOO_LARGE",
                 "FRAME_TOO_LARGE"):
        assert getattr(H, name) == getattr(F, name), name
    assert H.DEFAULT_MAX_FRAME_BYTES + len(H.varint(H.DEFAULT_MAX_FRAME_BYTES)) == H.HANDSHAKE_CEILING


def test_r6_1_b_host_encoder_limits():
    enc = H.FrameEncoder()
    assert len(enc.encode(b"h" * 6, bytes(65509))) == 65519  # handshake ceiling, exactly
    with pytest.raises(H.FrameError) as ei:
        enc.encode(b"h" * 6, bytes(65510))
    assert ei.value.code == "FRAME_TOO_LARGE"
    enc.set_peer_limit(640)
    enc.encode(b"h" * 6, bytes(633))
    with pytest.raises(H.FrameError):
        enc.encode(b"h" * 6, bytes(634))
    H.check_limit(65516, 0)
    with pytest.raises(H.FrameError):
        H.check_limit(65517, 0)


def test_host_inputs_and_one_byte_at_a_time():
    frames = [(b"\x08\x01", b"abc"), (b"", b""), (b"h" * 130, b"t" * 300)]
    data = b"".join(H.encode_frame(h, t) for h, t in frames)
    for src in (data, bytearray(data), memoryview(data)):
        d = H.FrameDecoder(1000)
        d.feed(src)
        assert d.events() == [H.Frame(h, t) for h, t in frames]
    d = H.FrameDecoder(1000)
    got = []
    for i in range(len(data)):
        d.feed(data[i:i + 1])
        got.extend(d)
    assert got == [H.Frame(h, t) for h, t in frames]
    assert d.buffered() == 0


def test_r6_1_c_host_oversize_event_and_error_is_sticky():
    d = H.FrameDecoder(32)
    d.feed(H.encode_frame(b"\x08\x07", bytes(1000)) + H.encode_frame(b"ok"))
    assert d.events() == [H.Oversize(b"\x08\x07", 1003), H.Frame(b"ok", b"")]
    d.feed(b"\x80\x80\x80\x80\x80\x01")
    with pytest.raises(H.FrameError) as ei:
        d.events()
    assert ei.value.code == "VARINT_TOO_LONG"
    assert isinstance(ei.value, AlabamaError)
    assert "close the connection" in str(ei.value)
    with pytest.raises(H.FrameError):
        d.feed(H.encode_frame(b"ok"))


def test_host_events_before_error_are_delivered():
    d = H.FrameDecoder(100)
    d.feed(H.encode_frame(b"a", b"b") + b"\x03\x05xyz")
    it = iter(d)
    assert next(it) == H.Frame(b"a", b"b")
    with pytest.raises(H.FrameError) as ei:
        next(it)
    assert ei.value.code == "HEADER_LEN_OVER_TOTAL"


def raw_varint(v, width):
    """v as a varint of exactly `width` bytes (non-minimal padding; may exceed 5 bytes or 32 bits)."""
    out = bytearray()
    for i in range(width):
        c = (v >> (7 * i)) & 0x7F
        out.append(c | (0x80 if i < width - 1 else 0))
    return bytes(out)


# (stream, max_frame, expected events) — edge vectors both readers must report identically.
EDGES = [
    (b"\x80\x80\x80\x80\x80\x00", 100, [("E", "VARINT_TOO_LONG")]),            # 6-byte total_len
    (b"\xff\xff\xff\xff\x0f", 100, []),                                        # 2**32-1: waits for header_len
    (b"\xff\xff\xff\xff\x0f\x7f", 100, [("E", "HEADER_TOO_LARGE")]),           # 5 + 1 + 127 > 110
    (b"\xff\xff\xff\xff\x0f\x02ab", 100, [("O", b"ab", 2 ** 32 - 1)]),
    (b"\xff\xff\xff\xff\x10", 100, [("E", "VARINT_TOO_LONG")]),                # bit 32 set
    (b"\x06\x85\x80\x80\x80\x00abcde", 100, [("E", "HEADER_LEN_OVER_TOTAL")]),  # 5-byte hl: 5 > 6 - 5
    (b"\x07\x82\x80\x80\x80\x00ab", 100, [("F", b"ab", b"")]),                 # 5-byte hl, fits
    (b"\x0b\x82\x80\x80\x80\x10abcde", 100, [("E", "VARINT_TOO_LONG")]),
    (b"\x00", 100, [("E", "HEADER_LEN_OVER_TOTAL")]),
    (b"\x02\x80\x80", 100, [("E", "HEADER_LEN_OVER_TOTAL")]),                  # hl varint past total
    (b"\x03\x80\x80\x00", 100, [("F", b"", b"")]),
    (raw_varint(30, 1) + raw_varint(16, 1) + bytes(16) + bytes(13), 20, [("O", bytes(16), 30)]),  # 18 <= 30
    (raw_varint(30, 1) + raw_varint(28, 1) + bytes(29), 20, [("O", bytes(28), 30)]),   # 30 bytes == buffer
    (raw_varint(31, 1) + raw_varint(29, 1) + bytes(30), 20, [("E", "HEADER_TOO_LARGE")]),  # 31 > 30
    (raw_varint(30, 2) + raw_varint(27, 1) + bytes(29), 20, [("O", bytes(27), 30)]),   # 2-byte prefix: 30
    (raw_varint(30, 2) + raw_varint(28, 1) + bytes(29), 20, [("E", "HEADER_TOO_LARGE")]),
    (raw_varint(20, 5) + raw_varint(19, 1) + bytes(19), 20, [("F", bytes(19), b"")]),  # limit exactly
    (raw_varint(21, 5) + raw_varint(19, 1) + bytes(20), 20, [("O", bytes(19), 21)]),
]


@pytest.mark.parametrize("stream,max_frame,want", EDGES)
def test_r6_a_r6_1_c_edge_vectors_agree(stream, max_frame, want):
    for cuts in ([], list(range(len(stream)))):
        assert fw_events(stream, cuts, max_frame, max_frame=max_frame) == want
        assert host_events(stream, cuts, max_frame, max_frame=max_frame) == want


boundary_vals = st.sampled_from([0, 1, 2, 5, 19, 20, 21, 27, 28, 29, 30, 31, 127, 128,
                                 2 ** 28 - 1, 2 ** 28, 2 ** 32 - 1, 2 ** 32, 2 ** 35 - 1])
crafted = st.tuples(boundary_vals, st.integers(1, 6), boundary_vals, st.integers(1, 6),
                    st.binary(max_size=40)).map(
    lambda t: raw_varint(t[0], max(t[1], 1)) + raw_varint(t[2], max(t[3], 1)) + t[4])
valid = st.tuples(st.binary(max_size=30), st.binary(max_size=40)).map(lambda ht: H.encode_frame(*ht))


@settings(max_examples=600, deadline=None)
@given(pieces=st.lists(st.one_of(valid, crafted), min_size=1, max_size=5),
       cuts=st.lists(st.integers(0, 300), max_size=6), handshake=st.booleans())
def test_crafted_prefixes_same_events_and_codes(pieces, cuts, handshake):
    data = b"".join(pieces)
    limit = None if handshake else 20
    assert fw_events(data, cuts, limit, max_frame=20) == host_events(data, cuts, limit, max_frame=20)
