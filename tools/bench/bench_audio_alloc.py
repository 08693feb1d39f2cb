# Heap bytes allocated per steady-state audio frame by the satellite runtime, measured with
# gc.mem_alloc() on the micropython unix port: 1,000 capture frames (mic -> StreamChunk header + tail
# in the one frame buffer -> ChaCha20-Poly1305 in place -> socket write) and 1,000 playback frames
# (Noise message -> decrypt in place -> FrameReader -> decode_into the reused Envelope -> Session ->
# jitter ring -> speaker). Goal: 0. Run: MICROPYPATH=firmware:tests/firmware:.frozen micropython tools/bench/bench_audio_alloc.py
import gc
import sys

sys.path.append("tests/firmware")
sys.path.append("firmware")

import rt_harness as H  # noqa: E402
from satellite.wire import alabama_v1 as pb  # noqa: E402

N = 1000


def capture(sat, cid, n):
    i = 0
    while i < n:
        sat.send_chunk(cid, 320)
        i += 1


def playback(sat, link, msgs, lens, n):
    i = 0
    while i < n:
        m = msgs[i]
        link.feed(m, 0, lens[i])
        sat.play_step()
        i += 1


def measure(fn, *args):
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    fn(*args)
    d = gc.mem_alloc() - a
    gc.enable()
    return d


def run(n=N, out=print):
    rt, sat, core, sink, hal = H.make()
    cid = sat.open_capture(pb.Trigger.BUTTON, ptt=True)
    capture(sat, cid, 10)                               # warm up (first-use allocations)
    cap = measure(capture, sat, cid, n)
    # playback: open a render, pre-encrypt n chunk messages (setup allocates), then feed them
    H.feed(sat.link, core, pb.Envelope(id=2, media_render_open=pb.MediaRenderOpen(
        target=pb.CapabilityKind.CAPABILITY_SPEAKER, format=rt.mic_format())))
    tail = bytes(640)
    play = 0
    seq = 0
    done = -10                                          # 10 warm-up frames first, not measured
    while done < n:
        k = 100 if done >= 0 else 10                    # pre-encrypt a batch (allocates), then measure it
        if done >= 0 and n - done < k:
            k = n - done
        msgs = []
        lens = []
        i = 0
        while i < k:
            m = H.core_message(core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=seq)), tail)
            msgs.append(m)
            lens.append(len(m))
            seq += 1
            i += 1
        d = measure(playback, sat, sat.link, msgs, lens, k)
        if done >= 0:
            play += d
        done += k
    assert hal.mic_frames >= n and hal.played >= n * 320, (hal.mic_frames, hal.played)
    out("capture : %d frames, %d bytes allocated, %.3f bytes/frame" % (n, cap, cap / n))
    out("playback: %d frames, %d bytes allocated, %.3f bytes/frame" % (n, play, play / n))
    return cap, play


if __name__ == "__main__":
    if sys.implementation.name != "micropython":
        print("run this under micropython: gc.mem_alloc() is the measure")
    else:
        run()
