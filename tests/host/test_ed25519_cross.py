"""Firmware Ed25519 verification and SHA-512 (on CPython) cross-checked against pyca/cryptography and hashlib,
and the test data the dual firmware test reads (tests/firmware/data) re-derived, so it cannot drift.

tests/firmware/test_ed25519.py runs the same verifier on micropython and the 32-bit build against that data.
"""
import hashlib
import json
import pathlib

from hypothesis import given, settings, strategies as st
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from satellite.noise import ed25519 as E
from satellite.noise.sha512 import sha512

DATA = pathlib.Path(__file__).resolve().parents[1] / "firmware" / "data"
L = 2**252 + 27742317777372353535851937790883648493


def _pub(k):
    return k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _ref(pub, msg, sig):
    try:
        Ed25519PublicKey.from_public_bytes(pub).verify(sig, msg)
        return True
    except (InvalidSignature, ValueError):
        return False


def test_rfc8032_vectors_file_matches_cryptography():
    vs = json.loads((DATA / "rfc8032_ed25519.json").read_text())["vectors"]
    assert [v["name"] for v in vs] == ["TEST 1", "TEST 2", "TEST 3", "TEST 1024", "TEST SHA(abc)"]
    assert len(bytes.fromhex(vs[3]["msg"])) == 1023
    for v in vs:
        k = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(v["secret"]))
        assert _pub(k).hex() == v["pub"], v["name"]
        assert k.sign(bytes.fromhex(v["msg"])).hex() == v["sig"], v["name"]


def test_cross_file_verdicts_are_cryptographys_and_hashlibs():
    doc = json.loads((DATA / "ed25519_cross.json").read_text())
    for c in doc["ed25519"]:
        assert _ref(bytes.fromhex(c["pub"]), bytes.fromhex(c["msg"]), bytes.fromhex(c["sig"])) is c["ok"], c["name"]
    # the one place the firmware follows RFC 8032 against OpenSSL: a public key encoded with y >= p
    assert [c["name"] for c in doc["ed25519"] if "rfc8032" in c] == ["neutral A encoded y = p + 1, S = 0"]
    for v in doc["sha512"]:
        m = bytes((7 * i + 3) & 0xFF for i in range(v["len"]))
        assert hashlib.sha512(m).hexdigest() == v["sha512"]


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=0, max_size=600))
def test_sha512_matches_hashlib(m):
    assert sha512(m) == hashlib.sha512(m).digest()


@settings(max_examples=40, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), msg=st.binary(max_size=300), where=st.integers(0, 63),
       bit=st.integers(0, 7), other=st.binary(min_size=32, max_size=32))
def test_random_keys_agree_with_cryptography(seed, msg, where, bit, other):
    k = Ed25519PrivateKey.from_private_bytes(seed)
    pub, sig = _pub(k), k.sign(msg)
    assert E.verify(pub, msg, sig) is True
    bad = bytearray(sig)
    bad[where] ^= 1 << bit
    assert E.verify(pub, msg, bytes(bad)) is _ref(pub, msg, bytes(bad)) is False
    assert E.verify(pub, msg + b"!", sig) is False
    s = int.from_bytes(sig[32:], "little")
    high = sig[:32] + (s + L).to_bytes(32, "little")             # the same point equation, S >= L: malleated
    assert E.verify(pub, msg, high) is _ref(pub, msg, high) is False
    wrong = _pub(Ed25519PrivateKey.from_private_bytes(other))
    assert E.verify(wrong, msg, sig) is _ref(wrong, msg, sig) is (wrong == pub)
