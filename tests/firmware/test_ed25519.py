# dual: cpython micropython
# Ed25519 verification (RFC 8032 §5.1.7) and SHA-512 (FIPS 180-4) as the firmware runs them: RFC 8032 §7.1
# vectors, and pyca/cryptography's verdicts on good and tampered signatures (tests/firmware/data, written by
# tools/gen_ed25519_vectors.py; tests/host/test_ed25519_cross.py re-derives them with cryptography).
import json

from mpsupport import unhex
from satellite.noise import ed25519 as E
from satellite.noise.sha512 import sha512

_HERE = __file__.rpartition("/")[0] or "."


def _load(name):
    with open(_HERE + "/data/" + name) as f:
        return json.load(f)


def test_sha512_fips_abc_and_padding_boundaries():
    # FIPS 180-4 §6.4 / the NIST example "abc" (one block); the RFC 8032 SHA(abc) vector signs this digest.
    assert sha512(b"abc") == unhex("ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
                                   "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f")
    for v in _load("ed25519_cross.json")["sha512"]:
        m = bytes((7 * i + 3) & 0xFF for i in range(v["len"]))
        assert sha512(m) == unhex(v["sha512"]), v["len"]
        assert sha512(bytearray(m)) == sha512(memoryview(m)) == unhex(v["sha512"])


def test_rfc8032_7_1_vectors_verify():
    for v in _load("rfc8032_ed25519.json")["vectors"]:
        pub, msg, sig = unhex(v["pub"]), unhex(v["msg"]), unhex(v["sig"])
        assert E.verify(pub, msg, sig) is True, v["name"]
        assert E.verify(bytearray(pub), memoryview(msg), bytearray(sig)) is True, v["name"]


def test_rfc8032_vectors_tampered_are_refused():
    for v in _load("rfc8032_ed25519.json")["vectors"][:3]:
        pub, msg, sig = unhex(v["pub"]), unhex(v["msg"]), unhex(v["sig"])
        assert E.verify(pub, msg + b"\x00", sig) is False, v["name"]
        for i in (0, 31, 32, 63):
            bad = bytearray(sig)
            bad[i] ^= 0x10
            assert E.verify(pub, msg, bytes(bad)) is False, (v["name"], i)
        bad = bytearray(pub)
        bad[0] ^= 1
        assert E.verify(bytes(bad), msg, sig) is False, v["name"]


def test_cryptography_verdicts_good_and_rejections():
    cases = _load("ed25519_cross.json")["ed25519"]
    assert sum(1 for c in cases if c["ok"]) >= 6 and sum(1 for c in cases if not c["ok"]) >= 30
    for c in cases:
        want = c.get("rfc8032", c["ok"])     # RFC 8032 where OpenSSL is more lenient (a y >= p public key)
        assert E.verify(unhex(c["pub"]), unhex(c["msg"]), unhex(c["sig"])) is want, c["name"]


def test_wrong_lengths_are_false_not_errors():
    v = _load("rfc8032_ed25519.json")["vectors"][1]
    pub, msg, sig = unhex(v["pub"]), unhex(v["msg"]), unhex(v["sig"])
    assert E.verify(pub[:31], msg, sig) is False
    assert E.verify(pub + b"\x00", msg, sig) is False
    assert E.verify(pub, msg, sig[:63]) is False
    assert E.verify(pub, msg, sig + b"\x00") is False
    assert E.verify(pub, msg, b"") is False
