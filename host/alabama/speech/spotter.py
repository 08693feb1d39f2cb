"""Wake-phrase spotter for ambient streams: pocketsphinx keyphrase search fed 20 ms at a time.

Responsible for one continuous 16 kHz s16le mono stream: ``feed(frame)`` returns a ``Hit`` (with
the frame offset in the stream) when the phrase was heard, else None; memory stays flat for streams
of hours. Must not decide what a hit does (the core's pipeline runs the turn) and must not buffer
the stream beyond ``OVERLAP_S``.

Search: pocketsphinx's keyphrase (KWS) search with the US-English model inside its wheel; the phrase
and its threshold (``kws_threshold``: lower = more hits; pocketsphinx compares the phrase's path
score against a phone loop's and fires when the ratio beats it) are configurable. Every phrase word
must be in the wheel's dictionary (cmudict has "hey" and "alabama"); a missing word needs a
pronunciation (``pronunciations={"word": "AE L ..."}``) or the constructor raises ValueError.

Bounded memory: the decoder's utterance is restarted after every hit and every ``restart_s`` of audio;
the last ``OVERLAP_S`` of audio (a fixed ring) is replayed into the new utterance so a phrase spoken
across a restart is still heard.
"""
from typing import NamedTuple

from . import BYTES_PER_SECOND, FRAME_BYTES, load

DEFAULT_PHRASE = "hey alabama"
DEFAULT_THRESHOLD = 1e-20     # measured on espeak-ng speech (docs/speech.md): 1e-30..1e-40 double the false hits
DEFAULT_PLP = 1e-20           # phone-loop probability: the background model the phrase must beat
RESTART_S = 30.0
OVERLAP_S = 1.5               # longer than the phrase at a slow pace


class Hit(NamedTuple):
    phrase: str
    frame: int          # index of the FRAME_BYTES frame (from the stream's start) whose feed fired
    end_ms: int         # stream time at the end of that frame


class Spotter:
    def __init__(self, phrase=DEFAULT_PHRASE, threshold=DEFAULT_THRESHOLD, plp=DEFAULT_PLP,
                 restart_s=RESTART_S, pronunciations=None, ds=1):
        """``ds``: pocketsphinx's frame downsampling (2: acoustic scores every other 10 ms frame, ~0.55x the
        CPU; the threshold was measured at 1: docs/speech.md)."""
        ps = load()
        self.phrase = " ".join(phrase.lower().split())
        self._d = ps.Decoder(loglevel="FATAL", lm=None, beam=1e-80, kws_plp=plp, kws_threshold=threshold, ds=ds)
        for word, phones in (pronunciations or {}).items():
            self._d.add_word(word, phones, True)
        missing = [w for w in self.phrase.split() if self._d.lookup_word(w) is None]
        if missing:
            raise ValueError("wake phrase word(s) %s not in pocketsphinx's dictionary: pass "
                             "pronunciations={word: 'PH ON ES'}" % ", ".join(missing))
        self._d.add_keyphrase("wake", self.phrase)
        self._d.activate_search("wake")
        self.restart_bytes = int(restart_s * BYTES_PER_SECOND)
        self._ring = bytearray(int(OVERLAP_S * BYTES_PER_SECOND))
        self._ring_len = 0
        self._carry = b""
        self.fed = 0                 # bytes of stream consumed
        self._utt_bytes = 0
        self.restarts = 0
        self._d.start_utt()

    def _remember(self, pcm):
        n, size = len(pcm), len(self._ring)
        if n >= size:
            self._ring[:] = pcm[-size:]
            self._ring_len = size
            return
        keep = min(self._ring_len, size - n)
        self._ring[:keep] = self._ring[self._ring_len - keep:self._ring_len]
        self._ring[keep:keep + n] = pcm
        self._ring_len = keep + n

    def _restart(self, replay):
        self._d.end_utt()
        self._d.start_utt()
        self.restarts += 1
        self._utt_bytes = 0
        if replay and self._ring_len:
            self._d.process_raw(bytes(self._ring[:self._ring_len]))
            self._utt_bytes = self._ring_len
        else:
            self._ring_len = 0

    def feed(self, frame):
        """Feed the next stream bytes (normally one 640-byte frame); return a Hit or None."""
        data = self._carry + bytes(frame)
        even = len(data) & ~1
        self._carry = data[even:]
        pcm = data[:even]
        frame_index = self.fed // FRAME_BYTES
        self.fed += len(pcm)
        if not pcm:
            return None
        self._d.process_raw(pcm)
        self._remember(pcm)
        self._utt_bytes += len(pcm)
        if self._d.hyp() is not None:
            self._restart(replay=False)
            return Hit(self.phrase, frame_index, self.fed * 1000 // BYTES_PER_SECOND)
        if self._utt_bytes >= self.restart_bytes:
            self._restart(replay=True)
        return None

    def close(self):
        self._d.end_utt()
