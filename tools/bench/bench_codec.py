# Envelope codec benchmark: encode/decode ops/s of the firmware codec on the micropython unix port vs
# google-protobuf (upb) on CPython, side by side with ratios, plus heap bytes per StreamChunk decode
# on micropython (goal 0). Not a test: no asserts on time.
#
#   .venv/bin/python tools/bench/bench_codec.py        (runs itself under .venv/bin/micropython too)
#
# Envelopes: a StreamChunk header (every audio frame), a Hello declaring a full surface (once per
# connection), an Invoke (a tool call). The same bytes go through both codecs (checked).
#
# Also on micropython, side by side in the same process: minipb 2.0.0 (PyPI), the pure-Python protobuf
# library that runs on MicroPython, decoding the same StreamChunk Envelope (issue 12 target: ours >= 3x its
# rate, with 0 heap bytes per decode), timed alternately with ours. The bench fetches minipb with pip into
# build/bench/ and gives it tools/bench/mpshim/ (bisect, logging: modules the unix port lacks). The codec as it
# was before issue 12 (CODEC_BASELINE, unpacked from git by baseline.py) is measured the same way in the same
# run, so the before/after ratio needs no figure from another day.
import sys

IS_MP = sys.implementation.name == "micropython"
ROUNDS = {"stream_chunk": 20000, "hello": 300, "invoke": 5000}


def envelopes(v1):
    af = v1.AudioFormat(encoding=1, sample_rate=16000, channels=1, sample_bits=16)
    caps = [
        v1.CapabilityDescriptor(kind=1, mic=v1.MicParams(format=af)),
        v1.CapabilityDescriptor(kind=2, speaker=v1.SpeakerParams(format=af, buffer_ms=200)),
        v1.CapabilityDescriptor(kind=3, text_display=v1.TextDisplayParams(columns=20, rows=4)),
        v1.CapabilityDescriptor(kind=4, image_display=v1.ImageDisplayParams(
            width=320, height=240, accepts=["image/jpeg", "image/png"], max_image_bytes=65536)),
        v1.CapabilityDescriptor(kind=6, media_sink=v1.MediaSinkParams(accepts=["audio/ogg"], buffer_ms=500)),
        v1.CapabilityDescriptor(kind=8),
    ]
    tools = [v1.ToolDescriptor(name="device.set_volume", description="Set the speaker volume in percent.",
                               input_schema='{"type":"object","properties":{"level":{"type":"integer"}}}'),
             v1.ToolDescriptor(name="device.mute", description="Mute or unmute the microphone.",
                               input_schema='{"type":"object","properties":{"on":{"type":"boolean"}}}')]
    events = [v1.EventDescriptor(id="button.double_press", description="The button was pressed twice."),
              v1.EventDescriptor(id="button.long_press", description="The button was held for 2 s.")]
    settings = [v1.SettingDescriptor(key="volume", label="Volume", type=2, min=0, max=100,
                                     value=v1.SettingValue(int_value=60)),
                v1.SettingDescriptor(key="wakeword", label="Wake word", type=4, options=["alexa", "jarvis"],
                                     value=v1.SettingValue(string_value="jarvis"))]
    hello = v1.Hello(wire_version=1, capabilities=caps, tools=tools, events=events, settings=settings,
                     max_frame_bytes=4096, max_concurrent_streams=4, display_name="Kitchen satellite",
                     software="alabama-satellite/0.1.0 micropython/1.29")
    return [
        ("stream_chunk", v1.Envelope(id=7, stream_chunk=v1.StreamChunk(seq=1234))),
        ("hello", v1.Envelope(id=1, hello=hello)),
        ("invoke", v1.Envelope(id=8, invoke=v1.Invoke(name="device.set_volume", arguments='{"level": 40}'))),
    ]


def _clock():
    import time
    return time.ticks_us() if IS_MP else time.perf_counter()


def _elapsed(t0):
    import time
    return time.ticks_diff(time.ticks_us(), t0) / 1e6 if IS_MP else time.perf_counter() - t0


def bench_firmware():
    """Rows (name, size, decode ops/s, encode ops/s, heap bytes per decode or None)."""
    from satellite.wire import alabama_v1 as v1, pb
    rows = []
    for name, env in envelopes(v1):
        raw = pb.encode(env)
        n = ROUNDS[name]
        target = v1.Envelope()
        pb.decode_into(target, raw, 0, len(raw))  # warm-up: the first decode makes the sub-messages,
        pb.decode_into(target, raw, 0, len(raw))  # the second the per-instance pool that keeps them
        alloc = None
        if IS_MP:
            import gc
            gc.collect()
            gc.disable()
            total = 0
            size = len(raw)
            for _ in range(100):  # each call measured alone: the loop's own objects are not counted
                a = gc.mem_alloc()
                pb.decode_into(target, raw, 0, size)
                total += gc.mem_alloc() - a
                if total > 1 << 20:
                    gc.collect()
            alloc = total / 100
            gc.enable()
        t = _clock()
        for _ in range(n):
            pb.decode_into(target, raw, 0, len(raw))
        dec = n / _elapsed(t)
        buf = bytearray(len(raw))
        t = _clock()
        for _ in range(n):
            pb.encode_into(target, buf, 0)
        enc = n / _elapsed(t)
        assert bytes(buf) == raw
        rows.append((name, len(raw), dec, enc, alloc))
    return rows


def bench_upb():
    from alabama.v1 import envelope_pb2
    from satellite.wire import alabama_v1 as v1, pb
    rows = []
    for name, env in envelopes(v1):
        raw = pb.encode(env)
        n = ROUNDS[name] * 5
        m = envelope_pb2.Envelope()
        m.ParseFromString(raw)
        assert m.SerializeToString() == raw
        t = _clock()
        for _ in range(n):
            m.ParseFromString(raw)
        dec = n / _elapsed(t)
        t = _clock()
        for _ in range(n):
            m.SerializeToString()
        enc = n / _elapsed(t)
        rows.append((name, len(raw), dec, enc, None))
    return rows


#: minipb's key-value schema for the StreamChunk Envelope: id = field 1, stream_chunk = field 8 {seq 1, capture_ts 2}.
MINIPB_STREAM_CHUNK = (("id", "V@1"), ("stream_chunk", "[@8", (("seq", "V"), ("capture_ts", "T"))))


def bench_minipb(raw, rounds, repeats=7):
    """(ours decode/s, minipb decode/s, minipb heap bytes per decode) on the StreamChunk Envelope, or None
    without minipb. The two are timed alternately, `repeats` times each, and the best of each kept: on a
    shared, loaded machine a slice that lost the CPU says nothing about either codec."""
    try:
        import minipb
    except ImportError:
        return None
    from satellite.wire import alabama_v1 as v1, pb
    w = minipb.Wire(MINIPB_STREAM_CHUNK)
    got = w.decode(raw)
    assert got["id"] == 7 and got["stream_chunk"]["seq"] == 1234, got
    import gc
    gc.collect()
    a = gc.mem_alloc()
    for _ in range(20):
        w.decode(raw)
    alloc = (gc.mem_alloc() - a) / 20
    env = v1.Envelope()
    n = len(raw)
    dec = pb.decode_into
    ours = theirs = 0.0
    for _ in range(repeats):
        t = _clock()
        for _ in range(rounds):
            dec(env, raw, 0, n)
        ours = max(ours, rounds / _elapsed(t))
        t = _clock()
        for _ in range(rounds):
            w.decode(raw)
        theirs = max(theirs, rounds / _elapsed(t))
    assert env.id == 7 and env.stream_chunk.seq == 1234
    return ours, theirs, alloc


def main_micropython():
    for name, size, dec, enc, alloc in bench_firmware():
        print("ROW|%s|%d|%f|%f|%s" % (name, size, dec, enc, "" if alloc is None else alloc))
    from satellite.wire import alabama_v1 as v1, pb
    raw = pb.encode(envelopes(v1)[0][1])
    m = bench_minipb(raw, ROUNDS["stream_chunk"] // 10)
    if m is not None:
        print("MINIPB|stream_chunk|%f|%f|%f" % m)


def fetch_minipb(root):
    """build/bench/minipb/minipb.py from PyPI's minipb 2.0.0 wheel (only that file: the wheel's stub package
    directory of the same name would shadow it). Returns the directory, or None with a line saying why."""
    import subprocess
    import tempfile
    import zipfile
    d = root / "build" / "bench" / "minipb"
    if (d / "minipb.py").exists():
        return d
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "minipb==2.0.0", "-d", tmp],
                           capture_output=True, text=True, timeout=300)
        wheels = list(__import__("pathlib").Path(tmp).glob("minipb-*.whl"))
        if r.returncode or not wheels:
            print("(minipb not fetched: %s; the minipb column is skipped)" % (r.stderr.strip()[-200:] or "no wheel"))
            return None
        d.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(str(wheels[0])) as z:
            (d / "minipb.py").write_bytes(z.read("minipb.py"))
    return d


#: The codec before the issue-12 work (table-driven decode only, tables derived at import): "today's figure".
CODEC_BASELINE = "3fee682"


def run_micropython(mp, firmware, mdir):
    """({envelope: (dec/s, enc/s, heap B/decode)}, (ours/s, minipb/s, minipb heap B) or None) of this script
    run under micropython with `firmware` as the firmware tree."""
    import os
    import subprocess
    path = [str(firmware)]
    if mdir is not None:
        path += [str(mdir), str(pathlib_root() / "tools" / "bench" / "mpshim")]
    env = dict(os.environ, MICROPYPATH=os.pathsep.join(path))
    r = subprocess.run([str(mp), __file__], capture_output=True, text=True, env=env, timeout=600)
    rows = {}
    vs = None
    for line in r.stdout.splitlines():
        if line.startswith("ROW|"):
            _, name, size, dec, enc, alloc = line.split("|")
            rows[name] = (float(dec), float(enc), float(alloc) if alloc else None)
        elif line.startswith("MINIPB|"):
            _, _, ours, theirs, alloc = line.split("|")
            vs = (float(ours), float(theirs), float(alloc))
    if r.returncode:
        print("micropython run failed (%s):" % firmware, r.stderr.strip()[-500:])
    return rows, vs


def pathlib_root():
    import pathlib
    return pathlib.Path(__file__).resolve().parents[2]


def main_cpython():
    import pathlib
    from google.protobuf.internal import api_implementation
    root = pathlib_root()
    sys.path[:0] = [str(root / "firmware"), str(root / "host")]
    mp_rows = {}
    mp = pathlib.Path(sys.executable).parent / "micropython"
    vs = before = None
    if mp.exists():
        mdir = fetch_minipb(root)
        mp_rows, vs = run_micropython(mp, root / "firmware", mdir)
        if mdir is not None:
            sys.path.insert(0, str(root / "tools" / "bench"))
            import baseline
            try:
                old = baseline.tree(CODEC_BASELINE)
                before = run_micropython(mp, old / "firmware", mdir)
            except Exception as e:  # no git history (an exported tree): the before column is skipped
                print("(codec at %s not measured: %s)" % (CODEC_BASELINE, e))
    else:
        print("(no micropython next to %s: firmware rows skipped)" % sys.executable)
    upb = bench_upb()
    fw_cpy = dict((r[0], r) for r in bench_firmware())
    print("Envelope codec: firmware codec on micropython %s vs google-protobuf %s (%s) on CPython %s"
          % ("unix port", __import__("google.protobuf").protobuf.__version__, api_implementation.Type(),
             sys.version.split()[0]))
    print("%-13s %5s | %12s %12s %8s | %12s %12s %8s | %12s %12s | %s" % (
        "envelope", "bytes", "mpy dec/s", "upb dec/s", "upb/mpy", "mpy enc/s", "upb enc/s", "upb/mpy",
        "fw-cpy dec/s", "fw-cpy enc/s", "mpy heap B/decode"))
    for name, size, dec, enc, _ in upb:
        m = mp_rows.get(name)
        c = fw_cpy[name]
        if m:
            print("%-13s %5d | %12.0f %12.0f %7.1fx | %12.0f %12.0f %7.1fx | %12.0f %12.0f | %s" % (
                name, size, m[0], dec, dec / m[0], m[1], enc, enc / m[1], c[2], c[3],
                "n/a" if m[2] is None else "%.1f" % m[2]))
        else:
            print("%-13s %5d | %12s %12.0f %8s | %12s %12.0f %8s | %12.0f %12.0f | n/a" % (
                name, size, "-", dec, "-", "-", enc, "-", c[2], c[3]))
    sc = mp_rows.get("stream_chunk")
    if sc and sc[2] is not None:
        print("heap bytes per StreamChunk Envelope decode_into on micropython: %.1f (goal 0)" % sc[2])
    if vs:
        print("StreamChunk Envelope decode on micropython, timed alternately in one process (best of 7 x %d): "
              "ours %.0f/s (%.1f heap B/decode), minipb 2.0.0 %.0f/s (%.0f heap B/decode): ours/minipb = %.1fx "
              "(target >= 3x)" % (ROUNDS["stream_chunk"] // 10, vs[0], (sc[2] if sc else None) or 0.0, vs[1], vs[2],
                                  vs[0] / vs[1]))
    if before and before[1] and vs:
        b = before[1]
        bsc = before[0].get("stream_chunk")
        print("  the codec at %s (before issue 12), same run, same way: %.0f/s (%.1f heap B/decode), minipb %.0f/s: "
              "ours/minipb = %.1fx; now/then = %.1fx" % (CODEC_BASELINE, b[0], (bsc[2] if bsc else None) or 0.0,
                                                         b[1], b[0] / b[1], (vs[0] / vs[1]) / (b[0] / b[1])))
        for name in ("stream_chunk", "hello", "invoke"):
            if name in before[0] and name in mp_rows:
                o, n = before[0][name], mp_rows[name]
                print("  %-12s decode %8.0f/s then, %8.0f/s now (%.2fx); encode %7.0f/s then, %7.0f/s now (%.2fx)"
                      % (name, o[0], n[0], n[0] / o[0], o[1], n[1], n[1] / o[1]))


if __name__ == "__main__":
    if IS_MP:
        main_micropython()
    else:
        main_cpython()
