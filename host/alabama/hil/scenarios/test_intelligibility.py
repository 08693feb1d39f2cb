"""Intelligibility: the audio a board sends is speech a recogniser understands as well as the source.

A known utterance (espeak-ng, ``alabama.speech.audio``) is played into the board's microphone (the virtual
board's mic WAV; a real board hears it from the host's loudspeaker, ``--speaker-out``), a turn runs against
the core's speech brain (``brain="speech"``), and the core's transcript of what the board sent must equal the
transcript of the source audio decoded directly by the same recogniser on the same models: a differential
check, independent of how good the recogniser is. A wrong I2S slot, a 32->16-bit shift or a lost byte per
frame still passes "samples arrived, not silent" but fails this (the HAL mutants in ``alabama.hil.mutants``).
"""
import json

import numpy as np
import pytest

from alabama.hil import steps
from alabama.hil.measures import word_error_rate
from alabama.hil.timeline import CORE_TO_SAT, SAT_TO_CORE
from alabama.v1 import operations_pb2 as ops

#: Short: two cores are shared, and every second of audio is recognised twice.
UTTERANCE = "what time is it"


def _speech_or_skip():
    try:
        from alabama.speech import audio, load
        load()
        audio.synth("a")
    except Exception as e:  # noqa: BLE001 — pocketsphinx, espeak-ng or sox missing: say which
        pytest.skip("the intelligibility check needs the speech layer: %s" % e)
    from alabama.speech import audio
    return audio


def _direct_transcript(pcm, tools):
    """The source decoded directly: the recogniser the speech brain builds, on the models for the same tools."""
    from alabama.speech.recognizer import Recognizer, SpeechModels
    return Recognizer(SpeechModels(tool_names=tuple(tools))).transcribe(pcm, chunk=640)


def _core_heard(resp):
    """The transcript and intent the core put in its Response (pipeline._understood: text, then JSON)."""
    blocks = [c.text for c in resp.env.response.content]
    for b in blocks:
        if b.startswith("{"):
            try:
                meta = json.loads(b)
            except ValueError:
                continue
            if "transcript" in meta:
                return meta
    return None


def _play_turn(hil, wav):
    """One turn with ``wav`` in the board's mic: push-to-talk where the bench can press the button, else
    (a real board) a capture the core asks for, closed by its endpointer."""
    if "button" in hil.target.features:
        return steps.ptt_exchange(hil, wav)
    m = hil.tl.mark()
    hil.core.call(hil.core.server.request_capture(hil.device_id, "intelligibility"), timeout=15)
    co = hil.expect(SAT_TO_CORE, "capture_open", after=m, what="the CaptureOpen answering RequestCapture")
    hil.target.set_mic(wav)
    return steps.finish_exchange(hil, co, m, timeout=60)


def _offered_tools(hil):
    """The tool names the core offers this board's assistant, which the speech brain's grammar is built for
    (the light rule depends on them): the session surface's tools, none for a guest (docs/core.md)."""
    def tools():
        conn = hil.core.server.connections.get(hil.device_id)
        sf = conn.session.surface if conn is not None else None
        return () if sf is None or sf.guest else tuple(sf.tools)
    return hil.core.call_soon(tools)


def check_intelligible(hil, text=UTTERANCE):
    """Play ``text`` into the board's mic, run a turn with the speech brain, and assert the core heard what the
    recogniser hears in the source. Records both transcripts beside their waveforms and the WER."""
    audio = _speech_or_skip()
    src = audio.synth(text)
    wav = steps.write_wav(hil.workdir / "source.wav", np.frombuffer(src, "<i2"))
    ex = _play_turn(hil, wav)
    return ex, judge(hil, ex, src, wav, text)


def judge(hil, ex, src, wav, text):
    """The differential check of one turn: the core's transcript of capture ``ex["co"]`` against ``src`` (the
    PCM of what was said in it) decoded directly; both recorded beside their waveforms, the WER measured."""
    co = ex["co"]
    heard = _core_heard(ex["resp"])
    assert heard is not None, "the core's Response on capture %d carries no transcript: is the speech brain on?" % co.id
    direct = _direct_transcript(src, _offered_tools(hil))
    wer = word_error_rate(direct.text, heard["transcript"])
    hil.measure("speech_wer", wer)
    hil.transcripts[str(wav)] = direct.text                  # beside "what the board heard (mic input)"
    if not any(str(p) == str(wav) for _, p in hil.target.waves()):     # a real board: the host played it
        hil.waves.append({"title": "source utterance (played on --speaker-out)", "path": wav, "transcript": direct.text})
    hil.transcripts[("capture_open", co.id)] = heard["transcript"]   # beside "capture N as the core received it"
    hil.note("intelligibility: source %r -> %r (confidence %.2f); through the board -> %r (confidence %.2f, "
             "intent %s); WER %.2f" % (text, direct.text, direct.confidence, heard["transcript"],
                                       heard.get("confidence") or 0.0, heard.get("intent"), wer))
    assert direct.text, "the recogniser hears nothing in the source utterance %r: the check cannot judge" % text
    if heard["transcript"] != direct.text:
        hil.fail("the core heard %r through the board, but %r in the source audio (WER %.2f): the board's audio "
                 "path damages speech" % (heard["transcript"], direct.text, wer))
    return heard


@pytest.mark.spec("§4.1", "R10.4.1-b")
@pytest.mark.needs("mic_feed", "mic")
def test_intelligible_push_to_talk(hil):
    """A push-to-talk turn through the board with the speech brain: the core's transcript of what the board sent
    equals the transcript of the source utterance decoded directly (same recogniser, same models)."""
    hil.start_core(brain="speech")
    hil.provision("guest")
    hil.boot()
    ex, _ = check_intelligible(hil)
    if "button" in hil.target.features:
        assert ex["end"].env.stream_end.reason == ops.PTT_RELEASE
    hil.assert_conformant()


@pytest.mark.spec("§4", "§10.4", "R10.4-b")
@pytest.mark.needs("mic_feed", "mic")
def test_intelligible_wake_phrase_ambient(hil):
    """Hands-free: the board streams ambiently (setting capture_mode = ambient), "hey alabama, what time is it"
    reaches its mic, the core's wake phrase spotter hears it and asks for a capture (RequestCapture), the board
    supersedes its ambient capture and answers; the core's transcript of that turn equals the transcript of the
    command ("what time is it") decoded directly, and the board streams ambiently again afterwards."""
    audio = _speech_or_skip()
    hil.start_core(brain="speech", wake_phrase="hey alabama")
    hil.provision("ik")
    hil.boot()
    amb = steps.go_ambient(hil)
    hil.expect(SAT_TO_CORE, "stream_chunk", amb.id, after=hil.tl.index_of(amb), what="ambient audio")
    wake, command = audio.synth("hey alabama", pad=(0.3, 0.0)), audio.synth(UTTERANCE, pad=(0.0, 0.3))
    src = wake + command + audio.silence(1.5)          # the quiet the core's endpointer closes the turn on
    wav = steps.write_wav(hil.workdir / "source.wav", np.frombuffer(src, "<i2"))
    m = hil.tl.mark()
    hil.target.set_mic(wav)
    rq = hil.expect(CORE_TO_SAT, "request_capture", after=m, timeout=15,
                    what="the core's RequestCapture after hearing the wake phrase")
    ref = rq.env.request_capture.correlation_ref
    co = hil.expect(SAT_TO_CORE, "capture_open", after=m, pred=lambda e: e.env.capture_open.correlation_ref == ref,
                    what="the CaptureOpen answering the wake RequestCapture %r" % ref)
    ex = steps.finish_exchange(hil, co, m, timeout=30)
    assert ex["end"].env.stream_end.reason == ops.END_DETECTED
    heard = judge(hil, ex, command, wav, UTTERANCE)
    assert heard.get("intent") == "time", "the wake turn's intent: %r" % heard
    hil.expect(SAT_TO_CORE, "capture_open", after=hil.tl.index_of(ex["resp"]), timeout=10,
               pred=lambda e: not e.env.capture_open.trigger and not e.env.capture_open.correlation_ref,
               what="the ambient capture resumed after the wake turn")
    hil.assert_conformant()
