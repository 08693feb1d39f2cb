# dual: cpython micropython
# X25519 (RFC 7748) vectors on every available implementation, and viper vs pure on edge inputs.
from mpsupport import IS_MICROPYTHON, load_json, unhex, raises, mem_alloc_delta
from satellite.noise import x25519 as X

_P = 2**255 - 19


def _vectors():
    return load_json("vectors", "rfc7748.json")


def _le(n):
    """32-byte little-endian encoding of 0 <= n < 2**256 (no int.to_bytes on small ints needed)."""
    return bytes((n >> (8 * i)) & 0xFF for i in range(32))


class _Rng:
    """Deterministic xorshift32 byte source, the same on both interpreters (values stay < 2**32)."""

    def __init__(self, seed):
        self.s = seed

    def __call__(self, n):
        out = bytearray(n)
        s = self.s
        for i in range(n):
            s ^= (s << 13) & 0xFFFFFFFF
            s ^= s >> 17
            s ^= (s << 5) & 0xFFFFFFFF
            out[i] = s & 0xFF
        self.s = s
        return bytes(out)


def test_impls_listed():
    if IS_MICROPYTHON:
        assert X.IMPLS == ("viper", "pure")
    else:
        assert X.IMPLS == ("pure",)


def test_rfc7748_5_2_vectors_all_impls():
    for impl in X.IMPLS:
        for v in _vectors()["x25519"]:
            got = X.x25519(unhex(v["scalar"]), unhex(v["u"]), impl)
            assert got == unhex(v["output"]), (impl, v["section"])


def test_rfc7748_5_2_iterated_1_and_1000_all_impls():
    it = _vectors()["x25519_iterated"]
    want = {}
    for r in it["results"]:
        want[r["iterations"]] = unhex(r["k"])
    for impl in X.IMPLS:
        n_max = 1000  # the 1,000,000-iteration result is left out (hours on the pure path)
        k = unhex(it["initial_k"])
        u = unhex(it["initial_u"])
        for i in range(1, n_max + 1):
            k, u = X.x25519(k, u, impl), k
            if i in (1, 1000):
                assert k == want[i], (impl, i)


def test_rfc7748_6_1_alice_bob_all_impls():
    d = _vectors()["x25519_dh"]
    a, b = unhex(d["alice_private"]), unhex(d["bob_private"])
    for impl in X.IMPLS:
        assert X.public_key(a, impl) == unhex(d["alice_public"])
        assert X.public_key(b, impl) == unhex(d["bob_public"])
        assert X.x25519(a, unhex(d["bob_public"]), impl) == unhex(d["shared_secret"])
        assert X.x25519(b, unhex(d["alice_public"]), impl) == unhex(d["shared_secret"])


def _edge_us():
    us = [0, 1, 2, 9, _P - 1, _P, _P + 1, _P + 18, 2**255 - 1, 2**256 - 1, 2**255, 2**255 + 9,
          2**254, (1 << 13) - 1, 0x1FFF << 247]
    # bit 31 of every 32-bit word set (and everything else set / clear)
    w31 = 0
    for i in range(8):
        w31 |= 1 << (32 * i + 31)
    us += [w31, w31 | 0x7FFFFFFF, w31 ^ (2**256 - 1)]
    return [_le(u) for u in us]


def _edge_ks():
    w31 = 0
    for i in range(8):
        w31 |= 1 << (32 * i + 31)
    return [bytes(32), b"\xff" * 32, _le(w31), _le(1), _le(2**254), _le(2**255 - 20)]


def test_viper_matches_pure_on_edge_inputs():
    if "viper" not in X.IMPLS:
        return
    for k in _edge_ks():
        for u in _edge_us():
            assert X.x25519(k, u, "viper") == X.x25519(k, u, "pure"), (k, u)


def test_viper_matches_pure_on_random_inputs():
    if "viper" not in X.IMPLS:
        return
    rng = _Rng(0x9E3779B9)
    for i in range(40):
        k = rng(32)
        u = bytearray(rng(32))
        if i % 4 == 1:
            u[31] |= 0x80          # high bit set: must be ignored
        elif i % 4 == 2:
            u[31] |= 0x7F          # likely >= p after masking: non-canonical
            u[0] |= 0xF0
        elif i % 4 == 3:
            for j in range(3, 32, 4):
                u[j] |= 0x80       # bit 31 of every 32-bit word
        assert X.x25519(k, bytes(u), "viper") == X.x25519(k, bytes(u), "pure"), i


def test_high_bit_of_u_is_ignored():
    k = _Rng(7)(32)
    u = bytearray(_Rng(8)(32))
    u[31] &= 0x7F
    hi = bytearray(u)
    hi[31] |= 0x80
    for impl in X.IMPLS:
        assert X.x25519(k, bytes(hi), impl) == X.x25519(k, bytes(u), impl)


def test_non_canonical_u_equals_reduced_u():
    k = _Rng(11)(32)
    for impl in X.IMPLS:
        for r in (0, 1, 5, 18):
            assert X.x25519(k, _le(_P + r), impl) == X.x25519(k, _le(r), impl), (impl, r)


def test_small_order_u_gives_zero():
    k = _Rng(12)(32)
    for impl in X.IMPLS:
        for u in (0, 1, _P - 1, _P, _P + 1):
            assert X.x25519(k, _le(u), impl) == bytes(32), (impl, u)


def test_scalar_is_clamped():
    k = bytearray(_Rng(13)(32))
    c = bytearray(k)
    c[0] &= 248
    c[31] = (c[31] & 127) | 64
    u = b"\x09" + bytes(31)
    for impl in X.IMPLS:
        assert X.x25519(bytes(k), u, impl) == X.x25519(bytes(c), u, impl)


def test_inputs_accept_bytearray_and_memoryview():
    d = _vectors()["x25519_dh"]
    a = unhex(d["alice_private"])
    bp = unhex(d["bob_public"])
    for impl in X.IMPLS:
        assert X.x25519(bytearray(a), memoryview(bp), impl) == unhex(d["shared_secret"])


def test_generate_private_uses_rng_and_clamps():
    calls = []

    def rng(n):
        calls.append(n)
        return b"\xff" * n
    k = X.generate_private(rng)
    assert calls == [32]
    assert k == b"\xf8" + b"\xff" * 30 + b"\x7f"
    assert X.public_key(k) == X.x25519(b"\xff" * 32, b"\x09" + bytes(31))


def test_bad_lengths_and_impl_raise_typed_errors():
    e = raises(X.X25519Error, X.x25519, bytes(31), bytes(32))
    assert e.code == "bad_length"
    e = raises(X.X25519Error, X.x25519, bytes(32), bytes(33))
    assert e.code == "bad_length"
    e = raises(X.X25519Error, X.generate_private, lambda n: bytes(n - 1))
    assert e.code == "bad_length"
    e = raises(X.X25519Error, X.x25519, bytes(32), bytes(32), "nope")
    assert e.code == "unknown_impl"


def test_viper_allocation_per_call_is_small():
    if "viper" not in X.IMPLS:
        return
    k = _Rng(14)(32)
    u = _Rng(15)(32)
    X.x25519(k, u, "viper")
    d = mem_alloc_delta(X.x25519, k, u, "viper")
    # state buffer 880 B + output 32 B + bytes copy + scalar copy + three memoryviews
    assert d is not None and d <= 1400, d
