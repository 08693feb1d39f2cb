// _aead_c: ChaCha20-Poly1305 (RFC 8439) as a MicroPython user C module, the fast path of
// firmware/satellite/noise/chachapoly.py (issue 12: AEAD for one 20 ms frame each way <= 5 % of a core).
//
// _aead_c.run(T, Q, ctx, ad, adl, src, dst, n, mode) -> 0, or 1 for a bad tag: the same contract as
// _chacha_viper.run (tools/gen_chacha_viper.py), so chachapoly.py calls either the same way:
//   ctx   array 'I' of CTX_WORDS words: [0:16] ChaCha state (constants, key, counter, nonce),
//         [16:24] the Poly1305 one-time key r || s (input of POLY; SEAL and OPEN write it there)
//   mode  XOR   dst[0:n] = src[0:n] ^ keystream from block counter ctx[12] (the counter wraps at 2**32:
//               chachapoly.py refuses a message that would need it to)
//         SEAL  ciphertext to dst[0:n], tag to dst[n:n+16]; AD = ad[0:adl]
//         OPEN  src[0:n] is the ciphertext, src[n:n+16] its tag; returns 1 and leaves dst untouched
//               when the tag does not match (compared in constant time)
//         POLY  the Poly1305 tag of src[0:n] under ctx[16:24] to dst[0:16]
//         | NONCE_IN_Q  first set ctx[13:16] = 0, Q, 0 (a Noise nonce below 2**32)
//   T is unused (the viper twin's register local; callers pass 0).
// dst may be src (in place); a dst that partly overlaps src is refused. Unlike the viper twin this
// function trusts nothing: every length is checked against the buffers (ValueError, nothing written),
// and it allocates nothing.
//
// Our own code, written from RFC 8439: ChaCha20 with 32-bit rotates; Poly1305 in five 26-bit limbs with
// 32x32->64 products (one MULL + MULUH pair each on the ESP32-S3). Loads and stores go through 32-bit
// words where the buffers allow it (little-endian ports), 16-bit halves where both are 2-aligned (the
// transport seals in place at offset 2), bytes otherwise: Xtensa faults on unaligned word access.
//
// Compiled with -DAEAD_CORE_ONLY it is the bare core without MicroPython (tools/bench/bench_crypto_aead.py
// compiles it that way with xtensa-lx106-elf-gcc to count its instructions).
#include <stddef.h>
#include <stdint.h>

#ifndef AEAD_CORE_ONLY
#include <string.h>
#include "py/runtime.h"
#define AEAD_LITTLE_ENDIAN MP_ENDIANNESS_LITTLE
#else
// freestanding (-ffreestanding: a bare cross compiler has no libc headers)
#define memcpy __builtin_memcpy
#define memset __builtin_memset
#define AEAD_LITTLE_ENDIAN (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
#endif

#define AEAD_NOINLINE __attribute__((noinline))
#define AEAD_INLINE static inline __attribute__((always_inline))

#define CTX_WORDS 48
#define MODE_XOR 0
#define MODE_SEAL 1
#define MODE_OPEN 2
#define MODE_POLY 3
#define MODE_NONCE_IN_Q 4
#define TAG_LEN 16

// --- loads and stores at a known alignment (al: 4, 2 or 1; a constant after inlining) ---------------

AEAD_INLINE uint32_t get32(const uint8_t *p, int al) {
    if (AEAD_LITTLE_ENDIAN && al == 4) {
        uint32_t v;
        memcpy(&v, __builtin_assume_aligned(p, 4), 4);
        return v;
    }
    if (AEAD_LITTLE_ENDIAN && al == 2) {
        uint16_t lo, hi;
        memcpy(&lo, __builtin_assume_aligned(p, 2), 2);
        memcpy(&hi, __builtin_assume_aligned(p + 2, 2), 2);
        return (uint32_t)lo | ((uint32_t)hi << 16);
    }
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

AEAD_INLINE void put32(uint8_t *p, uint32_t v, int al) {
    if (AEAD_LITTLE_ENDIAN && al == 4) {
        memcpy(__builtin_assume_aligned(p, 4), &v, 4);
        return;
    }
    if (AEAD_LITTLE_ENDIAN && al == 2) {
        uint16_t lo = (uint16_t)v, hi = (uint16_t)(v >> 16);
        memcpy(__builtin_assume_aligned(p, 2), &lo, 2);
        memcpy(__builtin_assume_aligned(p + 2, 2), &hi, 2);
        return;
    }
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static int alignment(uintptr_t a) {
    return (a & 3) == 0 ? 4 : (a & 1) == 0 ? 2 : 1;
}

// --- ChaCha20 (RFC 8439 section 2.3) -------------------------------------------------------------------

#define ROTL32(v, r) (((v) << (r)) | ((v) >> (32 - (r))))
#define QUARTER(a, b, c, d) do { \
        a += b; d ^= a; d = ROTL32(d, 16); \
        c += d; b ^= c; b = ROTL32(b, 12); \
        a += b; d ^= a; d = ROTL32(d, 8); \
        c += d; b ^= c; b = ROTL32(b, 7); \
} while (0)

// out[0:16] = the ChaCha20 block of state st[0:16] with st[12] replaced by ctr (st is not written).
AEAD_NOINLINE void aead_chacha_block(const uint32_t *st, uint32_t ctr, uint32_t *out) {
    uint32_t x0 = st[0], x1 = st[1], x2 = st[2], x3 = st[3];
    uint32_t x4 = st[4], x5 = st[5], x6 = st[6], x7 = st[7];
    uint32_t x8 = st[8], x9 = st[9], x10 = st[10], x11 = st[11];
    uint32_t x12 = ctr, x13 = st[13], x14 = st[14], x15 = st[15];
    for (int i = 0; i < 10; i++) {
        QUARTER(x0, x4, x8, x12);
        QUARTER(x1, x5, x9, x13);
        QUARTER(x2, x6, x10, x14);
        QUARTER(x3, x7, x11, x15);
        QUARTER(x0, x5, x10, x15);
        QUARTER(x1, x6, x11, x12);
        QUARTER(x2, x7, x8, x13);
        QUARTER(x3, x4, x9, x14);
    }
    out[0] = x0 + st[0];
    out[1] = x1 + st[1];
    out[2] = x2 + st[2];
    out[3] = x3 + st[3];
    out[4] = x4 + st[4];
    out[5] = x5 + st[5];
    out[6] = x6 + st[6];
    out[7] = x7 + st[7];
    out[8] = x8 + st[8];
    out[9] = x9 + st[9];
    out[10] = x10 + st[10];
    out[11] = x11 + st[11];
    out[12] = x12 + ctr;
    out[13] = x13 + st[13];
    out[14] = x14 + st[14];
    out[15] = x15 + st[15];
}

// dst[0:64] = src[0:64] ^ ks, both at alignment al (straight-line: sixteen words).
AEAD_INLINE void xor64(uint8_t *dst, const uint8_t *src, const uint32_t *ks, int al) {
    #define X(i) put32(dst + 4 * (i), get32(src + 4 * (i), al) ^ ks[i], al)
    X(0); X(1); X(2); X(3); X(4); X(5); X(6); X(7);
    X(8); X(9); X(10); X(11); X(12); X(13); X(14); X(15);
    #undef X
}

AEAD_NOINLINE void aead_xor64_a4(uint8_t *dst, const uint8_t *src, const uint32_t *ks) {
    xor64(dst, src, ks, 4);
}

AEAD_NOINLINE void aead_xor64_a2(uint8_t *dst, const uint8_t *src, const uint32_t *ks) {
    xor64(dst, src, ks, 2);
}

AEAD_NOINLINE void aead_xor64_a1(uint8_t *dst, const uint8_t *src, const uint32_t *ks) {
    xor64(dst, src, ks, 1);
}

// dst[0:n] = src[0:n] ^ the keystream of st from block counter ctr on.
static void chacha_xor(const uint32_t *st, uint32_t ctr, const uint8_t *src, uint8_t *dst, size_t n) {
    uint32_t ks[16];
    int al = alignment((uintptr_t)src | (uintptr_t)dst);
    while (n >= 64) {
        aead_chacha_block(st, ctr, ks);
        if (al == 4) {
            aead_xor64_a4(dst, src, ks);
        } else if (al == 2) {
            aead_xor64_a2(dst, src, ks);
        } else {
            aead_xor64_a1(dst, src, ks);
        }
        ctr++;
        src += 64;
        dst += 64;
        n -= 64;
    }
    if (n) {
        aead_chacha_block(st, ctr, ks);
        for (size_t j = 0; j < n; j++) {
            dst[j] = src[j] ^ (uint8_t)(ks[j >> 2] >> (8 * (j & 3)));
        }
    }
    memset(ks, 0, sizeof(ks));
}

// --- Poly1305 (RFC 8439 section 2.5) -------------------------------------------------------------------
// The accumulator h and the clamped r in five 26-bit limbs (value = sum limb[i] * 2**(26 i)); after each
// block every h limb is below 2**26 + 2**6 and r4 < 2**20 (clamping), so a limb of h plus a message limb
// is < 2**27, h*r and h*5r products are < 2**55.4, a column of five fits 64 bits, and the carry out of
// the top column (< 2**29) times 5 fits 32 bits.

typedef struct {
    uint32_t r[5];
    uint32_t h[5];
    uint32_t pad[4];  // s, the second half of the one-time key
} aead_poly_t;

#define M26 0x3ffffffu

static void poly_init(aead_poly_t *p, const uint32_t *key) {
    uint32_t t0 = key[0] & 0x0fffffffu, t1 = key[1] & 0x0ffffffcu;
    uint32_t t2 = key[2] & 0x0ffffffcu, t3 = key[3] & 0x0ffffffcu;
    p->r[0] = t0 & M26;
    p->r[1] = ((t0 >> 26) | (t1 << 6)) & M26;
    p->r[2] = ((t1 >> 20) | (t2 << 12)) & M26;
    p->r[3] = ((t2 >> 14) | (t3 << 18)) & M26;
    p->r[4] = t3 >> 8;
    for (int i = 0; i < 5; i++) {
        p->h[i] = 0;
    }
    for (int i = 0; i < 4; i++) {
        p->pad[i] = key[4 + i];
    }
}

// A 32x32->64 product. tools/bench/bench_crypto_aead.py defines AEAD_MUL64 for its instruction count with
// the ESP32-S3's shape (MULL + MULUH; the lx106 compiler it uses has no MUL32_HIGH and would call
// __muldi3); every real build uses the C expression.
#ifndef AEAD_MUL64
#define AEAD_MUL64(a, b) ((uint64_t)(a) * (b))
#endif
#define MUL(a, b) AEAD_MUL64((uint32_t)(a), (uint32_t)(b))

// Absorb nblocks 16-byte blocks of m (alignment al), each with the 2**128 bit when hibit (1 << 24).
AEAD_INLINE void poly_blocks(aead_poly_t *p, const uint8_t *m, size_t nblocks, uint32_t hibit, int al) {
    const uint32_t r0 = p->r[0], r1 = p->r[1], r2 = p->r[2], r3 = p->r[3], r4 = p->r[4];
    const uint32_t s1 = r1 * 5, s2 = r2 * 5, s3 = r3 * 5, s4 = r4 * 5;
    uint32_t h0 = p->h[0], h1 = p->h[1], h2 = p->h[2], h3 = p->h[3], h4 = p->h[4];
    while (nblocks--) {
        uint32_t t0 = get32(m, al), t1 = get32(m + 4, al), t2 = get32(m + 8, al), t3 = get32(m + 12, al);
        h0 += t0 & M26;
        h1 += ((t0 >> 26) | (t1 << 6)) & M26;
        h2 += ((t1 >> 20) | (t2 << 12)) & M26;
        h3 += ((t2 >> 14) | (t3 << 18)) & M26;
        h4 += (t3 >> 8) | hibit;
        // h * r mod 2**130 - 5: a limb product that reaches 2**130 wraps around times 5 (the s terms)
        uint64_t d0 = MUL(h0, r0) + MUL(h1, s4) + MUL(h2, s3) + MUL(h3, s2) + MUL(h4, s1);
        uint64_t d1 = MUL(h0, r1) + MUL(h1, r0) + MUL(h2, s4) + MUL(h3, s3) + MUL(h4, s2);
        uint64_t d2 = MUL(h0, r2) + MUL(h1, r1) + MUL(h2, r0) + MUL(h3, s4) + MUL(h4, s3);
        uint64_t d3 = MUL(h0, r3) + MUL(h1, r2) + MUL(h2, r1) + MUL(h3, r0) + MUL(h4, s4);
        uint64_t d4 = MUL(h0, r4) + MUL(h1, r3) + MUL(h2, r2) + MUL(h3, r1) + MUL(h4, r0);
        uint32_t c;
        c = (uint32_t)(d0 >> 26);
        h0 = (uint32_t)d0 & M26;
        d1 += c;
        c = (uint32_t)(d1 >> 26);
        h1 = (uint32_t)d1 & M26;
        d2 += c;
        c = (uint32_t)(d2 >> 26);
        h2 = (uint32_t)d2 & M26;
        d3 += c;
        c = (uint32_t)(d3 >> 26);
        h3 = (uint32_t)d3 & M26;
        d4 += c;
        c = (uint32_t)(d4 >> 26);
        h4 = (uint32_t)d4 & M26;
        h0 += c * 5;
        c = h0 >> 26;
        h0 &= M26;
        h1 += c;
        m += 16;
    }
    p->h[0] = h0;
    p->h[1] = h1;
    p->h[2] = h2;
    p->h[3] = h3;
    p->h[4] = h4;
}

AEAD_NOINLINE void aead_poly_blocks_a4(aead_poly_t *p, const uint8_t *m, size_t nblocks, uint32_t hibit) {
    poly_blocks(p, m, nblocks, hibit, 4);
}

AEAD_NOINLINE void aead_poly_blocks_a2(aead_poly_t *p, const uint8_t *m, size_t nblocks, uint32_t hibit) {
    poly_blocks(p, m, nblocks, hibit, 2);
}

AEAD_NOINLINE void aead_poly_blocks_a1(aead_poly_t *p, const uint8_t *m, size_t nblocks, uint32_t hibit) {
    poly_blocks(p, m, nblocks, hibit, 1);
}

static void poly_full_blocks(aead_poly_t *p, const uint8_t *m, size_t nblocks) {
    int al = alignment((uintptr_t)m);
    if (al == 4) {
        aead_poly_blocks_a4(p, m, nblocks, 1u << 24);
    } else if (al == 2) {
        aead_poly_blocks_a2(p, m, nblocks, 1u << 24);
    } else {
        aead_poly_blocks_a1(p, m, nblocks, 1u << 24);
    }
}

// Absorb m[0:n]; the last partial block is padded: with zeros to 16 bytes (the AEAD's pad16, hibit set)
// when zero_pad, else RFC 8439's bare Poly1305 way (a 1 byte after the message, then zeros, no hibit).
static void poly_update(aead_poly_t *p, const uint8_t *m, size_t n, int zero_pad) {
    size_t full = n >> 4;
    if (full) {
        poly_full_blocks(p, m, full);
    }
    size_t rest = n & 15;
    if (rest) {
        uint32_t blk[4] = {0, 0, 0, 0};
        uint8_t *b = (uint8_t *)blk;
        memcpy(b, m + 16 * full, rest);
        if (!zero_pad) {
            b[rest] = 1;
        }
        aead_poly_blocks_a4(p, b, 1, zero_pad ? 1u << 24 : 0);
    }
}

// The tag: h fully reduced mod 2**130 - 5, plus s, mod 2**128, little-endian into tag[0:16].
AEAD_NOINLINE void aead_poly_finish(aead_poly_t *p, uint8_t *tag) {
    uint32_t h0 = p->h[0], h1 = p->h[1], h2 = p->h[2], h3 = p->h[3], h4 = p->h[4], c;
    // Two carry passes: afterwards h1..h4 < 2**26, and h0 < 2**26 too unless h1..h4 are all zero (then
    // h0 < 2**26 + 5, which still packs correctly below).
    for (int pass = 0; pass < 2; pass++) {
        c = h0 >> 26; h0 &= M26; h1 += c;
        c = h1 >> 26; h1 &= M26; h2 += c;
        c = h2 >> 26; h2 &= M26; h3 += c;
        c = h3 >> 26; h3 &= M26; h4 += c;
        c = h4 >> 26; h4 &= M26; h0 += c * 5;
    }
    // g = h + 5 - 2**130; if it is not negative, h >= p and the tag uses g (selected without a branch)
    uint32_t g0, g1, g2, g3, g4;
    g0 = h0 + 5; c = g0 >> 26; g0 &= M26;
    g1 = h1 + c; c = g1 >> 26; g1 &= M26;
    g2 = h2 + c; c = g2 >> 26; g2 &= M26;
    g3 = h3 + c; c = g3 >> 26; g3 &= M26;
    g4 = h4 + c - (1u << 26);
    uint32_t use_g = (g4 >> 31) - 1;  // all ones when g4 >= 0
    h0 = (h0 & ~use_g) | (g0 & use_g);
    h1 = (h1 & ~use_g) | (g1 & use_g);
    h2 = (h2 & ~use_g) | (g2 & use_g);
    h3 = (h3 & ~use_g) | (g3 & use_g);
    h4 = (h4 & ~use_g) | (g4 & use_g);
    // pack the low 128 bits, add s with carries
    uint32_t w0 = h0 | (h1 << 26);
    uint32_t w1 = (h1 >> 6) | (h2 << 20);
    uint32_t w2 = (h2 >> 12) | (h3 << 14);
    uint32_t w3 = (h3 >> 18) | (h4 << 8);
    uint64_t f;
    f = (uint64_t)w0 + p->pad[0];
    put32(tag, (uint32_t)f, 1);
    f = (uint64_t)w1 + p->pad[1] + (f >> 32);
    put32(tag + 4, (uint32_t)f, 1);
    f = (uint64_t)w2 + p->pad[2] + (f >> 32);
    put32(tag + 8, (uint32_t)f, 1);
    f = (uint64_t)w3 + p->pad[3] + (f >> 32);
    put32(tag + 12, (uint32_t)f, 1);
}

// --- the AEAD (RFC 8439 section 2.8) -------------------------------------------------------------------

// 0 when a[0:16] == b[0:16], else 1; the time does not depend on where they differ.
static int diff16(const uint8_t *a, const uint8_t *b) {
    uint32_t d = 0;
    for (int i = 0; i < 16; i++) {
        d |= (uint32_t)(a[i] ^ b[i]);
    }
    return (int)((d + 0xffu) >> 8);  // d <= 0xff: 1 exactly when d != 0
}

static void poly_lengths(aead_poly_t *p, size_t adl, size_t n) {
    uint32_t blk[4] = {(uint32_t)adl, 0, (uint32_t)n, 0};  // 64-bit little-endian lengths (< 2**32 here)
    uint8_t b[16];
    for (int i = 0; i < 4; i++) {
        put32(b + 4 * i, blk[i], 1);
    }
    aead_poly_blocks_a1(p, b, 1, 1u << 24);
}

// The whole operation once the arguments are checked. ctx is 4-aligned, CTX_WORDS words.
int aead_core(uint32_t *ctx, const uint8_t *ad, size_t adl, const uint8_t *src, uint8_t *dst, size_t n,
              int mode) {
    if (mode == MODE_XOR) {
        chacha_xor(ctx, ctx[12], src, dst, n);
        return 0;
    }
    aead_poly_t p;
    uint8_t tag[16];
    int bad = 0;
    if (mode != MODE_POLY) {
        uint32_t ks[16];
        aead_chacha_block(ctx, 0, ks);  // the one-time key: the first 32 bytes of block 0
        for (int i = 0; i < 8; i++) {
            ctx[16 + i] = ks[i];
        }
        memset(ks, 0, sizeof(ks));
    }
    poly_init(&p, ctx + 16);
    if (mode == MODE_POLY) {
        poly_update(&p, src, n, 0);
        aead_poly_finish(&p, dst);
        memset(&p, 0, sizeof(p));
        return 0;
    }
    poly_update(&p, ad, adl, 1);
    if (mode == MODE_SEAL) {
        chacha_xor(ctx, 1, src, dst, n);
        poly_update(&p, dst, n, 1);
        poly_lengths(&p, adl, n);
        aead_poly_finish(&p, dst + n);
    } else {
        poly_update(&p, src, n, 1);
        poly_lengths(&p, adl, n);
        aead_poly_finish(&p, tag);
        bad = diff16(tag, src + n);
        if (!bad) {
            chacha_xor(ctx, 1, src, dst, n);
        }
        memset(tag, 0, sizeof(tag));
    }
    memset(&p, 0, sizeof(p));
    return bad;
}

#ifndef AEAD_CORE_ONLY

// --- the MicroPython binding ---------------------------------------------------------------------------

static mp_int_t nonneg(mp_obj_t o, const char *what) {
    mp_int_t v = mp_obj_get_int(o);
    if (v < 0) {
        mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_aead_c.run: %s %d is negative"), what, (int)v);
    }
    return v;
}

static void need(size_t have, size_t want, const char *what) {
    if (have < want) {
        mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_aead_c.run: %s holds %u bytes, needs %u"),
            what, (unsigned)have, (unsigned)want);
    }
}

// run(T, Q, ctx, ad, adl, src, dst, n, mode): see the top of this file.
static mp_obj_t aead_run(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mp_int_t mode = mp_obj_get_int(args[8]);
    if (mode < 0 || mode > (MODE_POLY | MODE_NONCE_IN_Q)) {
        mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("_aead_c.run: unknown mode %d"), (int)mode);
    }
    mp_buffer_info_t ctx, ad, src, dst;
    mp_get_buffer_raise(args[2], &ctx, MP_BUFFER_RW);
    mp_get_buffer_raise(args[3], &ad, MP_BUFFER_READ);
    mp_get_buffer_raise(args[5], &src, MP_BUFFER_READ);
    mp_get_buffer_raise(args[6], &dst, MP_BUFFER_RW);
    need(ctx.len, CTX_WORDS * 4, "ctx");
    if (((uintptr_t)ctx.buf & 3) != 0) {
        mp_raise_ValueError(MP_ERROR_TEXT("_aead_c.run: ctx must be 4-aligned (an array 'I')"));
    }
    size_t adl = (size_t)nonneg(args[4], "adl");
    size_t n = (size_t)nonneg(args[7], "n");
    need(ad.len, adl, "ad");
    int op = (int)(mode & 3);
    need(src.len, n + (op == MODE_OPEN ? TAG_LEN : 0), "src");
    need(dst.len, op == MODE_POLY ? TAG_LEN : n + (op == MODE_SEAL ? TAG_LEN : 0), "dst");
    // in place (dst == src) is fine; a dst that starts inside src or ends inside it is not
    const uint8_t *s = src.buf;
    uint8_t *d = dst.buf;
    size_t dl = op == MODE_POLY ? TAG_LEN : n;
    if (d != s && n && dl && d < s + n && s < d + dl) {
        mp_raise_ValueError(MP_ERROR_TEXT("_aead_c.run: dst overlaps src without being src"));
    }
    uint32_t *c = ctx.buf;
    if (mode & MODE_NONCE_IN_Q) {
        mp_int_t q = nonneg(args[1], "Q");
        if ((uint64_t)q > 0xffffffffu) {  // a 64-bit port: the nonce word is 32 bits
            mp_raise_ValueError(MP_ERROR_TEXT("_aead_c.run: Q is above 2**32-1"));
        }
        c[13] = 0;
        c[14] = (uint32_t)q;
        c[15] = 0;
    }
    return MP_OBJ_NEW_SMALL_INT(aead_core(c, ad.buf, adl, s, d, n, op));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(aead_run_obj, 9, 9, aead_run);

static const mp_rom_map_elem_t aead_module_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR__aead_c) },
    { MP_ROM_QSTR(MP_QSTR_run), MP_ROM_PTR(&aead_run_obj) },
    { MP_ROM_QSTR(MP_QSTR_CTX_WORDS), MP_ROM_INT(CTX_WORDS) },
    { MP_ROM_QSTR(MP_QSTR_XOR), MP_ROM_INT(MODE_XOR) },
    { MP_ROM_QSTR(MP_QSTR_SEAL), MP_ROM_INT(MODE_SEAL) },
    { MP_ROM_QSTR(MP_QSTR_OPEN), MP_ROM_INT(MODE_OPEN) },
    { MP_ROM_QSTR(MP_QSTR_POLY), MP_ROM_INT(MODE_POLY) },
    { MP_ROM_QSTR(MP_QSTR_NONCE_IN_Q), MP_ROM_INT(MODE_NONCE_IN_Q) },
};
static MP_DEFINE_CONST_DICT(aead_module_globals, aead_module_globals_table);

const mp_obj_module_t aead_c_user_cmodule = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&aead_module_globals,
};

MP_REGISTER_MODULE(MP_QSTR__aead_c, aead_c_user_cmodule);

#endif  // AEAD_CORE_ONLY
