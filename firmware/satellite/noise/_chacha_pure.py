# ChaCha20 block function and keystream XOR in plain Python (RFC 8439 §2.3-2.4); runs everywhere.
# Reference twin of _chacha_viper.py: same functions, same arguments. Must not check lengths (caller does).
# State `st` is 16 32-bit words (array 'I'): constants, key, block counter (word 12), nonce.
import struct

_M = 0xFFFFFFFF


def _core(st, ctr):
    """The 16 output words of one block for state st with block counter ctr (a list)."""
    x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15 = st
    x12 = ctr
    for _ in range(10):
        x0 = (x0 + x4) & _M
        x12 ^= x0
        x12 = ((x12 << 16) | (x12 >> 16)) & _M
        x8 = (x8 + x12) & _M
        x4 ^= x8
        x4 = ((x4 << 12) | (x4 >> 20)) & _M
        x0 = (x0 + x4) & _M
        x12 ^= x0
        x12 = ((x12 << 8) | (x12 >> 24)) & _M
        x8 = (x8 + x12) & _M
        x4 ^= x8
        x4 = ((x4 << 7) | (x4 >> 25)) & _M
        x1 = (x1 + x5) & _M
        x13 ^= x1
        x13 = ((x13 << 16) | (x13 >> 16)) & _M
        x9 = (x9 + x13) & _M
        x5 ^= x9
        x5 = ((x5 << 12) | (x5 >> 20)) & _M
        x1 = (x1 + x5) & _M
        x13 ^= x1
        x13 = ((x13 << 8) | (x13 >> 24)) & _M
        x9 = (x9 + x13) & _M
        x5 ^= x9
        x5 = ((x5 << 7) | (x5 >> 25)) & _M
        x2 = (x2 + x6) & _M
        x14 ^= x2
        x14 = ((x14 << 16) | (x14 >> 16)) & _M
        x10 = (x10 + x14) & _M
        x6 ^= x10
        x6 = ((x6 << 12) | (x6 >> 20)) & _M
        x2 = (x2 + x6) & _M
        x14 ^= x2
        x14 = ((x14 << 8) | (x14 >> 24)) & _M
        x10 = (x10 + x14) & _M
        x6 ^= x10
        x6 = ((x6 << 7) | (x6 >> 25)) & _M
        x3 = (x3 + x7) & _M
        x15 ^= x3
        x15 = ((x15 << 16) | (x15 >> 16)) & _M
        x11 = (x11 + x15) & _M
        x7 ^= x11
        x7 = ((x7 << 12) | (x7 >> 20)) & _M
        x3 = (x3 + x7) & _M
        x15 ^= x3
        x15 = ((x15 << 8) | (x15 >> 24)) & _M
        x11 = (x11 + x15) & _M
        x7 ^= x11
        x7 = ((x7 << 7) | (x7 >> 25)) & _M
        x0 = (x0 + x5) & _M
        x15 ^= x0
        x15 = ((x15 << 16) | (x15 >> 16)) & _M
        x10 = (x10 + x15) & _M
        x5 ^= x10
        x5 = ((x5 << 12) | (x5 >> 20)) & _M
        x0 = (x0 + x5) & _M
        x15 ^= x0
        x15 = ((x15 << 8) | (x15 >> 24)) & _M
        x10 = (x10 + x15) & _M
        x5 ^= x10
        x5 = ((x5 << 7) | (x5 >> 25)) & _M
        x1 = (x1 + x6) & _M
        x12 ^= x1
        x12 = ((x12 << 16) | (x12 >> 16)) & _M
        x11 = (x11 + x12) & _M
        x6 ^= x11
        x6 = ((x6 << 12) | (x6 >> 20)) & _M
        x1 = (x1 + x6) & _M
        x12 ^= x1
        x12 = ((x12 << 8) | (x12 >> 24)) & _M
        x11 = (x11 + x12) & _M
        x6 ^= x11
        x6 = ((x6 << 7) | (x6 >> 25)) & _M
        x2 = (x2 + x7) & _M
        x13 ^= x2
        x13 = ((x13 << 16) | (x13 >> 16)) & _M
        x8 = (x8 + x13) & _M
        x7 ^= x8
        x7 = ((x7 << 12) | (x7 >> 20)) & _M
        x2 = (x2 + x7) & _M
        x13 ^= x2
        x13 = ((x13 << 8) | (x13 >> 24)) & _M
        x8 = (x8 + x13) & _M
        x7 ^= x8
        x7 = ((x7 << 7) | (x7 >> 25)) & _M
        x3 = (x3 + x4) & _M
        x14 ^= x3
        x14 = ((x14 << 16) | (x14 >> 16)) & _M
        x9 = (x9 + x14) & _M
        x4 ^= x9
        x4 = ((x4 << 12) | (x4 >> 20)) & _M
        x3 = (x3 + x4) & _M
        x14 ^= x3
        x14 = ((x14 << 8) | (x14 >> 24)) & _M
        x9 = (x9 + x14) & _M
        x4 ^= x9
        x4 = ((x4 << 7) | (x4 >> 25)) & _M
    return [
        (x0 + st[0]) & _M, (x1 + st[1]) & _M, (x2 + st[2]) & _M, (x3 + st[3]) & _M,
        (x4 + st[4]) & _M, (x5 + st[5]) & _M, (x6 + st[6]) & _M, (x7 + st[7]) & _M,
        (x8 + st[8]) & _M, (x9 + st[9]) & _M, (x10 + st[10]) & _M, (x11 + st[11]) & _M,
        (x12 + ctr) & _M, (x13 + st[13]) & _M, (x14 + st[14]) & _M, (x15 + st[15]) & _M,
    ]


def block(st, out):
    """out[0:64] = ChaCha20 block for state st (counter = st[12])."""
    struct.pack_into("<16I", out, 0, *_core(st, st[12]))


def xor(st, ks, src, dst, n):
    """dst[0:n] = src[0:n] ^ keystream from block counter st[12] upward (wrapping mod 2**32; the
    caller refuses a wrap). ks: 64-byte scratch. src may be dst. st is not modified."""
    ctr = st[12]
    off = 0
    while off < n:
        struct.pack_into("<16I", ks, 0, *_core(st, ctr))
        m = n - off
        if m > 64:
            m = 64
        for j in range(m):
            dst[off + j] = src[off + j] ^ ks[j]
        off += m
        ctr = (ctr + 1) & _M
