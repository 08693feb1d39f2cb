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


# The hot loop's variables come first: MicroPython's native emitter keeps the first locals
# (here the arguments s1, s2) in registers on both x86-64 and Xtensa. The loop is unrolled by
# eight (an even count, so no register moves are needed: s2 takes s[i], s1 takes s[i+1]) and reads
# the stage through a pointer moved 8 samples a step, at constant offsets (a load with an immediate
# offset instead of index arithmetic on stack locals): 134 Xtensa instructions per 8 samples, was
# 60 per 2 (issue 12). The sums are reordered, not changed: integer +/- is exact, no bound moves.
@micropython.viper
def _gblock(s1: int, s2: int, i: int, stage, coef, cw, tm: int, ring, roff: int):
    x = ptr16(stage)
    x0 = int(x)                       # the stage's address: x moves along it, constant offsets below
    c = ptr16(coef)
    w = ptr16(cw)
    r = ptr16(ring)
    wb = tm * 128
    k = 0
    while k < 32:
        ck = int(c[k])
        s1 = 0
        s2 = 0
        xa = x0
        i = 0
        while i < 64:
            x = ptr16(xa)
            s2 = ((ck * s1) >> 11) - s2 + int(x[0]) - 2048
            s1 = ((ck * s2) >> 11) - s1 + int(x[1]) - 2048
            s2 = ((ck * s1) >> 11) - s2 + int(x[2]) - 2048
            s1 = ((ck * s2) >> 11) - s1 + int(x[3]) - 2048
            s2 = ((ck * s1) >> 11) - s2 + int(x[4]) - 2048
            s1 = ((ck * s2) >> 11) - s1 + int(x[5]) - 2048
            s2 = ((ck * s1) >> 11) - s2 + int(x[6]) - 2048
            s1 = ((ck * s2) >> 11) - s1 + int(x[7]) - 2048
            xa += 16
            i += 8
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
    # the kernel wraps the ring with a mask: rlen must be a power of two (the receiver's is 128)
    if rlen & (rlen - 1):
        raise ValueError("csum: ring length %d is not a power of two" % rlen)
    _csum(0, 0, 0, ring, rlen, t0, nsub, rot, roff, out)


@micropython.viper
def _csum(pr: int, pi: int, j: int, ring, rlen: int, t0: int, nsub: int, rot, roff: int, out):
    # Coherent sum of nsub sub-blocks from ring slot t0 (wrapping at rlen) for each of 32 tones,
    # de-rotated by rot[roff + 2k] (Q14) per sub-block; out[k] = CORDIC magnitude (gain ~1.6457),
    # out[32..35] = start-tone sum, end-tone sum, pairs with start > 2*end, pairs with end > 2*start;
    # out[36..37] = pairs with start > end, pairs with end > start (the low-SNR marker votes).
    r = ptr16(ring)
    rb = int(r)                       # the ring's address: each sub-block's pair read at constant offsets
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
        j = (t0 * 64 + 2 * k) * 2      # byte offset of tone k in ring slot t0
        jm = rlen * 128 - 1           # ring wrap as a mask (rlen a power of two, see csum)
        i = 0
        while i < nsub:
            y = ptr16(rb + j)
            yr = (int(y[0]) ^ 0x8000) - 0x8000
            yi = (int(y[1]) ^ 0x8000) - 0x8000
            zr += (yr * pr - yi * pi + 8192) >> 14
            zi += (yr * pi + yi * pr + 8192) >> 14
            npr = (pr * rr - pi * ri + 8192) >> 14
            pi = (pr * ri + pi * rr + 8192) >> 14
            pr = npr
            j = (j + 128) & jm
            i += 1
        if zr < 0:
            zr = 0 - zr
        if zi < 0:
            zi = 0 - zi
        # CORDIC vectoring, 6 steps unrolled (constant shifts); step 0 takes the zi >= 0 branch since
        # zi was just made non-negative
        nz = zr + zi
        zi = zi - zr
        zr = nz
        if zi >= 0:
            nz = zr + (zi >> 1)
            zi = zi - (zr >> 1)
        else:
            nz = zr - (zi >> 1)
            zi = zi + (zr >> 1)
        zr = nz
        if zi >= 0:
            nz = zr + (zi >> 2)
            zi = zi - (zr >> 2)
        else:
            nz = zr - (zi >> 2)
            zi = zi + (zr >> 2)
        zr = nz
        if zi >= 0:
            nz = zr + (zi >> 3)
            zi = zi - (zr >> 3)
        else:
            nz = zr - (zi >> 3)
            zi = zi + (zr >> 3)
        zr = nz
        if zi >= 0:
            nz = zr + (zi >> 4)
            zi = zi - (zr >> 4)
        else:
            nz = zr - (zi >> 4)
            zi = zi + (zr >> 4)
        zr = nz
        if zi >= 0:
            nz = zr + (zi >> 5)
            zi = zi - (zr >> 5)
        else:
            nz = zr - (zi >> 5)
            zi = zi + (zr >> 5)
        zr = nz
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
