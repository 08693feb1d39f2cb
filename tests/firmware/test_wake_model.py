# dual: cpython micropython
# The wake model interpreter (satellite.wake.model): a synthetic model that exercises every op (tests/firmware/data,
# written by tools/gen_wake_vectors.py with its outputs from an independent numpy evaluation) through the pure
# kernels, the viper ones and the C module _wake_c (firmware/native/wake.c: only the 32-bit builds have it, as the
# board image does; CPython and the 64-bit PyPI port have no C leg, test_impl_is_c_then_viper_then_pure says so),
# random layers through every kernel against the pure one (both rounding modes), the detection window, reset, 0 bytes allocated per step on the viper path, and the
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
try:
    import _wake_c as C
except ImportError:
    C = None

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


def _with_kernels(k, fn, whole=True):
    """fn() with model.py on the kernels of k; whole: its run() (the whole program in one call) if it has one."""
    saved = (M._mac, M._dw, M._copy, M._lut, M._quant_in, M._run)
    M._mac, M._dw, M._copy, M._lut, M._quant_in = k.mac, k.dw, k.copy, k.lut, k.quant_in
    M._run = getattr(k, "run", None) if whole else None
    try:
        return fn()
    finally:
        M._mac, M._dw, M._copy, M._lut, M._quant_in, M._run = saved


def test_every_op_matches_the_reference_pure_viper_and_c():
    for k, whole in [(P, True)] + [(x, w) for x in (V, C) if x is not None for w in (True, False)]:
        m = M.load(io.BytesIO(_BLOB))
        probs, hits = _with_kernels(k, lambda: _run(m, _VEC["features"]), whole)
        assert probs == _VEC["probs"], (k.__name__, whole, probs)
        assert hits == _VEC["detected"], k.__name__


def test_frozen_model_every_op_matches_the_reference_read_in_place():
    # issue 37: a model frozen into the image is a bytes constant; load_frozen reads its weights and tables through
    # memoryviews of it (no copy) and must give the same bytes as the RAM load on every kernel set. A bytes object
    # stands in for the frozen constant here (tests/host/test_wake_frozen.py runs a really frozen one).
    for k, whole in [(P, True)] + [(x, w) for x in (V, C) if x is not None for w in (True, False)]:
        m = M.load_frozen(_BLOB, typed=k is P)
        probs, hits = _with_kernels(k, lambda: _run(m, _VEC["features"]), whole)
        assert probs == _VEC["probs"], (k.__name__, whole, probs)
        assert hits == _VEC["detected"], k.__name__
        if k is not P:
            # the fast kernels read the file in place: the weights view is the file's bytes, nothing copied
            # (the int32 tables too, where the compiler's padding left them 4-byte aligned in memory)
            assert m.copied in (0, 4 * json.loads(_BLOB[12:12 + int.from_bytes(_BLOB[4:8], "little")])["n32"])
            assert type(m._w8) is memoryview
        elif not IS_MICROPYTHON:
            assert m.copied == 0 and type(m._w8) is memoryview        # CPython: signed views (memoryview.cast)


def _aligned_blob():
    # the synthetic file with its header padded as compile.py pads it: int32 tables at a multiple of 4 in the file
    hl = int.from_bytes(_BLOB[4:8], "little")
    hb = _BLOB[12:12 + hl] + b" " * (-(12 + hl) % 4)
    return _BLOB[:4] + len(hb).to_bytes(4, "little") + _BLOB[8:12] + hb + _BLOB[12 + hl:]


class _FrozenModule:
    """Stands in for the generated alabama_wake module (host/alabama/wake/frozen.py module_text)."""
    NAMES = ("synthetic",)


def test_frozen_model_at_any_address_copies_only_tables_it_cannot_read_in_place():
    # a frozen constant's data lands wherever the build puts it (mpy-tool emits a string literal: word-aligned only
    # if the C compiler chooses to); the int32 tables are read in place when they are word-aligned in memory and
    # copied (4 * n32 bytes, nothing else) when not, with the same results either way
    import sys
    from satellite import wake
    blob = _aligned_blob()
    n32 = json.loads(blob[12:12 + int.from_bytes(blob[4:8], "little")])["n32"]
    saved = sys.modules.get(wake.FROZEN)
    try:
        for j in range(4):
            _FrozenModule.MODEL_0 = memoryview(bytearray(j) + blob)[j:]
            sys.modules[wake.FROZEN] = _FrozenModule
            assert wake.frozen() == ("synthetic",) and wake.frozen("other") is None
            v = wake.frozen("synthetic")
            m = M.load_frozen(v)
            assert _run(m, _VEC["features"]) == (_VEC["probs"], _VEC["detected"]), j
            if IS_MICROPYTHON and M.IMPL != "pure":
                from uctypes import addressof
                assert m.copied == (0 if addressof(v) % 4 == 0 else 4 * n32), (j, m.copied)
    finally:
        if saved is None:
            sys.modules.pop(wake.FROZEN, None)
        else:
            sys.modules[wake.FROZEN] = saved


def test_frozen_model_allocates_only_what_is_writable():
    # the RAM a frozen model takes is its arena, window and op program: far less than the file it runs
    if not IS_MICROPYTHON:
        return
    import gc
    gc.collect()
    a = gc.mem_alloc()
    m = M.load_frozen(_BLOB)
    gc.collect()
    frozen = gc.mem_alloc() - a
    m = None
    gc.collect()
    a = gc.mem_alloc()
    m = M.load(io.BytesIO(_BLOB))
    gc.collect()
    ram = gc.mem_alloc() - a
    h = json.loads(_BLOB[12:12 + int.from_bytes(_BLOB[4:8], "little")])
    assert m.copied == h["n8"] + 4 * h["n32"]
    # the RAM load holds the weights and tables on top of what both hold (less a few objects only the frozen
    # load has: its memoryviews)
    assert ram - frozen >= m.copied * 9 // 10, (ram, frozen, m.copied)


def test_frozen_step_allocates_nothing_in_steady_state():
    if not IS_MICROPYTHON:
        return
    m = M.load_frozen(_BLOB)
    buf = array.array("H", bytes(2 * M.FEATURES))
    for i in range(M.FEATURES):
        buf[i] = 100 + i
    for _ in range(6):
        m.step(buf)
    for _ in range(3):
        assert mem_alloc_delta(m.step, buf) == 0


def test_frozen_loader_refuses_damaged_buffers():
    assert "not a wake model" in str(raises(M.ModelError, M.load_frozen, b"XXXX" + _BLOB[4:]))
    assert "truncated" in str(raises(M.ModelError, M.load_frozen, _BLOB[:-10]))
    assert "after its tables" in str(raises(M.ModelError, M.load_frozen, _BLOB + b"\0"))
    big = _BLOB[:4] + (M.MAX_HEADER + 1).to_bytes(4, "little") + _BLOB[8:]
    assert "larger than this board takes" in str(raises(M.ModelError, M.load_frozen, big))
    # another format version (the compiler bumps the magic when the layout changes) is refused, not misread
    assert "another format" in str(raises(M.ModelError, M.load_frozen, b"AWW1" + _BLOB[4:]))
    assert "SOFTMAX" in str(raises(M.ModelError, M.load_frozen, _edit(_unknown_op).read()))


def _unknown_op(h):
    h["ops"][0][0] = "SOFTMAX"


def test_impl_is_c_then_viper_then_pure():
    # the fast path must really be exercised (a silent fallback would hide a broken kernel): C where the
    # interpreter has it built in (the 32-bit builds, like the board image), viper on the 64-bit PyPI port
    if IS_MICROPYTHON:
        import sys
        assert V is not None
        if sys.maxsize < (1 << 32):
            assert C is not None and M.IMPL == "c" and M._mac is C.mac and not M.VIPER
        else:
            assert C is None and M.IMPL == "viper" and M.VIPER
    else:
        assert C is None and M.IMPL == "pure" and not M.VIPER


class _Rand:
    # a small LCG: the same layers on CPython and both MicroPython builds (their `random` modules differ)
    def __init__(self, seed):
        self.s = seed

    def int(self, lo, hi):
        self.s = (self.s * 1103515245 + 12345) & 0x7FFFFFFF
        return lo + (self.s >> 4) % (hi - lo + 1)


def _arrange_mac(rows):
    """The compiler's AWW2 order (host/alabama/wake/compile.py, arrange_mac), written again here: weights[out][n] ->
    groups of 4 output channels, [group][n][4], each weight plus 128 (array('b') of those bytes)."""
    n = len(rows[0])
    g = (len(rows) + 3) // 4
    out = array.array("b", bytes(4 * g * n))
    for oc in range(4 * g):
        for i in range(n):
            v = (rows[oc][i] if oc < len(rows) else 0) + 128
            out[(oc // 4) * 4 * n + 4 * i + oc % 4] = v - 256 if v > 127 else v
    return out


def _arrange_dw(rows):
    """arrange_dw: weights[kh][channels] -> groups of 4 channels, [group][kh][4], int8."""
    kh, cols = len(rows), len(rows[0])
    g = (cols + 3) // 4
    out = array.array("b", bytes(4 * g * kh))
    for c in range(cols):
        for k in range(kh):
            out[(c // 4) * 4 * kh + 4 * k + c % 4] = rows[k][c]
    return out


def _layer(r, dw):
    """(arena, w8, i32, params) of a random conv (dw=0) or depthwise (dw=1) layer; multipliers in TFLite's
    [2**30, 2**31), shifts both ways, some channels rounding halves up (params[16])."""
    in_cols = r.int(1, 10)
    out_rows, kh, stride, dil = r.int(1, 3), r.int(1, 4), r.int(1, 2), r.int(1, 2)
    out_cols = in_cols if dw else r.int(1, 6)
    rows_in = (out_rows - 1) * stride + (kh - 1) * dil + 1
    inp = r.int(0, 3)
    out = inp + rows_in * in_cols + r.int(0, 3)
    arena = array.array("b", [r.int(-128, 127) for _ in range(out + out_rows * out_cols + 2)])
    if dw:
        w = _arrange_dw([[r.int(-128, 127) for _ in range(in_cols)] for _ in range(kh)])
    else:
        w = _arrange_mac([[r.int(-128, 127) for _ in range(kh * in_cols)] for _ in range(out_cols)])
    big = r.int(0, 5) == 0      # accumulators near the int32 edge: the 64-bit product matters
    bias = [r.int(-(1 << 30), (1 << 30) - 1) if big else r.int(-20000, 20000) for _ in range(out_cols)]
    mult = [r.int(1 << 30, (1 << 30) - 1 + (1 << 30)) for _ in range(out_cols)]
    # a left shift only with small accumulators: x << shift past 32 bits is outside TFLite's arithmetic (the
    # viper twin on the 64-bit port does not wrap it there; the board's 32-bit ints and C do)
    shift = [r.int(-14, 0 if big else 2) for _ in range(out_cols)]
    b = array.array("i", bias + mult + shift)
    p = array.array("i", (inp, rows_in, in_cols, out, out_rows, out_cols, kh, stride, dil, 0, 0, out_cols,
                          2 * out_cols, r.int(-128, 127), r.int(-128, -100), r.int(100, 127), r.int(0, out_cols)))
    return arena, w, b, p


def test_every_kernel_equals_pure_on_random_layers_both_rounding_modes():
    r = _Rand(37)
    fast = [x for x in (V, C) if x is not None]
    for n in range(120):
        dw = n & 1
        arena, w, b, p = _layer(r, dw)
        want = array.array("b", arena)
        (P.dw if dw else P.mac)(want, w, b, p)
        for k in fast:
            got = array.array("b", arena)
            (k.dw if dw else k.mac)(got, w, b, p)
            assert got == want, (k.__name__, n, list(p))
    # the elementwise kernels on a random arena
    arena = array.array("b", [r.int(-128, 127) for _ in range(200)])
    w = array.array("b", [r.int(-128, 127) for _ in range(300)])
    feats = array.array("H", [r.int(0, 2000) for _ in range(40)])
    calls = (("copy", (array.array("i", (3, 100, 4, 9, 11, 13)),)),
             ("lut", (w, array.array("i", (0, 120, 60, 17)))),
             ("quant_in", (w, feats, array.array("i", (150, 40, 5, 280)))))
    for name, args in calls:
        want = array.array("b", arena)
        getattr(P, name)(want, *args)
        assert want != arena, name
        for k in fast:
            got = array.array("b", arena)
            getattr(k, name)(got, *args)
            assert got == want, (k.__name__, name)


def test_weights_in_any_readable_buffer_at_any_alignment():
    # a frozen image hands the kernels a memoryview of a bytes object, which may start at any address: the C kernels
    # then load the weight words a byte at a time (wake_mac_u / wake_dw_u), the twins read bytes as they come
    r = _Rand(41)
    for n in range(40):
        dw = n & 1
        arena, w, b, p = _layer(r, dw)
        want = array.array("b", arena)
        (P.dw if dw else P.mac)(want, w, b, p)
        for off in (0, 1, 2, 3):
            mv = memoryview(bytes(off) + bytes(w))[off:]
            for k in [P] + [x for x in (V, C) if x is not None]:
                got = array.array("b", arena)
                (k.dw if dw else k.mac)(got, mv, b, p)
                assert got == want, (k.__name__, n, off)


def test_both_rounding_modes_on_an_exact_negative_half():
    # acc = -6, multiplier 2**30 (x/2 in the doubling high multiply: -3), shift -1: -3 / 2 = -1.5 exactly. Channel 0
    # is below params[16] (ups = 1): halves toward +inf, -1 (TFLite's optimized depthwise); channel 1: away from
    # zero, -2 (TFLite's reference). Every kernel set, conv and depthwise.
    half = 1 << 30
    b = array.array("i", (-6, -6, half, half, -1, -1))
    for k in [P] + [x for x in (V, C) if x is not None]:
        for dw in (0, 1):
            a = array.array("b", bytes(8))
            w = array.array("b", bytes(8))
            p = array.array("i", (0, 1, 2, 4, 1, 2, 1, 1, 1, 0, 0, 2, 4, 0, -128, 127, 1))
            (k.dw if dw else k.mac)(a, w, b, p)
            assert list(a[4:6]) == [-1, -2], (k.__name__, dw, list(a))


def test_c_kernels_allocate_nothing():
    if C is None:
        return                 # no C module in this interpreter (test_impl_is_c_then_viper_then_pure)
    r = _Rand(5)
    for dw in (0, 1):
        arena, w, b, p = _layer(r, dw)
        assert mem_alloc_delta(C.dw if dw else C.mac, arena, w, b, p) == 0
    assert mem_alloc_delta(C.copy, arena, array.array("i", (0, 1, 1, 2, 0, 0))) == 0


def test_c_refuses_offsets_outside_its_buffers_and_writes_nothing():
    if C is None:
        return                 # no C module in this interpreter (test_impl_is_c_then_viper_then_pure)
    r = _Rand(9)
    arena, w, b, p = _layer(r, 0)
    before = array.array("b", arena)

    def bad(j, v, fn=C.mac, what=""):
        q = array.array("i", p)
        q[j] = v
        e = raises(ValueError, fn, arena, w, b, q)
        assert what in str(e), str(e)
        assert arena == before
    bad(3, len(arena), what="output")                    # output past the arena
    bad(0, -1, what="input")
    bad(9, len(w), what="weights")
    bad(12, len(b), what="shifts")
    bad(4, -2, what="out_rows")
    # run(): a program whose last op is bad writes nothing, not even its good first ops
    good = [0] + list(p)
    prog = array.array("i", good + [0] + list(p))
    prog[len(good) + 1 + 3] = len(arena)                 # the second op's output past the arena
    assert "output" in str(raises(ValueError, C.run, arena, w, b, prog))
    assert "kind" in str(raises(ValueError, C.run, arena, w, b, array.array("i", [7] + list(p))))
    assert "kind" in str(raises(ValueError, C.run, arena, w, b, array.array("i", good[:-1])))
    assert arena == before
    sh = array.array("i", b)
    sh[2 * p[5]] = 40                                    # a shift no model has: refused, not undefined C
    assert "shift" in str(raises(ValueError, C.mac, arena, w, sh, p))
    assert "params" in str(raises(ValueError, C.mac, arena, w, b, array.array("i", p[:10])))
    assert "copy target" in str(raises(ValueError, C.copy, arena, array.array("i", (0, len(arena) - 1, 1, 2, 0, 0))))
    assert "table" in str(raises(ValueError, C.lut, arena, w, array.array("i", (0, 0, 4, len(w) - 255))))
    f = array.array("H", bytes(20))
    assert "features" in str(raises(ValueError, C.quant_in, arena, w, f, array.array("i", (0, 40, 0, 10))))
    assert arena == before


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
    # a file from before the AWW2 weight layout: one line saying what to do
    old = str(raises(M.ModelError, M.load, io.BytesIO(b"AWW1" + _BLOB[4:])))
    assert "another format" in old and "alabama wake compile" in old and "deploy" in old, old
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
