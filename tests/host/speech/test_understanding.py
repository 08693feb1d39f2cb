"""Issue 40, commands understood: the recogniser + the brain's rule (intents.understand) on voices, speeds and
phrasings that tools/speech/corpus.py does not tune on; the corpus-wide figures are tools/speech/accuracy.py's."""
import numpy as np
import pytest

from alabama.speech import SpeechUnavailable, audio, frontend, intents, recognizer

from .conftest import corpus_module as _corpus

VOICE, SPEED = "en-us+m2", 155          # the voice and speed issue 40 reported


@pytest.fixture(scope="module")
def heard(rec, models):
    def get(text, voice=VOICE, speed=SPEED, pcm=None):
        t = rec.transcribe(pcm if pcm is not None else audio.synth(text, voice, speed), chunk=640)
        return t, intents.understand(t.text, t.confidence, models.tool_names)
    return get


@pytest.mark.parametrize("text,want", [
    ("set a timer for twenty minutes", ("timer", {"minutes": 20})),      # main: "that i report and the deep as"
    ("set a timer for forty minutes", ("timer", {"minutes": 40})),
    ("cancel", ("stop", {})),                                            # main: "gary stu", free form
    ("turn off the light", ("light", {"tool": "light.set", "on": False})),  # main: "turn on the light"
])
def test_issue40_commands_in_an_unseen_voice(heard, text, want):
    t, got = heard(text)
    assert got is not None and tuple(got) == want, t


def test_issue40_digital_silence_does_not_break_a_command(heard):
    """espeak-ng pads with exact zeros; the decoder's input floor keeps a clean command a command."""
    pcm = audio.synth("what time is it", "en-029+f4", 150, pad=(0.3, 0.5), pitch=35)     # main: "" (no hypothesis)
    t, got = heard("", pcm=pcm)
    assert got is not None and got.name == intents.TIME, t


@pytest.mark.parametrize("voice,speed,pitch", [(VOICE, SPEED, None),
                                               ("en-us+f1", 125, 30),                # main: "turn light on", 1.0
                                               ("en-gb-x-gbcwmd+f5", 180, 45)])     # main: "turn the light on", 0.82
def test_issue40_near_miss_is_not_a_command(heard, voice, speed, pitch):
    pcm = audio.synth("how far away is the moon tonight", voice, speed, pad=(0.3, 0.5), pitch=pitch)
    t, got = heard("", pcm=pcm)
    assert got is None or got.name == intents.FREE, t


def test_issue40_junk_is_not_echoed(heard):
    """Reversed speech: speech-like, no words. Neither a command nor 'You said: ...'."""
    pcm = np.frombuffer(audio.synth("set a timer for twenty minutes", VOICE, SPEED), "<i2")[::-1].tobytes()
    t, got = heard("", pcm=pcm)
    assert got is None, t


def noisy(text, snr_db, seed=5):
    """``text`` (default voice) plus white noise at ``snr_db`` against its voiced part (the corpus's rule)."""
    x = np.frombuffer(audio.synth(text, pad=(0.4, 0.5)), "<i2").astype(float)
    n = np.random.default_rng(seed).normal(0.0, 1.0, len(x))
    n *= np.sqrt(np.mean(x[np.abs(x) > 100] ** 2)) / 10 ** (snr_db / 20) / np.sqrt(np.mean(n ** 2))
    return np.clip(x + n, -32768, 32767).astype("<i2").tobytes()


@pytest.mark.parametrize("text,want", [
    ("set a timer for five minutes", ("timer", {"minutes": 5})),         # not suppressed: "the five on five a"
    ("what time is it", ("time", {})),                                   # "what we"
    ("turn the light off", ("light", {"tool": "light.set", "on": False})),   # "the i know"
    ("set a timer for ten minutes", ("timer", {"minutes": 10})),         # "if i've offended"
])
def test_issue40_commands_at_5_db_snr(heard, text, want):
    """WebRTC noise suppression before the decoders (speech/frontend.py) on a noisy utterance."""
    t, got = heard("", pcm=noisy(text, 5))
    assert got is not None and tuple(got) == want, t


def test_issue40_noise_suppression_only_on_noisy_utterances():
    clean = audio.synth("stop", pad=(0.4, 0.5))
    assert frontend.snr_db(clean) > 40 and frontend.clean(clean) == clean     # it eats a clean "stop"'s onset
    assert frontend.snr_db(noisy("stop", 20)) > frontend.NS_BELOW_DB > frontend.snr_db(noisy("stop", 5))
    assert frontend.clean(noisy("stop", 5)) != noisy("stop", 5) and len(frontend.clean(noisy("stop", 5))) == \
        len(noisy("stop", 5))
    assert frontend.snr_db(b"") == 0.0 and frontend.suppress(b"\x01\x00" * 100) == b"\x01\x00" * 100


def test_issue40_noise_suppressor_missing_is_one_line(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "webrtc_noise_gain", None)
    with pytest.raises(SpeechUnavailable) as e:
        recognizer.SpeechModels()
    assert "pip install webrtc-noise-gain" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("voice,pitch,lead", [("en-029", 65, 0.29), ("en-gb+klatt", 35, 0.5)])
def test_issue40_a_noise_burst_is_not_stop(heard, voice, pitch, lead):
    """The tuning split's noise-burst junk at 10 dB (tools/speech/corpus.py, seed 40): the grammar stretched one
    "stop" over 1.6-2.2 s of noise (confidence 0.74, 0.70). A command word lasts under MAX_WORD_MS."""
    corpus = _corpus()
    clip = corpus.Clip("", voice, 135, pitch, snr=10, noise="brown", lead=lead, junk="noise")
    t, got = heard("", pcm=corpus.render(clip, 40))
    assert got is None or got.name == intents.FREE, t


def test_issue40_mean_word_probability_052_is_not_confident():
    """main let a free-form transcript of mean word posterior 0.52 pass the 0.5 cut ('You said: that i report ...')."""
    words = tuple(recognizer.Word(w, 0, 0, 0.52) for w in "that i report and the eighties".split())
    assert recognizer.free_form_confidence(words) < recognizer.LOW_CONFIDENCE
    assert intents.understand("that i report and the eighties", recognizer.free_form_confidence(words)) is None
    sure = tuple(recognizer.Word(w, 0, 0, 0.9) for w in "is it going to rain".split())
    assert recognizer.free_form_confidence(sure) >= recognizer.LOW_CONFIDENCE
    assert recognizer.free_form_confidence(sure[:1]) < recognizer.LOW_CONFIDENCE     # one word: noise decodes so


def test_understand_is_the_brains_rule():
    assert intents.understand("", 1.0) is None
    assert intents.understand("stop", 0.49) is None
    assert tuple(intents.understand("stop", 0.5)) == ("stop", {})
    assert intents.understand("hello there", 0.9).name == intents.FREE


@pytest.mark.parametrize("text,voice,speed,pitch,snr,noise,lead,was", [
    ("turn light off", "en-gb-x-rp+m5", 170, 65, None, "white", 0.22, "turn light on"),
    ("turn on the light", "en-029", 150, 35, 20, "brown", 0.31, "what time is"),
    ("set a timer for five minutes", "en-us+m5", 135, 50, 5, "white", 0.22, "set a timer for five"),
])
def test_issue40_grammar_search_keeps_accented_paths(heard, text, voice, speed, pitch, snr, noise, lead, was):
    """Tuning-split clips (tools/speech/corpus.py, seed 40) the grammar decode got wrong with pocketsphinx's default
    beams and its lattice best path (``was``: a wrong intent, a partial sentence the best path ended inside):
    recognizer.GRAMMAR_SEARCH (wider beams, the search's own final-state path) hears them right."""
    clip = _corpus().Clip(text, voice, speed, pitch, snr=snr, noise=noise, lead=lead)
    want = intents.parse(text, ("light.set",))
    t, got = heard("", pcm=_corpus().render(clip, 40))
    assert got is not None and tuple(got) == tuple(want), t


@pytest.mark.parametrize("text,voice,speed,pitch,snr,noise,lead", [
    ("what is the capital of france", "en-us+klatt", 150, 35, 20, "white", 0.48),     # "what is the time"
    ("turn left at the next light", "en-us+f2", 135, 65, None, "white", 0.26),       # "turn the light on"
    ("what is the capital of france", "en-us+m3", 150, 50, 5, "brown", 0.52),       # "what is the time"
])
def test_issue40_a_sentence_forced_into_the_grammar_is_not_a_command(heard, text, voice, speed, pitch, snr, noise,
                                                                      lead):
    """The tuning split's out-of-grammar sentences (seed 40) that passed r >= -6 and coverage >= 0.6: one of the
    grammar words matches badly on its own (its path score, recognizer.WORD_SCORE0)."""
    clip = _corpus().Clip(text, voice, speed, pitch, snr=snr, noise=noise, lead=lead)
    t, got = heard("", pcm=_corpus().render(clip, 40))
    assert got is None or got.name == intents.FREE, t


def test_issue40_weak_vowel_pronunciations(heard, models):
    """A tuning-split clip (seed 40) whose "nine minutes" the grammar heard as "two minute" with cmudict's
    pronunciations only; recognizer.PRONUNCIATIONS (RP's weak vowel in "minute") hears it right."""
    clip = _corpus().Clip("set a timer for nine minutes", "en-gb+m3", 170, 65, snr=5, noise="white", lead=0.2)
    t, got = heard("", pcm=_corpus().render(clip, 40))
    assert got is not None and tuple(got) == ("timer", {"minutes": 9}), t
    d = models.grammar_decoder()
    assert all(any(d.lookup_word("%s(%d)" % (w, n)) == p for n in range(2, 6)) for w, p in recognizer.PRONUNCIATIONS)


@pytest.mark.parametrize("voice,pitch,lead", [("en-gb+f2", 65, 0.39), ("en-gb+m5", 65, 0.24)])
def test_issue40_three_words_heard_in_tones_are_not_echoed(heard, voice, pitch, lead):
    """Tones junk from a larger tuning-split draw (corpus.plan(400, TUNE, 0, 40, 96)): the language model heard
    "i am walmart" and "oh her read" at free-form confidence 0.69 and 0.59; under FREE_FORM_MIN_WORDS words the
    confidence is halved."""
    clip = _corpus().Clip("", voice, 170 if voice.endswith("m5") else 135, pitch, snr=5, noise="brown", lead=lead,
                          junk="tones")
    t, got = heard("", pcm=_corpus().render(clip, 400))
    assert got is None, t
