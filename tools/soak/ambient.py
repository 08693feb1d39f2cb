"""`make soak-ambient`: hours of ambient audio through the core's wake-phrase spotting path; memory must stay flat.

The rig: the core's own ``SpotterPool`` (core/spotting.py: the real ``python -m alabama.core.spotting`` worker
processes and the ``PoolStream`` the pipeline pushes an ambient capture's audio into), driven from this process
the way the pipeline drives it: ``push`` 20 ms frames, read hits back, and at a hit drop the stream and open a
fresh one (the core's turn ends the ambient capture; the board resumes on a new id). It feeds **the pool
directly, as fast as the workers spot** (each stream keeps at most ``--inflight-s`` of audio in flight, so no
audio is skipped), not through a satellite connection: the core's pipeline takes a board's frames as they come
and a board sends them in real time, so hours of audio through a session would take hours.

The audio, per stream, looped: a 64 s unit of espeak-ng speech (the spotter bench's negatives, and "hey alabama,
what time is it" once: a hit per loop) over low noise. Sampled every ``--sample-min`` minutes of stream-0 audio:
this process's RSS and Python heap (tracemalloc: the pool's buffers and streams live here, as in the core; taken
with no audio in flight: the feeders pause and the workers answer everything sent first) and
each worker's RSS and Python allocated blocks (the pool's STATS message). Verdict per series: soak.trend after
the first ``--warmup-min`` minutes (RSS floor 1 MiB, heap floor 64 KiB, blocks floor 2000).

    .venv/bin/python tools/soak/ambient.py [--hours 2] [--streams 2] [--processes 2]

Exit 0 when every series is flat, 1 when one is not. Figures: docs/soak.md, "Ambient".
"""
import argparse
import asyncio
import json
import pathlib
import sys
import time
import tracemalloc

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(HERE))

import soak  # noqa: E402  (tools/soak/soak.py: linfit, trend)

FLOORS = {"rss_kb": 1024, "heap_b": 64 * 1024, "blocks": 2000}


def ambient_unit():
    """64 s of 16 kHz s16le: speech without the phrase, then the phrase and a command, over quiet noise."""
    import numpy as np
    from alabama.speech import audio
    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    import bench_spotter
    speech = audio.synth(audio.OTHER_SPEECH + " ".join(bench_spotter.NEG_SENTENCES[:8]), voice="en-us", speed=160)
    speech += audio.synth("hey alabama, what time is it") + audio.silence(2.0)
    n = 64 * 32000
    pcm = (speech * (n // len(speech) + 1))[:n]
    mix = np.frombuffer(pcm, "<i2").astype(np.int32) + np.frombuffer(audio.noise(64.0, rms=150, seed=3), "<i2")
    return np.clip(mix, -32768, 32767).astype("<i2").tobytes()


async def feed(pool, unit, seconds, inflight_s, counters, index, gate):
    """One ambient stream of ``seconds`` through the pool; a hit drops it and opens a fresh one."""
    from alabama.speech import BYTES_PER_SECOND, FRAME_BYTES
    total = int(seconds * BYTES_PER_SECOND) & ~1
    limit = int(inflight_s * BYTES_PER_SECOND)
    box = {}

    def on_result(result):
        counters["hits"][index] += 1
        box["hit"] = True

    s = pool.stream(on_result)
    pos = 0
    while pos < total:
        if not gate.is_set():             # a sample is due: drain this stream's audio in flight, then wait
            while s._inflight_bytes and not s.off:
                await asyncio.sleep(0.002)
            counters["idle"].add(index)
            await gate.wait()
            counters["idle"].discard(index)
        if box.pop("hit", False):
            s.drop()
            s = pool.stream(on_result)
            counters["reopened"] += 1
        i = pos % len(unit)
        s.push(unit[i:i + FRAME_BYTES])
        pos += FRAME_BYTES
        counters["fed"][index] = pos
        while s.backlog() > limit and not s.off:
            await asyncio.sleep(0.002)
        if s.off:
            raise RuntimeError("spotting turned off on stream %d: see the log" % index)
    counters["skipped"] += s.skipped
    s.drop()


async def run(args):
    from alabama.core.spotting import SpotterPool, rss_kb
    from alabama.speech import spotter, wakeword
    unit = ambient_unit()
    pool = SpotterPool(wakeword.choose(), processes=args.processes)      # the keyphrase spotter, its defaults
    counters = {"hits": [0] * args.streams, "fed": [0] * args.streams, "reopened": 0, "skipped": 0, "idle": set()}
    gate = asyncio.Event()
    gate.set()
    log_path = pathlib.Path(args.out).with_suffix(".samples.jsonl")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sample_log = open(log_path, "w")     # samples go to disk at once: the measured heap holds none of them
    last = {}
    tracemalloc.start(args.trace_frames)
    snaps = {}
    t0 = time.monotonic()
    cpu0 = time.process_time()
    seconds = args.hours * 3600

    async def take_sample():
        workers = await pool.stats()
        heap = tracemalloc.get_traced_memory()[0]
        last.clear()
        last.update({"audio_min": counters["fed"][0] / 32000 / 60, "wall_s": time.monotonic() - t0,
                     "core": {"rss_kb": rss_kb(), "heap_b": heap}, "workers": workers,
                     "hits": list(counters["hits"])})
        sample_log.write(json.dumps(last) + "\n")
        sample_log.flush()
        print("  %6.1f min of audio/stream, %4.0f s: core RSS %d kB heap %d B; workers %s; hits %s"
              % (last["audio_min"], last["wall_s"], last["core"]["rss_kb"], heap,
                 ", ".join("RSS %d kB blocks %d" % (w["rss_kb"], w["blocks"]) for w in workers), counters["hits"]),
              flush=True)

    async def sampler(tasks):
        every = args.sample_min * 60 * 32000
        next_at = 0
        while not all(t.done() for t in tasks):
            if counters["fed"][0] >= next_at or all(t.done() for t in tasks[:1]):
                gate.clear()                  # sample with no audio in flight: the heap without the transient buffers
                while not all(t.done() or i in counters["idle"] for i, t in enumerate(tasks)):
                    await asyncio.sleep(0.005)
                await take_sample()
                if "warm" not in snaps and last["audio_min"] >= args.warmup_min:
                    snaps["warm"] = tracemalloc.take_snapshot()
                gate.set()
                if tasks[0].done():
                    return
                next_at += every
            await asyncio.sleep(0.2)

    tasks = [asyncio.ensure_future(feed(pool, unit, seconds, args.inflight_s, counters, i, gate))
             for i in range(args.streams)]
    try:
        await asyncio.gather(sampler(tasks), *tasks)
        for _ in range(100):              # the last answers and the loop's callbacks for them settle first
            await asyncio.sleep(0.01)
        await take_sample()
        grew = []
        if "warm" in snaps:               # where this process's heap grew after the warm-up (the largest sites)
            for st in tracemalloc.take_snapshot().compare_to(snaps["warm"], "traceback")[:3]:
                grew.append("%+d B in %d blocks at %s" % (st.size_diff, st.count_diff,
                                                         " <- ".join(str(f) for f in reversed(st.traceback[-4:]))))
    finally:
        await pool.close()
        sample_log.close()
    samples = [json.loads(line) for line in log_path.read_text().splitlines()]
    return {"hours": args.hours, "streams": args.streams, "processes": args.processes,
            "options": spotter.DEFAULT_OPTIONS, "threshold": spotter.DEFAULT_THRESHOLD,
            "wall_s": time.monotonic() - t0, "core_cpu_s": time.process_time() - cpu0, "samples": samples,
            "hits": counters["hits"], "reopened": counters["reopened"], "skipped": counters["skipped"],
            "heap_growth_sites": grew}


def series(result):
    """{name: (xs in hours, ys)}: the core's RSS and heap, each worker's RSS and blocks."""
    out = {}
    ss = result["samples"]
    xs = [s["audio_min"] / 60 for s in ss]
    out["core RSS (kB)"] = ("rss_kb", xs, [s["core"]["rss_kb"] for s in ss])
    out["core Python heap (B)"] = ("heap_b", xs, [s["core"]["heap_b"] for s in ss])
    for i in range(len(ss[0]["workers"])):
        pts = [(x, s["workers"][i]) for x, s in zip(xs, ss) if i < len(s["workers"])]
        out["worker %d RSS (kB)" % i] = ("rss_kb", [x for x, _ in pts], [w["rss_kb"] for _, w in pts])
        out["worker %d Python blocks" % i] = ("blocks", [x for x, _ in pts], [w["blocks"] for _, w in pts])
    return out


def verdict(result, warmup_h):
    rows, ok = [], True
    for name, (kind, xs, ys) in series(result).items():
        kept = [(x, y) for x, y in zip(xs, ys) if x >= warmup_h]
        a, slope, _ = soak.linfit([x for x, _ in kept], [y for _, y in kept])
        try:
            t = soak.trend([x for x, _ in kept], [y for _, y in kept], FLOORS[kind], bad_sign=+1)
            flat = t["flat"]
        except ValueError as e:              # too few samples: no verdict
            t, flat = {"error": str(e)}, None
        ok = ok and flat is not False
        rows.append({"series": name, "start": ys[0], "after_warmup": kept[0][1] if kept else None, "end": ys[-1],
                     "max": max(ys), "slope_per_h": slope, "flat": flat})
    return ok, rows


def table(result, rows):
    lines = ["| series | start | after warm-up | end | max | slope per hour (after warm-up) | flat |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %d | %s | %d | %d | %+.0f | %s |" % (
            r["series"], r["start"], "%d" % r["after_warmup"] if r["after_warmup"] is not None else "-", r["end"],
            r["max"], r["slope_per_h"], {True: "yes", False: "**no**", None: "-"}[r["flat"]]))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=2.0, help="audio per stream (default %(default)s)")
    ap.add_argument("--streams", type=int, default=2, help="concurrent ambient streams (default %(default)s)")
    ap.add_argument("--processes", type=int, default=2, help="spotting worker processes (default %(default)s)")
    ap.add_argument("--sample-min", type=float, default=5.0, help="minutes of audio between samples")
    ap.add_argument("--warmup-min", type=float, default=10.0, help="minutes of audio left out of the trend")
    ap.add_argument("--inflight-s", type=float, default=1.0, help="audio in flight per stream (never skipped)")
    ap.add_argument("--trace-frames", type=int, default=8, help="tracemalloc traceback depth (growth sites)")
    ap.add_argument("--out", default=str(ROOT / "build" / "soak-ambient" / "result.json"))
    a = ap.parse_args(argv)
    from alabama.speech import SpeechUnavailable, load
    try:
        load()
    except SpeechUnavailable as e:
        print("soak-ambient: %s" % e)
        return 2
    print("soak-ambient: %.2f h of ambient audio x %d streams through %d spotting workers (fed at full speed)"
          % (a.hours, a.streams, a.processes), flush=True)
    result = asyncio.run(run(a))
    ok, rows = verdict(result, a.warmup_min / 60)
    result["verdict"] = rows
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print("%.2f h of audio per stream in %.0f s wall (%.0fx real time per stream); hits per stream %s, streams "
          "reopened %d, audio skipped %d B; options %s" % (
              result["samples"][-1]["audio_min"] / 60, result["wall_s"],
              result["samples"][-1]["audio_min"] * 60 / result["wall_s"], result["hits"], result["reopened"],
              result["skipped"], result["options"]))
    print("\n".join(table(result, rows)))
    for line in result["heap_growth_sites"]:
        print("core heap growth after the warm-up: " + line)
    print("soak-ambient: %s (%s)" % ("PASS" if ok else "FAIL", out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
