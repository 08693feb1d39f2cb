# dual: cpython micropython
# Firmware Envelope codec (satellite/wire/pb.py + generated alabama_v1.py) on CPython and micropython:
# exact bytes (vectors from google-protobuf), forward compatibility, malformed input -> typed errors.
from mpsupport import IS_MICROPYTHON, mem_alloc_delta, raises, unhex

from satellite.wire import alabama_v1 as v1, pb

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


pb.table(Node, ((1, "child", 15, 0, Node, None, 0, 0),))


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


def test_mutation_fuzz_never_escapes_a_typed_error():
    state = [0x2545F491]
    seeds = [unhex(h) for h in VECTORS]
    env = v1.Envelope()
    refused = 0
    for i in range(1500):
        b = bytearray(seeds[i % len(seeds)])
        for _ in range(1 + _rand(state) % 4):
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
