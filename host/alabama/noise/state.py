"""Noise protocol state objects for the host (Noise rev 34, 25519/ChaChaPoly/SHA256): no I/O.

Responsible for CipherState, SymmetricState and HandshakeState exactly as the Noise specification
names them, with the handshake patterns as data (token lists) and one token dispatch for
write/read. It must not touch sockets, clocks or global randomness: the random source (``rng(n)``)
or a fixed ephemeral key (test vectors) is a parameter. Primitives come from pyca/cryptography;
the state machine is ours, and it mirrors ``firmware/satellite/noise/state.py`` line for line so
the two can be checked against each other and against the published vectors.
"""
import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from alabama.errors import AlabamaError

DHLEN = 32
HASHLEN = 32
TAGLEN = 16
#: Noise §3: every Noise message is at most 65535 bytes (its length travels in 16 bits).
MAX_MESSAGE = 65535
#: The largest transport plaintext: the message limit less the Poly1305 tag.
MAX_PLAINTEXT = MAX_MESSAGE - TAGLEN
#: Noise §5.1: nonce 2**64-1 is reserved; reaching it makes the CipherState unusable.
MAX_NONCE = 2 ** 64 - 1

SUFFIX = "_25519_ChaChaPoly_SHA256"

#: Handshake patterns as data (Noise §7.5): (initiator pre-message, responder pre-message, messages).
#: Messages alternate, starting with the initiator.
PATTERNS = {
    "IK": ((), ("s",), (("e", "es", "s", "ss"), ("e", "ee", "se"))),
    "XX": ((), (), (("e",), ("e", "ee", "s", "es"), ("s", "se"))),
}


def protocol_name(pattern):
    """The full Noise protocol name for a pattern in PATTERNS, e.g. Noise_IK_25519_ChaChaPoly_SHA256."""
    return "Noise_" + pattern + SUFFIX


class NoiseError(AlabamaError):
    """Base of every Noise failure; ``code`` is a stable string tests and callers match on."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


class HandshakeError(NoiseError):
    """The peer's handshake was unacceptable (bad name, failed authentication, wrong length)."""


class TransportError(NoiseError):
    """A transport message from the peer failed (authentication, length): the connection ends."""


class NoiseStateError(NoiseError):
    """Local misuse or an unusable state (failed earlier, nonce exhausted, too much plaintext)."""


def _nonce(n):
    """Noise's ChaChaPoly nonce: 32 zero bits then n as 64-bit little-endian (= n << 32, 12 bytes LE)."""
    return (n << 32).to_bytes(12, "little")


def hmac_sha256(key, data):
    return hmac.new(bytes(key), bytes(data), hashlib.sha256).digest()


def hkdf(ck, ikm, num_outputs):
    """Noise §4.3 HKDF: 2 or 3 outputs of HASHLEN bytes."""
    temp = hmac_sha256(ck, ikm)
    out1 = hmac_sha256(temp, b"\x01")
    out2 = hmac_sha256(temp, out1 + b"\x02")
    if num_outputs == 2:
        return out1, out2
    return out1, out2, hmac_sha256(temp, out2 + b"\x03")


def public_key(private):
    k = X25519PrivateKey.from_private_bytes(bytes(private))
    return k.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def dh(private, public):
    try:
        return X25519PrivateKey.from_private_bytes(bytes(private)).exchange(
            X25519PublicKey.from_public_bytes(bytes(public)))
    except ValueError as e:  # all-zero output: a low-order point from the peer
        raise HandshakeError("BAD_KEY", "the peer sent an invalid X25519 public key (%s); "
                             "it is misbehaving or not a Noise peer" % e) from None


class CipherState:
    """Noise §5.1: a key k (or none) and a 64-bit nonce n."""

    def __init__(self):
        self.k = None
        self.n = 0
        self._aead = None
        self._failed = False

    def initialize_key(self, key):
        self.k = None if key is None else bytes(key)
        self._aead = None if key is None else ChaCha20Poly1305(self.k)
        self.n = 0

    def has_key(self):
        return self.k is not None

    def set_nonce(self, n):
        self.n = n

    def _check(self):
        if self._failed:
            raise NoiseStateError("FAILED", "this Noise cipher state failed earlier; open a new connection")
        if self.n >= MAX_NONCE:
            raise NoiseStateError("NONCE_EXHAUSTED", "the Noise nonce reached 2**64-1; reconnect to re-key")

    # The two per-message methods run once per frame (the core's audio path): _check and _nonce are
    # inlined (the same rules and errors; _check runs only when one of them applies).
    def encrypt_with_ad(self, ad, plaintext):
        if self.k is None:
            return bytes(plaintext)
        n = self.n
        if self._failed or n >= MAX_NONCE:
            self._check()
        if len(plaintext) > MAX_PLAINTEXT:
            raise NoiseStateError("PLAINTEXT_TOO_LARGE", "a Noise message carries at most %d plaintext "
                                  "bytes, got %d; split it" % (MAX_PLAINTEXT, len(plaintext)))
        out = self._aead.encrypt((n << 32).to_bytes(12, "little"), bytes(plaintext), bytes(ad))
        self.n = n + 1
        return out

    def decrypt_with_ad(self, ad, ciphertext):
        if self.k is None:
            return bytes(ciphertext)
        if self._failed or self.n >= MAX_NONCE:
            self._check()
        if len(ciphertext) < TAGLEN:
            self._failed = True
            raise TransportError("MSG_TOO_SHORT", "Noise message of %d bytes is shorter than its %d-byte "
                                 "tag; the peer is broken or the stream was cut" % (len(ciphertext), TAGLEN))
        if len(ciphertext) > MAX_MESSAGE:
            self._failed = True
            raise TransportError("MSG_TOO_LONG", "Noise message of %d bytes exceeds %d" % (len(ciphertext), MAX_MESSAGE))
        try:
            out = self._aead.decrypt((self.n << 32).to_bytes(12, "little"), bytes(ciphertext), bytes(ad))
        except InvalidTag:
            self._failed = True
            raise TransportError("DECRYPT_FAILED", "a Noise message failed authentication: tampered, "
                                 "replayed, reordered or from another session; the connection is closed") from None
        self.n += 1
        return out


class SymmetricState:
    """Noise §5.2: chaining key ck, handshake hash h, and a CipherState."""

    def __init__(self, name):
        name = name.encode() if isinstance(name, str) else bytes(name)
        self.h = name + bytes(HASHLEN - len(name)) if len(name) <= HASHLEN else hashlib.sha256(name).digest()
        self.ck = self.h
        self.cs = CipherState()

    def mix_key(self, ikm):
        self.ck, temp_k = hkdf(self.ck, ikm, 2)
        self.cs.initialize_key(temp_k)

    def mix_hash(self, data):
        self.h = hashlib.sha256(self.h + bytes(data)).digest()

    def mix_key_and_hash(self, ikm):
        self.ck, temp_h, temp_k = hkdf(self.ck, ikm, 3)
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
        k1, k2 = hkdf(self.ck, b"", 2)
        c1, c2 = CipherState(), CipherState()
        c1.initialize_key(k1)
        c2.initialize_key(k2)
        return c1, c2


class HandshakeState:
    """Noise §5.3 for the patterns in PATTERNS.

    ``s``: our static private key (32 bytes); ``rs``: the peer's static public key when the
    pattern pre-shares it (IK initiator); ``e``: a fixed ephemeral private key (vectors only),
    otherwise ``rng(32)`` makes one. After the last message ``split()`` has run: ``cipher_send``,
    ``cipher_recv`` and ``handshake_hash`` are set and ``complete`` is true.
    """

    def __init__(self, pattern, initiator, prologue=b"", s=None, rs=None, e=None, rng=None, name=None):
        if pattern not in PATTERNS:
            raise NoiseStateError("UNKNOWN_PATTERN", "Noise pattern %r is not supported (only %s)"
                                  % (pattern, ", ".join(sorted(PATTERNS))))
        pre_i, pre_r, self._messages = PATTERNS[pattern]
        self.pattern = pattern
        self.initiator = initiator
        self._rng = rng or os.urandom
        self.s = None if s is None else bytes(s)
        self.s_pub = None if s is None else public_key(self.s)
        self.e = None if e is None else bytes(e)
        self.e_pub = None if e is None else public_key(self.e)
        self.rs = None if rs is None else bytes(rs)
        self.re = None
        self.ss = SymmetricState(name or protocol_name(pattern))
        self.ss.mix_hash(prologue)
        for tokens, ours in ((pre_i, initiator), (pre_r, not initiator)):
            for t in tokens:
                if t != "s":
                    raise NoiseStateError("UNKNOWN_PATTERN", "pre-message token %r unsupported" % t)
                key = self.s_pub if ours else self.rs
                if key is None:
                    raise NoiseStateError("MISSING_KEY", "Noise_%s needs the %s static key before the "
                                          "handshake" % (pattern, "local" if ours else "remote"))
                self.ss.mix_hash(key)
        self._i = 0
        self._failed = False
        self.complete = False
        self.cipher_send = self.cipher_recv = None
        self.handshake_hash = None

    def my_turn(self):
        """True when the next message is ours to write."""
        return (self._i % 2 == 0) == self.initiator

    def _guard(self, writing):
        if self._failed:
            raise NoiseStateError("FAILED", "this Noise handshake failed earlier; open a new connection")
        if self.complete:
            raise NoiseStateError("WRONG_STATE", "the Noise handshake is already complete")
        if self.my_turn() != writing:
            raise NoiseStateError("WRONG_STATE", "it is not our turn to %s a handshake message"
                                  % ("write" if writing else "read"))

    def _dh_token(self, t):
        # es: initiator e with responder s; se: initiator s with responder e.
        if t == "ee":
            return dh(self.e, self.re)
        if t == "ss":
            return dh(self.s, self.rs)
        if (t == "es") == self.initiator:
            return dh(self.e, self.rs)
        return dh(self.s, self.re)

    def write_message(self, payload=b""):
        self._guard(True)
        out = bytearray()
        for t in self._messages[self._i]:
            if t == "e":
                if self.e is None:
                    self.e = bytes(self._rng(DHLEN))
                    self.e_pub = public_key(self.e)
                out += self.e_pub
                self.ss.mix_hash(self.e_pub)
            elif t == "s":
                out += self.ss.encrypt_and_hash(self.s_pub)
            else:
                self.ss.mix_key(self._dh_token(t))
        out += self.ss.encrypt_and_hash(payload)
        self._advance()
        return bytes(out)

    def read_message(self, message):
        self._guard(False)
        try:
            return self._read(memoryview(bytes(message)))
        except NoiseError as e:
            self._failed = True
            if not isinstance(e, HandshakeError):
                raise HandshakeError(e.code, "Noise handshake message rejected: %s" % e) from None
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
                n = DHLEN + (TAGLEN if self.ss.cs.has_key() else 0)
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
            raise HandshakeError("MSG_TOO_SHORT", "Noise handshake message %d of %s is %d bytes, too short; "
                                 "the peer is not speaking this pattern or the stream was cut"
                                 % (self._i + 1, self.pattern, len(m)))

    def _advance(self):
        self._i += 1
        if self._i == len(self._messages):
            c1, c2 = self.ss.split()
            self.cipher_send, self.cipher_recv = (c1, c2) if self.initiator else (c2, c1)
            self.handshake_hash = self.ss.get_handshake_hash()
            self.complete = True
