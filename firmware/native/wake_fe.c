// _wake_fe_c: the wake-word frontend's stages (firmware/satellite/wake/frontend.py) as a MicroPython user C module,
// the board image's fast path over _frontend_viper.py and the pure stages (issue 37: frontend + one model <= 15 % of
// a 240 MHz core; the viper frontend alone is ~16-18 %).
//
// Same functions, buffers and results as frontend.py's pure stages, which document the arithmetic (TFLite-Micro's
// microfrontend: Hann window, kiss_fft FIXED_POINT=16 radix-4 FFT with int16 wrapping at every store, the real split,
// |X|^2, the mel filterbank with its rounded integer root, noise reduction, PCAN gain and the q6 log):
//   push(hist, used, src, pos)           window(hist, coef, x) -> max |x|      fft(x, shift, c, tw)
//   energy(c, stw, e)                    filterbank(e, w, uw, edges, sig, shift)
//   post(sig, est, gain, log, out)
//   step(bufs, src, pos, out)            all of them in one call, the steady 10 ms step (bufs: fe_step's buffers)
// hist/coef/x/c/tw/stw/w/uw int16 (array 'h'), e/sig int32 (array 'i'), est/out uint16 (array 'H'), src, edges,
// gain and log bytes (any alignment, read byte-wise). The constants of post are this file's (CONSTS): frontend.py
// uses the module only when they equal _frontend_tables.py's.
//
// Every intermediate is the twin's: below 2**31 where the pure stages say so (int32 here), the energies and the
// filterbank's limbs non-negative (uint32). Unlike the viper twin this trusts nothing: every buffer is checked
// against the indices the stage will use before it runs (ValueError naming it); it allocates nothing.
//
// Our own code, transcribed from _frontend_viper.py. Compiled with -DWAKE_CORE_ONLY it is the bare stages without
// MicroPython (tools/bench/bench_wake_frontend.py counts their Xtensa instructions with xtensa-lx106-elf-gcc -O2).
#include <stddef.h>
#include <stdint.h>

#ifndef WAKE_CORE_ONLY
#include "py/runtime.h"
#endif

#define FE_NOINLINE __attribute__((noinline))

#define FE_WINDOW 480
#define FE_STEP 160
#define FE_NFFT 512              // int16 halves of the complex FFT: 256 (r, i) pairs
#define FE_CHANNELS 40
#define NR_EVEN 409
#define NR_ODD 983
#define NR_MIN_REMAINING 819
#define PCAN_SNR_SHIFT 6
#define LOG_CORRECTION_BITS 3
#define LOG_SCALE_SHIFT 6
#define GAIN_BYTES 250           // 8 * 32 - 12 + 6: the largest PCAN segment read
#define LOG_BYTES 258            // 2 * 127 + 4: the largest log segment read

#define S16(v) ((int32_t)(int16_t)(uint16_t)(v))

static inline int32_t le16s(const uint8_t *t, int32_t i) {
    return S16(t[2 * i] | (t[2 * i + 1] << 8));
}

static inline uint32_t le16u(const uint8_t *t, int32_t i) {
    return (uint32_t)t[2 * i] | ((uint32_t)t[2 * i + 1] << 8);
}

// floor(log2 v) for v > 0, by halving (as the twins do; no count-leading-zeros instruction assumed)
static inline int32_t floor_log2(uint32_t v) {
    int32_t n = 0;
    if (v >= 65536) {
        n += 16;
        v >>= 16;
    }
    if (v >= 256) {
        n += 8;
        v >>= 8;
    }
    if (v >= 16) {
        n += 4;
        v >>= 4;
    }
    if (v >= 4) {
        n += 2;
        v >>= 2;
    }
    if (v >= 2) {
        n += 1;
    }
    return n;
}

FE_NOINLINE void fe_push(int16_t *hist, int32_t used, const uint8_t *src) {
    for (int32_t i = 0; i < FE_STEP; i++) {
        hist[used + i] = (int16_t)(uint16_t)(src[2 * i] | (src[2 * i + 1] << 8));
    }
}

FE_NOINLINE int32_t fe_window(int16_t *hist, const int16_t *coef, int16_t *x) {
    int32_t mx = 0;
    for (int32_t i = 0; i < FE_WINDOW; i++) {
        int32_t v = ((int32_t)hist[i] * (int32_t)(uint16_t)coef[i]) >> 12;   // coefficients are 0..4096
        x[i] = (int16_t)v;
        if (v < 0) {
            v = -v;
        }
        if (v > mx && v < 32768) {
            mx = v;
        }
    }
    for (int32_t i = 0; i < FE_WINDOW - FE_STEP; i++) {
        hist[i] = hist[i + FE_STEP];
    }
    return mx;
}

// kiss_fft's C_FIXDIV by 4 of a loaded int16
static inline int32_t fixdiv4(int16_t v) {
    return ((int32_t)v * 8191 + 16384) >> 15;
}

FE_NOINLINE void fe_fft(const int16_t *x, int32_t shift, int16_t *c, const int16_t *tw) {
    for (int32_t i = 0; i < 256; i++) {
        int32_t j = ((i & 3) << 6) | ((i & 12) << 2) | ((i >> 2) & 12) | (i >> 6);
        c[2 * i] = (int16_t)(uint16_t)((uint32_t)(uint16_t)x[2 * j] << shift);
        c[2 * i + 1] = (int16_t)(uint16_t)((uint32_t)(uint16_t)x[2 * j + 1] << shift);
    }
    // wrapping is a ring homomorphism: after the twiddle products values only flow through + and - into an
    // int16 store, whose truncation equals kiss_fft's wrap at every step (as in the viper twin)
    int32_t fs = 128;
    for (int32_t m2 = 2; m2 < FE_NFFT; m2 *= 4, fs >>= 2) {
        for (int32_t base = 0; base < FE_NFFT; base += 4 * m2) {
            int32_t i0 = base, i1 = i0 + m2, i2 = i1 + m2, i3 = i2 + m2;
            // k = 0: twiddles (32767, 0), whose product returns a C_FIXDIV'd part unchanged
            int32_t a0r = fixdiv4(c[i0]), a0i = fixdiv4(c[i0 + 1]);
            int32_t s0r = fixdiv4(c[i1]), s0i = fixdiv4(c[i1 + 1]);
            int32_t s1r = fixdiv4(c[i2]), s1i = fixdiv4(c[i2 + 1]);
            int32_t s2r = fixdiv4(c[i3]), s2i = fixdiv4(c[i3 + 1]);
            int32_t s5r = a0r - s1r, s5i = a0i - s1i;
            a0r += s1r;
            a0i += s1i;
            int32_t s3r = s0r + s2r, s3i = s0i + s2i, s4r = s0r - s2r, s4i = s0i - s2i;
            c[i2] = (int16_t)(a0r - s3r);
            c[i2 + 1] = (int16_t)(a0i - s3i);
            c[i0] = (int16_t)(a0r + s3r);
            c[i0 + 1] = (int16_t)(a0i + s3i);
            c[i1] = (int16_t)(s5r + s4i);
            c[i1 + 1] = (int16_t)(s5i - s4r);
            c[i3] = (int16_t)(s5r - s4i);
            c[i3 + 1] = (int16_t)(s5i + s4r);
            int32_t t = fs;
            for (i0 = base + 2; i0 < base + m2; i0 += 2, t += fs) {
                i1 = i0 + m2;
                i2 = i1 + m2;
                i3 = i2 + m2;
                a0r = fixdiv4(c[i0]);
                a0i = fixdiv4(c[i0 + 1]);
                int32_t a1r = fixdiv4(c[i1]), a1i = fixdiv4(c[i1 + 1]);
                int32_t a2r = fixdiv4(c[i2]), a2i = fixdiv4(c[i2 + 1]);
                int32_t a3r = fixdiv4(c[i3]), a3i = fixdiv4(c[i3 + 1]);
                int32_t wr = tw[t], wi = tw[t + 1];
                s0r = (a1r * wr - a1i * wi + 16384) >> 15;
                s0i = (a1r * wi + a1i * wr + 16384) >> 15;
                wr = tw[2 * t];
                wi = tw[2 * t + 1];
                s1r = (a2r * wr - a2i * wi + 16384) >> 15;
                s1i = (a2r * wi + a2i * wr + 16384) >> 15;
                wr = tw[3 * t];
                wi = tw[3 * t + 1];
                s2r = (a3r * wr - a3i * wi + 16384) >> 15;
                s2i = (a3r * wi + a3i * wr + 16384) >> 15;
                s5r = a0r - s1r;
                s5i = a0i - s1i;
                a0r += s1r;
                a0i += s1i;
                s3r = s0r + s2r;
                s3i = s0i + s2i;
                s4r = s0r - s2r;
                s4i = s0i - s2i;
                c[i2] = (int16_t)(a0r - s3r);
                c[i2 + 1] = (int16_t)(a0i - s3i);
                c[i0] = (int16_t)(a0r + s3r);
                c[i0 + 1] = (int16_t)(a0i + s3i);
                c[i1] = (int16_t)(s5r + s4i);
                c[i1 + 1] = (int16_t)(s5i - s4r);
                c[i3] = (int16_t)(s5r - s4i);
                c[i3 + 1] = (int16_t)(s5i + s4r);
            }
        }
    }
}

FE_NOINLINE void fe_energy(const int16_t *c, const int16_t *stw, uint32_t *e) {
    for (int32_t k = 1; k <= 128; k++) {
        int32_t n = 2 * (256 - k);
        int32_t pr = ((int32_t)c[2 * k] * 16383 + 16384) >> 15;
        int32_t pi = ((int32_t)c[2 * k + 1] * 16383 + 16384) >> 15;
        int32_t nr = ((int32_t)c[n] * 16383 + 16384) >> 15;
        int32_t ni = (S16(-(int32_t)c[n + 1]) * 16383 + 16384) >> 15;
        int32_t f1r = S16(pr + nr), f1i = S16(pi + ni), f2r = S16(pr - nr), f2i = S16(pi - ni);
        // 32-bit products as the board's viper twin does them (below 2**31 for these twiddles; wrapping, not
        // undefined, if ever not)
        uint32_t wr = (uint32_t)(int32_t)stw[2 * k - 2], wi = (uint32_t)(int32_t)stw[2 * k - 1];
        uint32_t ur = (uint32_t)f2r, ui = (uint32_t)f2i;
        int32_t twr = S16((int32_t)(ur * wr - ui * wi + 16384) >> 15);
        int32_t twi = S16((int32_t)(ur * wi + ui * wr + 16384) >> 15);
        int32_t r = (f1r + twr) >> 1, i = (f1i + twi) >> 1;
        e[k] = (uint32_t)(r * r) + (uint32_t)(i * i);
        r = (f1r - twr) >> 1;
        i = (twi - f1i) >> 1;
        e[256 - k] = (uint32_t)(r * r) + (uint32_t)(i * i);
    }
}

FE_NOINLINE void fe_filterbank(const uint32_t *e, const int16_t *w, const int16_t *uw, const uint8_t *edges,
    int32_t *sig, int32_t shift) {
    const int32_t bs = (int32_t)le16u(edges, 0);
    for (int32_t j = 0; j < FE_CHANNELS; j++) {
        uint32_t hi = 0, lo = 0;
        int32_t b = (int32_t)le16u(edges, j);
        int32_t mid = (int32_t)le16u(edges, j + 1);
        int32_t end = (int32_t)le16u(edges, j + 2);
        for (; b < mid; b++) {
            uint32_t q = e[b], wt = (uint16_t)uw[b - bs];       // weights are 0..4096
            lo += wt * (q & 0xFFFF);
            hi += wt * (q >> 16);
        }
        hi += lo >> 16;
        lo &= 0xFFFF;
        for (; b < end; b++) {
            uint32_t q = e[b], wt = (uint16_t)w[b - bs];
            lo += wt * (q & 0xFFFF);
            hi += wt * (q >> 16);
        }
        hi += lo >> 16;
        lo &= 0xFFFF;
        // the rounded root of hi * 2**16 + lo by bit pairs, from the top pair that holds a bit
        uint32_t r = 0, rem = 0, u = hi ? hi : lo;
        int32_t n = u ? (floor_log2(u) & ~1) : 0, sh;      // the even n with u >> n in 1..3
        if (hi) {
            for (sh = n; sh >= 0; sh -= 2) {
                rem = (rem << 2) | ((hi >> sh) & 3);
                uint32_t t = (r << 2) | 1;
                r <<= 1;
                if (rem >= t) {
                    rem -= t;
                    r |= 1;
                }
            }
            sh = 14;
        } else if (lo) {
            sh = n;
        } else {
            sh = -2;
        }
        for (; sh >= 0; sh -= 2) {
            rem = (rem << 2) | ((lo >> sh) & 3);
            uint32_t t = (r << 2) | 1;
            r <<= 1;
            if (rem >= t) {
                rem -= t;
                r |= 1;
            }
        }
        if (rem > r && (hi >= 65536 || r != 0xFFFF)) {
            r += 1;
        }
        sig[j] = (int32_t)(r >> shift);
    }
}

FE_NOINLINE void fe_post(const int32_t *sig, uint16_t *est, const uint8_t *gain, const uint8_t *log,
    uint16_t *out) {
    for (int32_t j = 0; j < FE_CHANNELS; j++) {
        int32_t s = sig[j];
        uint32_t sm = (j & 1) ? NR_ODD : NR_EVEN;
        uint32_t osm = 16384 - sm;
        uint32_t uh = ((uint32_t)s >> 6) & 0xFFFF, ul = ((uint32_t)s & 63) << 10;
        uint32_t eh = est[2 * j], el = est[2 * j + 1];
        uint32_t a = ul * sm + el * osm;
        uint32_t b = uh * sm + eh * osm;
        uint32_t t = ((b & 0x3FFF) << 2) + (a >> 14);
        el = t & 0xFFFF;
        eh = ((b >> 14) + (t >> 16)) & 0xFFFF;
        est[2 * j] = (uint16_t)eh;
        est[2 * j + 1] = (uint16_t)el;
        uint32_t ch = eh, cl = el;                      // the estimate, clamped to the signal
        if (eh > uh || (eh == uh && el > ul)) {
            ch = uh;
            cl = ul;
        }
        int32_t dl = (int32_t)ul - (int32_t)cl, dh = (int32_t)uh - (int32_t)ch;
        if (dl < 0) {
            dl += 65536;
            dh -= 1;
        }
        int32_t sub = (dh << 6) + (dl >> 10);
        int32_t fl = (s >> 14) * NR_MIN_REMAINING + (((s & 0x3FFF) * NR_MIN_REMAINING) >> 14);
        s = sub > fl ? sub : fl;
        // the bit length of the 32-bit estimate eh:el
        int32_t n = eh ? 17 + floor_log2(eh) : (el ? 1 + floor_log2(el) : 0);
        int32_t g;
        if (eh == 0 && el <= 2) {
            g = le16s(gain, (int32_t)el);
        } else {
            int32_t f;
            if (n < 11) {
                f = (int32_t)((el << (11 - n)) & 0x3FF);
            } else {
                int32_t sh = n - 11;
                if (sh >= 16) {
                    f = (int32_t)((eh >> (sh - 16)) & 0x3FF);
                } else {
                    f = (int32_t)((((eh & 0x3FF) << (16 - sh)) | (el >> sh)) & 0x3FF);
                }
            }
            int32_t q = 4 * n - 6;
            g = (le16s(gain, q + 2) * f) >> 5;
            g += le16s(gain, q + 1) * 32;
            g *= f;
            g = ((g + 16384) >> 15) + le16s(gain, q);
        }
        int32_t snr = (s >> PCAN_SNR_SHIFT) * g + (((s & ((1 << PCAN_SNR_SHIFT) - 1)) * g) >> PCAN_SNR_SHIFT);
        if (snr < 8192) {
            s = (snr * snr) >> 20;
        } else {
            s = (snr >> 6) - 64;
        }
        int32_t lv = s * (1 << LOG_CORRECTION_BITS);
        uint32_t o = 0;
        if (lv > 1) {
            int32_t m = floor_log2((uint32_t)lv);
            int32_t f = lv - (1 << m);
            if (m < 16) {
                f <<= 16 - m;
            } else {
                f >>= m - 16;
            }
            int32_t seg = f >> 9;
            int32_t c0 = (int32_t)le16u(log, seg), c1 = (int32_t)le16u(log, seg + 1);
            f = f + c0 + (((c1 - c0) * (f - (seg << 9))) >> 16);
            int32_t l2 = (m << 16) + f;
            int32_t x = 45426 * (l2 >> 16) + (((l2 & 0xFFFF) * 22713 + 16384) >> 15);   // kLogCoeff
            x = ((x << LOG_SCALE_SHIFT) + 32768) >> 16;
            o = x > 0xFFFF ? 0xFFFF : (uint32_t)x;
        }
        out[j] = (uint16_t)o;
    }
}

// a whole 10 ms step once the window holds its first 320 samples (Frontend.step's steady state): the 160 new ones
// pushed behind them, then every stage, the FFT's input shift from the window's max as frontend.py computes it
FE_NOINLINE void fe_step(int16_t *hist, const uint8_t *src, const int16_t *coef, int16_t *x, int16_t *c,
    const int16_t *tw, const int16_t *stw, uint32_t *e, const int16_t *w, const int16_t *uw, const uint8_t *edges,
    int32_t *sig, uint16_t *est, const uint8_t *gain, const uint8_t *log, uint16_t *out) {
    fe_push(hist, FE_WINDOW - FE_STEP, src);
    int32_t mx = fe_window(hist, coef, x);
    int32_t shift = 15;
    while (mx) {
        shift--;
        mx >>= 1;
    }
    fe_fft(x, shift, c, tw);
    fe_energy(c, stw, e);
    fe_filterbank(e, w, uw, edges, sig, shift);
    fe_post(sig, est, gain, log, out);
}

#ifndef WAKE_CORE_ONLY

// --- the binding: every buffer checked against the indices its stage uses ------------------------------------

static void *buf_of(mp_obj_t o, int flags, size_t unit, size_t need, const char *what) {
    mp_buffer_info_t bi;
    mp_get_buffer_raise(o, &bi, flags);
    if ((uintptr_t)bi.buf & (unit - 1)) {
        mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_wake_fe_c: %s must be %d-aligned"), what, (int)unit);
    }
    if (bi.len / unit < need) {
        mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_wake_fe_c: %s holds %d items, needs %d"),
            what, (int)(bi.len / unit), (int)need);
    }
    return bi.buf;
}

static mp_int_t int_in(mp_obj_t o, mp_int_t lo, mp_int_t hi, const char *what) {
    mp_int_t v = mp_obj_get_int(o);
    if (v < lo || v > hi) {
        mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_wake_fe_c: %s %d outside [%d, %d]"),
            what, (int)v, (int)lo, (int)hi);
    }
    return v;
}

static mp_obj_t push_fn(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mp_int_t used = int_in(args[1], 0, 1 << 20, "used");
    mp_int_t pos = int_in(args[3], 0, 1 << 30, "pos");
    int16_t *hist = buf_of(args[0], MP_BUFFER_RW, 2, (size_t)used + FE_STEP, "hist");
    const uint8_t *src = buf_of(args[2], MP_BUFFER_READ, 1, (size_t)pos + 2 * FE_STEP, "src");
    fe_push(hist, (int32_t)used, src + pos);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(push_obj, 4, 4, push_fn);

static mp_obj_t window_fn(mp_obj_t hist, mp_obj_t coef, mp_obj_t x) {
    int16_t *h = buf_of(hist, MP_BUFFER_RW, 2, FE_WINDOW, "hist");
    const int16_t *cf = buf_of(coef, MP_BUFFER_READ, 2, FE_WINDOW, "coef");
    int16_t *xx = buf_of(x, MP_BUFFER_RW, 2, FE_WINDOW, "x");
    return MP_OBJ_NEW_SMALL_INT(fe_window(h, cf, xx));
}
static MP_DEFINE_CONST_FUN_OBJ_3(window_obj, window_fn);

static mp_obj_t fft_fn(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mp_int_t shift = int_in(args[1], 0, 15, "shift");
    const int16_t *x = buf_of(args[0], MP_BUFFER_READ, 2, FE_NFFT, "x");
    int16_t *c = buf_of(args[2], MP_BUFFER_RW, 2, FE_NFFT, "c");
    // the largest twiddle read: 3 * t + 1 with t < fs * m2 / 2 in the stage m2 = 128, fs = 2
    const int16_t *tw = buf_of(args[3], MP_BUFFER_READ, 2, 3 * 2 * 63 + 2, "tw");
    if (c == x) {
        mp_raise_ValueError(MP_ERROR_TEXT("_wake_fe_c: fft needs c apart from x"));
    }
    fe_fft(x, (int32_t)shift, c, tw);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(fft_obj, 4, 4, fft_fn);

static mp_obj_t energy_fn(mp_obj_t c, mp_obj_t stw, mp_obj_t e) {
    const int16_t *cc = buf_of(c, MP_BUFFER_READ, 2, FE_NFFT, "c");
    const int16_t *s = buf_of(stw, MP_BUFFER_READ, 2, 256, "stw");
    uint32_t *ee = buf_of(e, MP_BUFFER_RW, 4, 256, "e");
    fe_energy(cc, s, ee);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_3(energy_obj, energy_fn);

// the edges rise from the first (checked); returns the last, the end of the bins the filterbank reads
static size_t edges_end(const uint8_t *edges) {
    uint32_t prev = le16u(edges, 0);
    for (int j = 1; j < FE_CHANNELS + 2; j++) {
        uint32_t v = le16u(edges, j);
        if (v < prev) {
            mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_wake_fe_c: edge %d falls"), j);
        }
        prev = v;
    }
    return prev;
}

static mp_obj_t filterbank_fn(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    const uint8_t *edges = buf_of(args[3], MP_BUFFER_READ, 1, 2 * (FE_CHANNELS + 2), "edges");
    // the bins the edges span must be in e, w and uw
    size_t last = edges_end(edges), first = le16u(edges, 0);
    const uint32_t *e = buf_of(args[0], MP_BUFFER_READ, 4, last, "e");
    const int16_t *w = buf_of(args[1], MP_BUFFER_READ, 2, last - first, "w");
    const int16_t *uw = buf_of(args[2], MP_BUFFER_READ, 2, last - first, "uw");
    int32_t *sig = buf_of(args[4], MP_BUFFER_RW, 4, FE_CHANNELS, "sig");
    mp_int_t shift = int_in(args[5], 0, 31, "shift");
    fe_filterbank(e, w, uw, edges, sig, (int32_t)shift);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(filterbank_obj, 6, 6, filterbank_fn);

static mp_obj_t post_fn(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    const int32_t *sig = buf_of(args[0], MP_BUFFER_READ, 4, FE_CHANNELS, "sig");
    uint16_t *est = buf_of(args[1], MP_BUFFER_RW, 2, 2 * FE_CHANNELS, "est");
    const uint8_t *gain = buf_of(args[2], MP_BUFFER_READ, 1, GAIN_BYTES, "gain");
    const uint8_t *log = buf_of(args[3], MP_BUFFER_READ, 1, LOG_BYTES, "log");
    uint16_t *out = buf_of(args[4], MP_BUFFER_RW, 2, FE_CHANNELS, "out");
    fe_post(sig, est, gain, log, out);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(post_obj, 5, 5, post_fn);

// step(bufs, src, pos, out): fe_step in one call, bufs the tuple Frontend keeps (hist, coef, x, c, tw, stw, e, w,
// uw, edges, sig, est, gain, log), each checked as its stage's call checks it
static mp_obj_t step_fn(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mp_obj_t *b;
    mp_obj_get_array_fixed_n(args[0], 14, &b);
    mp_int_t pos = int_in(args[2], 0, 1 << 30, "pos");
    const uint8_t *src = buf_of(args[1], MP_BUFFER_READ, 1, (size_t)pos + 2 * FE_STEP, "src");
    int16_t *hist = buf_of(b[0], MP_BUFFER_RW, 2, FE_WINDOW, "hist");
    const int16_t *coef = buf_of(b[1], MP_BUFFER_READ, 2, FE_WINDOW, "coef");
    int16_t *x = buf_of(b[2], MP_BUFFER_RW, 2, FE_NFFT, "x");
    int16_t *c = buf_of(b[3], MP_BUFFER_RW, 2, FE_NFFT, "c");
    const int16_t *tw = buf_of(b[4], MP_BUFFER_READ, 2, 3 * 2 * 63 + 2, "tw");
    const int16_t *stw = buf_of(b[5], MP_BUFFER_READ, 2, 256, "stw");
    uint32_t *e = buf_of(b[6], MP_BUFFER_RW, 4, 256, "e");
    const uint8_t *edges = buf_of(b[9], MP_BUFFER_READ, 1, 2 * (FE_CHANNELS + 2), "edges");
    size_t last = edges_end(edges), first = le16u(edges, 0);
    if (last > 256) {
        mp_raise_ValueError(MP_ERROR_TEXT("_wake_fe_c: the edges reach past the 256 bins"));
    }
    const int16_t *w = buf_of(b[7], MP_BUFFER_READ, 2, last - first, "w");
    const int16_t *uw = buf_of(b[8], MP_BUFFER_READ, 2, last - first, "uw");
    int32_t *sig = buf_of(b[10], MP_BUFFER_RW, 4, FE_CHANNELS, "sig");
    uint16_t *est = buf_of(b[11], MP_BUFFER_RW, 2, 2 * FE_CHANNELS, "est");
    const uint8_t *gain = buf_of(b[12], MP_BUFFER_READ, 1, GAIN_BYTES, "gain");
    const uint8_t *log = buf_of(b[13], MP_BUFFER_READ, 1, LOG_BYTES, "log");
    uint16_t *out = buf_of(args[3], MP_BUFFER_RW, 2, FE_CHANNELS, "out");
    if (c == x) {
        mp_raise_ValueError(MP_ERROR_TEXT("_wake_fe_c: fft needs c apart from x"));
    }
    fe_step(hist, src + pos, coef, x, c, tw, stw, e, w, uw, edges, sig, est, gain, log, out);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(step_obj, 4, 4, step_fn);

static const mp_rom_obj_tuple_t consts_obj = {
    {&mp_type_tuple}, 6, {
        MP_ROM_INT(NR_EVEN), MP_ROM_INT(NR_ODD), MP_ROM_INT(NR_MIN_REMAINING), MP_ROM_INT(PCAN_SNR_SHIFT),
        MP_ROM_INT(LOG_CORRECTION_BITS), MP_ROM_INT(LOG_SCALE_SHIFT),
    }
};

static const mp_rom_map_elem_t fe_module_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR__wake_fe_c) },
    { MP_ROM_QSTR(MP_QSTR_push), MP_ROM_PTR(&push_obj) },
    { MP_ROM_QSTR(MP_QSTR_window), MP_ROM_PTR(&window_obj) },
    { MP_ROM_QSTR(MP_QSTR_fft), MP_ROM_PTR(&fft_obj) },
    { MP_ROM_QSTR(MP_QSTR_energy), MP_ROM_PTR(&energy_obj) },
    { MP_ROM_QSTR(MP_QSTR_filterbank), MP_ROM_PTR(&filterbank_obj) },
    { MP_ROM_QSTR(MP_QSTR_post), MP_ROM_PTR(&post_obj) },
    { MP_ROM_QSTR(MP_QSTR_step), MP_ROM_PTR(&step_obj) },
    // NR_EVEN, NR_ODD, NR_MIN_REMAINING, PCAN_SNR_SHIFT, LOG_CORRECTION_BITS, LOG_SCALE_SHIFT
    { MP_ROM_QSTR(MP_QSTR_CONSTS), MP_ROM_PTR(&consts_obj) },
};
static MP_DEFINE_CONST_DICT(fe_module_globals, fe_module_globals_table);

const mp_obj_module_t wake_fe_c_user_cmodule = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&fe_module_globals,
};

MP_REGISTER_MODULE(MP_QSTR__wake_fe_c, wake_fe_c_user_cmodule);

#endif
