# Noise protocol state objects (Noise rev 34; IK and XX over 25519/ChaChaPoly/SHA256) for the satellite.
# Pure protocol logic: no I/O, no clock and no randomness of its own (rng(n) or a fixed ephemeral key is
# a parameter). Primitives come from chachapoly/hkdf/x25519 beside it; framing lives in transport.py.
#
#   CipherState      initialize_key(k) has_key() set_nonce(n) encrypt_with_ad(ad, p) -> bytes
#                    decrypt_with_ad(ad, c) -> bytes; allocation-free twins for the transport hot path:
#                    encrypt_into(ad, src, src_len, dst) -> src_len + 16, decrypt_into(...) -> src_len - 16
#   SymmetricState   mix_key mix_hash mix_key_and_hash encrypt_and_hash decrypt_and_hash split
#                    get_handshake_hash
#   HandshakeState   write_message(payload) -> bytes, read_message(message) -> payload; handshake
#                    patterns are data (PATTERNS) and both methods are one dispatch over their tokens.
#
# A failed read or decrypt leaves the object unusable: every later call raises NoiseStateError code
# "FAILED". Nonce 2**64-1 is reserved (Noise §5.1): reaching it raises code "NONCE_EXHAUSTED".
# set_impl("c" | "viper" | "pure" | None) chooses the primitive implementations (tests run both).
from micropython import const

import hashlib

from . import chachapoly as _chachapoly
from . import hkdf as _hkdf
from . import x25519 as _x25519

DHLEN = const(32)
HASHLEN = const(32)
TAGLEN = const(16)
# Noise §3: a Noise message is at most 65535 bytes; the 16-byte tag leaves 65519 plaintext bytes.
MAX_MESSAGE = const(65535)
MAX_PLAINTEXT = const(65519)
# Noise §5.1: n = 2**64-1 is never used. A big int on the board, compared without allocating.
MAX_NONCE = 0xFFFFFFFFFFFFFFFF
_EMPTY = b""

SUFFIX = "_25519_ChaChaPoly_SHA256"

# (initiator pre-message tokens, responder pre-message tokens, message token lists), Noise §7.
# Messages alternate, the initiator writing the first.
PATTERNS = {
    "IK": ((), ("s",), (("e", "es", "s", "ss"), ("e", "ee", "se"))),
    "XX": ((), (), (("e",), ("e", "ee", "s", "es"), ("s", "se"))),
}

_impl = None  # None: the primitives' default (c, else viper where the emitter exists)
_ximpl = None  # the X25519 one: "c" exists for ChaChaPoly only (firmware/native), X25519 keeps its default


def set_impl(name):
    """Select the primitive implementation for objects created afterwards: "c" (ChaChaPoly's C module,
    X25519 at its default), "viper", "pure" or None."""
    global _impl, _ximpl
    _impl = name
    _ximpl = None if name == "c" else name


def protocol_name(pattern):
    return "Noise_" + pattern + SUFFIX


class NoiseError(Exception):
    """Base of every Noise failure; `code` is a stable string callers and tests match on."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


class HandshakeError(NoiseError):
    """The peer's handshake was unacceptable (bad name, failed authentication, wrong length)."""


class TransportError(NoiseError):
    """A transport message from the peer failed (authentication, length): the connection ends."""


class NoiseStateError(NoiseError):
    """Local misuse or an unusable state (failed earlier, nonce exhausted, too much plaintext)."""


def public_key(private):
    return _x25519.public_key(private, _ximpl)


_ZERO32 = bytes(32)


def dh(private, public):
    r = _x25519.x25519(private, public, _ximpl)
    if r == _ZERO32:  # a low-order point: refuse it, as the host (pyca) does
        raise HandshakeError("BAD_KEY", "the peer sent an invalid X25519 public key (low order)")
    return r


def _sha256(a, b):
    h = hashlib.sha256(a)
    h.update(b)
    return h.digest()


class CipherState:
    """Noise §5.1: a key (or none) and the 64-bit nonce n. One ChaChaPoly object, re-keyed in place."""

    def __init__(self):
        self._aead = None
        self._has = False
        self._failed = False
        self.n = 0

    def initialize_key(self, key):
        if key is None:
            self._has = False
        else:
            if self._aead is None:
                self._aead = _chachapoly.ChaChaPoly(_impl)
            self._aead.set_key(key)
            self._has = True
        self.n = 0

    def has_key(self):
        return self._has

    def set_nonce(self, n):
        self.n = n

    def _check(self):
        if self._failed:
            raise NoiseStateError("FAILED", "this Noise cipher state failed earlier; open a new connection")
        if self.n >= MAX_NONCE:
            raise NoiseStateError("NONCE_EXHAUSTED", "the Noise nonce reached 2**64-1; reconnect to re-key")

    def encrypt_into(self, ad, src, src_len, dst):
        """dst[0:src_len+16] = ciphertext of src[0:src_len]; src may be dst. Allocates nothing."""
        self._check()
        if src_len > MAX_PLAINTEXT:
            raise NoiseStateError("PLAINTEXT_TOO_LARGE", "a Noise message carries at most 65519 plaintext bytes")
        r = self._aead.encrypt_into(self.n, ad, src, src_len, dst)
        self.n += 1
        return r

    def decrypt_into(self, ad, src, src_len, dst):
        """dst[0:src_len-16] = plaintext of src[0:src_len]; src may be dst. Allocates nothing."""
        self._check()
        if src_len < TAGLEN:
            self._failed = True
            raise TransportError("MSG_TOO_SHORT", "Noise message shorter than its 16-byte tag")
        if src_len > MAX_MESSAGE:
            self._failed = True
            raise TransportError("MSG_TOO_LONG", "Noise message longer than 65535 bytes")
        try:
            r = self._aead.decrypt_into(self.n, ad, src, src_len, dst)
        except _chachapoly.AuthError:
            self._failed = True
            raise TransportError("DECRYPT_FAILED", "a Noise message failed authentication: tampered, "
                                 "replayed, reordered or from another session; connection closed")
        self.n += 1
        return r

    def encrypt_with_ad(self, ad, plaintext):
        if not self._has:
            return bytes(plaintext)
        out = bytearray(len(plaintext) + TAGLEN)
        self.encrypt_into(ad, plaintext, len(plaintext), out)
        return bytes(out)

    def decrypt_with_ad(self, ad, ciphertext):
        if not self._has:
            return bytes(ciphertext)
        n = len(ciphertext)
        out = bytearray(n if n > TAGLEN else TAGLEN)
        m = self.decrypt_into(ad, ciphertext, n, out)
        return bytes(out[:m])


class SymmetricState:
    """Noise §5.2: chaining key ck, handshake hash h and a CipherState."""

    def __init__(self, name):
        if isinstance(name, str):
            name = name.encode()
        if len(name) <= HASHLEN:
            self.h = bytes(name) + bytes(HASHLEN - len(name))
        else:
            self.h = hashlib.sha256(name).digest()
        self.ck = self.h
        self.cs = CipherState()

    def mix_key(self, ikm):
        self.ck, temp_k = _hkdf.hkdf(self.ck, ikm, 2)
        self.cs.initialize_key(temp_k)

    def mix_hash(self, data):
        self.h = _sha256(self.h, data)

    def mix_key_and_hash(self, ikm):
        # Only PSK patterns need this; kept so the object matches Noise §5.2.
        self.ck, temp_h, temp_k = _hkdf.hkdf(self.ck, ikm, 3)
        self.mix_hash(temp_h)
        self.cs.initialize_key(temp_k)

    def get_handshake_hash(self):
        return self.h

    def encrypt_and_hash(self, plaintext):
        c = self.cs.encrypt_with_ad(self.h, plaintext)
        self.mix_hash(c)
        return c

    def decrypt_and_hash(self, ciphertext):
        p = self.cs.decrypt_with_ad(self.h, ciphertext)
        self.mix_hash(ciphertext)
        return p

    def split(self):
        k1, k2 = _hkdf.hkdf(self.ck, _EMPTY, 2)
        c1 = CipherState()
        c1.initialize_key(k1)
        c2 = CipherState()
        c2.initialize_key(k2)
        return c1, c2


class HandshakeState:
    """Noise §5.3 for PATTERNS. s: our static private key; rs: the peer's static public key when
    the pattern pre-shares it (IK initiator); e: fixed ephemeral private key (vectors only), else
    rng(32) makes one; s_pub: our static public key when the caller has it cached (saves one X25519).
    After the last message: complete, cipher_send, cipher_recv, handshake_hash."""

    def __init__(self, pattern, initiator, prologue=_EMPTY, s=None, rs=None, e=None, rng=None, name=None,
                 s_pub=None):
        p = PATTERNS.get(pattern)
        if p is None:
            raise NoiseStateError("UNKNOWN_PATTERN", "Noise pattern %r is not supported (IK, XX)" % (pattern,))
        self.pattern = pattern
        self.initiator = initiator
        self._messages = p[2]
        self._rng = rng
        self.s = None if s is None else bytes(s)
        self.s_pub = None if s is None else (bytes(s_pub) if s_pub is not None else public_key(self.s))
        self.e = None if e is None else bytes(e)
        self.e_pub = None if e is None else public_key(self.e)
        self.rs = None if rs is None else bytes(rs)
        self.re = None
        self.ss = SymmetricState(name or protocol_name(pattern))
        self.ss.mix_hash(prologue)
        for tokens, ours in ((p[0], initiator), (p[1], not initiator)):
            for t in tokens:  # only "s" appears in our pre-messages
                key = self.s_pub if ours else self.rs
                if key is None:
                    raise NoiseStateError("MISSING_KEY", "Noise_%s needs the %s static key before the handshake"
                                          % (pattern, "local" if ours else "remote"))
                self.ss.mix_hash(key)
        self._i = 0
        self._failed = False
        self.complete = False
        self.cipher_send = None
        self.cipher_recv = None
        self.handshake_hash = None

    def my_turn(self):
        return (self._i % 2 == 0) == self.initiator

    def _guard(self, writing):
        if self._failed:
            raise NoiseStateError("FAILED", "this Noise handshake failed earlier; open a new connection")
        if self.complete:
            raise NoiseStateError("WRONG_STATE", "the Noise handshake is already complete")
        if self.my_turn() != writing:
            raise NoiseStateError("WRONG_STATE", "not our turn to %s a handshake message"
                                  % ("write" if writing else "read"))

    def _dh_token(self, t):
        # es = DH(initiator e, responder s); se = DH(initiator s, responder e).
        if t == "ee":
            return dh(self.e, self.re)
        if t == "ss":
            return dh(self.s, self.rs)
        if (t == "es") == self.initiator:
            return dh(self.e, self.rs)
        return dh(self.s, self.re)

    def write_message(self, payload=_EMPTY):
        self._guard(True)
        out = bytearray()
        try:
            for t in self._messages[self._i]:
                if t == "e":
                    if self.e is None:
                        if self._rng is None:
                            raise NoiseStateError("NO_RNG", "a Noise handshake needs rng(n) for its ephemeral key")
                        self.e = _x25519.generate_private(self._rng)
                        self.e_pub = public_key(self.e)
                    out += self.e_pub
                    self.ss.mix_hash(self.e_pub)
                elif t == "s":
                    out += self.ss.encrypt_and_hash(self.s_pub)
                else:
                    self.ss.mix_key(self._dh_token(t))
            out += self.ss.encrypt_and_hash(payload)
        except NoiseError:
            self._failed = True
            raise
        self._advance()
        return bytes(out)

    def read_message(self, message):
        self._guard(False)
        try:
            return self._read(memoryview(message))
        except NoiseError as e:
            self._failed = True
            if not isinstance(e, HandshakeError):
                raise HandshakeError(e.code, "Noise handshake message rejected: %s" % (e.args[0] if e.args else e.code))
            raise

    def _read(self, m):
        pos = 0
        for t in self._messages[self._i]:
            if t == "e":
                self._need(m, pos, DHLEN)
                self.re = bytes(m[pos:pos + DHLEN])
                pos += DHLEN
                self.ss.mix_hash(self.re)
            elif t == "s":
                n = DHLEN + TAGLEN if self.ss.cs.has_key() else DHLEN
                self._need(m, pos, n)
                self.rs = self.ss.decrypt_and_hash(m[pos:pos + n])
                pos += n
            else:
                self.ss.mix_key(self._dh_token(t))
        if self.ss.cs.has_key():
            self._need(m, pos, TAGLEN)
        payload = self.ss.decrypt_and_hash(m[pos:])
        self._advance()
        return payload

    def _need(self, m, pos, n):
        if len(m) - pos < n:
            raise HandshakeError("MSG_TOO_SHORT", "Noise handshake message %d of %s is %d bytes, too short; the "
                                 "peer does not speak this pattern or the stream was cut" % (self._i + 1, self.pattern, len(m)))

    def _advance(self):
        self._i += 1
        if self._i == len(self._messages):
            c1, c2 = self.ss.split()
            if self.initiator:
                self.cipher_send, self.cipher_recv = c1, c2
            else:
                self.cipher_send, self.cipher_recv = c2, c1
            self.handshake_hash = self.ss.get_handshake_hash()
            self.complete = True
