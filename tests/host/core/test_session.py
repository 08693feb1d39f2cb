"""CoreSession, sans-IO: frames in, frames and events out (no sockets, no clock)."""
import pytest

from alabama.core import session as cs
from alabama.core import state as S
from alabama.core.errors import LocalProtocolError
from alabama.core.session import Admission, CoreSession
from alabama.core.testsat import (capture_open, decode_frames, env, event_desc, frame, hello, html_cap, mic_cap,
                                  setting_int, speaker_cap, text_cap, tool)
from alabama.v1 import operations_pb2 as ops, surface_pb2, content_pb2
from alabama.wire import frame as wire

E = ops.ErrorCode


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def make(trust="paired", closed=False, send_paired=False, **kw):
    clock = Clock()
    wall = iter(range(1_000_000, 10**12, 1000))

    def admit(surface):
        if closed:
            return Admission(Admission.REJECT_CLOSED)
        return Admission(Admission.ACCEPT, trust=trust, send_paired=send_paired)
    s = CoreSession(admit, clock=clock, wall_us=lambda: next(wall), **kw)
    s.clock_obj = clock
    return s


def feed(s, e, tail=b""):
    return s.receive_data(frame(e, tail))


def out(s):
    return decode_frames(s.data_to_send())


def opened(trust="paired", **hello_kw):
    s = make(trust=trust)
    feed(s, hello(**hello_kw))
    got = out(s)
    assert got[0][0].hello_response.WhichOneof("result") == "accepted"
    return s


def errors(frames):
    return [(e.id, ops.ErrorCode.Name(e.error.code)) for e, _ in frames if e.WhichOneof("op") == "error"]


def ops_of(frames):
    return [(e.WhichOneof("op"), e.id) for e, _ in frames]


# ------------------------------------------------------------------------------ hello / admission
def test_r6_1_a_hello_answered_with_accepted_on_its_id():
    s = make()
    evs = feed(s, hello(id_=1))
    got = out(s)
    assert ops_of(got) == [("hello_response", 1)]
    acc = got[0][0].hello_response.accepted
    assert (acc.max_frame_bytes, acc.max_concurrent_streams, acc.wire_version) == (65516, 8, 1)
    assert [type(e).__name__ for e in evs] == ["HelloAccepted"]
    assert s.report.clean


def test_r13_a_version_below_floor_gets_version_mismatch_and_close():
    s = make(min_wire_version=2)
    evs = feed(s, hello(id_=1, wire_version=1))
    got = out(s)
    vm = got[0][0].hello_response.version_mismatch
    assert (vm.server_version, vm.min_wire_version) == (cs.SERVER_WIRE_VERSION, 2)
    assert isinstance(evs[-1], cs.CloseConnection) and s.phase == "CLOSED"


def test_r13_a_wire_version_is_a_floor_not_an_exact_gate():
    s = make(min_wire_version=1)
    feed(s, hello(id_=1, wire_version=7))
    assert out(s)[0][0].hello_response.WhichOneof("result") == "accepted"


def test_r7_3_i_closed_mode_rejects_then_closes():
    s = make(closed=True)
    evs = feed(s, hello(id_=1))
    got = out(s)
    assert got[0][0].hello_response.rejected.reason == ops.REJECTED_CLOSED
    assert isinstance(evs[-1], cs.CloseConnection)


def test_r7_3_b_send_paired_follows_accepted():
    s = make(trust="paired", send_paired=True)
    feed(s, hello(id_=1))
    assert ops_of(out(s)) == [("hello_response", 1), ("paired", 0)]


def test_r6_1_a_handshake_frame_over_ceiling_closes():
    s = make()
    big = hello(id_=1)
    big.hello.display_name = "x" * 70000
    evs = s.receive_data(frame(big))
    assert isinstance(evs[-1], cs.CloseConnection)
    assert "R6.1-a" in s.report.rules()


def test_hello_first_frame_rule_reported():
    s = make()
    feed(s, env(1, "ping", t1=5))
    assert "hello_first" in s.report.checks()
    assert out(s) == []


def test_r8_2_d_duplicate_tool_names_reported():
    s = make()
    feed(s, hello(tools=[tool("a"), tool("a")]))
    assert "tool_names_unique" in s.report.checks()


def test_r8_2_a_params_must_match_kind():
    bad = surface_pb2.CapabilityDescriptor(kind=surface_pb2.CAPABILITY_SPEAKER,
                                           mic=surface_pb2.MicParams())
    s = make()
    feed(s, hello(caps=[bad]))
    assert "capability_params" in s.report.checks()


def test_r8_2_d_input_schema_must_be_json_schema():
    s = make()
    feed(s, hello(tools=[tool("t", schema="not json")]))
    assert "tool_input_schema" in s.report.checks()


# ------------------------------------------------------------------------------ ids
def test_r6_3_a_core_ids_even_from_2_step_2_wrap_never_0():
    s = opened()
    assert [s.mint_id() for _ in range(3)] == [2, 4, 6]
    s._next_id = 0xFFFFFFFE
    assert [s.mint_id(), s.mint_id()] == [0xFFFFFFFE, 2]


def test_r6_3_a_mint_skips_live_ids():
    s = opened()
    i = s.invoke  # noqa
    rid = s.request_capture("r1")
    assert rid == 2
    s._next_id = 2
    assert s.mint_id() == 4


def test_r6_3_a_even_id_from_satellite_reported_and_refused():
    s = opened()
    feed(s, capture_open(2))
    assert "id_parity" in s.report.checks()
    assert errors(out(s)) == [(2, "INVALID_REQUEST")]


# ------------------------------------------------------------------------------ streams
def test_r10_10_c_seq_from_0_by_one_gaps_tolerated_on_lossy():
    s = opened()
    feed(s, capture_open(3))
    feed(s, env(3, "stream_chunk", seq=0), b"\0\0")
    feed(s, env(3, "stream_chunk", seq=2), b"\0\0")   # gap: LIVE is LOSSY_OK
    assert s.report.clean
    feed(s, env(3, "stream_chunk", seq=1), b"\0\0")   # backwards
    assert s.report.rules() == {"R10.10-c"}


def test_r10_10_c_gap_on_reliable_deferred_reported():
    s = opened()
    feed(s, capture_open(3, mode=ops.DEFERRED, correlation_ref="rec-1"))
    feed(s, env(3, "stream_chunk", seq=0), b"\0\0")
    feed(s, env(3, "stream_chunk", seq=2), b"\0\0")
    assert s.report.rules() == {"R10.10-c"}


def test_r10_10_d_chunk_after_satellite_end_draws_stream_closed():
    s = opened()
    feed(s, capture_open(3))
    feed(s, env(3, "stream_end", reason=ops.PTT_RELEASE))
    out(s)
    feed(s, env(3, "stream_chunk", seq=0), b"\0\0")
    assert errors(out(s)) == [(3, "STREAM_CLOSED")]
    assert "chunk_after_end" in s.report.checks()


def test_r10_10_d_chunk_on_unknown_id_draws_unknown_stream():
    s = opened()
    feed(s, env(9, "stream_chunk", seq=0), b"\0\0")
    assert errors(out(s)) == [(9, "UNKNOWN_STREAM")]
    assert "unknown_stream" in s.report.checks()


def test_r10_3_b_chunks_in_flight_after_core_end_detected_are_discarded_silently():
    s = opened()
    feed(s, capture_open(3))
    s.end_capture(3)
    assert ops_of(out(s)) == [("stream_end", 3)]
    feed(s, env(3, "stream_chunk", seq=0), b"\0\0")
    assert out(s) == [] and s.report.clean
    s.clock_obj.t += 5
    feed(s, env(3, "stream_chunk", seq=1), b"\0\0")
    assert "chunk_after_end" in s.report.checks()


def test_r10_3_b_frames_after_cancel_discarded():
    s = opened()
    feed(s, capture_open(3))
    s.cancel_stream(3, ops.STOPPED)
    out(s)
    feed(s, env(3, "stream_chunk", seq=0), b"\0\0")
    assert out(s) == [] and s.report.clean


def test_r10_3_c_too_many_streams_on_the_new_id():
    s = make(max_concurrent_streams=2)
    feed(s, hello())
    out(s)
    feed(s, capture_open(3))
    feed(s, capture_open(5))
    feed(s, capture_open(7))
    assert errors(out(s)) == [(7, "TOO_MANY_STREAMS")]
    assert "R10.3-c" in s.report.rules()
    feed(s, env(7, "stream_chunk", seq=0), b"\0\0")    # refused id: discarded, not UNKNOWN_STREAM
    assert out(s) == []
    feed(s, env(3, "stream_end", reason=ops.COMPLETE))  # an ended stream no longer counts
    feed(s, capture_open(9))
    assert errors(out(s)) == []


def test_r10_3_c_core_respects_satellite_stream_limit():
    s = opened(max_concurrent_streams=1)
    fmt = s.surface.speaker_params().format
    rid = s.open_media_render(fmt)
    with pytest.raises(LocalProtocolError) as ei:
        s.open_media_render(fmt)
    assert ei.value.code == "TOO_MANY_STREAMS"
    s.end_stream(rid)
    s.open_media_render(fmt)


def test_r6_1_b_outgoing_chunks_fit_satellite_max_frame_bytes():
    s = opened(max_frame_bytes=300)
    rid = s.open_media_render(s.surface.speaker_params().format)
    n = s.send_stream_data(rid, bytes(range(256)) * 10)
    data = s.data_to_send()
    frames = decode_frames(data)
    assert n == len(frames) - 1 > 1
    dec = wire.FrameDecoder(300)
    dec.set_limit(300)
    dec.feed(data)
    sizes = [wire.frame_total_len(len(f.header), len(f.tail)) for f in dec]
    assert max(sizes) <= 300 and max(sizes) >= 290
    assert b"".join(t for e, t in frames) == bytes(range(256)) * 10
    assert [e.stream_chunk.seq for e, _ in frames[1:]] == list(range(n))


def test_r10_1_a_control_frames_overtake_queued_bulk_chunks():
    s = opened(max_frame_bytes=200)
    rid = s.open_media_render(s.surface.speaker_params().format)
    s.send_stream_data(rid, bytes(2000))
    first = decode_frames(s.next_frame())
    assert first[0][0].WhichOneof("op") == "media_render_open"
    decode_frames(s.next_frame())   # one chunk leaves
    feed(s, env(11, "ping", t1=1))   # a Ping arrives mid-transfer
    nxt = decode_frames(s.next_frame())[0][0]
    assert nxt.WhichOneof("op") == "ping_response"


def test_r6_1_c_oversize_frame_gets_frame_too_large_on_its_id():
    s = make(max_frame_bytes=1000)
    feed(s, hello())
    out(s)
    evs = feed(s, env(3, "stream_chunk", seq=0), bytes(5000))
    assert errors(out(s)) == [(3, "FRAME_TOO_LARGE")]
    assert "frame_too_large" in s.report.checks()
    feed(s, env(5, "ping", t1=1))   # the stream stays in sync after the skipped frame
    assert ops_of(out(s)) == [("ping_response", 5)]


def test_r6_a_header_len_over_total_closes():
    s = opened()
    evs = s.receive_data(b"\x03\x09\x00\x00")
    assert isinstance(evs[-1], cs.CloseConnection)


# ------------------------------------------------------------------------------ gating, terminals
def test_r8_2_c_event_for_undeclared_id_capability_missing():
    s = opened(events=[event_desc("button.press")])
    feed(s, env(3, "event", id="knob.turn"))
    assert errors(out(s)) == [(3, "CAPABILITY_MISSING")]
    assert "R8.2-c" in s.report.rules()


def test_r8_2_e_event_metadata_checked_against_schema():
    schema = '{"type":"object","properties":{"count":{"type":"integer","minimum":1}},"required":["count"]}'
    s = opened(events=[event_desc("button.press", schema)])
    evs = feed(s, env(0, "event", id="button.press", metadata='{"count": 2}'))
    assert [type(e).__name__ for e in evs] == ["EventReceived"] and s.report.clean
    feed(s, env(0, "event", id="button.press", metadata='{"count": 0}'))
    assert s.report.rules() == {"R8.2-e"}
    assert out(s) == []    # id 0: a notification is never answered (R10.10-b)


def test_r8_2_d_e_schemas_are_checked_by_the_jsonschema_library_and_hostile_ones_never_crash():
    """A schema of the wrong shape for its draft (a keyword of the wrong type) is reported (R8.2-d); metadata against
    a schema that refers outside itself (a remote $ref: nothing is fetched), one nested past the recursion limit,
    and keywords our old hand-written validator ignored (oneOf, format-free dependentRequired) are answered by
    problems, never an exception."""
    from alabama.core import schema as schemas
    s = make()
    feed(s, hello(tools=[tool("t", schema='{"type":"object","properties":{"n":{"minimum":"one"}}}')]))
    assert "tool_input_schema" in s.report.checks()
    assert schemas.validate({"a": 1}, {"$ref": "https://example.invalid/s.json"})
    deep = 1
    for _ in range(3000):
        deep = [deep]
    assert schemas.validate(deep, {"items": {"$ref": "#"}})
    assert schemas.validate({"a": 1}, {"dependentRequired": {"a": ["b"]}}) and \
        schemas.validate(5, {"oneOf": [{"type": "integer"}, {"minimum": 0}]})
    assert schemas.validate({"count": 2}, {"type": "object", "required": ["count"]}) == []


def test_r10_10_e_core_only_op_from_satellite_is_invalid_request():
    s = opened()
    feed(s, env(3, "invoke", name="x"))
    assert errors(out(s)) == [(3, "INVALID_REQUEST")]


def test_r8_2_b_core_never_sends_undeclared_capability():
    s = opened(caps=[mic_cap()])
    with pytest.raises(LocalProtocolError) as ei:
        s.open_media_render(content_pb2.AudioFormat())
    assert ei.value.code == "CAPABILITY_MISSING"
    with pytest.raises(LocalProtocolError):
        s.render(surface_pb2.CAPABILITY_TEXT_DISPLAY, [])
    with pytest.raises(LocalProtocolError):
        s.invoke("nope")


def test_r10_5_c_html_never_pushed_to_guest():
    s = opened(trust="guest", caps=[html_cap(), text_cap()])
    with pytest.raises(LocalProtocolError) as ei:
        s.render(surface_pb2.CAPABILITY_HTML_DISPLAY, [content_pb2.ContentBlock(text="<b>x</b>")])
    assert ei.value.code == "GUEST"
    s.render(surface_pb2.CAPABILITY_TEXT_DISPLAY, [content_pb2.ContentBlock(text="hi")])
    p = opened(trust="paired", caps=[html_cap()])
    p.render(surface_pb2.CAPABILITY_HTML_DISPLAY, [content_pb2.ContentBlock(text="<b>x</b>")])


def test_r10_8_a_invoke_gets_one_terminal_second_is_reported():
    s = opened(tools=[tool("screen.capture")])
    iid = s.invoke("screen.capture")
    assert iid % 2 == 0
    evs = feed(s, env(iid, "tool_result", content=[{"text": "ok"}]))
    assert [type(e).__name__ for e in evs] == ["TerminalReceived"] and s.report.clean
    feed(s, env(iid, "tool_result"))
    assert "terminal_twice" in s.report.checks()


def test_r10_8_a_core_answers_capture_exactly_once():
    s = opened()
    feed(s, capture_open(3))
    s.end_capture(3)
    s.respond(3)
    with pytest.raises(LocalProtocolError):
        s.respond(3)
    with pytest.raises(LocalProtocolError):
        s.fail(3, E.INTERNAL_ERROR)


def test_r10_8_a_missing_terminal_reported_after_timeout():
    s = opened(tools=[tool("t")])
    s.invoke("t")
    s.clock_obj.t += cs.TERMINAL_TIMEOUT_S + 1
    s.tick()
    assert "no_terminal" in s.report.checks()


def test_r10_4_a_request_capture_answered_by_echoing_capture_open():
    s = opened()
    rid = s.request_capture("enroll-1")
    evs = feed(s, capture_open(3, trigger=ops.REQUESTED, correlation_ref="enroll-1"))
    names = [type(e).__name__ for e in evs]
    assert names == ["TerminalReceived", "CaptureOpened"]
    assert evs[1].request_id == rid and s.report.clean


def test_r8_2_f_settings_write_declared_key_answered_on_same_id():
    s = opened(settings=[setting_int("volume")])
    with pytest.raises(LocalProtocolError):
        s.settings_write("brightness", surface_pb2.SettingValue(int_value=1))
    with pytest.raises(LocalProtocolError):
        s.settings_write("volume", surface_pb2.SettingValue(int_value=101))
    wid = s.settings_write("volume", surface_pb2.SettingValue(int_value=30))
    evs = feed(s, env(wid, "setting_state", key="volume", value={"int_value": 30}))
    assert evs[0].op == "setting_state" and s.report.clean
    evs = feed(s, env(0, "setting_state", key="volume", value={"int_value": 31}))
    assert type(evs[0]).__name__ == "SettingReported"


def test_r10_2_a_ping_response_stamps_and_offset():
    s = opened()
    feed(s, env(5, "ping", t1=42))
    pr = out(s)[0][0]
    assert pr.id == 5 and pr.ping_response.t1 == 42 and pr.ping_response.t2 < pr.ping_response.t3
    pid = s.ping()
    t1 = out(s)[0][0].ping.t1
    # satellite clock = core clock + 500_000 us, 500 us each way; t4 = t1 + 1000 (the stub steps 1000 us)
    evs = feed(s, env(pid, "ping_response", t1=t1, t2=t1 + 500_000 + 500, t3=t1 + 500_000 + 500))
    rnd = [e for e in evs if type(e).__name__ == "PingRound"][0]
    assert rnd.offset_us == 500_000 and rnd.rtt_us == 1000
    assert s.clock_offset_us == 500_000


def test_r10_10_b_id_zero_notification_not_answered():
    s = opened()
    feed(s, env(0, "ping", t1=1))
    assert out(s) == []


def test_r2_2_b_unknown_arm_ignored():
    s = opened()
    raw = bytes([0x08, 0x03, 0xFA, 0x3E, 0x00])   # id 3, field 1007 (length-delimited, empty)
    evs = s.receive_data(wire.encode_frame(raw))
    assert evs == [] and out(s) == [] and s.phase == "OPEN" and s.report.clean


def test_r2_2_a_unknown_field_inside_known_op_tolerated():
    s = opened()
    e = env(5, "ping", t1=9).SerializeToString() + bytes([0xF8, 0x3E, 0x01])  # field 999 varint on the Envelope
    s.receive_data(wire.encode_frame(e))
    assert ops_of(out(s)) == [("ping_response", 5)]


def test_state_table_missing_entry_raises():
    with pytest.raises(KeyError):
        S.step(S.CAPTURE, S.ENDED, S.SAT, S.CHUNK)
    assert S.step(S.MEDIA_RENDER, S.CANCELLED, S.SAT, S.TERMINAL) == S.DONE


def test_feed_byte_by_byte_equals_whole():
    data = frame(hello()) + frame(capture_open(3)) + frame(env(3, "stream_chunk", seq=0), b"ab")
    a, b = make(), make()
    ea = a.receive_data(data)
    eb = []
    for i in range(len(data)):
        eb += b.receive_data(data[i:i + 1])
    assert [type(e).__name__ for e in ea] == [type(e).__name__ for e in eb]
    assert a.data_to_send() == b.data_to_send()


@pytest.mark.parametrize("cap,check,words", [
    (surface_pb2.CapabilityDescriptor(kind=surface_pb2.CAPABILITY_SPEAKER,
                                      speaker=surface_pb2.SpeakerParams(buffer_ms=200)),
     "speaker_format", "has no format"),
    (speaker_cap(rate=0), "speaker_format", "sample_rate 0"),
    (surface_pb2.CapabilityDescriptor(kind=surface_pb2.CAPABILITY_MIC, mic=surface_pb2.MicParams()),
     "mic_format", "has no format"),
    (mic_cap(rate=0), "mic_format", "sample_rate 0"),
])
def test_r8_2_a_speaker_or_mic_without_a_usable_format_is_named(cap, check, words):
    """A SPEAKER (or MIC) with no format, or a zero rate, is a malformed surface: the report names the check
    and says what is wrong (declared formats are exact, spec §8.2; the core resamples to them)."""
    s = make()
    feed(s, hello(caps=[cap]))
    v = [x for x in s.report.violations if x.check == check]
    assert v and words in v[0].detail and v[0].rule == "R8.2-a", s.report.to_json()


def test_r8_2_a_well_formed_speaker_and_mic_are_not_reported():
    s = make()
    feed(s, hello(caps=[speaker_cap(rate=24000), mic_cap()]))
    assert not {"speaker_format", "mic_format", "capability_params"} & set(s.report.checks())


def test_r2_2_b_every_envelope_arm_has_a_handler_or_is_core_only_and_a_missing_one_is_no_crash(monkeypatch):
    """The core's op table covers the schema: each Envelope oneof arm is handled (satellite -> core) or core-only,
    never both, so a new arm added to the .proto without a handler fails here, not as a KeyError on a live
    connection; and should one slip through, the frame is ignored like an unknown arm (R2.2-b)."""
    from alabama.v1 import envelope_pb2
    arms = {f.name for f in envelope_pb2.Envelope.DESCRIPTOR.oneofs_by_name["op"].fields}
    assert set(cs._OPS) | cs.CORE_ONLY_OPS == arms, sorted(arms ^ (set(cs._OPS) | cs.CORE_ONLY_OPS))
    assert not set(cs._OPS) & cs.CORE_ONLY_OPS
    s = opened()
    monkeypatch.delitem(cs._OPS, "presence")
    assert feed(s, env(0, "presence")) == [] and s.phase == cs.PHASE_OPEN
