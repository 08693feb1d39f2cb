# Reed-Solomon over GF(256) as ggwave uses it (poly 0x11d, generator roots 2^0..2^(E-1), message
# then parity); corrects errors in place or says it cannot. Knows nothing of audio; never guesses.
from micropython import const

MAX_CODEWORD = const(255)   # a GF(256) code is at most 255 symbols long
MAX_ECC = const(64)         # ggwave's longest payload (140 bytes) needs 56 parity bytes

# exp table doubled so exp[log a + log b] needs no reduction; module tables, built once
_EXP = bytearray(512)
_LOG = bytearray(256)


def _tables():
    x = 1
    for i in range(255):
        _EXP[i] = x
        _LOG[x] = i
        x <<= 1
        if x & 0x100:
            x ^= 0x11d
    for i in range(255, 512):
        _EXP[i] = _EXP[i - 255]


_tables()


def gf_mul(a, b):
    if a == 0 or b == 0:
        return 0
    return _EXP[_LOG[a] + _LOG[b]]


def gf_inv(a):
    return _EXP[255 - _LOG[a]]


def gf_pow2(e):
    """2**e in GF(256) for any integer e (negative allowed)."""
    return _EXP[e % 255]


def ecc_len(n):
    """Parity bytes ggwave adds to an n-byte message."""
    if n < 4:
        return 2
    e = 2 * (n // 5)
    return e if e > 4 else 4


class RSError(Exception):
    code = "rs_bad_size"


class RS:
    """Encoder/decoder with preallocated work buffers (no allocation per call)."""

    def __init__(self, max_ecc=MAX_ECC):
        if max_ecc < 1 or max_ecc > MAX_ECC:
            raise RSError("max_ecc must be 1..%d" % MAX_ECC)
        self.max_ecc = max_ecc
        m = max_ecc + 2
        self._gen = bytearray(m)
        self._gen_e = -1
        self._syn = bytearray(m)
        self._lam = bytearray(m)
        self._b = bytearray(m)
        self._t = bytearray(m)
        self._om = bytearray(m)
        self._pos = bytearray(m)

    def _check(self, n, ecc, have):
        if ecc < 1 or ecc > self.max_ecc or n < 1 or n + ecc > MAX_CODEWORD or n + ecc > have:
            raise RSError("bad RS size n=%d ecc=%d" % (n, ecc))

    def _generator(self, ecc):
        if self._gen_e == ecc:
            return
        g = self._gen
        g[0] = 1
        d = 0                       # g holds descending coefficients g[0..d]
        for i in range(ecc):
            a = _EXP[i]
            g[d + 1] = gf_mul(g[d], a)
            for j in range(d, 0, -1):
                g[j] ^= gf_mul(g[j - 1], a)
            d += 1
        self._gen_e = ecc

    def encode(self, buf, off, n, ecc):
        """buf[off:off+n] is the message; writes the ecc parity bytes after it."""
        self._check(n, ecc, len(buf) - off)
        self._generator(ecc)
        g = self._gen
        p = off + n
        for j in range(ecc):
            buf[p + j] = 0
        for i in range(n):
            fb = buf[off + i] ^ buf[p]
            for j in range(ecc - 1):
                buf[p + j] = buf[p + j + 1] ^ gf_mul(fb, g[j + 1])
            buf[p + ecc - 1] = gf_mul(fb, g[ecc])

    def _syndromes(self, buf, off, L, ecc):
        s = self._syn
        nz = 0
        for j in range(ecc):
            x = _EXP[j]
            lx = _LOG[x]
            v = 0
            for i in range(L):
                if v:
                    v = _EXP[_LOG[v] + lx]
                v ^= buf[off + i]
            s[j] = v
            nz |= v
        return nz

    def decode(self, buf, off, n, ecc):
        """Correct buf[off:off+n+ecc] in place; return the number of corrected bytes, or -1 when
        the word is not within the code's reach (then buf is left unchanged)."""
        self._check(n, ecc, len(buf) - off)
        L = n + ecc
        if not self._syndromes(buf, off, L, ecc):
            return 0
        s = self._syn
        lam = self._lam
        b = self._b
        t = self._t
        m = ecc + 1
        for i in range(m):
            lam[i] = 0
            b[i] = 0
        lam[0] = 1
        b[0] = 1
        deg = 0
        shift = 1
        bd = 1
        for r in range(ecc):                      # Berlekamp-Massey
            d = s[r]
            for i in range(1, deg + 1):
                d ^= gf_mul(lam[i], s[r - i])
            if d == 0:
                shift += 1
                continue
            coef = gf_mul(d, gf_inv(bd))
            if 2 * deg <= r:
                for i in range(m):
                    t[i] = lam[i]
                for i in range(shift, m):
                    lam[i] ^= gf_mul(coef, b[i - shift])
                deg = r + 1 - deg
                for i in range(m):
                    b[i] = t[i]
                bd = d
                shift = 1
            else:
                for i in range(shift, m):
                    lam[i] ^= gf_mul(coef, b[i - shift])
                shift += 1
        if deg == 0 or 2 * deg > ecc:
            return -1
        for i in range(deg + 1, m):
            if lam[i]:
                return -1
        pos = self._pos
        nf = 0
        for i in range(L):                       # Chien search over the word's own positions
            inv = _EXP[(255 - (L - 1 - i) % 255) % 255]
            v = 0
            li = _LOG[inv]
            for j in range(deg, -1, -1):
                if v:
                    v = _EXP[_LOG[v] + li]
                v ^= lam[j]
            if v == 0:
                if nf >= deg:
                    return -1
                pos[nf] = i
                nf += 1
        if nf != deg:
            return -1
        om = self._om                            # Omega = S * Lambda mod x^ecc
        for i in range(ecc):
            v = 0
            for j in range(0, min(i, deg) + 1):
                v ^= gf_mul(s[i - j], lam[j])
            om[i] = v
        for q in range(nf):                      # Forney (first root 2^0): e = X*Om(1/X)/Lam'(1/X)
            i = pos[q]
            p = L - 1 - i
            X = _EXP[p % 255]
            xinv = gf_inv(X)
            num = 0
            for j in range(ecc - 1, -1, -1):
                num = gf_mul(num, xinv) ^ om[j]
            den = 0
            for j in range(deg, 0, -1):          # Lambda'(1/X) = sum over odd j of lam[j]/X^(j-1)
                den = gf_mul(den, xinv) ^ (lam[j] if j & 1 else 0)
            if den == 0:
                return -1
            e = gf_mul(gf_mul(X, num), gf_inv(den))
            t[q] = e
        for q in range(nf):
            buf[off + pos[q]] ^= t[q]
        if self._syndromes(buf, off, L, ecc):
            for q in range(nf):                  # not a codeword after all: undo, refuse
                buf[off + pos[q]] ^= t[q]
            return -1
        return nf
