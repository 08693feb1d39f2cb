"""The reference runs: responsible for feeding uint16 feature frames to pymicro-wakeword (its TFLite runtime) and to
the firmware's interpreter under CPython, frame for frame, and for the installed models' paths; not for compiling
(compile.py) or for audio features beyond calling pymicro-features."""
import io
import json
from pathlib import Path

import numpy as np

from .compile import FEATURE_SCALE, ModelError, compile_model

BUILTIN = ("okay_nabu", "hey_jarvis", "alexa", "hey_mycroft")


def builtin_dir():
    try:
        import pymicro_wakeword
    except ImportError:
        from ..extras import package_hint
        raise ModelError("pymicro-wakeword is not installed (%s installs it on Linux x86_64/aarch64/armv7l and "
                         "Windows, where its wheels exist): give the path of a .tflite with its .json"
                         % package_hint("pymicro-wakeword"))
    return Path(pymicro_wakeword.__file__).parent / "models"


def model_paths(model):
    """(tflite path, json path, name) for a shipped model's name or a user's .tflite (its JSON beside it)."""
    if model in BUILTIN:
        d = builtin_dir()
        return d / (model + ".tflite"), d / (model + ".json"), model
    p = Path(model)
    if p.suffix != ".tflite":
        raise ModelError("%s is neither a shipped model (%s) nor a .tflite file" % (model, ", ".join(BUILTIN)))
    j = p.with_suffix(".json")
    if not p.is_file():
        raise ModelError("%s does not exist" % p)
    if not j.is_file():
        raise ModelError("%s has no %s beside it (microWakeWord's JSON: probability_cutoff, sliding_window_size)"
                         % (p, j.name))
    return p, j, p.stem


def compile_named(model, rounding="tflite"):
    tfl, js, name = model_paths(model)
    try:
        config = json.loads(js.read_text())
    except ValueError as e:
        raise ModelError("%s is not valid JSON (%s)" % (js, e))
    if not isinstance(config, dict):
        raise ModelError("%s is not a microWakeWord model description (a JSON object with \"micro\": "
                         "probability_cutoff, sliding_window_size)" % js)
    try:
        return compile_model(tfl.read_bytes(), config, name, rounding)
    except ModelError as e:      # "NAME: ..." names the model; a file the user gave is named as given
        said = str(e)
        if model in BUILTIN or not said.startswith(name + ": "):
            raise
        rest = said[len(name) + 2:]
        if rest.startswith(("its JSON's ", "its JSON ")):
            raise ModelError("%s: %s" % (js, rest.split(" ", 2)[2])) from None
        raise ModelError("%s: %s" % (model, rest)) from None


def features_of(pcm):
    """uint16 feature frames (N x 40, numpy) of 16 kHz s16 mono bytes, from pymicro-features."""
    from pymicro_features import MicroFrontend
    fe = MicroFrontend()
    out = []
    for i in range(0, len(pcm) - 319, 320):
        r = fe.process_samples(pcm[i:i + 320])
        if r.features:
            out.append([int(round(v / FEATURE_SCALE)) for v in r.features])
    return np.array(out, dtype=np.uint16).reshape(-1, 40)


def run_reference(model, frames):
    """pymicro-wakeword on uint16 frames: (per-inference uint8 probabilities, per-inference detections)."""
    from pymicro_wakeword import MicroWakeWord
    tfl, js, _ = model_paths(model)
    mww = MicroWakeWord.from_config(js)
    probs, hits = [], []
    try:
        for f in frames:
            infers = len(mww._features) == mww.stride - 1        # this frame completes the model's input
            mean = mww.process_streaming_prob(np.asarray(f, dtype=np.float64).reshape(1, 1, 40) * FEATURE_SCALE)
            if infers:
                probs.append(int(round(mww._probabilities[-1] * 256)))
                hits.append(mean > mww.probability_cutoff)
    finally:
        mww.close()
    return probs, hits


def run_firmware(blob, frames, frozen=False):
    """The firmware's interpreter (satellite.wake.model, under CPython) on the same frames; frozen: the model loaded
    as a frozen image holds it (load_frozen: views of the file, nothing copied)."""
    import array
    import sys
    from alabama import mpcompat
    from alabama.board.fwset import FIRMWARE
    mpcompat.install()
    if str(FIRMWARE) not in sys.path:
        sys.path.insert(0, str(FIRMWARE))
    from satellite.wake import model as fw
    m = fw.load_frozen(blob) if frozen else fw.load(io.BytesIO(blob))
    probs, hits = [], []
    buf = array.array("H", bytes(80))
    for f in frames:
        for i in range(40):
            buf[i] = int(f[i])
        p = m.step(buf)
        if p >= 0:
            probs.append(p)
            hits.append(m.detected)
    return probs, hits
