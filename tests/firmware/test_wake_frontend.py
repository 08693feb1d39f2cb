# dual: cpython micropython
# Wake-word audio frontend (satellite.wake.frontend, issue 37 item 1): every uint16 feature equals
# pymicro-features 2.0.2's (TFLite-Micro's microfrontend, microWakeWord's) on the stored corpus (espeak-ng
# speech, silence, dither, noise, full-scale tones and squares, clipping, DC; tools/wake/gen_frontend_vectors.py
# wrote the reference features, tests/host/test_wake_frontend_ref.py checks them for drift), pure, viper and the
# C module _wake_fe_c (firmware/native/wake_fe.c: only the 32-bit builds have it, as the board image does; CPython
# and the 64-bit PyPI port have no C leg, test_wake_frontend_impl_is_c_then_viper_then_pure says so); the stages
# pure == viper == c on adversarial inputs the corpus does not reach; 0 B per steady 10 ms step.
from array import array

from mpsupport import IS_MICROPYTHON, mem_alloc_delta, raises

from satellite.wake import frontend as FE

try:
    from satellite.wake import _frontend_viper as V
except (ImportError, SyntaxError, NameError):
    V = None
try:
    import _wake_fe_c as C
except ImportError:
    C = None

_HERE = __file__.rpartition("/")[0] or "."
_CH = FE.CHANNELS


def ulaw_decode(b):
    """G.711 mu-law byte -> s16 (as tools/wake/gen_frontend_vectors.py decodes its speech segments)."""
    b = ~b & 0xFF
    t = (((b & 0x0F) << 3) + 0x84) << ((b & 0x70) >> 4)
    return 0x84 - t if b & 0x80 else t - 0x84


def _inflate(blob):
    try:
        import zlib
        return zlib.decompress(blob)
    except ImportError:
        import deflate
        import io
        return deflate.DeflateIO(io.BytesIO(blob), deflate.ZLIB).read()


def _u16(raw, pos):
    return raw[pos] | (raw[pos + 1] << 8)


_SEGS = []


def segments():
    """[(name, s16 LE audio, features as array('H'))] of tests/firmware/data/wake_frontend.z."""
    if _SEGS:
        return _SEGS
    with open(_HERE + "/data/wake_frontend.z", "rb") as f:
        raw = _inflate(f.read())
    assert raw[:4] == b"MWF1"
    pos = 6
    for _ in range(_u16(raw, 4)):
        n = raw[pos]
        name = str(raw[pos + 1:pos + 1 + n], "ascii")
        pos += 1 + n
        coding = raw[pos]
        steps = _u16(raw, pos + 1)
        pos += 3
        if coding == 0:
            pcm = raw[pos:pos + 320 * steps]
            pos += 320 * steps
        else:
            pcm = bytearray(320 * steps)
            for i in range(160 * steps):
                v = ulaw_decode(raw[pos + i]) & 0xFFFF
                pcm[2 * i] = v & 0xFF
                pcm[2 * i + 1] = v >> 8
            pos += 160 * steps
        nf = _u16(raw, pos)
        feats = array("H", raw[pos + 2:pos + 2 + 2 * _CH * nf])
        pos += 2 + 2 * _CH * nf
        _SEGS.append((name, pcm, feats))
    assert pos == len(raw)
    return _SEGS


def _run(fe, pcm, want, name):
    """Feed pcm 10 ms at a time; compare every feature of every frame with want; returns frames compared."""
    out = array("H", bytes(2 * _CH))
    frames = 0
    for i in range(len(pcm) // FE.STEP_BYTES):
        if fe.step(pcm, i * FE.STEP_BYTES, out):
            for j in range(_CH):
                if out[j] != want[frames * _CH + j]:
                    raise AssertionError("%s frame %d channel %d: %d, reference %d" % (
                        name, frames, j, out[j], want[frames * _CH + j]))
            frames += 1
        else:
            assert i < 2, (name, i)                # a window is full from the third step on
    assert frames * _CH == len(want), (name, frames)
    return frames


def _corpus(impl, reuse):
    fe = FE.Frontend(impl=impl)
    assert fe.impl == impl
    total = speech = 0
    for name, pcm, feats in segments():
        if reuse:
            fe.reset()
        else:
            fe = FE.Frontend(impl=impl)
        n = _run(fe, pcm, feats, name)
        total += n
        if name.startswith("speech"):
            speech += n
    assert total >= 1000 and speech >= 400, (total, speech)


def test_wake_frontend_impl_is_c_then_viper_then_pure():
    # the fast path must really be exercised (a silent fallback would hide a broken stage): C where the
    # interpreter has it built in (the 32-bit builds, like the board image), viper on the 64-bit PyPI port
    if IS_MICROPYTHON:
        import sys
        assert V is not None
        want = "c" if sys.maxsize < (1 << 32) else "viper"
        assert FE.IMPL == want and FE.Frontend().impl == want and (C is not None) == (want == "c")
    else:
        assert FE.IMPL == "pure" and C is None
    assert FE.Frontend(fast=False).impl == "pure"
    assert "not in this interpreter" in str(raises(ValueError, FE.Frontend, True, "nonesuch"))


def test_wake_frontend_pure_equals_pymicro_features_on_corpus():
    _corpus("pure", False)


def test_wake_frontend_viper_equals_pymicro_features_on_corpus():
    if V is None:
        assert not IS_MICROPYTHON
        return                                     # CPython: no viper (the pure leg above is the proof)
    _corpus("viper", True)


def test_wake_frontend_c_equals_pymicro_features_on_corpus():
    if C is None:
        return                                     # no C module here (test_wake_frontend_impl_is_c_then_...)
    _corpus("c", True)


def test_wake_frontend_reset_starts_a_new_stream():
    name, pcm, feats = segments()[0]
    fe = FE.Frontend()
    out = array("H", bytes(2 * _CH))
    for i in range(7):                             # half a window and a noise estimate of another stream
        fe.step(segments()[4][1], i * FE.STEP_BYTES, out)
    fe.reset()
    _run(fe, pcm, feats, name)


def _lcg(seed):
    x = [seed]

    def nxt():
        x[0] = (x[0] * 1103515245 + 12345) & 0x7FFFFFFF
        return x[0]
    return nxt


def test_wake_frontend_stages_viper_equal_pure_on_extremes():
    """Stage by stage on inputs beyond the corpus: random and saturated FFT inputs, energies up to 2**31,
    filterbank sums above 2**32 (Sqrt64), estimates in all 32 bits (PCAN's every interval), zero."""
    if V is None:
        assert not IS_MICROPYTHON
        return
    _extremes(V)


def test_wake_frontend_stages_c_equal_pure_on_extremes():
    if C is None:
        return                                     # no C module here (test_wake_frontend_impl_is_c_then_...)
    _extremes(C)


def _extremes(V):
    from satellite.wake import _frontend_tables as T
    rnd = _lcg(37)
    tw = array("h", T.TW)
    stw = array("h", T.STW)
    w = array("h", T.W)
    uw = array("h", T.UW)
    for trial in range(12):
        x = array("h", bytes(1024))
        for i in range(480):
            r = rnd()
            x[i] = (-32768, 32767, 0)[r % 3] if trial % 3 == 0 else ((r >> 8) & 0xFFFF) - 32768
        for shift in (0, 3, 15):
            cp = array("h", bytes(1024))
            cv = array("h", bytes(1024))
            FE.fft(x, shift, cp, tw)
            V.fft(x, shift, cv, tw)
            assert cp == cv, (trial, shift)
            ep = array("i", bytes(1024))
            ev = array("i", bytes(1024))
            FE.energy(cp, stw, ep)
            V.energy(cv, stw, ev)
            assert ep == ev, (trial, shift)
        e = array("i", bytes(1024))
        for i in range(256):
            r = rnd()
            e[i] = (0x7FFFFFFF, 0, r)[trial % 3] if i % 5 == 0 else (r >> (trial % 31))
        sp = array("i", bytes(4 * _CH))
        sv = array("i", bytes(4 * _CH))
        for shift in (0, 7, 15):
            FE.filterbank(e, w, uw, T.EDGES, sp, shift)
            V.filterbank(e, w, uw, T.EDGES, sv, shift)
            assert sp == sv, (trial, shift)
        est_p = array("H", bytes(4 * _CH))
        for i in range(2 * _CH):
            est_p[i] = (rnd() >> (rnd() % 31)) & 0xFFFF
        est_v = array("H", est_p)
        sig = array("i", bytes(4 * _CH))
        op = array("H", bytes(2 * _CH))
        ov = array("H", bytes(2 * _CH))
        for rep in range(3):
            for j in range(_CH):
                sig[j] = (rnd() >> (7 + (j % 24))) if rep else (0, 1, 2, (1 << 24) - 1)[j % 4]
            FE.post(sig, est_p, T.GAIN, T.LOG, op)
            V.post(sig, est_v, T.GAIN, T.LOG, ov)
            assert op == ov and est_p == est_v, (trial, rep)


def _steady(fe, pcm, out, n):
    i = 0
    while i < n:
        fe.step(pcm, i * 320, out)
        i += 1


def test_wake_frontend_step_allocates_nothing():
    pcm = segments()[0][1]
    fe = FE.Frontend()
    out = array("H", bytes(2 * _CH))
    _steady(fe, pcm, out, 5)
    d = mem_alloc_delta(_steady, fe, pcm, out, 20)
    if IS_MICROPYTHON:
        assert fe.impl in ("c", "viper")
        assert d == 0, d
    if C is not None:                              # the C stages too, whichever is the default
        fe = FE.Frontend(impl="c")
        _steady(fe, pcm, out, 5)
        assert mem_alloc_delta(_steady, fe, pcm, out, 20) == 0
    if V is not None:
        fe = FE.Frontend(impl="viper")
        _steady(fe, pcm, out, 5)
        assert mem_alloc_delta(_steady, fe, pcm, out, 20) == 0


def test_wake_frontend_refuses_short_buffers_before_touching_state():
    fe = FE.Frontend()
    out = array("H", bytes(2 * _CH))
    raises(ValueError, fe.step, bytes(319), 0, out)
    raises(ValueError, fe.step, bytes(640), 321, out)
    raises(ValueError, fe.step, bytes(640), -1, out)
    raises(ValueError, fe.step, bytes(320), 0, array("H", bytes(2 * _CH - 2)))
    name, pcm, feats = segments()[0]
    _run(fe, pcm, feats, name)                     # nothing was consumed by the refused calls


def test_wake_frontend_takes_the_mic_path_at_any_offset():
    """As capture hands audio over: I2S frames (here 32-bit stereo, the INMP441 layout, left slot) through
    audio.mic_to_s16 at unity gain into a buffer at an odd offset, then step() from there; same features,
    and the conversion plus the step allocate nothing."""
    from satellite import audio
    name, pcm, feats = segments()[0]
    fmt = audio.fmt_code(32, 2, audio.SEL_LEFT, audio.MIC_SHIFT)
    i2s = bytearray(8 * 160)
    buf = bytearray(3 + FE.STEP_BYTES)
    fe = FE.Frontend()
    out = array("H", bytes(2 * _CH))

    def one(i):
        j = 0
        while j < 160:                     # s16 sample -> the top half of a 32-bit left slot, right slot 0
            o = 8 * j
            i2s[o + 2] = pcm[i * 320 + 2 * j]
            i2s[o + 3] = pcm[i * 320 + 2 * j + 1]
            j += 1
        audio.mic_to_s16(buf, 3, i2s, 160, fmt, 1 << audio.MIC_SHIFT)
        return fe.step(buf, 3, out)

    frames = 0
    for i in range(len(pcm) // FE.STEP_BYTES):
        if one(i):
            assert list(out) == list(feats[frames * _CH:(frames + 1) * _CH]), (name, frames)
            frames += 1
    assert frames * _CH == len(feats)
    d = mem_alloc_delta(one, 5)
    if IS_MICROPYTHON:
        assert d == 0, d


def test_wake_frontend_c_refuses_buffers_shorter_than_its_indices():
    # the C stages trust nothing: every buffer is checked against the indices the stage uses, before it runs
    if C is None:
        return                                     # no C module here (test_wake_frontend_impl_is_c_then_...)
    from satellite.wake import _frontend_tables as T
    h = array("h", bytes(960))
    hann = array("h", T.HANN)
    assert "x holds" in str(raises(ValueError, C.window, h, hann, array("h", bytes(958))))
    assert "src holds" in str(raises(ValueError, C.push, h, 0, bytes(320), 1))
    assert "hist holds" in str(raises(ValueError, C.push, h, 321, bytes(320), 0))
    x = array("h", bytes(1024))
    c = array("h", bytes(1024))
    tw = array("h", T.TW)
    assert "shift" in str(raises(ValueError, C.fft, x, 16, c, tw))
    assert "tw holds" in str(raises(ValueError, C.fft, x, 0, c, array("h", bytes(758))))
    e = array("i", bytes(1024))
    sig = array("i", bytes(160))
    w, uw = array("h", T.W), array("h", T.UW)
    falling = bytearray(T.EDGES)
    falling[10], falling[11] = 0, 0
    assert "falls" in str(raises(ValueError, C.filterbank, e, w, uw, bytes(falling), sig, 0))
    assert "e holds" in str(raises(ValueError, C.filterbank, array("i", bytes(800)), w, uw, T.EDGES, sig, 0))
    assert "gain holds" in str(raises(ValueError, C.post, sig, array("H", bytes(160)), T.GAIN[:-1], T.LOG,
                                      array("H", bytes(80))))
    assert "log holds" in str(raises(ValueError, C.post, sig, array("H", bytes(160)), T.GAIN, T.LOG[:-3],
                                     array("H", bytes(80))))
    assert list(h) == [0] * 480 and list(c) == [0] * 512 and list(sig) == [0] * 40


def test_wake_frontend_c_steady_step_is_one_call_equal_to_the_stages():
    # issue 37's speed: the C path's steady 10 ms step is one call (_wake_fe_c.step), not six from bytecode; its
    # features equal the six stage calls' (and the corpus test above holds it to pymicro-features)
    if C is None:
        return                                     # no C module here (test_wake_frontend_impl_is_c_then_...)
    name, pcm, feats = segments()[0]
    whole = FE.Frontend(impl="c")
    assert whole._whole is C.step
    staged = FE.Frontend(impl="c")
    staged._whole = None                           # the six stage calls, as before
    a, b = array("H", bytes(2 * _CH)), array("H", bytes(2 * _CH))
    for i in range(len(pcm) // FE.STEP_BYTES):
        assert whole.step(pcm, i * FE.STEP_BYTES, a) == staged.step(pcm, i * FE.STEP_BYTES, b)
        assert a == b, (name, i)
    # the whole step trusts nothing either: a short buffer or a short tuple is refused before anything is written
    bufs = list(whole._bufs)
    hist = array("h", whole._hist)
    for j, short in ((0, array("h", bytes(958))), (6, array("i", bytes(1020))), (12, FE.T.GAIN[:-1])):
        bad = list(bufs)
        bad[j] = short
        raises(ValueError, C.step, tuple(bad), pcm, 0, a)
    raises(ValueError, C.step, tuple(bufs[:-1]), pcm, 0, a)
    raises(ValueError, C.step, tuple(bufs), pcm, len(pcm) - 319, a)
    assert whole._hist == hist
