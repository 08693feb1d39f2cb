"""Issue 40: the core's default wake engine is a microWakeWord model (the one meeting <= 0.5 false wakes per
hour on the wake corpus, docs/speech.md "Wake words measured"); the keyphrase spotter is the custom phrase's
engine (``--wake-phrase``), and ``--wake-phrase ""`` turns waking off."""
import argparse

import pytest

from alabama.core import cli as core_cli
from alabama.core.server import _make_wake
from alabama.errors import UsageError
from alabama.speech import wakeword


def serve_args(*argv):
    p = argparse.ArgumentParser()
    core_cli.register(p.add_subparsers(dest="command"))
    return p.parse_args(["core", "serve", *argv])


def wake_of(*argv):
    kw = core_cli._speech_kw(serve_args(*argv))
    return _make_wake(kw["wake_phrase"], kw["wake_threshold"], kw["wake_min_ms"], kw["wake_word"])


def test_the_default_wake_word_is_the_model_that_meets_the_false_wake_goal():
    assert wakeword.DEFAULT_WORD == "alexa"
    assert wakeword.parse_word(wakeword.DEFAULT_WORD) == (wakeword.MICRO, "alexa")


def test_core_serve_without_wake_flags_spots_with_the_microwakeword_model():
    pytest.importorskip("pymicro_wakeword", reason="pip install pymicro-wakeword")
    kw = core_cli._speech_kw(serve_args())
    assert (kw["wake_word"], kw["wake_phrase"]) == (wakeword.DEFAULT_WORD, None)
    w = wake_of()
    try:
        assert w.config["engine"] == wakeword.MICRO and w.config["model"].endswith("alexa.json")
    finally:
        assert w.pool.workers == []          # never started: nothing to stop


def test_a_wake_phrase_is_the_keyphrase_spotter_and_an_empty_one_is_off():
    pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx")
    w = wake_of("--wake-phrase", "hey alabama", "--wake-min-ms", "300")
    assert w.config["engine"] == wakeword.PHRASE and w.config["phrase"] == "hey alabama"
    assert w.config["min_ms"] == 300
    assert wake_of("--wake-phrase", "") is None


def test_an_absent_model_package_falls_back_to_the_keyphrase_spotter(monkeypatch, caplog):
    pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx")

    def absent(engine):
        raise wakeword.WakeUnavailable("the micro wake-word engine needs pymicro-wakeword: pip install "
                                       "pymicro-wakeword")
    monkeypatch.setattr(wakeword, "_require", absent)
    w = wake_of()
    assert w.config["engine"] == wakeword.PHRASE and w.config["phrase"] == "hey alabama"
    assert any("pip install pymicro-wakeword" in r.getMessage() for r in caplog.records)


def test_wake_word_and_wake_phrase_together_are_refused():
    with pytest.raises(UsageError, match="not both"):
        core_cli._speech_kw(serve_args("--wake-word", "okay_nabu", "--wake-phrase", "hey alabama"))


def test_issue40_core_serve_decides_the_fallback_once_for_every_worker(monkeypatch, caplog):
    """`alabama core serve` checks the wake choice once, before its workers start: an absent engine package is
    one line and every server is given the keyphrase phrase (so no worker says it again); without pocketsphinx
    for that, one line and waking off ("")."""
    pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx")
    from alabama.speech import SpeechUnavailable

    def absent(engine):
        raise wakeword.WakeUnavailable("the micro wake-word engine needs pymicro-wakeword: pip install "
                                       "pymicro-wakeword")
    monkeypatch.setattr(wakeword, "_require", absent)
    assert core_cli._wake_at_start(wakeword.DEFAULT_WORD, None) == (None, "hey alabama")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "pip install pymicro-wakeword" in lines[0] and "'hey alabama' instead" in lines[0]
    args = serve_args()
    args.wake_word, args.wake_phrase = core_cli._wake_at_start(*core_cli._wake_choice(args))
    kw = core_cli._speech_kw(args)                   # what each worker's CoreServer is given
    assert (kw["wake_word"], kw["wake_phrase"]) == (None, "hey alabama")
    caplog.clear()
    assert _make_wake(kw["wake_phrase"], kw["wake_threshold"], kw["wake_min_ms"], kw["wake_word"]).config[
        "engine"] == wakeword.PHRASE and caplog.records == []

    def no_speech(*a, **k):
        raise SpeechUnavailable("pocketsphinx is not installed (pip install pocketsphinx): falling back to the echo "
                                "brain")
    monkeypatch.setattr(wakeword, "choose", no_speech)
    assert core_cli._wake_at_start(None, "hey alabama") == (None, "")
    assert len(caplog.records) == 1 and "is off" in caplog.records[0].getMessage()
