# dual: cpython micropython
# The wake model interpreter (satellite.wake.model): a synthetic model that exercises every op (tests/firmware/data,
# written by tools/gen_wake_vectors.py with its outputs from an independent numpy evaluation) through the pure
# kernels and the viper ones, the detection window, reset, 0 bytes allocated per step on the viper path, and the
# loader's refusals. The shipped models are checked against TFLite in tests/host/test_wake_compile.py.
import array
import io
import json

from mpsupport import IS_MICROPYTHON, mem_alloc_delta, raises

from satellite.wake import model as M
from satellite.wake import _model_pure as P

try:
    from satellite.wake import _model_viper as V
except (ImportError, SyntaxError, NameError):
    V = None

_HERE = __file__.rpartition("/")[0] or "."


def _bytes(name):
    with open(_HERE + "/data/" + name, "rb") as f:
        return f.read()


_BLOB = _bytes("wake_synth.bin")
with open(_HERE + "/data/wake_synth.json") as _f:
    _VEC = json.load(_f)


def _run(m, frames):
    buf = array.array("H", bytes(2 * M.FEATURES))
    probs, hits = [], []
    for f in frames:
        for i in range(M.FEATURES):
            buf[i] = f[i]
        p = m.step(buf)
        if p >= 0:
            probs.append(p)
            hits.append(m.detected)
    return probs, hits


def _with_kernels(k, fn):
    saved = (M._mac, M._dw, M._copy, M._lut, M._quant_in)
    M._mac, M._dw, M._copy, M._lut, M._quant_in = k.mac, k.dw, k.copy, k.lut, k.quant_in
    try:
        return fn()
    finally:
        M._mac, M._dw, M._copy, M._lut, M._quant_in = saved


def test_every_op_matches_the_reference_pure_and_viper():
    for k in [P] + ([V] if V is not None else []):
        m = M.load(io.BytesIO(_BLOB))
        probs, hits = _with_kernels(k, lambda: _run(m, _VEC["features"]))
        assert probs == _VEC["probs"], (k.__name__, probs)
        assert hits == _VEC["detected"], k.__name__


def test_viper_is_there_on_micropython():
    # the fast path must really be exercised on micropython (a silent fallback would hide a broken kernel)
    if IS_MICROPYTHON:
        assert V is not None and M.VIPER
    else:
        assert not M.VIPER


def test_one_inference_every_stride_frames_and_the_window():
    m = M.load(io.BytesIO(_BLOB))
    assert (m.stride, m.window, m.name) == (3, 3, "synthetic")
    probs, hits = _run(m, _VEC["features"][:9])
    assert len(probs) == 3
    # no detection until the window holds `window` probabilities, whatever they are
    assert hits[:2] == [False, False]


def test_reset_restores_the_initial_state():
    m = M.load(io.BytesIO(_BLOB))
    first = _run(m, _VEC["features"])
    m.reset()
    assert _run(m, _VEC["features"]) == first
    # without reset the streaming state carries over and the first inferences differ
    assert _run(m, _VEC["features"])[0][:2] != first[0][:2]


def test_step_allocates_nothing_in_steady_state():
    if not IS_MICROPYTHON:
        return
    m = M.load(io.BytesIO(_BLOB))
    buf = array.array("H", bytes(2 * M.FEATURES))
    for i in range(M.FEATURES):
        buf[i] = 100 + i
    for _ in range(6):
        m.step(buf)
    for _ in range(3):           # a gathering frame, a gathering frame, an inference
        assert mem_alloc_delta(m.step, buf) == 0


def test_loader_refuses_damaged_files():
    assert "not a wake model" in str(raises(M.ModelError, M.load, io.BytesIO(b"XXXX" + _BLOB[4:])))
    assert "truncated" in str(raises(M.ModelError, M.load, io.BytesIO(_BLOB[:-10])))
    assert "after its tables" in str(raises(M.ModelError, M.load, io.BytesIO(_BLOB + b"\0")))
    # a header length beyond the limit is refused before anything is read or allocated
    big = _BLOB[:4] + (M.MAX_HEADER + 1).to_bytes(4, "little") + _BLOB[8:]
    assert "larger than this board takes" in str(raises(M.ModelError, M.load, io.BytesIO(big)))


def _edit(fn):
    hl = int.from_bytes(_BLOB[4:8], "little")
    h = json.loads(_BLOB[12:12 + hl])
    fn(h)
    hb = json.dumps(h).encode()
    return io.BytesIO(_BLOB[:4] + len(hb).to_bytes(4, "little") + _BLOB[8:12] + hb + _BLOB[12 + hl:])


def test_loader_refuses_unknown_ops_and_offsets_outside_buffers():
    def unknown(h):
        h["ops"][0][0] = "SOFTMAX"
    assert "SOFTMAX" in str(raises(M.ModelError, M.load, _edit(unknown)))

    def outside(h):
        for op in h["ops"]:
            if op[0] == "CONV_2D":
                op[10] = h["n8"]            # weights past the end of the blob
    assert "weights" in str(raises(M.ModelError, M.load, _edit(outside)))

    def arena(h):
        h["arena"] = M.MAX_ARENA + 1
    assert "limits" in str(raises(M.ModelError, M.load, _edit(arena)))
