# dual: cpython micropython
# The runtime's device behaviour on an in-memory session (no socket, no clock): what it sends for each
# situation, decoded on the core side. Requirement IDs in the names.
import rt_harness as H
from satellite.hal import PRESS, RELEASE, LONG
from satellite.wire import alabama_v1 as pb


def _ops(core):
    return [(e.op, e.id) for e, _ in H.sent(core)]


def _render(sat, core, rid=2, chunks=3):
    H.feed(sat.link, core, pb.Envelope(id=rid, media_render_open=pb.MediaRenderOpen(
        target=pb.CapabilityKind.CAPABILITY_SPEAKER, format=sat.rt.mic_format())))
    i = 0
    while i < chunks:
        H.feed(sat.link, core, pb.Envelope(id=rid, stream_chunk=pb.StreamChunk(seq=i)), bytes(640))
        i += 1


def test_r6_1_b_capture_chunks_fit_the_cores_max_frame_bytes():
    rt, sat, core, sink, hal = H.make(record_output=True, core_max=200)
    cid = sat.open_capture(pb.Trigger.BUTTON, ptt=True)
    sat.send_chunk(cid, sat.nframes)
    sat.send_chunk(cid, sat.nframes)
    from satellite.wire import frame as F
    got = H.sent(core)
    for e, t in got[2:]:
        from satellite.wire import pb as codec
        assert F.frame_total_len(codec.size(e), len(t)) <= 200
    assert len(got[2][1]) == 2 * ((200 - 24) // 2)


def test_r10_4_1_a_pipeline_state_never_drives_the_mic():
    rt, sat, core, sink, hal = H.make(record_output=True)
    cid = sat.open_capture(pb.Trigger.BUTTON, ptt=True)
    for ph in (0, 2, 3, 4):
        H.feed(sat.link, core, pb.Envelope(id=0, pipeline_state=pb.PipelineState(phase=ph)))
        assert sat.capture_id == cid and sat.mic_open
    assert sat.send_chunk(cid, 320)


def test_r10_4_1_b_idle_only_on_the_captures_terminal():
    rt, sat, core, sink, hal = H.make(record_output=True)
    sat.gesture(PRESS)
    cid = sat.capture_id
    sat.gesture(RELEASE)
    assert sat.pending == [cid] and not sat.capture_id
    _render(sat, core)
    H.feed(sat.link, core, pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))
    while sat.play_step():
        pass
    sat._render_done(2)
    assert sat.pending == [cid]                 # a finished render is not the exchange's end
    H.feed(sat.link, core, pb.Envelope(id=cid, response=pb.Response()))
    assert sat.pending == [] and not sat.busy()
    ops = _ops(core)
    assert ("stream_end", cid) in ops and ("playback_done", 2) in ops
    ends = [e for e, _ in H.sent(core)]
    assert ends == []


def test_r10_3_a_cancelled_render_stops_now_and_reports_frames_played():
    rt, sat, core, sink, hal = H.make(record_output=True)
    _render(sat, core, chunks=5)
    sat.play_step()
    sat.play_step()
    H.feed(sat.link, core, pb.Envelope(id=2, stream_cancel=pb.StreamCancel(reason=pb.StreamReason.BARGE_IN)))
    assert not sat.play_step()                  # nothing more reaches the speaker
    assert hal.played == 640
    got = [e for e, _ in H.sent(core) if e.op == "playback_done"]
    assert len(got) == 1 and got[0].id == 2 and got[0].playback_done.frames == 640
    # stragglers on the cancelled id are discarded silently (R10.3-b)
    H.feed(sat.link, core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=9)), bytes(640))
    assert H.sent(core) == [] and hal.played == 640


def test_r10_4_a_request_capture_declined_while_ptt_streams():
    rt, sat, core, sink, hal = H.make(record_output=True)
    sat.gesture(PRESS)
    H.sent(core)
    H.feed(sat.link, core, pb.Envelope(id=4, request_capture=pb.RequestCapture(correlation_ref="r")))
    got = [e for e, _ in H.sent(core)]
    assert len(got) == 1 and got[0].op == "error" and got[0].id == 4
    assert got[0].error.code == pb.ErrorCode.UNAVAILABLE


def test_r10_4_a_request_capture_accepted_echoes_correlation_ref():
    rt, sat, core, sink, hal = H.make(record_output=True)
    H.sent(core)
    H.feed(sat.link, core, pb.Envelope(id=4, request_capture=pb.RequestCapture(correlation_ref="enrol")))
    got = [e for e, _ in H.sent(core)]
    assert len(got) == 1 and got[0].op == "capture_open" and got[0].id % 2 == 1
    assert got[0].capture_open.correlation_ref == "enrol" and got[0].capture_open.trigger == pb.Trigger.REQUESTED


def test_r8_2_f_settings_write_applied_and_answered_on_its_id():
    rt, sat, core, sink, hal = H.make(record_output=True)
    H.sent(core)
    H.feed(sat.link, core, pb.Envelope(id=6, settings_write=pb.SettingsWrite(key="volume",
                                                                         value=pb.SettingValue(int_value=25))))
    H.feed(sat.link, core, pb.Envelope(id=8, settings_write=pb.SettingsWrite(key="volume",
                                                                         value=pb.SettingValue(int_value=500))))
    got = [e for e, _ in H.sent(core)]
    assert got[0].op == "setting_state" and got[0].id == 6 and got[0].setting_state.value.int_value == 25
    assert got[1].op == "error" and got[1].id == 8 and got[1].error.code == pb.ErrorCode.INVALID_REQUEST
    assert hal.vol == (25 * 25 * 16384) // 10000 and rt.settings["volume"] == 25
    assert b'"volume": 25' in rt.ks.files["settings.json"] or b'"volume":25' in rt.ks.files["settings.json"]


def test_stop_on_long_press_while_thinking():
    rt, sat, core, sink, hal = H.make(record_output=True)
    sat.gesture(PRESS)
    cid = sat.capture_id
    sat.gesture(RELEASE)
    H.sent(core)
    sat.gesture(PRESS)                        # thinking: opens nothing
    assert not sat.capture_id
    sat.gesture(LONG)
    sat.gesture(RELEASE)
    got = [(e.op, e.id) for e, _ in H.sent(core)]
    assert got == [("stop", 0), ("event", 0)]
    assert cid in sat.pending                    # still waits for the core's terminal


def test_r10_3_c_hello_advertises_the_one_render_a_speaker_holds():
    """The board file allows 4 streams, but one speaker plays one render at a time: the Hello says 1, so the
    core's second concurrent MediaRenderOpen draws TOO_MANY_STREAMS on its own id (spec §10.3), the first plays on,
    and UNAVAILABLE keeps its meaning: after the first stream's StreamEnd, while its audio still drains, a new
    render is momentarily out of reach."""
    rt, sat, core, sink, hal = H.make(record_output=True)
    assert H.BOARD["limits"]["max_concurrent_streams"] == 4
    assert rt.surface("").max_concurrent_streams == 1
    _render(sat, core, rid=2, chunks=2)
    H.feed(sat.link, core, pb.Envelope(id=4, media_render_open=pb.MediaRenderOpen(
        target=pb.CapabilityKind.CAPABILITY_SPEAKER, format=sat.rt.mic_format())))
    errs = [(e.id, e.error.code) for e, _ in H.sent(core) if e.op == "error"]
    assert errs == [(4, pb.ErrorCode.TOO_MANY_STREAMS)], errs
    assert sat.render_id == 2
    H.feed(sat.link, core, pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))
    H.feed(sat.link, core, pb.Envelope(id=6, media_render_open=pb.MediaRenderOpen(
        target=pb.CapabilityKind.CAPABILITY_SPEAKER, format=sat.rt.mic_format())))
    errs = [(e.id, e.error.code) for e, _ in H.sent(core) if e.op == "error"]
    assert errs[-1] == (6, pb.ErrorCode.UNAVAILABLE), errs
