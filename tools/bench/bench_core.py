"""Bench: how many live-audio satellites one reference core serves within 20 ms per frame at p99.

Three kinds of process, so the load generator never competes with the core inside one event loop:

* the **core** (``CoreServer`` exactly as ``alabama core serve`` runs it, loopback only);
* one or more **simulators** (``--sim-procs``): plain blocking/non-blocking sockets, no asyncio.
  Each satellite does the Noise IK handshake and a Hello, opens one capture, then streams 16 kHz
  mono s16le audio at real-time pace: one StreamChunk per ``--chunk-ms`` (640 bytes at 20 ms), the
  N satellites' phases spread evenly over the period. Frames are pre-built (Envelope + frame
  prefix per seq, audio slices); per frame the simulator only stamps the send time, encrypts
  (Noise ChaChaPoly via ``cryptography``) and calls ``send()``. The simulators share the core's CPUs, so they
  are kept cheap without changing what each satellite does (its own Noise session, every frame encrypted,
  real-time pacing): speech frames are stamped by ``LsbStamper`` (integers and a table, ~3 µs a frame; numpy
  took ~14, ~10 % of a core at 200 boards), and a simulator that must wait wakes on a 1 ms grid
  (``--send-grid-ms``, default 1 since issue 40: every frame due by then is sent, each on its own socket at its
  own 20 ms pace, stamped when sent, its lateness in lag99; at 200 boards 20 % of a core instead of 32 %;
  ``--send-grid-ms 0`` sends each frame at its own due time, as before);
* this **driver**, which starts them per N, releases all simulators at one start instant and
  collects the numbers.

Processing delay of a frame = from the simulator's send timestamp (``CLOCK_MONOTONIC`` ns in the
first 8 bytes of the chunk tail; one clock for all processes on Linux) to the moment the core has
decrypted it, deframed it, decoded its Envelope, run the session checks and handed it to the voice
pipeline *and the pipeline has returned* (the hook wraps ``VoicePipeline.on_chunk``). So it
includes the kernel's loopback, the core's wait for its event loop, and all per-frame work.

Per N it prints p50/p99/max delay, frames dropped (sent but never processed), the simulators'
pace (nominal send duration / actual; 1.000 = real time) and send-lag p99, the core's CPU
(process CPU time / N / duration, as % of one core per stream, and µs per frame), and the
simulators' own CPU. An N is only judged when every simulator kept pace (>= 0.98 and send-lag
p99 within one chunk period); otherwise it is marked ``SIM-BEHIND`` and no verdict is given.
The last line names the largest N with p99 <= --budget-ms.

    .venv/bin/python tools/bench/bench_core.py                   # N = 100..600, 1 and 2 core workers
    .venv/bin/python tools/bench/bench_core.py --workers 2 --n 500 --sim-procs 2
    .venv/bin/python tools/bench/bench_core.py --n 200 --seconds 20 --mode wakeword

--mode ambient (default): an ambient CaptureOpen (no trigger) streamed continuously (spec §10.4).
--mode wakeword: a LIVE WAKEWORD capture, so the energy endpointer runs on every chunk (the tone
never stops and the endpointer's limits are lifted, so the turn lasts the whole run).
--wake-phrase "hey alabama": the core spots that phrase on every ambient capture (CoreServer(wake_phrase=...),
as ``alabama core serve --wake-phrase`` does) and the satellites stream looped espeak-ng speech (sentences
without the phrase, each satellite at its own offset into the loop) instead of a tone, so every spotter
does real work; each core configuration then runs its ladder with spotting off and on (``--spotting``),
one after the other in one run. With spotting on an N also needs the spotters to keep up (their backlog,
sampled every 0.2 s, stays under 1 s, else ``SPOT-BEHIND``) and prints ``hits`` (wake hits on the
speech, which has no wake phrase: false hits; the bench only counts them and starts no turn, so every stream
keeps spotting) and ``spot ms``
(largest backlog seen). ``ΔCPU/strm`` at the end: the core's extra CPU per stream with spotting on, as a
real-time ratio (xRT).

    .venv/bin/python tools/bench/bench_core.py --wake-phrase "hey alabama" --workers 1 --n 10 20 30 40

--wake-word okay_nabu: the same with a wake-word model engine spotting every ambient capture instead of the
keyphrase spotter (CoreServer(wake_word=...), as ``alabama core serve --wake-word`` does; issue 40's goal: >= 200
ambient boards per 2 cores with the microWakeWord engine). The satellites stream the same speech loop.

    .venv/bin/python tools/bench/bench_core.py --wake-word okay_nabu --workers 2 --spotting on --n 100 200 300

BENCH_CORE_PROFILE=PATH cProfiles the core process into PATH (one core worker: --workers 1); BENCH_CORE_PROFILE_CPU=1
times it in CPU time (time.process_time) instead of wall time, so a busy machine's waits do not land in whichever
call was running (a pipe write that wakes a spotting worker read 340 µs in wall time).
"""
import argparse
import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "host"))

TS_BYTES = 8
TS_SAMPLES = 64     # speech: the stamp's 64 bits in the lowest bit of a frame's first 64 samples (inaudible)


def lsb_stamp(piece, ns):
    """``piece`` (s16le) with ``ns`` written into the lowest bit of its first TS_SAMPLES samples."""
    import numpy as np
    a = np.frombuffer(piece, "<i2").copy()
    bits = np.unpackbits(np.frombuffer(ns.to_bytes(TS_BYTES, "little"), np.uint8)).astype("<i2")
    a[:TS_SAMPLES] = (a[:TS_SAMPLES] & ~1) | bits
    return a.tobytes()


class LsbStamper:
    """lsb_stamp for a fixed piece without numpy (the simulators stamp every frame, and their CPU is on the same 2
    cores as the core's): the piece's first TS_SAMPLES samples with their lowest bit cleared are kept as one
    big-endian integer, and the stamp's bits, spread by a table to one byte per sample (the low byte's place), are
    added to it. Equal to lsb_stamp (tests/host/test_bench_core_stamp.py), ~3x cheaper."""

    __slots__ = ("head", "rest")

    def __init__(self, piece):
        head = bytearray(piece[:2 * TS_SAMPLES])
        head[0::2] = bytes(b & 0xFE for b in head[0::2])
        self.head = int.from_bytes(head, "big")
        self.rest = bytes(piece[2 * TS_SAMPLES:])

    def stamp(self, ns):
        spread = b"".join(map(_SPREAD.__getitem__, ns.to_bytes(TS_BYTES, "little")))
        return (self.head + int.from_bytes(spread, "big")).to_bytes(2 * TS_SAMPLES, "big") + self.rest


#: stamp byte -> its 8 bits, most significant first, each as the low byte of one s16le sample (lsb_read's order)
_SPREAD = [bytes(x for k in range(7, -1, -1) for x in ((v >> k) & 1, 0)) for v in range(256)]
#: byte -> "0" or "1" (its lowest bit): the stamp read with one bytes.translate, not four numpy calls per frame
#: (the read runs in the core's process, inside the CPU the bench reports as the core's: ~10 µs a frame before).
_LSB_DIGIT = bytes(48 + (b & 1) for b in range(256))


def lsb_read(data):
    """The stamp lsb_stamp wrote: sample k's lowest bit is bit 7 - k % 8 of the stamp's little-endian byte k // 8."""
    digits = bytes(data[0:2 * TS_SAMPLES:2]).translate(_LSB_DIGIT)
    return int.from_bytes(int(digits, 2).to_bytes(TS_BYTES, "big"), "little")


def runq_wait_s():
    """Seconds this process has spent runnable but waiting for a CPU (Linux schedstat), or 0."""
    try:
        return int(open("/proc/self/schedstat").read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


# ----------------------------------------------------------------------------------- core child
SENTENCES = ("the weather today is mild with a light breeze from the west",
             "the meeting moved to thursday afternoon at three o'clock",
             "our garden needs water after such a long and sunny week",
             "can you read me the news headlines from this morning",
             "a quick brown fox jumps over the lazy dog",
             "the children are playing football in the park")   # no false "hey alabama" hit at 1e-20 (checked)
SPOT_BEHIND_MS = 1000.0
SPOT_DS = int(os.environ["BENCH_SPOT_DS"]) if os.environ.get("BENCH_SPOT_DS") else None   # --spot-ds (None: the spotter's default)


def speech_loop(path, phrase):
    """Write the looped speech the satellites stream with spotting (16 kHz s16le mono) to ``path``; returns
    (seconds, false hits of one Spotter over the loop played 3 times)."""
    from alabama.speech import audio, spotter
    pcm = b"".join(audio.synth(t, pad=(0.1, 0.1)) for t in SENTENCES)
    pathlib.Path(path).write_bytes(pcm)
    sp, hits = spotter.Spotter(phrase), 0
    for _ in range(3):
        hits += sum(sp.feed(f) is not None for f in audio.frames(pcm))
    sp.close()
    return len(pcm) / 32000, hits


def _watch_spotting(state):
    """Count wake hits (and only count them: no turn starts, so every stream keeps spotting for the whole run)
    and sample the spotters' backlog (bytes pushed but not yet spotted) every 0.2 s."""
    from alabama.core import hearing, pipeline, spotting
    feeders = state["feeders"] = []
    state["hits"], state["spot_max"] = 0, 0

    def registered(cls):
        init = cls.__init__

        def feeder_init(self, *a, **kw):
            init(self, *a, **kw)
            feeders.append(self)
        cls.__init__ = feeder_init
    registered(hearing.Feeder)
    registered(spotting.PoolStream)

    def wake(self, *a):
        state["hits"] += 1
    pipeline.VoicePipeline._on_wake = wake

    async def sample():
        while True:
            await asyncio.sleep(0.2)
            backlog = max((f.backlog() for f in feeders if not getattr(f, "closed", False)
                           and not (getattr(f, "task", None) and f.task.done())), default=0)
            state["spot_max"] = max(state["spot_max"], backlog)
    return sample


def spot_cpu_s(srv):
    """CPU seconds of the core's spotting processes (core/spotting.py) so far: they are not in os.times()."""
    pool = getattr(getattr(srv, "wake", None), "pool", None)
    total = 0.0
    for w in getattr(pool, "workers", ()):
        try:
            f = open("/proc/%d/stat" % w.proc.pid).read().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except (AttributeError, OSError, IndexError, ValueError):
            pass
    return total


def core_child(data_dir, out_path, workers=1, loop="asyncio", stamp="head", wake_phrase=""):
    from alabama.core import pipeline
    from alabama.core.workers import run_loop
    from alabama.core.server import CoreServer

    delays = []
    mono = time.monotonic_ns
    orig = pipeline.VoicePipeline.on_chunk

    def observed(self, ev):
        orig(self, ev)
        d = ev.data
        if stamp == "lsb":
            if len(d) >= 2 * TS_SAMPLES:
                delays.append(mono() - lsb_read(d))
        elif len(d) >= TS_BYTES:
            delays.append(mono() - int.from_bytes(d[:TS_BYTES], "little"))
    pipeline.VoicePipeline.on_chunk = observed
    # a tone that never stops: keep the endpointer from ending the turn inside the run
    pipeline.EnergyEndpointer.__init__.__defaults__ = (1, 400.0, 3.0, 600, 10 ** 9, 10 ** 9, 0)

    kw = dict(ping_interval=0, control=False, save_reports=False, max_concurrent_streams=8, hello_timeout=120,
              handshake_timeout=120, wake_phrase=wake_phrase or None)
    if wake_phrase and os.environ.get("BENCH_WAKE_WORD"):
        kw["wake_phrase"], kw["wake_word"] = None, os.environ["BENCH_WAKE_WORD"]   # --wake-word: a model engine
    elif wake_phrase and SPOT_DS is not None:
        from alabama.core.hearing import Wake
        kw["wake_phrase"] = Wake(wake_phrase, ds=SPOT_DS)
    state = {}
    sample = _watch_spotting(state) if wake_phrase else None

    def reset():
        delays.clear()
        state["cpu0"], state["wait0"] = os.times(), runq_wait_s()
        state["hits"] = state["spot_max"] = 0
        state["spot0"] = spot_cpu_s(state.get("srv"))
        state["skipped0"] = sum(getattr(f, "skipped", 0) for f in state.get("feeders", ()))
        if sample is not None and "sampler" not in state:
            state["sampler"] = asyncio.get_running_loop().create_task(sample())

    def finish(srv, path):
        t = os.times()
        c0 = state["cpu0"]
        cpu = (t.user + t.system) - (c0.user + c0.system)
        violations = sum(len(r.violations) for r in srv.reports)
        spot_cpu = spot_cpu_s(srv) - state["spot0"]
        cpu += spot_cpu                                  # the spotting processes are the core's too
        skipped = sum(getattr(f, "skipped", 0) for f in state.get("feeders", ())) - state.get("skipped0", 0)
        pathlib.Path(path).write_text(json.dumps({"delays_ns": delays, "cpu_s": cpu, "violations": violations,
                                                  "runq_wait_s": runq_wait_s() - state["wait0"],
                                                  "sessions": len(srv.connections), "hits": state.get("hits", 0),
                                                  "spot_max_bytes": state.get("spot_max", 0),
                                                  "spot_cpu_s": spot_cpu, "skipped_bytes": skipped}))

    if workers > 1:   # alabama core serve --workers N: N worker processes on one port (workers.py)
        from alabama.core import workers as wk

        def on_start(srv, i):
            state["srv"] = srv
            reset()
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, reset)
        wk.serve(data_dir, workers, host="127.0.0.1", port=0, loop=loop,
                 ready=lambda port, key: print(port, key, flush=True), on_start=on_start,
                 on_stop=lambda srv, i: finish(srv, "%s.w%d" % (out_path, i)), **kw)
        return

    async def main():
        srv = CoreServer(data_dir, host="127.0.0.1", port=0, **kw)
        await srv.start()
        print(srv.port, srv.public_key_hex, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        state["srv"] = srv
        reset()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGUSR1, reset)
        await stop.wait()
        finish(srv, out_path + ".w0")
        await srv.stop()
    prof = os.environ.get("BENCH_CORE_PROFILE")
    if prof:
        import cProfile
        p = cProfile.Profile(time.process_time) if os.environ.get("BENCH_CORE_PROFILE_CPU") else cProfile.Profile()
        p.runctx("run_loop(main, loop)", globals(), locals())
        p.dump_stats(prof)
    else:
        run_loop(main, loop)


# ----------------------------------------------------------------------------------- simulator child
def sim_child(port, key_hex, n_total, lo, hi, seconds, chunk_ms, mode, grid_s=0.0, audio_path="-"):
    """Satellites lo..hi-1 of n_total. Prints "ready", reads the start instant (monotonic s) from
    stdin, streams, prints one JSON line of results."""
    import select
    import socket

    from alabama.core.testsat import capture_open, frame, hello, tone
    from alabama.noise.transport import NoiseConnection
    from alabama.v1 import operations_pb2 as ops
    from alabama.v1.envelope_pb2 import Envelope
    from alabama.wire.frame import varint

    key = bytes.fromhex(key_hex)
    period = chunk_ms / 1000.0
    step = 32 * chunk_ms                       # bytes of 16 kHz mono s16le per chunk
    n_frames = int(round(seconds / period))
    cid = 3
    trig = ops.TRIGGER_UNSPECIFIED if mode == "ambient" else ops.WAKEWORD

    sats = []                                  # (sock, conn, phase_s)
    for i in range(lo, hi):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = NoiseConnection(True, os.urandom(32), pattern="IK", remote_static=key)
        sock.sendall(conn.start())
        while not conn.handshake_done:
            data = sock.recv(65536)
            if not data:
                raise SystemExit("core closed during the handshake")
            conn.receive(data)
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
        sock.sendall(conn.encrypt(frame(hello(id_=1, display_name="bench-%d" % i))))
        sats.append((sock, conn, (i / n_total) * period))
    for sock, conn, _ in sats:                 # HelloResponse (and whatever follows) before the capture
        while not conn.read_plaintext():
            conn.receive(sock.recv(65536))
        sock.sendall(conn.encrypt(frame(capture_open(cid, trigger=trig))))

    # pre-built frames: prefix (total_len, header_len, Envelope) per seq; audio slices after the timestamp
    prefixes = []
    for seq in range(n_frames):
        e = Envelope(id=cid)
        e.stream_chunk.seq = seq
        h = e.SerializeToString()
        hl = varint(len(h))
        prefixes.append(varint(len(hl) + len(h) + step) + hl + h)
    speech = audio_path != "-"
    pcm = pathlib.Path(audio_path).read_bytes() if speech else tone(1000)
    skip = 0 if speech else TS_BYTES           # speech: whole frames, the stamp goes in their lowest bits
    pieces = [pcm[p + skip:p + step] for p in range(0, len(pcm) - step + 1, step)]
    # speech: each satellite at its own place in the loop (spotters not in lock step); the tone: all the same
    offsets = [0 if audio_path == "-" else (i * 7919) % len(pieces) for i in range(lo, hi)]
    stampers = [LsbStamper(p) for p in pieces] if speech else None   # speech: the stamp in the lowest bits
    ep = select.epoll()
    fds = {}
    for sock, conn, _ in sats:
        sock.setblocking(False)
        ep.register(sock.fileno(), select.EPOLLIN)
        fds[sock.fileno()] = sock
    pending = [b""] * len(sats)
    print("ready", flush=True)
    t0 = float(sys.stdin.readline())

    m = len(sats)
    lags = []
    blocked = 0
    drained = 0
    mono, mono_ns, sleep = time.monotonic, time.monotonic_ns, time.sleep
    next_drain = t0 + 0.05
    cpu0 = os.times()
    wait0 = runq_wait_s()
    encs = [conn.encrypt for _, conn, _ in sats]
    socks = [s for s, _, _ in sats]
    phases = [p for _, _, p in sats]
    last_send = t0
    for seq in range(n_frames):
        base = t0 + seq * period
        prefix = prefixes[seq]
        for j in range(m):
            idx = (seq + offsets[j]) % len(pieces)
            due = base + phases[j]
            now = mono()
            while now < due:
                sleep(due - now + grid_s)       # grid_s > 0: wake once for every frame due in the next grid_s
                now = mono()
            lags.append(now - due)
            if speech:
                msg = encs[j](prefix + stampers[idx].stamp(mono_ns()))
            else:
                msg = encs[j](prefix + mono_ns().to_bytes(TS_BYTES, "little") + pieces[idx])
            if pending[j]:
                msg = pending[j] + msg
                pending[j] = b""
            try:
                k = socks[j].send(msg)
            except BlockingIOError:
                k = 0
            if k < len(msg):
                blocked += 1
                pending[j] = msg[k:]
            if now >= next_drain:              # read (and drop) what the core sends: never a slow reader
                next_drain = now + 0.05
                for fd, _ in ep.poll(0):
                    try:
                        while socks and fds[fd].recv(65536):
                            drained += 1
                    except (BlockingIOError, ConnectionError):
                        pass
        last_send = mono()
    # flush any remainder
    deadline = mono() + 5
    while any(pending) and mono() < deadline:
        for j in range(m):
            if pending[j]:
                try:
                    k = socks[j].send(pending[j])
                    pending[j] = pending[j][k:]
                except BlockingIOError:
                    pass
        sleep(0.001)
    cpu1 = os.times()
    last_due = t0 + (n_frames - 1) * period + max(phases)
    lags.sort()
    res = {"sent": m * n_frames, "pace": (last_due - t0) / max(1e-9, last_send - t0),
           "lag_p99_ms": 1000 * lags[int(0.99 * (len(lags) - 1))], "lag_max_ms": 1000 * lags[-1],
           "blocked": blocked, "cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
           "elapsed": last_send - t0, "runq_wait_s": runq_wait_s() - wait0}
    print(json.dumps(res), flush=True)
    sys.stdin.readline()                       # keep the connections open until the core has counted
    for s in socks:
        s.close()


# ----------------------------------------------------------------------------------- driver
def _prioritize(nice):
    """In the child: its own session, so (with Linux autogroup scheduling) its own scheduling group,
    whose niceness is then set; plain os.nice() only orders processes inside one autogroup."""
    os.setsid()
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass
    os.nice(nice)


def run_one(n, args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "stats.json")
        pre = (lambda: _prioritize(args.nice)) if args.nice else None
        core = subprocess.Popen([sys.executable, __file__, "--core-child", d, out, str(args.workers_now), args.loop_now,
                                 "lsb" if args.wake_phrase else "head", args.wake_now],
                                stdout=subprocess.PIPE, text=True, preexec_fn=pre)
        sims = []
        try:
            port, key = core.stdout.readline().split()
            procs = max(1, min(args.sim_procs, n))
            bounds = [n * p // procs for p in range(procs + 1)]
            for p in range(procs):
                sims.append(subprocess.Popen(
                    [sys.executable, __file__, "--sim-child", port, key, str(n), str(bounds[p]), str(bounds[p + 1]),
                     str(args.seconds), str(args.chunk_ms), args.mode, str(args.send_grid_ms / 1000.0),
                     args.audio_path if args.wake_phrase else "-"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=pre))
            for s in sims:
                line = s.stdout.readline()
                if line.strip() != "ready":
                    raise SystemExit("simulator failed to start: %r" % line)
            # spotters are built as the captures open (~0.2 s of CPU each): measure once they are
            time.sleep(0.3 + (0.25 * n / max(1, args.workers_now) if args.wake_now else 0))
            os.kill(core.pid, signal.SIGUSR1)  # start measuring: steady state only
            time.sleep(0.05)
            t0 = time.monotonic() + 0.2
            for s in sims:
                s.stdin.write("%r\n" % t0)
                s.stdin.flush()
            results = [json.loads(s.stdout.readline()) for s in sims]
            time.sleep(1.0)                    # let the core finish what is in flight
            os.kill(core.pid, signal.SIGTERM)
            core.wait(60)
        finally:
            for s in sims:
                try:
                    s.stdin.write("done\n")
                    s.stdin.flush()
                except OSError:
                    pass
                s.wait(30)
            if core.poll() is None:
                core.send_signal(signal.SIGTERM)
                core.wait(60)
        parts = [json.loads(p.read_text()) for p in sorted(pathlib.Path(d).glob("stats.json.w*"))]
        if len(parts) != args.workers_now:
            raise SystemExit("bench_core: %d of %d core workers reported" % (len(parts), args.workers_now))
        stats = {"delays_ns": [x for p in parts for x in p["delays_ns"]], "cpu_s": sum(p["cpu_s"] for p in parts),
                 "violations": sum(p["violations"] for p in parts), "sessions": sum(p["sessions"] for p in parts),
                 "runq_wait_s": max(p["runq_wait_s"] for p in parts),
                 "hits": sum(p["hits"] for p in parts), "spot_max_bytes": max(p["spot_max_bytes"] for p in parts),
                 "spot_cpu_s": sum(p["spot_cpu_s"] for p in parts),
                 "skipped_bytes": sum(p["skipped_bytes"] for p in parts),
                 "worker_cpu_s": [p["cpu_s"] for p in parts], "worker_frames": [len(p["delays_ns"]) for p in parts]}
    dl = sorted(stats["delays_ns"])
    pct = (lambda p: dl[min(len(dl) - 1, int(p * len(dl)))] / 1e6) if dl else (lambda p: float("nan"))
    sent = sum(r["sent"] for r in results)
    return {"n": n, "frames": len(dl), "sent": sent, "dropped": sent - len(dl),
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": dl[-1] / 1e6 if dl else float("nan"),
            "cpu_per_stream_pct": 100 * stats["cpu_s"] / (n * args.seconds),
            "us_per_frame": 1e6 * stats["cpu_s"] / max(1, len(dl)), "core_cpu_pct": 100 * stats["cpu_s"] / args.seconds,
            "pace": min(r["pace"] for r in results), "lag_p99_ms": max(r["lag_p99_ms"] for r in results),
            "sim_cpu_pct": 100 * sum(r["cpu_s"] for r in results) / args.seconds,
            "blocked": sum(r["blocked"] for r in results), "violations": stats["violations"],
            "sessions": stats["sessions"], "worker_cpu_s": stats["worker_cpu_s"],
            "hits": stats["hits"], "spot_ms": stats["spot_max_bytes"] / 32.0, "spotting": bool(args.wake_now),
            "skipped_s": stats["skipped_bytes"] / 32000.0,
            # the spotting processes' CPU per second of audio they spotted (skipped audio is not spotted)
            "spot_xrt": stats["spot_cpu_s"] / max(1e-9, n * args.seconds - stats["skipped_bytes"] / 32000.0),
            "worker_frames": stats["worker_frames"],
            "core_wait_pct": 100 * stats["runq_wait_s"] / args.seconds,
            "sim_wait_pct": 100 * max(r["runq_wait_s"] / max(1e-9, r["elapsed"]) for r in results)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--core-child", nargs=6, metavar=("DIR", "OUT", "WORKERS", "LOOP", "STAMP", "WAKE"), help=argparse.SUPPRESS)
    ap.add_argument("--sim-child", nargs=10, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, nargs="*", default=[100, 200, 300, 400, 500, 600])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--chunk-ms", type=int, default=20)
    ap.add_argument("--send-grid-ms", type=float, default=1.0,
                    help="simulator wake-up grid: when it must wait, it sleeps this much past the next due send and "
                         "sends every frame due by then (each still on its own socket, stamped when sent, its lateness "
                         "in lag99): fewer sleeps, fewer wake-ups, burstier arrivals (default 1 ms since issue 40: the "
                         "simulators' CPU shares the core's; 0: each frame at its due time, as before)")
    ap.add_argument("--budget-ms", type=float, default=20.0)
    ap.add_argument("--sim-procs", type=int, default=1, help="simulator processes (default 1)")
    try:
        import uvloop  # noqa: F401
        configs = ["1", "2", "2u"]
    except ImportError:
        configs = ["1", "2"]
    ap.add_argument("--workers", nargs="*", default=configs,
                    help="core configurations, one ladder each: worker processes on one port (alabama core serve "
                         "--workers N), suffix u = on uvloop (--loop uvloop); 1 = today's single-process asyncio core "
                         "(default: %s)" % " ".join(configs))
    ap.add_argument("--mode", choices=("ambient", "wakeword"), default="ambient")
    ap.add_argument("--wake-phrase", default="",
                    help="spot this wake phrase on the ambient captures (alabama core serve --wake-phrase); the "
                         "satellites then stream looped speech, and each configuration runs with spotting off and on")
    ap.add_argument("--wake-word", default="",
                    help="spot with this wake-word model instead (alabama core serve --wake-word, e.g. okay_nabu or "
                         "open:alexa); implies spotting like --wake-phrase")
    ap.add_argument("--spotting", choices=("both", "on", "off"), default="both",
                    help="with --wake-phrase: which ladders to run (default both, off first)")
    ap.add_argument("--spot-ds", type=int, default=None,
                    help="the spotters' pocketsphinx frame downsampling (Spotter(ds=...)); default: the spotter's "
                         "(alabama.speech.spotter.DEFAULT_OPTIONS)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--nice", type=int, default=0,
                    help="run the core and simulators at this niceness, each in its own autogroup (negative needs "
                         "root; takes CPU from everything else on the machine while it runs): measures the core as "
                         "if the CPUs were its own; reported in the header")
    ap.add_argument("--max-wait-pct", type=float, default=10.0,
                    help="above this core run-queue wait (%% of the run) an over-budget N is CONTENDED, not judged")
    args = ap.parse_args()
    if args.send_grid_ms < 0:
        raise SystemExit("bench_core: --send-grid-ms must be 0 or more (milliseconds), not %g" % args.send_grid_ms)
    os.environ["BENCH_SPOT_DS"] = "" if args.spot_ds is None else str(args.spot_ds)   # the core children read it
    if args.wake_word and not args.core_child:
        from alabama.speech import wakeword as _ww
        try:
            _ww.choose(args.wake_word)
        except _ww.WakeError as e:
            raise SystemExit("bench_core: %s" % e)
        os.environ["BENCH_WAKE_WORD"] = args.wake_word
        args.wake_phrase = args.wake_phrase or "hey alabama"   # the spotting machinery; the loop's check phrase
    if args.core_child:
        core_child(args.core_child[0], args.core_child[1], int(args.core_child[2]), args.core_child[3],
                   args.core_child[4], args.core_child[5])
        return
    if args.sim_child:
        a = args.sim_child
        sim_child(int(a[0]), a[1], int(a[2]), int(a[3]), int(a[4]), float(a[5]), int(a[6]), a[7], float(a[8]), a[9])
        return
    runs = [(cfg, "") for cfg in args.workers]
    if args.wake_phrase:
        if args.mode != "ambient":
            raise SystemExit("bench_core: --wake-phrase spots ambient captures: use --mode ambient")
        spots = {"both": ("off", "on"), "on": ("on",), "off": ("off",)}[args.spotting]
        runs = [(cfg, args.wake_phrase if s == "on" else "") for cfg in args.workers for s in spots]
    print("bench_core: %s captures, 16 kHz mono, %d ms chunks, %.0f s per N, %d CPUs, load avg %.2f, %d sim proc(s), "
          "nice %d, sim send grid %.1f ms, core configurations %s" % (
              args.mode, args.chunk_ms, args.seconds, os.cpu_count(), os.getloadavg()[0], args.sim_procs, args.nice,
              args.send_grid_ms, " ".join(args.workers)))
    tmp = None
    if args.wake_phrase:
        tmp = tempfile.TemporaryDirectory()
        args.audio_path = os.path.join(tmp.name, "speech.raw")
        secs, false_hits = speech_loop(args.audio_path, args.wake_phrase)
        from alabama.speech import spotter as _sp
        print("spotter frame downsampling ds=%s" % (args.spot_ds if args.spot_ds is not None else
                                                    "%s (default)" % _sp.DEFAULT_OPTIONS["ds"]))
        print("wake phrase %r: satellites stream %.1f s of espeak-ng speech, looped (one spotter over it 3 times: %d "
              "false hits)" % (args.wake_phrase, secs, false_hits))
        if args.wake_word:
            print("the core spots with wake word %r (--wake-word), not the phrase above" % args.wake_word)
    best, all_rows = {}, {}
    for cfg, wake in runs:
        key = cfg + ("+spot" if wake else "")
        best[key], all_rows[key] = ladder(args, cfg, wake)
    print("CPU%%/strm = core CPU (all workers) / N / duration (%% of one core per stream); core %% and sim %% are %% of one"
          " core; load avg now %.2f" % os.getloadavg()[0])
    print("wait%% c/s = time the core (its most-waiting worker) / a simulator was runnable but waited for a CPU "
          "(/proc schedstat), %% of the run: other processes on this machine, not the core's own work; CONTENDED = over "
          "budget while the core waited > %.0f%%: no verdict" % args.max_wait_pct)
    print("load: %d simulator process(es) on the same %d CPUs as the core (sim %% above is their CPU)"
          % (args.sim_procs, os.cpu_count()))
    if args.wake_phrase:
        spot_summary(args, best, all_rows)
    else:
        today = best.get("1")
        for cfg in args.workers:
            b = best[cfg]
            line = "issue 12 target: >= %d live satellites within %.0f ms p99 -- %s: largest N %s" % (
                TARGET_N, args.budget_ms, _label(cfg), b)
            if b:
                line += "; now/target = %.2f (%s)" % (b / TARGET_N, "met" if b >= TARGET_N else "NOT met")
                if today and cfg != "1":
                    line += "; / today's single process (%d) = %.2f" % (today, b / today)
            print(line)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({str(k): v for k, v in all_rows.items()}, indent=1))
    if tmp is not None:
        tmp.cleanup()


def spot_summary(args, best, all_rows):
    """Issue 28's lines: largest N with spotting on vs off, and the spotting's CPU per stream (xRT)."""
    for cfg in args.workers:
        off, on = best.get(cfg), best.get(cfg + "+spot")
        target = WORD_TARGET_N if args.wake_word else SPOT_TARGET_N
        line = "%s target: >= %d ambient boards with spotting (%s) within %.0f ms p99 -- %s: largest N spotting on %s" % (
            "issue 40" if args.wake_word else "issue 28", target, args.wake_word or "keyphrase spotter",
            args.budget_ms, _label(cfg), on)
        if cfg in best:
            line += ", off %s" % off
        if on:
            line += "; on/target = %.2f (%s)" % (on / target, "met" if on >= target else "NOT met")
        if on and off:
            line += "; on/off = %.2f" % (on / off)
        print(line)
        rows_off = {r["n"]: r for r in all_rows.get(cfg, [])}
        for r in all_rows.get(cfg + "+spot", []):
            o = rows_off.get(r["n"])
            print("  N=%d: the spotting processes used %.4f CPU s per second of audio spotted per stream (xRT)%s" % (
                r["n"], r["spot_xrt"], "" if o is None else "; core CPU per stream on %.3f %% / off %.3f %% of a core"
                % (r["cpu_per_stream_pct"], o["cpu_per_stream_pct"])))


SPOT_TARGET_N = 20   # issue 28: >= 20 concurrent ambient boards with wake-phrase spotting, 20 ms p99, 2 cores
WORD_TARGET_N = 200  # issue 40: >= 200 with the microWakeWord engine spotting (--wake-word)
TARGET_N = 500   # issue 12: >= 500 live 16 kHz satellites, p99 frame handling <= 20 ms, this 2-core machine


def _label(cfg):
    nw, loop = int(cfg.rstrip("u")), "uvloop" if cfg.endswith("u") else "asyncio"
    if nw == 1 and loop == "asyncio":
        return "one process, asyncio (today's core: alabama core serve)"
    return "%d worker process(es) on one port, %s (alabama core serve --workers %d --loop %s)" % (nw, loop, nw, loop)


def ladder(args, cfg, wake=""):
    """The N ladder of one core configuration: one row per N; returns (largest N within budget, rows)."""
    nw = int(cfg.rstrip("u"))
    args.workers_now, args.loop_now, args.wake_now = nw, "uvloop" if cfg.endswith("u") else "asyncio", wake
    print("-- core: %s%s" % (_label(cfg), ", wake %r spotted on every ambient capture" % (args.wake_word or wake) if wake
                             else ", spotting off" if args.wake_phrase else ""))
    hdr = ("N", "p50 ms", "p99 ms", "max ms", "dropped", "pace", "lag99 ms", "CPU%/strm", "us/frame", "core %",
           "sim %", "wait% c/s", "viol", "sess", "verdict")
    print("%4s %7s %7s %8s %7s %6s %8s %9s %8s %6s %6s %10s %4s %5s  %s" % hdr)
    best = None
    rows = []
    for n in args.n:
        r = run_one(n, args)
        kept = r["pace"] >= 0.98 and r["lag_p99_ms"] <= args.chunk_ms
        spot_ok = not wake or (r["spot_ms"] <= SPOT_BEHIND_MS and not r["skipped_s"])
        ok = kept and spot_ok and r["p99_ms"] <= args.budget_ms and r["dropped"] == 0 and r["sessions"] == n
        if ok:
            r["verdict"] = "ok"
        elif kept and not spot_ok:
            r["verdict"] = "SPOT-BEHIND"
        elif not kept:
            r["verdict"] = "SIM-BEHIND"
        elif r["core_wait_pct"] > args.max_wait_pct:
            r["verdict"] = "CONTENDED"
        else:
            r["verdict"] = "OVER"
        rows.append(r)
        split = "" if nw == 1 else "  (frames per worker %s, CPU %% %s)" % (
            "/".join(map(str, r["worker_frames"])), "/".join("%.0f" % (100 * c / args.seconds) for c in r["worker_cpu_s"]))
        if wake:
            split += "  (hits %d, spot backlog max %.0f ms, skipped %.1f s, spotting %.4f xRT)" % (
                r["hits"], r["spot_ms"], r["skipped_s"], r["spot_xrt"])
        print("%4d %7.2f %7.2f %8.2f %7d %6.3f %8.2f %9.3f %8.1f %6.1f %6.1f %5.0f/%-4.0f %4d %5d  %s%s" % (
            r["n"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["dropped"], r["pace"], r["lag_p99_ms"],
            r["cpu_per_stream_pct"], r["us_per_frame"], r["core_cpu_pct"], r["sim_cpu_pct"], r["core_wait_pct"],
            r["sim_wait_pct"], r["violations"], r["sessions"], r["verdict"], split), flush=True)
        if ok and (best is None or n > best):
            best = n
    print("largest N with p99 <= %.0f ms (simulator at pace, nothing dropped, every satellite live in the core): %s"
          % (args.budget_ms, best))
    big = max(rows, key=lambda r: r["n"])
    print("core CPU at N=%d: %.1f us per frame -> %d core(s) would be saturated at N = %.0f (%d ms chunks)"
          % (big["n"], big["us_per_frame"], nw, nw * 1e6 / big["us_per_frame"] / (1000.0 / args.chunk_ms),
             args.chunk_ms))
    return best, rows


if __name__ == "__main__":
    main()
