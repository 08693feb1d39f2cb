"""A microWakeWord model's streaming path without the per-feature Python: the same probabilities, cheaper.

Responsible for: ``MicroStream``, which runs a ``pymicro_wakeword.MicroWakeWord`` (the library loads the model,
builds the interpreter and reads its quantisation) over ``pymicro_features``' C frontend exactly as the library's
``MicroWakeWordFeatures.process_streaming`` + ``MicroWakeWord.process_streaming_prob`` do — the same 10 ms frontend
steps, the same quantisation expression, ``stride`` features per inference, the model's ``sliding_window_size`` and
``probability_cutoff`` — but keeps the window's mean as a running exact sum (the library's ``statistics.mean``
adds the window as Fractions on every inference), quantises a whole batch's features in one numpy expression,
copies into and out of the tensors through buffers made once, and after a hit starts a fresh interpreter on the
model already loaded instead of reading the file again. tests/host/speech/test_microword.py proves the
probabilities equal the library's, inference by inference, on real speech, through hits. ``open_stream`` falls
back to ``LibraryStream`` (the library's own per-feature path: the same results, about twice the CPU) when the
installed pymicro-wakeword lacks an internal ``MicroStream`` leans on (another release), rather than failing.
Not for: choosing an engine or the ``Hit`` bookkeeping (speech/wakeword.py), where detectors run (core/spotting.py).
"""
import collections
import ctypes

import numpy as np

#: 10 ms of 16 kHz s16le: what the library hands the frontend per call (pymicro_wakeword.BYTES_PER_CHUNK).
CHUNK_BYTES = 320


#: What MicroStream reads from a loaded ``MicroWakeWord`` besides the library's public API (pymicro-wakeword 2.5).
INTERNALS = ("lib", "model", "interpreter", "input_tensor", "output_tensor", "stride", "sliding_window_size",
             "probability_cutoff", "input_scale", "input_zero_point", "input_dtype", "output_scale",
             "output_zero_point", "output_dtype")


def open_stream(ww, features_factory):
    """A stream over the loaded model ``ww``: MicroStream when the library has what it leans on, else LibraryStream
    (``features_factory()`` -> the library's ``MicroWakeWordFeatures``)."""
    try:
        import micro_features_cpp  # noqa: F401
        if all(hasattr(ww, a) for a in INTERNALS):
            return MicroStream(ww)
    except ImportError:
        pass
    return LibraryStream(ww, features_factory())


class LibraryStream:
    """The library's own streaming path behind MicroStream's ``run``/``reset``/``close`` (the fallback)."""

    def __init__(self, ww, features):
        self.ww, self.fe = ww, features

    def run(self, data, probs=None):
        for k, f in enumerate(self.fe.process_streaming(data)):
            p = self.ww.process_streaming_prob(f)
            if probs is not None:
                probs.append(p if p is not None else 0.0)
            if p is not None and p > self.ww.probability_cutoff:
                return k
        return -1

    def reset(self):
        self.ww.reset()                     # the library reloads the model file
        self.fe.reset()

    def close(self):
        self.ww.close()


class MicroStream:
    """One stream through one microWakeWord model: ``run(data)`` -> index of the feature (counted from this
    call's first) whose inference crossed the cutoff, or -1; ``reset()`` after a hit (the library's
    ``MicroWakeWord.reset`` + ``MicroWakeWordFeatures.reset``); ``close()``."""

    def __init__(self, ww):
        from micro_features_cpp import create_frontend, process_samples, reset_frontend
        self.ww, self.lib = ww, ww.lib
        self._process, self._reset_frontend = process_samples, reset_frontend
        self._frontend = create_frontend()
        self.stride, self.window, self.cutoff = ww.stride, ww.sliding_window_size, ww.probability_cutoff
        self._in_scale, self._in_zero = ww.input_scale, ww.input_zero_point
        self._in_dtype = np.dtype(ww.input_dtype)
        if self.lib.TfLiteTensorByteSize(ww.output_tensor) != np.dtype(ww.output_dtype).itemsize:
            raise ValueError("microWakeWord model %s: one output probability expected" % ww.id)
        # The library dequantises the output code as (code.astype(float32) - zero_point) * scale: that very
        # expression over every code, as Python floats (its .item()) and as exact integers over one power of two,
        # so a window's sum is exact and sum / (denominator * window) is the correctly rounded mean, which is
        # what statistics.mean returns (exact Fractions, then float()).
        codes = np.arange(256, dtype=np.uint8).view(ww.output_dtype)
        probs = [float(p) for p in (codes.astype(np.float32) - ww.output_zero_point) * ww.output_scale]
        ratios = [p.as_integer_ratio() for p in probs]
        den = max(d for _, d in ratios)
        self._num = [n * (den // d) for n, d in ratios]
        self._den_window = den * self.window
        self._out = (ctypes.c_uint8 * 1)()
        self._out_ptr = ctypes.addressof(self._out)
        self._buf = b""                    # audio not yet stepped by the frontend (under 10 ms)
        self._rows = []                    # features waiting for a stride
        self._codes = collections.deque()  # the window's output codes
        self._sum = 0                      # sum of self._num[code] over the window
        self._tensors()

    def _tensors(self):
        ww, lib = self.ww, self.lib
        self._interp = ww.interpreter
        self._input = ww.input_tensor
        self._output = ww.output_tensor
        self._in_bytes = lib.TfLiteTensorByteSize(self._input)

    def features(self, data):
        """The frontend's features for ``data`` (after what earlier calls left), as the library steps it."""
        buf = self._buf + data if self._buf else data
        process, fe, out = self._process, self._frontend, []
        i, n = 0, len(buf)
        while i + CHUNK_BYTES <= n:
            f, read = process(fe, buf[i:i + CHUNK_BYTES])
            if not read:                       # never seen; the library's loop would spin on it forever
                break
            i += read * 2
            if f:
                out.append(f)
        self._buf = buf[i:]
        return out

    def run(self, data, probs=None):
        """Feed ``data`` (16 kHz s16le): -> the index among this call's features of the first whose inference
        crossed the cutoff (then call ``reset()``: what followed it is not run), or -1. ``probs`` (a list): gets
        what ``process_streaming_prob`` returns per feature, up to the hit."""
        feats = self.features(data)
        rows = self._rows + feats if self._rows else feats
        stride = self.stride
        groups = len(rows) // stride
        if not groups:
            self._rows = rows
            if probs is not None:
                probs.extend([0.0] * len(feats))
            return -1
        used = groups * stride
        # the library's quantisation (np.round(features / input_scale + input_zero_point).astype(dtype)), per row
        q = np.round(np.array(rows[:used], dtype=np.float64) / self._in_scale + self._in_zero).astype(self._in_dtype)
        self._rows = rows[used:]
        before = len(rows) - len(feats)      # features carried from the last call
        base, width = q.ctypes.data, q.strides[0] * stride
        if width != self._in_bytes:
            raise ValueError("microWakeWord model %s: input tensor is %d bytes, %d features make %d" % (
                self.ww.id, self._in_bytes, stride, width))
        lib, interp, inp, outp = self.lib, self._interp, self._input, self._output
        out, out_ptr, nums, codes, window = self._out, self._out_ptr, self._num, self._codes, self.window
        seen = [0.0] * len(feats) if probs is not None else None
        hit = -1
        for g in range(groups):
            lib.TfLiteTensorCopyFromBuffer(inp, base + g * width, width)
            lib.TfLiteInterpreterInvoke(interp)
            lib.TfLiteTensorCopyToBuffer(outp, out_ptr, 1)
            code = out[0]
            codes.append(code)
            self._sum += nums[code]
            if len(codes) > window:
                self._sum -= nums[codes.popleft()]
            elif len(codes) < window:
                continue                               # the library's 0.0 until the window is full
            mean = self._sum / self._den_window
            k = (g + 1) * stride - 1 - before          # this feature's index among this call's
            if seen is not None:
                seen[k] = mean
            if mean > self.cutoff:
                hit = k
                if seen is not None:
                    del seen[k + 1:]
                break
        if seen is not None:
            probs.extend(seen)
        return hit

    def reset(self):
        """After a hit: the frontend, the stride and the window start afresh, and a fresh interpreter on the loaded
        model (the library reads the model file again for that: ``MicroWakeWord.reset``)."""
        self._buf, self._rows, self._sum = b"", [], 0
        self._codes.clear()
        self._reset_frontend(self._frontend)
        ww, lib = self.ww, self.lib
        lib.TfLiteInterpreterDelete(ww.interpreter)
        ww.interpreter = lib.TfLiteInterpreterCreate(ww.model, None)
        lib.TfLiteInterpreterAllocateTensors(ww.interpreter)
        ww.input_tensor = lib.TfLiteInterpreterGetInputTensor(ww.interpreter, 0)
        ww.output_tensor = lib.TfLiteInterpreterGetOutputTensor(ww.interpreter, 0)
        self._tensors()

    def close(self):
        self.ww.close()
