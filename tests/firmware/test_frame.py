# dual: cpython micropython
# Frame codec (satellite.wire.frame): layout, every limit and boundary, any input split, zero allocation.
from mpsupport import IS_MICROPYTHON, raises, mem_alloc_delta

from satellite.wire import frame as F
from satellite.wire import _copy

HDR = b"\x08\x01\x10\x02\x18\x03"  # 6 opaque Envelope bytes (the framer never decodes them)


def drive(r, data, step=None, limit_events=100000):
    """Feed data in pieces of `step` bytes (all at once if None), pulling events after each feed.

    Returns a list of ("F", header, tail) / ("O", header, total_len) / ("E", code). Fails if the
    reader makes no progress (a hang)."""
    out = []
    n = len(data)
    pos = 0
    if step is None:
        step = n if n else 1
    try:
        while pos < n:
            end = pos + step
            if end > n:
                end = n
            while pos < end:
                k = r.feed(data, pos, end)
                pos += k
                progressed = k > 0
                while True:
                    kind = r.next()
                    if kind == F.FRAME:
                        out.append(("F", bytes(r.header()), bytes(r.tail())))
                    elif kind == F.OVERSIZE:
                        out.append(("O", bytes(r.header()), r.total_len))
                    else:
                        assert kind == F.NEED_MORE
                        break
                    progressed = True
                    assert len(out) < limit_events
                assert progressed, "reader made no progress"
    except F.FrameError as e:
        out.append(("E", e.code))
    return out


def frames_of(*pairs):
    return b"".join(F.encode_frame(h, t) for h, t in pairs)


def varint(v):
    b = bytearray(5)
    return bytes(b[:F.write_varint(b, 0, v)])


def test_r6_a_frame_layout_exact_bytes():
    assert F.encode_frame(b"\x08\x01", b"tail") == b"\x07\x02\x08\x01tail"
    assert F.encode_frame(b"") == b"\x01\x00"
    h = bytes(range(200))  # header_len 200 -> 2-byte varint; total 2 + 200 + 3
    assert F.encode_frame(h, b"xyz") == b"\xcd\x01\xc8\x01" + h + b"xyz"
    assert F.frame_total_len(200, 3) == 205
    assert F.frame_size(200, 3) == 207
    assert F.frame_size(6, 640) == 2 + 1 + 6 + 640


def test_r6_a_varint_sizes_and_encoding():
    for v, enc in ((0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
                   (16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"), (65516, b"\xec\xff\x03"),
                   (0xFFFFFFFF, b"\xff\xff\xff\xff\x0f")):
        assert varint(v) == enc
        assert F.varint_size(v) == len(enc)


def test_r6_a_write_frame_prefix_then_envelope_in_place():
    buf = bytearray(40)
    pos = F.write_frame_prefix(buf, 3, len(HDR), 5)
    assert pos == 5
    buf[pos:pos + 6] = HDR
    buf[pos + 6:pos + 11] = b"ABCDE"
    assert bytes(buf[3:pos + 11]) == F.encode_frame(HDR, b"ABCDE")
    e = raises(F.FrameError, F.write_frame_prefix, bytearray(2), 1, 6, 5)
    assert e.code == "FRAME_TOO_LARGE"


def test_r6_a_whole_bytes_bytearray_memoryview():
    data = frames_of((HDR, b"tail-one"), (b"", b""), (b"\x01", b"x" * 300))
    want = [("F", HDR, b"tail-one"), ("F", b"", b""), ("F", b"\x01", b"x" * 300)]
    for src in (data, bytearray(data), memoryview(data), memoryview(bytearray(data))):
        assert drive(F.FrameReader(1000), src) == want


def test_r5_1_2_b_one_byte_at_a_time_and_every_split():
    data = frames_of((HDR, b"abc"), (b"\x0a\x00", b""), (b"", b"zz"), (HDR, b"q" * 140))
    want = drive(F.FrameReader(1000), data)
    assert len(want) == 4
    for step in (1, 2, 3, 5, 7, 11, 64, 150, len(data)):
        for src in (data, memoryview(data)):
            assert drive(F.FrameReader(1000), src, step) == want


def test_r5_1_2_b_trailing_partial_frame_waits():
    data = frames_of((HDR, b"abc"), (HDR, b"defgh"))
    r = F.FrameReader(100)
    cut = len(data) - 3
    assert r.feed(data, 0, cut) == cut
    assert r.next() == F.FRAME
    assert bytes(r.tail()) == b"abc"
    assert r.next() == F.NEED_MORE
    assert r.next() == F.NEED_MORE
    assert r.feed(data, cut) == 3
    assert r.next() == F.FRAME
    assert bytes(r.header()) == HDR and bytes(r.tail()) == b"defgh"
    assert r.next() == F.NEED_MORE
    assert r.buffered() == 0


def test_r5_1_2_b_small_buffer_compacts_and_reports_partial_consumption():
    # Buffer of 30 bytes (limit 20): frames of 12 bytes arrive 40 at a time; feed() takes what fits.
    one = F.encode_frame(b"hd", b"0123456789"[:8])
    assert len(one) == 12
    data = one * 10
    r = F.FrameReader(20)
    assert r.feed(data) == 30
    assert drive(F.FrameReader(20), data, 40) == [("F", b"hd", b"01234567")] * 10
    assert drive(F.FrameReader(buf=bytearray(23)), data, 1) == [("F", b"hd", b"01234567")] * 10


def test_frame_indices_point_into_buf():
    r = F.FrameReader(100)
    r.feed(F.encode_frame(HDR, b"TAIL"))
    assert r.next() == F.FRAME
    assert (r.header_start, r.header_end, r.tail_start, r.tail_end) == (2, 8, 8, 12)
    assert bytes(r.buf[r.header_start:r.header_end]) == HDR
    assert r.total_len == 11


def test_r6_a_zero_length_header_and_empty_tail():
    assert drive(F.FrameReader(10), b"\x01\x00") == [("F", b"", b"")]
    assert drive(F.FrameReader(10), b"\x03\x00ab") == [("F", b"", b"ab")]
    assert drive(F.FrameReader(10), b"\x03\x02ab") == [("F", b"ab", b"")]


def test_r6_a_non_minimal_varints_up_to_5_bytes_accepted():
    # total_len 3 as 5 bytes, header_len 1 as 2 bytes: 2 + 1 == 3
    data = b"\x83\x80\x80\x80\x00" + b"\x81\x00" + b"H"
    assert drive(F.FrameReader(10), data) == [("F", b"H", b"")]


def test_r6_a_varint_6th_byte_is_error():
    e = drive(F.FrameReader(10), b"\x80\x80\x80\x80\x80\x00\x00")
    assert e == [("E", "VARINT_TOO_LONG")]
    e = drive(F.FrameReader(10), b"\x05\x80\x80\x80\x80\x80\x00")
    assert e == [("E", "VARINT_TOO_LONG")]
    e = drive(F.FrameReader(10), b"\x04\x80\x80\x80\x80\x80\x00")
    assert e == [("E", "HEADER_LEN_OVER_TOTAL")]  # header_len varint may not run past total_len
    e = drive(F.FrameReader(100), b"\x0a\x80\x80\x80\x80\x80\x00" + bytes(5))
    assert e == [("E", "VARINT_TOO_LONG")]


def test_r6_a_varint_over_32_bits_is_error():
    assert drive(F.FrameReader(10), b"\xff\xff\xff\xff\x10") == [("E", "VARINT_TOO_LONG")]
    assert drive(F.FrameReader(100), b"\x09\xff\xff\xff\xff\x1f") == [("E", "VARINT_TOO_LONG")]


def test_r6_a_header_len_over_total_len():
    # total 3, header_len varint 1 byte, header_len 3 > 3 - 1
    assert drive(F.FrameReader(10), b"\x03\x03abc") == [("E", "HEADER_LEN_OVER_TOTAL")]
    # exactly fitting is fine
    assert drive(F.FrameReader(10), b"\x03\x02ab") == [("F", b"ab", b"")]
    # total_len 0 has no room for header_len
    assert drive(F.FrameReader(10), b"\x00\x00") == [("E", "HEADER_LEN_OVER_TOTAL")]
    # detected from the prefix alone, before the body arrives
    r = F.FrameReader(1000)
    r.feed(b"\x80\x02\xff\x03")  # total 256, header_len 511
    assert raises(F.FrameError, r.next).code == "HEADER_LEN_OVER_TOTAL"


def test_r6_1_b_limit_boundary_after_set_limit():
    r = F.FrameReader(100)
    r.set_limit(50)
    ok = F.encode_frame(b"h", bytes(48))     # total 1 + 1 + 48 = 50
    big = F.encode_frame(b"h", bytes(49))    # total 51
    assert drive(r, ok) == [("F", b"h", bytes(48))]
    assert drive(r, big) == [("O", b"h", 51)]
    assert drive(r, ok) == [("F", b"h", bytes(48))]  # still in sync


def test_r6_1_b_set_limit_zero_means_default_and_buffer_wins():
    r = F.FrameReader(100)
    r.set_limit(0)
    assert r.limit == 100  # default 65516 cut to what the 110-byte buffer holds
    r = F.FrameReader()
    assert len(r.buf) == F.DEFAULT_MAX_FRAME_BYTES + F.PREFIX_MAX_BYTES
    r.set_limit(0)
    assert r.limit == F.DEFAULT_MAX_FRAME_BYTES
    r.set_limit(1 << 20)
    assert r.limit == F.DEFAULT_MAX_FRAME_BYTES
    r.set_limit(4096)
    assert r.limit == 4096


def test_r6_1_b_max_default_frame_65516():
    big = F.encode_frame(HDR, bytes(F.DEFAULT_MAX_FRAME_BYTES - 7))
    assert len(big) == F.HANDSHAKE_CEILING  # 65516 + 3-byte varint: exactly one Noise message
    r = F.FrameReader()
    r.set_limit(0)
    assert r.feed(big) == len(big)
    assert r.next() == F.FRAME
    assert r.total_len == 65516 and r.tail_end - r.tail_start == 65509
    over = F.encode_frame(HDR, bytes(F.DEFAULT_MAX_FRAME_BYTES - 6))
    ev = drive(r, over + F.encode_frame(HDR, b"next"), 4096)
    assert ev == [("O", HDR, 65517), ("F", HDR, b"next")]


def test_r6_1_a_handshake_ceiling_before_set_limit():
    r = F.FrameReader()
    fits = F.encode_frame(HDR, bytes(65516 - 7))
    assert drive(r, fits, 65519) == [("F", HDR, bytes(65509))]
    # 65517 needs a 3-byte varint: 65520 bytes, one over a Noise message -> rejected outright
    r = F.FrameReader()
    r.feed(b"\xed\xff\x03\x06")
    assert raises(F.FrameError, r.next).code == "FRAME_TOO_LARGE"
    # the ceiling counts the length prefix as sent: 65516 in a 4-byte varint is 65520 bytes
    r = F.FrameReader()
    r.feed(b"\xec\xff\x83\x00\x06")
    assert raises(F.FrameError, r.next).code == "FRAME_TOO_LARGE"
    # after set_limit the same frame is an ordinary OVERSIZE (over 65516)
    r = F.FrameReader()
    r.set_limit(0)
    r.feed(b"\xed\xff\x03\x01\x00")
    assert r.next() == F.OVERSIZE


def test_r6_1_a_handshake_frame_over_small_buffer_is_oversize():
    # Under the ceiling but over what a 100-byte-limit reader holds: OVERSIZE, header exposed.
    r = F.FrameReader(100)
    ev = drive(r, F.encode_frame(HDR, bytes(200)) + F.encode_frame(b"ok"), 7)
    assert ev == [("O", HDR, 207), ("F", b"ok", b"")]


def test_r6_1_c_oversize_then_good_frame_same_feed():
    r = F.FrameReader(64)
    data = frames_of((HDR, bytes(100)), (b"good", b"t"), (HDR, bytes(70)), (b"again", b""))
    for step in (None, 1, 13, 64):
        ev = drive(F.FrameReader(64), data, step)
        assert ev == [("O", HDR, 107), ("F", b"good", b"t"), ("O", HDR, 77), ("F", b"again", b"")]
    # the discarded tail is never buffered: after OVERSIZE nothing of it is held
    r.feed(data, 0, 30)
    assert r.next() == F.OVERSIZE
    assert r.buffered() == 0
    assert r.next() == F.NEED_MORE


def test_r6_1_c_oversize_header_exposed_then_skip_across_feeds():
    r = F.FrameReader(32)
    data = F.encode_frame(b"\x08\x07", bytes(1000)) + F.encode_frame(b"\x08\x09", b"ok")
    # prefix + header arrive first
    assert r.feed(data, 0, 5) == 5
    assert r.next() == F.OVERSIZE
    assert bytes(r.header()) == b"\x08\x07" and r.total_len == 1003
    assert r.tail_start == r.tail_end
    # the remaining 1000 bytes are consumed without buffering
    assert r.feed(data, 5, 505) == 500
    assert r.buffered() == 0
    assert r.next() == F.NEED_MORE
    pos = 505
    while pos < len(data):
        pos += r.feed(data, pos)
    assert r.next() == F.FRAME and bytes(r.header()) == b"\x08\x09" and bytes(r.tail()) == b"ok"


def test_r6_1_c_oversize_header_too_large_raises():
    r = F.FrameReader(32)  # 42-byte buffer
    data = F.encode_frame(bytes(40), bytes(10))  # header 40 + 2 varints = 42: fits exactly
    assert drive(F.FrameReader(32), data) == [("O", bytes(40), 51)]
    data = F.encode_frame(bytes(41), bytes(10))  # 43 bytes of prefix + header: cannot be held
    r.feed(data, 0, 2)
    assert raises(F.FrameError, r.next).code == "HEADER_TOO_LARGE"  # known from the prefix alone


def test_r6_1_b_check_limit_and_writer():
    F.check_limit(65516, 0)
    assert raises(F.FrameError, F.check_limit, 65517, 0).code == "FRAME_TOO_LARGE"
    F.check_limit(1000, 1000)
    assert raises(F.FrameError, F.check_limit, 1001, 1000).code == "FRAME_TOO_LARGE"
    w = F.FrameWriter()
    buf = bytearray(16)
    # handshake: whole frame <= 65519
    assert w.check(6, 65509) == 65516
    assert raises(F.FrameError, w.check, 6, 65510).code == "FRAME_TOO_LARGE"
    w.set_peer_limit(640)
    assert w.prefix(buf, 0, 6, 633) == 3  # total 1 + 6 + 633 = 640
    assert bytes(buf[:3]) == b"\x80\x05\x06"
    assert raises(F.FrameError, w.prefix, buf, 0, 6, 634).code == "FRAME_TOO_LARGE"
    w.set_peer_limit(0)
    assert w.check(6, 65509) == 65516
    assert raises(F.FrameError, w.check, 6, 65510).code == "FRAME_TOO_LARGE"


def test_errors_are_typed_on_garbage():
    # A deterministic pseudo-random byte soup: only FrameError or events, never a hang.
    x = 12345
    soup = bytearray(3000)
    for i in range(len(soup)):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        soup[i] = (x >> 16) & 0xFF
    for off in range(0, 300, 7):
        for lim in (16, 200):
            r = F.FrameReader(lim)
            ev = drive(r, memoryview(soup)[off:], 97)
            assert ev == [] or ev[-1][0] in ("E", "F", "O")


def test_caller_buffer_is_used():
    mine = bytearray(64)
    r = F.FrameReader(buf=mine)
    r.feed(F.encode_frame(b"abc", b"de"))
    assert r.next() == F.FRAME
    assert bytes(mine[2:5]) == b"abc"
    assert raises(ValueError, F.FrameReader, 0, bytearray(10)) is not None


def _copy_cases(copy):
    b = bytearray(b"0123456789")
    copy(b, 0, b, 3, 7)  # front-ward move inside one buffer (compaction)
    assert b == bytearray(b"3456789789")
    d = bytearray(8)
    copy(d, 2, b"abcdef", 1, 4)
    assert d == bytearray(b"\x00\x00bcde\x00\x00")
    copy(memoryview(d), 0, memoryview(b"XYZ"), 0, 3)
    assert d == bytearray(b"XYZcde\x00\x00")
    copy(d, 7, bytearray(b"Q"), 0, 1)
    assert d == bytearray(b"XYZcde\x00Q")
    copy(d, 0, b"", 0, 0)
    assert d == bytearray(b"XYZcde\x00Q")
    big = bytes(range(256)) * 4
    d = bytearray(1024)
    copy(d, 0, big, 0, 1024)
    assert bytes(d) == big


def test_copy_pure_fallback():
    _copy_cases(_copy.copy)


def test_copy_viper_matches_pure():
    if not IS_MICROPYTHON:
        return  # the viper module needs micropython; CPython runs the pure fallback above
    from satellite.wire import _copy_viper
    assert F.copy is _copy_viper.copy
    _copy_cases(_copy_viper.copy)
    src = bytes((i * 7 + 3) & 0xFF for i in range(700))
    for spos, dpos, n in ((0, 0, 700), (5, 9, 600), (699, 0, 1), (100, 0, 600)):
        a = bytearray(700)
        b = bytearray(700)
        _copy.copy(a, dpos, src, spos, n)
        _copy_viper.copy(b, dpos, src, spos, n)
        assert a == b
    # every alignment pair and short length (word path, byte head/tail), into another buffer
    for spos in range(8):
        for dpos in range(8):
            for n in (0, 1, 3, 4, 5, 8, 9, 13, 64, 67):
                a = bytearray(100)
                b = bytearray(100)
                _copy.copy(a, dpos, src, spos, n)
                _copy_viper.copy(b, dpos, src, spos, n)
                assert a == b
    # front-ward moves inside one buffer (compaction), all small distances
    for dist in range(1, 10):
        for dpos in range(5):
            for n in (1, 4, 7, 33, 64):
                a = bytearray(src[:120])
                b = bytearray(src[:120])
                _copy.copy(a, dpos, a, dpos + dist, n)
                _copy_viper.copy(b, dpos, b, dpos + dist, n)
                want = bytearray(src[:120])
                want[dpos:dpos + n] = src[dpos + dist:dpos + dist + n]
                assert a == want and b == want


def test_reader_with_pure_copy():
    saved = F.copy
    F.copy = _copy.copy
    try:
        data = frames_of((HDR, bytes(100)), (b"good", b"t"), (HDR, b"x" * 30))
        ev = drive(F.FrameReader(64), data, 13)
        assert ev == [("O", HDR, 107), ("F", b"good", b"t"), ("F", HDR, b"x" * 30)]
        assert drive(F.FrameReader(20), F.encode_frame(b"hd", b"01234567") * 5, 40) == \
            [("F", b"hd", b"01234567")] * 5
    finally:
        F.copy = saved


def _pump(r, data, chunk):
    n = len(data)
    pos = 0
    count = 0
    while pos < n:
        end = pos + chunk
        if end > n:
            end = n
        while pos < end:
            pos += r.feed(data, pos, end)
            while r.next() == F.FRAME:
                count += r.tail_end - r.tail_start
    return count


def test_r5_1_2_b_zero_allocation_1000_frames_noise_sized_chunks():
    one = F.encode_frame(HDR, bytes(range(256)) * 2 + bytes(128))
    assert len(one) == 649
    data = bytearray(len(one) * 1000)
    for i in range(1000):
        data[i * 649:(i + 1) * 649] = one
    r = F.FrameReader()
    r.set_limit(0)
    src = memoryview(data)
    assert _pump(r, src[:649 * 250], F.HANDSHAKE_CEILING) == 250 * 640  # warm-up, compaction included
    d = mem_alloc_delta(_pump, r, src, F.HANDSHAKE_CEILING)
    if IS_MICROPYTHON:
        assert d == 0, d
    r = F.FrameReader()
    assert _pump(r, src, F.HANDSHAKE_CEILING) == 1000 * 640
    assert r.buffered() == 0
