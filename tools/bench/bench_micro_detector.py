"""Bench: one ambient stream's microWakeWord spotting, the library's streaming path against ours, in one run.

Feeds the same audio — bench_core.py's speech loop (espeak-ng sentences without a wake word) with the wake word
spoken between them, looped to ``--seconds`` — in the spotting pool's 0.1 s batches to
  library  ``pymicro_wakeword``'s ``MicroWakeWordFeatures.process_streaming`` + ``MicroWakeWord.process_streaming``
           (its CLI's loop; ``reset()`` of both after a hit, which reads the model file again), and
  ours     ``alabama.speech.microword.MicroStream`` (speech/wakeword.py's MicroDetector): the same model,
           interpreter and frontend, the window mean as an exact running sum, a fresh interpreter after a hit,
alternating the two in rounds, and prints each one's CPU seconds per audio second (xRT: process CPU time, so a
shared machine matters less than for wall time), their ratio, and whether both gave the same probabilities
and hits (they must: tests/host/speech/test_microword.py). Ratios measured in one run; asserts nothing about speed.

    .venv/bin/python tools/bench/bench_micro_detector.py                    # alexa, 60 s of audio, 3 rounds
    .venv/bin/python tools/bench/bench_micro_detector.py --word okay_nabu --seconds 120
"""
import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1].parent
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(ROOT / "tools" / "bench"))

BATCH = 3200                     # core/spotting.py's 0.1 s
SPOKEN = {"alexa": "alexa", "okay_nabu": "okay nabu", "hey_jarvis": "hey jarvis", "hey_mycroft": "hey mycroft"}


def library(P, name, pcm):
    ww, fe = P.MicroWakeWord.from_builtin(P.Model(name)), P.MicroWakeWordFeatures()
    probs, hits = [], 0
    t0 = time.process_time()
    for i in range(0, len(pcm), BATCH):
        for f in fe.process_streaming(pcm[i:i + BATCH]):
            p = ww.process_streaming_prob(f)
            probs.append(p)
            if p > ww.probability_cutoff:          # what process_streaming says (it calls the same)
                hits += 1
                ww.reset()
                fe.reset()
                break
    t = time.process_time() - t0
    ww.close()
    return t, probs, hits


def ours(P, name, pcm):
    from alabama.speech.microword import MicroStream
    ms = MicroStream(P.MicroWakeWord.from_builtin(P.Model(name)))
    probs, hits = [], 0
    t0 = time.process_time()
    for i in range(0, len(pcm), BATCH):
        if ms.run(pcm[i:i + BATCH], probs) >= 0:
            hits += 1
            ms.reset()
    t = time.process_time() - t0
    ms.close()
    return t, probs, hits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--word", default="alexa", choices=sorted(SPOKEN))
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.seconds < 1 or args.rounds < 1:
        raise SystemExit("bench_micro_detector: give --seconds of at least 1 and --rounds of at least 1")
    try:
        import pymicro_wakeword as P
    except ImportError:
        raise SystemExit("bench_micro_detector: needs pymicro-wakeword: pip install pymicro-wakeword")
    import bench_core
    from alabama.speech import audio
    parts = [audio.synth(t, pad=(0.1, 0.1)) for t in bench_core.SENTENCES]
    word = audio.synth(SPOKEN[args.word], voice="en-us", pad=(0.3, 0.3))
    loop = b"".join(p + word for p in parts)
    pcm = (loop * (1 + int(args.seconds * 32000) // len(loop)))[:int(args.seconds * 32000) // BATCH * BATCH]
    secs = len(pcm) / 32000
    lib_t = our_t = 0.0
    for _ in range(args.rounds):
        t, lib_probs, lib_hits = library(P, args.word, pcm)
        lib_t += t
        t, our_probs, our_hits = ours(P, args.word, pcm)
        our_t += t
    audio_s = secs * args.rounds
    print("bench_micro_detector: %s, %.0f s of audio x %d rounds in 0.1 s batches (%d wake words in it)" % (
        args.word, secs, args.rounds, len(parts) * len(pcm) // len(loop)))
    print("  library  %.5f xRT  (%d hits)" % (lib_t / audio_s, lib_hits))
    print("  ours     %.5f xRT  (%d hits)" % (our_t / audio_s, our_hits))
    print("  ours / library = %.2f; the same probabilities: %s; the same hits: %s" % (
        our_t / lib_t, our_probs == lib_probs, our_hits == lib_hits))


if __name__ == "__main__":
    main()
