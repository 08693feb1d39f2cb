# dual: cpython micropython
# Firmware Envelope codec (satellite/wire/pb.py + generated alabama_v1.py) on CPython and micropython:
# exact bytes (vectors from google-protobuf), forward compatibility, malformed input -> typed errors.
from mpsupport import IS_MICROPYTHON, mem_alloc_delta, raises, unhex

from satellite.wire import alabama_v1 as v1, pb, pbtable

# Envelopes serialized by google-protobuf (upb) 7.x from the pb2 classes (see test_codec_differential).
STREAM_CHUNK = "080742020805"  # Envelope(id=7, stream_chunk=StreamChunk(seq=5))
HELLO = "0801121f08011208080742040a0201021a050a03766f6c3080204a076b69746368656e"
ERROR_NEG = "0802220f08ffffffffffffffffff011202c3a9"  # Error(code=-1, message="é")
SETTINGS = "0803e201090a0176120408011005"            # SettingsWrite(key="v", value=(bool true, int -3))
PING_RESP = "0804320d08ffffffffffffffffff011001"     # PingResponse(t1=2**64-1, t2=1, t3=0)
RESPONSE = "72110a020a000a0b12090a03612f6212020001"  # Response(content=[text "", media a/b 0001])
VECTORS = (STREAM_CHUNK, HELLO, ERROR_NEG, SETTINGS, PING_RESP, RESPONSE)


def hello_vector():
    return v1.Envelope(id=1, hello=v1.Hello(
        wire_version=1, max_frame_bytes=4096, display_name="kitchen",
        tools=[v1.ToolDescriptor(name="vol")],
        capabilities=[v1.CapabilityDescriptor(kind=v1.CapabilityKind.CAPABILITY_IMAGE_CAPTURE,
                                              image_capture=v1.ImageCaptureParams(kinds=[1, 2]))]))


def test_encode_matches_google_protobuf_bytes():
    assert pb.encode(v1.Envelope(id=7, stream_chunk=v1.StreamChunk(seq=5))) == unhex(STREAM_CHUNK)
    assert pb.encode(hello_vector()) == unhex(HELLO)
    assert pb.encode(v1.Envelope(id=2, error=v1.Error(code=-1, message="é"))) == unhex(ERROR_NEG)
    sw = v1.SettingsWrite(key="v", value=v1.SettingValue(bool_value=True, int_value=-3))
    assert pb.encode(v1.Envelope(id=3, settings_write=sw)) == unhex(SETTINGS)
    assert pb.encode(v1.Envelope(id=4, ping_response=v1.PingResponse(t1=2 ** 64 - 1, t2=1))) == unhex(PING_RESP)
    content = [v1.ContentBlock(text=""), v1.ContentBlock(media=v1.MediaBlock(mime="a/b", data=b"\x00\x01"))]
    assert pb.encode(v1.Envelope(response=v1.Response(content=content))) == unhex(RESPONSE)
    assert pb.encode(v1.Envelope()) == b"" and pb.size(v1.Envelope(paired=v1.Paired())) == 2


def test_decode_values_and_reencode():
    e = pb.decode(v1.Envelope, unhex(HELLO))
    assert e.id == 1 and e.op == "hello" and e.hello.display_name == "kitchen"
    assert e.hello.max_frame_bytes == 4096 and e.hello.tools[0].name == "vol"
    cap = e.hello.capabilities[0]
    assert cap.kind == 7 and cap.params == "image_capture" and cap.image_capture.kinds == [1, 2] and cap.mic is None
    assert e == hello_vector()
    e = pb.decode(v1.Envelope, unhex(ERROR_NEG))
    assert e.error.code == -1 and e.error.message == "é"  # int32 negative from a 10-byte varint
    e = pb.decode(v1.Envelope, unhex(SETTINGS))
    assert e.settings_write.value.int_value == -3 and e.settings_write.value.bool_value is True
    e = pb.decode(v1.Envelope, unhex(PING_RESP))
    assert e.ping_response.t1 == 2 ** 64 - 1 and e.ping_response.t3 == 0
    e = pb.decode(v1.Envelope, unhex(RESPONSE))
    assert e.id == 0 and e.response.content[0].block == "text" and e.response.content[0].text == ""
    assert e.response.content[1].media.data == b"\x00\x01"
    for h in VECTORS:
        assert pb.encode(pb.decode(v1.Envelope, unhex(h))) == unhex(h)


def test_decode_accepts_bytes_bytearray_memoryview_and_offsets():
    raw = unhex(HELLO)
    framed = b"\x99\x98" + raw + b"\x00\xff"  # trailing data is not ours
    ref = pb.decode(v1.Envelope, raw)
    for buf in (framed, bytearray(framed), memoryview(framed)):
        assert pb.decode(v1.Envelope, buf, 2, 2 + len(raw)) == ref
    e = raises(pb.DecodeError, pb.decode, v1.Envelope, raw, 0, len(raw) + 1)
    assert e.code == pb.LENGTH


def test_r2_2_a_unknown_fields_of_every_wire_type_are_skipped():
    chunk = ("0805"                 # seq = 5
             "489601"               # field 9 varint 150
             "51" + "11" * 8 +      # field 10 i64
             "5a03616263"           # field 11 len "abc"
             "65" + "22" * 4 +      # field 12 i32
             "c03e" + "ff" * 9 + "01"  # field 1000, a 10-byte varint
             "1007")                # capture_ts = 7 after the unknowns
    raw = unhex("0807" + "42" + "%02x" % (len(chunk) // 2) + chunk + "c83e05" + "d13e" + "00" * 8 + "dd3e" + "00" * 4)
    e = pb.decode(v1.Envelope, raw)
    assert e.id == 7 and e.op == "stream_chunk" and e.unknown_op == 0
    assert e.stream_chunk.seq == 5 and e.stream_chunk.capture_ts == 7
    assert pb.encode(e) == unhex("0807420408051007")  # unknown fields are dropped


def test_r2_2_b_unknown_envelope_arm_is_op_none_with_its_number():
    e = pb.decode(v1.Envelope, unhex("0807fa01020801"))  # id 7, arm 31 (LEN)
    assert e.id == 7 and e.op is None and e.unknown_op == 31
    e = pb.decode(v1.Envelope, unhex("0807c2b802020801"))  # arm 5000
    assert e.op is None and e.unknown_op == 5000
    e = pb.decode(v1.Envelope, unhex("0807fa0100" + "42020805"))  # a known arm after it wins
    assert e.op == "stream_chunk" and e.unknown_op == 0 and e.stream_chunk.seq == 5
    e = pb.decode(v1.Envelope, unhex("42020805" + "fa0100"))  # an unknown field after a known arm: R2.2-a
    assert e.op == "stream_chunk" and e.unknown_op == 0 and e.stream_chunk.seq == 5
    env = v1.Envelope()
    pb.decode_into(env, unhex("fa0100"))
    pb.decode_into(env, unhex(STREAM_CHUNK))  # reuse clears the unknown arm
    assert env.unknown_op == 0 and env.op == "stream_chunk"


def test_packed_and_unpacked_repeated_both_decode():
    packed = pb.decode(v1.ImageCaptureParams, unhex("0a020102"))
    unpacked = pb.decode(v1.ImageCaptureParams, unhex("08010802"))
    mixed = pb.decode(v1.ImageCaptureParams, unhex("08010a0102"))
    assert packed.kinds == unpacked.kinds == mixed.kinds == [1, 2]
    assert pb.encode(unpacked) == unhex("0a020102")  # proto3 encodes packed
    assert pb.decode(v1.ImageCaptureParams, unhex("0a00")).kinds == []


def test_last_one_wins_and_submessages_merge():
    assert pb.decode(v1.Envelope, unhex("08010802")).id == 2
    e = pb.decode(v1.Envelope, unhex("2a020801" + "42020805"))  # ping then stream_chunk
    assert e.op == "stream_chunk" and e.ping is None
    e = pb.decode(v1.Envelope, unhex("42020805" + "42021007"))  # the same arm twice merges
    assert e.stream_chunk.seq == 5 and e.stream_chunk.capture_ts == 7
    e = pb.decode(v1.ContentBlock, unhex("0a0178" + "12020a00"))  # text then media arm
    assert e.block == "media" and e.text == "" and e.media.mime == ""
    e = pb.decode(v1.Error, unhex("08ffffffff0f"))  # int32 from a 5-byte varint: low 32 bits
    assert e.code == -1


def test_malformed_input_raises_typed_errors():
    big = "4a41" + "61" * 65
    tools = "1a00" * 17
    cases = (
        ("08", pb.TRUNCATED), ("0880", pb.TRUNCATED), ("42", pb.TRUNCATED), ("4205 0805", pb.LENGTH),
        ("42020880", pb.TRUNCATED), ("910300", pb.TRUNCATED), ("9503000000", pb.TRUNCATED),
        ("0a0107", pb.WIRE_TYPE), ("0d00000000", pb.WIRE_TYPE), ("4208", pb.LENGTH), ("4000", pb.WIRE_TYPE),
        ("08" + "ff" * 10 + "01", pb.VARINT_TOO_LONG), ("c83e" + "ff" * 10 + "00", pb.VARINT_TOO_LONG),
        ("088080808010", pb.VARINT_RANGE), ("80808080100000", pb.VARINT_RANGE),
        ("12%02x" % (len(big) // 2) + big, pb.OVER_BOUND), ("12%02x" % (len(tools) // 2) + tools, pb.OVER_BOUND),
        ("0b", pb.GROUP), ("9303", pb.GROUP), ("9403", pb.GROUP), ("9603", pb.WIRE_TYPE), ("9703", pb.WIRE_TYPE),
        ("0000", pb.TAG), ("0700", pb.TAG), ("0f00", pb.WIRE_TYPE),
    )
    for h, code in cases:
        e = raises(pb.DecodeError, pb.decode, v1.Envelope, unhex(h.replace(" ", "")))
        assert e.code == code, (h, e.code, code)
        assert isinstance(e, ValueError)
    e = raises(pb.DecodeError, pb.decode, v1.Envelope, unhex("12%02x" % (len(big) // 2) + big))
    assert e.field == "Hello.display_name"
    e = raises(pb.DecodeError, pb.decode, v1.ImageCaptureParams, unhex("0a050101010101"))
    assert e.code == pb.OVER_BOUND and e.field == "ImageCaptureParams.kinds"
    e = raises(pb.DecodeError, pb.decode, v1.ImageCaptureParams, unhex("0a0181"))
    assert e.code == pb.TRUNCATED


def test_uint32_over_32_bits_is_refused():
    e = raises(pb.DecodeError, pb.decode, v1.StreamChunk, unhex("08ffffffff1f"))  # 2**33 - 1
    assert e.code == pb.VARINT_RANGE and e.field == "StreamChunk.seq"
    assert pb.decode(v1.StreamChunk, unhex("08ffffffff0f")).seq == 2 ** 32 - 1
    assert pb.decode(v1.StreamChunk, unhex("0881808080808080808000")).seq == 1  # padded, in range


def test_invalid_utf8_is_refused():
    for bad in ("c080", "eda080", "f4908080", "f5808080", "ff", "e282", "80", "61e28220", "edbfbf"):
        raw = unhex("1a%02x0a%02x" % (len(bad) // 2 + 2, len(bad) // 2) + bad)  # ToolDescriptor.name
        e = raises(pb.DecodeError, pb.decode, v1.Hello, raw)
        assert e.code == pb.UTF8 and e.field == "ToolDescriptor.name", (bad, e.code)
    for good in ("e282ac", "f09f9880", "f48fbfbf", "ee8080", "c2a9"):
        raw = unhex("1a%02x0a%02x" % (len(good) // 2 + 2, len(good) // 2) + good)
        assert pb.encode(pb.decode(v1.Hello, raw)) == raw


class Node(pb.Message):
    child = None


pbtable.table(Node, ((1, "child", 15, 0, Node, None, 0, 0),))


def _nested(n):
    b = b""
    for _ in range(n):
        b = b"\x0a" + bytes([len(b)]) + b
    return b


def test_nesting_deeper_than_the_limit_is_refused():
    assert pb.decode(Node, _nested(16)).child is not None
    assert raises(pb.DecodeError, pb.decode, Node, _nested(17)).code == pb.DEPTH


def test_encode_errors_are_typed():
    assert raises(pb.EncodeError, pb.encode, v1.Envelope(id=-1)).code == pb.RANGE
    assert raises(pb.EncodeError, pb.encode, v1.Envelope(id=2 ** 32)).code == pb.RANGE
    e = raises(pb.EncodeError, pb.encode, v1.Hello(display_name="a" * 65))
    assert e.code == pb.OVER_BOUND and e.field == "Hello.display_name"
    assert raises(pb.EncodeError, pb.encode, v1.Hello(tools=[v1.ToolDescriptor()] * 17)).code == pb.OVER_BOUND
    assert raises(pb.EncodeError, pb.encode_into, hello_vector(), bytearray(10), 0).code == pb.SPACE
    assert raises(pb.EncodeError, pb.encode, v1.Envelope(id="x")).code in (pb.TYPE, pb.RANGE)
    assert raises(pb.EncodeError, pb.encode, v1.Hello(display_name=b"x")).code == pb.TYPE


def _rand(state):
    # xorshift32: the same sequence on CPython and micropython (values kept < 2**32)
    x = state[0]
    x ^= (x << 13) & 0xFFFFFFFF
    x ^= x >> 17
    x ^= (x << 5) & 0xFFFFFFFF
    state[0] = x
    return x


def _mutate(b, state, most):
    # 1..most random edits of bytearray b: a bit flip, a truncation, an inserted byte, a replaced byte
    for _ in range(1 + _rand(state) % most):
        op = _rand(state) % 4
        pos = _rand(state) % (len(b) + 1)
        if op == 0 and b:
            b[pos % len(b)] ^= 1 << (_rand(state) % 8)
        elif op == 1:
            b = b[:pos]
        elif op == 2:
            b[pos:pos] = bytes([_rand(state) & 0xFF])
        elif b:
            b[pos % len(b)] = _rand(state) & 0xFF
    return b


def test_mutation_fuzz_never_escapes_a_typed_error():
    state = [0x2545F491]
    seeds = [unhex(h) for h in VECTORS]
    env = v1.Envelope()
    refused = 0
    for i in range(1500):
        b = _mutate(bytearray(seeds[i % len(seeds)]), state, 4)
        try:
            pb.decode_into(env, b)
        except pb.DecodeError as e:
            assert e.code != pb.INTERNAL, (bytes(b), e)
            refused += 1
            continue
        again = pb.decode(v1.Envelope, pb.encode(env))  # accepted input re-encodes and round-trips
        if env.unknown_op:
            assert again.op is None and again.unknown_op == 0
        else:
            assert again == env, (bytes(b), again, env)
    assert 100 < refused < 1500


def test_decode_into_reuses_instances():
    env = v1.Envelope()
    pb.decode_into(env, unhex(STREAM_CHUNK))
    sc = env.stream_chunk
    pb.decode_into(env, unhex(HELLO))
    assert env.stream_chunk is None and env.op == "hello" and env.id == 1
    pb.decode_into(env, unhex("42021007"))
    assert env.stream_chunk is sc and sc.seq == 0 and sc.capture_ts == 7 and env.id == 0 and env.hello is None


def test_zero_allocation_decoding_a_stream_chunk_into_a_reused_envelope():
    env = v1.Envelope()
    frame = bytearray(b"\x00\x00" + unhex(STREAM_CHUNK) + bytes(320))  # header inside a frame buffer
    n = 2 + len(unhex(STREAM_CHUNK))
    pb.decode_into(env, frame, 2, n)  # first use creates the sub-message
    pb.decode_into(env, frame, 2, n)
    d = mem_alloc_delta(pb.decode_into, env, frame, 2, n)
    assert env.op == "stream_chunk" and env.stream_chunk.seq == 5 and env.id == 7
    out = bytearray(32)
    pb.encode_into(env, out, 0)
    e = mem_alloc_delta(pb.encode_into, env, out, 0)
    if IS_MICROPYTHON:
        assert d == 0, d
        assert e == 0, e
    else:
        assert d is None


# --- the generated fast decoder (Envelope._D) against the table-driven one (pb.decode_generic) ---------

def _uv(v):
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _ld(key, body):
    return _uv(key) + _uv(len(body)) + body


# Values on both sides of every inline path: 1 and 2 bytes inline, 3..5 bytes below 2**30 through pb._vq,
# 2**30 and above (and 10-byte, over-long and over-range varints) left to the generic decoder.
EDGE = (0, 1, 127, 128, 16383, 16384, 2 ** 21, 2 ** 28, 2 ** 30 - 1, 2 ** 30, 2 ** 32 - 1, 2 ** 32, 2 ** 63,
        2 ** 64 - 1)


def _hot_seeds():
    s = []
    for v in EDGE:
        s.append(_uv(8) + _uv(v) + _ld(66, _uv(8) + _uv(v) + _uv(16) + _uv(v)))      # id, StreamChunk
        s.append(_ld(130, _uv(8) + _uv(v)) + _uv(8) + _uv(v))                          # CaptureAck, then id
    s += [
        unhex(STREAM_CHUNK),
        _ld(66, b"\x08\x05") + _ld(66, b"\x10\x07"),            # a repeated arm merges
        _ld(42, b"\x08\x01") + _ld(66, b"\x08\x02"),            # another arm, then a hot one: last wins
        _ld(66, b"\x08\x02") + _ld(130, b"\x08\x03"),            # two hot arms: last wins
        _ld(66, b"\x08\x02\x18\x09\x08\x03"),                    # an unknown field inside the chunk
        _ld(66, b"\x08\x02") + _ld(99, b"xy"),                   # an unknown arm after a known one
        _ld(99, b"xy") + _ld(66, b"\x08\x02"),                   # a known arm clears unknown_op
        b"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",         # 11-byte varint
        b"\x08" + _uv(2 ** 64 - 1) + b"\x42\x02\x08",            # arm length past the end
        b"\x42\x82\x00\x08\x05",                                 # a two-byte length
        b"\x42\x03\x08\x05",                                     # truncated arm
        b"\x42\x02\x0a\x00",                                     # wrong wire type inside the chunk
        b"\x82\x01\x02\x08\x80",                                 # truncated varint inside CaptureAck
        b"\x82\x02\x00\x08\x01",                                 # same first key byte, other field
        b"\x10\x01",                                             # Envelope field 2 as a varint
    ]
    return s


def _outcome(decode, env, raw):
    try:
        decode(env, raw, 0, len(raw))
    except pb.DecodeError as e:
        return (e.code, e.field)
    return None


def _same(fast_env, gen_env, raw):
    assert fast_env == gen_env, (raw, fast_env, gen_env)
    assert fast_env.op == gen_env.op and fast_env.unknown_op == gen_env.unknown_op, raw
    if fast_env.op is not None:
        assert getattr(fast_env, fast_env.op) == getattr(gen_env, gen_env.op), raw


def test_generated_decoder_matches_the_table_driven_decoder():
    assert v1.Envelope._D is not None and v1.Hello._D is None
    state = [0x1F2E3D4C]
    seeds = _hot_seeds()
    fast_env = v1.Envelope()   # one reused Envelope each, fed the same sequence: the pools are exercised too
    gen_env = v1.Envelope()
    checked = refused = 0
    for i in range(2400):
        b = bytearray(seeds[i % len(seeds)])
        if i >= len(seeds):
            b = _mutate(b, state, 3)
        raw = bytes(b)
        a = _outcome(pb.decode_into, fast_env, raw)
        g = _outcome(pb.decode_generic, gen_env, raw)
        assert a == g, (raw, a, g)
        if a is None:
            _same(fast_env, gen_env, raw)
            _same(pb.decode(v1.Envelope, raw), gen_env, raw)   # a fresh Envelope too
            checked += 1
        else:
            assert a[0] != pb.INTERNAL, (raw, a)
            refused += 1
    assert checked > 300 and refused > 300, (checked, refused)


def test_generated_decoder_reuses_the_hot_arms_without_allocating():
    env = v1.Envelope()
    chunk = bytearray(_uv(8) + _uv(300) + _ld(66, _uv(8) + _uv(2 ** 29) + _uv(16) + _uv(40000)))
    ack = bytearray(_ld(130, b"\x08\x02"))
    ping = bytearray(_ld(42, b"\x08\x01"))
    for raw in (chunk, ack, ping, chunk, ack, ping):  # warm-up: each arm's instance made once
        pb.decode_into(env, raw, 0, len(raw))
    total = 0
    for raw in (chunk, chunk, ack, chunk, ping, ack, ack, chunk):
        if IS_MICROPYTHON:
            total += mem_alloc_delta(pb.decode_into, env, raw, 0, len(raw))
        else:
            pb.decode_into(env, raw, 0, len(raw))
    assert env.op == "stream_chunk" and env.id == 300 and env.stream_chunk.seq == 2 ** 29
    assert env.stream_chunk.capture_ts == 40000 and env.ping is None and env.capture_ack is None
    pb.decode_into(env, ack, 0, len(ack))
    assert env.op == "capture_ack" and env.capture_ack.stored == 2 and env.stream_chunk is None and env.id == 0
    if IS_MICROPYTHON:
        assert total == 0, total
