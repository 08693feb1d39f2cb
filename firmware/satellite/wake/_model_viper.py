# The wake model's kernels in viper (the board's hot path): same calls and results as _model_pure.py, which says
# what each p holds. Nothing allocated. viper's int is 32-bit on the board (64-bit on the unix port): TFLite's 64-bit
# rounding multiply is done in 16-bit limbs whose sums stay below 2**31, so it is exact on both; bytes are read
# unsigned through ptr8 and sign-extended with (v ^ 0x80) - 0x80; int32 through ptr32 is signed on the board but
# zero-extended by the 64-bit unix port, so biases, shifts, zero points and clamps are sign-extended from their
# top 16 bits. The weights are in the compiler's order (arrange_mac: groups of 4 output channels, each weight plus
# 128; arrange_dw: groups of 4 channels): these loops read them a byte at a time, the C kernels a word.
# mac and dw each carry the requantization inline: a shared viper function would box the accumulator and the
# multiplier (>= 2**30) into heap ints on the 32-bit board at every output; the same vectors test both copies.
import micropython


@micropython.viper
def mac(arena, w8, i32, params):
    a = ptr8(arena)
    w = ptr8(w8)
    b = ptr32(i32)
    p = ptr32(params)
    inp = p[0]
    in_cols = p[2]
    out = p[3]
    out_rows = p[4]
    out_cols = p[5]
    kh = p[6]
    stride = p[7]
    dil = p[8]
    wo = p[9]
    bo = p[10]
    mo = p[11]
    so = p[12]
    ozp = p[13]
    ozp = (((ozp >> 16) & 0xFFFF) ^ 0x8000) - 0x8000 << 16 | (ozp & 0xFFFF)
    lo = p[14]
    lo = (((lo >> 16) & 0xFFFF) ^ 0x8000) - 0x8000 << 16 | (lo & 0xFFFF)
    hi = p[15]
    hi = (((hi >> 16) & 0xFFFF) ^ 0x8000) - 0x8000 << 16 | (hi & 0xFFFF)
    ups = p[16]
    half = 0x4000
    half = half << 16      # 2**30 as a machine int (the literal would be a big-int object on a 32-bit port)
    gsize = 4 * kh * in_cols   # one group of 4 output channels' weights
    t = 0
    while t < out_rows:
        base = inp + t * stride * in_cols
        oc = 0
        while oc < out_cols:
            acc = b[bo + oc]
            acc = (((acc >> 16) & 0xFFFF) ^ 0x8000) - 0x8000 << 16 | (acc & 0xFFFF)
            wi = wo + (oc >> 2) * gsize + (oc & 3)
            k = 0
            while k < kh:
                xi = base + k * dil * in_cols
                xe = xi + in_cols
                while xi < xe:
                    acc += ((a[xi] ^ 0x80) - 0x80) * (w[wi] - 0x80)
                    xi += 1
                    wi += 4
                k += 1
            # MultiplyByQuantizedMultiplier(acc, m, s)
            m = b[mo + oc]
            s = b[so + oc]
            s = (((s >> 16) & 0xFFFF) ^ 0x8000) - 0x8000 << 16 | (s & 0xFFFF)
            x = acc
            rs = 0 - s
            if s > 0:
                x = x << s
                rs = 0
            neg = 0
            if x < 0:
                neg = 1
                x = 0 - x
            a0 = x & 0xFFFF
            a1 = (x >> 16) & 0x7FFF
            b0 = m & 0xFFFF
            b1 = (m >> 16) & 0x7FFF
            l0 = a0 * b0
            mid = a1 * b0 + a0 * b1
            h0 = a1 * b1
            c = half - neg
            d0 = (l0 & 0xFFFF) + (c & 0xFFFF)
            d1 = ((l0 >> 16) & 0xFFFF) + (mid & 0xFFFF) + ((c >> 16) & 0xFFFF) + (d0 >> 16)
            d2 = ((mid >> 16) & 0xFFFF) + (h0 & 0xFFFF) + (d1 >> 16)
            d3 = ((h0 >> 16) & 0xFFFF) + (d2 >> 16)
            r = (d3 << 17) + ((d2 & 0xFFFF) << 1) + ((d1 & 0xFFFF) >> 15)
            if neg:
                r = 0 - r
            if rs > 0:
                mask = (1 << rs) - 1
                th = mask >> 1
                if r < 0 and oc >= ups:
                    th += 1
                rem = r & mask
                r = r >> rs
                if rem > th:
                    r += 1
            v = r + ozp
            if v < lo:
                v = lo
            if v > hi:
                v = hi
            a[out + t * out_cols + oc] = v & 0xFF
            oc += 1
        t += 1


@micropython.viper
def dw(arena, w8, i32, params):
    a = ptr8(arena)
    w = ptr8(w8)
    b = ptr32(i32)
    p = ptr32(params)
    inp = p[0]
    cols = p[2]
    out = p[3]
    out_rows = p[4]
    kh = p[6]
    stride = p[7]
    dil = p[8]
    wo = p[9]
    bo = p[10]
    mo = p[11]
    so = p[12]
    ozp = p[13]
    ozp = (((ozp >> 16) & 0xFFFF) ^ 0x8000) - 0x8000 << 16 | (ozp & 0xFFFF)
    lo = p[14]
    lo = (((lo >> 16) & 0xFFFF) ^ 0x8000) - 0x8000 << 16 | (lo & 0xFFFF)
    hi = p[15]
    hi = (((hi >> 16) & 0xFFFF) ^ 0x8000) - 0x8000 << 16 | (hi & 0xFFFF)
    ups = p[16]
    half = 0x4000
    half = half << 16      # 2**30 as a machine int (the literal would be a big-int object on a 32-bit port)
    t = 0
    while t < out_rows:
        c = 0
        while c < cols:
            acc = b[bo + c]
            acc = (((acc >> 16) & 0xFFFF) ^ 0x8000) - 0x8000 << 16 | (acc & 0xFFFF)
            xi = inp + t * stride * cols + c
            wi = wo + (c >> 2) * 4 * kh + (c & 3)
            k = 0
            while k < kh:
                acc += ((a[xi] ^ 0x80) - 0x80) * ((w[wi] ^ 0x80) - 0x80)
                xi += dil * cols
                wi += 4
                k += 1
            m = b[mo + c]
            s = b[so + c]
            s = (((s >> 16) & 0xFFFF) ^ 0x8000) - 0x8000 << 16 | (s & 0xFFFF)
            x = acc
            rs = 0 - s
            if s > 0:
                x = x << s
                rs = 0
            neg = 0
            if x < 0:
                neg = 1
                x = 0 - x
            a0 = x & 0xFFFF
            a1 = (x >> 16) & 0x7FFF
            b0 = m & 0xFFFF
            b1 = (m >> 16) & 0x7FFF
            l0 = a0 * b0
            mid = a1 * b0 + a0 * b1
            h0 = a1 * b1
            e = half - neg
            d0 = (l0 & 0xFFFF) + (e & 0xFFFF)
            d1 = ((l0 >> 16) & 0xFFFF) + (mid & 0xFFFF) + ((e >> 16) & 0xFFFF) + (d0 >> 16)
            d2 = ((mid >> 16) & 0xFFFF) + (h0 & 0xFFFF) + (d1 >> 16)
            d3 = ((h0 >> 16) & 0xFFFF) + (d2 >> 16)
            r = (d3 << 17) + ((d2 & 0xFFFF) << 1) + ((d1 & 0xFFFF) >> 15)
            if neg:
                r = 0 - r
            if rs > 0:
                mask = (1 << rs) - 1
                th = mask >> 1
                if r < 0 and c >= ups:
                    th += 1
                rem = r & mask
                r = r >> rs
                if rem > th:
                    r += 1
            v = r + ozp
            if v < lo:
                v = lo
            if v > hi:
                v = hi
            a[out + t * cols + c] = v & 0xFF
            c += 1
        t += 1


@micropython.viper
def copy(arena, params):
    a = ptr8(arena)
    p = ptr32(params)
    src = p[0]
    dst = p[1]
    rows = p[2]
    cols = p[3]
    sp = p[4]
    dp = p[5]
    r = 0
    while r < rows:
        s = src + r * sp
        d = dst + r * dp
        e = s + cols
        while s < e:
            a[d] = a[s]
            s += 1
            d += 1
        r += 1


@micropython.viper
def lut(arena, w8, params):
    a = ptr8(arena)
    w = ptr8(w8)
    p = ptr32(params)
    inp = p[0]
    out = p[1]
    n = p[2]
    t = p[3]
    i = 0
    while i < n:
        a[out + i] = w[t + a[inp + i]]
        i += 1


@micropython.viper
def quant_in(arena, w8, feats, params):
    a = ptr8(arena)
    w = ptr8(w8)
    f = ptr16(feats)
    p = ptr32(params)
    dst = p[0]
    n = p[1]
    t = p[2]
    top = p[3] - 1
    i = 0
    while i < n:
        u = f[i]
        if u > top:
            u = top
        a[dst + i] = w[t + u]
        i += 1
