"""Bench: the wake-phrase spotter's CPU cost per ambient stream and its detection quality, per decoder setting.

Cost (the default): feeds ``--seconds`` of 16 kHz audio (espeak-ng speech with "hey alabama" in it, noise
between) to one ``alabama.speech.spotter.Spotter`` 640 bytes (20 ms) at a time, as the core's spotting worker
does per ambient board, and reports CPU seconds per audio second (the real-time ratio, xRT: CPU time, so a
shared machine matters less than for wall time), the per-frame p99 cost, and the implied N of concurrent ambient
streams on 2 cores at 80 % load (spotting alone: the core's own per-frame work is bench_core.py's).

Quality (``--quality``): the same corpus for every candidate, synthesised by espeak-ng + sox (no dither: the same
bytes every run) and fed as one continuous stream per part, 20 ms at a time:
  positives    "hey alabama" alone, before a command, and between two sentences, in 6 voices x 3 speeds
               (54 clips, 1 s of silence between): clips with a hit (a hit ending inside the clip or 0.5 s after);
  docs corpus  the 49 s docs/speech.md measured first (audio.OTHER_SPEECH twice in en-us at 160 wpm, once in
               en-us+f2): false hits;
  negatives    that text and 16 more sentences in 5 voices (~5 min): false hits and false hits per minute;
  confusables  near misses ("hey obama", "alabama is a state", ...) in 2 voices: hits, reported apart.
CPU xRT is over all of it. ``--config`` (repeatable) names a candidate: pocketsphinx 5 config parameters
(``ds=2,topn=2,beam=1e-60``; see ``pocketsphinx.Config().describe()``) and the spotter's own ``threshold``,
``plp``, ``restart_s``, ``verify``, ``min_ms`` (the second stage, docs/speech.md); every candidate runs in this process on the
same bytes. Ratios measured in one run, never a timed assertion.

    .venv/bin/python tools/bench/bench_spotter.py [--seconds 60] [--config ds=2]
    .venv/bin/python tools/bench/bench_spotter.py --quality --config "" --config ds=2,topn=2
"""
import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "host"))

VOICES = (("en-us+f2", 150), ("en-us", 160), ("en-us+m3", 170), ("en-gb-x-rp", 150), ("en-029", 150))
POS_VOICES = ("en-us+f2", "en-us", "en-us+m3", "en-gb-x-rp", "en-029", "en-us+f4")
POS_SPEEDS = (130, 150, 175)
POS_TEXTS = ("hey alabama", "hey alabama, what time is it", "good morning everyone. hey alabama. turn on the light")
NEG_SENTENCES = (
    "the weather today is mild with a light breeze from the west",
    "please remember to water the plants on the balcony before you leave",
    "the train to the city leaves at half past seven every weekday",
    "she bought a new bicycle and rode it along the canal all afternoon",
    "our neighbours are painting their fence a bright shade of green",
    "the children are playing football in the park",
    "hey, can you pass me the salt and the pepper",
    "i think the package will arrive on monday or tuesday",
    "the concert last night was loud but the band played very well",
    "turn left at the bakery and the post office is on your right",
    "my grandmother makes the best apple pie in the whole county",
    "hello there, how was your trip to the mountains",
    "the library closes early on sundays during the summer",
    "we need eggs, flour, butter and a little bit of sugar",
    "a banana and an orange are in the bowl on the kitchen table",
    "the doctor said to rest for a few days and drink plenty of water")
CONFUSABLES = ("hey obama", "alabama is a state in the south", "hey, a banana", "hello mama", "hey alan",
               "la bamba", "hey al, a llama")
GAP_S = 1.0


def parse_config(text):
    """'ds=2,topn=2,threshold=1e-25' -> {"ds": 2, "topn": 2, "threshold": 1e-25} (numbers where they parse)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, _, v = part.partition("=")
        for conv in (int, float):
            try:
                v = conv(v)
                break
            except ValueError:
                pass
        out[k.strip()] = v
    return out


def make_spotter(cfg):
    from alabama.speech import spotter
    cfg = dict(cfg)
    kw = {k: cfg.pop(k) for k in ("threshold", "plp", "restart_s", "verify", "min_ms") if k in cfg}
    return spotter.Spotter(options=cfg, **kw)


def corpus():
    """{part: (pcm, [(start_byte, end_byte, label)])} as the module docstring lists."""
    from alabama.speech import audio
    gap = audio.silence(GAP_S)

    def join(items):
        pcm, spans = bytearray(), []
        for label, clip in items:
            spans.append((len(pcm), len(pcm) + len(clip), label))
            pcm += clip + gap
        return bytes(pcm), spans
    pos = [("%s@%d: %s" % (v, s, t), audio.synth(t, voice=v, speed=s))
           for t in POS_TEXTS for v in POS_VOICES for s in POS_SPEEDS]
    other = audio.OTHER_SPEECH
    docs = audio.synth(other * 2, voice="en-us", speed=160) + audio.synth(other, voice="en-us+f2")
    neg = [("%s@%d" % (v, s), audio.synth(other + " ".join(NEG_SENTENCES), voice=v, speed=s)) for v, s in VOICES]
    conf = [("%s: %s" % (v, t), audio.synth(t, voice=v)) for t in CONFUSABLES for v in ("en-us+f2", "en-us")]
    return {"positives": join(pos), "docs": (docs, [(0, len(docs), "docs")]), "negatives": join(neg),
            "confusables": join(conf)}


def run_stream(sp, pcm):
    """Feed pcm 20 ms at a time; (hit end byte offsets, CPU seconds)."""
    from alabama.speech import FRAME_BYTES
    ends = []
    t0 = time.process_time()
    for i in range(0, len(pcm), FRAME_BYTES):
        h = sp.feed(pcm[i:i + FRAME_BYTES])
        if h is not None:
            ends.append(h.end_ms * 32)
    return ends, time.process_time() - t0


def quality(cfg, parts):
    """One candidate over the corpus: a dict of the figures the table shows."""
    cpu = seconds = 0.0
    r = {"config": cfg}
    for name, (pcm, spans) in parts.items():
        sp = make_spotter(cfg)        # a fresh stream per part (the decoder's CMN starts at its default)
        ends, c = run_stream(sp, pcm)
        cpu += c
        seconds += len(pcm) / 32000
        sp.close()
        if name == "positives":
            slack = int(0.5 * 32000)
            heard = {i for e in ends for i, (a, b, _) in enumerate(spans) if a < e <= b + slack}
            r["phrase"] = (len(heard), len(spans))
            r["missed"] = [spans[i][2] for i in range(len(spans)) if i not in heard]
            r["extra"] = len(ends) - len(heard)
        else:
            r[name] = len(ends)
            if name == "negatives":
                r["neg_min"] = len(pcm) / 32000 / 60
        r["verified_out"] = r.get("verified_out", 0) + getattr(sp, "rejected", 0)
    r["xrt"] = cpu / seconds
    r["seconds"] = seconds
    return r


def cost(cfg, seconds):
    from alabama.speech import audio
    sp = make_spotter(cfg)
    try:
        speech = audio.synth("good morning everyone") + audio.synth("hey alabama") + audio.synth("what time is it")
    except audio.ToolMissing as e:
        print("bench_spotter: %s; noise only" % e)
        speech = b""
    unit = speech + audio.noise(5.0, rms=300)
    pcm = (unit * (int(seconds * 32000) // len(unit) + 1))[:int(seconds * 32000) & ~1]
    frames = audio.frames(pcm)
    costs, hits = [], 0
    cpu0 = time.process_time()
    for f in frames:
        t = time.perf_counter_ns()
        hits += sp.feed(f) is not None
        costs.append(time.perf_counter_ns() - t)
    cpu = time.process_time() - cpu0
    costs.sort()
    return {"seconds": len(pcm) / 32000, "frames": len(frames), "hits": hits, "restarts": sp.restarts,
            "xrt": cpu / (len(pcm) / 32000), "mean_ms": cpu * 1000 / len(frames),
            "p99_ms": costs[int(len(costs) * 0.99)] / 1e6, "phrase": sp.phrase}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--load", type=float, default=0.8, help="share of each core given to spotting")
    ap.add_argument("--quality", action="store_true", help="detection quality and CPU per candidate (docstring)")
    ap.add_argument("--config", action="append", metavar="K=V,...",
                    help="a candidate: pocketsphinx config parameters and threshold/plp/restart_s/verify/min_ms over the "
                         "spotter's defaults ('' = the defaults); repeatable")
    ap.add_argument("--misses", action="store_true", help="with --quality: list the positive clips missed")
    a = ap.parse_args(argv)
    from alabama.speech import SpeechUnavailable, audio, spotter
    configs = [parse_config(c) for c in (a.config or [""])]
    try:
        spotter.Spotter().close()
    except SpeechUnavailable as e:
        print("bench_spotter: skipped: %s" % e)
        return 0
    if not a.quality:
        for cfg in configs:
            r = cost(cfg, a.seconds)
            n = int(a.cores * a.load / r["xrt"]) if r["xrt"] else 0
            print("spotter \"%s\" %s: %.0f s of audio, %d frames, %d hits, %d restarts"
                  % (r["phrase"], cfg or "defaults", r["seconds"], r["frames"], r["hits"], r["restarts"]))
            print("CPU per audio second: %.4f (xRT)   per frame: mean %.3f ms, p99 %.3f ms"
                  % (r["xrt"], r["mean_ms"], r["p99_ms"]))
            print("implied concurrent ambient streams on %d cores at %d%% load: N = %d"
                  % (a.cores, a.load * 100, n))
        return 0
    try:
        parts = corpus()
    except audio.ToolMissing as e:
        print("bench_spotter --quality: %s" % e)
        return 1
    neg_min = len(parts["negatives"][0]) / 32000 / 60
    print("corpus: positives %d clips (%.0f s), docs corpus %.0f s, negatives %.1f min, confusables %d clips; "
          "defaults %s threshold %g plp %g" % (len(parts["positives"][1]), len(parts["positives"][0]) / 32000,
                                                len(parts["docs"][0]) / 32000, neg_min, len(parts["confusables"][1]),
                                                spotter.DEFAULT_OPTIONS, spotter.DEFAULT_THRESHOLD,
                                                spotter.DEFAULT_PLP))
    print("| candidate | CPU xRT | phrase hits | extra hits on positives | false hits, docs corpus | false hits, "
          "negatives (/min) | confusable hits | verifier rejections |")
    print("|---|---|---|---|---|---|---|---|")
    for cfg in configs:
        r = quality(cfg, parts)
        print("| %s | %.4f | %d/%d | %d | %d | %d (%.2f) | %d | %d |" % (
            ",".join("%s=%s" % kv for kv in cfg.items()) or "defaults", r["xrt"], r["phrase"][0], r["phrase"][1],
            r["extra"], r["docs"], r["negatives"], r["negatives"] / r["neg_min"], r["confusables"],
            r["verified_out"]), flush=True)
        if a.misses and r["missed"]:
            print("    missed: %s" % "; ".join(r["missed"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
