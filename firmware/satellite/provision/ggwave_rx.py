# Sans-IO receiver for ggwave's "[DT] Fastest" protocol (id 8) on s16 PCM at 16 kHz: feed blocks,
# get a payload once one decodes. It owns no audio device, clock or LED; it only reports state.
#
# Protocol (ggwave src/ggwave.cpp; 48 kHz sender, 1024-sample frames, 46.875 Hz per bin):
#   start marker 16 frames: bins 24 + 2i + (i & 1), i = 0..15, all at once;
#   data: 3 frames per byte = exactly 1024 samples at 16 kHz; low nibble on bin 24 + v,
#         high nibble on bin 40 + v; bytes = RS(len; 2 parity) + RS(payload; ecc_len(n) parity);
#   end marker 16 frames: bins 24 + 2i + 1 - (i & 1).
# Receiver: 32 fixed-point Goertzel filters at the nominal tones over 64-sample sub-blocks
# (4 ms, 250 Hz wide, so a +-2 % clock error costs < 0.6 dB), phase-referenced to absolute time
# and kept in a ring; longer windows are coherent sums of sub-blocks, de-rotated for the
# sender/receiver clock ratio r (tones move by r, symbols last 1024/r samples). Idle: a marker
# search over 13 values of r; then r refined on the marker, symbol timing found on the length
# bytes (checked by their RS), tracked by an early/late gate, payload RS-decoded, end marker
# checked.
from micropython import const

import math
from array import array

from satellite.provision import rs as _rs

try:
    from satellite.provision import _goertzel_viper as _fast
except (ImportError, AttributeError, SyntaxError, ValueError, NotImplementedError, MemoryError):
    _fast = None
from satellite.provision import _goertzel_pure as _pure

MAX_PAYLOAD = const(140)        # ggwave kMaxLengthVariable: longest variable-length payload
RATE = const(16000)             # the I2S microphone rate this receiver is built for
PROTOCOL_ID = const(8)          # GGWAVE_PROTOCOL_DT_FASTEST

STATE_IDLE = const(0)           # listening, nothing heard
STATE_RECEIVING = const(1)      # marker heard; progress 0..99 tells how far
STATE_DONE = const(2)           # last transmission decoded (listening again)
STATE_FAILED = const(3)         # last transmission lost (listening again); reason in fail_code

_SUB = const(64)                # samples per sub-block
_NT = const(32)                 # tones (bins 24..55)
_RING = const(128)              # sub-blocks kept (512 ms)
_HOP = const(16)                # idle marker search every 16 sub-blocks (disjoint windows)
RING_BYTES = const(16384)       # the viper kernels' sub-block ring: _RING * 2 * _NT s16 (satellite.buffers)
_DWIN = const(16)               # idle marker window (1024 samples)
_NCAND = const(13)              # clock ratios tried while idle: 1 + (c - 6)/285 (+-2.1 %)
_NVOTE = const(3)               # low-SNR marker test: pair votes (start tone > partner) summed
                                # over the last 3 idle windows, per clock ratio
_VOTE_MIN = const(41)           # of 48 votes; noise alone gives 24 +- 3.5 (binomial), a marker
                                # at -5 dB 46..48, at -8 dB 40..46 (bench runs)
_MWIN = const(48)               # marker window for the fine clock estimate
_NFINE = const(17)              # fine clock ratios: coarse + (j - 8) * 0.0004
_SYNC_SPAN = const(8)           # data start searched at the estimate +- 8 sub-blocks (half a symbol)
_RISE_BACK = const(110)         # how far back the marker's rising edge is looked for
_RISE_WIN = const(16)           # window of the rising-edge profile
_RISE_STEP = 1.4                # the edge is in view if the marker level is 1.4 x the level
                                # before it (at -8 dB SNR a marker gives about 1.8)
_FOLLOW_MIN = const(12)         # following the marker: it goes on while >= 12 of 16 pairs vote
                                # for it (noise gives 8 +- 2)
_END_WIN = const(64)            # end-marker window: 64 of its 83.7..87.1 sub-blocks, one coherent
                                # sum (issue 16: a 32-sub-block one lost 12 of 250 trials at -8 dB with
                                # every data symbol right; 64 is the kernels' bound, 3 dB more)
_GUARD = const(98304)           # symbol window guard: 1.5 sub-blocks (Q16)
_Q = const(65536)
_MAX_SYM = const(3 + 140 + 56)  # length code + longest payload + its parity

_S_LISTEN = const(0)
_S_MARKER = const(1)
_S_SYNC = const(2)
_S_DATA = const(3)
_S_END = const(4)

FAIL_NONE = const(0)
FAIL_MARKER = const(1)          # start marker never ended
FAIL_LENGTH = const(2)          # length code not decodable / out of range
FAIL_SIGNAL = const(3)          # signal lost mid-way (too many weak symbols)
FAIL_END = const(4)             # no end marker where one was due
FAIL_RS = const(5)              # payload beyond the Reed-Solomon code's reach


class GgwaveError(Exception):
    """Bad use of the receiver (wrong rate, bad buffer); `code` names the problem."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def _q(v, scale):
    v = int(round(v * scale))
    if v > 32767:
        return 32767
    if v < -32767:
        return -32767
    return v


def _fill_rot(buf, off, r):
    # per-tone de-rotation e^{-j dw N} for clock ratio r, Q14
    for k in range(_NT):
        a = -2.0 * math.pi * (24 + k) * (r - 1.0) * 0.1875
        buf[off + 2 * k] = _q(math.cos(a), 16384)
        buf[off + 2 * k + 1] = _q(math.sin(a), 16384)


class GgwaveReceiver:
    """Feed s16 mono PCM at 16 kHz; `feed` returns the payload bytes when one decodes, else None.

    `state` is one of STATE_*; `progress` is 0..100 while receiving. Steady-state listening
    allocates nothing. `kernels` forces a filter-bank module (tests compare pure and viper). `ring`: a
    bytearray of at least RING_BYTES to use as the viper kernels' ring instead of allocating 16 KB (the
    runtime lends its jitter ring, idle in listening mode: no 16 KB block to find in a fragmented heap); its
    contents do not matter (every slot is written before it is read)."""

    def __init__(self, rate=RATE, kernels=None, ring=None):
        if rate != RATE:
            raise GgwaveError("rate", "GgwaveReceiver needs 16000 Hz input (got %r): resample or "
                              "configure the microphone at 16 kHz" % (rate,))
        k = kernels if kernels is not None else (_fast if _fast is not None else _pure)
        self._load = k.load
        self._gblock = k.gblock
        self._csum = k.csum
        self._coef = array("h", bytes(2 * _NT))
        self._cw = array("h", bytes(2 * (16 * _NT * 4)))
        for t in range(_NT):
            w = 2.0 * math.pi * (24 + t) * 3.0 / 1024.0
            self._coef[t] = int(round(2.0 * math.cos(w) * 2048))
            for tm in range(16):
                pa = -w * (63 + 64 * tm)
                pb = -w * (64 + 64 * tm)
                j = (tm * _NT + t) * 4
                self._cw[j] = _q(math.cos(pa), 8192)
                self._cw[j + 1] = _q(math.sin(pa), 8192)
                self._cw[j + 2] = _q(math.cos(pb), 8192)
                self._cw[j + 3] = _q(math.sin(pb), 8192)
        self._cand = array("h", bytes(2 * (_NCAND * 2 * _NT)))
        for c in range(_NCAND):
            _fill_rot(self._cand, c * 2 * _NT, 1.0 + (c - 6) / 285.0)
        self._rot = array("h", bytes(2 * (2 * _NT)))
        if k is _fast:
            # only the viper kernels touch these (ptr16): plain bytearrays, without the bytes() temporary that
            # doubles the peak of the 16 KB ring in listening mode on a small heap (docs/memory.md)
            self._stage = bytearray(2 * _SUB)
            self._ring = ring if ring is not None and len(ring) >= RING_BYTES else bytearray(RING_BYTES)
        else:
            self._stage = array("h", bytes(2 * _SUB))
            self._ring = array("h", bytes(2 * (_RING * 2 * _NT)))
        self._out = array("i", bytes(4 * 38))
        self._votes = bytearray(_NVOTE * _NCAND)   # ring of per-window pair votes, per ratio
        self._data = bytearray(_MAX_SYM)
        self._rs = _rs.RS()
        self.reset()

    def reset(self):
        """Forget everything heard; back to listening."""
        self.state = STATE_IDLE
        self.progress = 0
        self.fail_code = FAIL_NONE
        self.ratio = 1.0
        self._ns = 0            # samples in the stage
        self._tm = 0            # absolute sub-block index mod 16 (phase table row)
        self._w = 0             # ring slot of the next sub-block
        self._fill = 0
        self._hop = _HOP
        self._hits = 0
        self._listen()

    def _listen(self):
        self._st = _S_LISTEN
        self._hits = 0
        self._hop = _HOP
        self._vslot = 0
        self._vwin = 0
        v = self._votes
        for i in range(_NVOTE * _NCAND):
            v[i] = 0

    def _fail(self, code):
        self.state = STATE_FAILED
        self.fail_code = code
        self._listen()

    # -- input -------------------------------------------------------------------------------

    def feed(self, samples, n):
        """Process n s16 samples from `samples` (array('h') or little-endian bytes). Returns the
        payload (bytes) when a transmission completes in this block, else None."""
        if isinstance(samples, array):
            avail = len(samples)
        else:
            avail = len(samples) >> 1
        if n < 0 or n > avail:
            raise GgwaveError("buffer", "feed(): n=%d but the buffer holds %d samples" % (n, avail))
        got = None
        i = 0
        while i < n:
            m = _SUB - self._ns
            if m > n - i:
                m = n - i
            self._load(self._stage, self._ns, samples, i, m)
            self._ns += m
            i += m
            if self._ns == _SUB:
                self._ns = 0
                p = self._sub()
                if p is not None:
                    got = p
        return got

    def _sub(self):
        self._gblock(self._stage, self._coef, self._cw, self._tm, self._ring, self._w * 2 * _NT)
        self._tm = (self._tm + 1) & 15
        self._w += 1
        if self._w == _RING:
            self._w = 0
        if self._fill < _RING:
            self._fill += 1
        st = self._st
        if st == _S_LISTEN:
            self._hop -= 1
            if self._hop == 0:
                self._hop = _HOP
                if self._fill >= _DWIN:
                    self._detect()
            return None
        self._t += 1
        if st == _S_MARKER:
            self._marker()
        elif st == _S_SYNC:
            if self._t >= self._m1 + _SYNC_SPAN + 52:
                self._sync()
        if self._st == _S_DATA:
            return self._data_step()
        if self._st == _S_END:
            return self._end_step()
        return None

    def _slot(self, a):
        # ring slot of absolute sub-block a (a = 0 is the one that completed detection)
        return (self._r0 + a) % _RING

    # -- listening: marker search over clock ratios --------------------------------------------

    def _detect(self):
        out = self._out
        t0 = (self._w - _DWIN) % _RING
        best = -1
        bscore = 0
        bcount = 0
        votes = self._votes
        vo = self._vslot * _NCAND
        vbest = 0
        vc = 0
        for c in range(_NCAND):
            self._csum(self._ring, _RING, t0, _DWIN, self._cand, c * 2 * _NT, out)
            score = out[32] - 2 * out[33]
            if best < 0 or score > bscore:
                best = c
                bscore = score
                bcount = out[34]
            votes[vo + c] = out[36]
            v = 0
            for w in range(_NVOTE):
                v += votes[w * _NCAND + c]
            if v > vbest:
                vbest = v
                vc = c
        self._vslot += 1
        if self._vslot == _NVOTE:
            self._vslot = 0
        if self._vwin < _NVOTE:
            self._vwin += 1
        if bscore > 0 and bcount >= 12:
            self._hits += 1
            if self._hits >= 2:
                self._begin(best)
                return
        else:
            self._hits = 0
        if self._vwin == _NVOTE and vbest >= _VOTE_MIN:
            self._begin(vc)

    def _begin(self, c):
        self.state = STATE_RECEIVING
        self.progress = 0
        self.fail_code = FAIL_NONE
        self._st = _S_MARKER
        self._coarse = c
        self._r0 = (self._w - 1) % _RING
        self._t = 0
        self._low = 0
        for i in range(2 * _NT):
            self._rot[i] = self._cand[c * 2 * _NT + i]

    def _marker(self):
        # 8 sub-blocks after detection: locate the marker's rising edge in the ring (data starts
        # 16 frames = 85.33/r sub-blocks after the marker starts). Without an edge in view (the
        # receiver started mid-marker), fall back to following the marker until its pairs stop
        # winning.
        if self._t == 8 and self._rise():
            self._st = _S_SYNC
            return
        if self._t & 1 or self._t < 8:
            return
        out = self._out
        self._csum(self._ring, _RING, self._slot(self._t - _DWIN + 1), _DWIN, self._rot, 0, out)
        if out[36] < _FOLLOW_MIN:
            self._low += 1
            if self._low == 1:
                self._m1 = self._t - 4
            if self._low >= 2:
                self._st = _S_SYNC
                return
        else:
            self._low = 0
        if self._t > 100:
            self._fail(FAIL_MARKER)

    def _rise(self):
        # profile of start-tone magnitude over sliding windows; the edge position comes from the
        # area under the normalised profile (robust to noise, unbiased for a symmetric ramp)
        out = self._out
        first = self._t - self._fill + 1
        lo = self._t - _RISE_BACK
        if lo < first:
            lo = first
        n = self._t - _RISE_WIN + 1 - lo
        if n < 32:
            return 0
        prof = [0] * n
        for i in range(n):
            self._csum(self._ring, _RING, self._slot(lo + i), _RISE_WIN, self._rot, 0, out)
            prof[i] = out[32]
        floor = sum(prof[:8]) / 8.0
        top = sum(prof[n - 8:]) / 8.0
        if top < _RISE_STEP * floor:
            return 0                        # no quiet stretch before the marker in view
        area = 0.0
        for v in prof:
            f = (v - floor) / (top - floor)
            area += 0.0 if f < 0.0 else (1.0 if f > 1.0 else f)
        x = n - area                        # window start index where the profile crosses half
        r = 1.0 + (self._coarse - 6) / 285.0
        # window centre crosses half level at the ramp's midpoint (6.4/r sub-blocks in)
        start = lo + x + _RISE_WIN / 2.0 - 6.4 / r
        self._m1 = int(round(start + 85.3333 / r))
        return 1

    # -- clock ratio and symbol timing ----------------------------------------------------------

    def _refine(self):
        out = self._out
        r0 = 1.0 + (self._coarse - 6) / 285.0
        a = self._m1 - 6 - _MWIN
        if a < self._t - _RING + 1:
            a = self._t - _RING + 1
        vals = [0] * _NFINE
        for step in range(3):
            for j in range(_NFINE):
                _fill_rot(self._rot, 0, r0 + (j - 8) * 0.0004)
                self._csum(self._ring, _RING, self._slot(a), _MWIN, self._rot, 0, out)
                vals[j] = out[32] - out[33]
            jb = 0
            for j in range(1, _NFINE):
                if vals[j] > vals[jb]:
                    jb = j
            if 0 < jb < _NFINE - 1 or step == 2:
                break
            # the best ratio is at the edge of the fine range: the coarse pick was more than one
            # step off (a saturated pair vote at high SNR ties over several ratios), so move
            # the range there and search again (issue 16: 20 dB, -1 %: r came out 0.9968)
            r0 += (jb - 8) * 0.0004
        d = 0.0
        if 0 < jb < _NFINE - 1:
            y0, y1, y2 = vals[jb - 1], vals[jb], vals[jb + 1]
            den = y0 - 2 * y1 + y2
            if den < 0:
                d = 0.5 * (y0 - y2) / den
        r = r0 + (jb - 8 + d) * 0.0004
        self.ratio = r
        _fill_rot(self._rot, 0, r)
        self._P = int(round(16.0 / r * _Q))

    def _decide(self, s, shift):
        # decide the symbol starting at s (Q16 sub-blocks); sets _byte/_mag/_conf; returns 0 if
        # the window is unusable
        a = (s + _GUARD + _Q - 1) // _Q + shift
        b = (s + self._P - _GUARD) // _Q + shift
        n = b - a
        if n < 4 or a < self._t - _RING + 1 or b > self._t + 1:
            return 0
        out = self._out
        self._csum(self._ring, _RING, self._slot(a), n, self._rot, 0, out)
        lo = 0
        hi = 16
        slo = 0
        shi = 0
        for k in range(16):
            v = out[k]
            slo += v
            if v > out[lo]:
                lo = k
            v = out[16 + k]
            shi += v
            if v > out[hi]:
                hi = 16 + k
        self._byte = lo | ((hi - 16) << 4)
        self._mag = out[lo] + out[hi]
        self._conf = (out[lo] * 128) // (slo + 1) + (out[hi] * 128) // (shi + 1)
        self._lo = lo
        self._hi = hi
        return 1

    def _sync(self):
        self._refine()
        data = self._data
        best = []
        for off in range(-_SYNC_SPAN, _SYNC_SPAN + 1):
            s = (self._m1 + off) * _Q
            conf = 0
            ok = 1
            for j in range(3):
                if not self._decide(s + j * self._P, 0):
                    ok = 0
                    break
                conf += self._conf
            if ok:
                best.append((conf, off))
        best.sort()
        for i in range(len(best) - 1, -1, -1):
            s = (self._m1 + best[i][1]) * _Q
            for j in range(3):
                self._decide(s + j * self._P, 0)
                data[j] = self._byte
            if self._rs.decode(data, 0, 1, 2) >= 0 and 0 < data[0] <= MAX_PAYLOAD:
                self._start_data(s, data[0])
                return
        self._fail(FAIL_LENGTH)

    def _start_data(self, s, n):
        if n < 1 or n > MAX_PAYLOAD:
            self._fail(FAIL_LENGTH)
            return
        self._n = n
        self._ecc = _rs.ecc_len(n)
        self._nsym = 3 + n + self._ecc
        self._j = 3
        self._s = s + 3 * self._P
        self._weak = 0
        self._avg = 0
        for j in range(3):
            self._decide(s + j * self._P, 0)
            self._avg += self._mag // 3
        self._st = _S_DATA

    # -- payload ---------------------------------------------------------------------------------

    def _data_step(self):
        while self._j < self._nsym:
            s = self._s
            if (s + self._P - _GUARD) // _Q + 2 > self._t + 1:
                return None
            self._decide(s, 0)
            self._data[self._j] = self._byte
            mag = self._mag
            lo = self._lo
            hi = self._hi
            out = self._out
            if mag * 4 < self._avg:
                self._weak += 1
                if self._weak * 2 > self._ecc:
                    self._fail(FAIL_SIGNAL)
                    return None
            else:
                self._avg += (mag - self._avg) >> 3
            # early/late gate on the decided tones
            e = 0
            if self._decide(s, -1):
                me = out[lo] + out[hi]
                if self._decide(s, 1):
                    ml = out[lo] + out[hi]
                    e = (ml - me) // (((ml + me) >> 8) + 1)
            self._s = s + self._P + e * 48
            self._P += e
            self._j += 1
            self.progress = (self._j * 100) // (self._nsym + 4)
        self._st = _S_END
        return None

    def _end_step(self):
        a = self._s // _Q + 4
        if self._t < a + _END_WIN:
            return None
        out = self._out
        self._csum(self._ring, _RING, self._slot(a), _END_WIN, self._rot, 0, out)
        if out[35] < 8:
            self._fail(FAIL_END)
            return None
        if self._rs.decode(self._data, 3, self._n, self._ecc) < 0:
            self._fail(FAIL_RS)
            return None
        self.state = STATE_DONE
        self.progress = 100
        self._listen()
        return bytes(self._data[3:3 + self._n])
