# dual: cpython micropython
# Noise state machines and the Noise-over-TCP binding of the firmware (satellite/noise/state.py,
# transport.py): published vectors for every primitive implementation, tampering, reader edges,
# nonce limit, poisoning after failure, and zero allocation per transport message (viper path).
import hashlib

from mpsupport import IS_MICROPYTHON, load_json, unhex, raises, mem_alloc_delta
from satellite.noise import state, chachapoly, x25519
from satellite.noise.state import (CipherState, HandshakeState, NoiseError, NoiseStateError,
                                   HandshakeError, TransportError)
from satellite.noise import transport
from satellite.noise.transport import NoiseConnection

VECTOR_FILES = ("noise_vectors.json", "noise_vectors_snow.json")
IMPLS = chachapoly.IMPLS  # ("c", "viper", "pure") on the 32-bit builds, ("viper", "pure") on the 64-bit port


class Rng:
    """Deterministic rng(n) -> n bytes (SHA-256 in counter mode) so failures reproduce."""

    def __init__(self, seed):
        self.seed = seed
        self.ctr = 0

    def __call__(self, n):
        out = b""
        while len(out) < n:
            self.ctr += 1
            out += hashlib.sha256(b"%s/%d" % (self.seed, self.ctr)).digest()
        return out[:n]

    def below(self, n):
        b = self(4)
        return ((b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]) % n


SI = bytes(range(1, 33))          # satellite static private key
SR = bytes(range(101, 133))       # core static private key
SX = bytes(range(201, 233))       # some other core's key


def _pub(k):
    return x25519.public_key(k)


def _run_vector(v):
    u = unhex
    pat = v["protocol_name"].split("_")[1]
    rs = u(v["init_remote_static"]) if v.get("init_remote_static") else None
    i = HandshakeState(pat, True, u(v["init_prologue"]), s=u(v["init_static"]), rs=rs, e=u(v["init_ephemeral"]))
    r = HandshakeState(pat, False, u(v["resp_prologue"]), s=u(v["resp_static"]), e=u(v["resp_ephemeral"]))
    for k, m in enumerate(v["messages"]):
        snd, rcv = (i, r) if k % 2 == 0 else (r, i)
        p, c = u(m["payload"]), u(m["ciphertext"])
        if not snd.complete:
            assert snd.write_message(p) == c, "%s message %d ciphertext" % (v["protocol_name"], k)
            assert rcv.read_message(c) == p, "%s message %d payload" % (v["protocol_name"], k)
        else:
            assert snd.cipher_send.encrypt_with_ad(b"", p) == c, "%s transport %d" % (v["protocol_name"], k)
            assert rcv.cipher_recv.decrypt_with_ad(b"", c) == p
    assert i.complete and r.complete
    if "handshake_hash" in v:
        assert i.handshake_hash == u(v["handshake_hash"])
        assert r.handshake_hash == u(v["handshake_hash"])
    else:
        assert i.handshake_hash == r.handshake_hash
    if pat == "XX":
        assert r.rs == _pub(u(v["init_static"])) and i.rs == _pub(u(v["resp_static"]))
    return 1


def test_r5_b_noise_vectors_every_impl():
    count = 0
    try:
        for impl in IMPLS:
            state.set_impl(impl)
            for f in VECTOR_FILES:
                for v in load_json("vectors", f)["vectors"]:
                    count += _run_vector(v)
    finally:
        state.set_impl(None)
    assert count == 6 * len(IMPLS)


def test_vector_tamper_is_rejected():
    v = load_json("vectors", "noise_vectors.json")["vectors"][0]
    u = unhex
    r = HandshakeState("IK", False, u(v["resp_prologue"]), s=u(v["resp_static"]), e=u(v["resp_ephemeral"]))
    c = bytearray(u(v["messages"][0]["ciphertext"]))
    c[40] ^= 1
    e = raises(HandshakeError, r.read_message, bytes(c))
    assert e.code == "DECRYPT_FAILED"
    # the failed handshake is unusable: the genuine message is refused too, and so is writing
    assert raises(NoiseStateError, r.read_message, u(v["messages"][0]["ciphertext"])).code == "FAILED"
    assert raises(NoiseStateError, r.write_message, b"").code == "FAILED"


def test_wrong_prologue_breaks_handshake():
    i = HandshakeState("XX", True, b"Noise_XX_25519_ChaChaPoly_SHA256", s=SI, rng=Rng(b"p"))
    r = HandshakeState("XX", False, b"Noise_XX_25519_ChaChaPoly_SHA256!", s=SR, rng=Rng(b"q"))
    r.read_message(i.write_message())
    assert raises(HandshakeError, i.read_message, r.write_message()).code == "DECRYPT_FAILED"


def test_nonce_limit_enforced():
    cs = CipherState()
    cs.initialize_key(bytes(32))
    rx = CipherState()
    rx.initialize_key(bytes(32))
    cs.set_nonce(state.MAX_NONCE - 1)
    rx.set_nonce(state.MAX_NONCE - 1)
    c = cs.encrypt_with_ad(b"", b"last")      # n = 2**64-2 is the last usable nonce
    assert rx.decrypt_with_ad(b"", c) == b"last"
    assert cs.n == state.MAX_NONCE
    assert raises(NoiseStateError, cs.encrypt_with_ad, b"", b"x").code == "NONCE_EXHAUSTED"
    assert raises(NoiseStateError, rx.decrypt_with_ad, b"", c).code == "NONCE_EXHAUSTED"


def test_cipher_state_poisoned_after_failure():
    a = CipherState()
    a.initialize_key(bytes(range(32)))
    b = CipherState()
    b.initialize_key(bytes(range(32)))
    c1 = a.encrypt_with_ad(b"", b"one")
    c2 = a.encrypt_with_ad(b"", b"two")
    assert raises(TransportError, b.decrypt_with_ad, b"", c2).code == "DECRYPT_FAILED"  # skipped nonce
    assert raises(NoiseStateError, b.decrypt_with_ad, b"", c1).code == "FAILED"
    assert raises(NoiseStateError, b.encrypt_with_ad, b"", b"x").code == "FAILED"


def test_plaintext_over_65519_rejected():
    cs = CipherState()
    cs.initialize_key(bytes(32))
    big = bytearray(65520)
    assert raises(NoiseStateError, cs.encrypt_into, b"", big, 65520, bytearray(65536)).code == "PLAINTEXT_TOO_LARGE"
    assert len(cs.encrypt_with_ad(b"", big[:65519])) == 65535  # the largest message fits the u16 length


# ---- the binding ------------------------------------------------------------------------------

def _frames(data):
    out = []
    pos = 0
    while pos < len(data):
        n = (data[pos] << 8) | data[pos + 1]
        out.append(data[pos:pos + 2 + n])
        pos += 2 + n
    return out


def _pair(pattern, seed, pinned=None, resp_key=SR, **kw):
    rng = Rng(seed)
    if pattern == "IK" and pinned is None:
        pinned = _pub(SR)
    i = NoiseConnection(True, SI, pattern, pinned, rng=rng, **kw)
    r = NoiseConnection(False, resp_key, rng=rng)
    return i, r


def _handshake(i, r, feed=None):
    feed = feed or (lambda c, d: c.receive(d))
    feed(r, i.start())
    feed(i, r.data_to_send())
    if not r.handshake_done:
        feed(r, i.data_to_send())
    assert i.handshake_done and r.handshake_done


def _byte_at_a_time(conn, data):
    for k in range(len(data)):
        conn.receive(data[k:k + 1])


def test_r5_1_1_ik_and_xx_binding_whole_and_bytewise():
    for pattern in ("IK", "XX"):
        for feed in (None, _byte_at_a_time):
            i, r = _pair(pattern, b"b" + pattern.encode())
            _handshake(i, r, feed)
            assert i.pattern == r.pattern == pattern
            assert i.handshake_hash == r.handshake_hash and len(i.handshake_hash) == 32
            assert r.remote_static == _pub(SI)        # the device identity, authenticated (R5-b)
            assert i.remote_static == _pub(SR)
            msg = b"hello core" * 3
            (feed or (lambda c, d: c.receive(d)))(r, i.encrypt(msg))
            assert r.read_plaintext() == msg
            (feed or (lambda c, d: c.receive(d)))(i, r.encrypt(b"hi"))
            assert i.read_plaintext() == b"hi"


def test_r5_1_2_a_offer_and_length_prefix_on_the_wire():
    i, r = _pair("IK", b"wire")
    out = i.start()
    assert out[:2] == b"\x00\x20" and out[2:34] == b"Noise_IK_25519_ChaChaPoly_SHA256"
    assert out[34:36] == b"\x00\x60" and len(out) == 36 + 96    # e + enc(s) + tag of an empty payload
    r.receive(out)
    m2 = r.data_to_send()
    assert m2[:2] == b"\x00\x30" and len(m2) == 50
    i.receive(m2)
    t = i.encrypt(b"abc")
    assert t[:2] == b"\x00\x13" and len(t) == 2 + 3 + 16


def test_trailing_bytes_handshake_and_transport_in_one_chunk():
    for pattern in ("IK", "XX"):
        i, r = _pair(pattern, b"t" + pattern.encode())
        first = i.start()
        r.receive(first)
        reply = r.data_to_send()
        if pattern == "IK":
            # the responder is done after message 2: its transport data rides the same TCP segment
            reply += r.encrypt(b"early") + r.encrypt(b" data")
            i.receive(reply)
            assert i.read_plaintext() == b"early data"
        else:
            i.receive(reply)
            last = i.data_to_send() + i.encrypt(b"x" * 70000) + i.encrypt(b"y")
            r.receive(last)
            assert r.read_plaintext() == b"x" * 70000 + b"y"
        assert i.handshake_done and r.handshake_done


def test_r5_1_2_b_large_write_splits_and_stream_concatenates():
    i, r = _pair("XX", b"split")
    _handshake(i, r)
    data = bytes(k & 0xFF for k in range(200000))
    wire = i.encrypt(data)
    fr = _frames(wire)
    assert len(fr) == 4 and [len(f) - 18 for f in fr] == [65519, 65519, 65519, 200000 - 3 * 65519]
    pos = 0
    step = 7919                               # arbitrary TCP splits that ignore message boundaries
    while pos < len(wire):
        r.receive(wire[pos:pos + step])
        pos += step
    assert r.read_plaintext() == data


def test_transport_length_0_to_17_rejected_typed():
    for n in range(18):
        i, r = _pair("IK", b"len%d" % n)
        _handshake(i, r)
        e = raises(TransportError, r.receive, bytes([0, n]) + bytes(n))
        assert e.code == ("MSG_TOO_SHORT" if n < 16 else "DECRYPT_FAILED"), (n, e.code)
        assert r.closed
        assert raises(NoiseStateError, r.receive, b"\x00").code == "CLOSED"


def test_send_over_capacity_rejected():
    i, r = _pair("IK", b"cap", tx_capacity=100)
    _handshake(i, r)
    assert raises(NoiseStateError, i.encrypt_buffer, 101).code == "PLAINTEXT_TOO_LARGE"
    assert len(_frames(i.encrypt(bytes(250)))) == 3      # the convenience path splits at tx_capacity
    assert raises(NoiseStateError, NoiseConnection, True, SI, "IK", _pub(SR), None, None, ("IK",), None, 65520).code == "BAD_CAPACITY"


def test_r5_1_1_a_unknown_protocol_name_rejected():
    names = (b"Noise_NN_25519_ChaChaPoly_SHA256", b"Noise_IK_25519_AESGCM_SHA256",
             b"Noise_IK_448_ChaChaPoly_BLAKE2b", b"Noise_XX_25519_ChaChaPoly_SHA25", b"", b"x" * 33,
             b"Noise_IK_25519_ChaChaPoly_SHA256\x00")
    for name in names:
        r = NoiseConnection(False, SR, rng=Rng(b"n"))
        e = raises(HandshakeError, r.receive, bytes([len(name) >> 8, len(name) & 0xFF]) + name)
        assert e.code == "UNSUPPORTED_PROTOCOL"
        assert r.closed and r.data_to_send() == b""
    r = NoiseConnection(False, SR, rng=Rng(b"n"))
    assert raises(HandshakeError, r.receive, b"\xff\xff").code == "UNSUPPORTED_PROTOCOL"  # refused before buffering
    r = NoiseConnection(False, SR, rng=Rng(b"n"), patterns=("IK",))
    name = b"Noise_XX_25519_ChaChaPoly_SHA256"
    assert raises(HandshakeError, r.receive, b"\x00\x20" + name).code == "UNSUPPORTED_PROTOCOL"


def test_r7_3_c_ik_wrong_core_key_aborts_without_fallback():
    # the core has another key: it cannot open message 1 and closes; the satellite reports the mismatch
    i, r = _pair("IK", b"wk", resp_key=SX)
    e = raises(HandshakeError, r.receive, i.start())
    assert e.code == "DECRYPT_FAILED" and r.closed
    assert r.data_to_send() == b""
    e = raises(HandshakeError, i.receive_eof)
    assert e.code == "IK_KEY_MISMATCH" and "pinned" in str(e) and "XX" in str(e)
    assert i.closed and i.pattern == "IK" and i.data_to_send() == b""
    # a man in the middle answering with its own message 2: the AEAD check fails on our side
    i, r = _pair("IK", b"mitm", resp_key=SX)
    i.start()
    mitm = HandshakeState("IK", True, b"", s=SX, rs=_pub(SX), rng=Rng(b"m"))  # any well-formed bytes
    fake = mitm.write_message()[:48]
    e = raises(HandshakeError, i.receive, b"\x00\x30" + fake)
    assert e.code == "IK_KEY_MISMATCH"
    assert i.closed and i.pattern == "IK" and i.data_to_send() == b""
    for call, args in ((i.start, ()), (i.receive, (b"\x00",)), (i.encrypt, (b"x",))):
        assert raises(NoiseStateError, call, *args).code == "CLOSED"


def test_r7_3_f_connection_has_no_fallback_path():
    # No method or attribute changes the pattern after construction, and nothing mentions fallback.
    names = [n for n in dir(NoiseConnection) if not n.startswith("__")]
    for n in names:
        assert "fallback" not in n.lower() and "xx" not in n.lower(), n


def _tamper_trial(rng, pattern, kind):
    """One random attack on a live exchange; returns the code of the typed error that ended it."""
    i, r = _pair(pattern, b"trial%d" % rng.ctr)
    sent = {True: b"", False: b""}
    queue = [(True, f) for f in _frames(i.start())]
    hs_frames = 4 if pattern == "XX" else 3
    target = rng.below(hs_frames + 4)
    if kind == "replay" and target == 0:
        target = 1
    k = 0
    queued_data = False
    stopped = False
    err = None
    while err is None:
        if not queue:
            if i.handshake_done and r.handshake_done and not queued_data:
                queued_data = True
                for _ in range(2):
                    for side, conn in ((True, i), (False, r)):
                        p = rng(1 + rng.below(300))
                        sent[side] += p
                        queue += [(side, f) for f in _frames(conn.encrypt(p))]
                continue
            break
        from_i, f = queue.pop(0)
        dst = r if from_i else i
        deliver = [f]
        if k == target:
            if kind == "flip":
                g = bytearray(f)
                bit = rng.below((len(f) - 2) * 8)
                g[2 + bit // 8] ^= 1 << (bit % 8)
                deliver = [bytes(g)]
            elif kind == "truncate":
                cut = 1 + rng.below(len(f) - 2) if len(f) > 2 else 0
                n = len(f) - 2 - cut
                deliver = [bytes([n >> 8, n & 0xFF]) + f[2:2 + n]]
            elif kind == "cut_eof":
                deliver = [f[:len(f) - 1 - rng.below(len(f) - 1)]]
                stopped = True
            elif kind == "replay":
                deliver = [f, f]
        for g in deliver:
            try:
                dst.receive(g)
            except NoiseError as e:
                err = (dst, e)
                break
        if stopped and err is None:
            break
        k += 1
        if err is None:
            queue += [(not from_i, g) for g in _frames(dst.data_to_send())]
    if err is None:  # the attacker cut the stream: both ends see EOF
        for conn in (r, i):
            try:
                conn.receive_eof()
            except NoiseError as e:
                err = (conn, e)
                break
    assert err is not None, "undetected %s on %s message %d" % (kind, pattern, target)
    conn, e = err
    assert conn.closed
    assert raises(NoiseStateError, conn.receive, b"\x00\x10").code == "CLOSED"
    # whatever plaintext got through is a prefix of what was really sent: nothing forged was delivered
    for c, side in ((r, True), (i, False)):
        got = c.read_plaintext() if not c.closed or c._plain is not None else b""
        assert sent[side][:len(got)] == got
    if conn is i and pattern == "IK" and not i.handshake_done:
        assert e.code in ("IK_KEY_MISMATCH", "MSG_TOO_SHORT"), e.code  # an AEAD failure names the pin
    return e.code


def test_r5_a_tampering_100_of_100_rejected():
    rng = Rng(b"tamper")
    kinds = ("flip", "truncate", "cut_eof", "replay")
    codes = {}
    for t in range(100):
        kind = kinds[t % 4]
        code = _tamper_trial(rng, ("IK", "XX")[(t // 4) % 2], kind)
        codes[code] = codes.get(code, 0) + 1
    assert sum(codes.values()) == 100
    for code in codes:
        assert code in ("DECRYPT_FAILED", "MSG_TOO_SHORT", "UNSUPPORTED_PROTOCOL", "IK_KEY_MISMATCH",
                        "EOF", "UNEXPECTED_MESSAGE"), code


def test_r5_1_2_a_transport_allocates_nothing_per_message_viper():
    i, r = _pair("IK", b"alloc")
    _handshake(i, r)
    got = [0, 0]

    class Sink:
        def __init__(self):
            self.n = 0
            self.last = 0

        def on_plaintext(self, buf, start, end):
            self.n += end - start
            self.last = buf[end - 1]

    sink_r = Sink()
    sink_i = Sink()
    r.on_plaintext = sink_r.on_plaintext
    i.on_plaintext = sink_i.on_plaintext
    src = bytearray(640)
    src[639] = 0x5A

    def loop(n):
        k = 0
        while k < n:
            t = i.encrypt_from(src, 0, 640)
            r.receive_into(i.tx_buf, 0, t)
            r.tx_plain[639] = 0x33
            t = r.encrypt_buffer(640)
            i.receive_into(r.tx_buf, 0, t)
            k += 1

    loop(3)  # warm up
    d = mem_alloc_delta(loop, 1000)
    if IS_MICROPYTHON and "viper" in IMPLS:
        assert d == 0, "transport allocated %d bytes over 1000 messages each way" % d
    if not IS_MICROPYTHON:
        loop(1000)
    assert sink_r.n == 640 * 1003 and sink_r.last == 0x5A
    assert sink_i.n == 640 * 1003 and sink_i.last == 0x33


def test_pure_copy_path_and_cached_static_public():
    # the reader's pure copy (no viper) carries the same stream; a cached public key changes nothing
    transport.use_pure_copy(True)
    try:
        i, r = _pair("XX", b"pc")
        _handshake(i, r, _byte_at_a_time)
        data = bytes(k * 13 & 0xFF for k in range(70000))
        wire = i.encrypt(data)
        pos = 0
        while pos < len(wire):
            r.receive(wire[pos:pos + 4093])
            pos += 4093
        assert r.read_plaintext() == data
    finally:
        transport.use_pure_copy(False)
    a = NoiseConnection(True, SI, "IK", _pub(SR), rng=Rng(b"c"))
    b = NoiseConnection(True, SI, "IK", _pub(SR), rng=Rng(b"c"), static_public=_pub(SI))
    assert a.start() == b.start()


def test_rx_capacity_follows_max_frame_bytes():
    """The receive buffer holds one Noise message of the advertised max_frame_bytes (+ tag): 4 KiB frames
    need 4122 bytes, not 65535; 0 (unset) and anything past one message take the full 65535."""
    assert transport.rx_message_bytes(4096) == 4122          # prefix 10 + total_len 4096 + tag 16
    assert transport.rx_message_bytes(16384) == 16410
    assert transport.rx_message_bytes(0) == 65535
    assert transport.rx_message_bytes(65509) == 65535
    assert transport.rx_message_bytes(65516) == 65535
    assert transport.rx_message_bytes(70000) == 65535
    assert transport.rx_message_bytes(10) == transport.MIN_RX_MESSAGE
    i, r = _pair("XX", b"rxcap", rx_buf=bytearray(transport.MIN_RX_MESSAGE))   # XX message 2 is the longest
    _handshake(i, r)
    assert i.rx_capacity == transport.MIN_RX_MESSAGE
    assert raises(NoiseStateError, lambda: NoiseConnection(True, SI, "XX", rx_buf=bytearray(95))).code == "BAD_CAPACITY"
    assert raises(NoiseStateError, lambda: NoiseConnection(True, SI, "XX", rx_capacity=65536)).code == "BAD_CAPACITY"


def test_noise_message_over_rx_capacity_is_a_typed_close():
    """A peer's message longer than our buffer is refused at its 2-byte header, before any byte is
    buffered: TransportError MESSAGE_TOO_LARGE (HandshakeError during the handshake), then CLOSED."""
    cap = transport.rx_message_bytes(4096)
    for whole in (True, False):
        i, r = _pair("IK", b"big", rx_capacity=cap)
        _handshake(i, r)
        ok = r.encrypt(bytes(4106))                       # one frame at the advertised limit (+ prefix): fits
        i.receive(ok)
        assert i.read_plaintext() == bytes(4106)
        big = r.encrypt(bytes(cap - 15))                  # one byte over: cap + 1 on the wire
        assert len(_frames(big)) == 1
        if whole:
            e = raises(TransportError, i.receive, big)
        else:
            i.receive(big[:1])
            e = raises(TransportError, i.receive, big[1:2])
        assert e.code == "MESSAGE_TOO_LARGE" and i.closed
        assert raises(NoiseStateError, i.receive, b"\x00").code == "CLOSED"
    i = NoiseConnection(True, SI, "XX", rng=Rng(b"hs"), rx_buf=bytearray(200))
    i.start()
    assert raises(HandshakeError, i.receive, bytes([0, 201])).code == "MESSAGE_TOO_LARGE"


def test_tx_buf_placed_by_the_caller():
    buf = bytearray(100 + 18)
    i, r = _pair("IK", b"txb", tx_capacity=100, tx_buf=buf)
    _handshake(i, r)
    assert i.tx_buf is buf
    i.tx_plain[0:5] = b"hello"
    n = i.encrypt_buffer(5)
    r.receive(bytes(buf[:n]))
    assert r.read_plaintext() == b"hello"
    assert raises(NoiseStateError, NoiseConnection, True, SI, "XX", None, None, None, ("XX",), None, 100,
                  None, None, transport.MAX_MESSAGE, bytearray(117)).code == "BAD_CAPACITY"


def test_handshake_hashes_through_hashlib_sha256():
    """Every SHA-256 of the handshake (MixHash, HMAC/HKDF) goes through hashlib.sha256: on the board that is
    mbedTLS on the SHA accelerator (docs/protocol.md); a pure SHA-256 slipped in here would not be counted.
    (A runtime/performance rule of issue 12, no spec requirement.)"""
    from satellite.noise import hkdf
    assert state.hashlib is hashlib and hkdf.hashlib is hashlib
    real = hashlib.sha256
    seen = []

    class Counted:
        def __init__(self, data=b""):
            self.h = real(data)
            seen.append(len(data))

        def update(self, data):
            self.h.update(data)

        def digest(self):
            return self.h.digest()
    shim = type("H", (), {"sha256": Counted})
    state.hashlib = hkdf.hashlib = shim
    try:
        pr = x25519.public_key(SR)
        i = NoiseConnection(True, SI, "IK", pr, rng=Rng(b"hi"))
        r = NoiseConnection(False, SR, rng=Rng(b"hr"))
        r.receive(i.start())
        i.receive(r.data_to_send())
        assert i.handshake_done and r.handshake_done
    finally:
        state.hashlib = hkdf.hashlib = hashlib
    assert len(seen) >= 60, len(seen)      # both sides: 37 digests each for IK
