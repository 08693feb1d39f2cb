# Frame codec benchmark: frames/s and heap bytes per frame for the firmware FrameReader (micropython,
# viper and pure copy) and the host FrameDecoder (CPython), printed in one run. Not a test: no asserts on time.
#
#   .venv/bin/python tools/bench/bench_frame.py          (runs itself under .venv/bin/micropython too)
#
# Workload: frames of a 6-byte Envelope + 640-byte tail (20 ms of 16 kHz mono PCM16), fed in
# chunks of one Noise message plaintext (65519 bytes), so frames straddle chunk boundaries.
import sys

IS_MP = sys.implementation.name == "micropython"
N_FRAMES = 1000
ROUNDS = 5
HDR = b"\x08\x01\x10\x02\x18\x03"
TAIL = 640
CHUNK = 65519


def _stream(encode_frame):
    one = encode_frame(HDR, bytes(TAIL))
    data = bytearray(len(one) * N_FRAMES)
    for i in range(N_FRAMES):
        data[i * len(one):(i + 1) * len(one)] = one
    return data


def _pump(r, data, chunk, FRAME):
    n = len(data)
    pos = 0
    count = 0
    while pos < n:
        end = pos + chunk
        if end > n:
            end = n
        while pos < end:
            pos += r.feed(data, pos, end)
            while r.next() == FRAME:
                count += 1
    return count


def bench_firmware(label, copy_fn=None):
    """(label, frames/s, heap bytes per frame or None)."""
    from satellite.wire import frame as F
    saved = F.copy
    if copy_fn is not None:
        F.copy = copy_fn
    try:
        data = memoryview(_stream(F.encode_frame))
        r = F.FrameReader()
        r.set_limit(0)
        _pump(r, data, CHUNK, F.FRAME)  # warm-up
        alloc = None
        if IS_MP:
            import gc
            gc.collect()
            gc.disable()
            a = gc.mem_alloc()
            _pump(r, data, CHUNK, F.FRAME)
            alloc = (gc.mem_alloc() - a) / N_FRAMES
            gc.enable()
        t = _clock()
        for _ in range(ROUNDS):
            _pump(r, data, CHUNK, F.FRAME)
        dt = _elapsed(t)
        return (label, N_FRAMES * ROUNDS / dt, alloc)
    finally:
        F.copy = saved


def bench_host():
    from alabama.wire import frame as H
    import tracemalloc
    data = bytes(_stream(H.encode_frame))
    chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]

    def run():
        d = H.FrameDecoder()
        d.set_limit(0)
        n = 0
        for c in chunks:
            d.feed(c)
            for _ in d:
                n += 1
        return n

    run()
    tracemalloc.start()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    t = _clock()
    for _ in range(ROUNDS):
        run()
    dt = _elapsed(t)
    return ("host FrameDecoder (CPython)", N_FRAMES * ROUNDS / dt, None, peak)


def _clock():
    import time
    if IS_MP:
        return time.ticks_us()
    return time.perf_counter()


def _elapsed(t0):
    import time
    if IS_MP:
        return time.ticks_diff(time.ticks_us(), t0) / 1e6
    return time.perf_counter() - t0


def _row(label, fps, alloc):
    return "%-36s %12.0f frames/s  %8.1f MB/s  heap/frame: %s" % (
        label, fps, fps * (TAIL + 9) / 1e6, "n/a" if alloc is None else "%.1f B" % alloc)


def main_micropython():
    from satellite.wire import _copy
    rows = [bench_firmware("firmware FrameReader (mpy, viper)")]
    rows.append(bench_firmware("firmware FrameReader (mpy, pure copy)", _copy.copy))
    for label, fps, alloc in rows:
        print("ROW|%s|%f|%s" % (label, fps, "" if alloc is None else alloc))


def main_cpython():
    import os
    import pathlib
    import subprocess
    root = pathlib.Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(root / "firmware"), str(root / "host")]
    from alabama import mpcompat
    mpcompat.install()
    print("frame codec: %d frames x %d rounds, %d-byte Envelope + %d-byte tail, %d-byte chunks"
          % (N_FRAMES, ROUNDS, len(HDR), TAIL, CHUNK))
    rows = []
    mp = pathlib.Path(sys.executable).parent / "micropython"
    if mp.exists():
        env = dict(os.environ, MICROPYPATH=str(root / "firmware"))
        r = subprocess.run([str(mp), __file__], capture_output=True, text=True, env=env, timeout=600)
        for line in r.stdout.splitlines():
            if line.startswith("ROW|"):
                _, label, fps, alloc = line.split("|")
                rows.append((label, float(fps), float(alloc) if alloc else None))
        if r.returncode:
            print("micropython run failed:", r.stderr.strip()[-500:])
    else:
        print("(no micropython next to %s: firmware rows skipped)" % sys.executable)
    rows.append(bench_firmware("firmware FrameReader (CPython)"))
    host = bench_host()
    rows.append(host[:3])
    for label, fps, alloc in rows:
        print(_row(label, fps, alloc))
    print("host decoder tracemalloc peak over one %d-frame pass: %d B" % (N_FRAMES, host[3]))
    by = dict((row[0], row[1]) for row in rows)
    v = by.get("firmware FrameReader (mpy, viper)")
    p = by.get("firmware FrameReader (mpy, pure copy)")
    if v and p:
        print("ratio viper / pure copy on micropython: %.2fx" % (v / p))
    if v:
        print("ratio host CPython / firmware micropython(viper): %.2fx" % (host[1] / v))


if __name__ == "__main__":
    if IS_MP:
        main_micropython()
    else:
        main_cpython()
