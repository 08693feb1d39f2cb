"""Wake-word engines behind one seam: ``choose()`` names and checks one at start, ``open_detector()`` builds it.

Responsible for: the three engines an ambient stream can be spotted with — microWakeWord models through
``pymicro-wakeword`` (its four shipped models by name, or a user's ``.json`` + ``.tflite``), openWakeWord models
through ``pyopen-wakeword`` (its shipped models by name, or a user's ``.tflite``), and the pocketsphinx keyphrase
``Spotter`` (speech/spotter.py) for a custom phrase such as "hey alabama" (weaker: docs/speech.md) — as one
detector shape, ``feed(bytes) -> Hit | None`` and ``close()``; a plain-dict config (``choose``) that crosses
to the spotting worker processes as JSON; and the start check: a missing or damaged model file is a one-line
``WakeError``, an engine package that is not installed a one-line ``WakeUnavailable`` saying how to install it.
Not for: what a hit does (core/pipeline.py, core/waking.py) or where detectors run (core/spotting.py).

A damaged ``.tflite`` crashes TensorFlow Lite's C library (a segfault, not an exception), so ``choose`` first
checks the FlatBuffer identifier and then loads the model once in a child process (``python -m
alabama.speech.wakeword CONFIG``) before the core ever loads it itself.
"""
import json
import os
import pathlib
import subprocess
import sys

from . import BYTES_PER_SECOND, FRAME_BYTES
from ..errors import AlabamaError, UsageError

MICRO = "micro"          # microWakeWord (pymicro-wakeword)
OPEN = "open"            # openWakeWord (pyopen-wakeword)
PHRASE = "phrase"        # pocketsphinx keyphrase spotter (speech/spotter.py)
ENGINES = (MICRO, OPEN, PHRASE)
#: The models each package ships (pymicro_wakeword.Model, pyopen_wakeword.Model).
MICRO_MODELS = ("okay_nabu", "hey_jarvis", "hey_mycroft", "alexa")
OPEN_MODELS = ("okay_nabu", "hey_jarvis", "hey_mycroft", "alexa", "hey_rhasspy")
PACKAGES = {MICRO: "pymicro-wakeword", OPEN: "pyopen-wakeword"}
#: The core's default wake word (``alabama core serve`` without ``--wake-word``/``--wake-phrase``): the one model
#: meeting issue 40's <= 0.5 false wakes per hour on the wake corpus (0 in 2 h; okay_nabu 1.0; docs/speech.md,
#: "Wake words measured").
DEFAULT_WORD = "alexa"
#: openWakeWord's usual decision threshold (its models ship without one; pyopen-wakeword's CLI default).
OPEN_THRESHOLD = 0.5
#: microWakeWord's frontend step: one feature per 10 ms of 16 kHz s16le audio.
STEP_BYTES = BYTES_PER_SECOND // 100
#: How long the child process may take to load a model at start.
CHECK_TIMEOUT_S = 30.0
WORD_HELP = ("a microWakeWord model: %s or FILE.json (pymicro-wakeword); open:NAME (%s) or FILE.tflite "
             "(openWakeWord, pyopen-wakeword)" % (", ".join(MICRO_MODELS), ", ".join(OPEN_MODELS)))


class WakeError(AlabamaError):
    """The wake word cannot be used (an unknown name, a missing or damaged model file): one line."""


class WakeNameError(WakeError, UsageError):
    """--wake-word names no model (a typo, an empty value, the wrong kind of file): the command line's mistake, exit
    status 2."""


class WakeUnavailable(WakeError):
    """The engine's package is not installed: one line saying how to install it."""


def parse_word(word):
    """``--wake-word`` -> (engine, model): a shipped name, ``micro:``/``open:`` + name or file, or a file
    (``.json``: microWakeWord, ``.tflite``: openWakeWord). Raises WakeError for anything else."""
    w = (word or "").strip()
    engine = None
    for e in (MICRO, OPEN):
        if w.lower().startswith(e + ":"):
            engine, w = e, w[len(e) + 1:].strip()
    if not w:
        raise WakeNameError("--wake-word is empty: give %s" % WORD_HELP)
    if w.lower().endswith(".json"):
        if engine == OPEN:
            raise WakeNameError("an openWakeWord model is a .tflite file, not %s" % w)
        return MICRO, w
    if w.lower().endswith(".tflite"):
        if engine == MICRO:
            raise WakeNameError("a microWakeWord model is given by its .json file (beside its .tflite), not %s" % w)
        return OPEN, w
    name = w.lower()
    engine = engine or MICRO
    if name not in (MICRO_MODELS if engine == MICRO else OPEN_MODELS):
        import difflib
        near = difflib.get_close_matches(name, MICRO_MODELS if engine == MICRO else OPEN_MODELS, n=1)
        raise WakeNameError("unknown wake word %r%s: %s" % (word, " (did you mean '%s'?)" % near[0] if near else "",
                                                            WORD_HELP))
    return engine, name


def _require(engine):
    try:
        if engine == MICRO:
            import pymicro_wakeword as mod
        else:
            import pyopen_wakeword as mod
    except ImportError as e:
        raise WakeUnavailable("the %s wake-word engine needs %s: pip install %s" % (
            engine, PACKAGES[engine], PACKAGES[engine])) from e
    return mod


def _flatbuffer(path):
    """Refuse a file that is not a TensorFlow Lite model (its identifier "TFL3" at bytes 4..8)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise WakeError("wake-word model %s cannot be read: %s" % (path, e.strerror or e))
    if len(head) < 8 or head[4:8] != b"TFL3":
        raise WakeError("wake-word model %s is not a TensorFlow Lite model (damaged?)" % path)


def _micro_files(model):
    """(json path, its config dict, tflite path) of a user's microWakeWord model, checked."""
    p = pathlib.Path(model).expanduser()
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
        tflite = p.parent / cfg["model"]
        cutoff = float(cfg["micro"]["probability_cutoff"])
        int(cfg["micro"]["sliding_window_size"])
    except OSError as e:
        raise WakeError("wake-word model %s cannot be read: %s" % (p, e.strerror or e))
    except (ValueError, KeyError, TypeError) as e:
        raise WakeError("wake-word model %s is not a microWakeWord model description (JSON with \"model\" and "
                        "\"micro\": {probability_cutoff, sliding_window_size}): %s" % (p, e))
    if not 0.0 < cutoff < 1.0:
        raise WakeError("wake-word model %s: probability_cutoff %s is not between 0 and 1" % (p, cutoff))
    return p, cfg, tflite


def spotter_default():
    """The keyphrase spotter's default phrase (speech/spotter.py)."""
    from .spotter import DEFAULT_PHRASE
    return DEFAULT_PHRASE


def choose(word=None, phrase=None, threshold=None, min_ms=None, ds=None, check=True):
    """The engine config for a core (or a device): ``word`` (``--wake-word``) picks a model engine, else
    ``phrase`` the keyphrase spotter (its ``threshold``/``min_ms``/``ds``). With ``check`` a model is loaded once
    in a child process. -> a JSON-able dict; raises WakeUnavailable / WakeError (one line each)."""
    if not word:
        from . import load, spotter
        load()                                   # SpeechUnavailable: the caller says it in one line
        p = " ".join((phrase or spotter.DEFAULT_PHRASE).lower().split())
        cfg = {"engine": PHRASE, "phrase": p, "label": p,
               "threshold": threshold if threshold is not None else spotter.DEFAULT_THRESHOLD,
               "ds": ds, "min_ms": min_ms}
        if not p:
            raise WakeError("the wake phrase is empty: give words pocketsphinx's dictionary knows, e.g. %r" %
                            spotter.DEFAULT_PHRASE)
        if check:
            try:
                spotter.Spotter(p, cfg["threshold"]).close()
            except ValueError as e:                      # a phrase word missing from the dictionary
                words = str(e).split("word(s) ", 1)[-1].split(" not in", 1)[0]
                raise WakeError("wake phrase %r: %s not in pocketsphinx's dictionary (cmudict): choose words it "
                                "has, or a wake-word model (--wake-word)" % (p, words)) from None
        return cfg
    engine, model = parse_word(word)
    mod = _require(engine)
    if engine == MICRO:
        if model in MICRO_MODELS:
            path = pathlib.Path(mod.__file__).parent / "models" / (model + ".json")
        else:
            path = pathlib.Path(model).expanduser().resolve()
        _, mcfg, tflite = _micro_files(path)
        _flatbuffer(tflite)
        cfg = {"engine": MICRO, "model": str(path), "label": mcfg.get("wake_word") or path.stem}
    else:
        if model in OPEN_MODELS and not model.endswith(".tflite"):
            path = pathlib.Path(mod.__file__).parent / "models" / (model + ".tflite")
        else:
            path = pathlib.Path(model).expanduser().resolve()
        _flatbuffer(path)
        cfg = {"engine": OPEN, "model": str(path), "label": path.stem.replace("_", " "),
               "threshold": threshold if threshold is not None else OPEN_THRESHOLD}
    if check:
        _check_in_child(cfg)
    return cfg


#: Models this process has loaded in a child already: (path, size, mtime_ns) -> True. ``alabama core serve``
#: checks the choice once before its workers start and each server would check it again (a second child, ~1 s).
_CHECKED = {}


def _checked_key(cfg):
    """What identifies the files a config loads: each path with its size and mtime (None: the child says why)."""
    try:
        paths = [cfg["model"]]
        if cfg.get("engine") == MICRO:
            paths.append(str(_micro_files(cfg["model"])[2]))     # the .tflite beside the .json
        return tuple((p, st.st_size, st.st_mtime_ns) for p in paths for st in [os.stat(p)])
    except (OSError, WakeError):
        return None


def _check_in_child(cfg):
    """Load the model once in a child process (TensorFlow Lite crashes on a damaged file); not again in this
    process while the file is the same (its size and mtime)."""
    key = _checked_key(cfg)
    if key is not None and key in _CHECKED:
        return
    _load_in_child(cfg)
    if key is not None:
        _CHECKED[key] = True


def _load_in_child(cfg):
    env = dict(os.environ)
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        p = subprocess.run([sys.executable, "-m", "alabama.speech.wakeword", json.dumps(cfg)], env=env,
                           capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise WakeError("wake-word model %s did not load within %d s" % (cfg["model"], CHECK_TIMEOUT_S))
    if p.returncode != 0:
        why = (p.stdout.strip().splitlines() or ["TensorFlow Lite could not read it (exit %s)" % p.returncode])[-1]
        raise WakeError("wake-word model %s is damaged: %s" % (cfg["model"], why))


# ------------------------------------------------------------------------------------------ detectors
class _ModelDetector:
    """What both model engines share: the stream position (a Hit's frame index and end_ms, counted as
    speech/spotter.py counts them) and a fresh start after each hit (no second hit on the same words).
    Subclasses set ``ww``, ``label``, say in ``_fires(bytes)`` whether the word was heard and start afresh in
    ``_restart()`` (the library's resets of its model and features, unless they say otherwise)."""

    fed = 0

    def feed(self, data):
        start = self.fed
        self.fed += len(data)
        if not self._fires(bytes(data)):
            return None
        self._restart()
        from .spotter import Hit
        return Hit(self.label, start // FRAME_BYTES, self.fed * 1000 // BYTES_PER_SECOND)

    def _restart(self):
        self.ww.reset()
        self.features.reset()


class MicroDetector(_ModelDetector):
    """A microWakeWord model (pymicro-wakeword): features every 10 ms, the model's own probability_cutoff over
    its sliding window (never lowered here). The library loads the model; speech/microword.py runs it (the same
    probabilities as the library's ``process_streaming_prob``, without its per-feature Python)."""

    def __init__(self, cfg):
        mod = _require(MICRO)
        from .microword import open_stream
        self.ww = mod.MicroWakeWord.from_config(cfg["model"])
        self.stream = open_stream(self.ww, mod.MicroWakeWordFeatures)
        self.label = cfg.get("label") or self.ww.wake_word

    def _fires(self, data):
        return self.stream.run(data) >= 0

    def _restart(self):
        self.stream.reset()                 # a fresh interpreter on the loaded model: no file read

    def feed_until_hit(self, data):
        """A whole batch (the spotting pool's 0.1 s) in one call, whole 20 ms frames: -> (Hit, the bytes after the
        hit's frame) or None; the same hit, frame and rest as feeding it 20 ms at a time
        (spotter.frames_until_hit), without the per-frame calls. The frontend yields one feature per 10 ms
        (STEP_BYTES) of audio, so the k-th feature of a frame-aligned batch ends at byte (k + 1) * STEP_BYTES."""
        if len(data) % FRAME_BYTES or self.fed % FRAME_BYTES:
            return _per_frame(self, data)
        start = self.fed
        k = self.stream.run(bytes(data))
        if k < 0:
            self.fed = start + len(data)
            return None
        end = min(len(data), -(-(k + 1) * STEP_BYTES // FRAME_BYTES) * FRAME_BYTES)
        self.fed = start + end
        self._restart()
        from .spotter import Hit
        return Hit(self.label, (self.fed - FRAME_BYTES) // FRAME_BYTES,
                   self.fed * 1000 // BYTES_PER_SECOND), data[end:]

    def close(self):
        self.stream.close()


def _per_frame(det, data):
    from .spotter import frames_until_hit
    return frames_until_hit(det, data, batch=False)


class OpenDetector(_ModelDetector):
    """An openWakeWord model (pyopen-wakeword): mel spectrogram -> shared embedding -> the word's model, a hit
    when its probability passes ``threshold``."""

    def __init__(self, cfg):
        mod = _require(OPEN)
        self.ww = mod.OpenWakeWord.from_model(cfg["model"])
        self.features = mod.OpenWakeWordFeatures.from_builtin()
        self.label = cfg.get("label") or self.ww.id
        self.threshold = cfg.get("threshold") or OPEN_THRESHOLD

    def _fires(self, data):
        return any(p > self.threshold for emb in self.features.process_streaming(data)
                   for p in self.ww.process_streaming(emb))

    def close(self):
        self.ww.close()
        self.features.close()


def open_detector(cfg):
    """A detector for a ``choose()`` config: ``feed(bytes) -> Hit | None``, ``close()``."""
    engine = cfg.get("engine", PHRASE)
    if engine == MICRO:
        return MicroDetector(cfg)
    if engine == OPEN:
        return OpenDetector(cfg)
    from . import spotter
    return spotter.Spotter(cfg["phrase"], cfg["threshold"], ds=cfg.get("ds"), min_ms=cfg.get("min_ms"))


def _child(argv):
    """``python -m alabama.speech.wakeword CONFIG``: load the model and feed it 1 s of silence (the start check)."""
    try:
        d = open_detector(json.loads(argv[0]))
        d.feed(bytes(BYTES_PER_SECOND))
        d.close()
    except Exception as e:  # noqa: BLE001 — said back to the parent in one line
        print("%s: %s" % (type(e).__name__, e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
