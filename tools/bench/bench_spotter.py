"""Bench: the wake-phrase spotter's CPU cost per ambient stream, and how many ambient boards 2 cores hold.

Feeds ``--seconds`` of 16 kHz audio (espeak-ng speech with "hey alabama" in it, noise between) to one
``alabama.speech.spotter.Spotter`` 640 bytes (20 ms) at a time, as the core would per ambient board,
and reports CPU seconds per audio second (the real-time ratio, xRT), the per-frame p99 cost, and the
implied N of concurrent ambient streams on 2 cores at 80 % load (spotting alone: the core's own
per-frame work is bench_core.py's). A ratio measured in one run, never a timed assertion.

    .venv/bin/python tools/bench/bench_spotter.py [--seconds 60]
"""
import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "host"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--load", type=float, default=0.8, help="share of each core given to spotting")
    a = ap.parse_args(argv)
    from alabama.speech import audio, spotter, SpeechUnavailable
    try:
        sp = spotter.Spotter()
    except SpeechUnavailable as e:
        print("bench_spotter: skipped: %s" % e)
        return 0
    try:
        speech = audio.synth("good morning everyone") + audio.synth("hey alabama") + audio.synth("what time is it")
    except audio.ToolMissing as e:
        print("bench_spotter: %s; noise only" % e)
        speech = b""
    unit = speech + audio.noise(5.0, rms=300)
    pcm = (unit * (int(a.seconds * 32000) // len(unit) + 1))[:int(a.seconds * 32000) & ~1]
    frames = audio.frames(pcm)
    costs, hits = [], 0
    cpu0 = time.process_time()
    for f in frames:
        t = time.perf_counter_ns()
        hits += sp.feed(f) is not None
        costs.append(time.perf_counter_ns() - t)
    cpu = time.process_time() - cpu0
    seconds = len(pcm) / 32000
    xrt = cpu / seconds
    costs.sort()
    p99 = costs[int(len(costs) * 0.99)] / 1e6
    n = int(a.cores * a.load / xrt) if xrt else 0
    print("spotter \"%s\" threshold %g: %.0f s of audio, %d frames, %d hits, %d restarts"
          % (sp.phrase, spotter.DEFAULT_THRESHOLD, seconds, len(frames), hits, sp.restarts))
    print("CPU per audio second: %.4f (xRT)   per frame: mean %.3f ms, p99 %.3f ms"
          % (xrt, cpu * 1000 / len(frames), p99))
    print("implied concurrent ambient streams on %d cores at %d%% load: N = %d"
          % (a.cores, a.load * 100, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
