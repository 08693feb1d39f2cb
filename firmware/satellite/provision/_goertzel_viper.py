# Viper fast path of the ggwave receiver's filter bank (fixed-point Goertzel blocks, coherent tone
# sums); stateless, allocation-free. It must match _goertzel_pure.py bit for bit and decides nothing.
# Every product is bounded below 2**31 (see _goertzel_pure.py), so 32-bit (board) and 64-bit (unix
# port) viper ints give the same results; signed 16-bit loads are sign-extended by hand.
import micropython


@micropython.viper
def load(dst, doff: int, src, soff: int, n: int):
    # dst[doff + i] = (src[soff + i] >> 4) + 2048 for n s16 samples: the biased 12-bit stage.
    d = ptr16(dst)
    s = ptr16(src)
    i = 0
    while i < n:
        v = int(s[soff + i])
        v = (v ^ 0x8000) - 0x8000
        d[doff + i] = (v >> 4) + 2048
        i += 1


def gblock(stage, coef, cw, tm, ring, roff):
    # One 64-sample sub-block through 32 Goertzel filters; complex outputs (phase-referenced to
    # absolute time by table cw at phase tm) go to ring[roff:roff+64] as s16 pairs.
    _gblock(0, 0, 0, stage, coef, cw, tm, ring, roff)


# The hot loop's variables come first: MicroPython's native emitter keeps the first three locals
# (here the arguments s1, s2, i) in registers on both x86-64 and Xtensa; the loop is unrolled by
# two so no register moves are needed (s2 takes s[i], s1 takes s[i+1]).
@micropython.viper
def _gblock(s1: int, s2: int, i: int, stage, coef, cw, tm: int, ring, roff: int):
    x = ptr16(stage)
    c = ptr16(coef)
    w = ptr16(cw)
    r = ptr16(ring)
    wb = tm * 128
    k = 0
    while k < 32:
        ck = int(c[k])
        s1 = 0
        s2 = 0
        i = 0
        while i < 64:
            s2 = int(x[i]) - 2048 + ((ck * s1) >> 11) - s2
            s1 = int(x[i + 1]) - 2048 + ((ck * s2) >> 11) - s1
            i += 2
        a = s1 >> 2
        b = s2 >> 2
        j = wb + k * 4
        ar = (int(w[j]) ^ 0x8000) - 0x8000
        ai = (int(w[j + 1]) ^ 0x8000) - 0x8000
        br = (int(w[j + 2]) ^ 0x8000) - 0x8000
        bi = (int(w[j + 3]) ^ 0x8000) - 0x8000
        yr = (ar * a - br * b + 4096) >> 13
        yi = (ai * a - bi * b + 4096) >> 13
        if yr > 32767:
            yr = 32767
        if yr < -32767:
            yr = -32767
        if yi > 32767:
            yi = 32767
        if yi < -32767:
            yi = -32767
        r[roff + 2 * k] = yr
        r[roff + 2 * k + 1] = yi
        k += 1


def csum(ring, rlen, t0, nsub, rot, roff, out):
    _csum(0, 0, 0, ring, rlen, t0, nsub, rot, roff, out)


@micropython.viper
def _csum(pr: int, pi: int, j: int, ring, rlen: int, t0: int, nsub: int, rot, roff: int, out):
    # Coherent sum of nsub sub-blocks from ring slot t0 (wrapping at rlen) for each of 32 tones,
    # de-rotated by rot[roff + 2k] (Q14) per sub-block; out[k] = CORDIC magnitude (gain ~1.6457),
    # out[32..35] = start-tone sum, end-tone sum, pairs with start > 2*end, pairs with end > 2*start;
    # out[36..37] = pairs with start > end, pairs with end > start (the low-SNR marker votes).
    r = ptr16(ring)
    q = ptr16(rot)
    o = ptr32(out)
    k = 0
    while k < 32:
        rr = (int(q[roff + 2 * k]) ^ 0x8000) - 0x8000
        ri = (int(q[roff + 2 * k + 1]) ^ 0x8000) - 0x8000
        pr = 16384
        pi = 0
        zr = 0
        zi = 0
        j = t0 * 64 + 2 * k
        jend = rlen * 64
        i = 0
        while i < nsub:
            yr = (int(r[j]) ^ 0x8000) - 0x8000
            yi = (int(r[j + 1]) ^ 0x8000) - 0x8000
            zr += (yr * pr - yi * pi + 8192) >> 14
            zi += (yr * pi + yi * pr + 8192) >> 14
            npr = (pr * rr - pi * ri + 8192) >> 14
            pi = (pr * ri + pi * rr + 8192) >> 14
            pr = npr
            j += 64
            if j >= jend:
                j -= jend
            i += 1
        if zr < 0:
            zr = 0 - zr
        if zi < 0:
            zi = 0 - zi
        i = 0
        while i < 6:
            if zi >= 0:
                nz = zr + (zi >> i)
                zi = zi - (zr >> i)
            else:
                nz = zr - (zi >> i)
                zi = zi + (zr >> i)
            zr = nz
            i += 1
        o[k] = zr
        k += 1
    on = 0
    off = 0
    cs = 0
    ce = 0
    gs = 0
    ge = 0
    i = 0
    while i < 16:
        a = int(o[2 * i + (i & 1)])
        b = int(o[2 * i + 1 - (i & 1)])
        on += a
        off += b
        if a > 2 * b:
            cs += 1
        if b > 2 * a:
            ce += 1
        if a > b:
            gs += 1
        if b > a:
            ge += 1
        i += 1
    o[32] = on
    o[33] = off
    o[34] = cs
    o[35] = ce
    o[36] = gs
    o[37] = ge
