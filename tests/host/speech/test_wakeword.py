"""Wake-word engines behind one seam (speech/wakeword.py, issue 40 item 1): microWakeWord and openWakeWord
models by name or file, the keyphrase spotter for a phrase; each detector hits on its word (espeak-ng en-us: a
voice outside the models' training set, so this is a floor, docs/speech.md) and not on other speech; a
missing, damaged or truncated model is one line at start (TensorFlow Lite would crash on it: the check runs in
a child process); an absent package is one line with the pip command and the core falls back to the keyphrase
spotter."""
import json
import logging
import pathlib
import sys

import pytest

from alabama.speech import audio, spotter, wakeword as W

pytest.importorskip("pymicro_wakeword", reason="pip install pymicro-wakeword")
pytest.importorskip("pyopen_wakeword", reason="pip install pyopen-wakeword")


def hits(det, pcm):
    return [h for i in range(0, len(pcm), 640) for h in [det.feed(pcm[i:i + 640])] if h is not None]


@pytest.mark.parametrize("word, engine", [("okay_nabu", W.MICRO), ("micro:alexa", W.MICRO), ("open:alexa", W.OPEN),
                                          ("x/m.json", W.MICRO), ("m.tflite", W.OPEN), ("OPEN:Hey_Rhasspy", W.OPEN)])
def test_a_wake_word_names_its_engine(word, engine):
    assert W.parse_word(word)[0] == engine


@pytest.mark.parametrize("word", ["", "hey_alabama", "open:x.json", "micro:x.tflite", "open:"])
def test_a_wake_word_that_names_nothing_is_one_line(word):
    with pytest.raises(W.WakeError) as e:
        W.parse_word(word)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("word, text", [("okay_nabu", "okay nabu"), ("alexa", "alexa"), ("open:alexa", "alexa")])
def test_each_engine_hears_its_word_and_not_other_speech(word, text):
    cfg = W.choose(word)
    det = W.open_detector(cfg)
    try:
        pcm = audio.silence(0.5) + audio.synth(text, voice="en-us") + audio.silence(0.8)
        got = hits(det, pcm)
        assert len(got) == 1, got
        assert got[0].phrase == cfg["label"] and 500 <= got[0].end_ms <= len(pcm) * 1000 // 32000
        assert hits(det, audio.synth(audio.OTHER_SPEECH, voice="en-us")) == []       # 17 s of other speech
    finally:
        det.close()


def test_the_keyphrase_spotter_is_the_engine_for_a_phrase():
    cfg = W.choose(phrase="hey alabama")
    assert cfg["engine"] == W.PHRASE and cfg["threshold"] == spotter.DEFAULT_THRESHOLD
    det = W.open_detector(cfg)
    assert isinstance(det, spotter.Spotter)
    det.close()


def _micro_copy(tmp_path, mangle):
    import pymicro_wakeword
    models = pathlib.Path(pymicro_wakeword.__file__).parent / "models"
    cfg = json.loads((models / "okay_nabu.json").read_text())
    data = (models / "okay_nabu.tflite").read_bytes()
    (tmp_path / "mine.tflite").write_bytes(mangle(data))
    (tmp_path / "mine.json").write_text(json.dumps(cfg).replace("okay_nabu.tflite", "mine.tflite"))
    return tmp_path / "mine.json"


def test_a_users_own_model_files_load(tmp_path):
    cfg = W.choose(str(_micro_copy(tmp_path, lambda d: d)))
    assert cfg["engine"] == W.MICRO and cfg["label"] == "Okay Nabu"


@pytest.mark.parametrize("mangle, says", [(lambda d: b"not a model", "not a TensorFlow Lite model"),
                                          (lambda d: d[:len(d) // 3], "is damaged")])
def test_a_damaged_model_is_one_line_not_a_crash(tmp_path, mangle, says):
    path = _micro_copy(tmp_path, mangle)
    with pytest.raises(W.WakeError) as e:
        W.choose(str(path))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_model_is_loaded_in_a_child_once_per_process_and_again_when_its_file_changes(tmp_path, monkeypatch):
    """`alabama core serve` checks the wake word before its workers start and the server checks it again: one child
    load for the same files, not two (~1 s of start each); a changed .tflite is loaded (and judged) afresh."""
    import os
    from alabama.core import server
    loads = []
    real = W._load_in_child
    monkeypatch.setattr(W, "_load_in_child", lambda cfg: (loads.append(cfg["model"]), real(cfg))[1])
    path = _micro_copy(tmp_path, lambda d: d)
    W.choose(str(path))
    wake = server._make_wake(None, None, word=str(path))
    try:
        assert wake.config["engine"] == W.MICRO and len(loads) == 1
    finally:
        wake.pool = None                                                # never started: nothing to stop
    tfl = tmp_path / "mine.tflite"
    tfl.write_bytes(tfl.read_bytes()[:len(tfl.read_bytes()) // 3])    # damaged after the first check
    st = tfl.stat()
    os.utime(tfl, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(W.WakeError, match="is damaged"):
        W.choose(str(path))
    assert len(loads) == 2


def test_a_missing_model_or_description_is_one_line(tmp_path):
    with pytest.raises(W.WakeError, match="cannot be read"):
        W.choose(str(tmp_path / "none.json"))
    (tmp_path / "bad.json").write_text('{"model": "x.tflite"}')
    with pytest.raises(W.WakeError, match="not a microWakeWord model description"):
        W.choose(str(tmp_path / "bad.json"))
    with pytest.raises(W.WakeError, match="cannot be read"):
        W.choose(str(tmp_path / "none.tflite"))


def test_an_absent_package_says_how_to_install_and_the_core_falls_back(monkeypatch, caplog):
    from alabama.core import server
    monkeypatch.setitem(sys.modules, "pymicro_wakeword", None)          # import pymicro_wakeword -> ImportError
    with pytest.raises(W.WakeUnavailable, match="pip install pymicro-wakeword"):
        W.choose("okay_nabu")
    with caplog.at_level(logging.WARNING, logger="alabama.core"):
        wake = server._make_wake("hey alabama", None, word="okay_nabu")
    try:
        assert wake.config["engine"] == W.PHRASE and wake.phrase == "hey alabama"
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "pip install pymicro-wakeword" in lines[0] and "hey alabama" in lines[0], lines
    finally:
        wake.pool = None                                                # never started: nothing to stop


@pytest.mark.parametrize("batch_s", [0.1, 0.3])
def test_a_model_fed_whole_batches_hits_where_20_ms_frames_hit(batch_s):
    """The spotting pool feeds 0.1 s batches: a microWakeWord detector takes each in one call
    (``feed_until_hit``) and gives the hit (frame, end_ms) and the rest of the batch after the hit's frame that
    feeding it 20 ms at a time gives (``frames_until_hit(batch=False)``), before and after a hit."""
    pcm = (audio.synth("the weather is mild today", pad=(0.2, 0.2)) +
           audio.synth("alexa", voice="en-us", pad=(0.3, 0.0)) + audio.synth("what time is it", pad=(0.0, 0.3)))
    pcm = pcm + pcm                                   # a second hit after the detector started afresh
    step = int(batch_s * 16000) * 2

    def run(batch):
        det, out = W.open_detector(W.choose("alexa", check=False)), []
        for i in range(0, len(pcm) - len(pcm) % 640, step):
            r = spotter.frames_until_hit(det, pcm[i:i + step], batch=batch)
            if r is not None:
                out.append((r[0], r[1], det.fed))
        det.close()
        return out
    whole = run(True)
    assert len(whole) == 2 and whole == run(False)
    for hit, rest, fed in whole:
        assert fed % 640 == 0 and hit.end_ms == fed * 1000 // 32000 and hit.frame == fed // 640 - 1
