"""Wyoming clients: ``--stt wyoming://HOST:PORT`` and ``--tts wyoming://HOST:PORT`` as speech engines.

Responsible for speaking the Wyoming protocol to a remote speech server (faster-whisper, piper, our own
``alabama.speech.wyoming_server``) with the ``wyoming`` package's client and event classes, behind the
``engines.SpeechToText`` / ``engines.TextToSpeech`` interfaces, and for turning every way a server can
fail into one ``EngineError`` within a bounded time. Must not know about sessions or the wire.

Flow (one TCP connection per turn, as Home Assistant does):
* STT: connect, Transcribe, AudioStart(16 kHz, 2, 1), AudioChunk per ``feed``, AudioStop on ``finish``,
  then the server's Transcript. A reader runs for the whole turn, so a server that closes, errors or
  answers garbage mid-stream is seen at the next ``feed`` or at ``finish``.
* TTS: connect, Synthesize, then AudioStart? AudioChunk* AudioStop; chunks are converted to 16 kHz s16le
  mono as they arrive (any rate/width/channels the server uses, e.g. piper's 22050 Hz).

Time bounds: connecting takes at most ``connect_timeout``; every write (drain) at most ``read_timeout``;
after AudioStop (STT) or Synthesize (TTS), the whole answer at most ``read_timeout``. No call waits
longer than connect_timeout + 2 x read_timeout. The clients run on one private asyncio loop in a daemon
thread ("wyoming-io"), so they work the same from the core's event loop thread (``start``/``feed`` only
schedule) and from worker threads (``finish``/``synthesize``/``describe`` block: use asyncio.to_thread).
"""
import asyncio
import concurrent.futures
import threading
from typing import NamedTuple
from urllib.parse import urlsplit

from wyoming.asr import Transcribe
from wyoming.asr import Transcript as WyTranscript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeVoice

from ..errors import UsageError
from . import CHANNELS, SAMPLE_RATE, SAMPLE_WIDTH
from .base import EngineError, board_converter, check_text, to_board_pcm
from .recognizer import Transcript

SCHEME = "wyoming"
FORM = "wyoming://HOST:PORT (e.g. wyoming://127.0.0.1:10300)"
CONNECT_TIMEOUT = 3.0         # a LAN server answers a SYN in milliseconds; 3 s covers a busy Wi-Fi hop
READ_TIMEOUT = 15.0           # faster-whisper on a small CPU: a few seconds for a 10 s command
MAX_TTS_SECONDS = 120         # audio a TTS answer may carry (16 kHz s16le: 3.84 MB); more is refused
REMOTE = "remote"             # Transcript.mode of a remote engine's answer
_STOP = None                  # the end-of-audio marker in a turn's queue


class WyomingUri(NamedTuple):
    host: str
    port: int

    def __str__(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d" % (SCHEME, host, self.port)


def parse_uri(text):
    """``wyoming://HOST:PORT`` -> WyomingUri; anything else raises UsageError saying the form."""
    try:
        u = urlsplit(str(text).strip())
        port = u.port
    except ValueError:
        u, port = None, None
    if (u is None or u.scheme != SCHEME or not u.hostname or port is None or port == 0
            or u.path not in ("", "/") or u.query or u.fragment or u.username or u.password):
        raise UsageError("bad speech engine %r: expected %s, embedded or (--stt only) whisper[:DIR]" % (text, FORM))
    return WyomingUri(u.hostname, port)


# ---------------------------------------------------------------------------------- the private loop
_loop = None
_loop_lock = threading.Lock()


def _io_loop():
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="wyoming-io", daemon=True).start()
            _loop = loop
        return _loop


def _submit(coro):
    return asyncio.run_coroutine_threadsafe(coro, _io_loop())


def _wait(future, seconds, what):
    """Block for a coroutine scheduled on the io loop; a backstop timeout (the coroutine bounds itself)."""
    if threading.current_thread().name == "wyoming-io":
        raise RuntimeError("a blocking Wyoming call on its own io loop would deadlock")
    try:
        return future.result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise EngineError("%s did not finish within %g s" % (what, seconds)) from None


# ---------------------------------------------------------------------------------- shared client
class _Client:
    kind = "Wyoming"
    hint = "check that it runs and listens on that port"

    def __init__(self, uri, connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT):
        self.uri = parse_uri(uri) if not isinstance(uri, WyomingUri) else uri
        self.name = str(self.uri)
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout

    @property
    def backstop(self):
        return self.connect_timeout + 2 * self.read_timeout + 1.0

    def error(self, what):
        return EngineError("%s server %s %s" % (self.kind, self.name, what), self.hint)

    async def _connect(self):
        client = AsyncTcpClient(self.uri.host, self.uri.port, connect_timeout=self.connect_timeout)
        try:
            await client.connect()
        except asyncio.TimeoutError:
            raise self.error("did not accept a connection within %g s" % self.connect_timeout) from None
        except OSError as e:
            raise self.error("refused the connection (%s)" % (e.strerror or e)) from None
        return client

    async def _write(self, client, event):
        try:
            await asyncio.wait_for(client.write_event(event), self.read_timeout)
        except asyncio.TimeoutError:
            raise self.error("stopped reading (a write waited %g s)" % self.read_timeout) from None
        except (OSError, RuntimeError) as e:          # reset, broken pipe, "transport closing"
            raise self.error("went away (%s)" % (e.__class__.__name__)) from None

    async def _read(self, client):
        """The next event; EngineError for a closed connection, garbage or a Wyoming Error event."""
        try:
            event = await client.read_event()
        except (OSError, asyncio.IncompleteReadError):
            event = None
        except asyncio.CancelledError:
            raise
        except Exception as e:                        # JSON that is not an event object (a list, a number)
            raise self.error("answered something that is not Wyoming (%s)" % e.__class__.__name__) from None
        if event is None:                             # EOF, or a line the package could not decode
            raise self.error("closed the connection or answered something that is not Wyoming")
        if Error.is_type(event.type):
            raise self.error("answered error %r" % str(event.data.get("text", event.data))[:200])
        return event

    @staticmethod
    async def _close(client):
        try:
            await asyncio.wait_for(client.disconnect(), 1.0)
        except (OSError, asyncio.TimeoutError, RuntimeError):
            pass

    def _parse(self, cls, event):
        try:
            return cls.from_event(event)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise self.error("sent a malformed %r event (%s)" % (event.type, e)) from None

    async def _describe(self):
        client = await self._connect()
        try:
            await self._write(client, Describe().event())

            async def answer():
                while True:
                    event = await self._read(client)
                    if Info.is_type(event.type):
                        return self._parse(Info, event)
            try:
                return await asyncio.wait_for(answer(), self.read_timeout)
            except asyncio.TimeoutError:
                raise self.error("did not answer Describe within %g s" % self.read_timeout) from None
        finally:
            await self._close(client)

    def describe(self):
        """The server's Info (blocking; EngineError if it is unreachable or answers nonsense)."""
        return _wait(_submit(self._describe()), self.backstop, "Describe to %s" % self.name)

    def close(self):
        pass


# ---------------------------------------------------------------------------------- STT
class WyomingSTT(_Client):
    """SpeechToText over a Wyoming ASR server. The Transcript has mode "remote", no word timings, and
    confidence 1.0 for a non-empty text (Wyoming carries no confidence; the intent parser then judges),
    0.0 for an empty one."""

    kind = "Wyoming STT"
    hint = "check that it runs and listens there, or use --stt embedded"

    def __init__(self, uri, connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT, language=None):
        super().__init__(uri, connect_timeout, read_timeout)
        self.language = language
        self._queue = None
        self._future = None

    def start(self):
        """Open a turn: connect and send Transcribe + AudioStart in the background (never blocks)."""
        self.close()
        loop = _io_loop()
        self._queue = asyncio.Queue()             # created here, used only on the io loop (3.10+: no loop binding)
        self._future = asyncio.run_coroutine_threadsafe(self._turn(self._queue), loop)

    def feed(self, data):
        """Queue audio for the server (never blocks); EngineError if the turn has already failed."""
        fut = self._need("feed")
        if fut.done():
            self._raise_if_failed(fut)
            return                                 # the server answered early: the rest is not needed
        if data:
            _io_loop().call_soon_threadsafe(self._queue.put_nowait, bytes(data))

    def finish(self):
        """Send AudioStop and wait for the Transcript (blocking, bounded: use asyncio.to_thread)."""
        fut = self._need("finish")
        self._future = None
        _io_loop().call_soon_threadsafe(self._queue.put_nowait, _STOP)
        text = _wait(fut, self.backstop, "the turn on %s" % self.name)
        return Transcript(text, 1.0 if text else 0.0, (), REMOTE if text else "none")

    def close(self):
        """Abandon a turn in flight (its connection is closed on the io loop)."""
        fut, self._future = self._future, None
        if fut is not None and not fut.done():
            fut.cancel()

    def _need(self, what):
        if self._future is None:
            raise RuntimeError("WyomingSTT.%s before start()" % what)
        return self._future

    @staticmethod
    def _raise_if_failed(fut):
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            raise exc

    async def _turn(self, queue):
        client = await self._connect()
        reader = None
        try:
            await self._write(client, Transcribe(language=self.language).event())
            await self._write(client, AudioStart(SAMPLE_RATE, SAMPLE_WIDTH, CHANNELS).event())
            reader = asyncio.create_task(self._transcript(client))
            while True:
                get = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait((get, reader), return_when=asyncio.FIRST_COMPLETED)
                if reader in done:                  # the server answered (or failed) before AudioStop
                    get.cancel()
                    return reader.result()
                data = get.result()
                if data is _STOP:
                    break
                await self._write(client, AudioChunk(SAMPLE_RATE, SAMPLE_WIDTH, CHANNELS, data).event())
            await self._write(client, AudioStop().event())
            try:
                return await asyncio.wait_for(reader, self.read_timeout)
            except asyncio.TimeoutError:
                raise self.error("sent no transcript within %g s of the end of the audio" % self.read_timeout) \
                    from None
        finally:
            if reader is not None:
                reader.cancel()
            await self._close(client)

    async def _transcript(self, client):
        while True:
            event = await self._read(client)
            if WyTranscript.is_type(event.type):
                t = self._parse(WyTranscript, event)
                if not isinstance(t.text, str):
                    raise self.error("sent a transcript that is not text")
                return t.text.strip()
            # transcript-start/-chunk/-stop (streaming servers) and anything else: the final Transcript follows


# ---------------------------------------------------------------------------------- TTS
class WyomingTTS(_Client):
    """TextToSpeech over a Wyoming TTS server (piper, ...): 16 kHz s16le mono, whatever the server's format."""

    kind = "Wyoming TTS"
    hint = "check that it runs and listens there, or use --tts embedded"

    def __init__(self, uri, connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT, voice=None):
        super().__init__(uri, connect_timeout, read_timeout)
        self.voice = voice

    def synthesize(self, text):
        text = check_text(text, "%s server %s" % (self.kind, self.name))
        return _wait(_submit(self._synthesize(text)), self.backstop, "Synthesize on %s" % self.name)

    async def _synthesize(self, text):
        client = await self._connect()
        try:
            voice = SynthesizeVoice(name=self.voice) if self.voice else None
            await self._write(client, Synthesize(text=text, voice=voice).event())
            try:
                return await asyncio.wait_for(self._audio(client), self.read_timeout)
            except asyncio.TimeoutError:
                raise self.error("did not finish speaking within %g s" % self.read_timeout) from None
        finally:
            await self._close(client)

    async def _audio(self, client):
        out = bytearray()
        conv = board_converter()
        limit = MAX_TTS_SECONDS * SAMPLE_RATE * SAMPLE_WIDTH
        while True:
            event = await self._read(client)
            if AudioStop.is_type(event.type):
                return bytes(out)
            if not AudioChunk.is_type(event.type):
                continue                           # AudioStart (formats ride on every chunk), others
            chunk = self._parse(AudioChunk, event)
            if chunk.width not in (1, 2, 3, 4) or chunk.channels not in (1, 2) or not 4000 <= chunk.rate <= 192000:
                raise self.error("sent audio in an unusable format (%s Hz, %s bytes, %s channels)"
                                 % (chunk.rate, chunk.width, chunk.channels))
            if len(chunk.audio) % (chunk.width * chunk.channels):
                raise self.error("sent an audio chunk that is not whole samples")
            out += to_board_pcm(chunk.audio, chunk.rate, chunk.width, chunk.channels, conv)
            if len(out) > limit:
                raise self.error("sent more than %d s of audio for one reply" % MAX_TTS_SECONDS)
