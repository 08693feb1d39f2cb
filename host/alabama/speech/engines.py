"""The speech engines the core picks by flag: one interface for speech-to-text, one for text-to-speech.

Responsible for the two small interfaces the core calls (``SpeechToText``, ``TextToSpeech``), for
choosing an implementation from a flag value (``"embedded"``, ``"whisper[:DIR]"`` or ``"wyoming://HOST:PORT"``), for the
embedded text-to-speech twin (espeak-ng in a subprocess), for bringing any engine's audio to the
board's format (16 kHz s16le mono) and for the one error every engine raises (``EngineError``).
Must not know about sessions, frames or turns: the core feeds bytes and reads plain results.

Threading: every call is synchronous. ``start()`` and ``feed()`` never block (safe on the core's
event loop); ``finish()`` and ``synthesize()`` block up to the engine's timeouts (the embedded
recogniser's free-form pass is CPU-bound too), so the core runs them with ``asyncio.to_thread``.
"""
import io
import subprocess
import wave
from typing import Protocol, runtime_checkable

from ..errors import AlabamaError
from .base import MAX_TEXT, EngineError, board_converter, check_text, to_board_pcm  # noqa: F401 (the engines' API)
from .recognizer import Transcript
from .whisper import WHISPER, is_flag as is_whisper  # noqa: F401 (the engines' API: the flag's name and its test)

EMBEDDED = "embedded"
FLAG_HELP = ("embedded (default: pocketsphinx), whisper (faster-whisper tiny.en, embedded; whisper:DIR a CTranslate2 "
             "model of your own) or wyoming://HOST:PORT of a Wyoming server")


@runtime_checkable
class SpeechToText(Protocol):
    """One utterance at a time, reusable: ``start()``, ``feed(bytes)`` as chunks arrive (16 kHz s16le mono,
    any length), ``finish() -> Transcript``. The embedded ``recognizer.Recognizer`` and ``WyomingSTT``.
    ``feed``/``finish`` raise EngineError when a remote engine failed; ``close()`` drops a turn in flight."""

    def start(self) -> None: ...

    def feed(self, data: bytes) -> None: ...

    def finish(self) -> Transcript: ...

    def close(self) -> None: ...


@runtime_checkable
class TextToSpeech(Protocol):
    """``synthesize(text) -> bytes``: 16 kHz s16le mono PCM (the board's format), or EngineError."""

    def synthesize(self, text: str) -> bytes: ...

    def close(self) -> None: ...


def check_flag(value):
    """Validate an ``--stt``/``--tts`` value at argument parsing: "embedded", "whisper[:DIR]" (speech-to-text only;
    DIR must hold a CTranslate2 Whisper model) or a wyoming://HOST:PORT URI (returned normalised); anything else
    raises UsageError with one line saying the form."""
    if value == EMBEDDED:
        return value
    if is_whisper(value):
        from . import whisper
        return whisper.parse_flag(value)
    from . import wyoming_io
    return str(wyoming_io.parse_uri(value))


def flag_type(value):
    """``argparse`` ``type=`` for ``--stt``/``--tts``: check_flag, with a bad value shown as a usage error."""
    import argparse
    try:
        return check_flag(value)
    except AlabamaError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def open_stt(flag, models=None, tools=(), **timeouts):
    """A SpeechToText for a flag value. ``models``: the embedded recogniser's ``SpeechModels`` (built from
    the board's tools; may raise SpeechUnavailable) — unused by a remote engine, which hears free text.
    ``tools``: the board's tool names (whisper is primed with the commands they allow). ``whisper``: its model is
    loaded once per process (SpeechUnavailable when not installed, EngineError when the directory is damaged)."""
    if flag == EMBEDDED:
        from .recognizer import Recognizer, SpeechModels
        return Recognizer(models if models is not None else SpeechModels())
    if is_whisper(flag):
        from .whisper import WhisperSTT
        return WhisperSTT(flag, tool_names=tools)
    from . import wyoming_io
    return wyoming_io.WyomingSTT(flag, **timeouts)


def open_tts(flag, **timeouts):
    """A TextToSpeech for a flag value (``embedded``: espeak-ng here; else a Wyoming TTS server)."""
    if flag == EMBEDDED:
        return EspeakTTS()
    from . import wyoming_io
    return wyoming_io.WyomingTTS(flag, **timeouts)


class EspeakTTS:
    """The embedded text-to-speech: espeak-ng in a subprocess (``apt-get install espeak-ng``)."""

    name = EMBEDDED

    def __init__(self, voice=None, speed=None, timeout=10.0, exe=None):
        from . import audio
        self.voice = voice or audio.VOICE
        self.speed = speed or audio.SPEED
        self.timeout = timeout
        self.exe = exe

    def native(self, text):
        """espeak-ng's own output: (pcm, rate, width, channels)."""
        text = check_text(text, "espeak-ng")
        from . import audio
        try:
            wav = audio.espeak_wav(text, self.voice, self.speed, timeout=self.timeout, exe=self.exe)
        except audio.ToolMissing as e:
            raise EngineError("embedded TTS: %s, or use --tts wyoming://HOST:PORT" % e) from None
        except subprocess.TimeoutExpired:
            raise EngineError("embedded TTS: espeak-ng took over %g s for %d characters; shorten the reply"
                              % (self.timeout, len(text))) from None
        except (OSError, subprocess.CalledProcessError) as e:
            raise EngineError("embedded TTS: espeak-ng failed (%s); check `espeak-ng -v %s hello`"
                              % (e, self.voice)) from None
        try:
            with wave.open(io.BytesIO(wav)) as w:     # espeak streams: its header's sizes are placeholders
                rate, width, channels = w.getframerate(), w.getsampwidth(), w.getnchannels()
                pcm = w.readframes(w.getnframes())
        except (wave.Error, EOFError) as e:
            raise EngineError("embedded TTS: espeak-ng wrote no WAV (%s); check `espeak-ng -v %s hello`"
                              % (e, self.voice)) from None
        return pcm, rate, width, channels

    def synthesize(self, text):
        pcm, rate, width, channels = self.native(text)
        return to_board_pcm(pcm, rate, width, channels)

    def close(self):
        pass
