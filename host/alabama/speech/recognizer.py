"""Streaming speech recogniser: pocketsphinx over 16 kHz s16le mono PCM, grammar first, free-form after.

Responsible for one utterance at a time: ``start()``, ``feed(bytes)`` as chunks arrive (any
length, odd byte counts included), ``finish() -> Transcript``. Uses only pocketsphinx's own
decoders and the US-English model shipped inside its wheel (no download). Must not endpoint,
reply or know about frames and sessions: the core's pipeline decides when an utterance ends.

Search. Two decoders are fed as audio arrives: the intent grammar (JSGF from ``intents.grammar``)
and a free phone loop (pocketsphinx's allphone search). At ``finish()`` a grammar hypothesis that
parses as a command and is confident wins; otherwise the buffered utterance is decoded with the
wheel's language model (free-form fallback). The buffer is bounded (``max_seconds``): audio past it
is not decoded and the Transcript says ``truncated``.

Confidence (0..1), one mapping per mode:
* grammar: r = (grammar path score - phone-loop score) / frames, both pocketsphinx path scores in
  its log domain (``logmath.log`` of ``Hypothesis.score``). A phrase the grammar really matches
  scores about as well as the unconstrained phone loop or better (r >~ 0); speech outside the grammar
  is forced into a worse path (r < 0). confidence = 1 / (1 + exp(-(r - GRAMMAR_R0) / GRAMMAR_SCALE)).
* free-form: the mean posterior probability of the recognised words (``Segment.prob`` from the
  lattice, fillers and silences excluded), 0 when no word was recognised.
* nothing: an utterance with under MIN_SPEECH_MS of voice (pocketsphinx's WebRTC VAD) is not
  decoded at all: Transcript("", 0.0, mode "none"). Silence and noise end here, never in a crash.
``LOW_CONFIDENCE`` is the line under which the brain says it did not catch that.

Determinism: cepstral mean normalisation is reset to the model's initial value at every ``start()``,
so one utterance's transcript does not depend on what was heard before (the differential check
compares two decodings of the same speech).
"""
import math
import threading
from typing import NamedTuple

from . import BYTES_PER_SECOND, intents, load

GRAMMAR_R0 = -1.5
GRAMMAR_SCALE = 2.0
LOW_CONFIDENCE = 0.5
MIN_SPEECH_MS = 150             # less voiced audio than this (pocketsphinx's VAD) is "nothing heard"
MAX_SECONDS = 20.0               # longest utterance kept for the free-form pass (640 kB)
_FILLERS = ("<s>", "</s>", "<sil>", "[NOISE]", "<unk>")


class Word(NamedTuple):
    word: str
    start_ms: int
    end_ms: int
    prob: float          # the word's posterior probability (lattice), 0..1


class Transcript(NamedTuple):
    text: str            # "" when nothing was recognised
    confidence: float    # 0..1, see the module docstring
    words: tuple         # Word, in order
    mode: str            # "grammar" | "free_form" | "none"
    truncated: bool = False


def _words(decoder):
    out = []
    for s in decoder.seg() or ():
        w = s.word.split("(")[0]                  # "on(2)": the dictionary's second pronunciation
        if w in _FILLERS or w.startswith("+"):
            continue
        out.append(Word(w, s.start_frame * 10, s.end_frame * 10, min(1.0, s.prob)))
    return tuple(out)


class SpeechModels:
    """The decoder configuration (model inside the pocketsphinx wheel) and the grammar; shared by
    recognisers. ``tool_names``: the tools the board declares (a light tool enables the light rule)."""

    def __init__(self, tool_names=(), free_form=True):
        self.ps = load()
        self.tool_names = tuple(tool_names)
        self.jsgf = intents.grammar(self.tool_names)
        self.free_form = free_form
        self._lm = None
        self._lm_lock = threading.Lock()

    def decoder(self, **kw):
        d = self.ps.Decoder(loglevel="FATAL", **kw)
        self.cmn_init = d.config["cmninit"]
        return d

    def grammar_decoder(self):
        d = self.decoder(lm=None)
        d.add_jsgf_string("intents", self.jsgf)
        d.activate_search("intents")
        return d

    def phone_decoder(self):
        return self.decoder(lm=None, allphone=self.ps.get_model_path("en-us/en-us-phone.lm.bin"))

    def free_form_decode(self, pcm):
        """Decode a whole utterance with the wheel's language model (one shared decoder, locked)."""
        with self._lm_lock:
            if self._lm is None:
                self._lm = self.decoder()
            d = self._lm
            d.set_cmn(self.cmn_init)
            d.start_utt()
            d.process_raw(bytes(pcm), full_utt=True)
            d.end_utt()
            h = d.hyp()
            words = _words(d) if h else ()
        text = " ".join(w.word for w in words)
        conf = sum(w.prob for w in words) / len(words) if words else 0.0
        return Transcript(text, conf, words, "free_form" if words else "none")


def _score(decoder):
    h = decoder.hyp()
    if h is None or h.score <= 0.0:
        return None, h
    return decoder.logmath.log(h.score), h


class Recognizer:
    """One utterance at a time over 16 kHz s16le mono bytes; reusable (``start()`` again)."""

    def __init__(self, models, max_seconds=MAX_SECONDS):
        self.models = models
        self.max_bytes = int(max_seconds * BYTES_PER_SECOND) & ~1
        self._g = models.grammar_decoder()
        self._p = models.phone_decoder()
        self._vad = None
        self._buf = bytearray()
        self._carry = b""
        self._vad_at = 0
        self.speech_ms = 0
        self._open = False
        self.truncated = False

    def start(self):
        self.close()                           # an utterance left open (a turn abandoned) is dropped
        for d in (self._g, self._p):
            d.set_cmn(self.models.cmn_init)
            d.start_utt()
        self._vad = self.models.ps.Vad(self.models.ps.Vad.LOOSE, frame_length=0.02)   # stateful: one per utterance
        self._buf = bytearray()
        self._carry = b""
        self._vad_at = 0
        self.speech_ms = 0
        self._open = True
        self.truncated = False

    def feed(self, data):
        """Add audio; chunks may have any length (an odd byte waits for its pair)."""
        if not self._open:
            raise RuntimeError("Recognizer.feed before start()")
        data = self._carry + bytes(data)
        even = len(data) & ~1
        self._carry = data[even:]
        room = self.max_bytes - len(self._buf)
        if even > room:
            self.truncated = True
            even = max(room, 0)
        if even:
            pcm = data[:even]
            self._buf += pcm
            self._g.process_raw(pcm)
            self._p.process_raw(pcm)
            step = self._vad.frame_bytes
            while self._vad_at + step <= len(self._buf):
                if self._vad.is_speech(bytes(self._buf[self._vad_at:self._vad_at + step])):
                    self.speech_ms += int(self._vad.frame_length * 1000)
                self._vad_at += step

    def finish(self):
        """End the utterance and return its Transcript (never raises on silence or noise)."""
        if not self._open:
            raise RuntimeError("Recognizer.finish before start()")
        self._open = False
        for d in (self._g, self._p):
            d.end_utt()
        sg, h = _score(self._g)
        sp, _ = _score(self._p)
        frames = max(1, self._g.n_frames())
        best = Transcript("", 0.0, (), "none", self.truncated)
        if self.speech_ms < MIN_SPEECH_MS:
            return best
        if h is not None and h.hypstr and sg is not None and sp is not None:
            r = (sg - sp) / frames
            conf = 1.0 / (1.0 + math.exp(-(r - GRAMMAR_R0) / GRAMMAR_SCALE))
            best = Transcript(h.hypstr, conf, _words(self._g), "grammar", self.truncated)
            command = intents.parse(h.hypstr, self.models.tool_names).name != intents.FREE
            if command and conf >= LOW_CONFIDENCE:
                return best
        if self.models.free_form and self._buf:
            free = self.models.free_form_decode(self._buf)._replace(truncated=self.truncated)
            if free.words:
                return free
        return best

    def close(self):
        """Drop the utterance in flight, if any (engines.SpeechToText); the next start() begins clean."""
        if self._open:
            self._open = False
            for d in (self._g, self._p):
                d.end_utt()

    def transcribe(self, pcm, chunk=None):
        """Convenience: one whole utterance (fed in ``chunk``-byte pieces when given)."""
        self.start()
        if chunk:
            for i in range(0, len(pcm), chunk):
                self.feed(pcm[i:i + chunk])
        else:
            self.feed(pcm)
        return self.finish()
