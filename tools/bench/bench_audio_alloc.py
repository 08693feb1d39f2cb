# Heap bytes allocated per steady-state audio frame by the satellite runtime, measured with
# gc.mem_alloc() on the micropython unix port: 1,000 capture frames (mic -> StreamChunk header + tail
# in the one frame buffer -> ChaCha20-Poly1305 in place -> socket write) and 1,000 playback frames
# (Noise message -> decrypt in place -> FrameReader -> decode_into the reused Envelope -> Session ->
# jitter ring -> speaker). Goal: 0. Run: MICROPYPATH=firmware:tests/firmware:.frozen micropython tools/bench/bench_audio_alloc.py
import gc
import sys

sys.path.append("tests/firmware")
sys.path.append("firmware")
if sys.implementation.name != "micropython":
    # CPython (tools/bench/run.py runs every bench with it): the firmware imports `micropython.const` and
    # `time.ticks_*` plainly, so the stand-ins go in first (docs/testing.md); the measure itself is taken
    # under micropython below (gc.mem_alloc() is the point), one run per interpreter found.
    sys.path.insert(0, "host")
    from alabama import mpcompat
    mpcompat.install()

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


def main_cpython():
    """Run this file under the 64-bit port and, when built, the 32-bit one (make mp32): the board's word size."""
    import os
    import subprocess
    from alabama import local
    from alabama.errors import AlabamaError
    try:
        mps = [("micropython (64-bit)", local.find_micropython())]
    except AlabamaError as e:
        print("bench_audio_alloc: %s" % e, file=sys.stderr)
        return 1
    if local.micropython32():
        mps.append(("micropython32", local.micropython32()))
    env = dict(os.environ, MICROPYPATH="firmware:tests/firmware:.frozen")
    rc = 0
    for name, mp in mps:
        print(name + ":", flush=True)
        rc |= subprocess.run([mp, __file__], env=env).returncode
    return rc


if __name__ == "__main__":
    if sys.implementation.name != "micropython":
        sys.exit(main_cpython())
    run()
