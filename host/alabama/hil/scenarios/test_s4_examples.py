"""Spec §4, "Protocol by example": every listing, played by the board under test against the reference core.

Each scenario asserts the frames the listing shows (direction, operation, id parity, terminals on the
right id), what the board did with the audio (PlaybackDone frames against what was sent and played),
and that the core's conformance report for the session is empty.
"""
import json
import time
import wave

import pytest

from alabama.hil import measures, steps
from alabama.hil.timeline import CORE_TO_SAT, SAT_TO_CORE
from alabama.v1 import operations_pb2 as ops


def _boot_paired(hil, **core):
    """Core up, board pre-provisioned (IK, registered as paired): tools may be invoked."""
    hil.start_core(**core)
    hil.provision("ik", preconfigure=True)
    return hil.boot()


def _check_capture(hil, co, m):
    c = co.env.capture_open
    assert co.id % 2 == 1, "the board minted an even id %d for its CaptureOpen (R6.3-a)" % co.id
    assert c.kind == ops.AUDIO and c.mode == ops.LIVE, "CaptureOpen is not AUDIO/LIVE: %s" % co.summary
    assert c.format.sample_rate == 16000 and c.format.channels == 1, "capture format %s" % co.summary
    sq = steps.seqs(hil, SAT_TO_CORE, co.id, m)
    assert sq, "no StreamChunk on capture %d" % co.id
    assert sq[0] == 0 and sq == list(range(len(sq))), "capture seq must start at 0 and step by 1: %s" % sq[:20]


def _check_render(hil, ex):
    ro, done = ex["ro"], ex["done"]
    assert ro.id % 2 == 0
    sent = steps.sent_render_bytes(hil, ro.id)
    frames = done.env.playback_done.frames
    assert frames * 2 == sent, ("PlaybackDone on render %d reports %d frames; the core sent %d frames (%d bytes) "
                                "and ended the stream with COMPLETE" % (ro.id, frames, sent // 2, sent))
    return frames


@pytest.mark.spec("§4.1", "R6.3-a", "R6.3-b", "R10.8-a", "R10.10-c", "R10.4.1-b")
@pytest.mark.needs("mic", "speaker")
def test_4_1_voice_exchange(hil):
    """§4.1 end to end: CaptureOpen, mic chunks seq 0.., the core's StreamEnd{END_DETECTED} closes the mic,
    MediaRenderOpen + chunks + StreamEnd{COMPLETE}, PlaybackDone{frames} = what was sent, Response on the
    capture id; the board plays exactly what it was sent."""
    _boot_paired(hil)
    hil.sample_heap()
    wav = steps.utterance_wav(hil.workdir / "utterance.wav")
    hil.target.set_mic(wav)
    ex = steps.requested_exchange(hil, "exchange-1")
    co, end, m = ex["co"], ex["end"], ex["mark"]
    assert end.env.stream_end.reason == ops.END_DETECTED
    _check_capture(hil, co, m)
    late = [e for e in hil.tl.find(SAT_TO_CORE, "stream_chunk", co.id, m) if e.t > end.t + 0.5]
    assert not late, "the board kept streaming %d chunks more than 0.5 s after END_DETECTED" % len(late)
    frames = _check_render(hil, ex)
    hil.expect_none(CORE_TO_SAT, "response", co.id, after=hil.tl.index_of(ex["resp"]) + 1, within=0.5,
                    what="a second Response")
    hil.measure("reply_latency_ms", 1000 * measures.reply_latency(hil.tl, co.id))
    for _, d in measures.exchanges(hil.tl):
        hil.measure("exchange_ms", 1000 * d)
    played = hil.target.played_frames()
    if played is not None:
        assert played == frames, "the speaker output holds %d samples, PlaybackDone said %d" % (played, frames)
    hil.sample_heap()
    hil.assert_conformant()


@pytest.mark.spec("§4.1", "R10.8-a", "R10.4.1-b")
@pytest.mark.needs("button", "mic", "speaker")
def test_4_1_push_to_talk(hil):
    """§4.1, push-to-talk variant: the button opens CaptureOpen{BUTTON}, its release sends
    StreamEnd{PTT_RELEASE} (the one case the satellite ends its own capture); the exchange completes."""
    hil.start_core()
    hil.provision("ik")
    hil.boot()
    wav = steps.utterance_wav(hil.workdir / "utterance.wav", speech_ms=600, silence_ms=200)
    ex = steps.ptt_exchange(hil, wav)
    co = ex["co"]
    assert co.env.capture_open.trigger == ops.BUTTON
    assert ex["end"].env.stream_end.reason == ops.PTT_RELEASE
    _check_capture(hil, co, ex["mark"])
    _check_render(hil, ex)
    hil.measure("reply_latency_ms", 1000 * measures.reply_latency(hil.tl, co.id))
    hil.assert_conformant()


@pytest.mark.spec("§4.2", "R10.8-a", "R10.10-a")
@pytest.mark.needs("mic", "speaker")
def test_4_2_tool_call_mid_exchange(hil):
    """§4.2: mid-exchange the core invokes the device tool `device.info` (even id); the board answers a
    ToolResult on the same id (valid JSON content); the exchange's capture id is untouched and still ends
    with one Response."""
    brain = steps.ToolBrain("device.info")
    _boot_paired(hil, brain=brain)
    brain.server = hil.core.server
    hil.target.set_mic(steps.utterance_wav(hil.workdir / "utterance.wav"))
    ex = steps.requested_exchange(hil, "tool-1")
    inv = hil.expect(CORE_TO_SAT, "invoke", after=ex["mark"])
    assert inv.id % 2 == 0
    tr = hil.expect(SAT_TO_CORE, "tool_result", id_=inv.id, after=ex["mark"], what="ToolResult on the Invoke's id")
    assert tr.t < ex["ro"].t, "the ToolResult came after the reply had started"
    assert brain.results and brain.results[0][0] == "ok", "invoke outcome: %r" % brain.results
    blocks = [c.text for c in tr.env.tool_result.content if c.text]
    info = json.loads(blocks[0])
    assert info.get("heap_free", 1) > 0
    assert not tr.env.tool_result.is_error
    _check_render(hil, ex)
    hil.assert_conformant()


@pytest.mark.spec("§4.5", "R10.8-a", "R10.10-a")
@pytest.mark.needs("mic", "speaker")
def test_4_5_error_along_the_way(hil):
    """§4.5: the core invokes `screen.capture`, which this board cannot serve: the board answers a typed
    Error on the Invoke's id (never a ToolResult, never a drop), and the exchange still finishes with its
    MediaRenderOpen and Response on the capture id."""
    hil.start_core(brain=steps.ToneBrain(600, delay_s=0.3))
    hil.provision("ik", preconfigure=True)
    hil.boot()
    hil.target.set_mic(steps.utterance_wav(hil.workdir / "utterance.wav"))
    m = hil.tl.mark()
    hil.core.call(hil.core.server.request_capture(hil.device_id, "err-1"), timeout=15)
    co = hil.expect(SAT_TO_CORE, "capture_open", after=m)
    hil.expect(CORE_TO_SAT, "stream_end", id_=co.id, after=m, timeout=15)
    iid = hil.core.session_call(hil.device_id, lambda s: steps.bare_invoke(s, "screen.capture"))
    err = hil.expect(SAT_TO_CORE, None, id_=iid, after=m, pred=lambda e: e.op in ("error", "tool_result"),
                     what="the answer to Invoke screen.capture")
    assert err.op == "error", "the board answered %s on id %d, not a typed Error" % (err.op, iid)
    assert err.env.error.code in (ops.CAPABILITY_MISSING, ops.UNAVAILABLE), err.summary
    ex = steps.finish_exchange(hil, co, m)
    _check_render(hil, ex)
    assert len(hil.sessions()) == 1, "the board reconnected: the Error cost the connection"
    hil.assert_conformant()


@pytest.mark.spec("§4.3", "R10.3-a", "R10.8-a")
@pytest.mark.needs("button", "mic", "speaker")
def test_4_3_barge_in(hil):
    """§4.3: while a long reply plays, the user presses the button: a new CaptureOpen (next odd id), the core's
    StreamCancel{BARGE_IN} on the render, the board's PlaybackDone reporting fewer frames than sent, then the
    new exchange runs like the first."""
    hil.start_core(brain=steps.ToneBrain([6000, 600]))
    hil.provision("ik")
    hil.boot()
    wav = steps.utterance_wav(hil.workdir / "utterance.wav", speech_ms=500, silence_ms=200)
    m = hil.tl.mark()
    hil.target.set_mic(wav)
    hil.target.press()
    co1 = hil.expect(SAT_TO_CORE, "capture_open", after=m)
    time.sleep(0.8)
    hil.target.release()
    ro = hil.expect(CORE_TO_SAT, "media_render_open", after=m, timeout=15)
    hil.expect(CORE_TO_SAT, "stream_chunk", id_=ro.id, after=m, pred=lambda e: e.seq >= 40, timeout=10,
               what="the reply well under way")
    m2 = hil.tl.mark()
    hil.note("bench: button pressed over the reply (barge-in)")
    hil.target.set_mic(wav)
    hil.target.press()
    co2 = hil.expect(SAT_TO_CORE, "capture_open", after=m2, what="the barge-in CaptureOpen")
    assert co2.id % 2 == 1 and co2.id > co1.id, "barge-in capture id %d after %d" % (co2.id, co1.id)
    cancel = hil.expect(CORE_TO_SAT, "stream_cancel", id_=ro.id, after=m2)
    assert cancel.env.stream_cancel.reason == ops.BARGE_IN
    done = hil.expect(SAT_TO_CORE, "playback_done", id_=ro.id, after=m2, timeout=5,
                      what="PlaybackDone on the cancelled render %d" % ro.id)
    frames = done.env.playback_done.frames
    total = 16 * 6000
    assert 0 < frames < total, "PlaybackDone after barge-in reports %d of %d frames" % (frames, total)
    after_cancel = [e for e in hil.tl.find(SAT_TO_CORE, None, ro.id, hil.tl.index_of(done) + 1)]
    assert not after_cancel, "the board sent %s on the cancelled render" % after_cancel
    hil.measure("cancel_silence_ms", 1000 * hil.target.silence_after(cancel.t, done))
    time.sleep(0.6)
    hil.target.release()
    ex = steps.finish_exchange(hil, co2, m2, ptt=True)
    _check_render(hil, ex)
    hil.expect(CORE_TO_SAT, "response", id_=co1.id, after=m, what="the interrupted exchange's terminal")
    hil.assert_conformant()


@pytest.mark.spec("§4.4", "R10.10-b")
@pytest.mark.needs("button", "mic")
def test_4_4_tap_to_stop(hil):
    """§4.4: while the core is thinking (mic closed, no render yet) a long press sends Stop with no id; the
    core cancels the turn, no render opens, and the capture id ends with its one terminal."""
    hil.start_core(brain=steps.ToneBrain(800, delay_s=4.0))
    hil.provision("ik")
    hil.boot()
    wav = steps.utterance_wav(hil.workdir / "utterance.wav", speech_ms=500, silence_ms=100)
    m = hil.tl.mark()
    hil.target.set_mic(wav)
    hil.target.press()
    co = hil.expect(SAT_TO_CORE, "capture_open", after=m)
    time.sleep(0.7)
    hil.target.release()
    hil.expect(SAT_TO_CORE, "stream_end", id_=co.id, after=m)
    hil.expect(CORE_TO_SAT, "pipeline_state", after=m, pred=lambda e: "PROCESSING" in e.summary)
    hil.note("bench: long press while the core thinks")
    m2 = hil.tl.mark()
    hil.target.long_press()
    stop = hil.expect(SAT_TO_CORE, "stop", after=m2, what="Stop")
    assert stop.id == 0, "Stop carries id %d; it is stateless (no id)" % stop.id
    hil.expect(CORE_TO_SAT, None, id_=co.id, after=m2, pred=lambda e: e.op in ("response", "error", "stream_cancel"),
               what="the capture's terminal after Stop")
    hil.expect(CORE_TO_SAT, "pipeline_state", after=m2, pred=lambda e: "IDLE" in e.summary)
    hil.expect_none(CORE_TO_SAT, "media_render_open", after=m2, within=5.0, what="a render after Stop")
    hil.assert_conformant()
