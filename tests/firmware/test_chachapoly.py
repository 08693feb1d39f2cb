# dual: cpython micropython
# ChaCha20-Poly1305 for the Noise transport: RFC 8439 vectors, c == viper == pure, tamper, limits, zero allocation.
from mpsupport import IS_MICROPYTHON, load_json, unhex, raises, mem_alloc_delta
from satellite.noise import chachapoly
from satellite.noise.chachapoly import ChaChaPoly, AuthError, LimitError, BadKeyError

V = load_json("vectors", "rfc8439.json")
LENGTHS = (0, 1, 15, 16, 17, 63, 64, 65, 640, 4096)


class Rng:
    """Deterministic xorshift32 so both interpreters see the same 'random' inputs."""

    def __init__(self, seed):
        self.s = seed

    def byte(self):
        s = self.s
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        self.s = s
        return s & 0xFF

    def bytes(self, n, high=False):
        b = bytearray(n)
        for i in range(n):
            b[i] = self.byte()
            if high and i % 4 == 3:
                b[i] |= 0x80  # bit 31 of every little-endian 32-bit word
        return bytes(b)


def noise_nonce(n):
    return bytes(4) + n.to_bytes(8, "little")


def test_impls_available():
    assert chachapoly.IMPLS[-1] == "pure"
    if IS_MICROPYTHON:
        import sys
        # the C module (firmware/native/aead.c) is built into the 32-bit test interpreters as into the
        # board image (tools/mp32, alabama image); the PyPI unix port (64-bit) has none
        want = ("c", "viper", "pure") if sys.maxsize < (1 << 32) else ("viper", "pure")
        assert chachapoly.IMPLS == want
        assert ChaChaPoly().impl == want[0]
        # the width check: the mask-free 32-bit twin exactly where viper ints are 32 bits (the board,
        # the 32-bit build), the masked one on the 64-bit port; each is checked against pure below
        import sys
        want = "_chacha32_viper" if sys.maxsize < (1 << 32) else "_chacha_viper"
        assert chachapoly._chacha_viper.__name__.rpartition(".")[2] == want
    else:
        assert chachapoly.IMPLS == ("pure",)
    assert raises(LimitError, ChaChaPoly, "nonesuch").code == "CRYPTO_LIMIT"


def test_rfc8439_chacha20_block_vectors():
    assert len(V["chacha20_block"]) == 6
    for impl in chachapoly.IMPLS:
        for v in V["chacha20_block"]:
            got = chachapoly.chacha20_block(unhex(v["key"]), v["counter"], unhex(v["nonce"]), impl)
            assert got == unhex(v["block"]), (impl, v["section"])


def test_rfc8439_chacha20_encrypt_vectors():
    assert len(V["chacha20_encrypt"]) == 4
    for impl in chachapoly.IMPLS:
        for v in V["chacha20_encrypt"]:
            key, nonce = unhex(v["key"]), unhex(v["nonce"])
            ct = chachapoly.chacha20_xor(key, v["counter"], nonce, unhex(v["plaintext"]), impl)
            assert ct == unhex(v["ciphertext"]), (impl, v["section"])
            assert chachapoly.chacha20_xor(key, v["counter"], nonce, ct, impl) == unhex(v["plaintext"])


def test_rfc8439_poly1305_vectors_incl_a3_edge_cases():
    assert len(V["poly1305"]) == 12
    for impl in chachapoly.IMPLS:
        for v in V["poly1305"]:
            tag = chachapoly.poly1305(unhex(v["key"]), unhex(v["message"]), impl)
            assert tag == unhex(v["tag"]), (impl, v["section"])


def test_rfc8439_poly1305_key_gen_vectors():
    for impl in chachapoly.IMPLS:
        for v in V["poly1305_key_gen"]:
            blk = chachapoly.chacha20_block(unhex(v["key"]), 0, unhex(v["nonce"]), impl)
            assert blk[:32] == unhex(v["otk"]), (impl, v["section"])


def test_r5_a_rfc8439_aead_vectors():
    assert len(V["aead_chacha20_poly1305"]) == 2
    for impl in chachapoly.IMPLS:
        for v in V["aead_chacha20_poly1305"]:
            key, nonce, ad = unhex(v["key"]), unhex(v["nonce"]), unhex(v["aad"])
            pt, want = unhex(v["plaintext"]), unhex(v["ciphertext"]) + unhex(v["tag"])
            assert chachapoly.aead_encrypt(key, nonce, ad, pt, impl) == want, (impl, v["section"])
            assert chachapoly.aead_decrypt(key, nonce, ad, want, impl) == pt


def test_r5_a_noise_nonce_matches_rfc_a5_vector():
    # A.5's nonce is 00000000 || 0102030405060708: exactly a Noise nonce with n = 0x0807060504030201.
    v = V["aead_chacha20_poly1305"][1]
    assert v["section"] == "A.5" and unhex(v["nonce"])[:4] == bytes(4)
    n = int.from_bytes(unhex(v["nonce"])[4:], "little")
    pt, ad = unhex(v["plaintext"]), unhex(v["aad"])
    want = unhex(v["ciphertext"]) + unhex(v["tag"])
    for impl in chachapoly.IMPLS:
        cp = ChaChaPoly(impl)
        cp.set_key(unhex(v["key"]))
        buf = bytearray(len(pt) + 16)
        assert cp.encrypt_into(n, ad, pt, len(pt), buf) == len(want)
        assert bytes(buf) == want
        out = bytearray(len(pt))
        assert cp.decrypt_into(n, ad, buf, len(buf), out) == len(pt)
        assert bytes(out) == pt


def test_noise_nonce_encoding_full_64_bits():
    key = Rng(7).bytes(32, True)
    pt = Rng(8).bytes(70)
    for impl in chachapoly.IMPLS:
        cp = ChaChaPoly(impl)
        cp.set_key(key)
        for n in (0, 1, 0x3FFFFFFF, 0x40000000, 0xFFFFFFFF, 0x100000005, 0xFFFFFFFFFFFFFFFF):
            buf = bytearray(86)
            cp.encrypt_into(n, b"", pt, 70, buf)
            assert bytes(buf) == chachapoly.aead_encrypt(key, noise_nonce(n), b"", pt, "pure"), (impl, n)
        buf = bytearray(86)
        assert raises(LimitError, cp.encrypt_into, -1, b"", pt, 70, buf).code == "CRYPTO_LIMIT"
        assert raises(LimitError, cp.encrypt_into, 1 << 64, b"", pt, 70, buf).code == "CRYPTO_LIMIT"


def test_native_paths_match_pure_on_random_inputs_with_bit31_set():
    native = [i for i in chachapoly.IMPLS if i != "pure"]  # c and viper where they exist
    if not native:
        return  # CPython: the host cross-check compares pure against `cryptography`
    for impl in native:
        rng = Rng(0x9E3779B9)
        counters = (0, 1, 0x7FFFFFFF, 0x80000000, 0xC0000001, 0xFFFFFFF0)
        for i, n in enumerate(LENGTHS):
            high = i % 2 == 0
            key = rng.bytes(32, high)
            nonce = rng.bytes(12, True)
            data = rng.bytes(n, high)
            ad = rng.bytes((0, 1, 12, 32)[i % 4], high)
            ctr = counters[i % len(counters)]
            assert chachapoly.chacha20_xor(key, ctr, nonce, data, impl) == \
                chachapoly.chacha20_xor(key, ctr, nonce, data, "pure"), (impl, n)
            assert chachapoly.chacha20_block(key, ctr, nonce, impl) == \
                chachapoly.chacha20_block(key, ctr, nonce, "pure")
            pkey = rng.bytes(32, True)
            assert chachapoly.poly1305(pkey, data, impl) == chachapoly.poly1305(pkey, data, "pure"), (impl, n)
            assert chachapoly.poly1305(b"\xff" * 32, b"\xff" * n, impl) == \
                chachapoly.poly1305(b"\xff" * 32, b"\xff" * n, "pure"), (impl, n)
            ct = chachapoly.aead_encrypt(key, nonce, ad, data, impl)
            assert ct == chachapoly.aead_encrypt(key, nonce, ad, data, "pure"), (impl, n)
            assert chachapoly.aead_decrypt(key, nonce, ad, ct, impl) == data


def test_viper_unaligned_and_in_place_buffers():
    rng = Rng(1234)
    key = rng.bytes(32, True)
    for impl in chachapoly.IMPLS:
        for n in (17, 64, 200):
            data = rng.bytes(n, True)
            want = chachapoly.aead_encrypt(key, noise_nonce(9), b"", data, "pure")
            cp = ChaChaPoly(impl)
            cp.set_key(key)
            for shift in (0, 1, 2, 3):
                back = bytearray(n + 16 + shift)
                src = memoryview(bytearray(shift) + data)[shift:]
                dst = memoryview(back)[shift:]
                assert cp.encrypt_into(9, b"", src, n, dst) == n + 16
                assert bytes(dst) == want, (impl, n, shift)
                assert cp.decrypt_into(9, b"", dst, n + 16, dst) == n  # in place, unaligned
                assert bytes(dst[:n]) == data
            buf = bytearray(data) + bytearray(16)
            assert cp.encrypt_into(9, b"", buf, n, buf) == n + 16  # in place, aligned
            assert bytes(buf) == want


def test_viper_mixed_alignment_of_src_dst_and_ad():
    # The fast path picks 32-bit, 16-bit or byte access per buffer; every pairing must agree with pure.
    rng = Rng(4321)
    key = rng.bytes(32, True)
    data = rng.bytes(200, True)
    ad0 = rng.bytes(37, True)
    for impl in chachapoly.IMPLS:
        cp = ChaChaPoly(impl)
        cp.set_key(key)
        for sa in (0, 1, 2, 3):
            for da in (0, 2, 3):
                for n in (64, 131, 200):
                    ad = memoryview(bytearray(sa) + ad0)[sa:]
                    want = chachapoly.aead_encrypt(key, noise_nonce(5), ad0, data[:n], "pure")
                    src = memoryview(bytearray(sa) + data[:n])[sa:]
                    dst = memoryview(bytearray(da + n + 16))[da:]
                    assert cp.encrypt_into(5, ad, src, n, dst) == n + 16
                    assert bytes(dst) == want, (impl, sa, da, n)
                    back = memoryview(bytearray(sa + n))[sa:]
                    assert cp.decrypt_into(5, ad, dst, n + 16, back) == n
                    assert bytes(back) == data[:n], (impl, sa, da, n)


def test_chacha20_counter_is_32_bits_and_never_wraps():
    key, nonce = Rng(3).bytes(32, True), Rng(4).bytes(12, True)
    for impl in chachapoly.IMPLS:
        last = chachapoly.chacha20_block(key, 0xFFFFFFFF, nonce, impl)
        prev = chachapoly.chacha20_block(key, 0xFFFFFFFE, nonce, impl)
        assert chachapoly.chacha20_xor(key, 0xFFFFFFFF, nonce, bytes(64), impl) == last
        assert chachapoly.chacha20_xor(key, 0xFFFFFFFE, nonce, bytes(128), impl) == prev + last
        e = raises(LimitError, chachapoly.chacha20_xor, key, 0xFFFFFFFF, nonce, bytes(65), impl)
        assert e.code == "CRYPTO_LIMIT"
        raises(LimitError, chachapoly.chacha20_xor, key, 0xFFFFFFFE, nonce, bytes(129), impl)
        raises(LimitError, chachapoly.chacha20_block, key, 1 << 32, nonce, impl)
        raises(LimitError, chachapoly.chacha20_block, key, -1, nonce, impl)


def test_r5_a_any_flipped_bit_in_ct_tag_or_ad_fails_auth():
    key = Rng(5).bytes(32, True)
    pt = Rng(6).bytes(21)
    ad = Rng(7).bytes(32)
    for impl in chachapoly.IMPLS:
        cp = ChaChaPoly(impl)
        cp.set_key(key)
        msg = bytearray(37)
        cp.encrypt_into(3, ad, pt, 21, msg)
        out = bytearray(b"\xaa" * 21)
        for i in range(37):
            for b in range(8):
                bad = bytearray(msg)
                bad[i] ^= 1 << b
                e = raises(AuthError, cp.decrypt_into, 3, ad, bad, 37, out)
                assert e.code == "AUTH_FAILED" and isinstance(e, ValueError)
        assert out == bytearray(b"\xaa" * 21)  # nothing released
        for i in range(32):
            for b in range(8):
                bad_ad = bytearray(ad)
                bad_ad[i] ^= 1 << b
                raises(AuthError, cp.decrypt_into, 3, bad_ad, msg, 37, out)
        raises(AuthError, cp.decrypt_into, 4, ad, msg, 37, out)  # wrong nonce
        raises(AuthError, cp.decrypt_into, 3, b"", msg, 37, out)  # missing ad
        raises(AuthError, cp.decrypt_into, 3, ad, msg[:36], 36, out)  # truncated
        other = ChaChaPoly(impl)
        other.set_key(Rng(99).bytes(32))
        raises(AuthError, other.decrypt_into, 3, ad, msg, 37, out)  # wrong key
        assert cp.decrypt_into(3, ad, msg, 37, out) == 21 and bytes(out) == pt


def test_r5_a_empty_plaintext_is_a_bare_tag():
    for impl in chachapoly.IMPLS:
        cp = ChaChaPoly(impl)
        cp.set_key(bytes(32))
        tag = bytearray(16)
        assert cp.encrypt_into(0, b"", b"", 0, tag) == 16
        assert bytes(tag) == chachapoly.aead_encrypt(bytes(32), bytes(12), b"", b"", "pure")
        assert cp.decrypt_into(0, b"", tag, 16, bytearray(0)) == 0


def test_limits_are_checked_before_work():
    for impl in chachapoly.IMPLS:
        cp = ChaChaPoly(impl)
        assert raises(BadKeyError, cp.encrypt_into, 0, b"", b"x", 1, bytearray(17)).code == "BAD_KEY"
        assert raises(BadKeyError, cp.set_key, bytes(31)).code == "BAD_KEY"
        cp.set_key(bytes(32))
        big = bytearray(65536)
        assert raises(LimitError, cp.encrypt_into, 0, b"", big, 65520, big).code == "CRYPTO_LIMIT"
        assert cp.encrypt_into(0, b"", big, 65519, big) == 65535
        assert cp.decrypt_into(0, b"", big, 65535, big) == 65519
        raises(LimitError, cp.decrypt_into, 0, b"", big, 65536, big)
        raises(LimitError, cp.decrypt_into, 0, b"", big, 15, big)
        raises(LimitError, cp.encrypt_into, 0, b"", b"abc", 4, big)  # beyond src
        raises(LimitError, cp.encrypt_into, 0, b"", b"abc", 3, bytearray(18))  # dst too small
        raises(LimitError, cp.decrypt_into, 0, b"", bytes(20), 20, bytearray(3))


def _steady_state(impl):
    cp = ChaChaPoly(impl)
    cp.set_key(Rng(11).bytes(32, True))
    ad = Rng(12).bytes(32)
    src = bytearray(Rng(13).bytes(640))
    msg = bytearray(656)
    out = bytearray(640)

    def seal():
        cp.encrypt_into(1000, ad, src, 640, msg)

    def open_():
        cp.decrypt_into(1000, ad, msg, 656, out)

    seal()
    open_()
    assert out == src
    return mem_alloc_delta(seal), mem_alloc_delta(open_)


def test_viper_encrypt_decrypt_640_allocate_nothing():
    seal, open_ = _steady_state(chachapoly.IMPLS[0])
    if IS_MICROPYTHON:
        assert (seal, open_) == (0, 0)
    else:
        assert (seal, open_) == (None, None)


def test_every_native_path_encrypts_and_decrypts_640_allocating_nothing():
    native = [i for i in chachapoly.IMPLS if i != "pure"]
    for impl in native:
        assert _steady_state(impl) == (0, 0), impl
    assert bool(native) == IS_MICROPYTHON


def test_c_viper_and_pure_agree_on_random_lengths_in_place_and_not_with_ad():
    impls = chachapoly.IMPLS
    if len(impls) < 2:
        return  # CPython: pure alone (the host cross-check compares it against `cryptography`)
    rng = Rng(0xC0FFEE)
    lengths = [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 650, 970, 1999, 2000]
    for _ in range(10):
        lengths.append((rng.byte() << 3 | rng.byte() & 7) % 2001)
    ciphers = {}
    for impl in impls:
        ciphers[impl] = ChaChaPoly(impl)
    for i, n in enumerate(lengths):
        key = rng.bytes(32, i % 2 == 0)
        for cp in ciphers.values():
            cp.set_key(key)
        nonce = (rng.byte() << 16) | rng.byte()
        ad = rng.bytes((0, 1, 13, 32, 100)[i % 5], True)
        data = rng.bytes(n, True)
        sealed = {}
        for impl, cp in ciphers.items():
            out = bytearray(n + 16)
            assert cp.encrypt_into(nonce, ad, data, n, out) == n + 16
            buf = bytearray(data) + bytearray(16)                        # in place
            assert cp.encrypt_into(nonce, ad, buf, n, buf) == n + 16
            assert buf == out, (impl, n)
            sealed[impl] = bytes(out)
            back = bytearray(n)
            assert cp.decrypt_into(nonce, ad, out, n + 16, back) == n
            assert cp.decrypt_into(nonce, ad, buf, n + 16, buf) == n      # in place
            assert bytes(back) == data and bytes(buf[:n]) == data, (impl, n)
        assert len(set(sealed.values())) == 1, (n, list(sealed))
        pkey = rng.bytes(32, True)
        tags = set(chachapoly.poly1305(pkey, data, impl) for impl in impls)
        ctr = (0, 1, 0x7FFFFFFF, 0xFFFFFF00)[i % 4]
        nonce12 = rng.bytes(12, True)
        streams = set(chachapoly.chacha20_xor(key, ctr, nonce12, data, impl) for impl in impls)
        assert len(tags) == 1 and len(streams) == 1, n


def _c():
    return chachapoly._aead_c


def test_c_module_refuses_lengths_beyond_its_buffers():
    c = _c()
    if c is None:
        return  # no C module in this interpreter (CPython, the 64-bit unix port)
    import array
    ctx = array.array("I", [0] * 48)
    run = c.run
    assert (c.XOR, c.SEAL, c.OPEN, c.POLY, c.NONCE_IN_Q, c.CTX_WORDS) == (0, 1, 2, 3, 4, 48)
    src, dst = bytes(100), bytearray(116)
    assert run(0, 7, ctx, b"ad", 2, src, dst, 100, c.SEAL | c.NONCE_IN_Q) == 0
    assert ctx[14] == 7
    sealed = bytes(dst)
    for args in (
        (ctx, b"", 0, src, bytearray(100), 101, c.XOR),         # n beyond src
        (ctx, b"", 0, src, bytearray(99), 100, c.XOR),          # n beyond dst
        (ctx, b"", 0, src, bytearray(115), 100, c.SEAL),        # no room for the tag
        (ctx, b"", 0, src, bytearray(100), 85, c.OPEN),         # tag beyond src
        (ctx, b"", 0, sealed, bytearray(99), 100, c.OPEN),      # n beyond dst
        (ctx, b"", 0, src, bytearray(15), 16, c.POLY),          # tag beyond dst
        (ctx, b"ad", 3, src, dst, 100, c.SEAL),                 # adl beyond ad
        (ctx, b"", -1, src, dst, 100, c.SEAL),                  # negative adl
        (ctx, b"", 0, src, dst, -1, c.XOR),                     # negative n
        (ctx, b"", 0, src, dst, 10, 8),                         # unknown mode
        (ctx, b"", 0, src, dst, 10, -1),
        (array.array("I", [0] * 47), b"", 0, src, dst, 10, c.XOR),   # short ctx
        (memoryview(bytearray(200))[1:], b"", 0, src, dst, 10, c.XOR),  # unaligned ctx
    ):
        before = bytes(args[4])
        raises(ValueError, run, 0, 0, *args)
        assert bytes(args[4]) == before  # nothing written
    raises(ValueError, run, 0, -1, ctx, b"", 0, src, dst, 10, c.XOR | c.NONCE_IN_Q)
    raises((ValueError, OverflowError), run, 0, 1 << 40, ctx, b"", 0, src, dst, 10, c.XOR | c.NONCE_IN_Q)
    # a dst that overlaps src without being it
    buf = bytearray(200)
    raises(ValueError, run, 0, 0, ctx, b"", 0, memoryview(buf)[0:100], memoryview(buf)[1:117], 100, c.SEAL)
    raises(ValueError, run, 0, 0, ctx, b"", 0, memoryview(buf)[8:108], memoryview(buf)[0:100], 100, c.XOR)
    assert run(0, 0, ctx, b"", 0, memoryview(buf)[0:100], memoryview(buf)[100:200], 100, c.XOR) == 0
    raises(TypeError, run, 0, 0, ctx, b"", 0, src, bytes(116), 100, c.SEAL)  # read-only dst
    raises(TypeError, run, 0, 0, ctx, b"", 0, src)                            # too few arguments


def test_c_module_open_reports_a_bad_tag_and_leaves_dst_untouched():
    c = _c()
    if c is None:
        return
    import array
    ctx = array.array("I", [0] * 48)
    msg = bytearray(36)
    assert c.run(0, 3, ctx, b"", 0, b"twenty bytes of text", msg, 20, c.SEAL | c.NONCE_IN_Q) == 0
    out = bytearray(b"\xaa" * 20)
    msg[35] ^= 0x80
    assert c.run(0, 3, ctx, b"", 0, msg, out, 20, c.OPEN | c.NONCE_IN_Q) == 1
    assert out == bytearray(b"\xaa" * 20)
    msg[35] ^= 0x80
    assert c.run(0, 3, ctx, b"", 0, msg, out, 20, c.OPEN | c.NONCE_IN_Q) == 0
    assert bytes(out) == b"twenty bytes of text"
