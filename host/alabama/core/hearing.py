"""The core's ears: the speech brain (transcript -> intent -> action -> spoken answer) and the feeders that
hand a stream's audio to a recogniser or a wake-phrase spotter off the event loop.

Responsible for: ``SpeechBrain`` (``--brain speech``): a SpeechToText engine per turn (the embedded
pocketsphinx ``Recognizer`` or any engine with its ``start/feed/finish/close`` shape, e.g. ``WyomingSTT``),
pooled per tool set because building one costs ~0.5 s; the intent from ``speech.intents.parse`` over the
tools the board offers; what each intent does (the time, a timer, a light tool ``Invoke``d through the
turn, stop, free text) and the sentence said back through a TextToSpeech engine (espeak-ng by default).
``Feeder``: bytes pushed per frame on the loop (an append and an Event.set), fed in order and in batches to
a blocking function in a worker thread. ``Wake``: the wake-word engine's config (speech/wakeword.py) and one
detector per ambient stream, in worker processes (core/spotting.py: pocketsphinx holds the GIL) or, with
``processes=0``, in worker threads through a Feeder. Must not touch the session or the wire: the pipeline hands a ``Turn`` in (with ``invoke`` and
``later`` to act through) and sends what the ``Reply`` says.
"""
import asyncio
import json
import logging
import shutil
import time

from ..speech import SAMPLE_RATE, SpeechUnavailable, frontend, intents, load
from ..speech import engines
from ..speech.recognizer import LOW_CONFIDENCE, Transcript
from .turns import Reply

log = logging.getLogger("alabama.core.speech")

#: Idle recognisers kept per tool set (each holds two pocketsphinx decoders, a few MB).
MAX_IDLE = 4
NOT_CAUGHT = "I did not catch that."
_WORDS = {v: k for k, v in intents.NUMBERS.items()}


def spoken_minutes(n):
    return "%s minute%s" % (_WORDS.get(n, str(n)), "" if n == 1 else "s")


def light_argument(schema_json):
    """The boolean argument a light tool takes: the first boolean property of its input_schema, else "on"."""
    try:
        props = json.loads(schema_json or "{}").get("properties") or {}
    except (ValueError, AttributeError):
        props = {}
    for name, p in props.items() if isinstance(props, dict) else ():
        if isinstance(p, dict) and p.get("type") == "boolean":
            return name
    return "on"


class Feeder:
    """Bytes that arrive frame by frame on the event loop, handed in order to a blocking ``feed(bytes)`` in a
    worker thread: whatever arrived while the previous call ran goes in one batch (one thread hop per batch,
    not per frame). ``prepare`` (a coroutine function returning the feed function) runs first, e.g. building
    a recogniser; audio pushed meanwhile waits. ``on_result(r)`` runs on the loop for every non-None result.
    ``finish()`` waits until everything pushed was fed and returns ``final()`` run in a thread (or None);
    ``stop(after)`` abandons it and runs ``after()`` once no call of it is left in a thread."""

    def __init__(self, spawn, prepare, on_result=None, final=None):
        self.pending = bytearray()
        self.inflight = 0                      # bytes of the batch in a thread now
        self._wake = asyncio.Event()
        self._closing = False
        self._busy = None                      # the executor future of the call in a thread
        self._prepare, self._on_result, self._final = prepare, on_result, final
        self.task = spawn(self._run())

    def push(self, data):
        self.pending += data
        self._wake.set()

    def backlog(self):
        """Bytes pushed but not yet fed (waiting, or in the batch being fed now)."""
        return len(self.pending) + self.inflight

    async def _call(self, fn, *args):
        self._busy = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        return await asyncio.shield(self._busy)     # a cancel leaves the thread's call to finish: stop() waits

    async def _run(self):
        feed = await self._prepare()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.pending:
                data = bytes(self.pending)
                self.pending.clear()
                self.inflight = len(data)
                r = await self._call(feed, data)
                self.inflight = 0
                if r is not None and self._on_result is not None:
                    self._on_result(r)
            if self._closing:
                return await self._call(self._final) if self._final else None

    async def finish(self):
        self._closing = True
        self._wake.set()
        return await self.task

    def stop(self, after=None):
        """Abandon: nothing more is fed; ``after()`` runs once the call in a thread (if any) has returned."""
        self.pending.clear()
        if not self.task.done():
            self.task.cancel()
        if after is not None:
            busy = self._busy
            if busy is not None and not busy.done():
                busy.add_done_callback(lambda _f: after())
            else:
                after()


class Wake:
    """Server-side wake word on ambient streams: one engine config (``speech.wakeword.choose``: a microWakeWord
    or openWakeWord model, or the pocketsphinx keyphrase spotter for ``phrase``) and a fresh detector per
    ambient stream. ``processes``: the detectors live in that many worker processes (None: one per CPU, at
    most 4; core/spotting.py), or with 0 in worker threads of the core's process (they then share its GIL).
    ``config`` (a choose() dict) wins over ``phrase``/``threshold``/``ds``/``min_ms``."""

    def __init__(self, phrase=None, threshold=None, processes=None, ds=None, min_ms=None, config=None):
        from ..speech import wakeword
        if config is None:       # SpeechUnavailable / a phrase word missing from the dictionary: raised here
            config = wakeword.choose(phrase=phrase, threshold=threshold, min_ms=min_ms, ds=ds)
        self.config = config
        self.phrase = config["label"]
        self._devices = {}       # a device's wake word -> its engine config (for_device)
        self.pool = None
        if processes != 0:
            from .spotting import SpotterPool
            self.pool = SpotterPool(config, processes)

    def spotter(self, config=None):
        from ..speech import wakeword
        return wakeword.open_detector(config or self.config)

    def for_device(self, word, device_id=""):
        """The engine config for a device whose setting ``wake_word`` says ``word`` ("" or None: the core's).
        A device names a shipped model only (never a file on the core); one it cannot have (unknown, a file,
        its package absent) is logged once and the core's engine spots its stream."""
        if not word:
            return self.config
        cfg = self._devices.get(word)
        if cfg is None:
            from ..speech import wakeword
            try:
                if wakeword.parse_word(word)[1].endswith((".json", ".tflite")):
                    raise wakeword.WakeError("a device names a shipped model, not a file (%s)" % word)
                cfg = wakeword.choose(word, check=False)      # a shipped model: read, not loaded, on the loop
            except wakeword.WakeError as e:
                log.warning("%s: device wake word %r not used (%s); spotting %r", device_id, word, e,
                            self.config["label"])
                cfg = self.config
            self._devices[word] = cfg
        return cfg

    @staticmethod
    def kind(config):
        """What the log calls what ``config`` spots: "wake word" for a model, "wake phrase" for the keyphrase
        spotter."""
        from ..speech import wakeword
        return "wake phrase" if config.get("engine", wakeword.PHRASE) == wakeword.PHRASE else "wake word"

    def feeder(self, spawn, on_result, config=None):
        """One ambient stream's spotting: ``push(bytes)``, ``pending``, ``backlog()``, ``drop()``;
        ``on_result((hit, rest))`` on the loop at a hit (``rest``: the audio pushed after the hit's frame);
        ``config``: this stream's engine (``for_device``), else the core's."""
        if self.pool is not None:
            return self.pool.stream(on_result, config)
        box = {}

        from ..speech import spotter

        async def prepare():
            sp = box["sp"] = await asyncio.to_thread(self.spotter, config)
            return lambda data: spotter.frames_until_hit(sp, data)

        f = Feeder(spawn, prepare, on_result=on_result)
        f.drop = lambda: f.stop(lambda: box["sp"].close() if "sp" in box else None)
        return f

    async def close(self):
        """Stop the spotting processes (CoreServer.stop)."""
        if self.pool is not None:
            await self.pool.close()


class SpeechBrain:
    """``--brain speech``: hears the turn (a SpeechToText engine fed as the capture streams), reads its
    intent, acts, and answers in a TextToSpeech voice. ``stt``/``tts``: engine flag values ("embedded" or
    wyoming://HOST:PORT) or engine objects / factories. Raises SpeechUnavailable (one line) when the
    embedded recogniser cannot load, AlabamaError when espeak-ng is missing for the embedded voice."""

    name = "speech"

    def __init__(self, stt=engines.EMBEDDED, tts=engines.EMBEDDED, low_confidence=LOW_CONFIDENCE,
                 clock=time.localtime):
        if stt == engines.EMBEDDED:
            load()
            frontend.processor()          # webrtc-noise-gain: one line now, not at the first turn
        elif engines.is_whisper(stt):
            from ..speech import whisper
            whisper.load(stt)             # the model once per process, now: not installed / damaged said at start
        if tts == engines.EMBEDDED and not shutil.which("espeak-ng"):
            raise SpeechUnavailable("the speech brain speaks with espeak-ng: apt-get install espeak-ng "
                                    "(or --tts wyoming://HOST:PORT); falling back to the echo brain")
        self.stt = stt
        self.tts = engines.open_tts(tts) if isinstance(tts, str) else tts
        self.low_confidence = low_confidence
        self.clock = clock
        self._models = {}          # tool names -> SpeechModels (embedded)
        self._idle = {}            # tool names -> [idle SpeechToText]

    # -- recognisers --------------------------------------------------------------------------------
    def _build(self, tools):
        if self.stt == engines.EMBEDDED:
            from ..speech.recognizer import SpeechModels
            m = self._models.get(tools)
            if m is None:
                m = self._models[tools] = SpeechModels(tool_names=tools)
            return engines.open_stt(engines.EMBEDDED, m)
        if isinstance(self.stt, str):
            return engines.open_stt(self.stt, tools=tools)
        return self.stt()                        # a factory (tests, the lead's wiring)

    async def acquire(self, tools):
        """A started SpeechToText for a board offering ``tools`` (built in a worker thread when none is idle)."""
        tools = tuple(tools)
        idle = self._idle.get(tools)
        stt = idle.pop() if idle else await asyncio.to_thread(self._build, tools)
        stt.start()
        return stt

    def release(self, tools, stt, clean=True):
        """Back to the pool after finish() (``clean``); an abandoned turn's engine is closed and dropped."""
        if not clean:
            try:
                stt.close()
            except Exception:  # noqa: BLE001 — a broken engine is dropped either way
                pass
            return
        idle = self._idle.setdefault(tuple(tools), [])
        if len(idle) < MAX_IDLE:
            idle.append(stt)

    def warm(self, tools=()):
        """Build one recogniser now (tests and the demo: the first turn does not wait ~0.5 s for it)."""
        tools = tuple(tools)
        self._idle.setdefault(tools, []).append(self._build(tools))
        return self

    def hearing(self, spawn, tools):
        """A Feeder for one capture: pushes go to a recogniser; ``finish()`` returns its Transcript."""
        state = {}

        async def prepare():
            state["stt"] = await self.acquire(tools)
            return state["stt"].feed

        def final():
            try:
                t = state["stt"].finish()
            except BaseException:
                self.release(tools, state["stt"], clean=False)
                raise
            self.release(tools, state["stt"])
            return t

        f = Feeder(spawn, prepare, final=final)
        f.drop = lambda: f.stop(lambda: self.release(tools, state["stt"], clean=False) if "stt" in state else None)
        return f

    # -- the answer -----------------------------------------------------------------------------------
    async def reply(self, turn):
        from ..audio import resample
        tools = tuple(turn.tools)
        if turn.text:
            heard = Transcript(" ".join(turn.text.split()), 1.0, (), "text")
        elif turn.heard is not None:
            heard = turn.heard
        else:                                    # nothing fed it while the capture streamed: hear it all now
            pcm = resample(turn.audio, turn.rate, turn.channels, SAMPLE_RATE, 1)
            f = self.hearing(asyncio.ensure_future, tools)
            f.push(pcm)
            heard = await f.finish()
        intent = intents.understand(heard.text, heard.confidence, tools, self.low_confidence)
        say = NOT_CAUGHT if intent is None else await self.act(intent, turn)
        pcm = await asyncio.to_thread(self.tts.synthesize, say)
        return Reply(audio=pcm, rate=SAMPLE_RATE, channels=1, text=say, transcript=heard.text,
                     intent=intent, confidence=heard.confidence)

    async def act(self, intent, turn):
        """Carry the intent out (through the turn's ``invoke``/``later``) and return the sentence to say."""
        name, slots = intent
        if name == intents.TIME:
            return "It is %s." % time.strftime("%H:%M", self.clock())
        if name == intents.TIMER:
            n = slots["minutes"]
            if turn.later is not None:
                turn.later(60.0 * n, "Your %s timer is done." % spoken_minutes(n).replace("minutes", "minute"))
            return "Timer set for %s." % spoken_minutes(n)
        if name == intents.LIGHT:
            tool, on = slots["tool"], slots["on"]
            if turn.invoke is None:
                return "I cannot reach the light from here."
            arg = light_argument(turn.tool_schemas.get(tool, ""))
            try:
                await turn.invoke(tool, json.dumps({arg: on}))
            except Exception as e:  # noqa: BLE001 — the board's Error, a timeout, a disconnect: said, not raised
                log.warning("%s: light tool %s failed: %s", turn.device_id, tool, e)
                return "The light did not answer."
            return "Turning the light %s." % ("on" if on else "off")
        if name == intents.STOP:
            return "Okay."
        return "You said: %s." % slots.get("text", "")
