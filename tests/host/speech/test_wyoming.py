"""Wyoming engines on loopback: our client against our server process (pocketsphinx + espeak-ng), and
every way a server can fail -> one EngineError within the client's timeouts, never a hang."""
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("wyoming", reason="pip install wyoming")

import alabama  # noqa: E402
from alabama.board.sim import free_port  # noqa: E402
from alabama.errors import UsageError  # noqa: E402
from alabama.speech import audio, engines, recognizer, wyoming_io  # noqa: E402

from .conftest import TOOLS  # noqa: E402

HOST_DIR = str(Path(alabama.__file__).resolve().parents[1])
CONNECT_TIMEOUT, READ_TIMEOUT = 1.0, 1.5          # short, so the failure tests prove the bound quickly


def start_server(*flags):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HOST_DIR, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "alabama.speech.wyoming_server", "--uri",
                             "tcp://127.0.0.1:%d" % port, "--tools", ",".join(TOOLS), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            line = proc.stdout.readline().decode()
            if "listening" in line:
                return proc, "wyoming://127.0.0.1:%d" % port
            if not line:
                break
        if proc.poll() is not None:
            break
    stop(proc)
    pytest.fail("wyoming_server did not start: %s" % proc.stderr.read().decode()[-2000:])


def stop(proc):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
    proc.stdout.close()
    proc.stderr.close()


@pytest.fixture(scope="module")
def server():
    proc, uri = start_server()
    yield uri
    stop(proc)


def stt_client(uri):
    return wyoming_io.WyomingSTT(uri, connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT)


def tts_client(uri):
    return wyoming_io.WyomingTTS(uri, connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT)


def through(stt, pcm):
    stt.start()
    for f in audio.frames(pcm):
        stt.feed(f)
    return stt.finish()


# ---------------------------------------------------------------------------------- flags and interface
@pytest.mark.parametrize("good,norm", [("wyoming://127.0.0.1:10300", "wyoming://127.0.0.1:10300"),
                                       ("wyoming://Whisper.lan:10300/", "wyoming://whisper.lan:10300"),
                                       ("wyoming://[::1]:10200", "wyoming://[::1]:10200"),
                                       ("embedded", "embedded")])
def test_flag_accepts(good, norm):
    assert engines.check_flag(good) == norm


@pytest.mark.parametrize("bad", ["tcp://127.0.0.1:10300", "wyoming://127.0.0.1", "wyoming://:10300",
                                 "wyoming://h:0", "wyoming://h:99999", "wyoming://h:port", "wyoming://h:1/x",
                                 "wyoming://h:1?q", "wyoming://u@h:1", "127.0.0.1:10300", "", "Embedded"])
def test_flag_refuses_with_the_form(bad):
    with pytest.raises(UsageError) as e:
        engines.check_flag(bad)
    msg = str(e.value)
    assert "\n" not in msg and "wyoming://HOST:PORT" in msg and "embedded" in msg


def test_flag_type_for_argparse(capsys):
    import argparse
    p = argparse.ArgumentParser(prog="core")
    p.add_argument("--stt", default=engines.EMBEDDED, type=engines.flag_type, help=engines.FLAG_HELP)
    assert p.parse_args(["--stt", "wyoming://h:1"]).stt == "wyoming://h:1"
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--stt", "whisker"])
    assert e.value.code == 2 and "expected wyoming://HOST:PORT" in capsys.readouterr().err


def test_engines_share_one_interface(models):
    stt = [engines.open_stt("embedded", models), engines.open_stt("wyoming://127.0.0.1:1")]
    tts = [engines.open_tts("embedded"), engines.open_tts("wyoming://127.0.0.1:1")]
    assert all(isinstance(e, engines.SpeechToText) for e in stt)
    assert all(isinstance(e, engines.TextToSpeech) for e in tts)


# ---------------------------------------------------------------------------------- against our server
def test_describe(server):
    info = stt_client(server).describe()
    assert [p.name for p in info.asr] == ["alabama-pocketsphinx"] and info.asr[0].models[0].languages == ["en"]
    assert [p.name for p in info.tts] == ["alabama-espeak-ng"]


@pytest.mark.parametrize("text", ["turn the light on", "what time is it"])
def test_transcript_equals_the_embedded_recogniser(server, rec, utterance, text):
    pcm = utterance(text)
    stt = stt_client(server)
    remote = through(stt, pcm)
    local = rec.transcribe(pcm, chunk=640)
    assert remote.text == local.text == text
    assert remote.mode == wyoming_io.REMOTE and remote.confidence == 1.0
    assert through(stt, audio.silence(0.5)) == recognizer.Transcript("", 0.0, (), "none")   # reusable


def test_issue40_server_does_not_send_unsure_text(server, rec):
    """Reversed speech: the recogniser finds words but is not sure of them (the brain would not act on them); a
    Wyoming client reads text as said (confidence 1.0), so the server sends "" (main sent the words: junk echoed)."""
    pcm = np.frombuffer(audio.synth("set a timer for twenty minutes", "en-us+m2", 155), "<i2")[::-1].tobytes()
    local = rec.transcribe(pcm, chunk=640)
    assert local.text and local.confidence < recognizer.LOW_CONFIDENCE, local
    slow = wyoming_io.WyomingSTT(server, connect_timeout=CONNECT_TIMEOUT, read_timeout=30.0)   # the LM loads now
    assert through(slow, pcm).text == ""


def test_tts_is_board_pcm_and_equals_the_embedded_twin(server):
    remote = tts_client(server).synthesize("the time is ten past nine")
    x = np.frombuffer(remote, "<i2").astype(float)
    assert 1.0 < len(x) / 16000 < 4.0 and np.sqrt(np.mean(x ** 2)) > 500      # ~2 s of 16 kHz speech
    # the server sends espeak-ng's 22050 Hz in 1024-sample chunks, converted chunk by chunk: same bytes
    assert remote == engines.open_tts("embedded").synthesize("the time is ten past nine")


def test_tts_text_starting_with_a_dash_is_spoken():
    assert len(engines.EspeakTTS().synthesize("-x minus")) > 16000


# ---------------------------------------------------------------------------------- failures
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "frozen"])
def test_server_gone_mid_turn(utterance, sig):
    """After AudioStart and some chunks the server dies (EOF: at once) or freezes (no answer: the read
    timeout): finish() raises EngineError naming the server, within connect + read timeout."""
    proc, uri = start_server("--stt")
    try:
        stt = stt_client(uri)
        stt.start()
        frames = audio.frames(utterance("what time is it"))
        for f in frames[:20]:
            stt.feed(f)
        time.sleep(0.3)                                   # the server has the AudioStart and the chunks
        os.kill(proc.pid, sig)
        for f in frames[20:]:
            try:
                stt.feed(f)
            except engines.EngineError:                   # the reader saw the EOF already: also right
                break
        t0 = time.monotonic()
        with pytest.raises(engines.EngineError) as e:
            stt.finish()
        took = time.monotonic() - t0
        assert uri in str(e.value) and "--stt embedded" in str(e.value) and "\n" not in str(e.value)
        assert took < READ_TIMEOUT + 0.5, took
        if sig == signal.SIGKILL:
            assert took < 1.0, took                       # EOF: no timeout waited
    finally:
        if sig == signal.SIGSTOP:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        stop(proc)


def test_nothing_listening_fails_at_once():
    uri = "wyoming://127.0.0.1:%d" % free_port()
    stt, tts = stt_client(uri), tts_client(uri)
    t0 = time.monotonic()
    stt.start()
    with pytest.raises(engines.EngineError, match="refused"):
        stt.finish()
    with pytest.raises(engines.EngineError, match="refused.*--tts embedded"):
        tts.synthesize("hello")
    with pytest.raises(engines.EngineError, match=uri):
        stt.describe()
    assert time.monotonic() - t0 < CONNECT_TIMEOUT          # refused: no timeout waited


def test_a_clients_error_carries_its_hint_apart_from_what_failed():
    """Sweep 9: the core cut the client's hint off the error's text by its suffix; the error carries both parts."""
    import pickle
    uri = "wyoming://127.0.0.1:%d" % free_port()
    with pytest.raises(engines.EngineError) as e:
        stt_client(uri).describe()
    err = e.value
    assert err.what.startswith("Wyoming STT server %s refused the connection (" % uri) and err.what.endswith(")")
    assert err.hint == wyoming_io.WyomingSTT.hint
    assert str(err) == "%s: %s" % (err.what, err.hint)            # a turn's log line says both, as before
    back = pickle.loads(pickle.dumps(err))                         # a worker process's error keeps both parts
    assert (type(back), str(back), back.what, back.hint) == (type(err), str(err), err.what, err.hint)
    plain = engines.EngineError("embedded TTS: no espeak-ng")
    assert (str(plain), plain.what, plain.hint) == ("embedded TTS: no espeak-ng", "embedded TTS: no espeak-ng", "")


class FakeServer:
    """A TCP server on loopback that answers every connection with `reply` bytes (then waits or closes)."""

    def __init__(self, reply, close=True):
        self.reply, self.close = reply, close
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.uri = "wyoming://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            try:
                c.recv(4096)                    # the request's first bytes
                c.sendall(self.reply)
                if self.close:
                    c.shutdown(socket.SHUT_WR)
            except OSError:                     # stop() closed it under us (the client gave up first): done
                return

    def stop(self):
        self.sock.close()
        for c in self.conns:
            c.close()


GARBAGE = {
    "not-json": b"HTTP/1.1 400 Bad Request\r\n\r\n",
    "json-list": b"[1, 2, 3]\n",
    "no-type": b'{"data": {"text": "hi"}}\n',
    "transcript-without-text": b'{"type": "transcript"}\n',
    "short-payload": b'{"type": "audio-chunk", "data": {"rate": 16000, "width": 2, "channels": 1}, '
                     b'"payload_length": 100}\nabc',
    "error-event": b'{"type": "error", "data": {"text": "model exploded", "code": "boom"}}\n',
    "bad-format": b'{"type": "audio-chunk", "data": {"rate": 1, "width": 2, "channels": 1}, '
                  b'"payload_length": 2}\nab',
    "silent": b"",
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_or_silence_is_a_typed_error(kind):
    srv = FakeServer(GARBAGE[kind], close=kind != "silent")
    try:
        for client in (stt_client(srv.uri), tts_client(srv.uri)):
            t0 = time.monotonic()
            with pytest.raises(engines.EngineError) as e:
                if isinstance(client, wyoming_io.WyomingSTT):
                    through(client, audio.silence(0.2))
                else:
                    client.synthesize("hello")
            took = time.monotonic() - t0
            msg = str(e.value)
            assert srv.uri in msg and "\n" not in msg, msg
            if kind == "error-event":
                assert "model exploded" in msg
            if kind == "bad-format" and isinstance(client, wyoming_io.WyomingTTS):
                assert "format" in msg
            assert took < READ_TIMEOUT + 0.5 if kind == "silent" else took < 1.0, (kind, took)
    finally:
        srv.stop()


def test_tts_refuses_a_book():
    with pytest.raises(engines.EngineError, match="limit"):
        tts_client("wyoming://127.0.0.1:1").synthesize("x" * (engines.MAX_TEXT + 1))


def test_core_usage_from_an_event_loop(server, utterance):
    """How the core calls an engine: start/feed on its event loop (they only schedule), finish and
    synthesize in a worker thread; the loop keeps running meanwhile."""
    import asyncio

    async def turn():
        stt, tts = engines.open_stt(server, read_timeout=READ_TIMEOUT), engines.open_tts(server)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1
        t = asyncio.create_task(ticker())
        stt.start()
        for f in audio.frames(utterance("stop")):
            stt.feed(f)
        heard = await asyncio.to_thread(stt.finish)
        pcm = await asyncio.to_thread(tts.synthesize, "stopping")
        t.cancel()
        return heard, pcm, ticks
    heard, pcm, ticks = asyncio.run(turn())
    assert heard.text == "stop" and len(pcm) > 8000 and ticks >= 5
