# Envelope codec benchmark: encode/decode ops/s of the firmware codec on the micropython unix port vs
# google-protobuf (upb) on CPython, side by side with ratios, plus heap bytes per StreamChunk decode
# on micropython (goal 0). Not a test: no asserts on time.
#
#   .venv/bin/python tools/bench/bench_codec.py        (runs itself under .venv/bin/micropython too)
#
# Envelopes: a StreamChunk header (every audio frame), a Hello declaring a full surface (once per
# connection), an Invoke (a tool call). The same bytes go through both codecs (checked).
#
# Also on micropython, in the same process and timed alternately (best of REPEATS, so a slice that lost the
# CPU on this shared machine says nothing about either side): the codec as it was before issue 12
# (CODEC_BASELINE, unpacked from git by baseline.py and imported as the package `codec_then`), and minipb
# 2.0.0 (PyPI), the pure-Python protobuf library that runs on MicroPython, decoding the same StreamChunk
# Envelope (issue 12 target: ours >= 3x its rate, with 0 heap bytes per decode). The bench fetches minipb
# with pip into build/bench/ and gives it tools/bench/mpshim/ (bisect, logging: modules the unix port lacks).
import sys

IS_MP = sys.implementation.name == "micropython"
# Many turns of slices of similar duration (~10-20 ms each, ours and minipb alike), best of each: on a
# loaded 2-core machine a slice may lose the CPU; slices of unequal length would favour the shorter side.
ROUNDS = {"stream_chunk": 5000, "hello": 50, "invoke": 600}   # per turn, our codec (now and then)
MINIPB_ROUNDS = 600                                           # per turn, minipb (~28 us per decode)
REPEATS = 11


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


def codecs():
    """[(label, alabama_v1, pb)]: the codec now and, when the runner put it on the path, the one at
    CODEC_BASELINE (package codec_then)."""
    from satellite.wire import alabama_v1 as v1, pb
    out = [("now", v1, pb)]
    if IS_MP:
        try:
            from codec_then.wire import alabama_v1 as ov1, pb as opb
            out.append(("then", ov1, opb))
        except ImportError:
            pass
    return out


def _alloc_per_decode(pb, target, raw):
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
    gc.enable()
    return total / 100


def bench_firmware(extra=None):
    """{label: [(name, size, decode ops/s, encode ops/s, heap bytes per decode or None)]}, every codec of
    codecs() timed alternately, best of REPEATS. ``extra``: more (label, fn(rounds)) timed in the same turns
    on the StreamChunk rounds (minipb); their best rates come back under "extra"."""
    cases = []
    for label, v1, pb in codecs():
        for name, env in envelopes(v1):
            raw = pb.encode(env)
            target = v1.Envelope()
            pb.decode_into(target, raw, 0, len(raw))  # warm-up: the first decode makes the sub-messages,
            pb.decode_into(target, raw, 0, len(raw))  # the second the per-instance pool that keeps them
            alloc = _alloc_per_decode(pb, target, raw) if IS_MP else None
            cases.append([label, name, pb, target, raw, bytearray(len(raw)), alloc, 0.0, 0.0])
    extra = extra or []
    ebest = [0.0] * len(extra)
    import gc
    for _ in range(REPEATS):
        for c in cases:
            label, name, pb, target, raw, buf = c[:6]
            n = ROUNDS[name]
            size = len(raw)
            dec = pb.decode_into
            gc.collect()   # each slice starts on a collected heap: no slice pays for another's garbage
            t = _clock()
            for _ in range(n):
                dec(target, raw, 0, size)
            c[7] = max(c[7], n / _elapsed(t))
            enc = pb.encode_into
            gc.collect()
            t = _clock()
            for _ in range(n):
                enc(target, buf, 0)
            c[8] = max(c[8], n / _elapsed(t))
            assert bytes(buf) == raw
        for k in range(len(extra)):
            n = MINIPB_ROUNDS
            gc.collect()
            t = _clock()
            extra[k][1](n)
            ebest[k] = max(ebest[k], n / _elapsed(t))
    out = {}
    for label, name, pb, target, raw, buf, alloc, dec, enc in cases:
        out.setdefault(label, []).append((name, len(raw), dec, enc, alloc))
    out["extra"] = [(extra[k][0], ebest[k]) for k in range(len(extra))]
    return out


def bench_upb():
    from alabama.v1 import envelope_pb2
    from satellite.wire import alabama_v1 as v1, pb
    rows = []
    for name, env in envelopes(v1):
        raw = pb.encode(env)
        n = ROUNDS[name] * REPEATS * 5
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


def minipb_case(raw):
    """(label, fn(rounds), heap bytes per decode) decoding raw with minipb, or None without minipb."""
    try:
        import minipb
    except ImportError:
        return None
    w = minipb.Wire(MINIPB_STREAM_CHUNK)
    got = w.decode(raw)
    assert got["id"] == 7 and got["stream_chunk"]["seq"] == 1234, got
    import gc
    gc.collect()
    a = gc.mem_alloc()
    for _ in range(20):
        w.decode(raw)
    alloc = (gc.mem_alloc() - a) / 20

    def run(n):
        d = w.decode
        for _ in range(n):
            d(raw)
    return "minipb", run, alloc


def main_micropython():
    from satellite.wire import alabama_v1 as v1, pb
    raw = pb.encode(envelopes(v1)[0][1])
    m = minipb_case(raw)
    res = bench_firmware([m[:2]] if m else None)
    for label in ("now", "then"):
        for name, size, dec, enc, alloc in res.get(label, ()):
            print("ROW|%s|%s|%d|%f|%f|%s" % (label, name, size, dec, enc, "" if alloc is None else alloc))
    for label, rate in res["extra"]:
        print("MINIPB|%f|%f" % (rate, m[2]))


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


def pathlib_root():
    import pathlib
    return pathlib.Path(__file__).resolve().parents[2]


def then_path(root):
    """A directory holding the package codec_then = firmware/satellite at CODEC_BASELINE, or None (with a line
    saying why) when it cannot be unpacked (no git history)."""
    sys.path.insert(0, str(root / "tools" / "bench"))
    import baseline
    try:
        old = baseline.tree(CODEC_BASELINE)
    except Exception as e:
        print("(the codec at %s is not measured: %s)" % (CODEC_BASELINE, e))
        return None
    d = root / "build" / "bench" / ("codec-then-" + CODEC_BASELINE)
    link = d / "codec_then"
    if not link.exists():
        d.mkdir(parents=True, exist_ok=True)
        link.symlink_to(old / "firmware" / "satellite")
    return d


def run_micropython(mp, root):
    """({label: {envelope: (dec/s, enc/s, heap B/decode)}}, (minipb/s, minipb heap B) or None)."""
    import os
    import subprocess
    path = [str(root / "firmware")]
    then = then_path(root)
    if then is not None:
        path.append(str(then))
    mdir = fetch_minipb(root)
    if mdir is not None:
        path += [str(mdir), str(root / "tools" / "bench" / "mpshim")]
    env = dict(os.environ, MICROPYPATH=os.pathsep.join(path))
    r = subprocess.run([str(mp), __file__], capture_output=True, text=True, env=env, timeout=900)
    rows = {}
    vs = None
    for line in r.stdout.splitlines():
        if line.startswith("ROW|"):
            _, label, name, size, dec, enc, alloc = line.split("|")
            rows.setdefault(label, {})[name] = (float(dec), float(enc), float(alloc) if alloc else None)
        elif line.startswith("MINIPB|"):
            _, rate, alloc = line.split("|")
            vs = (float(rate), float(alloc))
    if r.returncode:
        print("micropython run failed:", r.stderr.strip()[-500:])
    return rows, vs


def main_cpython():
    from google.protobuf.internal import api_implementation
    root = pathlib_root()
    sys.path[:0] = [str(root / "firmware"), str(root / "host")]
    from alabama import mpcompat
    mpcompat.install()
    rows = {}
    vs = None
    from alabama.errors import AlabamaError
    from alabama.local import find_micropython
    try:
        mp = find_micropython()
    except AlabamaError:
        print("(no micropython next to %s nor on PATH: firmware rows skipped)" % sys.executable)
    else:
        rows, vs = run_micropython(mp, root)
    mp_rows = rows.get("now", {})
    then = rows.get("then", {})
    upb = bench_upb()
    fw_cpy = dict((r[0], r) for r in bench_firmware()["now"])
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
    if then:
        print("micropython, same process, timed alternately (best of %d): the codec now vs at %s (before issue 12)"
              % (REPEATS, CODEC_BASELINE))
        for name in ("stream_chunk", "hello", "invoke"):
            if name in then and name in mp_rows:
                o, n = then[name], mp_rows[name]
                print("  %-12s decode %8.0f/s then %8.0f/s now (%.2fx) | encode %7.0f/s then %7.0f/s now (%.2fx) | "
                      "heap B/decode %s then %s now" % (name, o[0], n[0], n[0] / o[0], o[1], n[1], n[1] / o[1],
                                                        "n/a" if o[2] is None else "%.0f" % o[2],
                                                        "n/a" if n[2] is None else "%.0f" % n[2]))
    if sc and vs:
        print("StreamChunk Envelope decode on micropython, same process, timed alternately (best of %d, slices of "
              "%d and %d decodes): "
              "ours %.0f/s (%.1f heap B/decode), minipb 2.0.0 %.0f/s (%.0f heap B/decode): ours/minipb = %.1fx "
              "(target >= 3x)" % (REPEATS, ROUNDS["stream_chunk"], MINIPB_ROUNDS, sc[0], sc[2] or 0.0, vs[0], vs[1], sc[0] / vs[0]))
        t = then.get("stream_chunk")
        if t:
            print("  the codec at %s, same turns: %.0f/s: then/minipb = %.1fx (now/then %.1fx)"
                  % (CODEC_BASELINE, t[0], t[0] / vs[0], sc[0] / t[0]))


if __name__ == "__main__":
    if IS_MP:
        main_micropython()
    else:
        main_cpython()
