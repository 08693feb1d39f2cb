# Run by tests/host/test_wake_detect.py under CPython, the 64-bit and the 32-bit MicroPython: the firmware's wake
# detector (satellite.wake.detector: the real frontend and model) over 16 kHz s16 WAV files, fed 20 ms at a time as
# the device's wake loop feeds it. argv: MODEL_DIR NAME REFRACTORY_MS WAV... ; prints one JSON line per WAV:
# {"hits": [ms of the chunk end at each detection], "ms": length, "alloc": bytes allocated by the steady-state
# chunks (MicroPython; null on CPython), "fast": whether a fast path (the C module or viper) ran, "impl": which}.
import gc
import json
import sys

if sys.implementation.name != "micropython":
    from alabama import mpcompat
    mpcompat.install()

from satellite.wake import detector as W

CHUNK = 640              # 20 ms


def pcm_of(path):
    with open(path, "rb") as f:
        data = f.read()
    i = 12
    while data[i:i + 4] != b"data":      # the RIFF chunks up to "data"
        i += 8 + int.from_bytes(data[i + 4:i + 8], "little")
    return data[i + 8:]


def run(det, pcm):
    buf = bytearray(CHUNK)
    hits = []
    alloc = None
    n = len(pcm) // CHUNK
    mp = sys.implementation.name == "micropython"
    for k in range(n):
        for j in range(CHUNK):
            buf[j] = pcm[k * CHUNK + j]
        if mp and k == 50:
            gc.collect()
            gc.disable()
            a0 = gc.mem_alloc()
        if det.feed(buf, 0, CHUNK // 2):
            hits.append((k + 1) * 20)
        if mp and k == 50 + 100 - 1:
            alloc = gc.mem_alloc() - a0
            gc.enable()
    return hits, n * 20, alloc


def main():
    d, name, refractory = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for path in sys.argv[4:]:
        det = W.load(name, 16000, d)
        if refractory >= 0:
            det = W.Detector(det.model, det.fe, refractory)
        hits, ms, alloc = run(det, pcm_of(path))
        print(json.dumps({"hits": hits, "ms": ms, "alloc": alloc, "fast": det.fe.impl != "pure", "impl": det.fe.impl}))


main()
