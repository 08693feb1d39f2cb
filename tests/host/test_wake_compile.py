"""The wake-model compiler (`alabama wake compile`, alabama.wake) and the firmware interpreter against TFLite: the four
models shipped with pymicro-wakeword compiled and run by satellite.wake.model (CPython, pure kernels) on the same
feature streams as pymicro-wakeword's TFLite runtime; the synthetic model's vectors do not drift; every bad model is
refused in one line."""
import json
import shutil
import subprocess
import sys
import wave

import numpy as np
import pytest

from alabama import cli
from alabama.wake import compile as C
from alabama.wake import reference as R

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]

# its wheels exist for Linux x86_64/aarch64/armv7l and Windows (pyproject.toml)
pytest.importorskip("pymicro_wakeword", reason="pymicro-wakeword has no wheel for this platform")


def _noise_stream(seed):
    rng = np.random.default_rng(seed)
    parts = []
    for seg in range(8):
        n, t = 8000, np.arange(8000)
        kind = seg % 4
        if kind == 0:
            x = rng.normal(0, 3000 * (seg + 1) / 4, n)
        elif kind == 1:
            x = 8000 * np.sin(2 * np.pi * (200 + 100 * seg) * t / 16000) * (1 + np.sin(2 * np.pi * 3 * t / 16000))
        elif kind == 2:
            x = rng.normal(0, 30, n)
        else:
            x = rng.normal(0, 1, n).cumsum() * 200
        parts.append(np.clip(x, -32768, 32767).astype("<i2"))
    return np.concatenate(parts).tobytes()


def _spoken(text, tmp_path):
    exe = shutil.which("espeak-ng")
    if not exe:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    wav = tmp_path / "w.wav"
    subprocess.run([exe, "-w", str(wav), "-s", "140", text], check=True, capture_output=True)
    with wave.open(str(wav)) as r:
        x = np.frombuffer(r.readframes(r.getnframes()), "<i2").astype(np.float64)
        sr = r.getframerate()
    n = int(len(x) * 16000 / sr)
    y = np.interp(np.arange(n) * sr / 16000, np.arange(len(x)), x).astype("<i2")
    pad = np.zeros(8000, "<i2")
    return np.concatenate([pad, y, pad, y, pad]).tobytes()


@pytest.mark.parametrize("frozen", [False, True], ids=["file", "frozen"])
@pytest.mark.parametrize("model", R.BUILTIN)
def test_shipped_models_equal_tflite_on_noise_and_tones(model, frozen):
    # frozen: loaded as a frozen image holds it (model.load_frozen, views of the file; issue 37)
    frames = R.features_of(_noise_stream(3))
    rp, rh = R.run_reference(model, frames)
    fp, fh = R.run_firmware(R.compile_named(model), frames, frozen)
    assert len(rp) == len(frames) // 3
    assert fp == rp
    assert fh == rh


@pytest.mark.parametrize("model", R.BUILTIN)
def test_shipped_models_equal_tflite_on_their_wake_word(model, tmp_path):
    frames = R.features_of(_spoken(model.replace("_", " "), tmp_path))
    rp, rh = R.run_reference(model, frames)
    fp, fh = R.run_firmware(R.compile_named(model), frames)
    assert fp == rp                                  # every uint8 probability, bit for bit
    assert fh == rh
    if model != "hey_jarvis":                        # espeak-ng's "hey jarvis" does not wake hey_jarvis, in TFLite too
        assert any(rh)


def test_reference_rounding_equals_tflites_reference_kernels(tmp_path):
    # `--rounding reference` is TFLite's reference kernels (TFLite-Micro's arithmetic): checked against LiteRT's
    # BUILTIN_REF resolver where ai-edge-litert is installed (a 59 MB wheel, not a dependency)
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    model = "okay_nabu"
    frames = R.features_of(_spoken("okay nabu", tmp_path))
    tfl, _, _ = R.model_paths(model)
    it = litert.Interpreter(model_path=str(tfl), experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    scale, zp = inp["quantization"]
    ref = []
    for i in range(0, len(frames) - 2, 3):
        q = np.round(frames[i:i + 3].astype(np.float64) * C.FEATURE_SCALE / scale + zp).astype(np.int8)
        it.set_tensor(inp["index"], q.reshape(1, 3, 40))
        it.invoke()
        ref.append(int(it.get_tensor(out["index"]).ravel()[0]))
    got, _ = R.run_firmware(R.compile_named(model, "reference"), frames)
    assert got == ref
    assert got != R.run_firmware(R.compile_named(model), frames)[0]      # the two roundings do differ here


def test_synthetic_vectors_do_not_drift():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_wake_vectors
    finally:
        sys.path.remove(str(ROOT / "tools"))
    model, vectors = gen_wake_vectors.build()
    data = ROOT / "tests" / "firmware" / "data"
    assert (data / "wake_synth.bin").read_bytes() == model, "run tools/gen_wake_vectors.py"
    assert (data / "wake_synth.json").read_text() == vectors, "run tools/gen_wake_vectors.py"


def test_cutoff_sum_is_pymicro_wakewords_mean_rule():
    import statistics
    for cutoff, window in ((0.85, 5), (0.97, 5), (0.5, 3), (0.66, 7)):
        s = C.cutoff_sum(cutoff, window)
        below = [(s - 1) // window] * window
        below[0] += (s - 1) - sum(below)
        at = [s // window] * window
        at[0] += s - sum(at)
        assert statistics.mean(v / 256 for v in below) <= cutoff < statistics.mean(v / 256 for v in at)


def _tfl(name="okay_nabu"):
    tfl, js, _ = R.model_paths(name)
    return tfl.read_bytes(), json.loads(js.read_text())


def test_damaged_model_is_refused_in_one_line():
    data, config = _tfl()
    for bad in (data[:3000], b"nothing like a model", data[:4] + b"XXXX" + data[8:]):
        with pytest.raises(C.ModelError) as e:
            C.compile_model(bad, config, "m")
        assert "\n" not in str(e.value) and ("damaged" in str(e.value))


def test_too_large_model_is_refused_naming_the_size():
    data, config = _tfl()
    big = data + b"\0" * (C.MAX_TFLITE_BYTES + 1 - len(data))
    with pytest.raises(C.ModelError, match="too large"):
        C.compile_model(big, config, "m")


def test_unimplemented_op_is_refused_naming_it():
    import tflite
    data, config = _tfl()
    m = tflite.Model.GetRootAsModel(data, 0)
    buf = bytearray(data)
    for i in range(m.OperatorCodesLength()):
        oc = m.OperatorCodes(i)
        if max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode()) == 14:          # LOGISTIC -> SOFTMAX (25)
            for field, size in ((4, 1), (10, 4)):                             # deprecated_builtin_code, builtin_code
                o = oc._tab.Offset(field)
                if o:
                    buf[oc._tab.Pos + o:oc._tab.Pos + o + size] = (25).to_bytes(size, "little")
    with pytest.raises(C.ModelError, match="uses the op SOFTMAX, which the board does not implement"):
        C.compile_model(bytes(buf), config, "m")


def test_cli_compiles_and_refuses(tmp_path, capsys):
    assert cli.main(["wake", "compile", "hey_jarvis", "-o", str(tmp_path)]) == 0
    out = tmp_path / "hey_jarvis.aww"
    assert out.read_bytes()[:4] == C.MAGIC
    assert cli.main(["wake", "compile", "no_such_model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "neither a shipped model" in err[0]
    (tmp_path / "x.tflite").write_bytes(b"junk")
    (tmp_path / "x.json").write_text(json.dumps({"micro": {}}))
    assert cli.main(["wake", "compile", str(tmp_path / "x.tflite"), "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged" in err[0]
