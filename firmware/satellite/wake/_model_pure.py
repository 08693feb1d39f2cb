# The wake model's kernels in plain MicroPython: the reference twin of _model_viper.py (same calls, same results)
# and the path a port without the native emitter takes. Pure computation on the caller's buffers: the arena and
# weights are array('b'), the int32 tables array('i'), every op's parameters an array('i') (model.py says which).
# Not allocation-free on a 32-bit board: TFLite's 64-bit rounding multiply makes ints >= 2**30 here.


def _mbqm(x, m, shift, up):
    # TFLite's MultiplyByQuantizedMultiplier: SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT (halves
    # away from zero); up=1: halves of the final shift rounded toward +inf (TFLite's optimized depthwise kernel)
    if shift > 0:
        x = (x << shift) & 0xFFFFFFFF
        if x & 0x80000000:
            x -= 0x100000000
        right = 0
    else:
        right = -shift
    ab = x * m
    if ab >= 0:
        r = (ab + 0x40000000) >> 31
    else:
        r = -((-ab + 0x3FFFFFFF) >> 31)
    if right:
        mask = (1 << right) - 1
        th = (mask >> 1) + (1 if r < 0 and not up else 0)
        r = (r >> right) + (1 if (r & mask) > th else 0)
    return r


def mac(a, w, b, p):
    # CONV_2D / FULLY_CONNECTED over time: p = inp, in_rows, in_cols, out, out_rows, out_cols, kh, stride, dil,
    # w, bias, mult, shift (tables of out_cols), out_zp, act_min, act_max, ups (channels below it round halves
    # upward, the rest away from zero); weights in groups of 4 output channels, [group][kh * in_cols][4], each
    # stored plus 128 (the compiler's arrange_mac; the C kernel reads a group's 4 weights in one 32-bit load)
    inp, in_cols, out, out_rows, out_cols = p[0], p[2], p[3], p[4], p[5]
    kh, stride, dil, wo, bo, mo, so, ozp, lo, hi = p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15]
    ups = p[16]
    for t in range(out_rows):
        base = inp + t * stride * in_cols
        for oc in range(out_cols):
            acc = b[bo + oc]
            wi = wo + (oc >> 2) * 4 * kh * in_cols + (oc & 3)
            for k in range(kh):
                xi = base + k * dil * in_cols
                for i in range(in_cols):
                    acc += a[xi + i] * ((w[wi] & 255) - 128)
                    wi += 4
            v = _mbqm(acc, b[mo + oc], b[so + oc], oc < ups) + ozp
            a[out + t * out_cols + oc] = lo if v < lo else (hi if v > hi else v)


def dw(a, w, b, p):
    # DEPTHWISE_CONV_2D over time (depth multiplier 1): the same p; weights in groups of 4 channels,
    # [group][kh][4] (the compiler's arrange_dw), int8 (read as bytes: an array('b') or any buffer of them)
    inp, cols, out, out_rows = p[0], p[2], p[3], p[4]
    kh, stride, dil, wo, bo, mo, so, ozp, lo, hi = p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15]
    ups = p[16]
    for t in range(out_rows):
        for c in range(cols):
            acc = b[bo + c]
            wi = wo + (c >> 2) * 4 * kh + (c & 3)
            for k in range(kh):
                acc += a[inp + (t * stride + k * dil) * cols + c] * (((w[wi + 4 * k] & 255) ^ 0x80) - 0x80)
            v = _mbqm(acc, b[mo + c], b[so + c], c < ups) + ozp
            a[out + t * cols + c] = lo if v < lo else (hi if v > hi else v)


def copy(a, p):
    # a strided row copy: p = src, dst, rows, cols, src_pitch, dst_pitch (CONCATENATION, SPLIT_V, STRIDED_SLICE,
    # READ_VARIABLE, ASSIGN_VARIABLE all lower to these)
    src, dst, rows, cols, sp, dp = p[0], p[1], p[2], p[3], p[4], p[5]
    for r in range(rows):
        s = src + r * sp
        d = dst + r * dp
        for i in range(cols):
            a[d + i] = a[s + i]


def lut(a, w, p):
    # an elementwise table (LOGISTIC, QUANTIZE): p = inp, out, n, table (256 entries indexed by the input byte)
    inp, out, n, t = p[0], p[1], p[2], p[3]
    for i in range(n):
        a[out + i] = w[t + (a[inp + i] & 255)]


def quant_in(a, w, feats, p):
    # the frontend's uint16 features into the input tensor: p = dst, n, table, table length
    dst, n, t, tn = p[0], p[1], p[2], p[3]
    top = tn - 1
    for i in range(n):
        u = feats[i]
        a[dst + i] = w[t + (u if u < top else top)]
