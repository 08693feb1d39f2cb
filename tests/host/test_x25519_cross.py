"""Firmware X25519 (pure path, on CPython) cross-checked against pyca/cryptography with hypothesis.

The viper path is compared with the pure one under micropython by tests/firmware/test_x25519.py;
here the pure path meets an independent implementation, so together both are pinned down.
"""
import pytest
from hypothesis import given, settings, strategies as st

cryptography = pytest.importorskip("cryptography")
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402

from satellite.noise import x25519 as X  # noqa: E402

_P = 2**255 - 19
_RAW = serialization.Encoding.Raw


def _ref(k, u):
    """cryptography's X25519(k, u), or None where it refuses (all-zero shared secret)."""
    priv = X25519PrivateKey.from_private_bytes(k)
    try:
        return priv.exchange(X25519PublicKey.from_public_bytes(u))
    except ValueError:
        return None


def _pub_ref(k):
    return X25519PrivateKey.from_private_bytes(k).public_key().public_bytes(_RAW, serialization.PublicFormat.Raw)


keys = st.binary(min_size=32, max_size=32)


@settings(max_examples=300, deadline=None)
@given(k=keys)
def test_public_key_matches_cryptography(k):
    assert X.public_key(k) == _pub_ref(k)


@settings(max_examples=300, deadline=None)
@given(a=keys, b=keys)
def test_shared_secret_matches_cryptography(a, b):
    pb = _pub_ref(b)
    assert X.x25519(a, pb) == _ref(a, pb)
    assert X.x25519(a, pb) == X.x25519(b, X.public_key(a))


@settings(max_examples=300, deadline=None)
@given(k=keys, u=st.integers(min_value=0, max_value=2**256 - 1))
def test_arbitrary_u_matches_cryptography(k, u):
    """Any 32 bytes as u: high bit set, non-canonical (>= p), small-order points."""
    ub = u.to_bytes(32, "little")
    want = _ref(k, ub)
    got = X.x25519(k, ub)
    if want is None:
        assert got == bytes(32)
    else:
        assert got == want


@pytest.mark.parametrize("u", [0, 1, _P - 1, _P, _P + 1, 2**255 - 1, 2**256 - 1, 2**255 + 9])
def test_edge_u_matches_cryptography(u):
    k = bytes(range(32))
    ub = u.to_bytes(32, "little")
    want = _ref(k, ub)
    assert X.x25519(k, ub) == (bytes(32) if want is None else want)


@pytest.mark.needs_micropython
def test_viper_path_under_micropython_matches_cryptography():
    """200 random (k, u) pairs, u any 32 bytes, run through the viper path on the unix port."""
    import os
    import pathlib
    import random
    import subprocess
    import sys

    from mpharness import micropython_cmd
    mp = micropython_cmd()            # the one finder (alabama.local); the needs_micropython mark skips without it
    root = pathlib.Path(__file__).resolve().parents[2]
    rnd = random.Random(7748)
    pairs = [(rnd.randbytes(32), rnd.randbytes(32)) for _ in range(200)]
    script = (
        "import sys\nfrom satellite.noise import x25519 as X\nassert X.IMPLS[0] == 'viper'\n"
        "for line in sys.stdin:\n"
        "    k, u = line.split()\n"
        "    print(X.x25519(bytes.fromhex(k), bytes.fromhex(u), 'viper').hex())\n")
    env = dict(os.environ, MICROPYPATH=str(root / "firmware"))
    r = subprocess.run([str(mp), "-c", script], input="".join("%s %s\n" % (k.hex(), u.hex()) for k, u in pairs),
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    got = r.stdout.split()
    assert len(got) == len(pairs)
    for (k, u), g in zip(pairs, got):
        want = _ref(k, u)
        assert bytes.fromhex(g) == (bytes(32) if want is None else want)
