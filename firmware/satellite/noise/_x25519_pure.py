# X25519 Montgomery ladder (RFC 7748 section 5) on Python integers: the portable fallback that runs
# everywhere (CPython, any MicroPython). Pure maths: no I/O, no clamping (x25519.py clamps).
# Big-integer arithmetic is not constant-time on any interpreter; the ladder still performs the same
# operations for every scalar and swaps with masks rather than branches. Prefer the viper path on boards.

_P = 2**255 - 19  # folded at compile time; no big int is built at import beyond this constant
_A24 = 121665


def scalarmult(k, u):
    """X25519 of the already clamped 32-byte scalar k and 32-byte u; returns 32 bytes."""
    p = _P
    x1 = int.from_bytes(u, "little") & ((1 << 255) - 1)
    x2, z2, x3, z3 = 1, 0, x1, 1
    swap = 0
    kn = int.from_bytes(k, "little")
    for t in range(254, -1, -1):
        bit = (kn >> t) & 1
        swap ^= bit
        m = -swap  # 0 or -1 (all ones)
        d = m & (x2 ^ x3)
        x2 ^= d
        x3 ^= d
        d = m & (z2 ^ z3)
        z2 ^= d
        z3 ^= d
        swap = bit
        a = x2 + z2
        aa = a * a % p
        b = x2 - z2
        bb = b * b % p
        e = aa - bb
        c = x3 + z3
        d = x3 - z3
        da = d * a % p
        cb = c * b % p
        x3 = da + cb
        x3 = x3 * x3 % p
        z3 = da - cb
        z3 = x1 * (z3 * z3 % p) % p
        x2 = aa * bb % p
        z2 = e * (aa + _A24 * e) % p
    m = -swap
    d = m & (x2 ^ x3)
    x2 ^= d
    d = m & (z2 ^ z3)
    z2 ^= d
    r = x2 * _invert(z2) % p
    return r.to_bytes(32, "little")


def _sqn(x, n):
    p = _P
    for _ in range(n):
        x = x * x % p
    return x


def _pow250(z):
    """(z ** (2**250 - 1), z ** 11): the shared head of the inversion chain (satellite.noise.ed25519's square
    root uses it too: z ** (2**252 - 3) = _pow250(z)[0] ** 4 * z)."""
    p = _P
    z2 = z * z % p
    z9 = _sqn(z2, 2) * z % p
    z11 = z9 * z2 % p
    t = z11 * z11 % p * z9 % p              # z^(2^5 - 1)
    t10 = _sqn(t, 5) * t % p                # z^(2^10 - 1)
    t20 = _sqn(t10, 10) * t10 % p
    t = _sqn(t20, 20) * t20 % p             # z^(2^40 - 1)
    t50 = _sqn(t, 10) * t10 % p
    t100 = _sqn(t50, 50) * t50 % p
    t = _sqn(t100, 100) * t100 % p          # z^(2^200 - 1)
    return _sqn(t, 50) * t50 % p, z11       # z^(2^250 - 1)


def _invert(z):
    """z ** (p - 2) (0 for 0) by the 254-square, 11-multiply chain: no 3-argument pow needed."""
    t, z11 = _pow250(z)
    return _sqn(t, 5) * z11 % _P            # z^(2^255 - 21)
