# Fuzz targets over the satellite firmware: seeded structure-aware generators and the executors that classify each input.
# Written in the MicroPython subset: it runs inside the real `micropython` unix port (tools/fuzz/mp_main.py,
# mutations generated in-process, so no process per input) and on CPython (the short pytest budget, the
# atheris pass, fixture replay). It never does I/O beyond what its caller hands it.
#
# An input is a RECORD (bytes) that fully determines one execution, so every finding can be saved as a
# fixture and replayed on both interpreters:
#   fw_frame    b0 limit mode | b1 feed step (0 = whole) | frame stream
#   fw_noise    b0 kind (0 transport, 1 IK handshake) | b1 feed step | b2 rx buffer mode | TCP bytes
#   fw_session  b0 scenario | records u16be length + Envelope bytes (each decoded, then fed to the session)
#
# Outcome classes (docs/fuzzing.md): every execution returns an outcome string. Allowed endings are
# "decoded..." / "oversize" / "need_more" (the input was consumed), "close:<Class>:<code>" (a typed error
# that the runtime turns into a clean connection close), "error:<code>" / "event:<Class>" (the session
# answered or acted). Anything else raises Crash (an uncaught exception, an INTERNAL codec error, a codec
# round trip that fails, a reader that stops making progress, a spec rule broken by the answer).
import sys

from micropython import const    # CPython: the importer runs alabama.mpcompat.install() first

from satellite.wire import frame as F
from satellite.wire import pb, pbtable
from satellite.wire import alabama_v1 as v1
from satellite import session as S
from satellite.noise import state as NS
from satellite.noise import transport as NT

MP = sys.implementation.name == "micropython"

_M32 = const(0xFFFFFFFF)
_STR_CAP = const(48)     # generated strings/bytes stay short unless a bound is being probed
_MAX_DEPTH = const(4)    # generated sub-message nesting
_FRAME_BUF = const(4106)  # the fw_frame reader's buffer: 4096 bytes of room + PREFIX_MAX_BYTES
_NOISE_SMALL_RX = const(600)
_MAX_PIECES = const(300)    # feed pieces per input at most


class Crash(Exception):
    """An input ended in a way no outcome class allows; `kind` names the class of failure."""

    def __init__(self, kind, detail):
        super().__init__(kind + ": " + detail)
        self.kind = kind
        self.detail = detail


# ---------------------------------------------------------------------------------------------
# Deterministic randomness: xorshift32, one independent stream per (seed, input index)

class Rng:
    def __init__(self, seed, index=0):
        s = ((seed * 0x9E3779B1) ^ (index * 0x85EBCA77) ^ 0x27D4EB2F) & _M32
        self.s = s or 0x1234567
        for _ in range(3):
            self.u32()

    def u32(self):
        s = self.s
        s ^= (s << 13) & _M32
        s ^= s >> 17
        s ^= (s << 5) & _M32
        self.s = s
        return s

    def below(self, n):
        return self.u32() % n

    def pick(self, seq):
        return seq[self.u32() % len(seq)]

    def bytes(self, n):
        out = bytearray(n)
        for i in range(n):
            out[i] = self.u32() & 0xFF
        return out


# ---------------------------------------------------------------------------------------------
# Structure-aware protobuf generation from the codec's own field tables

def put_varint(out, v):
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _scalar(r, t):
    """A varint value for type code t: usually small, sometimes an edge of the type or beyond it."""
    k = r.below(16)
    if t == 7:  # bool
        return r.below(2) if k else 2
    if k < 9:
        return r.below(8)
    if k < 12:
        return r.u32()
    if k == 12:
        return _M32
    if k == 13:
        return _M32 + 1 + r.below(1000)          # over 32 bits: VARINT_RANGE for uint32
    if k == 14:
        return (1 << 64) - 1 - r.below(5)        # a sign-extended negative (10 bytes)
    return 0x7FFFFFFF


def _blob(r, f, text):
    ms = f[6]
    k = r.below(32)
    if ms and k == 0 and (ms <= 4096 or r.below(16) == 0):
        n = ms + 1                                # one over the bound: OVER_BOUND
    elif ms and k == 1 and ms <= 4096:
        n = ms
    else:
        n = r.below(_STR_CAP if not ms or ms > _STR_CAP else ms + 1)
    if n > 256:   # long values: the length is what matters; keep generation cheap
        out = bytearray(b"a" * n) if text else bytearray(n)
        out[r.below(n)] = r.u32() & 0xFF
        return out
    if text and r.below(8):
        out = bytearray(n)
        for i in range(n):
            out[i] = 0x61 + (r.u32() % 26)
        return out
    return r.bytes(n)


def _value(r, f, out, depth):
    """Append one encoded value (no key) of field f."""
    t = f[2]
    if t <= 8:
        put_varint(out, _scalar(r, t))
    elif t <= 10:
        out.extend(r.bytes(4))
    elif t <= 12:
        out.extend(r.bytes(8))
    else:
        if t == 15:
            sub = bytearray()
            if depth < _MAX_DEPTH:
                gen_msg(r, f[4], sub, depth + 1)
        else:
            sub = _blob(r, f, t == 13)
        put_varint(out, len(sub))
        out.extend(sub)


def _field(r, f, out, depth):
    num = f[0]
    t = f[2]
    rep = f[3]
    if not rep:
        wt = 0 if t <= 8 else (5 if t <= 10 else (1 if t <= 12 else 2))
        put_varint(out, (num << 3) | wt)
        _value(r, f, out, depth)
        return
    mc = f[7]
    n = r.below(4)
    if mc and r.below(64) == 0:
        n = mc + 1
    if rep == 2:  # packed scalars: one length-delimited run
        sub = bytearray()
        for _ in range(n):
            _value(r, f, sub, depth)
        put_varint(out, (num << 3) | 2)
        put_varint(out, len(sub))
        out.extend(sub)
        return
    wt = 0 if t <= 8 else (5 if t <= 10 else (1 if t <= 12 else 2))
    for _ in range(n):
        put_varint(out, (num << 3) | wt)
        _value(r, f, out, depth)


def gen_msg(r, cls, out, depth=0):
    """Append a random, mostly valid encoding of message cls (fields in order, one arm per oneof)."""
    arms = {}
    for f in pbtable.fields(cls):   # the long form (num, name, type, rep, sub, oneof, max_size, max_count, key)
        o = f[5]
        if o is not None:
            if o not in arms:
                arms[o] = []
            arms[o].append(f)
            continue
        if r.below(3):
            _field(r, f, out, depth)
    for o in arms:
        if r.below(4):
            _field(r, r.pick(arms[o]), out, depth)


ARMS = tuple(f for f in pbtable.fields(v1.Envelope) if f[5] == "op")
ARM_BY_NAME = {}
for _f in ARMS:
    ARM_BY_NAME[_f[1]] = _f


def gen_envelope(r, id, arm=None):
    """Envelope bytes: id then one arm (by name; None: random, sometimes an unknown arm number)."""
    out = bytearray()
    if id or r.below(8) == 0:
        out.append(0x08)
        put_varint(out, id)
    if arm is None and r.below(24) == 0:
        num = 31 + r.below(200)  # an arm from a newer peer (R2.2-b)
        put_varint(out, (num << 3) | 2)
        body = r.bytes(r.below(12))
        put_varint(out, len(body))
        out.extend(body)
        return out
    f = ARM_BY_NAME[arm] if arm is not None else r.pick(ARMS)
    _field(r, f, out, 1)
    return out


_INTERESTING = b"\x00\x01\x7f\x80\xff\x08\x10\x12\x1a\x42"


def mutate_pb(r, buf):
    """1-3 protobuf-aware mutations of bytearray buf; returns the mutated bytearray (maybe a new one)."""
    for _ in range(1 + r.below(3)):
        n = len(buf)
        k = r.below(12)
        p = r.below(n + 1)
        if k == 0 and n:
            buf[p % n] ^= 1 << r.below(8)
        elif k == 1 and n:
            buf[p % n] = r.pick(_INTERESTING)
        elif k == 2:  # unknown field of any wire type, including groups and the invalid 6/7
            wt = r.below(8)
            ins = bytearray()
            put_varint(ins, ((r.pick((31, 32, 63, 100, 4095, 536870911, 0)) << 3) | wt))
            if wt == 0:
                put_varint(ins, r.u32())
            elif wt == 1:
                ins.extend(r.bytes(8))
            elif wt == 5:
                ins.extend(r.bytes(4))
            elif wt == 2:
                b = r.bytes(r.below(6))
                put_varint(ins, len(b))
                ins.extend(b)
            buf = buf[:p] + ins + buf[p:]
        elif k == 3:  # an over-long varint
            buf = buf[:p] + b"\xff" * (9 + r.below(3)) + b"\x01" + buf[p:]
        elif k == 4:
            buf = buf[:p]
        elif k == 5 and n:
            q = p + 1 + r.below(8)
            buf = buf[:p] + buf[q:]
        elif k == 6 and n:
            q = p + 1 + r.below(16)
            buf = buf[:p] + buf[p:q] + buf[p:]
        elif k == 7:  # a known arm with a huge or off-by-some length
            ins = bytearray()
            put_varint(ins, (r.pick(ARMS)[0] << 3) | 2)
            put_varint(ins, r.pick((_M32, 0x7FFFFFFF, 65536, 1000, n + 1)))
            buf = buf[:p] + ins + buf[p:]
        elif k == 8:  # an unknown oneof arm after or before the known one
            ins = bytearray()
            put_varint(ins, ((31 + r.below(100)) << 3) | 2)
            b = r.bytes(r.below(5))
            put_varint(ins, len(b))
            ins.extend(b)
            if r.below(2):
                buf.extend(ins)
            else:
                buf = ins + buf
        elif k == 9:
            buf = buf[:p] + r.bytes(1 + r.below(6)) + buf[p:]
        elif k == 10 and n:  # change the wire type of the byte at p (often a key)
            buf[p % n] = (buf[p % n] & 0xF8) | r.below(8)
        elif k == 11:  # nested length-delimited run: the same arm inside itself
            f = r.pick(ARMS)
            ins = bytearray()
            inner = bytearray(buf)
            put_varint(ins, (f[0] << 3) | 2)
            put_varint(ins, len(inner))
            ins.extend(inner)
            buf = ins
    return buf


# ---------------------------------------------------------------------------------------------
# Frames

def _prefix(r, out, header_len, tail_len, limit):
    """Append total_len and header_len varints: usually right, sometimes wrong the way a fuzzer likes."""
    total = F.frame_total_len(header_len, tail_len)
    hl = header_len
    k = r.below(24)
    pad_t = pad_h = 0
    if k == 0:
        total += r.pick((-3, -2, -1, 1, 2, 7))
    elif k == 1:
        total = r.pick((0, 1, _M32, 0x0FFFFFFF, F.HANDSHAKE_CEILING, F.HANDSHAKE_CEILING - 2,
                        F.DEFAULT_MAX_FRAME_BYTES + 1, limit, limit + 1))
    elif k == 2:
        hl = total + r.below(3)                 # header_len over total_len
    elif k == 3:
        pad_t = 1 + r.below(5)                  # non-minimal (or over-long) varints
    elif k == 4:
        pad_h = 1 + r.below(5)
    elif k == 5:
        out.extend(b"\xff\xff\xff\xff\xff\x01")  # a 6-byte total_len
    if total < 0:
        total = 0
    _padded(out, total, pad_t)
    _padded(out, hl, pad_h)


def _padded(out, v, pad):
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    if pad:
        out.append(v | 0x80)
        for _ in range(pad - 1):
            out.append(0x80)
        out.append(0)
    else:
        out.append(v)


_STEPS = (0, 0, 0, 0, 0, 0, 1, 3, 7, 16)   # feed piece sizes (0: whole input)
FRAME_LIMITS = (-1, 0, 64, 300, 1024, 4096)   # -1: before set_limit (handshake ceiling + buffer room)


def gen_frames(r, limit=4096, core_arms=None):
    """A plaintext stream of 1-4 frames with structure-aware mutations of headers and prefixes."""
    out = bytearray()
    for _ in range(1 + r.below(4)):
        arm = r.pick(core_arms) if core_arms and r.below(4) else None
        h = gen_envelope(r, r.pick((0, 1, 2, 3, 4, 5, 6, 7, 8, _M32, r.u32())), arm)
        if r.below(3) == 0:
            h = mutate_pb(r, h)
        tl = 0
        if r.below(3) == 0:
            tl = r.pick((1, 17, 63, 200, limit, limit + 1 + r.below(64)))
            if tl > 5000:
                tl = 5000
        _prefix(r, out, len(h), tl, limit)
        out.extend(h)
        if tl:
            out.extend(r.bytes(tl) if tl < 64 else bytearray(tl))
        if r.below(16) == 0:
            out.extend(r.bytes(1 + r.below(4)))   # junk between frames
    if r.below(8) == 0:
        out = out[:r.below(len(out) + 1)]          # a truncated stream
    return out


def gen_fw_frame(r):
    mode = r.below(len(FRAME_LIMITS))
    step = r.pick(_STEPS)
    lim = FRAME_LIMITS[mode]
    rec = bytearray((mode, step))
    rec.extend(gen_frames(r, lim if lim > 0 else 4096))
    return rec


class _FrameSink:
    """FrameReader + codec decode, as the runtime's Link does it (firmware/satellite/link.py)."""

    def __init__(self, buf=None):
        self.buf = buf if buf is not None else bytearray(_FRAME_BUF)
        self.env = v1.Envelope()
        self.reader = None
        self.last = "need_more"
        self.frames = 0
        self.roundtrip = True

    def reset(self, mode):
        self.reader = F.FrameReader(buf=self.buf)
        lim = FRAME_LIMITS[mode % len(FRAME_LIMITS)]
        if lim >= 0:
            self.reader.set_limit(lim)
        self.last = "need_more"
        self.frames = 0

    def feed(self, data, start, end):
        """Feed data[start:end]; raises FrameError/DecodeError (clean closes) or Crash."""
        rd = self.reader
        budget = (end - start) + 8
        while start < end:
            k = rd.feed(data, start, end)
            start += k
            got = 0
            while True:
                kind = rd.next()
                if kind == F.NEED_MORE:
                    break
                got += 1
                budget -= 1
                if budget < 0:
                    raise Crash("hang", "frame reader produced more events than bytes fed")
                self._event(kind)
            if k == 0 and got == 0:
                raise Crash("hang", "frame reader full and stuck: consumed 0 bytes, released no frame")

    def _event(self, kind):
        rd = self.reader
        if not (0 <= rd.header_start <= rd.header_end <= rd.tail_start <= rd.tail_end <= len(self.buf)):
            raise Crash("invariant", "frame indices out of the buffer")
        env = self.env
        try:
            pb.decode_into(env, self.buf, rd.header_start, rd.header_end)
        except pb.DecodeError as e:
            if e.code == pb.INTERNAL:
                raise Crash("codec", "INTERNAL decode error: %s" % e)
            if kind == F.OVERSIZE:
                self.last = "oversize:undecodable"
                return
            raise
        self.frames += 1
        if kind == F.OVERSIZE:
            self.last = "oversize"
            return
        self.last = "decoded:%s" % (env.op or "unknown_op")
        if self.roundtrip:
            _roundtrip(env)


def _roundtrip(env):
    """What the codec decoded it must encode, and the encoding must decode to the same value."""
    try:
        data = pb.encode(env)
        back = pb.decode(v1.Envelope, data)
    except ValueError as e:
        raise Crash("roundtrip", "a decoded Envelope does not re-encode/decode: %s (%r)" % (e, env))
    if env.op is None:
        back.unknown_op = env.unknown_op   # an unknown arm is not re-encoded (docs/codec.md): not a loss
    if back != env:
        raise Crash("roundtrip", "re-decoded Envelope differs: %r != %r" % (back, env))


def feed_all(fn, data, start, step):
    """fn(data, a, b) over data[start:]: the whole input at once, or pieces of `step` bytes (or more)."""
    end = len(data)
    if not step:
        fn(data, start, end)
        return
    if (end - start) // step > _MAX_PIECES:   # long inputs: at most _MAX_PIECES pieces (speed)
        step = (end - start) // _MAX_PIECES + 1
    p = start
    while p < end:
        q = p + step
        if q > end:
            q = end
        fn(data, p, q)
        p = q


_sink = None


def run_fw_frame(rec):
    global _sink
    if _sink is None:
        _sink = _FrameSink()
    s = _sink
    if len(rec) < 2:
        return "empty"
    s.reset(rec[0])
    try:
        feed_all(s.feed, rec, 2, rec[1])
    except F.FrameError as e:
        return "close:FrameError:" + e.code
    except pb.DecodeError as e:
        return "close:DecodeError:" + e.code
    return s.last


# ---------------------------------------------------------------------------------------------
# Noise transport reader (valid keys, so that some inputs decrypt)

NOISE_KEY = bytes(range(1, 33))
SAT_PRIV = bytes((0x11,) * 32)
CORE_PRIV = bytes((0x22,) * 32)
SAT_EPH = bytes((0x33,) * 32)
CORE_EPH = bytes((0x44,) * 32)


class _NoiseRig:
    def __init__(self):
        self.rx_big = bytearray(NT.MAX_MESSAGE)
        self.rx_small = bytearray(_NOISE_SMALL_RX)
        self.tx = NS.CipherState()
        self.tx.initialize_key(NOISE_KEY)
        self.sink = _FrameSink()
        self.sink.roundtrip = False
        self.plain = 0
        self._hs_msg2 = None
        self.core_pub = NS.public_key(CORE_PRIV)

    def on_plain(self, buf, start, end):
        self.plain += end - start
        self.sink.feed(buf, start, end)

    def transport(self, small):
        """A satellite connection past its handshake, receiving with NOISE_KEY from nonce 0 (the harness
        sets the cipher states the handshake would have made; nothing else is touched)."""
        c = NT.NoiseConnection(True, SAT_PRIV, "XX", tx_capacity=64, on_plaintext=self.on_plain,
                               rx_buf=self.rx_small if small else self.rx_big)
        rx = NS.CipherState()
        rx.initialize_key(NOISE_KEY)
        c._recv = rx
        c._send = NS.CipherState()
        c._started = True
        c.handshake_done = True
        return c

    def seal(self, n, plain):
        self.tx.set_nonce(n)
        return self.tx.encrypt_with_ad(b"", plain)

    def initiator(self, small):
        c = NT.NoiseConnection(True, SAT_PRIV, "IK", remote_static=self.core_pub, ephemeral=SAT_EPH,
                               tx_capacity=64, on_plaintext=self.on_plain,
                               rx_buf=self.rx_small if small else self.rx_big)
        c.start()
        return c

    def msg2(self):
        """The core's genuine IK message 2 for the fixed keys (computed once)."""
        if self._hs_msg2 is None:
            i = NT.NoiseConnection(True, SAT_PRIV, "IK", remote_static=self.core_pub, ephemeral=SAT_EPH,
                                   tx_capacity=64, rx_buf=self.rx_small)
            resp = NT.NoiseConnection(False, CORE_PRIV, ephemeral=CORE_EPH, tx_capacity=64,
                                      rx_buf=bytearray(NT.MIN_RX_MESSAGE))
            resp.receive(i.start())
            self._hs_msg2 = resp.data_to_send()
            i.receive(self._hs_msg2)
            if not i.handshake_done:
                raise Crash("setup", "the fixed IK handshake did not complete")
        return self._hs_msg2


_rig = None


def _noise_rig():
    global _rig
    if _rig is None:
        _rig = _NoiseRig()
    return _rig


def _len_prefix(r, out, n):
    k = r.below(10)
    if k == 0:
        n = r.pick((0, 1, 15, 16, 17, n - 1, n + 1, 0xFFFF, _NOISE_SMALL_RX, _NOISE_SMALL_RX + 1))
        if n < 0:
            n = 0
    out.append((n >> 8) & 0xFF)
    out.append(n & 0xFF)


def gen_fw_noise(r, handshake_every=200):
    """A TCP byte stream for the satellite's Noise reader; see the record layout at the top."""
    rig = _noise_rig()
    step = r.pick(_STEPS)
    small = 1 if r.below(4) == 0 else 0
    out = bytearray()
    if handshake_every and r.below(handshake_every) == 0:
        m = bytearray(rig.msg2())
        if r.below(4):
            body = m[2:]
            k = r.below(5)
            if k == 0 and body:
                body[r.below(len(body))] ^= 1 << r.below(8)
            elif k == 1:
                body = body[:r.below(len(body) + 1)]
            elif k == 2:
                body.extend(r.bytes(1 + r.below(40)))
            elif k == 3:
                body = r.bytes(r.below(120))
            m = bytearray()
            _len_prefix(r, m, len(body))
            m.extend(body)
        out.extend(m)
        if r.below(2):   # transport data right behind the last handshake message
            out.extend(r.bytes(r.below(40)))
        rec = bytearray((1, step, small))
        rec.extend(out)
        return rec
    msgs = []
    for i in range(1 + r.below(4)):
        plain = gen_frames(r, 300, None) if r.below(3) else r.bytes(r.below(64))
        if len(plain) > 600:
            plain = plain[:600]
        msgs.append(bytearray(rig.seal(i, plain)))
    k = r.below(8)
    if k == 1 and len(msgs) > 1:
        msgs[0], msgs[1] = msgs[1], msgs[0]          # reordered
    elif k == 2:
        msgs.append(bytearray(msgs[0]))              # replayed
    elif k == 3 and len(msgs) > 1:
        msgs = msgs[1:]                              # dropped (nonce gap)
    for m in msgs:
        j = r.below(8)
        if j == 0:
            m[r.below(len(m))] ^= 1 << r.below(8)    # ciphertext or tag bit
        elif j == 1:
            m = m[:r.below(len(m) + 1)]
        _len_prefix(r, out, len(m))
        out.extend(m)
    if r.below(10) == 0:
        out = out[:r.below(len(out) + 1)]
    if r.below(12) == 0:
        out.extend(r.bytes(1 + r.below(3)))
    rec = bytearray((0, step, small))
    rec.extend(out)
    return rec


def run_fw_noise(rec):
    rig = _noise_rig()
    if len(rec) < 3:
        return "empty"
    rig.plain = 0
    rig.sink.reset(1)
    if rec[0] == 1:
        c = rig.initiator(rec[2])
    else:
        c = rig.transport(rec[2])
    try:
        feed_all(c.receive_into, rec, 3, rec[1])
        c.receive_eof()
    except NS.NoiseStateError as e:
        raise Crash("state", "NoiseStateError %s from a fresh connection" % e.code)
    except NS.HandshakeError as e:
        return "close:HandshakeError:" + e.code
    except NS.TransportError as e:
        return "close:TransportError:" + e.code
    except F.FrameError as e:
        return "close:FrameError:" + e.code
    except pb.DecodeError as e:
        return "close:DecodeError:" + e.code
    if not c.closed:
        raise Crash("eof", "receive_eof() left the connection open")
    if rec[0] == 1:
        return "handshake_done" if c.handshake_done else "handshake_pending"
    return "plaintext" if rig.plain else "no_plaintext"


# ---------------------------------------------------------------------------------------------
# Session (decoded Envelopes in the states a real session reaches)

CK = v1.CapabilityKind
EC = v1.ErrorCode


def _fmt(rate):
    return v1.AudioFormat(encoding=v1.Encoding.PCM_S16LE, sample_rate=rate, channels=1, sample_bits=16)


def surface():
    caps = [v1.CapabilityDescriptor(kind=CK.CAPABILITY_MIC, mic=v1.MicParams(format=_fmt(16000))),
            v1.CapabilityDescriptor(kind=CK.CAPABILITY_SPEAKER,
                                    speaker=v1.SpeakerParams(format=_fmt(24000), buffer_ms=200))]
    tools = [v1.ToolDescriptor(name="device.info", description="info", input_schema="{}")]
    events = [v1.EventDescriptor(id="button.double_press")]
    sets = [v1.SettingDescriptor(key="volume", type=v1.SettingType.SETTING_INT, min=0, max=100)]
    return S.Surface(caps, tools, events, sets, max_frame_bytes=4096, max_concurrent_streams=2)


# Id statuses the oracle knows from the scenario alone (what a spec-following peer must see).
_FRESH = const(0)       # never used on this connection
_CANCELLED = const(1)   # retired by a StreamCancel: stragglers are discarded silently (R10.3-b)
_ENDED_RENDER = const(2)  # a render after its StreamEnd: a chunk draws STREAM_CLOSED (R10.10-d)
_LIVE = const(3)        # in use: no fixed expectation

SCENARIOS = 4
_SCENARIO_IDS = (
    {1: _LIVE},
    {1: _LIVE},
    {1: _LIVE, 2: _LIVE, 3: _LIVE, 5: _LIVE},
    {1: _LIVE, 2: _ENDED_RENDER, 3: _LIVE, 4: _CANCELLED, 5: _LIVE, 6: _LIVE, 7: _CANCELLED, 9: _LIVE},
)
ID_POOL = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 100, 101, 0x7FFFFFFE, 0xFFFFFFFE, _M32)

# What the core sends (and so what a fuzzed core would mostly send), for arm selection.
CORE_ARMS = ("hello_response", "error", "ping", "ping_response", "paired", "stream_chunk", "stream_end",
             "stream_cancel", "media_render_open", "response", "pipeline_state", "capture_ack",
             "request_capture", "text_render_open", "image_render_open", "render", "media_control", "invoke",
             "settings_write")
# Request-shaped core operations: a non-zero id must get an answer on that id (R10.8-a, R10.4-a, §10.10):
# an event the driver answers, or a queued reply.
_ANSWERED_BY = {
    "ping": (),
    "request_capture": (S.CaptureRequested,),
    "invoke": (S.ToolCall,),
    "settings_write": (S.SettingWrite,),
    "media_render_open": (S.RenderOpen,),
    "text_render_open": (),
    "image_render_open": (),
    "render": (),
}


_PREFIX = None


def _prefix_envelopes():
    """The Surface and the core frames that take a session into each scenario (built once: the session
    only reads them)."""
    global _PREFIX
    if _PREFIX is None:
        R = v1.StreamReason
        _PREFIX = (
            surface(),
            v1.Envelope(id=1, hello_response=v1.HelloResponse(
                accepted=v1.Accepted(max_frame_bytes=8192, max_concurrent_streams=4))),
            v1.Envelope(id=2, media_render_open=v1.MediaRenderOpen(format=_fmt(24000))),
            v1.Envelope(id=2, stream_end=v1.StreamEnd(reason=R.COMPLETE)),
            v1.Envelope(id=4, media_render_open=v1.MediaRenderOpen(format=_fmt(24000))),
            v1.Envelope(id=4, stream_cancel=v1.StreamCancel(reason=R.BARGE_IN)),
            v1.Envelope(id=6, request_capture=v1.RequestCapture(correlation_ref="enroll")),
            _fmt(16000),
        )
    return _PREFIX


def session_for(scenario):
    """A session in scenario 0 (Hello sent), 1 (Accepted), 2 (+ capture 3 open, render 2 open, ping 5
    out), 3 (render 2 ended, render 4 and capture 7 cancelled, RequestCapture 6 pending, capture 3
    ended awaiting its Response, capture 9 open)."""
    P = _prefix_envelopes()
    s = S.Session(P[0])
    s.hello()
    if scenario == 0:
        return s
    s.receive(P[1])
    if scenario == 1:
        return s
    mic = P[7]
    s.open_capture(trigger=v1.Trigger.BUTTON, format=mic)                                # 3
    s.receive(P[2])
    s.ping(10)                                                                           # 5
    if scenario == 2:
        return s
    s.receive(P[3])
    s.receive(P[4])
    s.receive(P[5])
    s.open_capture(trigger=v1.Trigger.WAKEWORD, format=mic)                              # 7
    s.cancel_capture(7, v1.StreamReason.STOPPED)
    s.receive(P[6])
    s.end_capture(3, v1.StreamReason.PTT_RELEASE)
    s.open_capture(trigger=v1.Trigger.BUTTON, format=mic)                                # 9
    return s


def gen_fw_session(r):
    sc = 1 + r.below(SCENARIOS - 1) if r.below(16) else 0
    rec = bytearray((sc,))
    for _ in range(1 + r.below(4)):
        id = r.pick(ID_POOL) if r.below(8) else r.u32()
        arm = r.pick(CORE_ARMS) if r.below(6) else None
        e = gen_envelope(r, id, arm)
        if r.below(3) == 0:
            e = mutate_pb(r, e)
        n = len(e)
        rec.append((n >> 8) & 0xFF)
        rec.append(n & 0xFF)
        rec.extend(e)
    return rec


def _check_answer(s, env, ev, outs, status, state_before):
    """The spec's answer rules for one core Envelope; raises Crash("spec", ...) when broken."""
    id = env.id
    op = env.op
    for o in outs:
        if o.id != id:
            raise Crash("spec", "R10.10-a: %s on id %d answered on id %d" % (op, id, o.id))
    if id == 0 and outs:
        raise Crash("spec", "R10.10-b: a notification (%s, id 0) was answered with %s" % (op, outs[0].op))
    if state_before != S.ACTIVE and not (op == "ping" and state_before == S.HELLO_SENT):
        return
    if status is None:
        return   # the id was touched by an earlier Envelope of this input: its state is not the scenario's
    if id and op in _ANSWERED_BY:
        if op == "invoke" and env.invoke.observe:
            return
        if not outs and not (ev is not None and type(ev) in _ANSWERED_BY[op]):
            raise Crash("spec", "R10.8-a: request-shaped %s on id %d got no answer" % (op, id))
    if op == "stream_chunk" and id:
        codes = [o.error.code for o in outs if o.op == "error"]
        if status == _FRESH and EC.UNKNOWN_STREAM not in codes:
            raise Crash("spec", "R10.10-d: a chunk on never-opened id %d drew %r, not UNKNOWN_STREAM" % (id, codes))
        if status == _CANCELLED and outs:
            raise Crash("spec", "R10.3-b: a chunk on cancelled id %d was answered (%r)" % (id, codes))
        if status == _ENDED_RENDER and EC.STREAM_CLOSED not in codes:
            raise Crash("spec", "R10.10-d: a chunk on ended render %d drew %r, not STREAM_CLOSED" % (id, codes))


def run_fw_session(rec):
    if not rec:
        return "empty"
    sc = rec[0] % SCENARIOS
    s = session_for(sc)
    while s.outgoing() is not None:
        pass
    ids = _SCENARIO_IDS[sc]
    touched = []
    p = 1
    n = len(rec)
    last = "idle"
    while p + 2 <= n:
        ln = (rec[p] << 8) | rec[p + 1]
        p += 2
        q = p + ln if p + ln <= n else n
        try:
            env = pb.decode(v1.Envelope, rec, p, q)
        except pb.DecodeError as e:
            if e.code == pb.INTERNAL:
                raise Crash("codec", "INTERNAL decode error: %s" % e)
            return "close:DecodeError:" + e.code   # the runtime closes on an undecodable header
        p = q
        status = None if env.id in touched else ids.get(env.id, _FRESH)
        touched.append(env.id)
        before = s.state
        try:
            ev = s.receive(env, 1000)
        except S.ProtocolViolation as e:
            return "close:ProtocolViolation:" + e.code
        except S.SessionError as e:
            return "local:SessionError:" + e.code
        outs = []
        while True:
            o = s.outgoing()
            if o is None:
                break
            outs.append(o)
        _check_answer(s, env, ev, outs, status, before)
        if outs:
            last = "reply:%s:%d" % (outs[-1].op, outs[-1].error.code if outs[-1].op == "error" else 0)
        elif ev is not None:
            last = "event:" + type(ev).__name__
        else:
            last = "silent:%s" % (env.op or "unknown_op")
    return last


# ---------------------------------------------------------------------------------------------
# Batches

TARGETS = {
    "fw_frame": (gen_fw_frame, run_fw_frame),
    "fw_noise": (gen_fw_noise, run_fw_noise),
    "fw_session": (gen_fw_session, run_fw_session),
}


def gen(target, seed, index):
    return TARGETS[target][0](Rng(seed, index))


def run(target, rec):
    """Execute one record; returns its outcome string, raises Crash for a finding."""
    try:
        return TARGETS[target][1](rec)
    except Crash:
        raise
    except MemoryError:
        raise Crash("memory", "MemoryError")
    except Exception as e:  # the fuzzer's purpose: anything else escaping the firmware is a finding
        raise Crash("exception", "%s: %s" % (type(e).__name__, e))


def batch(target, seed, start, count, on_crash=None, mem=None):
    """Run inputs start..start+count-1; returns (outcome counts, crashes [(index, kind, detail)])."""
    outcomes = {}
    crashes = []
    for i in range(start, start + count):
        rec = gen(target, seed, i)
        try:
            o = run(target, rec)
        except Crash as c:
            crashes.append((i, c.kind, c.detail))
            o = "CRASH:" + c.kind
            if on_crash is not None:
                on_crash(i, rec, c)
        outcomes[o] = outcomes.get(o, 0) + 1
        if mem is not None:
            mem(i)
    return outcomes, crashes
