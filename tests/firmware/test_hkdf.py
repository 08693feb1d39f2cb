# dual: cpython micropython
# HMAC-SHA256 and the Noise HKDF: RFC 4231 / RFC 5869 published vectors, and the Noise output chaining.
from mpsupport import unhex, raises
from satellite.noise.hkdf import hmac_sha256, hkdf, HkdfError

# RFC 4231 §4.2, 4.3, 4.4, 4.7 (HMAC-SHA-256 outputs).
RFC4231 = (
    (b"\x0b" * 20, b"Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
    (b"Jefe", b"what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
    (b"\xaa" * 20, b"\xdd" * 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
    (b"\xaa" * 131, b"Test Using Larger Than Block-Size Key - Hash Key First",
     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
)


def test_hmac_sha256_rfc4231_vectors():
    for key, data, want in RFC4231:
        assert hmac_sha256(key, data) == unhex(want)
        assert hmac_sha256(bytearray(key), memoryview(data)) == unhex(want)


def test_hmac_sha256_key_of_exactly_one_block_is_not_hashed():
    # Expected values from CPython's hmac module (64-byte key used as is; 65-byte key hashed first).
    assert hmac_sha256(bytes(range(64)), b"x") == unhex(
        "b8dc75d4220cfd86a5bf7c4301b3698f142a66fd7c004627df558626edb480cd")
    assert hmac_sha256(bytes(range(65)), b"x") == unhex(
        "839c2a8225cd27fb5d7ed3f6dc9a67cc7210572d15a39a276bf53b59d64033f0")
    assert hmac_sha256(b"", b"") == unhex("b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")


def test_hkdf_rfc5869_case3_empty_salt_and_info():
    # RFC 5869 A.3: salt = "" (== Noise chaining key of zero length), info = "", L = 42.
    ikm = b"\x0b" * 22
    prk = "19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04"
    okm = "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
    assert hmac_sha256(b"", ikm) == unhex(prk)
    o1, o2 = hkdf(b"", ikm, 2)
    assert (o1 + o2)[:42] == unhex(okm)
    # 32 zero bytes is the same HMAC key as the empty key (zero padding), so Noise's ck = 0^32 agrees.
    assert hkdf(bytes(32), ikm, 2) == (o1, o2)


def test_hkdf_noise_outputs_chain():
    ck = bytes(range(32))
    ikm = bytes(range(100, 132))
    o = hkdf(ck, ikm, 3)
    assert isinstance(o, tuple) and len(o) == 3 and all(len(x) == 32 for x in o)
    temp = hmac_sha256(ck, ikm)
    assert o[0] == hmac_sha256(temp, b"\x01")
    assert o[1] == hmac_sha256(temp, o[0] + b"\x02")
    assert o[2] == hmac_sha256(temp, o[1] + b"\x03")
    assert hkdf(ck, ikm, 2) == o[:2]
    assert hkdf(ck, b"", 2) != hkdf(ck, b"\x00", 2)


def test_hkdf_refuses_other_output_counts():
    for n in (0, 1, 4):
        assert raises(HkdfError, hkdf, b"", b"", n).code == "HKDF_OUTPUTS"
