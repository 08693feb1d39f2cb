"""Intent accuracy of a speech-to-text engine on the seeded corpus (tools/speech/corpus.py), as the brain judges it.

Responsible for feeding every clip of one split (default: the HELD-OUT one) to a SpeechToText engine 20 ms at a time,
as a board streams it, reading the intent the way the speech brain does (``intents.understand``: below LOW_CONFIDENCE
nothing is understood, the brain says it did not catch that) and counting, per kind and per SNR: in-grammar commands
right, out-of-grammar sentences taken as commands, junk echoed as "You said". Not responsible for tuning anything:
thresholds live in speech/recognizer.py and were chosen on the tuning split (``--split tune`` shows that split).

The engine is any ``speech.engines.open_stt`` flag: ``embedded`` (pocketsphinx here), ``whisper[:DIR]`` (faster-whisper,
embedded) or ``wyoming://HOST:PORT``
(a faster-whisper server, say). The corpus is generated first when its index is missing (same seed, same bytes).

    .venv/bin/python tools/speech/accuracy.py [--split held] [--seed 40] [--stt wyoming://127.0.0.1:10300]
"""
import argparse
import collections
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(ROOT / "tools" / "speech"))

import corpus  # noqa: E402
from alabama.errors import AlabamaError  # noqa: E402
from alabama.speech import FRAME_BYTES, SAMPLE_RATE, SpeechUnavailable, engines, intents  # noqa: E402

GOAL_RIGHT = 0.95        # issue 40: >= 95 % of in-grammar commands right
GOAL_FALSE = 0.05        # <= 5 % of out-of-grammar sentences taken as commands; junk: never echoed


def outcome(kind, want, got):
    """One clip's verdict from its kind, expected [name, slots] and the understood Intent (or None)."""
    if kind == "command":
        return "right" if got is not None and [got.name, got.slots] == want else ("missed" if got is None else "wrong")
    if got is None:
        return "rejected"
    return "echoed" if got.name == intents.FREE else "command"


def run(index, root, split, stt, tools, log=None, limit=None):
    rows, audio_s, taken = [], 0.0, collections.Counter()
    cpu0 = time.process_time()
    for clip in index["clips"]:
        if clip["split"] != split or (limit is not None and taken[clip["kind"]] >= limit):
            continue
        taken[clip["kind"]] += 1
        pcm = corpus.read_pcm(root / clip["file"])
        audio_s += len(pcm) / (2.0 * SAMPLE_RATE)
        stt.start()
        for i in range(0, len(pcm), FRAME_BYTES):
            stt.feed(pcm[i:i + FRAME_BYTES])
        t = stt.finish()
        got = intents.understand(t.text, t.confidence, tools)
        row = dict(file=clip["file"], kind=clip["kind"], text=clip["text"], voice=clip["voice"], snr=clip["snr"],
                   junk=clip["junk"], heard=t.text, confidence=round(t.confidence, 3), mode=t.mode,
                   intent=None if got is None else [got.name, got.slots],
                   verdict=outcome(clip["kind"], clip["intent"], got))
        rows.append(row)
        if log:
            log(row)
    return rows, audio_s, time.process_time() - cpu0


def summary(rows):
    """{kind: {snr label: Counter(verdict)}} plus an "all" column."""
    out = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    for r in rows:
        snr = "clean" if r["snr"] is None else "%d dB" % r["snr"]
        out[r["kind"]][snr][r["verdict"]] += 1
        out[r["kind"]]["all"][r["verdict"]] += 1
    return out


def report(rows, split, stt_flag, seed, audio_s, cpu_s):
    s = summary(rows)
    cols = ["clean", "20 dB", "10 dB", "5 dB", "all"]
    lines = ["split %s, engine %s, corpus seed %d, %s UTC; %.0f s of audio, CPU %.2f xRT"
             % (split, stt_flag, seed, time.strftime("%Y-%m-%d %H:%M", time.gmtime()), audio_s,
                cpu_s / max(audio_s, 1e-9)),
             "| measure | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]

    def row(label, kind, verdicts):
        cells = []
        for c in cols:
            n = sum(s[kind][c].values())
            k = sum(s[kind][c][v] for v in verdicts)
            cells.append("%d/%d (%.0f %%)" % (k, n, 100.0 * k / n) if n else "-")
        lines.append("| %s | %s |" % (label, " | ".join(cells)))
    row("commands right", "command", ("right",))
    row("commands wrong intent", "command", ("wrong",))
    row("commands not caught", "command", ("missed",))
    row("out-of-grammar taken as commands", "oog", ("command",))
    row("out-of-grammar echoed (\"You said\")", "oog", ("echoed",))
    row("junk echoed (\"You said\")", "junk", ("echoed",))
    row("junk taken as commands", "junk", ("command",))

    def rate(kind, verdicts):
        n = sum(s[kind]["all"].values())
        return sum(s[kind]["all"][v] for v in verdicts) / n if n else 0.0
    right, false, echoed = rate("command", ("right",)), rate("oog", ("command",)), rate("junk", ("echoed",))
    lines.append("goals: commands right %.1f %% (goal >= %.0f %%: %s); out-of-grammar taken as commands %.1f %% "
                 "(goal <= %.0f %%: %s); junk echoed %.1f %% (goal 0: %s)"
                 % (100 * right, 100 * GOAL_RIGHT, "met" if right >= GOAL_RIGHT else "NOT MET",
                    100 * false, 100 * GOAL_FALSE, "met" if false <= GOAL_FALSE else "NOT MET",
                    100 * echoed, "met" if echoed == 0 else "NOT MET"))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=str(ROOT / "build" / "speech-corpus"), help="directory with index.json")
    p.add_argument("--seed", type=int, default=40, help="corpus seed (used when the corpus must be generated)")
    p.add_argument("--split", choices=corpus.SPLITS, default=corpus.HELD)
    p.add_argument("--stt", default=engines.EMBEDDED, type=engines.flag_type, help=engines.FLAG_HELP)
    p.add_argument("--json", help="write the per-clip rows here")
    p.add_argument("--limit", type=int, help="at most this many clips of each kind (a quick look, not the figure)")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per clip")
    a = p.parse_args(argv)
    if a.limit is not None and a.limit < 1:
        p.error("--limit must be >= 1")
    root = pathlib.Path(a.corpus)
    try:
        if (root / "index.json").exists():
            index = json.loads((root / "index.json").read_text())
            if index.get("seed") != a.seed:
                sys.exit("accuracy: %s holds seed %s, not %d: pass --seed %s or another --corpus"
                         % (root, index.get("seed"), a.seed, index.get("seed")))
        else:
            print("accuracy: generating the corpus (seed %d) in %s" % (a.seed, root), file=sys.stderr)
            index = corpus.write(root, a.seed, {s: corpus.plan(a.seed, s) for s in corpus.SPLITS})
        tools = tuple(index["tools"])
        models = None
        if a.stt == engines.EMBEDDED:
            from alabama.speech.recognizer import SpeechModels
            models = SpeechModels(tool_names=tools)
        stt = engines.open_stt(a.stt, models, tools=tools)
        log = (lambda r: print("%-14s %-7s %-8s %-40r -> %r %s %.2f" % (r["file"], r["kind"], r["verdict"], r["text"],
                                                                          r["heard"], r["mode"], r["confidence"]),
                               file=sys.stderr)) if a.verbose else None
        rows, audio_s, cpu_s = run(index, root, a.split, stt, tools, log, a.limit)
        stt.close()
    except (corpus.audio.ToolMissing, SpeechUnavailable, AlabamaError, OSError, ValueError) as e:
        sys.exit("accuracy: %s" % e)
    print(report(rows, a.split, a.stt, a.seed, audio_s, cpu_s))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
