"""Host Noise layer (alabama.noise): published vectors, the binding's edges, tampering, and byte-for-byte
interop with the firmware state machine (run here on CPython with its pure primitives)."""
import hashlib
import json
import random

import pytest

from alabama.errors import AlabamaError
from alabama.noise import (HandshakeError, HandshakeState, NoiseConnection, NoiseError, NoiseStateError,
                           TransportError, public_key)
from alabama.noise import state as hstate
from satellite.noise import state as fstate
from satellite.noise import transport as ftransport

SI = bytes(range(1, 33))
SR = bytes(range(101, 133))
SX = bytes(range(201, 233))


def _vectors(shared_dir):
    out = []
    for f in ("noise_vectors.json", "noise_vectors_snow.json"):
        out += [(f, k, v) for k, v in enumerate(json.loads((shared_dir / "vectors" / f).read_text())["vectors"])]
    return out


class Rng:
    def __init__(self, seed):
        self.seed, self.ctr = seed, 0

    def __call__(self, n):
        out = b""
        while len(out) < n:
            self.ctr += 1
            out += hashlib.sha256(b"%s/%d" % (self.seed, self.ctr)).digest()
        return out[:n]


def test_r5_b_host_vectors_every_message_both_roles(shared_dir):
    vs = _vectors(shared_dir)
    assert len(vs) == 6
    for f, k, v in vs:
        u = bytes.fromhex
        pat = v["protocol_name"].split("_")[1]
        rs = u(v["init_remote_static"]) if v.get("init_remote_static") else None
        i = HandshakeState(pat, True, u(v["init_prologue"]), s=u(v["init_static"]), rs=rs, e=u(v["init_ephemeral"]))
        r = HandshakeState(pat, False, u(v["resp_prologue"]), s=u(v["resp_static"]), e=u(v["resp_ephemeral"]))
        for n, m in enumerate(v["messages"]):
            snd, rcv = (i, r) if n % 2 == 0 else (r, i)
            p, c = u(m["payload"]), u(m["ciphertext"])
            if not snd.complete:
                assert snd.write_message(p) == c, (f, k, n)
                assert rcv.read_message(c) == p, (f, k, n)
            else:
                assert snd.cipher_send.encrypt_with_ad(b"", p) == c, (f, k, n)
                assert rcv.cipher_recv.decrypt_with_ad(b"", c) == p
        if "handshake_hash" in v:
            assert i.handshake_hash == r.handshake_hash == u(v["handshake_hash"])


def test_errors_are_alabama_errors_with_codes():
    for cls in (HandshakeError, TransportError, NoiseStateError):
        assert issubclass(cls, NoiseError) and issubclass(cls, AlabamaError)
        assert cls("X", "m").code == "X"


# ---- connections of either implementation -------------------------------------------------------

def host_conn(initiator, key, pattern=None, pinned=None, rng=None, **kw):
    return NoiseConnection(initiator, key, pattern=pattern, remote_static=pinned, rng=rng, **kw)


def fw_conn(initiator, key, pattern=None, pinned=None, rng=None, **kw):
    return ftransport.NoiseConnection(initiator, key, pattern, pinned, rng=rng, **kw)


IMPLS = {"host": host_conn, "fw": fw_conn}
PAIRS = [("host", "host"), ("fw", "host"), ("host", "fw"), ("fw", "fw")]


def make_pair(ini, res, pattern, seed, resp_key=SR, pinned=None):
    rng = Rng(seed)
    if pattern == "IK" and pinned is None:
        pinned = public_key(SR)
    return IMPLS[ini](True, SI, pattern, pinned, rng), IMPLS[res](False, resp_key, rng=rng)


def frames(data):
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 2], "big")
        out.append(bytes(data[pos:pos + 2 + n]))
        pos += 2 + n
    return out


def feed(conn, data, how):
    if how == "whole":
        conn.receive(data)
    elif how == "bytewise":
        for k in range(len(data)):
            conn.receive(data[k:k + 1])
    else:
        rnd = random.Random(len(data))
        pos = 0
        while pos < len(data):
            n = rnd.randint(1, 300)
            conn.receive(data[pos:pos + n])
            pos += n


@pytest.mark.parametrize("ini,res", PAIRS)
@pytest.mark.parametrize("pattern", ["IK", "XX"])
@pytest.mark.parametrize("how", ["whole", "bytewise", "random"])
def test_r5_1_2_a_interop_host_and_firmware(ini, res, pattern, how):
    i, r = make_pair(ini, res, pattern, b"%s%s%s" % (ini.encode(), res.encode(), pattern.encode()))
    feed(r, i.start(), how)
    reply = r.data_to_send()
    if r.handshake_done:                      # IK: the responder may talk at once (trailing data)
        reply += r.encrypt(b"core first")
    feed(i, reply, how)
    if not r.handshake_done:
        feed(r, i.data_to_send() + i.encrypt(b"sat first"), how)
        assert r.read_plaintext() == b"sat first"
    else:
        assert i.read_plaintext() == b"core first"
    assert i.handshake_done and r.handshake_done and i.pattern == r.pattern == pattern
    assert i.handshake_hash == r.handshake_hash
    assert r.remote_static == public_key(SI) and i.remote_static == public_key(SR)
    data = bytes(random.Random(1).getrandbits(8) for _ in range(66000))
    feed(r, i.encrypt(data), "whole" if how == "bytewise" else how)
    assert r.read_plaintext() == data
    small = [bytes([k]) * (k % 37) for k in range(200)]
    feed(i, b"".join(r.encrypt(s) for s in small), how)
    assert i.read_plaintext() == b"".join(small)


@pytest.mark.parametrize("pattern", ["IK", "XX"])
def test_host_and_firmware_emit_identical_bytes(pattern):
    """Same keys, same rng: the two independent state machines produce the same wire bytes."""
    outs = []
    for impl in ("host", "fw"):
        i, r = make_pair(impl, impl, pattern, b"same")
        wire = [i.start()]
        r.receive(wire[-1])
        wire.append(r.data_to_send())
        i.receive(wire[-1])
        wire.append(i.data_to_send())
        if wire[-1]:
            r.receive(wire[-1])
        wire.append(i.encrypt(b"x" * 70000) + r.encrypt(b"y"))
        outs.append((wire, i.handshake_hash))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("impl", ["host", "fw"])
def test_transport_length_0_to_17_rejected_typed(impl):
    for n in range(18):
        i, r = make_pair(impl, impl, "XX", b"l%d" % n)
        r.receive(i.start())
        i.receive(r.data_to_send())
        r.receive(i.data_to_send())
        with pytest.raises(Exception) as ei:
            r.receive(bytes([0, n]) + bytes(n))
        assert ei.value.code == ("MSG_TOO_SHORT" if n < 16 else "DECRYPT_FAILED")
        assert type(ei.value).__name__ == "TransportError"
        assert r.closed


def test_host_plaintext_over_65519_rejected_and_split():
    cs = hstate.CipherState()
    cs.initialize_key(bytes(32))
    with pytest.raises(NoiseStateError) as ei:
        cs.encrypt_with_ad(b"", bytes(65520))
    assert ei.value.code == "PLAINTEXT_TOO_LARGE"
    i, r = make_pair("host", "host", "IK", b"big")
    r.receive(i.start())
    i.receive(r.data_to_send())
    assert [len(f) for f in frames(i.encrypt(bytes(65520)))] == [2 + 65535, 2 + 17]


def test_host_nonce_limit_and_poisoning():
    a, b = hstate.CipherState(), hstate.CipherState()
    a.initialize_key(bytes(32))
    b.initialize_key(bytes(32))
    a.set_nonce(hstate.MAX_NONCE - 1)
    b.set_nonce(hstate.MAX_NONCE - 1)
    assert b.decrypt_with_ad(b"", a.encrypt_with_ad(b"", b"z")) == b"z"
    with pytest.raises(NoiseStateError, match="2\\*\\*64-1") as ei:
        a.encrypt_with_ad(b"", b"z")
    assert ei.value.code == "NONCE_EXHAUSTED"
    c, d = hstate.CipherState(), hstate.CipherState()
    c.initialize_key(bytes(32))
    d.initialize_key(bytes(32))
    m = c.encrypt_with_ad(b"", b"ok")
    with pytest.raises(TransportError):
        d.decrypt_with_ad(b"", m[:-1] + bytes([m[-1] ^ 1]))
    with pytest.raises(NoiseStateError) as ei:
        d.decrypt_with_ad(b"", m)
    assert ei.value.code == "FAILED"


@pytest.mark.parametrize("name", [b"Noise_NN_25519_ChaChaPoly_SHA256", b"Noise_IK_25519_AESGCM_SHA256",
                                  b"Noise_XX_448_ChaChaPoly_BLAKE2b", b"", b"x" * 33, b"\xff" * 32,
                                  b"Noise_IK_25519_ChaChaPoly_SHA256\x00", b"noise_ik_25519_chachapoly_sha256"])
@pytest.mark.parametrize("impl", ["host", "fw"])
def test_r5_1_1_a_responder_rejects_other_suites(name, impl):
    r = IMPLS[impl](False, SR, rng=Rng(b"n"))
    with pytest.raises(Exception) as ei:
        r.receive(len(name).to_bytes(2, "big") + name)
    assert ei.value.code == "UNSUPPORTED_PROTOCOL" and type(ei.value).__name__ == "HandshakeError"
    assert r.closed and r.data_to_send() == b""


@pytest.mark.parametrize("ini", ["host", "fw"])
@pytest.mark.parametrize("res", ["host", "fw"])
def test_r7_3_c_ik_key_mismatch_never_falls_back(ini, res):
    i, r = make_pair(ini, res, "IK", b"mm", resp_key=SX)
    with pytest.raises(Exception) as ei:
        r.receive(i.start())
    assert ei.value.code == "DECRYPT_FAILED" and r.closed
    with pytest.raises(Exception) as ei:
        i.receive_eof()
    assert ei.value.code == "IK_KEY_MISMATCH" and "pinned" in str(ei.value)
    assert i.closed and i.pattern == "IK" and i.data_to_send() == b""      # no XX offer queued
    # a forged message 2 (any responder without the pinned key) fails the AEAD check
    i, _ = make_pair(ini, res, "IK", b"mm2")
    i.start()
    fake = HandshakeState("IK", True, b"", s=SX, rs=public_key(SX), rng=Rng(b"f")).write_message()[:48]
    with pytest.raises(Exception) as ei:
        i.receive(b"\x00\x30" + fake)
    assert ei.value.code == "IK_KEY_MISMATCH" and type(ei.value).__name__ == "HandshakeError"
    assert i.closed and i.data_to_send() == b""


def tamper_trial(rnd, ini, res, pattern, kind):
    i, r = make_pair(ini, res, pattern, b"t%d" % rnd.getrandbits(32))
    sent = {True: b"", False: b""}
    queue = [(True, f) for f in frames(i.start())]
    target = rnd.randrange(1 if kind == "replay" else 0, (4 if pattern == "XX" else 3) + 4)
    k, queued, err = 0, False, None
    while err is None and (queue or not queued):
        if not queue:
            if not (i.handshake_done and r.handshake_done):
                break
            queued = True
            for _ in range(2):
                for side, conn in ((True, i), (False, r)):
                    p = rnd.randbytes(rnd.randint(1, 300))
                    sent[side] += p
                    queue += [(side, f) for f in frames(conn.encrypt(p))]
            continue
        from_i, f = queue.pop(0)
        dst = r if from_i else i
        deliver, stop = [f], False
        if k == target:
            if kind == "flip":
                g = bytearray(f)
                bit = rnd.randrange((len(f) - 2) * 8)
                g[2 + bit // 8] ^= 1 << (bit % 8)
                deliver = [bytes(g)]
            elif kind == "truncate":
                n = len(f) - 2 - rnd.randint(1, len(f) - 2)
                deliver = [n.to_bytes(2, "big") + f[2:2 + n]]
            elif kind == "cut_eof":
                deliver, stop = [f[:rnd.randint(1, len(f) - 1)]], True
            else:
                deliver = [f, f]
        for g in deliver:
            try:
                dst.receive(g)
            except NoiseError as e:  # host errors
                err = (dst, e)
                break
            except fstate.NoiseError as e:  # firmware errors
                err = (dst, e)
                break
        if stop:
            break
        k += 1
        if err is None:
            queue += [(not from_i, g) for g in frames(dst.data_to_send())]
    if err is None:
        for conn in (r, i):
            try:
                conn.receive_eof()
            except (NoiseError, fstate.NoiseError) as e:
                err = (conn, e)
                break
    assert err is not None, "undetected %s of message %d (%s->%s %s)" % (kind, target, ini, res, pattern)
    conn, e = err
    assert conn.closed
    with pytest.raises(Exception) as ei:
        conn.receive(b"\x00\x10")
    assert ei.value.code == "CLOSED"
    for c, side in ((r, True), (i, False)):
        if not c.closed:
            got = c.read_plaintext()
            assert sent[side][:len(got)] == got
    if conn is i and pattern == "IK" and not i.handshake_done:
        assert e.code in ("IK_KEY_MISMATCH", "MSG_TOO_SHORT")
    return conn is i, e.code


@pytest.mark.parametrize("ini,res", PAIRS[:3])
def test_r5_a_tampering_100_of_100_rejected(ini, res):
    rnd = random.Random("%s-%s" % (ini, res))
    detected_by = {True: 0, False: 0}
    for t in range(100):
        by_initiator, code = tamper_trial(rnd, ini, res, ("IK", "XX")[t % 2],
                                          ("flip", "truncate", "cut_eof", "replay")[(t // 2) % 4])
        detected_by[by_initiator] += 1
        assert code in ("DECRYPT_FAILED", "MSG_TOO_SHORT", "UNSUPPORTED_PROTOCOL", "IK_KEY_MISMATCH", "EOF",
                        "UNEXPECTED_MESSAGE")
    assert sum(detected_by.values()) == 100 and detected_by[True] > 0 and detected_by[False] > 0
