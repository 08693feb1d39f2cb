// _wake_c: the int8 kernels of the wake model (firmware/satellite/wake/model.py) as a MicroPython user C module,
// the board image's fast path over _model_viper.py / _model_pure.py (issue 37: frontend + one model <= 15 % of a
// 240 MHz core, goal <= 8 %; the viper MAC loop is ~57 Xtensa instructions per multiply-accumulate, this one ~5).
//
// Same calls and results as _model_pure.py, which says what each params array holds:
//   mac(arena, w8, i32, params)       CONV_2D / FULLY_CONNECTED over time, per-channel requantization
//   dw(arena, w8, i32, params)        DEPTHWISE_CONV_2D over time (depth multiplier 1)
//   copy(arena, params)               a strided row copy (CONCATENATION, SPLIT_V, STRIDED_SLICE, variables)
//   lut(arena, w8, params)            a 256-entry table (LOGISTIC, QUANTIZE)
//   quant_in(arena, w8, feats, params) uint16 features through the input table into the input tensor
//   run(arena, w8, i32, prog)         a whole inference: every op of prog (kind, params; see wake_run_fn)
// arena is an int8 buffer (array 'b'), w8 any readable buffer of bytes (an array 'b', or a memoryview of a frozen
// bytes object), i32 and params int32 (array 'i', 4-aligned), feats uint16 (array 'H', 2-aligned). The conv and
// depthwise weights are in the compiler's AWW2 order (host/alabama/wake/compile.py, arrange_mac / arrange_dw): four
// channels' weights of one input element in one 32-bit word, so that one load feeds four int8 multiply-accumulates
// (a word load where the weights are 4-aligned, else four byte loads). Requantization is TFLite's
// MultiplyByQuantizedMultiplier (requant below: the same rounding, in 32-bit halves without branches), then the
// rounding shift right, whose halves round away from zero, or toward +inf for the channels below params[16]
// (TFLite's optimized depthwise kernel rounds that way). The accumulator is int32 and wraps, as in TFLite and the
// viper twin.
//
// Unlike the viper twin this trusts nothing: every offset and length is checked against its buffer before
// anything is written (ValueError naming it), shifts outside [-31, 31] are refused; it allocates nothing.
//
// Our own code, written from the arithmetic of _model_pure.py (TFLite's quantization spec). Compiled with
// -DWAKE_CORE_ONLY it is the bare kernels without MicroPython (tools/bench/bench_wake.py counts their Xtensa
// instructions with xtensa-lx106-elf-gcc -O2, as bench_crypto_aead.py does for aead.c).
#include <stddef.h>
#include <stdint.h>

#ifndef WAKE_CORE_ONLY
#include "py/runtime.h"
#endif

#define WAKE_NOINLINE __attribute__((noinline))
#define WAKE_INLINE static inline __attribute__((always_inline))

#define NPARAM_MAC 17
#define NPARAM_COPY 6
#define NPARAM_LUT 4
#define NPARAM_IN 4
#define SHIFT_MIN (-31)          // TFLite's own range (RoundingDivideByPOT takes exponents up to 31)
#define SHIFT_MAX 31

// A signed 32x32->64 product (MULL + MULSH on the ESP32-S3). tools/bench/bench_wake.py defines WAKE_MUL64S for
// its instruction count with the S3's two-instruction shape (the lx106 it compiles for would call __muldi3).
#ifndef WAKE_MUL64S
#define WAKE_MUL64S(a, b) ((int64_t)(a) * (int64_t)(b))
#endif

typedef uint32_t __attribute__((may_alias)) wake_u32a;

// 4 weight bytes, byte j in bits 8j..8j+7 (little-endian, as the ESP32-S3 and x86): one word load where they are
// 4-aligned (the loader's arrays), else bytes (a memoryview of a frozen bytes object may start anywhere)
WAKE_INLINE uint32_t ld32(const uint8_t *p, int aligned) {
    if (aligned) {
        return *(const wake_u32a *)p;
    }
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// MultiplyByQuantizedMultiplier(x, m, shift) in 32-bit halves, no branches. The doubling high multiply: TFLite
// adds 2**30 (x*m >= 0) or 1 - 2**30 (x*m < 0) and truncates the quotient by 2**31, which for either sign is
// floor((x*m + 2**30) / 2**31): the product's bits 31..62, plus its bit 30. Then the rounding shift right: + 1
// when the remainder exceeds half the divisor, or equals it for a negative value that rounds away from zero
// (down = 1; down = 0 rounds halves toward +inf, TFLite's optimized depthwise kernel).
WAKE_INLINE int32_t requant(int32_t x, int32_t m, int32_t shift, uint32_t down) {
    int32_t ls = shift > 0 ? shift : 0;
    int32_t rs = ls - shift;
    x = (int32_t)((uint32_t)x << ls);
    int64_t ab = WAKE_MUL64S(x, m);
    uint32_t lo = (uint32_t)ab, hi = (uint32_t)((uint64_t)ab >> 32);
    int32_t r = (int32_t)(((hi << 1) | (lo >> 31)) + ((lo >> 30) & 1));
    uint32_t mask = ((uint32_t)1 << rs) - 1;
    uint32_t th = (mask >> 1) + (((uint32_t)r >> 31) & down);
    uint32_t rem = (uint32_t)r & mask;
    return (r >> rs) + (int32_t)((th - rem) >> 31);
}

// one output: the accumulator plus its bias requantized, the zero point added, clamped to the activation's range;
// t points at the channel's bias, m at its multiplier, sh at its shift
WAKE_INLINE void put(int8_t *dst, uint32_t acc, const int32_t *t, const int32_t *m, const int32_t *sh,
    const int32_t *p, int32_t oc) {
    int32_t v = requant((int32_t)(acc + (uint32_t)*t), *m, *sh, oc >= p[16]) + p[13];
    v = v < p[14] ? p[14] : v;
    v = v > p[15] ? p[15] : v;
    *dst = (int8_t)v;
}

// CONV_2D / FULLY_CONNECTED: four output channels at a time, their four weights of one input element in one 32-bit
// word (the compiler's arrange_mac), each stored plus 128 so that its bytes are extracted unsigned:
// x * w = x * (w + 128) - 128 * x, the inputs' sum taken once per output row.
WAKE_INLINE void mac_body(int8_t *a, const uint8_t *w, const int32_t *b, const int32_t *p, int aligned) {
    const int32_t inp = p[0], in_cols = p[2], out = p[3], out_rows = p[4], out_cols = p[5];
    const int32_t kh = p[6], stride = p[7], dil = p[8], wo = p[9], bo = p[10];
    for (int32_t t = 0; t < out_rows; t++) {
        const int8_t *base = a + inp + t * stride * in_cols;
        int8_t *dst = a + out + t * out_cols;
        uint32_t xs = 0;
        for (int32_t k = 0; k < kh; k++) {
            const int8_t *x = base + k * dil * in_cols;
            for (int32_t i = 0; i < in_cols; i++) {
                xs += (uint32_t)(int32_t)x[i];
            }
        }
        xs <<= 7;
        const uint8_t *wp = w + wo;
        for (int32_t oc = 0; oc < out_cols; oc += 4) {
            uint32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int32_t k = 0; k < kh; k++) {
                const int8_t *x = base + k * dil * in_cols;
                const int8_t *xe = x + in_cols;
                while (x < xe) {
                    int32_t v = *x++;
                    uint32_t q = ld32(wp, aligned);
                    wp += 4;
                    s0 += (uint32_t)(v * (int32_t)(q & 255));
                    s1 += (uint32_t)(v * (int32_t)((q >> 8) & 255));
                    s2 += (uint32_t)(v * (int32_t)((q >> 16) & 255));
                    s3 += (uint32_t)(v * (int32_t)(q >> 24));
                }
            }
            int32_t left = out_cols - oc;
            const int32_t *t = b + bo + oc, *m = b + p[11] + oc, *sh = b + p[12] + oc;
            put(dst + oc, s0 - xs, t, m, sh, p, oc);
            if (left > 1) {
                put(dst + oc + 1, s1 - xs, t + 1, m + 1, sh + 1, p, oc + 1);
            }
            if (left > 2) {
                put(dst + oc + 2, s2 - xs, t + 2, m + 2, sh + 2, p, oc + 2);
            }
            if (left > 3) {
                put(dst + oc + 3, s3 - xs, t + 3, m + 3, sh + 3, p, oc + 3);
            }
        }
    }
}

// DEPTHWISE_CONV_2D: four channels at a time, their four weights of one kernel row in one word (arrange_dw, int8);
// the channels of a last partial group one by one (the inputs past the row's last channel are not theirs)
WAKE_INLINE void dw_body(int8_t *a, const uint8_t *w, const int32_t *b, const int32_t *p, int aligned) {
    const int32_t inp = p[0], cols = p[2], out = p[3], out_rows = p[4];
    const int32_t kh = p[6], stride = p[7], dil = p[8], wo = p[9], bo = p[10];
    const int32_t step = dil * cols, full = cols & ~3;
    for (int32_t t = 0; t < out_rows; t++) {
        const int8_t *base = a + inp + t * stride * cols;
        int8_t *dst = a + out + t * cols;
        const uint8_t *wp = w + wo;
        int32_t c = 0;
        for (; c < full; c += 4) {
            const int8_t *x = base + c;
            uint32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int32_t k = 0; k < kh; k++) {
                uint32_t q = ld32(wp, aligned);
                wp += 4;
                s0 += (uint32_t)((int32_t)x[0] * (int32_t)(int8_t)q);
                s1 += (uint32_t)((int32_t)x[1] * (int32_t)(int8_t)(q >> 8));
                s2 += (uint32_t)((int32_t)x[2] * (int32_t)(int8_t)(q >> 16));
                s3 += (uint32_t)((int32_t)x[3] * ((int32_t)q >> 24));
                x += step;
            }
            const int32_t *t = b + bo + c, *m = b + p[11] + c, *sh = b + p[12] + c;
            put(dst + c, s0, t, m, sh, p, c);
            put(dst + c + 1, s1, t + 1, m + 1, sh + 1, p, c + 1);
            put(dst + c + 2, s2, t + 2, m + 2, sh + 2, p, c + 2);
            put(dst + c + 3, s3, t + 3, m + 3, sh + 3, p, c + 3);
        }
        for (; c < cols; c++) {
            const int8_t *x = base + c;
            const int8_t *wc = (const int8_t *)wp + (c & 3);
            uint32_t s = 0;
            for (int32_t k = 0; k < kh; k++) {
                s += (uint32_t)((int32_t)*x * (int32_t)wc[4 * k]);
                x += step;
            }
            put(dst + c, s, b + bo + c, b + p[11] + c, b + p[12] + c, p, c);
        }
    }
}

// the aligned variants are the board's path (and what tools/bench/bench_wake.py counts)
WAKE_NOINLINE void wake_mac(int8_t *a, const uint8_t *w, const int32_t *b, const int32_t *p) {
    mac_body(a, w, b, p, 1);
}

WAKE_NOINLINE void wake_mac_u(int8_t *a, const uint8_t *w, const int32_t *b, const int32_t *p) {
    mac_body(a, w, b, p, 0);
}

WAKE_NOINLINE void wake_dw(int8_t *a, const uint8_t *w, const int32_t *b, const int32_t *p) {
    dw_body(a, w, b, p, 1);
}

WAKE_NOINLINE void wake_dw_u(int8_t *a, const uint8_t *w, const int32_t *b, const int32_t *p) {
    dw_body(a, w, b, p, 0);
}

WAKE_NOINLINE void wake_copy(int8_t *a, const int32_t *p) {
    const int32_t src = p[0], dst = p[1], rows = p[2], cols = p[3], sp = p[4], dp = p[5];
    for (int32_t r = 0; r < rows; r++) {
        const int8_t *s = a + src + r * sp;
        int8_t *d = a + dst + r * dp;
        int32_t n = cols;
        // the twins copy element by element, front to back. Words do the same where the target is below the source
        // or apart from it (a word is read whole before it is written; the streaming state's shifts are all of this
        // kind) and both are equally aligned; an overlap above the source smears, byte by byte, as in the twins.
        if ((d <= s || d >= s + cols) && (((uintptr_t)d ^ (uintptr_t)s) & 3) == 0) {
            for (; n > 0 && ((uintptr_t)d & 3); n--) {
                *d++ = *s++;
            }
            for (; n >= 16; n -= 16) {
                uint32_t w0 = ((const wake_u32a *)s)[0], w1 = ((const wake_u32a *)s)[1];
                uint32_t w2 = ((const wake_u32a *)s)[2], w3 = ((const wake_u32a *)s)[3];
                ((wake_u32a *)d)[0] = w0;
                ((wake_u32a *)d)[1] = w1;
                ((wake_u32a *)d)[2] = w2;
                ((wake_u32a *)d)[3] = w3;
                d += 16;
                s += 16;
            }
            for (; n >= 4; n -= 4) {
                *(wake_u32a *)d = *(const wake_u32a *)s;
                d += 4;
                s += 4;
            }
        }
        for (; n > 0; n--) {
            *d++ = *s++;
        }
    }
}

WAKE_NOINLINE void wake_lut(int8_t *a, const int8_t *w, const int32_t *p) {
    const int32_t inp = p[0], out = p[1], n = p[2];
    const int8_t *t = w + p[3];
    for (int32_t i = 0; i < n; i++) {
        a[out + i] = t[(uint8_t)a[inp + i]];
    }
}

WAKE_NOINLINE void wake_quant_in(int8_t *a, const int8_t *w, const uint16_t *f, const int32_t *p) {
    const int32_t dst = p[0], n = p[1];
    const int8_t *t = w + p[2];
    const uint32_t top = (uint32_t)(p[3] - 1);
    for (int32_t i = 0; i < n; i++) {
        uint32_t u = f[i];
        a[dst + i] = t[u < top ? u : top];
    }
}

#ifndef WAKE_CORE_ONLY

// --- the binding: buffers and every offset checked before a kernel runs ----------------------------------

typedef struct {
    void *buf;
    size_t len;
} wbuf_t;

static wbuf_t get_buf(mp_obj_t o, int flags, size_t align, const char *what) {
    mp_buffer_info_t bi;
    mp_get_buffer_raise(o, &bi, flags);
    if (((uintptr_t)bi.buf & (align - 1)) || (bi.len & (align - 1))) {
        mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_wake_c: %s must be %d-aligned"), what, (int)align);
    }
    wbuf_t r = { bi.buf, bi.len };
    return r;
}

static const int32_t *get_params(mp_obj_t o, size_t n) {
    wbuf_t pb = get_buf(o, MP_BUFFER_READ, 4, "params (an array 'i')");
    if (pb.len < 4 * n) {
        mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_wake_c: params holds %d values, needs %d"),
            (int)(pb.len / 4), (int)n);
    }
    return (const int32_t *)pb.buf;
}

// [off, off + n) inside a buffer of size units, all of them non-negative (64-bit: no overflow)
static inline void inside(int64_t off, int64_t n, size_t size, const char *what) {
    if (off < 0 || n < 0 || off + n > (int64_t)size) {
        mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_wake_c: %s [%d, +%d) outside its %d"),
            what, (int)off, (int)n, (int)size);
    }
}

static inline void nonneg(int32_t v, const char *what) {
    if (v < 0) {
        mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_wake_c: %s %d is negative"), what, (int)v);
    }
}

// the checks of one conv / depthwise op (p: NPARAM_MAC values) against the buffers' sizes
static void check_conv(const int32_t *p, size_t na, size_t n8, const int32_t *b, size_t n32, int depthwise) {
    int32_t in_cols = p[2], out_rows = p[4], out_cols = depthwise ? p[2] : p[5], kh = p[6];
    nonneg(in_cols, "in_cols");
    nonneg(out_rows, "out_rows");
    nonneg(out_cols, "out_cols");
    nonneg(kh, "kh");
    nonneg(p[7], "stride");
    nonneg(p[8], "dilation");
    if (out_rows == 0 || out_cols == 0) {
        return;
    }
    if (kh > 0) {
        int64_t rows_in = (int64_t)(out_rows - 1) * p[7] + (int64_t)(kh - 1) * p[8] + 1;
        inside(p[0], rows_in * in_cols, na, "input");
    }
    inside(p[3], (int64_t)out_rows * out_cols, na, "output");
    // the weights in groups of 4 channels, the last group padded (arrange_mac / arrange_dw)
    inside(p[9], (int64_t)kh * (depthwise ? 1 : in_cols) * (((int64_t)out_cols + 3) & ~3), n8, "weights");
    inside(p[10], out_cols, n32, "bias");
    inside(p[11], out_cols, n32, "multipliers");
    inside(p[12], out_cols, n32, "shifts");
    for (int32_t c = 0; c < out_cols; c++) {
        int32_t s = b[p[12] + c];
        if (s < SHIFT_MIN || s > SHIFT_MAX) {
            mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_wake_c: shift %d of channel %d outside [%d, %d]"),
                (int)s, (int)c, SHIFT_MIN, SHIFT_MAX);
        }
    }
}

static void check_copy(const int32_t *p, size_t na) {
    nonneg(p[2], "rows");
    nonneg(p[3], "cols");
    nonneg(p[4], "source pitch");
    nonneg(p[5], "target pitch");
    if (p[2] > 0 && p[3] > 0) {
        inside(p[0], (int64_t)(p[2] - 1) * p[4] + p[3], na, "copy source");
        inside(p[1], (int64_t)(p[2] - 1) * p[5] + p[3], na, "copy target");
    }
}

static void check_lut(const int32_t *p, size_t na, size_t n8) {
    inside(p[0], p[2], na, "table input");
    inside(p[1], p[2], na, "table output");
    inside(p[3], 256, n8, "table");
}

// a checked conv / depthwise op: the word-loading kernels where its weights are 4-aligned, else the byte-loading ones
static void conv_run(int8_t *a, const uint8_t *w, const int32_t *b, const int32_t *p, int depthwise) {
    if (p[4] <= 0 || (depthwise ? p[2] : p[5]) <= 0) {
        return;
    }
    int aligned = (((uintptr_t)w + (uintptr_t)p[9]) & 3) == 0;
    if (depthwise) {
        (aligned ? wake_dw : wake_dw_u)(a, w, b, p);
    } else {
        (aligned ? wake_mac : wake_mac_u)(a, w, b, p);
    }
}

static mp_obj_t conv(mp_obj_t arena, mp_obj_t w8, mp_obj_t i32, mp_obj_t params, int depthwise) {
    wbuf_t a = get_buf(arena, MP_BUFFER_RW, 1, "arena");
    wbuf_t w = get_buf(w8, MP_BUFFER_READ, 1, "w8");
    wbuf_t bt = get_buf(i32, MP_BUFFER_READ, 4, "i32 (an array 'i')");
    const int32_t *p = get_params(params, NPARAM_MAC);
    const int32_t *b = (const int32_t *)bt.buf;
    check_conv(p, a.len, w.len, b, bt.len / 4, depthwise);
    conv_run((int8_t *)a.buf, (const uint8_t *)w.buf, b, p, depthwise);
    return mp_const_none;
}

static mp_obj_t wake_mac_fn(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    return conv(args[0], args[1], args[2], args[3], 0);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(wake_mac_obj, 4, 4, wake_mac_fn);

static mp_obj_t wake_dw_fn(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    return conv(args[0], args[1], args[2], args[3], 1);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(wake_dw_obj, 4, 4, wake_dw_fn);

static mp_obj_t wake_copy_fn(mp_obj_t arena, mp_obj_t params) {
    wbuf_t a = get_buf(arena, MP_BUFFER_RW, 1, "arena");
    const int32_t *p = get_params(params, NPARAM_COPY);
    check_copy(p, a.len);
    if (p[2] > 0 && p[3] > 0) {
        wake_copy((int8_t *)a.buf, p);
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_2(wake_copy_obj, wake_copy_fn);

static mp_obj_t wake_lut_fn(mp_obj_t arena, mp_obj_t w8, mp_obj_t params) {
    wbuf_t a = get_buf(arena, MP_BUFFER_RW, 1, "arena");
    wbuf_t w = get_buf(w8, MP_BUFFER_READ, 1, "w8");
    const int32_t *p = get_params(params, NPARAM_LUT);
    check_lut(p, a.len, w.len);
    wake_lut((int8_t *)a.buf, (const int8_t *)w.buf, p);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_3(wake_lut_obj, wake_lut_fn);

// run(arena, w8, i32, prog): a whole inference in one call. prog (array 'i') is the op list model.py lowers
// the model to, each op its kind (KIND_MAC, KIND_DW, KIND_COPY, KIND_LUT) then its parameters (17, 17, 6, 4
// values, as the single calls take them). Every op is checked before any runs: a bad program writes nothing.
#define KIND_MAC 0
#define KIND_DW 1
#define KIND_COPY 2
#define KIND_LUT 3

static int32_t op_len(int32_t kind) {
    switch (kind) {
        case KIND_MAC:
        case KIND_DW:
            return NPARAM_MAC;
        case KIND_COPY:
            return NPARAM_COPY;
        case KIND_LUT:
            return NPARAM_LUT;
        default:
            return -1;
    }
}

static mp_obj_t wake_run_fn(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    wbuf_t a = get_buf(args[0], MP_BUFFER_RW, 1, "arena");
    wbuf_t w = get_buf(args[1], MP_BUFFER_READ, 1, "w8");
    wbuf_t bt = get_buf(args[2], MP_BUFFER_READ, 4, "i32 (an array 'i')");
    wbuf_t pb = get_buf(args[3], MP_BUFFER_READ, 4, "prog (an array 'i')");
    const int32_t *prog = (const int32_t *)pb.buf, *b = (const int32_t *)bt.buf;
    size_t n = pb.len / 4, n32 = bt.len / 4;
    for (size_t i = 0; i < n;) {
        int32_t len = op_len(prog[i]);
        if (len < 0 || i + 1 + (size_t)len > n) {
            mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_wake_c: prog op at %d: kind %d or its length"),
                (int)i, (int)prog[i]);
        }
        const int32_t *p = prog + i + 1;
        if (prog[i] == KIND_COPY) {
            check_copy(p, a.len);
        } else if (prog[i] == KIND_LUT) {
            check_lut(p, a.len, w.len);
        } else {
            check_conv(p, a.len, w.len, b, n32, prog[i] == KIND_DW);
        }
        i += 1 + (size_t)len;
    }
    int8_t *ar = (int8_t *)a.buf;
    const uint8_t *wt = (const uint8_t *)w.buf;
    for (size_t i = 0; i < n;) {
        int32_t kind = prog[i];
        const int32_t *p = prog + i + 1;
        switch (kind) {
            case KIND_MAC:
            case KIND_DW:
                conv_run(ar, wt, b, p, kind == KIND_DW);
                break;
            case KIND_COPY:
                if (p[2] > 0 && p[3] > 0) {
                    wake_copy(ar, p);
                }
                break;
            default:
                wake_lut(ar, (const int8_t *)wt, p);
                break;
        }
        i += 1 + (size_t)op_len(kind);
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(wake_run_obj, 4, 4, wake_run_fn);

static mp_obj_t wake_quant_in_fn(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    wbuf_t a = get_buf(args[0], MP_BUFFER_RW, 1, "arena");
    wbuf_t w = get_buf(args[1], MP_BUFFER_READ, 1, "w8");
    wbuf_t f = get_buf(args[2], MP_BUFFER_READ, 2, "feats (an array 'H')");
    const int32_t *p = get_params(args[3], NPARAM_IN);
    inside(p[0], p[1], a.len, "input tensor");
    inside(0, p[1], f.len / 2, "features");
    if (p[3] < 1) {
        mp_raise_ValueError(MP_ERROR_TEXT("_wake_c: the input table is empty"));
    }
    inside(p[2], p[3], w.len, "input table");
    wake_quant_in((int8_t *)a.buf, (const int8_t *)w.buf, (const uint16_t *)f.buf, p);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(wake_quant_in_obj, 4, 4, wake_quant_in_fn);

static const mp_rom_map_elem_t wake_module_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR__wake_c) },
    { MP_ROM_QSTR(MP_QSTR_mac), MP_ROM_PTR(&wake_mac_obj) },
    { MP_ROM_QSTR(MP_QSTR_dw), MP_ROM_PTR(&wake_dw_obj) },
    { MP_ROM_QSTR(MP_QSTR_copy), MP_ROM_PTR(&wake_copy_obj) },
    { MP_ROM_QSTR(MP_QSTR_lut), MP_ROM_PTR(&wake_lut_obj) },
    { MP_ROM_QSTR(MP_QSTR_quant_in), MP_ROM_PTR(&wake_quant_in_obj) },
    { MP_ROM_QSTR(MP_QSTR_run), MP_ROM_PTR(&wake_run_obj) },
};
static MP_DEFINE_CONST_DICT(wake_module_globals, wake_module_globals_table);

const mp_obj_module_t wake_c_user_cmodule = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&wake_module_globals,
};

MP_REGISTER_MODULE(MP_QSTR__wake_c, wake_c_user_cmodule);

#endif
