"""Cross-checks the firmware AEAD and HKDF against pyca/cryptography and the stdlib (CPython, hypothesis).

The pure path is checked in-process; the viper path is checked by running a batch of random cases
under the micropython unix port and comparing every output with `cryptography`.
"""
import hashlib
import hmac
import json
import os
import pathlib
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.poly1305 import Poly1305

from satellite.noise import chachapoly
from satellite.noise.chachapoly import AuthError, ChaChaPoly
from satellite.noise.hkdf import hkdf, hmac_sha256

ROOT = pathlib.Path(__file__).resolve().parents[2]
keys = st.binary(min_size=32, max_size=32)
nonces = st.binary(min_size=12, max_size=12)
ads = st.one_of(st.just(b""), st.binary(min_size=32, max_size=32), st.binary(max_size=80))
pts = st.binary(max_size=700)


def ref_chacha20(key, counter, nonce, data):
    c = Cipher(algorithms.ChaCha20(key, counter.to_bytes(4, "little") + nonce), mode=None)
    return c.encryptor().update(data)


@settings(max_examples=150, deadline=None)
@given(keys, nonces, ads, pts)
def test_r5_a_aead_matches_cryptography(key, nonce, ad, pt):
    want = ChaCha20Poly1305(key).encrypt(nonce, pt, ad)
    assert chachapoly.aead_encrypt(key, nonce, ad, pt) == want
    assert chachapoly.aead_decrypt(key, nonce, ad, want) == pt


@settings(max_examples=100, deadline=None)
@given(keys, st.integers(0, 2**64 - 1), ads, pts)
def test_r5_a_noise_cipher_matches_cryptography(key, n, ad, pt):
    nonce = bytes(4) + n.to_bytes(8, "little")
    cp = ChaChaPoly()
    cp.set_key(key)
    buf = bytearray(len(pt) + 16)
    assert cp.encrypt_into(n, ad, pt, len(pt), buf) == len(buf)
    assert bytes(buf) == ChaCha20Poly1305(key).encrypt(nonce, pt, ad)
    out = bytearray(len(pt))
    assert cp.decrypt_into(n, ad, buf, len(buf), out) == len(pt) and bytes(out) == pt
    if buf:
        buf[random.randrange(len(buf))] ^= 1 << random.randrange(8)
        with pytest.raises(AuthError):
            cp.decrypt_into(n, ad, buf, len(buf), out)


@settings(max_examples=100, deadline=None)
@given(keys, nonces, st.integers(0, 2**32 - 12), st.binary(max_size=700))
def test_chacha20_and_poly1305_match_cryptography(key, nonce, counter, data):
    assert chachapoly.chacha20_xor(key, counter, nonce, data) == ref_chacha20(key, counter, nonce, data)
    assert chachapoly.poly1305(key, data) == Poly1305.generate_tag(key, data)


def test_last_32_bit_counter_block_matches_cryptography():
    key, nonce = os.urandom(32), os.urandom(12)
    assert chachapoly.chacha20_block(key, 2**32 - 1, nonce) == ref_chacha20(key, 2**32 - 1, nonce, bytes(64))
    with pytest.raises(chachapoly.LimitError):  # OpenSSL would carry into the nonce; RFC 8439 forbids it
        chachapoly.chacha20_xor(key, 2**32 - 1, nonce, bytes(65))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=150), st.binary(max_size=200))
def test_hmac_sha256_matches_stdlib(key, data):
    assert hmac_sha256(key, data) == hmac.new(key, data, hashlib.sha256).digest()


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.binary(max_size=64), st.sampled_from([2, 3]))
def test_noise_hkdf_matches_cryptography_hkdf(ck, ikm, n):
    ref = HKDF(algorithm=hashes.SHA256(), length=32 * n, salt=ck, info=b"").derive(ikm)
    got = hkdf(ck, ikm, n)
    assert b"".join(got) == ref and len(got) == n


_MP_SCRIPT = r"""
import sys, json
from satellite.noise import chachapoly as C
from satellite.noise.chachapoly import ChaChaPoly, AuthError
u = bytes.fromhex
res = []
for c in json.loads(sys.stdin.read()):
    key, ad, pt = u(c["key"]), u(c["ad"]), u(c["pt"])
    cp = ChaChaPoly("viper"); cp.set_key(key)
    buf = bytearray(len(pt) + 16)
    cp.encrypt_into(c["n"], ad, pt, len(pt), buf)
    out = bytearray(len(pt))
    cp.decrypt_into(c["n"], ad, buf, len(buf), out)
    ok = bytes(out) == pt
    bad = bytearray(buf); bad[c["flip"] % len(bad)] ^= 1
    try:
        cp.decrypt_into(c["n"], ad, bad, len(bad), out); ok = False
    except AuthError:
        pass
    res.append({"aead": buf.hex(), "ok": ok,
                "xor": C.chacha20_xor(key, c["ctr"], u(c["nonce"]), pt, "viper").hex(),
                "poly": C.poly1305(key, pt, "viper").hex()})
print(json.dumps(res))
"""


@pytest.mark.needs_micropython
def test_r5_a_viper_path_matches_cryptography_under_micropython(tmp_path):
    from mpharness import micropython_cmd
    mp = micropython_cmd()            # the one finder (alabama.local); the needs_micropython mark skips without it
    rng = random.Random(20240601)
    cases = []
    for length in (0, 1, 15, 16, 17, 63, 64, 65, 640, 961, 4096) * 4:
        cases.append({
            "key": rng.randbytes(32).hex(), "nonce": rng.randbytes(12).hex(),
            "n": rng.choice([0, 1, rng.getrandbits(31), rng.getrandbits(64)]),
            "ctr": rng.choice([0, 1, 2**31 - 1, 2**31, 2**32 - 70]),
            "ad": rng.choice([b"", rng.randbytes(32), rng.randbytes(rng.randrange(1, 50))]).hex(),
            "pt": bytes(rng.choice([0xFF, 0x80]) | rng.getrandbits(8) for _ in range(length)).hex(),
            "flip": rng.getrandbits(16),
        })
    script = tmp_path / "viper_cases.py"
    script.write_text(_MP_SCRIPT)
    env = dict(os.environ, MICROPYPATH=str(ROOT / "firmware"))
    r = subprocess.run([str(mp), str(script)], input=json.dumps(cases).encode(), capture_output=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr.decode() + r.stdout.decode()[-2000:]
    results = json.loads(r.stdout)
    assert len(results) == len(cases)
    for c, res in zip(cases, results):
        key, pt, ad = bytes.fromhex(c["key"]), bytes.fromhex(c["pt"]), bytes.fromhex(c["ad"])
        nonce = bytes(4) + c["n"].to_bytes(8, "little")
        assert bytes.fromhex(res["aead"]) == ChaCha20Poly1305(key).encrypt(nonce, pt, ad)
        assert res["ok"]
        assert bytes.fromhex(res["xor"]) == ref_chacha20(key, c["ctr"], bytes.fromhex(c["nonce"]), pt)
        assert bytes.fromhex(res["poly"]) == Poly1305.generate_tag(key, pt)
