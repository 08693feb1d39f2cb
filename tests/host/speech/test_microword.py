"""speech/microword.py (issue 40 item 2, capacity): a microWakeWord model run without the library's per-feature
Python gives the library's own probabilities — ``MicroWakeWord.process_streaming_prob`` over
``MicroWakeWordFeatures.process_streaming``, feature by feature, equal as floats — and its detections, on real
(espeak-ng) speech in 0.1 s batches, through hits; after a hit a fresh interpreter on the loaded model (no file
read) hears the next wake; the window's running sum is the exact mean ``statistics.mean`` gives."""
import random
import statistics

import numpy as np
import pytest

from alabama.speech import audio, wakeword as W

P = pytest.importorskip("pymicro_wakeword", reason="pip install pymicro-wakeword")
from alabama.speech.microword import MicroStream  # noqa: E402

WORDS = {"alexa": "alexa", "okay_nabu": "okay nabu", "hey_jarvis": "hey jarvis", "hey_mycroft": "hey mycroft"}
BATCH = 3200                                   # the spotting pool's 0.1 s


def speech(word):
    return b"".join(audio.synth(t, voice=v, pad=(0.3, 0.3)) for v in ("en-us", "en") for t in
                    ("the weather is mild today", word, "what time is it", word + " turn off the light"))


def library_run(name, pcm):
    """The library's streaming path as its own CLI runs it, a fresh start (its reset) after each hit."""
    ww, fe = P.MicroWakeWord.from_builtin(P.Model(name)), P.MicroWakeWordFeatures()
    probs, hits = [], []
    for i in range(0, len(pcm), BATCH):
        for f in fe.process_streaming(pcm[i:i + BATCH]):
            p = ww.process_streaming_prob(f)
            probs.append(p)
            if p > ww.probability_cutoff:                 # process_streaming: prob <= cutoff is no
                hits.append(len(probs) - 1)
                ww.reset()
                fe.reset()
                break
    ww.close()
    return probs, hits


def our_run(name, pcm):
    ms = MicroStream(P.MicroWakeWord.from_builtin(P.Model(name)))
    probs, hits = [], []
    model = ms.ww.model
    for i in range(0, len(pcm), BATCH):
        if ms.run(pcm[i:i + BATCH], probs) >= 0:
            hits.append(len(probs) - 1)
            ms.reset()
            assert ms.ww.model == model                # the loaded model, not the file read again
    ms.close()
    return probs, hits


@pytest.mark.parametrize("name", sorted(WORDS))
def test_probabilities_and_detections_equal_the_librarys_on_real_speech(name):
    pcm = speech(WORDS[name])
    lib_probs, lib_hits = library_run(name, pcm)
    probs, hits = our_run(name, pcm)
    assert hits == lib_hits
    assert len(probs) == len(lib_probs) > 1500
    assert probs == lib_probs, [(i, a, b) for i, (a, b) in enumerate(zip(probs, lib_probs)) if a != b][:5]
    assert len(set(probs)) > 10                  # the window was full and the model spoke, not 0.0 throughout


def test_a_second_wake_after_a_hit_is_still_detected_without_reloading_the_model(monkeypatch):
    """alexa heard twice, the second after the detector's fresh start (as often as the library hears it); no model
    file is read after the first load."""
    pcm = speech("alexa")
    expected = len(library_run("alexa", pcm)[1])
    reads = []
    orig = P.MicroWakeWord._load_model
    monkeypatch.setattr(P.MicroWakeWord, "_load_model", lambda self: (reads.append(1), orig(self))[1])
    det = W.open_detector(W.choose("alexa", check=False))
    got = [r[0] for i in range(0, len(pcm) - len(pcm) % 640, BATCH)
           for r in [det.feed_until_hit(pcm[i:i + BATCH])] if r is not None]
    det.close()
    assert len(got) == expected >= 2
    assert reads == [1]                                     # loaded once, at open


def test_the_windows_running_sum_is_statistics_mean_exactly(monkeypatch):
    """Any model's output scale (here an awkward one, not the shipped 1/256): the running exact sum over the
    window divided once is the float ``statistics.mean`` returns over the library's dequantised values."""
    ww = P.MicroWakeWord.from_builtin(P.Model.ALEXA)
    ww.output_scale, ww.output_zero_point = 0.0037109375 * 1.1, 3
    ms = MicroStream(ww)
    lib = [float(x) for x in (np.arange(256, dtype=np.uint8).view(ww.output_dtype).astype(np.float32)
                              - ww.output_zero_point) * ww.output_scale]
    rnd = random.Random(40)
    for _ in range(3000):
        codes = [rnd.randrange(256) for _ in range(ms.window)]
        assert sum(ms._num[c] for c in codes) / ms._den_window == statistics.mean(lib[c] for c in codes)
    ms.close()


def test_a_library_without_the_internals_it_leans_on_falls_back_to_the_librarys_own_path(monkeypatch):
    """Another pymicro-wakeword release (an internal MicroStream reads is gone): the detector runs the library's own
    per-feature path and hears what the library hears, instead of failing at start."""
    from alabama.speech import microword
    pcm = speech("alexa")
    expected = len(library_run("alexa", pcm)[1])
    monkeypatch.setattr(microword, "INTERNALS", microword.INTERNALS + ("a_field_this_release_lacks",))
    det = W.open_detector(W.choose("alexa", check=False))
    assert isinstance(det.stream, microword.LibraryStream)
    got = [r[0] for i in range(0, len(pcm) - len(pcm) % 640, BATCH)
           for r in [det.feed_until_hit(pcm[i:i + BATCH])] if r is not None]
    det.close()
    assert len(got) == expected >= 2
    monkeypatch.undo()
    det = W.open_detector(W.choose("alexa", check=False))
    assert isinstance(det.stream, microword.MicroStream)
    det.close()
