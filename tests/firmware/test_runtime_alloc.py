# dual: cpython micropython
# Steady-state audio frames allocate nothing (goal 0): the runtime's capture path (mic -> StreamChunk
# header + tail in the one frame buffer -> in-place encryption -> write) and playback path (Noise
# message -> frame -> reused Envelope -> Session -> jitter ring -> speaker), plus the simulated HAL's
# per-frame calls (WAV read, WAV write). Measured with gc.mem_alloc() on micropython.
import os

from mpsupport import IS_MICROPYTHON, mem_alloc_delta, scratch

import rt_harness as H
from satellite.wire import alabama_v1 as pb


def _capture(sat, cid, n):
    i = 0
    while i < n:
        sat.send_chunk(cid, 320)
        i += 1


def _playback(link, msgs, lens, sat, n):
    i = 0
    while i < n:
        link.feed(msgs[i], 0, lens[i])
        sat.play_step()
        i += 1


def test_r10_1_a_capture_frames_allocate_nothing_and_are_frame_granular():
    rt, sat, core, sink, hal = H.make()
    cid = sat.open_capture(pb.Trigger.BUTTON, ptt=True)
    _capture(sat, cid, 5)
    w0 = sink.frames
    d = mem_alloc_delta(_capture, sat, cid, 50) if IS_MICROPYTHON else _capture(sat, cid, 50)
    assert sink.frames - w0 == 50                 # one socket write (one Noise message) per frame
    if IS_MICROPYTHON:
        assert d == 0, d
    rt, sat, core, sink, hal = H.make(record_output=True)
    cid = sat.open_capture(pb.Trigger.BUTTON, ptt=True)
    _capture(sat, cid, 3)
    got = H.sent(core)
    assert [e.op for e, _ in got] == ["hello", "capture_open", "stream_chunk", "stream_chunk", "stream_chunk"]
    assert [e.stream_chunk.seq for e, _ in got[2:]] == [0, 1, 2]
    assert all(e.id == cid and len(t) == 640 for e, t in got[2:])
    assert got[1][0].capture_open.trigger == pb.Trigger.BUTTON


def test_playback_frames_allocate_nothing():
    rt, sat, core, sink, hal = H.make()
    H.feed(sat.link, core, pb.Envelope(id=2, media_render_open=pb.MediaRenderOpen(
        target=pb.CapabilityKind.CAPABILITY_SPEAKER, format=rt.mic_format())))
    assert sat.render_id == 2
    msgs = []
    lens = []
    seq = 0
    while seq < 40:
        m = H.core_message(core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=seq)), bytes(640))
        msgs.append(m)
        lens.append(len(m))
        seq += 1
    _playback(sat.link, msgs, lens, sat, 5)
    if IS_MICROPYTHON:
        d = mem_alloc_delta(_playback, sat.link, msgs[5:], lens[5:], sat, 35)
    else:
        _playback(sat.link, msgs[5:], lens[5:], sat, 35)
    assert hal.played == 40 * 320 and sat.frames_played == 40 * 320
    if IS_MICROPYTHON:
        assert d == 0, d


def _sim_frames(hal, dst, n):
    i = 0
    while i < n:
        hal.mic_wait_ms()
        hal.mic_take(dst, 3, 320)
        hal.spk_wait_ms()
        hal.spk_write(dst, 3, 320)
        i += 1


def test_sim_hal_per_frame_calls_allocate_nothing():
    if not IS_MICROPYTHON:
        return                                    # the simulated HAL is unix-port code (time.ticks_*)
    from satellite.hal.sim import SimHal, wav_header
    path = scratch("sim-hal-mic.wav")
    with open(path, "wb") as f:
        f.write(wav_header(16000, 16000))
        f.write(bytes(32000))
    hal = SimHal({"id": "sim", "duplex": "full"}, out=None)
    hal.mic_path = path
    hal.spk_path = path + ".out"
    hal.mic_open(16000, 320)
    hal.spk_open(16000, 320)
    dst = bytearray(700)
    _sim_frames(hal, dst, 3)
    d = mem_alloc_delta(_sim_frames, hal, dst, 20)
    hal.spk_close()
    assert d == 0, d
    os.remove(path)
    os.remove(path + ".out")


def _note_rx(sat, env, n):
    i = 0
    while i < n:
        env.stream_chunk.seq = i + 1
        sat.note_rx(env)
        i += 1


def test_trace_logs_a_streams_first_chunk_and_counts_the_rest_allocating_nothing():
    """Issue 31: the serial log's frame trace shows a stream's chunks (the web page's timeline collapses them)
    without a line per audio frame: the first is logged, the rest counted (0 B each, both directions) and
    their number logged before the frame that ends the stream."""
    rt, sat, core, sink, hal = H.make()
    cid = sat.open_capture(pb.Trigger.BUTTON, ptt=True)
    _capture(sat, cid, 6)
    sat.end_capture(pb.StreamReason.PTT_RELEASE)
    got = [ln for ln in hal.lines if "stream_" in ln]
    assert got == ["sat: tx stream_chunk id %d seq 0" % cid, "sat: tx stream_chunk id %d +5" % cid,
                   "sat: tx stream_end id %d" % cid], got
    # the receive side, as the dispatcher (Satellite.on_frame) notes every frame: a text and an audio stream interleaved
    del hal.lines[:]
    audio = pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=0))
    text = pb.Envelope(id=4, stream_chunk=pb.StreamChunk(seq=0))
    sat.note_rx(audio)
    sat.note_rx(text)
    if IS_MICROPYTHON:
        d = mem_alloc_delta(_note_rx, sat, audio, 30) + mem_alloc_delta(_note_rx, sat, text, 20)
        assert d == 0, d
    else:
        _note_rx(sat, audio, 30)
        _note_rx(sat, text, 20)
    sat.note_rx(pb.Envelope(id=0, pipeline_state=pb.PipelineState(phase=3)))   # not a stream's end
    sat.note_rx(pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))
    sat.note_rx(pb.Envelope(id=4, stream_cancel=pb.StreamCancel(reason=pb.StreamReason.STOPPED)))
    assert hal.lines == ["sat: rx stream_chunk id 2 seq 0", "sat: rx stream_chunk id 4 seq 0", "sat: rx pipeline_state id 0",
                         "sat: rx stream_chunk id 2 +30", "sat: rx stream_end id 2",
                         "sat: rx stream_chunk id 4 +20", "sat: rx stream_cancel id 4"], hal.lines
