"""Wake-phrase spotter for ambient streams: pocketsphinx keyphrase search fed 20 ms at a time.

Responsible for one continuous 16 kHz s16le mono stream: ``feed(frame)`` returns a ``Hit`` (with
the frame offset in the stream) when the phrase was heard, else None; memory stays flat for streams
of hours. Must not decide what a hit does (the core's pipeline runs the turn) and must not buffer
the stream beyond ``OVERLAP_S``.

Search: pocketsphinx's keyphrase (KWS) search with the US-English model inside its wheel; the phrase
and its threshold (``kws_threshold``: lower = more hits; pocketsphinx compares the phrase's path
score against a phone loop's and fires when the ratio beats it) are configurable. Every phrase word
must be in the wheel's dictionary (cmudict has "hey" and "alabama"); a missing word needs a
pronunciation (``pronunciations={"word": "AE L ..."}``) or the constructor raises ValueError. A list of
pronunciations gives a word variants (``{"alabama": ["AE L AH B AE M AH", "AA L AH B AA M AH"]}``): each one
the dictionary lacks is added as ``alabama(2)``, ... and the search spots every combination of the phrase's
variants (one keyphrase list, each at the same threshold).

Bounded memory: the decoder's utterance is restarted after every hit and every ``restart_s`` of audio;
the last ``OVERLAP_S`` of audio (a fixed ring) is replayed into the new utterance so a phrase spoken
across a restart is still heard.
"""
import itertools
import os
import tempfile
from typing import NamedTuple

from . import BYTES_PER_SECOND, FRAME_BYTES, load

DEFAULT_PHRASE = "hey alabama"
DEFAULT_THRESHOLD = 1e-28     # at ds 2 with the 450 ms segment check (docs/speech.md, "Spotter cost": bench_spotter --quality)
DEFAULT_PLP = 1e-20           # phone-loop probability: the background model the phrase must beat
RESTART_S = 30.0
#: pocketsphinx 5 decoder options of the spotter (its `Config` parameters; bench_spotter.py --quality
#: measures a candidate set: docs/speech.md, "Spotter cost"). ``options=`` overrides any of them.
DEFAULT_OPTIONS = {"beam": 1e-80, "ds": 2}    # ds 2: acoustic scores every other 10 ms frame (~0.6x the CPU)
DEFAULT_VERIFY = 0            # the second stage's threshold (Verifier); 0: none
DEFAULT_MIN_MS = 450          # the shortest phrase segment taken as a hit (0: any): "hey alabama" lasts longer
OVERLAP_S = 1.5               # longer than the phrase at a slow pace


#: The most keyphrases the variants of one phrase may make (their product): each costs the search a little.
MAX_VARIANTS = 16


def _add_words(d, pronunciations):
    """Add ``pronunciations`` ({word: phones or [phones, ...]}) to decoder ``d``'s dictionary; -> {word: [the
    dictionary names of its variants]} for words given more than one pronunciation. A word the dictionary lacks
    takes its first pronunciation as the word itself; every other one, not already the word's, is ``word(k)``."""
    n = 1
    for phones in (pronunciations or {}).values():
        n *= 1 if isinstance(phones, str) else len(phones)
    if n > MAX_VARIANTS:
        raise ValueError("%d pronunciation variants of the wake phrase, at most %d" % (n, MAX_VARIANTS))
    variants = {}
    for word, phones in (pronunciations or {}).items():
        if isinstance(phones, str):
            d.add_word(word, phones, True)
            continue
        names = []
        for ph in (" ".join(x.split()) for x in phones):
            have = _entries(d, word)
            name = next((n for n in have if d.lookup_word(n) == ph), None)
            if name is None:
                name = "%s(%d)" % (word, len(have) + 1) if have else word
                d.add_word(name, ph, True)
            if name not in names:
                names.append(name)
        variants[word] = names
    return variants


def _entries(d, word):
    """The dictionary's names for ``word``: itself, then its alternates ``word(2)``, ``word(3)``, ..."""
    out = []
    while d.lookup_word(word if not out else "%s(%d)" % (word, len(out) + 1)) is not None:
        out.append(word if not out else "%s(%d)" % (word, len(out) + 1))
    return out


def _add_search(d, phrase, variants):
    """Activate the keyphrase search "wake" for ``phrase``, or for every combination of its words' variants."""
    combos = list(itertools.product(*[variants.get(w) or [w] for w in phrase.split()]))
    if len(combos) == 1:
        d.add_keyphrase("wake", " ".join(combos[0]))
    else:
        fd, path = tempfile.mkstemp(suffix=".kws")    # pocketsphinx reads a keyphrase list from a file only
        try:
            with os.fdopen(fd, "w") as f:
                f.write("".join(" ".join(c) + "\n" for c in combos))
            d.add_kws("wake", path)
        finally:
            os.unlink(path)
    d.activate_search("wake")


class Verifier:
    """The second stage: re-decides a first-stage hit on the audio the spotter's ring holds (the last
    ``OVERLAP_S``, the phrase and the keyphrase search's delay after it) with a fresh keyphrase decoder at full
    frame rate (``ds`` 1) and its own threshold: a cheap first stage (``ds`` 2, a looser threshold: more hits
    and more false ones) then costs a full decode only at its hits (a few a minute, ~1.5 s each).
    ``check(pcm) -> bool``. Nothing is kept between calls (each is one utterance from the model's initial
    cepstral mean), so one Verifier serves every spotter of a process."""

    def __init__(self, phrase=DEFAULT_PHRASE, threshold=1e-20, plp=None, pronunciations=None, options=None):
        ps = load()
        self.phrase = " ".join(phrase.lower().split())
        self.threshold = threshold
        opts = dict(DEFAULT_OPTIONS)
        opts.update({"ds": 1})
        opts.update(options or {})
        self._d = ps.Decoder(loglevel="FATAL", lm=None, kws_plp=plp if plp is not None else DEFAULT_PLP,
                             kws_threshold=threshold, **opts)
        _add_search(self._d, self.phrase, _add_words(self._d, pronunciations))
        self._cmn = self._d.config["cmninit"]
        self.checked = 0

    def check(self, pcm, cmn=None):
        """True when the phrase is found in ``pcm`` (s16le, even length) at this verifier's threshold;
        ``cmn``: the cepstral mean to start from (the first stage's, ``Decoder.get_cmn()``: 1.5 s is too short
        for the mean to settle from the model's initial one)."""
        self.checked += 1
        d = self._d
        d.set_cmn(cmn or self._cmn)
        d.start_utt()
        d.process_raw(pcm)
        found = d.hyp() is not None
        d.end_utt()
        return found


class Hit(NamedTuple):
    phrase: str
    frame: int          # index of the FRAME_BYTES frame (from the stream's start) whose feed fired
    end_ms: int         # stream time at the end of that frame


class Spotter:
    def __init__(self, phrase=DEFAULT_PHRASE, threshold=DEFAULT_THRESHOLD, plp=DEFAULT_PLP,
                 restart_s=RESTART_S, pronunciations=None, ds=None, options=None, verify=None, verifier=None,
                 min_ms=None):
        """``ds``: pocketsphinx's frame downsampling (2: acoustic scores every other 10 ms frame, ~0.55x the
        CPU); ``options``: other pocketsphinx config parameters over ``DEFAULT_OPTIONS`` (the threshold is
        measured for the defaults: docs/speech.md); ``verify``: the second stage's threshold (``Verifier``;
        0 = none, None = ``DEFAULT_VERIFY``), or pass a shared ``verifier``; ``min_ms``: the shortest phrase
        segment (the keyphrase search's own alignment, ``Decoder.seg()``) taken as a hit (None:
        ``DEFAULT_MIN_MS``)."""
        ps = load()
        self.phrase = " ".join(phrase.lower().split())
        opts = dict(DEFAULT_OPTIONS)
        opts.update(options or {})
        if ds is not None:
            opts["ds"] = ds
        self.options = opts
        self._d = ps.Decoder(loglevel="FATAL", lm=None, kws_plp=plp, kws_threshold=threshold, **opts)
        variants = _add_words(self._d, pronunciations)
        missing = [w for w in self.phrase.split() if self._d.lookup_word(w) is None]
        if missing:
            raise ValueError("wake phrase word(s) %s not in pocketsphinx's dictionary: pass "
                             "pronunciations={word: 'PH ON ES'}" % ", ".join(missing))
        _add_search(self._d, self.phrase, variants)
        if verifier is None:
            verify = DEFAULT_VERIFY if verify is None else verify
            verifier = Verifier(self.phrase, verify, plp, pronunciations) if verify else None
        self.verifier = verifier
        self.rejected = 0            # first-stage hits the second stage turned down
        self.min_frames = (DEFAULT_MIN_MS if min_ms is None else min_ms) // 10     # pocketsphinx frames: 10 ms
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
            ok = self._long_enough() and (self.verifier is None or
                                          self.verifier.check(bytes(self._ring[:self._ring_len]), self._d.get_cmn()))
            self._restart(replay=False)
            if ok:
                return Hit(self.phrase, frame_index, self.fed * 1000 // BYTES_PER_SECOND)
            self.rejected += 1
            return None
        if self._utt_bytes >= self.restart_bytes:
            self._restart(replay=True)
        return None

    def _long_enough(self):
        if not self.min_frames:
            return True
        for seg in self._d.seg():                # the keyphrase's segment in this utterance
            return seg.end_frame - seg.start_frame >= self.min_frames
        return True

    def close(self):
        self._d.end_utt()


def frames_until_hit(sp, data, batch=True):
    """Feed ``data`` to spotter ``sp`` 20 ms at a time; at a hit -> (hit, the bytes after the hit's frame), else
    None (the core's spotting workers and its in-thread spotting both use it). A detector with
    ``feed_until_hit`` (a microWakeWord model) takes the whole batch in one call, with the same answer."""
    whole = getattr(sp, "feed_until_hit", None) if batch else None
    if whole is not None:
        return whole(data)
    for i in range(0, len(data), FRAME_BYTES):
        hit = sp.feed(data[i:i + FRAME_BYTES])
        if hit is not None:
            return hit, data[i + FRAME_BYTES:]
    return None
