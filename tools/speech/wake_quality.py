"""Wake words measured, not asserted: false accepts per hour and detection rate of every wake engine on one seeded
espeak-ng corpus (issue 40 part 2, issue 37 part 5).

Responsible for the wake corpus (built from tools/speech/corpus.py's pieces: its voices, ``Clip``, ``render``,
``noise``), for feeding it to each engine through the core's own seam (``alabama.speech.wakeword.open_detector``,
the pocketsphinx ``Spotter`` with the same phrase) and for scoring the hits. Not responsible for the engines
themselves or for what a hit does in the core; never lowers a model's published cutoff (the engines run with the
configs ``wakeword.choose`` gives the core).

Corpus (deterministic in the seed; written to build/wake-quality, not committed):
  positives  per wake word, ``--positives`` clips (default 324): the phrase in the 64 voices of corpus.py (both
             splits' accents x variants), speeds, pitches, SNR 20 / 10 / 5 dB in turn, white/pink/brown/hum noise,
             each in a room (``--gap noise``: its own noise from 3 s before the phrase, never digital silence;
             ``--gap silence``, the stress row: 1 s of zeros after each clip);
  negatives  ``--hours`` (default 2.0) of one continuous stream: paragraphs of read text containing near-miss words
             ("okay now", "hey travis", "alexander", "microsoft", "hey obama", ...) in those voices, two voices
             over each other (overlaps), noise bursts and tones, clean or at 20/10 dB.
espeak-ng voices are outside what the microWakeWord/openWakeWord models were trained on (Piper voices + real
speech): detection here is a floor, not the field figure.

Scoring: a positive is detected when a hit ends inside its clip or within ``SLACK_MS`` after it; every hit on the
negatives is a false accept (the detector restarts after a hit, as in the core).

    .venv/bin/python tools/speech/wake_quality.py [--seed 40] [--hours 2] [--positives 324]
        [--gap noise|silence] [--positives-only] [--variants] [--frontend AGC,NS] [--engines micro,open,phrase]
        [--words okay_nabu,hey_jarvis,alexa,hey_mycroft,hey_alabama]
        [--neg-hours open=0.5,phrase=1] [--json FILE]      (make wake-quality WAKE_ARGS="...")
    .venv/bin/python tools/speech/wake_quality.py --table REPORT.json [...]   (the docs' table from --json reports)
"""
import argparse
import json
import os
import pathlib
import random
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
from alabama.core.spotting import BATCH_S  # noqa: E402
from alabama.speech import BYTES_PER_SECOND, SAMPLE_RATE, audio  # noqa: E402

#: The shipped models' phrases (pymicro-wakeword and pyopen-wakeword ship these four).
PHRASES = {"okay_nabu": "okay nabu", "hey_jarvis": "hey jarvis", "alexa": "alexa", "hey_mycroft": "hey mycroft",
           "hey_alabama": "hey alabama"}
#: The words only the keyphrase spotter can spot (no shipped model): its default phrase.
PHRASE_ONLY = ("hey_alabama",)
#: For the keyphrase spotter: words of those phrases that pocketsphinx's dictionary lacks (CMU phones).
PRONUNCIATIONS = {"nabu": "N AA B UW", "mycroft": "M AY K R AO F T"}
#: ``--variants``: pronunciation variants of the keyphrase spotter's phrase words (issue 40 item 2): the stressed
#: vowels of "alabama" as AE or AA, "hey" with or without its H. Measured, not kept in the core: they add more
#: false accepts than detections (docs/speech.md, "Wake words measured").
VARIANTS = {"alabama": ["AE L AH B AE M AH", "AA L AH B AA M AH", "AE L AH B AA M AH"], "hey": ["HH EY", "EY"]}
SNRS = (20, 10, 5)
NOISES = ("white", "pink", "brown", "hum")
SLACK_MS = 1000          # a hit this long after a positive's end still counts (engines decide on a window)
GAP_S = 1.0              # --gap silence: digital silence after each positive in their stream
#: What comes between positives (--gap): "noise" (the default, the published rows): each clip's own noise for
#: NOISE_LEAD_S before its phrase, a room whose noise is there before someone speaks; "silence": GAP_S of digital
#: zeros after each clip, the next at another SNR and colour (the stress row: a model's frontend has not adapted).
GAPS = ("noise", "silence")
NOISE_LEAD_S = 3.0       # --gap noise: each clip's own noise starts this long before its phrase (no silence)
CHUNK_S = BATCH_S        # seconds per feed: the core's spotting batch
#: Read text for the negatives: near misses of every wake phrase, and ordinary household talk.
NEAR_MISS = (
    "okay now let us go", "okay then, nobody knew", "okay, a new book", "he nabbed the last bun", "a bamboo chair",
    "hey travis, come here", "hey, jarvie is late", "the harvest was good this year", "hey jars and bottles",
    "alexander the great", "the election is next week", "a lexicon of words", "alex said yes",
    "my crofter friend", "microsoft released an update", "hey michael", "my craft beer", "hey mike, roughly",
    "hey obama", "alabama is a state in the south", "hey, a banana", "hello mama", "la bamba",
    "hey alan", "hey, can you hear me", "okay google is not here", "hey siri is another phone")
SENTENCES = corpus.OUT_OF_GRAMMAR[corpus.TUNE] + corpus.OUT_OF_GRAMMAR[corpus.HELD] + tuple(
    corpus.COMMANDS[corpus.TUNE]) + (
    "the weather is nice today and we should go for a walk in the park", "please water the plants on the balcony",
    "the train to the city leaves at half past seven", "our neighbours are painting their fence green",
    "we need eggs, flour, butter and a little bit of sugar", "the football match starts at eight o clock",
    "my phone battery is almost empty", "the children are asleep upstairs so keep it down",
    "a quick brown fox jumps over the lazy dog", "can you read me the news headlines from this morning")
NEG_KINDS = ("speech", "speech", "speech", "speech", "overlap", "noise", "tones")


def all_voices():
    return corpus.voices(corpus.TUNE) + corpus.voices(corpus.HELD)


def _speeds():
    return sorted(set(corpus.SPEEDS[corpus.TUNE] + corpus.SPEEDS[corpus.HELD]))


def _pitches():
    return sorted(set(corpus.PITCHES[corpus.TUNE] + corpus.PITCHES[corpus.HELD]))


# ------------------------------------------------------------------------------------------ corpus
def positive_plan(seed, word, n):
    """n Clips of ``word``'s phrase: seeded voices x speeds x pitches, SNR 20/10/5 dB in turn."""
    rng = random.Random("%s/pos/%s" % (seed, word))
    vs, sp, pi = all_voices(), _speeds(), _pitches()
    return [corpus.Clip(PHRASES[word], rng.choice(vs), rng.choice(sp), rng.choice(pi), SNRS[i % len(SNRS)],
                        NOISES[(i // len(SNRS)) % len(NOISES)], 0.3, 0.3) for i in range(n)]


def negative_plan(seed):
    """An endless seeded sequence of negative segments: (kind, [Clip, ...]); an overlap has two clips."""
    rng = random.Random("%s/neg" % seed)
    vs, sp, pi = all_voices(), _speeds(), _pitches()

    def speech():
        k = rng.randint(2, 4)
        text = ". ".join(rng.choice(NEAR_MISS) if rng.random() < 0.4 else rng.choice(SENTENCES) for _ in range(k))
        return corpus.Clip(text, rng.choice(vs), rng.choice(sp), rng.choice(pi), rng.choice((None, None, 20, 10)),
                           rng.choice(NOISES), 0.2, 0.3)

    while True:
        kind = rng.choice(NEG_KINDS)
        if kind == "speech":
            yield kind, [speech()]
        elif kind == "overlap":
            yield kind, [speech(), speech()]
        else:
            yield kind, [corpus.Clip("", "", 0, 0, rng.choice((None, 20)), rng.choice(NOISES), 0.2, 0.3, kind)]


def render_segment(clips, seed):
    """PCM of one negative segment: an overlap is the second voice 6 dB down, starting 0.7 s into the first."""
    first = np.frombuffer(corpus.render(clips[0], seed), "<i2").astype(np.int32)
    for c in clips[1:]:
        other = np.frombuffer(corpus.render(c, seed), "<i2").astype(np.int32) // 2
        at = int(0.7 * SAMPLE_RATE)
        n = max(len(first), at + len(other))
        mix = np.zeros(n, np.int32)
        mix[:len(first)] += first
        mix[at:at + len(other)] += other
        first = mix
    return np.clip(first, -32768, 32767).astype("<i2").tobytes()


def write_negatives(path, seed, seconds):
    """Render negatives until ``seconds`` of audio, to ``path`` (raw s16le); -> {"seconds", "segments", kinds}."""
    want, n, kinds = int(seconds * BYTES_PER_SECOND), 0, {}
    with open(path, "wb") as f:
        for kind, clips in negative_plan(seed):
            if n >= want:
                break
            pcm = render_segment(clips, seed)
            f.write(pcm)
            n += len(pcm)
            kinds[kind] = kinds.get(kind, 0) + 1
    return {"seconds": n / BYTES_PER_SECOND, "segments": sum(kinds.values()), "kinds": kinds}


def write_positives(path, seed, word, n, gap=GAPS[0]):
    """The positives of ``word`` as one stream to ``path``; -> spans [[start_ms, end_ms, snr], ...].
    ``gap`` "noise" (the default, the published rows): each clip's own noise starts NOISE_LEAD_S earlier (its
    lead that much longer), as a room's steady noise is there before someone speaks; "silence" (the stress row):
    GAP_S of digital silence after each clip instead. With "silence" every 20 dB clip follows a 5 dB clip of
    another noise colour by 1 s of zeros, and microWakeWord's frontend (its per-channel noise estimate) still
    carries that louder noise: the 20 dB clips are detected less than the 10 dB ones (docs/speech.md, "Why alexa
    detected fewer at 20 dB")."""
    spans, pos, quiet = [], 0, audio.silence(GAP_S)
    if gap not in GAPS:
        raise ValueError(gap)
    with open(path, "wb") as f:
        for clip in positive_plan(seed, word, n):
            if gap == "noise":
                pcm = corpus.render(clip._replace(lead=clip.lead + NOISE_LEAD_S), seed)
                lead, after = int(NOISE_LEAD_S * BYTES_PER_SECOND), b""
            else:
                pcm, lead, after = corpus.render(clip, seed), 0, quiet
            f.write(pcm + after)
            spans.append([(pos + lead) * 1000 // BYTES_PER_SECOND, (pos + len(pcm)) * 1000 // BYTES_PER_SECOND,
                          clip.snr])
            pos += len(pcm) + len(after)
    return spans


# ------------------------------------------------------------------------------------------ scoring
def detected(spans, hits_ms, slack_ms=SLACK_MS):
    """Per span (sorted, not overlapping): whether a hit ends inside it or within ``slack_ms`` after its end but
    before the next span starts (a hit counts for one span)."""
    hits = sorted(hits_ms)
    out, j = [], 0
    for k, (start, end, *_) in enumerate(spans):
        limit = end + slack_ms if k + 1 == len(spans) else min(end + slack_ms, spans[k + 1][0] - 1)
        while j < len(hits) and hits[j] < start:
            j += 1
        out.append(j < len(hits) and hits[j] <= limit)
    return out


def by_snr(spans, flags):
    """{snr: [detected, total]} of the positives."""
    out = {}
    for (_, _, snr), ok in zip(spans, flags):
        d = out.setdefault(str(snr), [0, 0])
        d[0] += bool(ok)
        d[1] += 1
    return out


def per_hour(hits, seconds):
    return hits * 3600.0 / seconds if seconds else float("nan")


# ------------------------------------------------------------------------------------------ engines
def engine_config(engine, word, variants=False):
    """The config the core would run for this engine and wake word (published cutoffs, never lowered).
    ``variants``: the keyphrase spotter also spots the pronunciation variants of its phrase's words
    (``VARIANTS``: "alabama" with AE/AA, "hey" with or without its H)."""
    from alabama.speech import spotter, wakeword
    if engine == wakeword.PHRASE:
        words = PHRASES[word].split()
        pron = {w: p for w, p in PRONUNCIATIONS.items() if w in words}
        if variants:
            pron.update({w: p for w, p in VARIANTS.items() if w in words})
        return {"engine": engine, "phrase": PHRASES[word], "label": PHRASES[word],
                "threshold": spotter.DEFAULT_THRESHOLD, "pronunciations": pron, "variants": bool(variants)}
    return wakeword.choose("%s:%s" % (engine, word), check=False)


def open_engine(cfg):
    from alabama.speech import spotter, wakeword
    if cfg["engine"] == wakeword.PHRASE:
        return spotter.Spotter(cfg["phrase"], cfg["threshold"], pronunciations=cfg.get("pronunciations"))
    return wakeword.open_detector(cfg)


class Frontend:
    """``--frontend AGC,NS``: WebRTC automatic gain (target dBFS, 0 = off) and noise suppression (level 0-4)
    before the detector, 10 ms at a time (``webrtc-noise-gain``, what Home Assistant's Assist runs before
    microWakeWord: its ``auto_gain_dbfs`` and ``noise_suppression_level``). Its CPU is counted with the detector's."""

    def __init__(self, spec):
        from webrtc_noise_gain import AudioProcessor
        self.ap, self.spec, self.tail = AudioProcessor(*spec), spec, b""

    def __call__(self, data):
        data = self.tail + data
        n = len(data) - len(data) % 320
        self.tail = data[n:]
        return b"".join(self.ap.Process10ms(data[i:i + 320]).audio for i in range(0, n, 320))


def frontend_spec(text):
    """"31,2" -> (31, 2); ValueError when malformed or out of range."""
    agc, ns = (int(x) for x in text.split(","))
    if not (0 <= agc <= 31 and 0 <= ns <= 4):
        raise ValueError(text)
    return agc, ns


def run_stream(cfg, path, limit_s=None, chunk_s=CHUNK_S, frontend=None):
    """Feed a raw s16le file to a fresh detector ``chunk_s`` at a time -> (hit end times in ms, audio s, CPU s).
    A hit's time is the end of the chunk it fired in (the detector restarts after it). ``frontend``: an
    (AGC dBFS, NS level) pair, a fresh ``Frontend`` before the detector."""
    det = open_engine(cfg)
    fe = Frontend(frontend) if frontend else (lambda b: b)
    step = int(chunk_s * BYTES_PER_SECOND) & ~1
    limit = int(limit_s * BYTES_PER_SECOND) if limit_s else None
    hits, fed = [], 0
    t0 = time.process_time()
    with open(path, "rb") as f:
        while limit is None or fed < limit:
            data = f.read(step if limit is None else min(step, limit - fed))
            if not data:
                break
            fed += len(data)
            if det.feed(fe(data)) is not None:
                hits.append(fed * 1000 // BYTES_PER_SECOND)
    cpu = time.process_time() - t0
    det.close()
    return hits, fed / BYTES_PER_SECOND, cpu


ENGINE_NAMES = {"micro": "microWakeWord", "open": "openWakeWord", "phrase": "keyphrase spotter"}
TABLE_HEAD = ("| wake word | engine | false accepts (h of negatives) | FA/h | detected at 20 dB | 10 dB | 5 dB | all | "
              "CPU xRT | finished (UTC) | wall s (load) |")


def table(reports):
    """The markdown table of docs/speech.md, "Wake words measured", from ``--json`` reports (dicts): one row per
    result, wake words in PHRASES order and engines in ENGINE_NAMES order; -> its lines."""
    rows = [(r, rep) for rep in reports for r in rep["results"]]
    order = {w: i for i, w in enumerate(PHRASES)}
    rows.sort(key=lambda x: (order.get(x[0]["word"], len(order)), list(ENGINE_NAMES).index(x[0]["engine"]),
                             bool(x[0]["config"].get("variants"))))
    out = [TABLE_HEAD, "|" + "---|" * (TABLE_HEAD.count("|") - 1)]
    for r, rep in rows:
        name = ENGINE_NAMES[r["engine"]] + (" + variants" if r["config"].get("variants") else "")
        if rep.get("gap", "silence") != GAPS[0]:
            name += " (--gap %s)" % rep.get("gap", "silence")
        snr = [r["by_snr"].get(str(s), [0, 0])[0] for s in SNRS]
        fa = ("%d (%.2f h)" % (r["false_accepts"], r["neg_seconds"] / 3600), "%.2f" % r["fa_per_hour"]) \
            if r["false_accepts"] is not None else ("not fed", "–")
        out.append("| %s | %s | %s | %s | %d | %d | %d | %d (%d %%) | %.4f | %s | %.1f (%.1f) |" % (
            r["word"], name, *fa, *snr, r["detected"],
            round(100.0 * r["detected"] / r["positives"]), r["cpu_xrt"], r.get("finished", rep.get("finished", "?")),
            r["wall_s"], r["load"]))
    return out


def neg_seconds(text):
    """``--neg-hours`` "open=0.5,phrase=1" -> {"open": 1800.0, "phrase": 3600.0}; ValueError when malformed."""
    from alabama.speech import wakeword
    out = {}
    for kv in (x for x in text.split(",") if x):
        engine, hours = kv.split("=")
        if engine not in wakeword.ENGINES or not float(hours) > 0:
            raise ValueError(kv)
        out[engine] = float(hours) * 3600
    return out


def _utc():
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def _load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main(argv=None):
    from alabama.speech import wakeword
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=40)
    p.add_argument("--out", default=str(ROOT / "build" / "wake-quality"))
    p.add_argument("--hours", type=float, default=2.0, help="hours of negatives generated (default 2)")
    p.add_argument("--neg-hours", default="",
                   help="per engine, hours of those negatives fed (e.g. micro=2,open=0.5,phrase=0.25; default all)")
    p.add_argument("--positives", type=int, default=324, help="positive clips per wake word (default 324)")
    p.add_argument("--gap", default=GAPS[0], choices=GAPS,
                   help="before each positive: its own noise for %.0f s (default, the published rows: a room) or, "
                        "after each, 1 s of digital silence (the stress row)" % NOISE_LEAD_S)
    p.add_argument("--frontend", default="", metavar="AGC,NS",
                   help="WebRTC gain (dBFS, 0-31, 0 off) and noise suppression (0-4) before every engine, e.g. 31,2 "
                        "(pip install webrtc-noise-gain); default none")
    p.add_argument("--positives-only", action="store_true",
                   help="detections only: the negatives are not fed (their false accepts do not depend on --gap)")
    p.add_argument("--variants", action="store_true",
                   help="the keyphrase spotter also spots its phrase's pronunciation variants (VARIANTS)")
    p.add_argument("--engines", default="micro,open,phrase")
    p.add_argument("--words", default=",".join(PHRASES), help="default: all; %s only by the phrase engine" %
                   ", ".join(PHRASE_ONLY))
    p.add_argument("--json", default="", help="write the results here too")
    p.add_argument("--table", nargs="+", metavar="JSON", help="only print the markdown table of these --json "
                   "reports (docs/speech.md) and stop")
    a = p.parse_args(argv)
    if a.table:
        reports = []
        for f in a.table:
            try:
                reports.append(json.loads(pathlib.Path(f).read_text()))
                table(reports[-1:])
            except OSError as e:
                p.error("--table: %s: %s" % (f, e.strerror or e))
            except (ValueError, KeyError, TypeError, AttributeError):
                p.error("--table: %s is not a report this tool wrote (--json FILE)" % f)
        lines = table(reports)
        print("\n".join(lines))
        return {"table": lines}
    engines = [e for e in a.engines.split(",") if e]
    words = [w for w in a.words.split(",") if w]
    bad = [e for e in engines if e not in wakeword.ENGINES] + [w for w in words if w not in PHRASES]
    if bad:
        p.error("unknown engine or word %s: engines %s, words %s" % (", ".join(bad), ", ".join(wakeword.ENGINES),
                                                                    ", ".join(PHRASES)))
    if a.hours <= 0 or a.positives <= 0:
        p.error("--hours and --positives must be > 0")
    try:
        limits = neg_seconds(a.neg_hours)
    except ValueError:
        p.error("--neg-hours takes ENGINE=HOURS pairs (engines %s, hours > 0), e.g. micro=2,open=0.5" %
                ", ".join(wakeword.ENGINES))
    try:
        fe = frontend_spec(a.frontend) if a.frontend else None
    except ValueError:
        p.error("--frontend takes AGC,NS: gain target 0-31 dBFS (0: off) and suppression level 0-4, e.g. 31,2")
    if fe:
        try:
            import webrtc_noise_gain  # noqa: F401
        except ImportError:
            sys.exit("wake_quality: --frontend needs webrtc-noise-gain: pip install webrtc-noise-gain")
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        for e in engines:
            if e != wakeword.PHRASE:
                wakeword._require(e)
            else:
                from alabama.speech import load
                load()
    except Exception as e:  # noqa: BLE001 — WakeUnavailable / SpeechUnavailable: one line
        sys.exit("wake_quality: %s" % e)

    report = {"seed": a.seed, "gap": a.gap, "frontend": list(fe or ()), "load_start": _load(), "corpus": {},
              "started": _utc(), "results": []}
    t0 = time.time()
    neg = out / "negatives.s16"
    meta_path = out / "negatives.json"
    key = {"seed": a.seed, "hours": a.hours}
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    try:
        if meta.get("key") != key or not neg.exists():
            meta = dict(write_negatives(neg, a.seed, a.hours * 3600), key=key)
            meta_path.write_text(json.dumps(meta))
        pos = {}
        for w in words:
            tag = "-gap-" + a.gap
            path = out / ("positives-%s%s.s16" % (w, tag))
            spans_path = out / ("positives-%s%s.json" % (w, tag))
            pkey = {"seed": a.seed, "n": a.positives, "gap": a.gap}
            if a.gap == "noise":
                pkey.update(lead=NOISE_LEAD_S)
            old = json.loads(spans_path.read_text()) if spans_path.exists() else {}
            if old.get("key") != pkey or not path.exists():
                old = {"key": pkey, "spans": write_positives(path, a.seed, w, a.positives, a.gap)}
                spans_path.write_text(json.dumps(old))
            pos[w] = (path, old["spans"])
    except audio.ToolMissing as e:
        sys.exit("wake_quality: %s" % e)
    report["corpus"] = {"negatives": meta, "positives_per_word": a.positives, "generate_s": round(time.time() - t0, 1)}
    print("corpus (seed %d): %.2f h of negatives (%s), %d positives per word (gap: %s); %.0f s to make or load" % (
        a.seed, meta["seconds"] / 3600, ", ".join("%d %s" % (v, k) for k, v in sorted(meta["kinds"].items())),
        a.positives, a.gap, time.time() - t0), flush=True)

    print("%-8s %-12s %8s %8s %6s  %s" % ("engine", "word", "FA", "FA/h", "neg h", "detected at 20 / 10 / 5 dB "
                                          "(all)  [CPU xRT, load]"), flush=True)
    for w in words:
        path, spans = pos[w]
        for e in engines:
            if w in PHRASE_ONLY and e != wakeword.PHRASE:
                continue
            cfg = engine_config(e, w, a.variants)
            load0 = _load()
            w0 = time.time()
            hits, secs, cpu = run_stream(cfg, path, frontend=fe)
            flags = detected(spans, hits)
            snr = by_snr(spans, flags)
            if a.positives_only:
                nhits, nsecs, ncpu = None, 0.0, 0.0
            else:
                nhits, nsecs, ncpu = run_stream(cfg, neg, limits.get(e), frontend=fe)
            r = {"engine": e, "word": w, "config": cfg, "false_accepts": None if nhits is None else len(nhits),
                 "neg_seconds": nsecs, "fa_per_hour": None if nhits is None else per_hour(len(nhits), nsecs),
                 "detected": sum(flags), "positives": len(flags),
                 "by_snr": snr, "cpu_xrt": (cpu + ncpu) / (secs + nsecs), "wall_s": round(time.time() - w0, 1),
                 "load": round((load0 + _load()) / 2, 2), "finished": _utc()}
            report["results"].append(r)
            print("%-8s %-12s %8s %8s %6.2f  %s  (%d/%d)  [%.4f xRT, %.1f s, load %.1f]" % (
                e, w, "-" if nhits is None else len(nhits), "-" if nhits is None else "%.2f" % r["fa_per_hour"],
                nsecs / 3600,
                " / ".join("%d/%d" % tuple(snr.get(str(s), (0, 0))) for s in SNRS), r["detected"], r["positives"],
                r["cpu_xrt"], r["wall_s"], r["load"]), flush=True)
            if a.json:                     # after every row: a long run stopped half-way keeps what it measured
                pathlib.Path(a.json).write_text(json.dumps(report, indent=1) + "\n")
    report["wall_s"] = round(time.time() - t0, 1)
    report["finished"] = _utc()
    print("total %.0f s wall" % report["wall_s"])
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
