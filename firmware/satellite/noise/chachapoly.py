# ChaCha20-Poly1305 AEAD (RFC 8439) for the Noise transport; owns its scratch buffers, does no I/O.
# Picks the C module _aead_c (firmware/native/aead.c, built into the board image and the 32-bit test
# interpreter) when the interpreter has it, else the viper fast path (_chacha_viper), else the pure twins
# (_chacha_pure/_poly1305_pure). "c" and "viper" take the same run() call: the whole message in ONE
# native call. It must not allocate in encrypt_into/decrypt_into (c and viper paths, n < 2**30).
import array

from micropython import const

# The pure twins are imported only when chosen (_modules): with the viper path they would cost ~3 KB of
# heap for nothing (docs/memory.md).
# Width check: viper ints are as wide as the port's machine word, so sys.maxsize (2**31-1 on the board
# and the 32-bit build) says which twin is right: _chacha32_viper rotates without masks (32-bit only).
try:
    import sys
    if sys.maxsize < (1 << 32):
        from satellite.noise import _chacha32_viper as _chacha_viper
    else:
        from satellite.noise import _chacha_viper
    IMPLS = ("viper", "pure")
except (ImportError, SyntaxError, NameError, NotImplementedError, MemoryError):
    # CPython, a MicroPython without the native emitter, or (MemoryError) no room for its native code on a board
    _chacha_viper = None
    IMPLS = ("pure",)
# The C module: a built-in (no heap for its code); it checks every length itself as well.
try:
    import _aead_c
    IMPLS = ("c",) + IMPLS
except ImportError:
    _aead_c = None

_KEY_LEN = const(32)
_TAG_LEN = const(16)
_NONCE_LEN = const(12)
# A Noise transport message is at most 65535 bytes including the 16-byte tag (Noise §3).
_MAX_MESSAGE = const(65535)
_MAX_PLAINTEXT = const(65519)
# Associated data is the 32-byte handshake hash (or empty) in Noise; anything up to a message is allowed.
_MAX_AD = const(65535)
# Largest Noise nonce that keeps the fast path allocation-free on a 31-bit-small-int board.
_SMALL_N = const(0x3FFFFFFF)
_SIGMA = b"expand 32-byte k"
# _chacha_viper.run modes and context size (the same constants as in that module).
_XOR = const(0)
_SEAL = const(1)
_OPEN = const(2)
_POLY = const(3)
_NONCE_IN_Q = const(4)
_CTX_WORDS = const(48)


class AuthError(ValueError):
    """The tag did not match: the message was forged, corrupted, or decrypted with the wrong key/nonce."""
    code = "AUTH_FAILED"


class LimitError(ValueError):
    """A length, nonce or block counter is outside what the cipher accepts."""
    code = "CRYPTO_LIMIT"


class BadKeyError(ValueError):
    """The cipher was used before set_key (or given a key of the wrong size)."""
    code = "BAD_KEY"


def _modules(impl):
    """(impl, c or viper run function or None, pure ChaCha module, pure Poly1305 module)."""
    if impl is None:
        impl = IMPLS[0]
    if impl == "c" and _aead_c is not None:
        return impl, _aead_c.run, None, None
    if impl == "viper" and _chacha_viper is not None:
        return impl, _chacha_viper.run, None, None
    if impl == "pure":
        from satellite.noise import _chacha_pure, _poly1305_pure
        return impl, None, _chacha_pure, _poly1305_pure
    raise LimitError("unknown or unavailable ChaChaPoly impl %r (available: %r)" % (impl, IMPLS))


def _load_words(st, first, buf, count):
    """st[first:first+count] = little-endian 32-bit words of buf[0:4*count] (not a hot path)."""
    for i in range(count):
        j = 4 * i
        st[first + i] = buf[j] | (buf[j + 1] << 8) | (buf[j + 2] << 16) | (buf[j + 3] << 24)


class ChaChaPoly:
    """One AEAD key with every scratch buffer preallocated; Noise nonces (64-bit counters)."""

    def __init__(self, impl=None):
        self.impl, self._v, self._c, self._p = _modules(impl)
        # ChaCha state words (viper: the whole context of _chacha_viper.run)
        self._st = array.array("I", [0] * (_CTX_WORDS if self._v else 16))
        self._fast = None  # the viper run function once keyed (one test on the hot path)
        if self._c is not None:
            self._ks = bytearray(64)  # keystream block / Poly1305 one-time key
            self._acc = self._p.new_acc()  # Poly1305 accumulators
            self._tag = bytearray(_TAG_LEN)  # computed tag on decrypt
        self._nonce = bytearray(_NONCE_LEN)  # raw 12-byte nonce (vector API)
        self._keyed = False
        _load_words(self._st, 0, _SIGMA, 4)

    def set_key(self, key):
        if len(key) != _KEY_LEN:
            raise BadKeyError("ChaChaPoly key must be %d bytes, got %d" % (_KEY_LEN, len(key)))
        _load_words(self._st, 4, key, 8)
        self._keyed = True
        self._fast = self._v

    def _set_n(self, n):
        """Nonce words for Noise counter n: 32 zero bits then n as 64-bit little-endian."""
        st = self._st
        st[13] = 0
        if 0 <= n <= _SMALL_N:
            st[14] = n
            st[15] = 0
        elif 0 <= n <= 0xFFFFFFFFFFFFFFFF:
            st[14] = n & 0xFFFFFFFF
            st[15] = n >> 32
        else:
            raise LimitError("Noise nonce %r is outside 0..2**64-1" % (n,))

    def _set_nonce12(self, nonce):
        if len(nonce) != _NONCE_LEN:
            raise LimitError("ChaCha20 nonce must be %d bytes, got %d" % (_NONCE_LEN, len(nonce)))
        self._nonce[0:_NONCE_LEN] = nonce
        _load_words(self._st, 13, self._nonce, 3)

    def _seal(self, ad, src, src_len, dst):
        if not self._keyed:
            raise BadKeyError("ChaChaPoly used before set_key")
        if src_len < 0 or src_len > _MAX_PLAINTEXT or src_len > len(src):
            raise LimitError("plaintext length %d outside 0..%d or beyond src" % (src_len, _MAX_PLAINTEXT))
        if len(dst) < src_len + _TAG_LEN:
            raise LimitError("dst holds %d bytes, needs %d" % (len(dst), src_len + _TAG_LEN))
        adl = len(ad)
        if adl > _MAX_AD:
            raise LimitError("associated data of %d bytes exceeds %d" % (adl, _MAX_AD))
        st = self._st
        if self._v is not None:
            self._v(0, 0, st, ad, adl, src, dst, src_len, _SEAL)
            return src_len + _TAG_LEN
        c = self._c
        p = self._p
        ks = self._ks
        acc = self._acc
        st[12] = 0
        c.block(st, ks)
        p.init(acc, ks)
        if adl:
            p.update(acc, ad, 0, adl, 1)
        if src_len:
            st[12] = 1
            c.xor(st, ks, src, dst, src_len)
            p.update(acc, dst, 0, src_len, 1)
        p.finish(acc, adl, src_len, dst, src_len)
        return src_len + _TAG_LEN

    def _open(self, ad, src, src_len, dst):
        if not self._keyed:
            raise BadKeyError("ChaChaPoly used before set_key")
        if src_len < _TAG_LEN or src_len > _MAX_MESSAGE or src_len > len(src):
            raise LimitError("message length %d outside %d..%d or beyond src" % (src_len, _TAG_LEN, _MAX_MESSAGE))
        ct_len = src_len - _TAG_LEN
        if len(dst) < ct_len:
            raise LimitError("dst holds %d bytes, needs %d" % (len(dst), ct_len))
        adl = len(ad)
        if adl > _MAX_AD:
            raise LimitError("associated data of %d bytes exceeds %d" % (adl, _MAX_AD))
        st = self._st
        if self._v is not None:
            if self._v(0, 0, st, ad, adl, src, dst, ct_len, _OPEN):
                raise AuthError("ChaChaPoly tag mismatch: message forged or corrupted, or wrong key/nonce")
            return ct_len
        c = self._c
        p = self._p
        ks = self._ks
        acc = self._acc
        tag = self._tag
        st[12] = 0
        c.block(st, ks)
        p.init(acc, ks)
        if adl:
            p.update(acc, ad, 0, adl, 1)
        if ct_len:
            p.update(acc, src, 0, ct_len, 1)
        p.finish(acc, adl, ct_len, tag, 0)
        if p.diff16(tag, src, ct_len):
            raise AuthError("ChaChaPoly tag mismatch: message forged or corrupted, or wrong key/nonce")
        if ct_len:
            st[12] = 1
            c.xor(st, ks, src, dst, ct_len)
        return ct_len

    def encrypt_into(self, n, ad, src, src_len, dst):
        """Seal src[0:src_len] under Noise nonce n: ciphertext to dst[0:src_len], tag to
        dst[src_len:src_len+16]; dst may be src. Returns src_len + 16."""
        run = self._fast
        # The hot path: one test for the impl/key, the length checks, then ONE native call for the
        # whole message (it also writes the nonce words); anything unusual takes the checked path.
        if run is not None and 0 <= n <= _SMALL_N and 0 <= src_len <= _MAX_PLAINTEXT \
                and src_len <= len(src) and src_len + _TAG_LEN <= len(dst):
            adl = len(ad)
            if adl <= _MAX_AD:
                run(0, n, self._st, ad, adl, src, dst, src_len, _SEAL | _NONCE_IN_Q)
                return src_len + _TAG_LEN
        self._set_n(n)
        return self._seal(ad, src, src_len, dst)  # pure path, or raises the precise error

    def decrypt_into(self, n, ad, src, src_len, dst):
        """Open src[0:src_len] (ciphertext || tag) under Noise nonce n into dst[0:src_len-16];
        dst may be src. Returns src_len - 16; raises AuthError (dst untouched) on a bad tag."""
        run = self._fast
        ct_len = src_len - _TAG_LEN
        if run is not None and 0 <= n <= _SMALL_N and 0 <= ct_len and src_len <= _MAX_MESSAGE \
                and src_len <= len(src) and ct_len <= len(dst):
            adl = len(ad)
            if adl <= _MAX_AD:
                if run(0, n, self._st, ad, adl, src, dst, ct_len, _OPEN | _NONCE_IN_Q):
                    raise AuthError("ChaChaPoly tag mismatch: message forged or corrupted, or wrong key/nonce")
                return ct_len
        self._set_n(n)
        return self._open(ad, src, src_len, dst)


# Vector API (raw 12-byte IETF nonce, allocating results; not for hot paths).

def _keyed(key, impl):
    cp = ChaChaPoly(impl)
    cp.set_key(key)
    return cp


def _check_counter(counter, nbytes):
    nblocks = (nbytes + 63) // 64
    if counter < 0 or counter > 0xFFFFFFFF or (nblocks and counter + nblocks - 1 > 0xFFFFFFFF):
        raise LimitError("ChaCha20 32-bit block counter would pass 2**32-1 (start %d, %d blocks)" % (counter, nblocks))


def chacha20_block(key, counter, nonce12, impl=None):
    """The 64-byte ChaCha20 block for key, 32-bit counter and 12-byte nonce (RFC 8439 §2.3)."""
    _check_counter(counter, 64)
    cp = _keyed(key, impl)
    cp._set_nonce12(nonce12)
    cp._st[12] = counter
    if cp._v is not None:
        out = bytearray(64)
        cp._v(0, 0, cp._st, b"", 0, out, out, 64, _XOR)  # keystream = 0 ^ keystream
        return bytes(out)
    cp._c.block(cp._st, cp._ks)
    return bytes(cp._ks)


def chacha20_xor(key, counter, nonce12, data, impl=None):
    """data XOR the ChaCha20 keystream from block `counter` (RFC 8439 §2.4). The block counter is
    32 bits: a message whose last block would need counter 2**32 raises LimitError (never wraps)."""
    n = len(data)
    _check_counter(counter, n)
    cp = _keyed(key, impl)
    cp._set_nonce12(nonce12)
    cp._st[12] = counter
    out = bytearray(n)
    if cp._v is not None:
        cp._v(0, 0, cp._st, b"", 0, data, out, n, _XOR)
    else:
        cp._c.xor(cp._st, cp._ks, data, out, n)
    return bytes(out)


def poly1305(key32, msg, impl=None):
    """The 16-byte Poly1305 tag of msg under one-time key r||s (RFC 8439 §2.5)."""
    if len(key32) != 32:
        raise LimitError("Poly1305 key must be 32 bytes, got %d" % len(key32))
    _, v, _, p = _modules(impl)
    if v is not None:
        ctx = array.array("I", [0] * _CTX_WORDS)
        _load_words(ctx, 16, key32, 8)
        tag = bytearray(16)
        v(0, 0, ctx, b"", 0, msg, tag, len(msg), _POLY)
        return bytes(tag)
    acc = p.new_acc()
    key = bytearray(key32)
    p.init(acc, key)
    n = len(msg)
    full = n - (n % 16)
    p.update(acc, msg, 0, full, 1)
    if full < n:
        blk = bytearray(16)
        blk[0:n - full] = msg[full:n]
        blk[n - full] = 1
        p.update(acc, blk, 0, 16, 0)
    tag = bytearray(16)
    p.finish(acc, -1, 0, tag, 0)
    return bytes(tag)


def aead_encrypt(key, nonce12, ad, pt, impl=None):
    """RFC 8439 §2.8 AEAD_CHACHA20_POLY1305 seal: ciphertext || tag."""
    cp = _keyed(key, impl)
    cp._set_nonce12(nonce12)
    out = bytearray(len(pt) + _TAG_LEN)
    cp._seal(ad, pt, len(pt), out)
    return bytes(out)


def aead_decrypt(key, nonce12, ad, ct_tag, impl=None):
    """RFC 8439 §2.8 open of ciphertext || tag; raises AuthError on a bad tag."""
    cp = _keyed(key, impl)
    cp._set_nonce12(nonce12)
    out = bytearray(max(len(ct_tag) - _TAG_LEN, 0))
    cp._open(ad, ct_tag, len(ct_tag), out)
    return bytes(out)
