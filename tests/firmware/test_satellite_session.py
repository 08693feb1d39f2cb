# dual: cpython micropython
# The satellite session state machine (sans-IO): ids, streams, terminals, limits, forward compatibility.
from mpsupport import raises, mem_alloc_delta, IS_MICROPYTHON
from satellite.wire import alabama_v1 as pb
from satellite import session as S

CK = pb.CapabilityKind
EC = pb.ErrorCode
SR = pb.StreamReason


def fmt(rate):
    return pb.AudioFormat(encoding=pb.Encoding.PCM_S16LE, sample_rate=rate, channels=1, sample_bits=16)


def surface(max_streams=2, settings=True):
    caps = [
        pb.CapabilityDescriptor(kind=CK.CAPABILITY_MIC, mic=pb.MicParams(format=fmt(16000))),
        pb.CapabilityDescriptor(kind=CK.CAPABILITY_SPEAKER, speaker=pb.SpeakerParams(format=fmt(24000), buffer_ms=200)),
    ]
    tools = [pb.ToolDescriptor(name="device.info", description="info", input_schema="{}"),
             pb.ToolDescriptor(name="device.set_volume", description="vol", input_schema='{"type":"object"}')]
    events = [pb.EventDescriptor(id="button.double_press")]
    sets = [pb.SettingDescriptor(key="volume", type=pb.SettingType.SETTING_INT, min=0, max=100)] if settings else []
    return S.Surface(caps, tools, events, sets, max_frame_bytes=4096, max_concurrent_streams=max_streams)


def active(max_streams=2, core_streams=0):
    s = S.Session(surface(max_streams))
    s.hello()
    ev = s.receive(pb.Envelope(id=1, hello_response=pb.HelloResponse(
        accepted=pb.Accepted(max_frame_bytes=8192, max_concurrent_streams=core_streams))))
    assert isinstance(ev, S.Accepted)
    return s


def replies(s):
    out = []
    while True:
        e = s.outgoing()
        if e is None:
            return out
        out.append(e)


def only_error(s, id, code):
    out = replies(s)
    assert len(out) == 1, out
    assert out[0].op == "error" and out[0].id == id and out[0].error.code == code, (out[0].op, out[0].id)


def test_hello_carries_surface_and_wire_version_field_1():
    s = S.Session(surface())
    env = s.hello()
    assert env.op == "hello" and env.id == 1
    h = env.hello
    assert h.wire_version == S.WIRE_VERSION == 1
    assert [c.kind for c in h.capabilities] == [CK.CAPABILITY_MIC, CK.CAPABILITY_SPEAKER]
    assert h.max_frame_bytes == 4096 and h.max_concurrent_streams == 2
    # field 1 on the wire: the first byte of the encoded Hello is tag (1 << 3) | varint
    from satellite.wire import pb as rt
    assert rt.encode(h)[0] == 0x08


def test_r8_2_d_duplicate_tool_names_refused():
    t = pb.ToolDescriptor(name="x")
    e = raises(S.SessionError, S.Surface, [], [t, pb.ToolDescriptor(name="x")])
    assert e.code == "DUPLICATE_TOOL"


def test_r6_3_a_satellite_ids_odd_from_1_step_2_wrap_never_0():
    s = active()
    ids = [s.open_capture(pb.Trigger.BUTTON).id]
    s._streams.clear()
    ids.append(s.ping(0).id)
    assert ids == [3, 5]  # Hello took 1
    s._next_id = 0xFFFFFFFD
    a = s.ping(0).id
    b = s.ping(0).id
    c = s.ping(0).id
    assert (a, b, c) == (0xFFFFFFFD, 0xFFFFFFFF, 1)
    for i in (a, b, c):
        assert i & 1 and i != 0


def test_accepted_limits_default_when_zero():
    s = active(core_streams=0)
    assert s.peer_max_streams == S.DEFAULT_MAX_STREAMS == 8
    s2 = S.Session(surface())
    s2.hello()
    s2.receive(pb.Envelope(id=1, hello_response=pb.HelloResponse(accepted=pb.Accepted())))
    assert s2.peer_max_frame_bytes == 65516


def test_version_mismatch_and_rejected_close_the_session():
    s = S.Session(surface())
    s.hello()
    ev = s.receive(pb.Envelope(id=1, hello_response=pb.HelloResponse(
        version_mismatch=pb.VersionMismatch(server_version=3, min_wire_version=2, message="update"))))
    assert isinstance(ev, S.VersionMismatch) and ev.server_version == 3 and s.state == S.CLOSED
    s = S.Session(surface())
    s.hello()
    ev = s.receive(pb.Envelope(id=1, hello_response=pb.HelloResponse(
        rejected=pb.Rejected(reason=pb.RejectReason.REJECTED_CLOSED))))
    assert isinstance(ev, S.Rejected) and ev.reason == pb.RejectReason.REJECTED_CLOSED
    assert s.state == S.CLOSED
    raises(S.SessionError, s.open_capture, pb.Trigger.BUTTON)


def test_frames_before_hello_response_end_the_session():
    s = S.Session(surface())
    s.hello()
    e = raises(S.ProtocolViolation, s.receive, pb.Envelope(id=2, invoke=pb.Invoke(name="device.info")))
    assert e.code == "BEFORE_HELLO_RESPONSE"


def test_r6_3_b_r10_10_a_voice_exchange_4_1_frames_carry_the_open_id_and_terminal_answers_on_it():
    s = active()
    env = s.open_capture(pb.Trigger.WAKEWORD, format=fmt(16000))
    cid = env.id
    assert env.op == "capture_open" and env.capture_open.trigger == pb.Trigger.WAKEWORD
    assert env.capture_open.correlation_ref == ""  # R10.4-e: LIVE carries none
    seqs = [s.chunk(cid).stream_chunk.seq for _ in range(3)]
    assert seqs == [0, 1, 2]  # R10.10-c
    ev = s.receive(pb.Envelope(id=cid, stream_end=pb.StreamEnd(reason=SR.END_DETECTED)))
    assert isinstance(ev, S.CaptureEnded) and ev.reason == SR.END_DETECTED
    assert s.chunk(cid) is None  # R10.10-d: no chunk after end
    # render on id 2
    ev = s.receive(pb.Envelope(id=2, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER, format=fmt(24000))))
    assert isinstance(ev, S.RenderOpen) and ev.id == 2
    for q in range(2):
        ev = s.receive(pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=q)))
        assert isinstance(ev, S.RenderChunk) and ev.seq == q and ev.gap == 0
    assert isinstance(s.receive(pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=SR.COMPLETE))), S.RenderEnded)
    done = s.playback_done(2, 9600)
    assert done.id == 2 and done.playback_done.frames == 9600  # R6.3-b: the terminal answers on the id
    ev = s.receive(pb.Envelope(id=cid, response=pb.Response()))
    assert isinstance(ev, S.CaptureDone) and ev.ok and ev.id == cid
    assert replies(s) == []


def test_r10_4_1_b_capture_idle_only_on_its_terminal():
    s = active()
    cid = s.open_capture(pb.Trigger.BUTTON).id
    s.end_capture(cid, SR.PTT_RELEASE)
    # a whole render coming and going does not finish the capture
    s.receive(pb.Envelope(id=2, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER)))
    s.receive(pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=SR.COMPLETE)))
    s.playback_done(2, 10)
    assert cid in s._streams
    ev = s.receive(pb.Envelope(id=cid, error=pb.Error(code=EC.INTERNAL_ERROR, message="x")))
    assert isinstance(ev, S.CaptureDone) and not ev.ok and ev.code == EC.INTERNAL_ERROR
    assert cid not in s._streams


def test_r10_4_1_a_pipeline_state_never_drives_the_mic():
    s = active()
    cid = s.open_capture(pb.Trigger.BUTTON).id
    for ph in (pb.PipelineState.IDLE, pb.PipelineState.PROCESSING, pb.PipelineState.ERROR):
        ev = s.receive(pb.Envelope(id=0, pipeline_state=pb.PipelineState(phase=ph)))
        assert isinstance(ev, S.Phase) and ev.phase == ph
    assert s.chunk(cid) is not None  # still streaming


def test_barge_in_4_3_render_cancel_then_playback_done():
    s = active()
    s.receive(pb.Envelope(id=2, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER)))
    s.receive(pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=0)))
    new = s.open_capture(pb.Trigger.WAKEWORD).id
    assert new == 3
    ev = s.receive(pb.Envelope(id=2, stream_cancel=pb.StreamCancel(reason=SR.BARGE_IN)))
    assert isinstance(ev, S.RenderCancelled) and ev.reason == SR.BARGE_IN
    assert s.playback_done(2, 3200).playback_done.frames == 3200


def test_r10_3_a_b_cancelled_id_dead_and_stragglers_discarded_silently():
    s = active()
    s.receive(pb.Envelope(id=2, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER)))
    s.receive(pb.Envelope(id=2, stream_cancel=pb.StreamCancel(reason=SR.BARGE_IN)))
    assert s.receive(pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=5))) is None
    s.receive(pb.Envelope(id=2, stream_end=pb.StreamEnd()))
    assert replies(s) == []
    # our own cancel: dead at once, no terminal awaited, no chunk possible
    cid = s.open_capture().id
    s.cancel_capture(cid, SR.STOPPED)
    assert s.chunk(cid) is None and cid not in s._streams


def test_r10_10_d_chunk_after_end_draws_stream_closed_and_unknown_stream():
    s = active()
    s.receive(pb.Envelope(id=2, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER)))
    s.receive(pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=SR.COMPLETE)))
    assert s.receive(pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=1))) is None
    only_error(s, 2, EC.STREAM_CLOSED)
    assert s.receive(pb.Envelope(id=40, stream_chunk=pb.StreamChunk(seq=0))) is None
    only_error(s, 40, EC.UNKNOWN_STREAM)


def test_r10_10_c_render_gaps_tolerated_and_counted():
    s = active()
    s.receive(pb.Envelope(id=2, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER)))
    s.receive(pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=0)))
    ev = s.receive(pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=3)))
    assert ev.gap == 2 and ev.seq == 3
    assert replies(s) == []


def test_r10_3_c_render_streams_over_our_limit_draw_too_many_streams():
    s = active(max_streams=2)
    for i in (2, 4):
        assert isinstance(s.receive(pb.Envelope(id=i, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER))), S.RenderOpen)
    assert s.receive(pb.Envelope(id=6, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER))) is None
    only_error(s, 6, EC.TOO_MANY_STREAMS)
    # a stream counts until its StreamEnd, not until its terminal
    s.receive(pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=SR.COMPLETE)))
    assert isinstance(s.receive(pb.Envelope(id=8, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER))), S.RenderOpen)


def test_r10_3_c_capture_opens_respect_the_core_limit():
    s = active(core_streams=1)
    cid = s.open_capture(pb.Trigger.BUTTON).id
    e = raises(S.SessionError, s.open_capture, pb.Trigger.BUTTON)
    assert e.code == "TOO_MANY_STREAMS"
    s.end_capture(cid, SR.PTT_RELEASE)
    s.open_capture(pb.Trigger.BUTTON)


def test_r10_4_a_request_capture_accept_echoes_correlation_ref():
    s = active()
    ev = s.receive(pb.Envelope(id=4, request_capture=pb.RequestCapture(correlation_ref="enrol-1")))
    assert isinstance(ev, S.CaptureRequested) and ev.correlation_ref == "enrol-1"
    env = s.accept_request(4, format=fmt(16000))
    assert env.op == "capture_open" and env.id & 1 and env.id != 4
    assert env.capture_open.correlation_ref == "enrol-1" and env.capture_open.trigger == pb.Trigger.REQUESTED
    raises(S.SessionError, s.accept_request, 4)  # exactly one answer


def test_r10_4_a_request_capture_decline_is_unavailable_on_r():
    s = active()
    s.receive(pb.Envelope(id=6, request_capture=pb.RequestCapture(correlation_ref="x")))
    env = s.decline(6)
    assert env.id == 6 and env.error.code == EC.UNAVAILABLE
    raises(S.SessionError, s.accept_request, 6)


def test_r10_4_e_live_capture_carries_no_correlation_ref():
    s = active()
    raises(S.SessionError, s.open_capture, pb.Trigger.BUTTON, pb.CaptureMode.LIVE, None, "ref")
    env = s.open_capture(pb.Trigger.BUTTON, pb.CaptureMode.DEFERRED, None, "ref")
    assert env.capture_open.correlation_ref == "ref"


def test_r10_5_b_undeclared_ops_draw_capability_missing_and_html_is_never_rendered():
    s = S.Session(S.Surface([], max_concurrent_streams=1))
    s.hello()
    s.receive(pb.Envelope(id=1, hello_response=pb.HelloResponse(accepted=pb.Accepted())))
    s.receive(pb.Envelope(id=2, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER)))
    only_error(s, 2, EC.CAPABILITY_MISSING)
    s.receive(pb.Envelope(id=4, request_capture=pb.RequestCapture()))
    only_error(s, 4, EC.CAPABILITY_MISSING)
    s.receive(pb.Envelope(id=6, render=pb.Render(target=CK.CAPABILITY_TEXT_DISPLAY)))
    only_error(s, 6, EC.CAPABILITY_MISSING)
    s.receive(pb.Envelope(id=8, render=pb.Render(target=CK.CAPABILITY_HTML_DISPLAY,
                                                 content=[pb.ContentBlock(text="<script>x</script>")])))
    only_error(s, 8, EC.CAPABILITY_MISSING)
    # and the firmware refuses to declare a surface it cannot sandbox
    html = pb.CapabilityDescriptor(kind=CK.CAPABILITY_HTML_DISPLAY, html_display=pb.HtmlDisplayParams())
    assert raises(S.SessionError, S.Surface, [html]).code == "NO_HTML_SANDBOX"


def test_r8_2_a_capability_params_must_match_kind():
    bad = pb.CapabilityDescriptor(kind=CK.CAPABILITY_SPEAKER, mic=pb.MicParams(format=fmt(16000)))
    assert raises(S.SessionError, S.Surface, [bad]).code == "BAD_PARAMS"
    none = pb.CapabilityDescriptor(kind=CK.CAPABILITY_MIC)
    assert raises(S.SessionError, S.Surface, [none]).code == "BAD_PARAMS"
    S.Surface([pb.CapabilityDescriptor(kind=CK.CAPABILITY_TOOL_ACTIVITY)])


def test_r10_10_a_tool_call_4_2_and_error_4_5_answer_on_the_invoke_id():
    s = active()
    ev = s.receive(pb.Envelope(id=4, invoke=pb.Invoke(name="device.info", arguments="{}")))
    assert isinstance(ev, S.ToolCall) and ev.id == 4 and ev.name == "device.info"
    r = s.tool_result(4, [pb.ContentBlock(text="ok")])
    assert r.id == 4 and r.op == "tool_result"  # R10.10-a: answered on the originator's id
    s.receive(pb.Envelope(id=8, invoke=pb.Invoke(name="screen.capture")))
    only_error(s, 8, EC.CAPABILITY_MISSING)
    assert s.receive(pb.Envelope(id=10, invoke=pb.Invoke(name="device.info", observe=True))).why == "observe copy"
    assert replies(s) == []


def test_r8_2_f_settings_write_declared_only_and_answered_on_its_id():
    s = active()
    ev = s.receive(pb.Envelope(id=4, settings_write=pb.SettingsWrite(key="volume", value=pb.SettingValue(int_value=30))))
    assert isinstance(ev, S.SettingWrite) and ev.value.int_value == 30
    st = s.setting_state(4, "volume", pb.SettingValue(int_value=30))
    assert st.id == 4 and st.setting_state.key == "volume"
    spont = s.setting_state(0, "volume", pb.SettingValue(int_value=31))
    assert spont.id == 0
    s.receive(pb.Envelope(id=6, settings_write=pb.SettingsWrite(key="nope")))
    only_error(s, 6, EC.CAPABILITY_MISSING)
    raises(S.SessionError, s.setting_state, 0, "nope", pb.SettingValue())


def test_r10_10_b_notifications_never_answered():
    s = active()
    s.receive(pb.Envelope(id=0, ping=pb.Ping(t1=5)))
    s.receive(pb.Envelope(id=0, invoke=pb.Invoke(name="nope")))
    s.receive(pb.Envelope(id=0, stream_chunk=pb.StreamChunk()))
    s.receive(pb.Envelope(id=0, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER)))
    assert replies(s) == []


def test_r6_3_a_core_ids_must_be_even():
    s = active()
    s.receive(pb.Envelope(id=5, invoke=pb.Invoke(name="device.info")))
    only_error(s, 5, EC.INVALID_REQUEST)


def test_r10_2_a_ping_answered_on_its_id_with_timestamps_and_offset_computed():
    s = active()
    assert s.receive(pb.Envelope(id=6, ping=pb.Ping(t1=1000)), 5000) is None
    out = replies(s)
    assert len(out) == 1 and out[0].id == 6 and out[0].op == "ping_response"
    pr = out[0].ping_response
    assert (pr.t1, pr.t2, pr.t3) == (1000, 5000, 5000)
    p = s.ping(100)
    # core clock is +1000 ahead; 40 us each way; 20 us of core processing
    ev = s.receive(pb.Envelope(id=p.id, ping_response=pb.PingResponse(t1=100, t2=1140, t3=1160)), 200)
    assert isinstance(ev, S.ClockSync) and ev.offset_us == 1000 and ev.rtt_us == 80


def test_r2_2_b_unknown_operation_ignored_and_session_carries_on():
    s = active()
    env = pb.Envelope(id=2)
    env.unknown_op = 99
    ev = s.receive(env)
    assert isinstance(ev, S.Ignored) and ev.why == "unknown operation"
    assert s.state == S.ACTIVE and replies(s) == []


def test_paired_event_and_wrong_direction_ops():
    s = active()
    assert isinstance(s.receive(pb.Envelope(id=0, paired=pb.Paired())), S.Paired)
    s.receive(pb.Envelope(id=2, capture_open=pb.CaptureOpen()))
    only_error(s, 2, EC.INVALID_REQUEST)


def test_stop_has_no_id():
    s = active()
    env = s.stop()
    assert env.id == 0 and env.op == "stop"


def test_hot_paths_allocate_nothing():
    s = active()
    cid = s.open_capture(pb.Trigger.BUTTON).id
    s.receive(pb.Envelope(id=2, media_render_open=pb.MediaRenderOpen(target=CK.CAPABILITY_SPEAKER)))
    incoming = pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=0))

    def steady():
        for i in range(100):
            s.chunk(cid)
            incoming.stream_chunk.seq = i
            s.receive(incoming, 0)

    steady()
    d = mem_alloc_delta(steady)
    if IS_MICROPYTHON:
        assert d == 0, d
