"""The wake-model compiler: responsible for reading a microWakeWord v2 streaming model (.tflite + its JSON) with the
`tflite` schema package and writing the board's model file (firmware/satellite/wake/model.py loads it): the op list
with every shape, offset and requantization parameter resolved, the weights, the streaming state's initial values, the
input quantization table and the detection rule; not for running the model (the board does; reference.py runs
TFLite) and never for copying a model into the repository."""
import json
import math
import struct
from fractions import Fraction

import numpy as np
import tflite
from tflite.BuiltinOperator import BuiltinOperator
from tflite.CallOnceOptions import CallOnceOptions
from tflite.ConcatenationOptions import ConcatenationOptions
from tflite.Conv2DOptions import Conv2DOptions
from tflite.DepthwiseConv2DOptions import DepthwiseConv2DOptions
from tflite.FullyConnectedOptions import FullyConnectedOptions
from tflite.StridedSliceOptions import StridedSliceOptions
from tflite.VarHandleOptions import VarHandleOptions

from ..errors import UsageError
from .quant import multiply_by_quantized_multiplier, quantize_multiplier

#: the board model file's magic and format version: AWW2 stores the conv / depthwise / fully-connected weights
#: pre-arranged for four int8 MACs per 32-bit weight load (arrange_mac, arrange_dw); the board refuses AWW1
MAGIC = b"AWW2"
#: the largest .tflite we read (the four shipped models are 52-81 kB; the board's heap bounds any model far below this)
MAX_TFLITE_BYTES = 1 << 20
#: the largest board model file (header + blob) the compiler writes; the firmware's own limits (model.py) are the same
MAX_HEADER_BYTES = 16384
MAX_BLOB_BYTES = 262144
MAX_ARENA_BYTES = 65536
#: frontend features per 10 ms frame (TFLite-Micro's audio frontend as microWakeWord uses it)
FEATURES = 40
#: frontend output to float: pymicro-features hands out uint16 * 0.0390625 (exact in float32 for every uint16)
FEATURE_SCALE = 0.0390625
#: the input quantization table's length: the frontend's log-scale features stay below ln(2**32) * 64 ~ 1420 (674 at
#: full-scale input, measured), so 2048 entries cover every value it can produce; the board clamps above
IN_TABLE = 2048

_OPNAME = {v: k for k, v in BuiltinOperator.__dict__.items() if not k.startswith("_")}
_INT8, _INT32, _UINT8, _RESOURCE = 9, 2, 3, 13
# TFLite ActivationFunctionType: NONE 0, RELU 1, RELU_N1_TO_1 2, RELU6 3
_ACTS = {0: "NONE", 1: "RELU", 3: "RELU6"}


class ModelError(UsageError):
    """A model the board cannot run: damaged, too large, or using an op or shape we do not implement."""


class _T:
    """One tensor of the main graph."""

    def __init__(self, model, graph, i):
        t = graph.Tensors(i)
        self.index = i
        self.name = (t.Name() or b"").decode("utf-8", "replace")
        self.type = t.Type()
        self.shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
        q = t.Quantization()
        self.scales = [float(s) for s in q.ScaleAsNumpy()] if q is not None and q.ScaleLength() else []
        self.zps = [int(z) for z in q.ZeroPointAsNumpy()] if q is not None and q.ZeroPointLength() else []
        b = model.Buffers(t.Buffer()) if t.Buffer() < model.BuffersLength() else None
        self.data = b.DataAsNumpy().tobytes() if b is not None and b.DataLength() else None

    @property
    def scale(self):
        return self.scales[0]

    @property
    def zp(self):
        return self.zps[0] if self.zps else 0

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


def _np_of(t, dtype):
    return np.frombuffer(t.data, dtype=dtype)


#: how the requantizing ops round: "tflite" is TFLite's builtin (optimized) kernels, which pymicro-wakeword runs
#: and the board must equal: their int8 FULLY_CONNECTED and CONV_2D (through ruy) round the halves of the final
#: shift upward, and DEPTHWISE_CONV_2D does in its blocks of 8 channels (the channels past the last whole block go
#: through its scalar tail, rounded as the reference); "reference" is TFLite's reference kernels (and
#: TFLite-Micro's, which ESPHome runs): halves away from zero. Measured, not assumed: tools/wake_parity.py and
#: docs/wake.md ("Two roundings")
ROUNDINGS = ("tflite", "reference")


class Compiler:
    """Lowers one model's main graph to the board's ops; `build()` returns the model file's bytes."""

    def __init__(self, tfl, config, name, rounding="tflite"):
        if rounding not in ROUNDINGS:
            raise ModelError("rounding %r: choose one of %s" % (rounding, ", ".join(ROUNDINGS)))
        self.rounding = rounding
        self.name = name
        self.config = config
        self.model = _parse(tfl, name)
        self.ops = []
        self.blob8 = bytearray()
        self.blob32 = []
        self.arena = 0              # first the naive layout (every tensor its own bytes), then the planned one
        self.where = {}             # tensor index -> arena offset (RESHAPE outputs share their input's)
        self._regions = []          # (naive offset, size, key): key a tensor index or ("var", name)
        self._life = {}             # key -> [first, last] TFLite op index that touches it
        self._persist = set()       # keys live across inferences: the state, the input, the output
        self._alias = {}            # RESHAPE output -> the tensor whose bytes it is
        self._oi = -1
        self.vars = {}              # shared name -> [arena offset, size, init blob8 offset]
        self.handles = {}           # resource tensor index -> shared name

    # -- storage ------------------------------------------------------------------------------------------------
    def _alloc(self, n, key):
        off = self.arena
        self.arena += n
        self._regions.append((off, n, key))
        return off

    def _at(self, t):
        key = self._alias.get(t.index, t.index)
        if key not in self.where:
            self.where[key] = self._alloc(t.size, key)
        life = self._life.setdefault(key, [self._oi, self._oi])
        life[0] = min(life[0], self._oi)
        life[1] = max(life[1], self._oi)
        return self.where[key]

    def _plan(self):
        """Give tensors whose lifetimes (in ops) do not overlap the same bytes, largest first, lowest 4-aligned offset
        that fits (the state, input and output keep theirs for good); returns naive offset -> planned offset."""
        placed, new = [], {}
        for off0, n, key in sorted(self._regions, key=lambda r: (-r[1], r[0])):
            first, last = (-1, 1 << 30) if key in self._persist else self._life.get(key, (0, 0))
            busy = sorted((o, o + m) for o, m, f, la in placed if f <= last and first <= la)
            at = 0
            for lo, hi in busy:
                if at + n <= lo:
                    break
                at = max(at, hi + (-hi % 4))    # every tensor 4-aligned: the copies move words
            placed.append((at, n, first, last))
            new[off0] = (at, n)
        size = max((o + m for o, m, _, _ in placed), default=0)
        if size > MAX_ARENA_BYTES:
            raise ModelError("%s: its activations and state need %d bytes of arena (the board takes at most %d)"
                             % (self.name, size, MAX_ARENA_BYTES))
        starts = sorted(new)

        def remap(v):
            import bisect
            off0 = starts[bisect.bisect_right(starts, v) - 1]
            at, n = new[off0]
            assert off0 <= v < off0 + n, v
            return at + (v - off0)
        self.arena = size
        for k in list(self.where):
            self.where[k] = remap(self.where[k])
        for a, b in self._alias.items():
            self.where[a] = self.where[b]
        for op in self.ops:
            idx = (1, 2) if len(op) in (5, 7) else (1, 4)       # LUT/copy: in, out; MAC: in, out
            for i in idx:
                op[i] = remap(op[i])
        for v in self.vars.values():
            v[0] = remap(v[0])
        return remap

    def _b8(self, data, align=1):
        self.blob8 += bytes(-len(self.blob8) % align)
        off = len(self.blob8)
        self.blob8 += bytes(data)
        return off

    def _b32(self, values):
        off = len(self.blob32)
        self.blob32.extend(int(v) for v in values)
        return off

    # -- shapes -------------------------------------------------------------------------------------------------
    def _rows_cols(self, t, op):
        """An activation is [1, T, 1, C] (or [1, C], [1, T, C]): its (rows, cols) in row-major order."""
        s = t.shape
        if len(s) == 4 and s[0] == 1 and s[2] == 1:
            return s[1], s[3]
        if len(s) == 3 and s[0] == 1:
            return s[1], s[2]
        if len(s) == 2 and s[0] == 1:
            return 1, s[1]
        raise ModelError("%s: %s on a tensor of shape %s (only [1, T, 1, C] activations are implemented)"
                         % (self.name, op, s))

    def _int8(self, t, op):
        if t.type != _INT8 or len(t.scales) != 1:
            raise ModelError("%s: %s on tensor %r that is not per-tensor int8" % (self.name, op, t.name))

    # -- the graph ----------------------------------------------------------------------------------------------
    def build(self):
        m = self.model
        g = m.Subgraphs(0)
        tensors = [_T(m, g, i) for i in range(g.TensorsLength())]
        if g.InputsLength() != 1 or g.OutputsLength() != 1:
            raise ModelError("%s: the model has %d inputs and %d outputs (a wake model has one of each)"
                             % (self.name, g.InputsLength(), g.OutputsLength()))
        tin = tensors[g.Inputs(0)]
        tout = tensors[g.Outputs(0)]
        self._int8(tin, "the input")
        if tin.shape[:1] != [1] or tin.shape[-1] != FEATURES or len(tin.shape) != 3:
            raise ModelError("%s: input shape %s is not [1, stride, %d]" % (self.name, tin.shape, FEATURES))
        stride = tin.shape[1]
        in_off = self._at(tin)
        for oi in range(g.OperatorsLength()):
            op = g.Operators(oi)
            code = m.OperatorCodes(op.OpcodeIndex())
            name = _OPNAME.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "CUSTOM")
            fn = getattr(self, "_op_" + name, None)
            if fn is None:
                raise ModelError("%s: uses the op %s, which the board does not implement" % (self.name, name))
            ins = [tensors[i] if i >= 0 else None for i in op.InputsAsNumpy()] if op.InputsLength() else []
            outs = [tensors[i] for i in op.OutputsAsNumpy()] if op.OutputsLength() else []
            self._oi = oi
            fn(op, ins, outs)
        out_xor = self._output_rule(tout)
        self._at(tout)
        self._persist.update((tin.index, self._alias.get(tout.index, tout.index)))
        remap = self._plan()
        return self._pack(tin, stride, remap(in_off), tout, out_xor)

    def _output_rule(self, t):
        probability = (t.type == _UINT8 and t.zp == 0) or (t.type == _INT8 and t.zp == -128)
        if abs(t.scale - 1 / 256) > 1e-9 or not probability:
            raise ModelError("%s: output is not a probability in 1/256 steps (type %d, scale %g, zero point %d)"
                             % (self.name, t.type, t.scale, t.zp))
        return 0 if t.type == _UINT8 else 128

    # -- state --------------------------------------------------------------------------------------------------
    def _op_CALL_ONCE(self, op, ins, outs):
        opt = CallOnceOptions()
        tab = op.BuiltinOptions()
        opt.Init(tab.Bytes, tab.Pos)
        self._init_graph(opt.InitSubgraphIndex())

    def _init_graph(self, si):
        m = self.model
        if si <= 0 or si >= m.SubgraphsLength():
            raise ModelError("%s: CALL_ONCE names subgraph %d, which does not exist" % (self.name, si))
        g = m.Subgraphs(si)
        tensors = [_T(m, g, i) for i in range(g.TensorsLength())]
        handles = {}
        for oi in range(g.OperatorsLength()):
            op = g.Operators(oi)
            code = m.OperatorCodes(op.OpcodeIndex())
            name = _OPNAME.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "CUSTOM")
            if name == "VAR_HANDLE":
                handles[op.Outputs(0)] = self._shared_name(op)
            elif name == "ASSIGN_VARIABLE":
                value = tensors[op.Inputs(1)]
                if value.data is None or value.type != _INT8:
                    raise ModelError("%s: the state's initial value %r is not an int8 constant"
                                     % (self.name, value.name))
                key = handles[op.Inputs(0)]
                self.vars[key] = [self._alloc(value.size, ("var", key)), value.size, self._b8(value.data), value]
                self._persist.add(("var", key))
            else:
                raise ModelError("%s: its state initializer uses %s (only constant assignments are implemented)"
                                 % (self.name, name))

    def _shared_name(self, op):
        opt = VarHandleOptions()
        tab = op.BuiltinOptions()
        opt.Init(tab.Bytes, tab.Pos)
        return (opt.Container() or b"").decode() + "/" + (opt.SharedName() or b"").decode()

    def _op_VAR_HANDLE(self, op, ins, outs):
        self.handles[outs[0].index] = self._shared_name(op)

    def _var(self, t, op):
        key = self.handles.get(t.index)
        if key not in self.vars:
            raise ModelError("%s: %s on a variable that CALL_ONCE never initializes" % (self.name, op))
        return self.vars[key]

    def _op_READ_VARIABLE(self, op, ins, outs):
        off, n, _, _ = self._var(ins[0], "READ_VARIABLE")
        if outs[0].size != n:
            raise ModelError("%s: READ_VARIABLE of %d bytes into a tensor of %d" % (self.name, n, outs[0].size))
        self._copy("READ_VARIABLE", off, self._at(outs[0]), 1, n, n, n)

    def _op_ASSIGN_VARIABLE(self, op, ins, outs):
        off, n, _, init = self._var(ins[0], "ASSIGN_VARIABLE")
        if ins[1].size != n:
            raise ModelError("%s: ASSIGN_VARIABLE of %d bytes into a variable of %d" % (self.name, ins[1].size, n))
        self._same_q(init, ins[1], "ASSIGN_VARIABLE")
        self._copy("ASSIGN_VARIABLE", self._at(ins[1]), off, 1, n, n, n)

    # -- data movement: all lowered to strided row copies ---------------------------------------------------------
    def _copy(self, name, src, dst, rows, cols, src_pitch, dst_pitch):
        if rows > 1 and src_pitch == dst_pitch == cols:
            # contiguous rows are one row: the same bytes moved in the same front-to-back order, one row's overhead
            rows, cols, src_pitch, dst_pitch = 1, rows * cols, rows * cols, rows * cols
        self.ops.append([name, src, dst, rows, cols, src_pitch, dst_pitch])

    def _same_q(self, a, b, op):
        if a.type != b.type or a.scales[:1] != b.scales[:1] or a.zp != b.zp:
            raise ModelError("%s: %s between tensors of different quantization (%r, %r): requantizing copies are not "
                             "implemented" % (self.name, op, a.name, b.name))

    def _op_RESHAPE(self, op, ins, outs):
        self._same_q(ins[0], outs[0], "RESHAPE")
        if ins[0].size != outs[0].size:
            raise ModelError("%s: RESHAPE from %s to %s" % (self.name, ins[0].shape, outs[0].shape))
        self._at(ins[0])
        self._alias[outs[0].index] = self._alias.get(ins[0].index, ins[0].index)   # same bytes, new shape: no copy

    def _axis(self, t, axis, op):
        nd = len(t.shape)
        axis = axis + nd if axis < 0 else axis
        if nd == 4 and axis in (1, 3):
            return axis == 3
        raise ModelError("%s: %s along axis %d of a %s tensor" % (self.name, op, axis, t.shape))

    def _op_CONCATENATION(self, op, ins, outs):
        opt = ConcatenationOptions()
        tab = op.BuiltinOptions()
        opt.Init(tab.Bytes, tab.Pos)
        if opt.FusedActivationFunction() != 0:
            raise ModelError("%s: CONCATENATION with a fused activation" % self.name)
        out = outs[0]
        on_cols = self._axis(out, opt.Axis(), "CONCATENATION")
        rows, cols = self._rows_cols(out, "CONCATENATION")
        dst = self._at(out)
        pos = 0
        for t in ins:
            self._same_q(t, out, "CONCATENATION")
            r, c = self._rows_cols(t, "CONCATENATION")
            if on_cols:
                self._copy("CONCATENATION", self._at(t), dst + pos, r, c, c, cols)
                pos += c
            else:
                self._copy("CONCATENATION", self._at(t), dst + pos * cols, 1, r * c, r * c, r * c)
                pos += r

    def _op_SPLIT_V(self, op, ins, outs):
        t, sizes, axis = ins
        axis = int(_np_of(axis, "<i4")[0])
        on_cols = self._axis(t, axis, "SPLIT_V")
        rows, cols = self._rows_cols(t, "SPLIT_V")
        pos = 0
        for o in outs:
            self._same_q(t, o, "SPLIT_V")
            r, c = self._rows_cols(o, "SPLIT_V")
            if on_cols:
                self._copy("SPLIT_V", self._at(t) + pos, self._at(o), r, c, cols, c)
                pos += c
            else:
                self._copy("SPLIT_V", self._at(t) + pos * cols, self._at(o), 1, r * c, r * c, r * c)
                pos += r

    def _op_STRIDED_SLICE(self, op, ins, outs):
        opt = StridedSliceOptions()
        tab = op.BuiltinOptions()
        opt.Init(tab.Bytes, tab.Pos)
        if opt.EllipsisMask() or opt.NewAxisMask() or opt.ShrinkAxisMask() or opt.Offset():
            raise ModelError("%s: STRIDED_SLICE with ellipsis/new-axis/shrink/offset masks" % self.name)
        t, out = ins[0], outs[0]
        self._same_q(t, out, "STRIDED_SLICE")
        if len(t.shape) != 4:
            raise ModelError("%s: STRIDED_SLICE of a %s tensor" % (self.name, t.shape))
        begin, end, step = (list(_np_of(x, "<i4")) for x in ins[1:4])
        lo, n, st = [], [], []
        for d in range(4):
            size = t.shape[d]
            s = int(step[d])
            if s <= 0:
                raise ModelError("%s: STRIDED_SLICE with stride %d" % (self.name, s))
            b = 0 if opt.BeginMask() >> d & 1 else int(begin[d])
            e = size if opt.EndMask() >> d & 1 else int(end[d])
            b = min(max(b + size if b < 0 else b, 0), size)
            e = min(max(e + size if e < 0 else e, 0), size)
            lo.append(b)
            n.append(max(0, -(-(e - b) // s)))
            st.append(s)
        if n != out.shape:
            raise ModelError("%s: STRIDED_SLICE gives %s, the model says %s" % (self.name, n, out.shape))
        if st[3] != 1:
            raise ModelError("%s: STRIDED_SLICE with a channel stride of %d" % (self.name, st[3]))
        rows, cols = self._rows_cols(t, "STRIDED_SLICE")
        src = self._at(t) + lo[1] * cols + lo[3]
        self._copy("STRIDED_SLICE", src, self._at(out), n[1], n[3], st[1] * cols, n[3])

    # -- arithmetic ---------------------------------------------------------------------------------------------
    def _act_range(self, out, fused, op):
        if fused not in _ACTS:
            raise ModelError("%s: %s with the fused activation %d" % (self.name, op, fused))
        lo, hi = -128, 127
        if fused in (1, 3):
            lo = max(lo, out.zp + int(round(0.0 / out.scale)))
        if fused == 3:
            hi = min(hi, out.zp + _tfl_round(6.0 / out.scale))
        return lo, hi

    def _mac_op(self, name, inp, w, bias, out, kh, stride, dil, fused, per_channel_w, depthwise):
        self._int8(inp, name)
        self._int8(out, name)
        if w.type != _INT8 or w.data is None:
            raise ModelError("%s: %s with weights that are not int8 constants" % (self.name, name))
        if any(z != 0 for z in w.zps):
            raise ModelError("%s: %s with weights of a nonzero zero point" % (self.name, name))
        in_rows, in_cols = self._rows_cols(inp, name)
        out_rows, out_cols = self._rows_cols(out, name)
        if (out_rows - 1) * stride + (kh - 1) * dil + 1 > in_rows:
            raise ModelError("%s: %s reads past its input (padding is not implemented)" % (self.name, name))
        wt = _np_of(w, np.int8).astype(np.int64)
        if depthwise:
            if in_cols != out_cols:
                raise ModelError("%s: DEPTHWISE_CONV_2D with a depth multiplier" % self.name)
            wt = wt.reshape(kh, out_cols)
            wsum = wt.sum(axis=0)
        else:
            wt = wt.reshape(out_cols, kh * in_cols)
            wsum = wt.sum(axis=1)
        if bias is not None:
            if bias.type != _INT32 or bias.data is None:
                raise ModelError("%s: %s with a bias that is not an int32 constant" % (self.name, name))
            b = _np_of(bias, "<i4").astype(np.int64)
        else:
            b = np.zeros(out_cols, dtype=np.int64)
        folded = b - inp.zp * wsum                   # sum((x - zp) * w) = sum(x * w) - zp * sum(w)
        mult, shift = [], []
        for c in range(out_cols):
            ws = w.scales[c] if per_channel_w else w.scale
            if name != "FULLY_CONNECTED":              # PopulateConvolutionQuantizationParams: doubles throughout,
                real = float(inp.scale) * float(ws) / float(out.scale)     # per-channel or per-tensor weights
            else:                                      # GetQuantizedConvolutionMultipler: the float32 product first
                real = float(np.float32(inp.scale) * np.float32(ws)) / float(out.scale)
            q, s = quantize_multiplier(real)
            mult.append(q)
            shift.append(s)
        if any(abs(int(v)) >= 1 << 31 for v in folded):
            raise ModelError("%s: %s has a bias outside int32" % (self.name, name))
        lo, hi = self._act_range(out, fused, name)
        self.ops.append([name, self._at(inp), in_rows, in_cols, self._at(out), out_rows, out_cols, kh, stride, dil,
                         self._b8(arrange_dw(wt) if depthwise else arrange_mac(wt), 4), self._b32(folded),
                         self._b32(mult), self._b32(shift),
                         out.zp, lo, hi, self._ups(depthwise, out_cols)])

    def _ups(self, depthwise, channels):
        """How many leading output channels round halves upward (ROUNDINGS): TFLite's optimized depthwise kernel
        does so in its 8-channel vector blocks and rounds the remaining channels as the reference does."""
        if self.rounding != "tflite":
            return 0
        return channels // 8 * 8 if depthwise else channels

    def _conv_shape(self, op, ins, outs, name, opt):
        inp, w = ins[0], ins[1]
        if opt.StrideW() != 1 or opt.DilationWFactor() != 1 or len(w.shape) != 4 or w.shape[2] != 1:
            raise ModelError("%s: %s with a %s kernel (only [., KH, 1, .] kernels over time are implemented)"
                             % (self.name, name, w.shape))
        return w.shape[1]

    def _op_CONV_2D(self, op, ins, outs):
        opt = Conv2DOptions()
        tab = op.BuiltinOptions()
        opt.Init(tab.Bytes, tab.Pos)
        kh = self._conv_shape(op, ins, outs, "CONV_2D", opt)
        w = ins[1]
        if w.shape[3] != self._rows_cols(ins[0], "CONV_2D")[1] or w.shape[0] != self._rows_cols(outs[0], "CONV_2D")[1]:
            raise ModelError("%s: CONV_2D kernel %s does not match its tensors" % (self.name, w.shape))
        self._mac_op("CONV_2D", ins[0], w, ins[2] if len(ins) > 2 else None, outs[0], kh, opt.StrideH(),
                     opt.DilationHFactor(), opt.FusedActivationFunction(), len(w.scales) > 1, False)

    def _op_DEPTHWISE_CONV_2D(self, op, ins, outs):
        opt = DepthwiseConv2DOptions()
        tab = op.BuiltinOptions()
        opt.Init(tab.Bytes, tab.Pos)
        if opt.DepthMultiplier() not in (0, 1):
            raise ModelError("%s: DEPTHWISE_CONV_2D with depth multiplier %d" % (self.name, opt.DepthMultiplier()))
        kh = self._conv_shape(op, ins, outs, "DEPTHWISE_CONV_2D", opt)
        w = ins[1]
        self._mac_op("DEPTHWISE_CONV_2D", ins[0], w, ins[2] if len(ins) > 2 else None, outs[0], kh, opt.StrideH(),
                     opt.DilationHFactor(), opt.FusedActivationFunction(), len(w.scales) > 1, True)

    def _op_FULLY_CONNECTED(self, op, ins, outs):
        opt = FullyConnectedOptions()
        tab = op.BuiltinOptions()
        opt.Init(tab.Bytes, tab.Pos)
        inp, w, out = ins[0], ins[1], outs[0]
        if opt.WeightsFormat() != 0 or len(w.shape) != 2 or inp.size != w.shape[1] or out.size != w.shape[0]:
            raise ModelError("%s: FULLY_CONNECTED with weights %s on %s" % (self.name, w.shape, inp.shape))
        if len(w.scales) != 1:
            raise ModelError("%s: FULLY_CONNECTED with per-channel weights" % self.name)
        # a fully connected layer on a [1, N] input is a 1x1 convolution with one output row
        flat_in = _Flat(inp, 1, inp.size)
        flat_out = _Flat(out, 1, out.size)
        self._mac_op("FULLY_CONNECTED", flat_in, w, ins[2] if len(ins) > 2 else None, flat_out, 1, 1, 1,
                     opt.FusedActivationFunction(), False, False)

    def _lut_op(self, name, inp, out, table):
        n = inp.size
        if out.size != n:
            raise ModelError("%s: %s changes the size" % (self.name, name))
        self.ops.append([name, self._at(inp), self._at(out), n, self._b8(bytes(v & 255 for v in table))])

    def _op_LOGISTIC(self, op, ins, outs):
        inp, out = ins[0], outs[0]
        self._int8(inp, "LOGISTIC")
        self._int8(out, "LOGISTIC")
        self._lut_op("LOGISTIC", inp, out, logistic_table(inp.scale, inp.zp, out.scale, out.zp))

    def _op_QUANTIZE(self, op, ins, outs):
        inp, out = ins[0], outs[0]
        self._int8(inp, "QUANTIZE")
        if out.type not in (_INT8, _UINT8) or len(out.scales) != 1:
            raise ModelError("%s: QUANTIZE to type %d" % (self.name, out.type))
        self._lut_op("QUANTIZE", inp, out, requantize_table(inp.scale, inp.zp, out.scale, out.zp,
                                                            0 if out.type == _UINT8 else -128))

    # -- the file -----------------------------------------------------------------------------------------------
    def _pack(self, tin, stride, in_off, tout, out_xor):
        micro = self.config.get("micro", {})
        micro = micro if isinstance(micro, dict) else {}
        missing = [k for k in ("probability_cutoff", "sliding_window_size") if k not in micro]
        if missing:
            raise ModelError("%s: its JSON lacks micro.%s" % (self.name, " and micro.".join(missing)))
        got = {k: micro.get(k, 10) for k in ("probability_cutoff", "sliding_window_size", "feature_step_size")}
        wrong = [k for k, v in got.items() if isinstance(v, bool) or not isinstance(v, (int, float))
                 or (k != "probability_cutoff" and v != int(v))]
        if wrong:
            raise ModelError("%s: its JSON's micro.%s is %s, not a %s" % (
                self.name, wrong[0], json.dumps(got[wrong[0]]),
                "number" if wrong[0] == "probability_cutoff" else "whole number"))
        cutoff, window, step = float(got["probability_cutoff"]), int(got["sliding_window_size"]), \
            int(got["feature_step_size"])
        if not 1 <= window <= 64 or not 0.0 < cutoff < 1.0 or step != 10:
            raise ModelError("%s: its JSON says sliding_window_size %d, probability_cutoff %r, feature_step_size %d; "
                             "the board takes 1..64, between 0 and 1, and 10" % (self.name, window, cutoff, step))
        table = self._b8(input_table(tin.scale, tin.zp))
        header = {
            "name": self.name, "wake_word": str(self.config.get("wake_word", self.name)),
            "stride": stride, "features": FEATURES, "step_ms": step,
            "window": window, "cutoff": cutoff, "cutoff_sum": cutoff_sum(cutoff, window), "rounding": self.rounding,
            "arena": self.arena, "input": in_off, "output": self.where[self._alias.get(tout.index, tout.index)],
            "out_xor": out_xor,
            "in_q": table, "in_n": IN_TABLE,
            "state": [[off, n, init] for off, n, init, _ in self.vars.values()],
            "n8": len(self.blob8), "n32": len(self.blob32),
            "ops": self.ops,
        }
        hb = json.dumps(header, separators=(",", ":")).encode()
        # spaces after the JSON so the int32 tables start 4-byte aligned in the file: a frozen model's kernels read
        # them in place (firmware model.load_frozen), word-wise
        hb += b" " * (-(12 + len(hb)) % 4)
        blob = bytes(self.blob8) + b"\0" * (-len(self.blob8) % 4) + struct.pack("<%di" % len(self.blob32), *self.blob32)
        if len(hb) > MAX_HEADER_BYTES:
            raise ModelError("%s: %d ops need a %d-byte header (the board reads at most %d)"
                             % (self.name, len(self.ops), len(hb), MAX_HEADER_BYTES))
        if len(blob) > MAX_BLOB_BYTES:
            raise ModelError("%s: weights and tables are %d bytes (the board takes at most %d)"
                             % (self.name, len(blob), MAX_BLOB_BYTES))
        return MAGIC + struct.pack("<II", len(hb), len(blob)) + hb + blob


class _Flat(_T):
    """A tensor seen as [1, rows, 1, cols] (FULLY_CONNECTED's input and output)."""

    def __init__(self, t, rows, cols):
        self.__dict__.update(t.__dict__)
        self.shape = [1, rows, 1, cols]


def arrange_mac(wt):
    """CONV_2D / FULLY_CONNECTED weights [out_cols][kh * in_cols] (int) in the board's order (AWW2): groups of four
    output channels (the last one padded with zeros), each group's kh * in_cols 32-bit words holding the four
    channels' weights of one input element, channel 4g + j in byte j (little-endian), each stored plus 128 (uint8:
    the kernels extract the bytes unsigned and subtract 128 times the inputs' sum once per output row)."""
    wt = np.asarray(wt, dtype=np.int64)
    oc, n = wt.shape
    g = -(-oc // 4)
    pad = np.zeros((4 * g, n), dtype=np.int64)
    pad[:oc] = wt
    return (pad.reshape(g, 4, n).transpose(0, 2, 1) + 128).astype(np.uint8).tobytes()


def arrange_dw(wt):
    """DEPTHWISE_CONV_2D weights [kh][channels] (int) in the board's order (AWW2): groups of four channels (the last
    one padded with zeros), each group's kh 32-bit words holding the four channels' weights of one kernel row,
    channel 4g + j in byte j, as int8."""
    wt = np.asarray(wt, dtype=np.int64)
    kh, c = wt.shape
    g = -(-c // 4)
    pad = np.zeros((kh, 4 * g), dtype=np.int64)
    pad[:, :c] = wt
    return pad.reshape(kh, g, 4).transpose(1, 0, 2).astype(np.int8).tobytes()


def _tfl_round(x):
    """TfLiteRound / std::round: half away from zero."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def logistic_table(in_scale, in_zp, out_scale, out_zp):
    """TFLite's int8 LOGISTIC (the builtin kernel's lookup table, filled in float32); index = the input byte."""
    f32 = np.float32
    table = [0] * 256
    inv = f32(1.0) / f32(out_scale)
    for v in range(-128, 128):
        x = f32(in_scale) * f32(v - in_zp)
        y = f32(1.0) / (f32(1.0) + np.exp(-x, dtype=np.float32))
        q = _tfl_round(float(f32(y * inv))) + out_zp
        table[v & 255] = min(127, max(-128, q))
    return table


def requantize_table(in_scale, in_zp, out_scale, out_zp, out_min):
    """TFLite's QUANTIZE from int8: x - in_zp scaled by in_scale/out_scale (QuantizeMultiplier) plus out_zp."""
    q, s = quantize_multiplier(float(in_scale) / float(out_scale))
    table = [0] * 256
    for v in range(-128, 128):
        r = multiply_by_quantized_multiplier(v - in_zp, q, s) + out_zp
        table[v & 255] = min(out_min + 255, max(out_min, r))
    return table


def input_table(scale, zp):
    """pymicro-wakeword's input quantization for every frontend feature value below IN_TABLE: index u gives
    np.round(u * 0.0390625 / scale + zp) cast to int8 by numpy (which wraps: a very loud frame's top features come
    out negative in the reference, so they do here too)."""
    u = np.arange(IN_TABLE, dtype=np.float64) * FEATURE_SCALE
    q = np.round(u / float(np.float32(scale)) + zp).astype(np.int64)
    return (((q + 128) & 255) - 128).astype(np.int8).tobytes()


def cutoff_sum(cutoff, window):
    """The smallest sum of `window` uint8 probabilities whose mean (statistics.mean of value/256, as
    pymicro-wakeword averages) is above `cutoff`; the board detects when its window's sum reaches it."""
    for s in range(256 * window + 1):
        if float(Fraction(s, 256 * window)) > cutoff:
            return s
    return 256 * window + 1


def _parse(tfl, name):
    if len(tfl) > MAX_TFLITE_BYTES:
        raise ModelError("%s: %d bytes is too large for a wake model (at most %d)" % (name, len(tfl), MAX_TFLITE_BYTES))
    if len(tfl) < 8 or tfl[4:8] != b"TFL3":
        raise ModelError("%s: not a TFLite model (no TFL3 identifier): the file is damaged or of another kind" % name)
    try:
        m = tflite.Model.GetRootAsModel(tfl, 0)
        if m.SubgraphsLength() < 1:
            raise ValueError("no subgraph")
        for si in range(m.SubgraphsLength()):
            g = m.Subgraphs(si)
            for ti in range(g.TensorsLength()):
                _T(m, g, ti)
            for oi in range(g.OperatorsLength()):
                op = g.Operators(oi)
                m.OperatorCodes(op.OpcodeIndex())
    except Exception as e:       # the flatbuffers runtime raises struct/index/type errors on a damaged buffer
        raise ModelError("%s: the .tflite is damaged (%s: %s)" % (name, type(e).__name__, e))
    return m


def compile_model(tfl, config, name, rounding="tflite"):
    """The board model file for one model: bytes."""
    try:
        return Compiler(tfl, config, name, rounding).build()
    except ModelError:
        raise
    except (IndexError, ValueError, TypeError, KeyError, struct.error) as e:
        raise ModelError("%s: the .tflite is damaged or not a microWakeWord streaming model (%s: %s)"
                         % (name, type(e).__name__, e))
