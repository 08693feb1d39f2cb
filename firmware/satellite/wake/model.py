# Wake-word inference: loads a board model file (written on the host by `alabama wake compile`, host/alabama/wake;
# read into RAM by load(), or left where it is by load_frozen(): a frozen module's bytes, in flash) and runs it
# streaming, one call per 10 ms feature frame, one inference every `stride` frames, with TFLite's int8
# arithmetic. Responsible for the file's checks (every length against a named limit before anything is
# allocated), the preallocated arena/state/tables and the detection rule (the window's sum of uint8 probabilities
# against the compiled cutoff); not for audio features (frontend.py), the mic, or what a detection does.
from micropython import const
import array
import json
import struct

from satellite.audio import load_fast

MAGIC = b"AWW2"                 # AWW2: weights pre-arranged for 4 MACs per 32-bit load (the compiler's arrange_mac/dw)
MAX_HEADER = const(16384)       # the header (JSON op list); the compiler writes at most this
MAX_BLOB = const(262144)        # weights, tables and initial state
MAX_ARENA = const(65536)        # activations + streaming state
MAX_OPS = const(512)
MAX_WINDOW = const(64)
FEATURES = const(40)

# The kernels: the C module _wake_c (firmware/native/wake.c, built into the board image and the 32-bit test
# interpreters; a built-in, so no heap for its code) when the interpreter has it, else the viper twin, else the
# pure one. IMPL says which ("c", "viper", "pure"); all three take the same calls and give the same bytes.
try:
    import _wake_c as _k
    IMPL = "c"
except ImportError:
    _k, _viper = load_fast("satellite.wake._model_viper", "satellite.wake._model_pure")
    IMPL = "viper" if _viper else "pure"
    del _viper
VIPER = IMPL == "viper"
_mac = _k.mac
_dw = _k.dw
_copy = _k.copy
_lut = _k.lut
_quant_in = _k.quant_in
_run = getattr(_k, "run", None)        # the whole program in one call (the C module only)
del _k

_MAC = const(0)
_DW = const(1)
_COPY = const(2)
_LUT = const(3)
_KINDS = {"CONV_2D": _MAC, "FULLY_CONNECTED": _MAC, "DEPTHWISE_CONV_2D": _DW, "CONCATENATION": _COPY,
          "STRIDED_SLICE": _COPY, "SPLIT_V": _COPY, "READ_VARIABLE": _COPY, "ASSIGN_VARIABLE": _COPY,
          "LOGISTIC": _LUT, "QUANTIZE": _LUT}
_NPARAM = {_MAC: 17, _DW: 17, _COPY: 6, _LUT: 4}


class ModelError(ValueError):
    """A model file this board cannot run; str() says what is wrong with it."""


class Model:
    """One loaded wake model. step(features) per 10 ms frame; .detected after it returned a probability."""

    def __init__(self, header, w8, i32):
        h = header
        self.name = str(h["name"])
        self.wake_word = str(h["wake_word"])
        self.stride = int(h["stride"])
        self.window = int(h["window"])
        self.cutoff_sum = int(h["cutoff_sum"])
        n_arena = int(h["arena"])
        n_ops = len(h["ops"])
        if not 0 < n_arena <= MAX_ARENA or not 0 < n_ops <= MAX_OPS or not 0 < self.window <= MAX_WINDOW \
                or not 0 < self.stride <= 16 or int(h["features"]) != FEATURES:
            raise ModelError("model %s: arena %d, %d ops, window %d, stride %d outside this board's limits"
                             % (self.name, n_arena, n_ops, self.window, self.stride))
        self._w8 = w8
        self._i32 = i32
        self.copied = 0              # bytes of the model file copied into RAM (load: all of them; load_frozen: none)
        self.arena = array.array("b", bytes(n_arena))
        self._out = int(h["output"])
        self._out_xor = int(h["out_xor"])
        self._state = [tuple(int(v) for v in s) for s in h["state"]]
        self._in = array.array("i", (int(h["input"]), FEATURES, int(h["in_q"]), int(h["in_n"])))
        self._in_first = self._in[0]
        # one int array holds the whole program, each op its kind then its parameters (the C module runs it in
        # one call); each op's parameters are a memoryview into it (the per-op kernels' argument)
        n_prog = 0
        for op in h["ops"]:
            kind = _KINDS.get(op[0])
            if kind is None:
                raise ModelError("model %s uses the op %s, which this firmware does not implement" % (self.name, op[0]))
            if len(op) - 1 != _NPARAM[kind]:
                raise ModelError("model %s: op %s has %d parameters, not %d" % (self.name, op[0], len(op) - 1,
                                                                               _NPARAM[kind]))
            n_prog += len(op)
        prog = array.array("i", bytes(4 * n_prog))
        mv = memoryview(prog)
        ops = []
        j = 0
        for op in h["ops"]:
            kind = _KINDS[op[0]]
            prog[j] = kind
            for i in range(1, len(op)):
                prog[j + i] = int(op[i])
            ops.append((kind, mv[j + 1:j + len(op)]))
            j += len(op)
        self._prog = prog
        self._check(ops, n_arena, int(h["n8"]), int(h["n32"]))
        self._ops = tuple(ops)
        self._probs = bytearray(self.window)
        self.reset()

    def _check(self, ops, n_arena, n8, n32):
        """Every offset the kernels will use inside its buffer, so a damaged file fails here, never mid-run."""
        def inside(off, n, size, what):
            if off < 0 or n < 0 or off + n > size:
                raise ModelError("model %s: %s [%d, +%d) outside its %d bytes" % (self.name, what, off, n, size))
        for kind, p in ops:
            if kind == _COPY:
                if p[2] > 0:
                    inside(p[0], (p[2] - 1) * p[4] + p[3], n_arena, "copy source")
                    inside(p[1], (p[2] - 1) * p[5] + p[3], n_arena, "copy target")
            elif kind == _LUT:
                inside(p[0], p[2], n_arena, "table input")
                inside(p[1], p[2], n_arena, "table output")
                inside(p[3], 256, n8, "table")
            else:
                rows_in = (p[4] - 1) * p[7] + (p[6] - 1) * p[8] + 1
                inside(p[0], rows_in * p[2], n_arena, "input")
                inside(p[3], p[4] * p[5], n_arena, "output")
                inside(p[9], p[6] * (1 if kind == _DW else p[2]) * ((p[5] + 3) & ~3), n8, "weights")
                for j in (10, 11, 12):
                    inside(p[j], p[5], n32, "per-channel table")
        inside(self._in[0], self.stride * FEATURES, n_arena, "input tensor")
        inside(self._in[2], self._in[3], n8, "input table")
        inside(self._out, 1, n_arena, "output")
        for off, n, init in self._state:
            inside(off, n, n_arena, "state")
            inside(init, n, n8, "initial state")

    def reset(self):
        """The streaming state back to the model's initial values (CALL_ONCE's), no frames, an empty window."""
        a = self.arena
        w = self._w8
        for off, n, init in self._state:
            for i in range(n):
                v = w[init + i]              # signed from an array('b'), unsigned from a frozen model's memoryview
                a[off + i] = v - 256 if v > 127 else v
        self._frame = 0
        self._n = 0
        self._pos = 0
        self.detected = False
        for i in range(self.window):
            self._probs[i] = 0

    def step(self, features):
        """One 10 ms frame of FEATURES uint16 features (array('H')): -1 while the model gathers frames, else the
        inference's probability 0..255 (value/256); .detected then says whether the window's mean is above the
        cutoff. Allocates nothing on the c and viper paths."""
        q = self._in
        q[0] = self._in_first + self._frame * FEATURES
        _quant_in(self.arena, self._w8, features, q)
        self._frame += 1
        if self._frame < self.stride:
            return -1
        self._frame = 0
        return self._infer()

    def _infer(self):
        a = self.arena
        w = self._w8
        b = self._i32
        ops = self._ops
        i = 0
        n = len(ops)
        if _run is not None:
            _run(a, w, b, self._prog)
            n = 0
        while i < n:
            kind, p = ops[i]
            if kind == _COPY:
                _copy(a, p)
            elif kind == _MAC:
                _mac(a, w, b, p)
            elif kind == _DW:
                _dw(a, w, b, p)
            else:
                _lut(a, w, p)
            i += 1
        prob = (a[self._out] & 255) ^ self._out_xor
        probs = self._probs
        probs[self._pos] = prob
        self._pos += 1
        if self._pos == self.window:
            self._pos = 0
        if self._n < self.window:
            self._n += 1
        s = 0
        for j in range(self.window):
            s += probs[j]
        self.detected = self._n == self.window and s >= self.cutoff_sum
        return prob


def _sizes(head):
    """(header length, blob length) from a model file's first 12 bytes, each checked against its limit."""
    if head[:3] == MAGIC[:3] and head[:4] != MAGIC:
        raise ModelError("wake model file in another format (%r, this firmware reads %r): re-run `alabama wake "
                         "compile` and deploy it again" % (head[:4], MAGIC))
    if len(head) != 12 or head[:4] != MAGIC:
        raise ModelError("not a wake model file (no %s header): compile it with `alabama wake compile`" % MAGIC)
    hl, bl = struct.unpack("<II", head[4:])
    if hl > MAX_HEADER or bl > MAX_BLOB:
        raise ModelError("wake model of %d + %d bytes is larger than this board takes (%d + %d)"
                         % (hl, bl, MAX_HEADER, MAX_BLOB))
    return hl, bl


def _header(raw, bl):
    """The parsed JSON header and its (n8, n32), checked against the blob's length."""
    try:
        header = json.loads(raw)
        n8 = int(header["n8"])
        n32 = int(header["n32"])
    except (ValueError, KeyError, TypeError):
        raise ModelError("wake model header is damaged")
    if n8 < 0 or n32 < 0 or n8 + (-n8 % 4) + 4 * n32 != bl:
        raise ModelError("wake model sizes disagree: %d + %d int32 in a %d-byte blob" % (n8, n32, bl))
    return header, n8, n32


def _model(header, w8, i32):
    try:
        return Model(header, w8, i32)
    except (KeyError, TypeError, IndexError) as e:
        raise ModelError("wake model header is damaged (%r)" % (e,))


def load(f):
    """A Model from an open binary file (or anything with read/readinto) holding a board model file: its weights
    and tables read into RAM arrays (the .mpy set's path; a frozen image's models: load_frozen)."""
    hl, bl = _sizes(f.read(12))
    raw = f.read(hl)
    if len(raw) != hl:
        raise ModelError("wake model file is truncated (header)")
    header, n8, n32 = _header(raw, bl)
    raw = None
    w8 = array.array("b", bytes(n8))
    if f.readinto(w8) != n8:
        raise ModelError("wake model file is truncated (weights)")
    if n8 % 4:
        f.read(-n8 % 4)
    i32 = array.array("i", bytes(4 * n32))
    if f.readinto(i32) != 4 * n32:
        raise ModelError("wake model file is truncated (tables)")
    if f.read(1):
        raise ModelError("wake model file has bytes after its tables")
    m = _model(header, w8, i32)
    m.copied = n8 + 4 * n32
    return m


def load_frozen(buf, typed=None):
    """A Model over a whole board model file held in `buf` (bytes or a memoryview: a frozen module's constant,
    satellite.wake.frozen) with no copy of its weights and tables: the kernels read them through memoryviews of buf, which on a frozen
    image is flash (in the interpreter's read-only data on the unix build). Only the arena, the streaming window
    and the op program are allocated. The int32 tables are copied into RAM only where they cannot be read in
    place: not 4-byte aligned in memory (the C and viper kernels load them word-wise), or no uctypes to tell.
    typed (default: the pure kernels are in use) gives the pure kernels signed views instead (memoryview.cast on
    CPython; MicroPython's memoryview has no cast, so there they get RAM copies). .copied says how many bytes of
    the file were copied into RAM (0: all of it read in place)."""
    if typed is None:
        typed = IMPL == "pure"
    n = len(buf)
    hl, bl = _sizes(bytes(buf[:12]))
    if n != 12 + hl + bl:
        raise ModelError("wake model is %d bytes, its header says %d: %s" % (
            n, 12 + hl + bl, "truncated" if n < 12 + hl + bl else "bytes after its tables"))
    header, n8, n32 = _header(bytes(buf[12:12 + hl]), bl)       # a transient copy: CPython's json takes no view
    o8 = 12 + hl
    o32 = o8 + n8 + (-n8 % 4)
    mv = memoryview(buf)
    w8 = mv[o8:o8 + n8]
    i32 = mv[o32:o32 + 4 * n32]
    copied = 0
    if typed:
        try:
            w8, i32 = w8.cast("b"), i32.cast("i")        # CPython
        except AttributeError:
            w8, i32 = array.array("b", bytes(w8)), array.array("i", bytes(i32))   # raw bytes -> typed values
            copied = n8 + 4 * n32
    elif not _aligned(i32):
        i32 = bytearray(i32)         # a heap block is word-aligned; the fast kernels take any buffer
        copied = 4 * n32
    mv = None
    m = _model(header, w8, i32)
    m.copied = copied
    return m


def _aligned(view):
    """True when the buffer's address is a multiple of 4 (uctypes.addressof; False when there is no uctypes)."""
    try:
        from uctypes import addressof
    except ImportError:
        return False
    return addressof(view) & 3 == 0
