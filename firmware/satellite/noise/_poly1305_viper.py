# Poly1305 (RFC 8439 §2.5) in viper: 10 limbs of 13 bits so every limb product fits 32 bits.
# Pure twin: _poly1305_pure.py (same functions, same arguments). The caller validates lengths.
# Correct at 32 and 64 bits: all values are uint (logical shifts), limbs stay < 2**14 + 2**10, so a
# product is < 2**30 and each half-row of five products plus carry stays < 3.5e9 < 2**32 (the row is
# carried after five terms, as in poly1305-donna-16); nothing relies on wrap-around.
# acc (array 'I', 42 words): h[0:10], r[10:20], 5*r[20:30], s as 16-bit words [30:38], 16-byte scratch [38:42].
import array
import micropython
from micropython import const

_ACC_WORDS = const(42)
_SCRATCH = const(152)  # byte offset of the 16-byte scratch block in acc


def new_acc():
    return array.array("I", [0] * _ACC_WORDS)


@micropython.viper
def init(acc, key):
    """Start a MAC with the 32-byte one-time key r||s at key[0:32] (r is clamped here)."""
    a = ptr32(acc)
    k = ptr8(key)
    t0 = uint(k[0]) | (uint(k[1]) << 8)
    t1 = (uint(k[2]) | (uint(k[3]) << 8)) & 0x0FFF
    t2 = (uint(k[4]) | (uint(k[5]) << 8)) & 0xFFFC
    t3 = (uint(k[6]) | (uint(k[7]) << 8)) & 0x0FFF
    t4 = (uint(k[8]) | (uint(k[9]) << 8)) & 0xFFFC
    t5 = (uint(k[10]) | (uint(k[11]) << 8)) & 0x0FFF
    t6 = (uint(k[12]) | (uint(k[13]) << 8)) & 0xFFFC
    t7 = (uint(k[14]) | (uint(k[15]) << 8)) & 0x0FFF
    a[10] = t0 & 0x1FFF
    a[11] = ((t0 >> 13) | (t1 << 3)) & 0x1FFF
    a[12] = ((t1 >> 10) | (t2 << 6)) & 0x1FFF
    a[13] = ((t2 >> 7) | (t3 << 9)) & 0x1FFF
    a[14] = ((t3 >> 4) | (t4 << 12)) & 0x1FFF
    a[15] = (t4 >> 1) & 0x1FFF
    a[16] = ((t4 >> 14) | (t5 << 2)) & 0x1FFF
    a[17] = ((t5 >> 11) | (t6 << 5)) & 0x1FFF
    a[18] = ((t6 >> 8) | (t7 << 8)) & 0x1FFF
    a[19] = t7 >> 5
    i = 0
    while i < 10:
        a[i] = 0
        a[20 + i] = uint(a[10 + i]) * 5
        i += 1
    i = 0
    while i < 8:
        a[30 + i] = uint(k[16 + 2 * i]) | (uint(k[17 + 2 * i]) << 8)
        i += 1


@micropython.viper
def update(acc, buf, start: int, n: int, hibit: int):
    """Absorb buf[start:start+n] as 16-byte blocks, a short last block zero-padded (the AEAD's
    pad16). hibit 1 adds 2**128 to every block (normal); 0 is for a block the caller already
    padded with its 0x01 marker (a bare Poly1305 message tail)."""
    a = ptr32(acc)
    p = ptr8(buf)
    sc = ptr8(acc)
    hb = uint(hibit) << 11
    h0 = uint(a[0])
    h1 = uint(a[1])
    h2 = uint(a[2])
    h3 = uint(a[3])
    h4 = uint(a[4])
    h5 = uint(a[5])
    h6 = uint(a[6])
    h7 = uint(a[7])
    h8 = uint(a[8])
    h9 = uint(a[9])
    r0 = uint(a[10])
    r1 = uint(a[11])
    r2 = uint(a[12])
    r3 = uint(a[13])
    r4 = uint(a[14])
    r5 = uint(a[15])
    r6 = uint(a[16])
    r7 = uint(a[17])
    r8 = uint(a[18])
    r9 = uint(a[19])
    s1 = uint(a[21])
    s2 = uint(a[22])
    s3 = uint(a[23])
    s4 = uint(a[24])
    s5 = uint(a[25])
    s6 = uint(a[26])
    s7 = uint(a[27])
    s8 = uint(a[28])
    s9 = uint(a[29])
    end = start + n
    off = start
    while off < end:
        q = p
        o = off
        m = end - off
        if m < 16:
            j = 0
            while j < m:
                sc[_SCRATCH + j] = p[off + j]
                j += 1
            while j < 16:
                sc[_SCRATCH + j] = 0
                j += 1
            q = sc
            o = _SCRATCH
        t0 = uint(q[o]) | (uint(q[o + 1]) << 8)
        t1 = uint(q[o + 2]) | (uint(q[o + 3]) << 8)
        t2 = uint(q[o + 4]) | (uint(q[o + 5]) << 8)
        t3 = uint(q[o + 6]) | (uint(q[o + 7]) << 8)
        t4 = uint(q[o + 8]) | (uint(q[o + 9]) << 8)
        t5 = uint(q[o + 10]) | (uint(q[o + 11]) << 8)
        t6 = uint(q[o + 12]) | (uint(q[o + 13]) << 8)
        t7 = uint(q[o + 14]) | (uint(q[o + 15]) << 8)
        h0 += t0 & 0x1FFF
        h1 += ((t0 >> 13) | (t1 << 3)) & 0x1FFF
        h2 += ((t1 >> 10) | (t2 << 6)) & 0x1FFF
        h3 += ((t2 >> 7) | (t3 << 9)) & 0x1FFF
        h4 += ((t3 >> 4) | (t4 << 12)) & 0x1FFF
        h5 += (t4 >> 1) & 0x1FFF
        h6 += ((t4 >> 14) | (t5 << 2)) & 0x1FFF
        h7 += ((t5 >> 11) | (t6 << 5)) & 0x1FFF
        h8 += ((t6 >> 8) | (t7 << 8)) & 0x1FFF
        h9 += (t7 >> 5) | hb
        d0 = h0 * r0 + h1 * s9 + h2 * s8 + h3 * s7 + h4 * s6
        c = d0 >> 13
        d0 = (d0 & 0x1FFF) + h5 * s5 + h6 * s4 + h7 * s3 + h8 * s2 + h9 * s1
        c += d0 >> 13
        d0 &= 0x1FFF
        d1 = c + h0 * r1 + h1 * r0 + h2 * s9 + h3 * s8 + h4 * s7
        c = d1 >> 13
        d1 = (d1 & 0x1FFF) + h5 * s6 + h6 * s5 + h7 * s4 + h8 * s3 + h9 * s2
        c += d1 >> 13
        d1 &= 0x1FFF
        d2 = c + h0 * r2 + h1 * r1 + h2 * r0 + h3 * s9 + h4 * s8
        c = d2 >> 13
        d2 = (d2 & 0x1FFF) + h5 * s7 + h6 * s6 + h7 * s5 + h8 * s4 + h9 * s3
        c += d2 >> 13
        d2 &= 0x1FFF
        d3 = c + h0 * r3 + h1 * r2 + h2 * r1 + h3 * r0 + h4 * s9
        c = d3 >> 13
        d3 = (d3 & 0x1FFF) + h5 * s8 + h6 * s7 + h7 * s6 + h8 * s5 + h9 * s4
        c += d3 >> 13
        d3 &= 0x1FFF
        d4 = c + h0 * r4 + h1 * r3 + h2 * r2 + h3 * r1 + h4 * r0
        c = d4 >> 13
        d4 = (d4 & 0x1FFF) + h5 * s9 + h6 * s8 + h7 * s7 + h8 * s6 + h9 * s5
        c += d4 >> 13
        d4 &= 0x1FFF
        d5 = c + h0 * r5 + h1 * r4 + h2 * r3 + h3 * r2 + h4 * r1
        c = d5 >> 13
        d5 = (d5 & 0x1FFF) + h5 * r0 + h6 * s9 + h7 * s8 + h8 * s7 + h9 * s6
        c += d5 >> 13
        d5 &= 0x1FFF
        d6 = c + h0 * r6 + h1 * r5 + h2 * r4 + h3 * r3 + h4 * r2
        c = d6 >> 13
        d6 = (d6 & 0x1FFF) + h5 * r1 + h6 * r0 + h7 * s9 + h8 * s8 + h9 * s7
        c += d6 >> 13
        d6 &= 0x1FFF
        d7 = c + h0 * r7 + h1 * r6 + h2 * r5 + h3 * r4 + h4 * r3
        c = d7 >> 13
        d7 = (d7 & 0x1FFF) + h5 * r2 + h6 * r1 + h7 * r0 + h8 * s9 + h9 * s8
        c += d7 >> 13
        d7 &= 0x1FFF
        d8 = c + h0 * r8 + h1 * r7 + h2 * r6 + h3 * r5 + h4 * r4
        c = d8 >> 13
        d8 = (d8 & 0x1FFF) + h5 * r3 + h6 * r2 + h7 * r1 + h8 * r0 + h9 * s9
        c += d8 >> 13
        d8 &= 0x1FFF
        d9 = c + h0 * r9 + h1 * r8 + h2 * r7 + h3 * r6 + h4 * r5
        c = d9 >> 13
        d9 = (d9 & 0x1FFF) + h5 * r4 + h6 * r3 + h7 * r2 + h8 * r1 + h9 * r0
        c += d9 >> 13
        d9 &= 0x1FFF
        c = (c << 2) + c + d0
        h0 = c & 0x1FFF
        h1 = d1 + (c >> 13)
        h2 = d2
        h3 = d3
        h4 = d4
        h5 = d5
        h6 = d6
        h7 = d7
        h8 = d8
        h9 = d9
        off += 16
    a[0] = h0
    a[1] = h1
    a[2] = h2
    a[3] = h3
    a[4] = h4
    a[5] = h5
    a[6] = h6
    a[7] = h7
    a[8] = h8
    a[9] = h9


@micropython.viper
def finish(acc, adl: int, ctl: int, out, off: int):
    """Write the tag to out[off:off+16]. adl >= 0 first absorbs the AEAD length block
    le64(adl) || le64(ctl); adl < 0 skips it (bare Poly1305)."""
    a = ptr32(acc)
    if adl >= 0:
        sc = ptr8(acc)
        j = 0
        while j < 16:
            sc[_SCRATCH + j] = 0
            j += 1
        sc[_SCRATCH] = adl & 0xFF
        sc[_SCRATCH + 1] = (adl >> 8) & 0xFF
        sc[_SCRATCH + 2] = (adl >> 16) & 0xFF
        sc[_SCRATCH + 3] = (adl >> 24) & 0xFF
        sc[_SCRATCH + 8] = ctl & 0xFF
        sc[_SCRATCH + 9] = (ctl >> 8) & 0xFF
        sc[_SCRATCH + 10] = (ctl >> 16) & 0xFF
        sc[_SCRATCH + 11] = (ctl >> 24) & 0xFF
        update(acc, acc, _SCRATCH, 16, 1)
    h0 = uint(a[0])
    h1 = uint(a[1])
    h2 = uint(a[2])
    h3 = uint(a[3])
    h4 = uint(a[4])
    h5 = uint(a[5])
    h6 = uint(a[6])
    h7 = uint(a[7])
    h8 = uint(a[8])
    h9 = uint(a[9])
    c = h1 >> 13
    h1 &= 0x1FFF
    h2 += c
    c = h2 >> 13
    h2 &= 0x1FFF
    h3 += c
    c = h3 >> 13
    h3 &= 0x1FFF
    h4 += c
    c = h4 >> 13
    h4 &= 0x1FFF
    h5 += c
    c = h5 >> 13
    h5 &= 0x1FFF
    h6 += c
    c = h6 >> 13
    h6 &= 0x1FFF
    h7 += c
    c = h7 >> 13
    h7 &= 0x1FFF
    h8 += c
    c = h8 >> 13
    h8 &= 0x1FFF
    h9 += c
    c = h9 >> 13
    h9 &= 0x1FFF
    h0 += (c << 2) + c
    c = h0 >> 13
    h0 &= 0x1FFF
    h1 += c
    c = h1 >> 13
    h1 &= 0x1FFF
    h2 += c
    c = h2 >> 13
    h2 &= 0x1FFF
    h3 += c
    c = h3 >> 13
    h3 &= 0x1FFF
    h4 += c
    c = h4 >> 13
    h4 &= 0x1FFF
    h5 += c
    c = h5 >> 13
    h5 &= 0x1FFF
    h6 += c
    c = h6 >> 13
    h6 &= 0x1FFF
    h7 += c
    c = h7 >> 13
    h7 &= 0x1FFF
    h8 += c
    c = h8 >> 13
    h8 &= 0x1FFF
    h9 += c
    c = h9 >> 13
    h9 &= 0x1FFF
    h0 += (c << 2) + c
    g0 = h0 + 5
    c = g0 >> 13
    g0 &= 0x1FFF
    g1 = h1 + c
    c = g1 >> 13
    g1 &= 0x1FFF
    g2 = h2 + c
    c = g2 >> 13
    g2 &= 0x1FFF
    g3 = h3 + c
    c = g3 >> 13
    g3 &= 0x1FFF
    g4 = h4 + c
    c = g4 >> 13
    g4 &= 0x1FFF
    g5 = h5 + c
    c = g5 >> 13
    g5 &= 0x1FFF
    g6 = h6 + c
    c = g6 >> 13
    g6 &= 0x1FFF
    g7 = h7 + c
    c = g7 >> 13
    g7 &= 0x1FFF
    g8 = h8 + c
    c = g8 >> 13
    g8 &= 0x1FFF
    g9 = h9 + c
    c = g9 >> 13
    g9 &= 0x1FFF
    sel = uint(0) - c
    keep = c - uint(1)
    h0 = (h0 & keep) | (g0 & sel)
    h1 = (h1 & keep) | (g1 & sel)
    h2 = (h2 & keep) | (g2 & sel)
    h3 = (h3 & keep) | (g3 & sel)
    h4 = (h4 & keep) | (g4 & sel)
    h5 = (h5 & keep) | (g5 & sel)
    h6 = (h6 & keep) | (g6 & sel)
    h7 = (h7 & keep) | (g7 & sel)
    h8 = (h8 & keep) | (g8 & sel)
    h9 = (h9 & keep) | (g9 & sel)
    w0 = (h0 | (h1 << 13)) & 0xFFFF
    w1 = ((h1 >> 3) | (h2 << 10)) & 0xFFFF
    w2 = ((h2 >> 6) | (h3 << 7)) & 0xFFFF
    w3 = ((h3 >> 9) | (h4 << 4)) & 0xFFFF
    w4 = ((h4 >> 12) | (h5 << 1) | (h6 << 14)) & 0xFFFF
    w5 = ((h6 >> 2) | (h7 << 11)) & 0xFFFF
    w6 = ((h7 >> 5) | (h8 << 8)) & 0xFFFF
    w7 = ((h8 >> 8) | (h9 << 5)) & 0xFFFF
    o = ptr8(out)
    f = w0 + uint(a[30])
    o[off] = f & 0xFF
    o[off + 1] = (f >> 8) & 0xFF
    f = w1 + uint(a[31]) + (f >> 16)
    o[off + 2] = f & 0xFF
    o[off + 3] = (f >> 8) & 0xFF
    f = w2 + uint(a[32]) + (f >> 16)
    o[off + 4] = f & 0xFF
    o[off + 5] = (f >> 8) & 0xFF
    f = w3 + uint(a[33]) + (f >> 16)
    o[off + 6] = f & 0xFF
    o[off + 7] = (f >> 8) & 0xFF
    f = w4 + uint(a[34]) + (f >> 16)
    o[off + 8] = f & 0xFF
    o[off + 9] = (f >> 8) & 0xFF
    f = w5 + uint(a[35]) + (f >> 16)
    o[off + 10] = f & 0xFF
    o[off + 11] = (f >> 8) & 0xFF
    f = w6 + uint(a[36]) + (f >> 16)
    o[off + 12] = f & 0xFF
    o[off + 13] = (f >> 8) & 0xFF
    f = w7 + uint(a[37]) + (f >> 16)
    o[off + 14] = f & 0xFF
    o[off + 15] = (f >> 8) & 0xFF


@micropython.viper
def diff16(x, y, yoff: int) -> int:
    """0 when x[0:16] == y[yoff:yoff+16], else nonzero; time does not depend on where they differ."""
    p = ptr8(x)
    q = ptr8(y)
    d = 0
    i = 0
    while i < 16:
        d |= p[i] ^ q[yoff + i]
        i += 1
    return d
