"""Our own Wyoming speech server: pocketsphinx (STT) and espeak-ng (TTS) behind the Wyoming protocol.

    python -m alabama.speech.wyoming_server --uri tcp://127.0.0.1:10300 [--stt] [--tts] [--tools a,b]

Responsible for serving the embedded engines to any Wyoming client (Home Assistant, our
``wyoming_io`` clients, the tests) with the ``wyoming`` package's server classes: Describe -> Info,
Transcribe/AudioStart/AudioChunk*/AudioStop -> Transcript, Synthesize -> AudioStart/AudioChunk*/AudioStop
(espeak-ng's own 22050 Hz, as piper sends its own rate). Must not know about the core: it is the
remote engine the core's ``--stt/--tts wyoming://`` flags are tested against.

Transcripts: only what the recogniser is sure of (confidence >= ``intents.LOW_CONFIDENCE``, the brain's own
rule, ``intents.understand``); an unsure one is sent as empty text, so a client that takes Wyoming text as said
(ours: confidence 1.0, Home Assistant) never echoes junk. Wyoming's Transcript has no confidence field.

Neither --stt nor --tts: both. Prints one line "wyoming server listening on URI (stt, tts)" when it
accepts connections; SIGTERM/SIGINT stop it. A request it cannot serve gets a Wyoming Error event.
"""
import argparse
import asyncio
import signal
import sys
from functools import partial

from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info, TtsProgram, TtsVoice
from wyoming.server import AsyncEventHandler, AsyncServer
from wyoming.tts import Synthesize

from ..errors import AlabamaError
from . import SpeechUnavailable, audio, intents
from .base import board_converter
from .engines import EspeakTTS

TTS_CHUNK_SAMPLES = 1024        # what piper sends per AudioChunk
_POCKETSPHINX = Attribution("CMU Sphinx", "https://github.com/cmusphinx/pocketsphinx")
_ESPEAK = Attribution("eSpeak NG", "https://github.com/espeak-ng/espeak-ng")


class Service:
    """What every connection shares: the models, a pool of recognisers (one per concurrent turn), the TTS."""

    def __init__(self, stt=True, tts=True, tools=(), voice=None):
        self.models = None
        self.pool = []
        if stt:
            from .recognizer import Recognizer, SpeechModels
            self.models = SpeechModels(tool_names=tools)
            self._recognizer = Recognizer
            self.pool.append(Recognizer(self.models))          # warm: the first turn does not wait ~0.6 s
        self.tts = EspeakTTS(voice=voice) if tts else None

    def take(self):
        return self.pool.pop() if self.pool else self._recognizer(self.models)

    def give(self, rec):
        self.pool.append(rec)

    def info(self):
        asr, tts = [], []
        if self.models is not None:
            asr.append(AsrProgram(
                name="alabama-pocketsphinx", attribution=_POCKETSPHINX, installed=True, version=None,
                description="pocketsphinx 5 with the intent grammar and a language-model fallback",
                models=[AsrModel(name="en-us", attribution=_POCKETSPHINX, installed=True, version=None,
                                 description="US English model inside the pocketsphinx wheel", languages=["en"])]))
        if self.tts is not None:
            tts.append(TtsProgram(
                name="alabama-espeak-ng", attribution=_ESPEAK, installed=True, version=None,
                description="espeak-ng in a subprocess",
                voices=[TtsVoice(name=self.tts.voice, attribution=_ESPEAK, installed=True, version=None,
                                 description="espeak-ng voice", languages=["en"])]))
        return Info(asr=asr, tts=tts)


def sure_text(transcript):
    """What the server sends for a recogniser Transcript: its text when the brain would act on it, else ""."""
    return transcript.text if intents.understand(transcript.text, transcript.confidence) is not None else ""


class Handler(AsyncEventHandler):
    """One client connection: any number of Describe / transcription / synthesis requests in turn."""

    def __init__(self, reader, writer, service):
        super().__init__(reader, writer)
        self.service = service
        self.rec = None
        self.converter = None

    async def handle_event(self, event):
        if Describe.is_type(event.type):
            await self.write_event(self.service.info().event())
        elif Transcribe.is_type(event.type):
            pass                                    # one model, one language: nothing to select
        elif AudioStart.is_type(event.type):
            return await self._audio_start()
        elif AudioChunk.is_type(event.type):
            return await self._audio_chunk(event)
        elif AudioStop.is_type(event.type):
            return await self._audio_stop()
        elif Synthesize.is_type(event.type):
            return await self._synthesize(Synthesize.from_event(event).text)
        return True                                 # other events: ignored, as the protocol asks

    async def _refuse(self, text, code):
        await self.write_event(Error(text=text, code=code).event())
        return False

    async def _audio_start(self):
        if self.service.models is None:
            return await self._refuse("this server has no speech-to-text (started without --stt)", "no-stt")
        if self.rec is None:
            self.rec = self.service.take()
        self.rec.start()
        self.converter = board_converter()
        return True

    async def _audio_chunk(self, event):
        if self.rec is None or self.converter is None:
            return await self._refuse("audio-chunk before audio-start", "protocol")
        chunk = AudioChunk.from_event(event)
        self.rec.feed(self.converter.convert(chunk).audio)
        return True

    async def _audio_stop(self):
        if self.rec is None or self.converter is None:
            return await self._refuse("audio-stop before audio-start", "protocol")
        self.converter = None
        t = await asyncio.to_thread(self.rec.finish)
        await self.write_event(Transcript(text=sure_text(t), language="en").event())
        return True

    async def _synthesize(self, text):
        if self.service.tts is None:
            return await self._refuse("this server has no text-to-speech (started without --tts)", "no-tts")
        try:
            pcm, rate, width, channels = await asyncio.to_thread(self.service.tts.native, text)
        except AlabamaError as e:
            return await self._refuse(str(e), "tts-failed")
        await self.write_event(AudioStart(rate, width, channels).event())
        step = TTS_CHUNK_SAMPLES * width * channels
        for i in range(0, len(pcm), step):
            await self.write_event(AudioChunk(rate, width, channels, pcm[i:i + step]).event())
        await self.write_event(AudioStop().event())
        return True

    async def disconnect(self):
        if self.rec is not None:
            self.rec.close()
            self.service.give(self.rec)             # start() resets it for the next turn
            self.rec = None


async def serve(uri, service, ready=print):
    server = AsyncServer.from_uri(uri)
    await server.start(partial(Handler, service=service))
    ready("wyoming server listening on %s (%s)" % (uri, ", ".join(
        n for n, on in (("stt", service.models is not None), ("tts", service.tts is not None)) if on)))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m alabama.speech.wyoming_server", description=__doc__.split("\n")[0])
    p.add_argument("--uri", required=True, help="tcp://HOST:PORT or unix://PATH to listen on")
    p.add_argument("--stt", action="store_true", help="serve speech-to-text (pocketsphinx)")
    p.add_argument("--tts", action="store_true", help="serve text-to-speech (espeak-ng)")
    p.add_argument("--tools", default="", help="comma-separated tool names the intent grammar knows (light.set...)")
    p.add_argument("--voice", default=audio.VOICE, help="espeak-ng voice (default %(default)s)")
    a = p.parse_args(argv)
    both = not (a.stt or a.tts)
    try:
        service = Service(stt=a.stt or both, tts=a.tts or both,
                          tools=[t for t in a.tools.split(",") if t], voice=a.voice)
        asyncio.run(serve(a.uri, service, ready=lambda line: print(line, flush=True)))
    except (SpeechUnavailable, AlabamaError, ValueError, OSError) as e:
        print("wyoming_server: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
