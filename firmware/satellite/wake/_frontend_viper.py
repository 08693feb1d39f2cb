# The wake-word frontend's stages in viper (the hot path on the board); same functions, buffers and
# contract as the pure ones in frontend.py, which document the arithmetic (tests compare the two, and
# both against pymicro-features). No allocation, no state of its own. Every intermediate stays below
# 2**31 (and non-negative outside the FFT's int16 values), so the code is right with viper's 32-bit int
# on the board and its 64-bit int on the unix port; int16 wrapping is the ptr16 store (low 16 bits) or
# an explicit sign fold, never a 32-bit overflow. The constant tables are bytes (in flash when frozen):
# read byte-wise, as a bytes object may sit at any alignment and xtensa faults on unaligned loads; the
# state buffers are the Frontend's own arrays (heap, aligned).
import micropython

from ._frontend_tables import NR_EVEN, NR_ODD, NR_MIN_REMAINING, PCAN_SNR_SHIFT, LOG_CORRECTION_BITS, \
    LOG_SCALE_SHIFT


@micropython.viper
def push(hist: ptr16, used: int, src: ptr8, pos: int):
    i = 0
    while i < 160:
        p = pos + 2 * i
        hist[used + i] = src[p] | (src[p + 1] << 8)
        i += 1


@micropython.viper
def window(hist: ptr16, coef: ptr16, x: ptr16) -> int:
    mx = 0
    i = 0
    while i < 480:
        s = (hist[i] ^ 0x8000) - 0x8000
        v = (s * coef[i]) >> 12                   # coefficients are 0..4096: no sign to extend
        x[i] = v
        if v < 0:
            v = -v
        if v > mx and v < 32768:
            mx = v
        i += 1
    i = 0
    while i < 320:
        hist[i] = hist[i + 160]
        i += 1
    return mx


@micropython.viper
def fft(x: ptr16, shift: int, c: ptr16, tw: ptr16):
    i = 0
    while i < 256:
        j = ((i & 3) << 6) | ((i & 12) << 2) | ((i >> 2) & 12) | (i >> 6)
        c[2 * i] = x[2 * j] << shift
        c[2 * i + 1] = x[2 * j + 1] << shift
        i += 1
    # The butterflies: only the loads (which feed products) are sign-extended; after the twiddle
    # products every value only flows through + and - into a 16-bit store, and wrapping is a ring
    # homomorphism, so the store's truncation equals kiss_fft's int16 wrap at every step.
    m2 = 2
    fs = 128                      # 2 * the twiddle stride: tw holds (r, i) pairs
    while m2 < 512:
        base = 0
        while base < 512:
            # k = 0: the twiddles are (32767, 0), and kiss_fft's product by it returns a part of
            # |x| <= 8191 (after C_FIXDIV by 4) unchanged: (x * 32767 + 16384) >> 15 == x. So no products.
            i0 = base
            i1 = i0 + m2
            i2 = i1 + m2
            i3 = i2 + m2
            a0r = (((c[i0] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
            a0i = (((c[i0 + 1] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
            s0r = (((c[i1] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
            s0i = (((c[i1 + 1] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
            s1r = (((c[i2] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
            s1i = (((c[i2 + 1] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
            s2r = (((c[i3] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
            s2i = (((c[i3 + 1] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
            s5r = a0r - s1r
            s5i = a0i - s1i
            a0r += s1r
            a0i += s1i
            s3r = s0r + s2r
            s3i = s0i + s2i
            s4r = s0r - s2r
            s4i = s0i - s2i
            c[i2] = a0r - s3r
            c[i2 + 1] = a0i - s3i
            c[i0] = a0r + s3r
            c[i0 + 1] = a0i + s3i
            c[i1] = s5r + s4i
            c[i1 + 1] = s5i - s4r
            c[i3] = s5r - s4i
            c[i3 + 1] = s5i + s4r
            i0 = base + 2
            end = base + m2
            t = fs
            while i0 < end:
                i1 = i0 + m2
                i2 = i1 + m2
                i3 = i2 + m2
                a0r = (((c[i0] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
                a0i = (((c[i0 + 1] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
                a1r = (((c[i1] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
                a1i = (((c[i1 + 1] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
                a2r = (((c[i2] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
                a2i = (((c[i2 + 1] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
                a3r = (((c[i3] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
                a3i = (((c[i3 + 1] ^ 0x8000) - 0x8000) * 8191 + 16384) >> 15
                wr = (tw[t] ^ 0x8000) - 0x8000
                wi = (tw[t + 1] ^ 0x8000) - 0x8000
                s0r = (a1r * wr - a1i * wi + 16384) >> 15
                s0i = (a1r * wi + a1i * wr + 16384) >> 15
                wr = (tw[2 * t] ^ 0x8000) - 0x8000
                wi = (tw[2 * t + 1] ^ 0x8000) - 0x8000
                s1r = (a2r * wr - a2i * wi + 16384) >> 15
                s1i = (a2r * wi + a2i * wr + 16384) >> 15
                wr = (tw[3 * t] ^ 0x8000) - 0x8000
                wi = (tw[3 * t + 1] ^ 0x8000) - 0x8000
                s2r = (a3r * wr - a3i * wi + 16384) >> 15
                s2i = (a3r * wi + a3i * wr + 16384) >> 15
                s5r = a0r - s1r
                s5i = a0i - s1i
                a0r += s1r
                a0i += s1i
                s3r = s0r + s2r
                s3i = s0i + s2i
                s4r = s0r - s2r
                s4i = s0i - s2i
                c[i2] = a0r - s3r
                c[i2 + 1] = a0i - s3i
                c[i0] = a0r + s3r
                c[i0 + 1] = a0i + s3i
                c[i1] = s5r + s4i
                c[i1 + 1] = s5i - s4r
                c[i3] = s5r - s4i
                c[i3 + 1] = s5i + s4r
                i0 += 2
                t += fs
            base += 4 * m2
        m2 *= 4
        fs >>= 2


@micropython.viper
def energy(c: ptr16, stw: ptr16, e: ptr32):
    k = 1
    while k <= 128:
        n = 2 * (256 - k)
        pr = (((c[2 * k] ^ 0x8000) - 0x8000) * 16383 + 16384) >> 15
        pi = (((c[2 * k + 1] ^ 0x8000) - 0x8000) * 16383 + 16384) >> 15
        nr = (((c[n] ^ 0x8000) - 0x8000) * 16383 + 16384) >> 15
        ni = ((((0x8000 - ((c[n + 1] ^ 0x8000) - 0x8000)) & 0xFFFF) - 0x8000) * 16383 + 16384) >> 15
        f1r = ((pr + nr + 0x8000) & 0xFFFF) - 0x8000
        f1i = ((pi + ni + 0x8000) & 0xFFFF) - 0x8000
        f2r = ((pr - nr + 0x8000) & 0xFFFF) - 0x8000
        f2i = ((pi - ni + 0x8000) & 0xFFFF) - 0x8000
        wr = (stw[2 * k - 2] ^ 0x8000) - 0x8000
        wi = (stw[2 * k - 1] ^ 0x8000) - 0x8000
        twr = ((((f2r * wr - f2i * wi + 16384) >> 15) + 0x8000) & 0xFFFF) - 0x8000
        twi = ((((f2r * wi + f2i * wr + 16384) >> 15) + 0x8000) & 0xFFFF) - 0x8000
        r = (f1r + twr) >> 1
        i = (f1i + twi) >> 1
        e[k] = r * r + i * i
        r = (f1r - twr) >> 1
        i = (twi - f1i) >> 1
        e[256 - k] = r * r + i * i
        k += 1


@micropython.viper
def filterbank(e: ptr32, w: ptr16, uw: ptr16, edges: ptr8, sig: ptr32, shift: int):
    bs = edges[0] | (edges[1] << 8)
    j = 0
    while j < 40:
        hi = 0
        lo = 0
        b = edges[2 * j] | (edges[2 * j + 1] << 8)
        mid = edges[2 * j + 2] | (edges[2 * j + 3] << 8)
        end = edges[2 * j + 4] | (edges[2 * j + 5] << 8)
        while b < mid:
            q = e[b]
            wt = uw[b - bs]                       # weights are 0..4096: no sign to extend
            lo += wt * (q & 0xFFFF)
            hi += wt * (q >> 16)
            b += 1
        hi += lo >> 16
        lo &= 0xFFFF
        while b < end:
            q = e[b]
            wt = w[b - bs]
            lo += wt * (q & 0xFFFF)
            hi += wt * (q >> 16)
            b += 1
        hi += lo >> 16
        lo &= 0xFFFF
        # the root by bit pairs (acc < 2**47: 16 pairs in hi, 8 in lo), from the top pair that holds a bit
        r = 0
        rem = 0
        if hi:
            u = hi
        else:
            u = lo
        n = 0                                        # the even n with u >> n in 1..3 (u > 0)
        if u >= 65536:
            n += 16
            u >>= 16
        if u >= 256:
            n += 8
            u >>= 8
        if u >= 16:
            n += 4
            u >>= 4
        if u >= 4:
            n += 2
        if hi:
            sh = n
            while sh >= 0:
                rem = (rem << 2) | ((hi >> sh) & 3)
                t = (r << 2) | 1
                r <<= 1
                if rem >= t:
                    rem -= t
                    r |= 1
                sh -= 2
            sh = 14
        elif lo:
            sh = n
        else:
            sh = -2
        while sh >= 0:
            rem = (rem << 2) | ((lo >> sh) & 3)
            t = (r << 2) | 1
            r <<= 1
            if rem >= t:
                rem -= t
                r |= 1
            sh -= 2
        if rem > r and (hi >= 65536 or r != 0xFFFF):
            r += 1
        sig[j] = r >> shift
        j += 1


@micropython.viper
def post(sig: ptr32, est: ptr16, gain: ptr8, log: ptr8, out: ptr16):
    even = int(NR_EVEN)
    odd = int(NR_ODD)
    minrem = int(NR_MIN_REMAINING)
    snrsh = int(PCAN_SNR_SHIFT)
    corr = int(LOG_CORRECTION_BITS)
    scale = int(LOG_SCALE_SHIFT)
    j = 0
    while j < 40:
        s = sig[j]
        sm = odd
        if (j & 1) == 0:
            sm = even
        osm = 16384 - sm
        uh = (s >> 6) & 0xFFFF
        ul = (s & 63) << 10
        eh = est[2 * j]
        el = est[2 * j + 1]
        a = ul * sm + el * osm
        b = uh * sm + eh * osm
        t = ((b & 0x3FFF) << 2) + (a >> 14)
        el = t & 0xFFFF
        eh = ((b >> 14) + (t >> 16)) & 0xFFFF
        est[2 * j] = eh
        est[2 * j + 1] = el
        ch = eh                                      # the estimate, clamped to the signal
        cl = el
        if eh > uh or (eh == uh and el > ul):
            ch = uh
            cl = ul
        dl = ul - cl
        dh = uh - ch
        if dl < 0:
            dl += 65536
            dh -= 1
        sub = (dh << 6) + (dl >> 10)
        fl = (s >> 14) * minrem + (((s & 0x3FFF) * minrem) >> 14)
        if sub > fl:
            s = sub
        else:
            s = fl
        n = 0
        v = el
        if eh:
            n = 16
            v = eh
        if v >= 256:
            n += 8
            v >>= 8
        if v >= 16:
            n += 4
            v >>= 4
        if v >= 4:
            n += 2
            v >>= 2
        if v >= 2:
            n += 1
            v >>= 1
        n += v
        if eh == 0 and el <= 2:
            g = ((gain[2 * el] | (gain[2 * el + 1] << 8)) ^ 0x8000) - 0x8000
        else:
            if n < 11:
                f = (el << (11 - n)) & 0x3FF
            else:
                sh = n - 11
                if sh >= 16:
                    f = (eh >> (sh - 16)) & 0x3FF
                else:
                    f = (((eh & 0x3FF) << (16 - sh)) | (el >> sh)) & 0x3FF
            q = 8 * n - 12
            g = ((((gain[q + 4] | (gain[q + 5] << 8)) ^ 0x8000) - 0x8000) * f) >> 5
            g += (((gain[q + 2] | (gain[q + 3] << 8)) ^ 0x8000) - 0x8000) << 5
            g *= f
            g = ((g + 16384) >> 15) + (((gain[q] | (gain[q + 1] << 8)) ^ 0x8000) - 0x8000)
        snr = (s >> snrsh) * g + (((s & ((1 << snrsh) - 1)) * g) >> snrsh)
        if snr < 8192:
            s = (snr * snr) >> 20
        else:
            s = (snr >> 6) - 64
        v = s << corr
        if v > 1:
            n = 0
            u = v
            if u >= 65536:
                n += 16
                u >>= 16
            if u >= 256:
                n += 8
                u >>= 8
            if u >= 16:
                n += 4
                u >>= 4
            if u >= 4:
                n += 2
                u >>= 2
            if u >= 2:
                n += 1
            f = v - (1 << n)
            if n < 16:
                f <<= 16 - n
            else:
                f >>= n - 16
            seg = f >> 9
            c0 = log[2 * seg] | (log[2 * seg + 1] << 8)
            c1 = log[2 * seg + 2] | (log[2 * seg + 3] << 8)
            f = f + c0 + (((c1 - c0) * (f - (seg << 9))) >> 16)
            l2 = (n << 16) + f
            v = 45426 * (l2 >> 16) + (((l2 & 0xFFFF) * 22713 + 16384) >> 15)
            v = ((v << scale) + 32768) >> 16
            if v > 0xFFFF:
                v = 0xFFFF
        else:
            v = 0
        out[j] = v
        j += 1
