"""The wake turn whole (issue 40 item 4): one continuous utterance on the board's mic, "hey alabama" then the
command, streamed in real time; the ambient capture A carries it until the core's RequestCapture arrives, then
the board switches to the requested capture B in either order (StreamCancel{A} then CaptureOpen{B}, as the
firmware does, or the reverse). The command must be understood: the audio after the hit moves to B (never
dropped with the cancelled A), the wake phrase's tail is not heard as the command's start, and a natural pause
after the wake phrase does not end B before the command begins (docs/core.md, "Ambient wake phrase")."""
import asyncio
import functools
import json
import logging
import re
import shutil

import pytest

pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx")
if not (shutil.which("espeak-ng") and shutil.which("sox")):
    pytest.skip("speech tests synthesize utterances: apt-get install espeak-ng sox", allow_module_level=True)

from alabama.core import pipeline, spotting, waking  # noqa: E402
from alabama.core.hearing import SpeechBrain  # noqa: E402
from alabama.core.testsat import capture_open, env, mic_cap, silence, speaker_cap  # noqa: E402
from alabama.speech import audio  # noqa: E402
from alabama.v1 import operations_pb2 as ops  # noqa: E402

from conftest import connect, make_server  # noqa: E402

CHUNK = 640          # 20 ms at 16 kHz s16le mono
#: A board does not switch captures the instant RequestCapture arrives (it finishes its mic buffer, cancels,
#: opens): it keeps streaming on the ambient capture this long first (0.7 s of audio sat in the core's buffer
#: in the issue's run).
SWITCH_S = 0.5


class RecordingBrain(SpeechBrain):
    """The speech brain, keeping each voice turn's audio (what the capture collected) for the byte checks."""

    def __init__(self):
        super().__init__()
        self.audio = []

    async def reply(self, turn):
        self.audio.append(bytes(turn.audio))
        return await super().reply(turn)


@pytest.fixture(scope="module")
def brain():
    return RecordingBrain().warm(())


@pytest.fixture(scope="module")
def say():
    return functools.lru_cache(maxsize=None)(audio.synth)


def utterance(say, pause_s):
    """The wake phrase and "what time is it": run on in one espeak sentence (``pause_s`` None), or said apart
    with ``pause_s`` of quiet between them."""
    if pause_s is None:
        return say("hey alabama what time is it")
    return (say("hey alabama", pad=(0.3, 0.0)) + audio.silence(pause_s) +
            say("what time is it", pad=(0.0, 0.3)))


#: How far behind the spotting worker may fall here before audio is skipped. The core's bound (spotting.MAX_BACKLOG_S,
#: checked by test_spotting_pool's test_backlog_is_bounded_when_the_worker_is_behind) drops the oldest audio when a
#: loaded machine (the whole suite at more workers than cores) starves the worker; dropped audio would fail these
#: turns for a reason they do not check, so they keep every byte and wait for the worker instead.
KEEP_EVERY_BYTE_S = 60
#: Audio (s) the turn streams at most before it fails: generous, the worker may run behind (above); a hang still ends.
TURN_LIMIT_S = 60


def keep_every_byte(srv):
    if srv.wake.pool is not None:
        srv.wake.pool.max_backlog_bytes = KEEP_EVERY_BYTE_S * spotting.BYTES_PER_SECOND


async def wake_turn(sat, pcm, order, mic, switch_s=SWITCH_S):
    """Stream ``pcm`` in real time on an ambient capture; ``switch_s`` after the RequestCapture arrived switch
    to the requested capture (``order``: "cancel-open" or "open-cancel") and stream the rest there; silence
    until END_DETECTED. Every byte the mic sent is appended to ``mic``.
    -> (the requested capture's id, its Response, the ambient id)."""
    aid = sat.mint()
    await sat.send(capture_open(aid, trigger=ops.TRIGGER_UNSPECIFIED))
    cur, seq, bid, pos = aid, 0, None, 0
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    n = 0
    asked = None
    while True:
        if bid is None:
            rc = [x for x in sat.received if x.op == "request_capture"]
            if rc and asked is None:
                asked = n
            if rc and n - asked >= switch_s / 0.02:
                bid = sat.mint()
                ref = rc[0].env.request_capture.correlation_ref
                opening = capture_open(bid, trigger=ops.REQUESTED, correlation_ref=ref)
                cancel = env(aid, "stream_cancel", reason=ops.SUPERSEDED)
                for f in ((cancel, opening) if order == "cancel-open" else (opening, cancel)):
                    await sat.send(f)
                cur, seq = bid, 0
        elif any(x.op == "stream_end" and x.id == bid for x in sat.received):
            break
        data = pcm[pos:pos + CHUNK] if pos < len(pcm) else silence(20)
        pos += CHUNK
        await sat.send(env(cur, "stream_chunk", seq=seq), data)
        mic += data
        seq += 1
        n += 1
        if n > TURN_LIMIT_S / 0.02:
            raise AssertionError("no wake turn: %r" % [x.op for x in sat.received[-10:]])
        delay = t0 + n * 0.02 - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
    return bid, await sat.expect("response", bid, timeout=60), aid


def understood(resp):
    content = resp.env.response.content
    assert len(content) >= 2, content
    return content[0].text, json.loads(content[1].text)


@pytest.mark.parametrize("switch_s", [0.0, SWITCH_S], ids=["switch-at-once", "switch-late"])
@pytest.mark.parametrize("order", ["cancel-open", "open-cancel"])
@pytest.mark.parametrize("pause_s", [None, 0.7], ids=["run-on", "pause-0.7s"])
def test_r10_4_b_the_command_after_the_wake_phrase_is_heard_whole(tmp_path, run, brain, say, monkeypatch, caplog,
                                                                   pause_s, order, switch_s):
    monkeypatch.setattr(pipeline, "AMBIENT_RESUME_S", 30.0)      # the device's resume is not what this checks
    caplog.set_level(logging.INFO, logger="alabama.core")
    mic = bytearray()

    async def body():
        async with make_server(tmp_path, brain=brain, wake_phrase="hey alabama") as srv:
            keep_every_byte(srv)
            sat = await connect(srv)
            await sat.hello(caps=[mic_cap(), speaker_cap()])
            del brain.audio[:]
            bid, resp, aid = await wake_turn(sat, utterance(say, pause_s), order, mic, switch_s)
            text, meta = understood(resp)
            # What the turn heard is one unbroken piece of the mic's stream that starts at most the phrase's
            # tail after the hit: nothing after the wake phrase was dropped with the cancelled capture.
            hit_ms = [int(m.group(1)) for m in (re.search(r"wake phrase .* at (\d+) ms", r.getMessage())
                                                 for r in caplog.records) if m]
            assert len(hit_ms) == 1 and len(brain.audio) == 1
            heard = brain.audio[0]
            start = bytes(mic).find(heard)
            assert start >= 0, "the turn's audio is not one unbroken piece of the mic's stream"
            assert hit_ms[0] * 32 <= start <= (hit_ms[0] + waking.TAIL_MAX_S * 1000 + 20) * 32, \
                (start / 32, hit_ms)
            assert meta["intent"] == "time", (text, meta)
            assert "alabama" not in text, text                    # the phrase's tail is not the command
            rep = srv.reports_for(sat.device_id)[-1]
            assert rep.clean, [v.as_dict() for v in rep.violations]
            await sat.close()
    run(body(), timeout=240)


@pytest.mark.parametrize("word", ["okay_nabu", "open:alexa"])
def test_a_wake_word_model_runs_the_same_turn_through_the_spotting_pool(tmp_path, run, brain, say, monkeypatch,
                                                                        caplog, word):
    """Issue 40 item 1: ``wake_word`` (``--wake-word``) picks a microWakeWord / openWakeWord model; its detectors
    run in the spotting worker processes like the keyphrase spotter's, and the wake turn is the same: the
    command after a 0.7 s pause is heard whole, the board superseding its ambient capture first."""
    pytest.importorskip("pymicro_wakeword", reason="pip install pymicro-wakeword")
    pytest.importorskip("pyopen_wakeword", reason="pip install pyopen-wakeword")
    monkeypatch.setattr(pipeline, "AMBIENT_RESUME_S", 30.0)
    caplog.set_level(logging.INFO, logger="alabama.core")
    text = {"okay_nabu": "okay nabu", "open:alexa": "alexa"}[word]
    pcm = say(text, voice="en-us", pad=(0.3, 0.0)) + audio.silence(0.7) + say("what time is it", pad=(0.0, 0.3))

    async def body():
        async with make_server(tmp_path, brain=brain, wake_word=word) as srv:
            keep_every_byte(srv)
            assert srv.wake.config["engine"] == ("open" if word.startswith("open:") else "micro")
            assert srv.wake.pool is not None                               # worker processes, not threads
            sat = await connect(srv)
            await sat.hello(caps=[mic_cap(), speaker_cap()])
            bid, resp, aid = await wake_turn(sat, pcm, "cancel-open", bytearray())
            text_, meta = understood(resp)
            assert meta["intent"] == "time", (text_, meta)
            assert srv.reports_for(sat.device_id)[-1].clean
            await sat.close()
    run(body(), timeout=240)
    heard = [r.getMessage() for r in caplog.records if "heard on ambient capture" in r.getMessage()]
    assert heard and all(": wake word %r heard" % {"okay_nabu": "Okay Nabu", "open:alexa": "alexa"}[word] in m
                         for m in heard), heard           # a model hears a wake word, not a phrase (issue 40)


def test_a_device_setting_picks_its_own_wake_word(tmp_path, run, brain, say, monkeypatch, caplog):
    """A device that declares the setting ``wake_word`` (here "okay_nabu") is spotted with that model while the
    core's own engine is the keyphrase "hey alabama": "okay nabu" wakes it."""
    pytest.importorskip("pymicro_wakeword", reason="pip install pymicro-wakeword")
    from alabama.v1 import surface_pb2
    monkeypatch.setattr(pipeline, "AMBIENT_RESUME_S", 30.0)
    caplog.set_level(logging.INFO, logger="alabama.core")
    setting = surface_pb2.SettingDescriptor(key=pipeline.WAKE_WORD_SETTING, label="wake word",
                                            type=surface_pb2.SETTING_STRING,
                                            value=surface_pb2.SettingValue(string_value="okay_nabu"))
    pcm = say("okay nabu", voice="en-us", pad=(0.3, 0.0)) + audio.silence(0.7) + say("what time is it", pad=(0.0, 0.3))

    async def body():
        async with make_server(tmp_path, brain=brain, wake_phrase="hey alabama") as srv:
            keep_every_byte(srv)
            sat = await connect(srv)
            await sat.hello(caps=[mic_cap(), speaker_cap()], settings=[setting])
            bid, resp, aid = await wake_turn(sat, pcm, "cancel-open", bytearray())
            assert understood(resp)[1]["intent"] == "time"
            await sat.close()
    run(body(), timeout=240)
    assert any("wake word 'Okay Nabu' heard on ambient capture" in r.getMessage() for r in caplog.records)


def test_issue40_the_log_says_wake_word_for_a_model_and_wake_phrase_for_the_spotter():
    from alabama.core.hearing import Wake
    from alabama.speech import wakeword
    assert Wake.kind(wakeword.choose(phrase="hey alabama", check=False)) == "wake phrase"
    assert Wake.kind({"engine": wakeword.MICRO, "model": "alexa.json", "label": "Alexa"}) == "wake word"
    assert Wake.kind({"engine": wakeword.OPEN, "model": "alexa.tflite", "label": "alexa"}) == "wake word"


def test_a_device_never_makes_the_core_load_a_file(caplog):
    from alabama.core.hearing import Wake
    from alabama.speech import wakeword
    wake = Wake(config=wakeword.choose(phrase="hey alabama"), processes=0)
    with caplog.at_level(logging.WARNING, logger="alabama.core"):
        for word in ("/tmp/x.tflite", "micro:/etc/x.json", "hey_alabama", "/tmp/x.tflite"):
            assert wake.for_device(word, "dev1") is wake.config
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and all("spotting 'hey alabama'" in m for m in lines), lines     # once per word
    assert wake.for_device("", "dev1") is wake.config
