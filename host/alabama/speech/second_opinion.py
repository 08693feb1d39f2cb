"""Pocketsphinx's grammar decode of a whole utterance, asked by the whisper engine when whisper is unsure.

Responsible for two questions over one utterance (16 kHz s16le mono), answered by the embedded recogniser's own
decode (``recognizer.Recognizer`` without its free-form fallback: WebRTC noise suppression when noisy, the input
floor, batch CMN from the utterance, the wide-beam JSGF search, its grammar confidence): which command of the
board's grammar was said, with pocketsphinx's confidence (``command``), and which of a few timer numbers
(``timer_scores``: the path score of each one's own grammar "set a timer for N minutes", and from the best path's
word times the syllables the number took, ``syllables.heard``). Not responsible for
deciding when to ask or what to do with the answer (speech/whisper.py: it only ever chooses among what whisper
itself finds plausible), nor for free-form text. The pocketsphinx acoustic model hears
differently from whisper's: on the tuning split it names "sixty" where whisper's near numbers are six and sixty,
and "what is the time" where whisper wrote "What in the time?" (docs/speech.md).
"""
import threading

from . import SpeechUnavailable, intents, syllables

#: whisper takes a command pocketsphinx names when pocketsphinx's own grammar confidence is at least LOW_CONFIDENCE
#: and whisper, forced to read it over the same audio, scores it within AGREE_MARGIN of its own reading and at least
#: AGREE_LOGPROB0 (mean token log-prob with the end of text; tuning split: margin 0.6..1.0 and cut -1.0..-1.2 alike,
#: 0 sentences and 0 junk taken; the out-of-grammar sentences pocketsphinx names a command for score -1.39 or less)
AGREE_MARGIN = 0.8
AGREE_LOGPROB0 = -1.0

_models = {}                     # tool names -> recognizer.SpeechModels, one per process (decoders are per engine)
_lock = threading.Lock()


def agrees(ps_confidence, forced_logprob, free_logprob):
    """True when a command pocketsphinx named (its confidence) is one whisper finds plausible too: its forced reading
    (``forced_logprob``) within AGREE_MARGIN of whisper's own reading (``free_logprob``) and over AGREE_LOGPROB0."""
    return (ps_confidence >= intents.LOW_CONFIDENCE and forced_logprob >= free_logprob - AGREE_MARGIN
            and forced_logprob >= AGREE_LOGPROB0)


class SecondOpinion:
    """Decoders built on first use: the recogniser's (a grammar decoder and a phone loop) for ``command``, a grammar
    decoder of its own for ``timer_scores`` (a search per number asked). One utterance at a time."""

    def __init__(self, tool_names=()):
        self.tool_names = tuple(tool_names)
        self._rec = None
        self._timer = None           # a grammar decoder of its own for the timer searches (one per set of numbers)
        self._searches = set()
        #: {number: SYLLABLE_WEIGHT x |syllables heard - its syllables|} of the last ``timer_scores`` ({}: not measured)
        self.syllable_penalties = {}

    def models(self):
        """The pocketsphinx models (recognizer.SpeechModels, no free-form) shared by every second opinion of a board."""
        from .recognizer import SpeechModels
        with _lock:
            models = _models.get(self.tool_names)
            if models is None:
                models = _models[self.tool_names] = SpeechModels(self.tool_names, free_form=False)
        return models

    def _recognizer(self):
        if self._rec is None:
            from .recognizer import Recognizer
            self._rec = Recognizer(self.models())
        return self._rec

    def command(self, pcm):
        """(the grammar sentence pocketsphinx decodes, its confidence 0..1) or (None, 0.0) when it finds none. A
        timer is given in the grammar's words ("set a timer for one minute"), whichever form was decoded."""
        t = self._recognizer().transcribe(bytes(pcm))
        got = intents.parse(t.text, self.tool_names) if t.mode == "grammar" else None
        if got is None or got.name == intents.FREE:
            return None, 0.0
        if got.name == intents.TIMER:
            return intents.timer_sentence(spoken(got.slots["minutes"])), t.confidence
        return intents.normalise(t.text), t.confidence

    def timer_scores(self, pcm, numbers):
        """{number: pocketsphinx's path score of "set a timer for N (minute | minutes)" over this audio, per frame
        (its log units), or None when no path of that one-number grammar reaches its end} for each of ``numbers``
        (spoken, e.g. ("four", "forty")). One search per number, not one search over all of them: the joint
        grammar's pruning loses numbers its own per-number paths score higher (seed 48: "six" decoded "three" while
        "six"'s own path scored 1.7 per frame more; docs/speech.md)."""
        from .recognizer import decode, path_score, floor
        from .frontend import clean
        if self._timer is None:
            self._timer = self.models().grammar_decoder()
        pcm = floor(clean(pcm))
        out, measured = {}, {}
        for n in numbers:
            name = "timer_" + n
            if name not in self._searches:
                rule = "%s %s (minute | minutes)" % (intents.TIMER_LEAD, n)
                self._timer.add_jsgf_string(name, "#JSGF V1.0;\ngrammar timer;\npublic <timer> = %s;\n" % rule)
                self._searches.add(name)
            self._timer.activate_search(name)
            words = decode(self._timer, pcm)
            score, _ = path_score(self._timer)
            said = any(w.word == n for w in words)
            out[n] = score / max(1, self._timer.n_frames()) if said and score is not None else None
            if out[n] is not None:
                measured[n] = syllables.heard([(s.word, s.start_frame, s.end_frame) for s in self._timer.seg() or ()],
                                              intents.TIMER_LEAD, self._syllables)
        best = max((n for n in out if out[n] is not None), key=out.get, default=None)
        self.syllable_penalties = syllables.penalties(None if best is None else measured[best],
                                                      {n: self._syllables(n) for n in numbers})
        return out

    def _syllables(self, word):
        return syllables.count(self._timer.lookup_word(word))


def spoken(minutes):
    """The grammar's word for a number of minutes (20 -> "twenty")."""
    return next(n for n, v in intents.NUMBERS.items() if v == minutes)


def make(tool_names=()):
    """A SecondOpinion, or None when pocketsphinx (or webrtc-noise-gain) is not installed: whisper then hears alone."""
    try:
        from . import frontend, load
        load()
        frontend.processor()
    except SpeechUnavailable:
        return None
    return SecondOpinion(tool_names)
