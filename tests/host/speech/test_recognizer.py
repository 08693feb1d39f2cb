"""recognizer: espeak-ng utterances decoded by pocketsphinx, streaming as a board sends them."""
import sys

import pytest

from alabama import speech
from alabama.speech import audio, intents, recognizer

COMMANDS = [("what time is it", ("time", {})),
            ("set a timer for five minutes", ("timer", {"minutes": 5})),
            ("turn the light on", ("light", {"tool": "light.set", "on": True})),
            ("stop", ("stop", {}))]


@pytest.mark.parametrize("text,want", COMMANDS)
def test_grammar_commands(rec, models, utterance, text, want):
    t = rec.transcribe(utterance(text), chunk=640)
    assert t.mode == "grammar"
    assert tuple(intents.parse(t.text, models.tool_names)) == want, t
    assert t.confidence >= recognizer.LOW_CONFIDENCE
    assert [w.word for w in t.words][:1] == [text.split()[0]]


@pytest.mark.parametrize("pcm", [audio.silence(1.0), audio.noise(1.0)], ids=["silence", "noise"])
def test_silence_and_noise_are_low_confidence(rec, pcm):
    t = rec.transcribe(pcm, chunk=640)
    assert t.confidence < recognizer.LOW_CONFIDENCE
    assert t.text == "" and t.mode == "none"


def test_empty_and_odd_chunks(rec, utterance):
    rec.start()
    assert rec.finish().text == ""
    pcm = utterance("stop")
    assert rec.transcribe(pcm, chunk=333).text == rec.transcribe(pcm, chunk=640).text == "stop"


def test_buffer_is_bounded(models, utterance):
    r = recognizer.Recognizer(models, max_seconds=0.5)
    t = r.transcribe(utterance("what time is it"), chunk=640)
    assert t.truncated and len(r._utt.pcm) <= r._utt.max_bytes == 16000


def test_differential_board_framing(rec, utterance):
    """The bench's check: transcript(source) == transcript(source re-framed 20 ms at a time)."""
    pcm = utterance("turn the light on")
    assert rec.transcribe(pcm).text == rec.transcribe(b"".join(audio.frames(pcm)), chunk=640).text


@pytest.mark.parametrize("mutant", sorted(audio.MUTANTS))
def test_mutants_change_the_transcript(rec, utterance, mutant):
    pcm = utterance("turn the light on")
    good = rec.transcribe(pcm, chunk=640)
    bad = rec.transcribe(audio.MUTANTS[mutant](pcm), chunk=640)
    assert bad.text != good.text, (mutant, bad)


def test_a_quieter_command_is_heard_the_same(rec, utterance):
    """audio.shift8 (48 dB quieter): batch CMN takes the utterance's own mean, so the gain does not matter."""
    pcm = utterance("turn the light on")
    assert rec.transcribe(audio.shift8(pcm), chunk=640).text == rec.transcribe(pcm, chunk=640).text


def test_loader_one_line_when_pocketsphinx_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pocketsphinx", None)       # import blocked
    with pytest.raises(speech.SpeechUnavailable) as e:
        speech.load()
    msg = str(e.value)
    assert "\n" not in msg and "pip install pocketsphinx" in msg
    with pytest.raises(speech.SpeechUnavailable):
        recognizer.SpeechModels()


def test_issue40_a_transcript_does_not_depend_on_the_previous_utterance(models, utterance):
    """pocketsphinx's front end keeps its noise estimate (remove_noise) across utterances unless a stream is
    started: the same words decoded fresh, again, and after another utterance gave different transcripts."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[3] / "tools" / "speech" / "corpus.py"
    spec = importlib.util.spec_from_file_location("speech_corpus", path)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    pcm = corpus.render(corpus.Clip("what is the capital of france", "en-us+klatt", 150, 35, snr=20, lead=0.48), 40)
    r = recognizer.Recognizer(models)
    first = r.transcribe(pcm, chunk=640)
    assert r.transcribe(pcm, chunk=640) == first
    r.transcribe(utterance("set a timer for five minutes"), chunk=640)
    assert r.transcribe(pcm, chunk=640) == first
