"""The board wakes by itself (spec §4.1's first flow, issue 37): on-device wake word, and the barge-in by voice (§4.3).

Responsible for two scenarios on a board whose capture_mode is wake (the virtual board is made one for them with
boards.with_wake: the okay_nabu model compiled onto it by deploy; a real board must say so in its board file, else
they skip): "okay nabu, what time is it" played into the mic opens CaptureOpen{AUDIO, WAKEWORD, LIVE} with no
button, the core hears the question only (not the wake word's tail) and answers it; then, on a full-duplex board,
"okay nabu" while the reply plays opens a new WAKEWORD capture while the render is open and the core cancels its
render with BARGE_IN. Not for: how well the model hears (tests/host/test_wake_detect.py, docs/wake.md).
"""
import contextlib
import json
import wave

import numpy as np

import pytest

from alabama.board import logwords as lw
from alabama.hil.timeline import CORE_TO_SAT, SAT_TO_CORE
from alabama.v1 import operations_pb2 as ops

MODEL = "okay_nabu"
QUESTION = "What time is it?"


@contextlib.contextmanager
def _wake_board(hil):
    """The target's board as a wake board for the scenario (virtual), or the board as it is when it already is one."""
    t = hil.target
    if not getattr(t, "virtual", False):
        st = (t.board.data.get("settings") or {}) if hasattr(t, "board") else {}
        if st.get("capture_mode") != "wake":
            pytest.skip("this board's file does not set capture_mode wake (wake.models + settings)")
        yield t.board
        return
    import importlib.util
    if importlib.util.find_spec("pymicro_wakeword") is None:
        pytest.skip("pymicro-wakeword (which ships okay_nabu) is not installed: no model to deploy")
    from alabama.board import boards
    saved = t.board
    t.board = boards.with_wake(saved, MODEL)
    try:
        yield t.board
    finally:
        t.board = saved


def _utterances(hil):
    from alabama.demo import DemoError, make_wake_utterance
    try:
        from alabama.speech import load
        load()
        make_wake_utterance(hil.workdir / "wake-question.wav", QUESTION)
        make_wake_utterance(hil.workdir / "wake-only.wav", "", pause_ms=1500)
    except (DemoError, Exception) as e:  # noqa: BLE001 - pocketsphinx or espeak-ng missing: say which
        pytest.skip("the wake scenarios need espeak-ng and the speech layer: %s" % e)
    return hil.workdir / "wake-question.wav", hil.workdir / "wake-only.wav"


def _word_end(pcm):
    """Bytes into s16 `pcm` where its first spoken stretch (the wake word) ends: the first 10 ms frame of the first
    200 ms of quiet after speech (frames under 2 % of the loudest one's RMS)."""
    x = np.frombuffer(pcm[: len(pcm) - len(pcm) % 320], "<i2").astype(np.float64).reshape(-1, 160)
    quiet = np.sqrt((x ** 2).mean(1)) < 0.02 * np.sqrt((x ** 2).mean(1)).max()
    spoke = False
    for i in range(len(quiet) - 20):
        spoke = spoke or not quiet[i]
        if spoke and quiet[i:i + 20].all():
            return 320 * i
    raise AssertionError("no pause after the wake word in the utterance")


def _check_no_pre_roll(hil, co, wav):
    """On the virtual board (its mic hears the WAV's bytes exactly): the capture's first chunk lies in the
    utterance at or after the wake word's end, so the core never gets the word's tail (docs/core.md)."""
    if not getattr(hil.target, "virtual", False):
        return
    with wave.open(str(wav)) as w:
        src = w.readframes(w.getnframes())
    pcm = b"".join(e.data for e in hil.tl.snapshot()
                   if e.dir == SAT_TO_CORE and e.op == "stream_chunk" and e.id == co.id and e.data)
    # anchored on its first loud chunk (a quiet one matches any pause), then back to where the capture starts
    x = np.frombuffer(pcm[: len(pcm) - len(pcm) % 640], "<i2").astype(np.float64).reshape(-1, 320)
    k = int(np.argmax(np.abs(x).max(1) > 2000))
    at = src.find(pcm[640 * k:640 * (k + 1)]) - 640 * k
    assert at >= 0 and at % 2 == 0, "the capture is not a piece of the utterance played"
    end = _word_end(src)
    assert at >= end, "the capture starts %d ms before the wake word ends: its tail goes to the core" % (
        (end - at) // 32)
    hil.measure("wake_capture_start_after_word_ms", (at - end) / 32)


def _wake_exchange(hil, wav):
    """The board listening, the question played: its WAKEWORD CaptureOpen, the core's END_DETECTED and render."""
    assert hil.target.log_wait(lw.WAKE_LISTENING, timeout=15), "the board's wake engine did not start: %s" % (
        hil.target.log_wait(lw.WAKE_CANNOT_RUN, timeout=0) or "no line")
    m = hil.tl.mark()
    hil.target.set_mic(wav)
    co = hil.expect(SAT_TO_CORE, "capture_open", after=m, timeout=10, what="the board's CaptureOpen on its wake word")
    c = co.env.capture_open
    assert co.id % 2 == 1 and c.kind == ops.AUDIO and c.mode == ops.LIVE and c.trigger == ops.WAKEWORD, co.summary
    end = hil.expect(CORE_TO_SAT, "stream_end", co.id, after=m, timeout=15, what="the core's END_DETECTED")
    assert end.env.stream_end.reason == ops.END_DETECTED
    ro = hil.expect(CORE_TO_SAT, "media_render_open", after=m, timeout=15, what="the core's spoken answer")
    return co, ro, m


@pytest.mark.spec("§4.1", "R10.4.1-b")
@pytest.mark.needs("mic_feed", "mic", "speaker")
def test_the_board_wakes_on_its_wake_word_and_the_core_answers_the_question(hil):
    """No button: "okay nabu, what time is it" -> CaptureOpen{WAKEWORD}; the core hears "what time is it" (the
    capture starts after the word: no pre-roll) and answers on the capture id."""
    with _wake_board(hil):
        wav, _ = _utterances(hil)
        hil.start_core(brain="speech")
        hil.provision("ik", preconfigure=True)
        hil.boot()
        co, ro, m = _wake_exchange(hil, wav)
        resp = hil.expect(CORE_TO_SAT, "response", co.id, after=m, timeout=20, what="the Response on the capture")
        meta = [json.loads(b.text) for b in resp.env.response.content if b.text.startswith("{")]
        heard = meta[0].get("transcript") if meta else None
        assert heard == "what time is it", "the core heard %r (the wake word's tail in the capture?)" % heard
        _check_no_pre_roll(hil, co, wav)
        hil.expect(SAT_TO_CORE, "playback_done", ro.id, after=m, timeout=15, what="the board's PlaybackDone")
        hil.assert_conformant()


@pytest.mark.spec("§4.3", "R10.8-a")
@pytest.mark.needs("mic_feed", "mic", "speaker")
def test_a_full_duplex_board_barges_in_by_voice_while_the_reply_plays(hil):
    """The reply to the first question playing, "okay nabu" again: a new WAKEWORD CaptureOpen while the render is
    open; the core cancels its render with BARGE_IN and the board reports what it played (PlaybackDone)."""
    with _wake_board(hil) as board:
        if board.duplex != "full" or (board.data.get("wake") or {}).get("barge_in") is False:
            pytest.skip("a half-duplex board cannot hear its wake word while it plays (its board file says so)")
        wav, again = _utterances(hil)
        hil.start_core(brain="speech")
        hil.provision("ik", preconfigure=True)
        hil.boot()
        co, ro, m = _wake_exchange(hil, wav)
        assert hil.target.log_wait(r"render %d opened" % ro.id, timeout=5), "the board did not open the render"
        m2 = hil.tl.mark()
        hil.target.set_mic(again)
        co2 = hil.expect(SAT_TO_CORE, "capture_open", after=m2, timeout=10, what="the barge-in's CaptureOpen")
        assert co2.env.capture_open.trigger == ops.WAKEWORD and co2.id != co.id
        assert not hil.tl.find(SAT_TO_CORE, "playback_done", ro.id, m), "the reply had ended before the barge-in"
        cancel = hil.expect(CORE_TO_SAT, "stream_cancel", ro.id, after=m2, timeout=5, what="the core's BARGE_IN")
        assert cancel.env.stream_cancel.reason == ops.BARGE_IN
        hil.expect(SAT_TO_CORE, "playback_done", ro.id, after=m2, timeout=5, what="PlaybackDone of the cut reply")
        assert hil.target.log_wait(lw.WAKE_BARGE_IN, timeout=2), "the board did not say it barged in"
        hil.assert_conformant()
