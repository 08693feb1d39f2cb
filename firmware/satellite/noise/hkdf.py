# HMAC-SHA256 (RFC 2104) and the Noise HKDF (Noise spec §4.3) over hashlib.sha256; no I/O, not a hot path.
import hashlib

from micropython import const

_BLOCK_LEN = const(64)  # SHA-256 block size
_HASH_LEN = const(32)  # SHA-256 output size


class HkdfError(ValueError):
    """hkdf() was asked for a number of outputs Noise does not define."""
    code = "HKDF_OUTPUTS"


def hmac_sha256(key, data):
    """HMAC-SHA256(key, data) -> 32 bytes. A key longer than one block is hashed first."""
    if len(key) > _BLOCK_LEN:
        key = hashlib.sha256(key).digest()
    ipad = bytearray(_BLOCK_LEN)
    opad = bytearray(_BLOCK_LEN)
    for i in range(_BLOCK_LEN):
        k = key[i] if i < len(key) else 0
        ipad[i] = k ^ 0x36
        opad[i] = k ^ 0x5C
    inner = hashlib.sha256(ipad)
    inner.update(data)
    outer = hashlib.sha256(opad)
    outer.update(inner.digest())
    return outer.digest()


def hkdf(chaining_key, ikm, num_outputs):
    """Noise HKDF: (output1, output2) or (output1, output2, output3), each 32 bytes."""
    if num_outputs not in (2, 3):
        raise HkdfError("Noise HKDF gives 2 or 3 outputs, not %r" % (num_outputs,))
    temp = hmac_sha256(chaining_key, ikm)
    out1 = hmac_sha256(temp, b"\x01")
    out2 = hmac_sha256(temp, out1 + b"\x02")
    if num_outputs == 2:
        return (out1, out2)
    return (out1, out2, hmac_sha256(temp, out2 + b"\x03"))
