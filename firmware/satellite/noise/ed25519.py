# Ed25519 signature *verification* (RFC 8032 §5.1.7), for the release signature over an update's manifest
# (satellite.release). No signing and no private keys: a board never signs. No I/O. Python big ints on the
# field mod p = 2**255 - 19, sharing the inversion chain of the X25519 fallback (_x25519_pure); SHA-512 is
# satellite.noise.sha512 (MicroPython's hashlib has none). Variable-time is fine: every input is public.
# It runs once per firmware update and allocates (big ints): never on a hot path. Cost: docs/benchmarks.md.
#
#   verify(public32, message, signature64) -> True / False (every malformed input is False, never an exception)
#
# What is refused (RFC 8032 §5.1.3 decoding, §5.1.7 step 1): a signature or key of the wrong length, S >= L,
# a public key whose y is >= p or that is not on the curve, x = 0 with the sign bit set; R is compared as
# bytes with the canonical encoding of [S]B - [k]A (the cofactorless equation, RFC 8032 §5.1.7 step 3's
# permitted "[S]B = R + [k]A'"), so a non-canonical or off-curve R never matches.
from ._x25519_pure import _P, _invert, _pow250, _sqn
from .sha512 import sha512

_L = 2**252 + 27742317777372353535851937790883648493              # the group order (RFC 8032 §5.1)
_D = 37095705934669439343138083508754565189542113879843219016388785533085940283555   # -121665/121666
_D2 = 2 * _D % _P
_SQRT_M1 = 19681161376707505956807079304988542015446066515923890162744021073123829784752  # 2**((p-1)/4)
_BX = 15112221349535400772501151409588531511454012693041857206046113283949847762202     # base point B
_BY = 46316835694926478169428394003475163141307993866256225615783033603165251855960     # (y = 4/5)


def _add(P, Q):
    """Extended coordinates (X, Y, Z, T), RFC 8032 §5.1.4 addition (complete: also for P == Q)."""
    p = _P
    x1, y1, z1, t1 = P
    x2, y2, z2, t2 = Q
    a = (y1 - x1) * (y2 - x2) % p
    b = (y1 + x1) * (y2 + x2) % p
    c = t1 * _D2 % p * t2 % p
    d = 2 * z1 * z2 % p
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % p, g * h % p, f * g % p, e * h % p


def _double(P):
    """RFC 8032 §5.1.4 doubling (4 squarings, 4 multiplications)."""
    p = _P
    x1, y1, z1, _ = P
    a = x1 * x1 % p
    b = y1 * y1 % p
    c = 2 * z1 * z1 % p
    h = a + b
    s = x1 + y1
    e = h - s * s % p
    g = a - b
    f = c + g
    return e * f % p, g * h % p, f * g % p, e * h % p


def _decode(s):
    """32 bytes -> a point (x, y, 1, xy), or None when the encoding is not a canonical curve point (§5.1.3)."""
    p = _P
    y = int.from_bytes(s, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    if y >= p:
        return None
    yy = y * y % p
    u = (yy - 1) % p
    v = (_D * yy + 1) % p
    v3 = v * v % p * v % p
    uv7 = u * v3 % p * v3 % p * v % p
    x = u * v3 % p * (_sqn(_pow250(uv7)[0], 2) * uv7 % p) % p    # u v^3 (u v^7)^((p-5)/8)
    vxx = v * x % p * x % p
    if vxx != u:
        if vxx != p - u:
            return None                     # u/v has no square root: not on the curve
        x = x * _SQRT_M1 % p
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = p - x
    return x, y, 1, x * y % p


def _encode(P):
    x, y, z, _ = P
    zi = _invert(z)
    x = x * zi % _P
    y = y * zi % _P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def verify(public, message, signature):
    """True when signature (64 bytes) is public's (32 bytes) Ed25519 signature of message (RFC 8032 §5.1.7)."""
    if len(public) != 32 or len(signature) != 64:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= _L:
        return False
    a = _decode(public)
    if a is None:
        return False
    r = bytes(signature[:32])
    h = bytearray(r)
    h.extend(public)
    h.extend(message)
    k = int.from_bytes(sha512(h), "little") % _L
    # [S]B + [k](-A) by one joint double-and-add over the bits of S and k (Straus), then compared with R.
    p = _P
    na = (p - a[0], a[1], 1, (p - a[3]) % p)
    b = (_BX, _BY, 1, _BX * _BY % p)
    table = (None, b, na, _add(b, na))
    acc = (0, 1, 1, 0)                      # the neutral element
    for i in range(252, -1, -1):            # s, k < L < 2**253 (MicroPython ints have no bit_length)
        acc = _double(acc)
        j = (s >> i) & 1 | ((k >> i) & 1) << 1
        if j:
            acc = _add(acc, table[j])
    return _encode(acc) == r
