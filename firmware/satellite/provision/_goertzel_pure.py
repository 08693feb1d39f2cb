# Pure-Python twin of _goertzel_viper.py (runs everywhere); stateless, decides nothing, same results
# bit for bit. Fixed-point bounds (why 32-bit viper never overflows):
#   stage x = (s16 >> 4) in [-2048, 2047]; Goertzel |s| <= 64*2048/sin(w_min) < 2**18.3 and
#   coef <= 2*2048, so coef*s < 2**30.2; Q13 output constants * (s >> 2) < 2**29.3 (sum < 2**30.3);
#   ring values are clamped to s16 (|DTFT/4| <= 64*2048/4 = 2**15); Q14 rotations * s16 < 2**29;
#   sums over <= 64 sub-blocks < 2**21.5; CORDIC magnitude < 2**22.3; 16 of them < 2**26.3.
from array import array


def load(dst, doff, src, soff, n):
    # dst[doff + i] = (src[soff + i] >> 4) + 2048; src is array('h') or little-endian s16 bytes.
    if isinstance(src, array):
        for i in range(n):
            dst[doff + i] = (src[soff + i] >> 4) + 2048
    else:
        for i in range(n):
            j = 2 * (soff + i)
            v = src[j] | (src[j + 1] << 8)
            if v >= 32768:
                v -= 65536
            dst[doff + i] = (v >> 4) + 2048


def gblock(stage, coef, cw, tm, ring, roff):
    wb = tm * 128
    for k in range(32):
        ck = coef[k]
        s1 = 0
        s2 = 0
        for i in range(64):
            s0 = stage[i] - 2048 + ((ck * s1) >> 11) - s2
            s2 = s1
            s1 = s0
        a = s1 >> 2
        b = s2 >> 2
        j = wb + k * 4
        yr = (cw[j] * a - cw[j + 2] * b + 4096) >> 13
        yi = (cw[j + 1] * a - cw[j + 3] * b + 4096) >> 13
        if yr > 32767:
            yr = 32767
        if yr < -32767:
            yr = -32767
        if yi > 32767:
            yi = 32767
        if yi < -32767:
            yi = -32767
        ring[roff + 2 * k] = yr
        ring[roff + 2 * k + 1] = yi


def csum(ring, rlen, t0, nsub, rot, roff, out):
    for k in range(32):
        rr = rot[roff + 2 * k]
        ri = rot[roff + 2 * k + 1]
        pr = 16384
        pi = 0
        zr = 0
        zi = 0
        t = t0
        for _ in range(nsub):
            j = t * 64 + 2 * k
            yr = ring[j]
            yi = ring[j + 1]
            zr += (yr * pr - yi * pi + 8192) >> 14
            zi += (yr * pi + yi * pr + 8192) >> 14
            npr = (pr * rr - pi * ri + 8192) >> 14
            pi = (pr * ri + pi * rr + 8192) >> 14
            pr = npr
            t += 1
            if t >= rlen:
                t = 0
        if zr < 0:
            zr = -zr
        if zi < 0:
            zi = -zi
        for i in range(6):
            if zi >= 0:
                nz = zr + (zi >> i)
                zi = zi - (zr >> i)
            else:
                nz = zr - (zi >> i)
                zi = zi + (zr >> i)
            zr = nz
        out[k] = zr
    on = 0
    off = 0
    cs = 0
    ce = 0
    gs = 0
    ge = 0
    for i in range(16):
        a = out[2 * i + (i & 1)]
        b = out[2 * i + 1 - (i & 1)]
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
    out[32] = on
    out[33] = off
    out[34] = cs
    out[35] = ce
    out[36] = gs
    out[37] = ge
