"""The Noise-over-TCP binding (spec §5.1) for the host, sans-IO: bytes in, bytes out, no sockets.

Responsible for the wire around the Noise state objects: the protocol-name offer, the 2-byte
big-endian length prefix of every Noise message, splitting outgoing plaintext into messages of at
most 65519 bytes and concatenating incoming plaintext into one stream. It must not parse Alabama
frames (it does not know frame boundaries) and never does I/O; drivers (``aio.py``) move the bytes.

Wire (identical in ``firmware/satellite/noise/transport.py``):

1. The initiator's first bytes are one length-prefixed message holding the ASCII protocol name it
   chose (``Noise_IK_25519_ChaChaPoly_SHA256`` or ``Noise_XX_25519_ChaChaPoly_SHA256``). The
   responder rejects any other name (``HandshakeError`` code ``UNSUPPORTED_PROTOCOL``). Both sides
   use exactly the name bytes as the Noise prologue, so a tampered offer breaks the handshake.
2. Then every handshake and transport message is ``len:u16be || body`` (body <= 65535 bytes).
   Handshake payloads are empty. Transport plaintext is a byte stream.

API: ``conn = NoiseConnection(initiator=True, pattern="IK", static_private=..., remote_static=...)``;
``conn.start() -> bytes`` (the initiator's offer and first message; b"" for a responder);
``conn.receive(data)`` takes TCP bytes in any split; ``conn.data_to_send() -> bytes``;
``conn.handshake_done``, ``conn.remote_static``, ``conn.handshake_hash``, ``conn.pattern``;
``conn.encrypt(plaintext) -> bytes`` (length-prefixed messages); ``conn.read_plaintext() -> bytes``;
``conn.decrypt_stream(data) -> bytes`` (receive + read_plaintext, the drivers' fast path);
``conn.receive_eof()`` when the peer closed. Any error closes the connection object for good
(``conn.closed``; every later call raises ``NoiseStateError`` code ``CLOSED``). Under IK the
initiator never falls back to XX: there is no code path that changes the pattern after start().
"""
import os

from .state import (HandshakeError, HandshakeState, MAX_MESSAGE, MAX_PLAINTEXT, NoiseError,
                    NoiseStateError, PATTERNS, TAGLEN, TransportError, protocol_name)

#: The 2-byte big-endian length prefix of every message on the TCP stream (spec §5.1.2).
LEN_PREFIX = 2
#: The protocol names a responder accepts (spec §5.1.1), in the exact bytes used as the prologue.
PROTOCOL_NAMES = {protocol_name(p).encode("ascii"): p for p in ("IK", "XX")}
#: The offer is one of PROTOCOL_NAMES: anything longer is rejected before it is buffered.
MAX_OFFER = max(len(n) for n in PROTOCOL_NAMES)

IK_MISMATCH_MSG = ("the core could not prove the pinned static key (IK): its key differs from the "
                   "pinned one, or the handshake was tampered with; not falling back to XX: if the core "
                   "was replaced, re-provision or factory-reset the satellite")


class NoiseConnection:
    """One Noise-over-TCP connection, initiator or responder (see the module docstring)."""

    def __init__(self, initiator, static_private, pattern=None, remote_static=None, rng=None,
                 patterns=("IK", "XX"), ephemeral=None):
        self.initiator = bool(initiator)
        self._s = bytes(static_private)
        self._rng = rng or os.urandom
        self._ephemeral = ephemeral
        self._accept = tuple(patterns)
        self.pattern = None
        self._hs = None
        if self.initiator:
            if pattern not in PATTERNS:
                raise NoiseStateError("UNKNOWN_PATTERN", "an initiator must choose IK or XX, not %r" % (pattern,))
            if pattern == "IK" and remote_static is None:
                raise NoiseStateError("MISSING_KEY", "IK needs the core's pinned static key")
            self.pattern = pattern
            self._rs = None if remote_static is None else bytes(remote_static)
        self._in = bytearray()
        self._out = bytearray()
        self._plain = bytearray()
        self._offer_seen = self.initiator
        self._started = False
        self.closed = False
        self.error = None
        self.handshake_done = False
        self.remote_static = None
        self.handshake_hash = None
        self._send = self._recv = None

    # -- helpers -------------------------------------------------------------------------------
    def _fail(self, exc):
        self.closed = True
        self.error = exc
        self._hs = None
        self._send = self._recv = None
        raise exc

    def _alive(self):
        if self.closed:
            raise NoiseStateError("CLOSED", "this Noise connection is closed%s; open a new one"
                                  % ((" (%s)" % self.error.code) if self.error is not None else ""))

    def _emit(self, body):
        self._out += len(body).to_bytes(2, "big")
        self._out += body

    def _new_hs(self, pattern, name):
        return HandshakeState(pattern, self.initiator, prologue=name, s=self._s,
                              rs=self._rs if self.initiator else None, e=self._ephemeral,
                              rng=self._rng, name=name)

    # -- API -----------------------------------------------------------------------------------
    def start(self):
        """Begin: the initiator queues its protocol-name offer and first handshake message."""
        self._alive()
        if self._started:
            raise NoiseStateError("WRONG_STATE", "start() was already called")
        self._started = True
        if self.initiator:
            name = protocol_name(self.pattern).encode("ascii")
            self._hs = self._new_hs(self.pattern, name)
            self._emit(name)
            self._emit(self._hs.write_message(b""))
        return self.data_to_send()

    def data_to_send(self):
        out = bytes(self._out)
        self._out.clear()
        return out

    def receive(self, data):
        """Consume TCP bytes; handshake progress and decrypted plaintext follow. Raises on failure."""
        self._alive()
        if not self._started:
            self.start()
        self._in += data
        try:
            while len(self._in) >= LEN_PREFIX:
                n = int.from_bytes(self._in[:LEN_PREFIX], "big")
                if not self._offer_seen and n > MAX_OFFER:
                    raise HandshakeError("UNSUPPORTED_PROTOCOL", "the peer offered a %d-byte protocol name; only "
                                         "Noise_IK/XX_25519_ChaChaPoly_SHA256 are accepted" % n)
                if len(self._in) < LEN_PREFIX + n:
                    break
                body = bytes(self._in[LEN_PREFIX:LEN_PREFIX + n])
                del self._in[:LEN_PREFIX + n]
                self._message(body)
        except NoiseError as e:
            self._fail(e)

    def _message(self, body):
        if not self._offer_seen:
            pattern = PROTOCOL_NAMES.get(body)
            if pattern is None or pattern not in self._accept:
                raise HandshakeError("UNSUPPORTED_PROTOCOL", "the peer offered Noise protocol %r; this core "
                                     "accepts only %s" % (body[:64], ", ".join(protocol_name(p) for p in self._accept)))
            self._offer_seen = True
            self.pattern = pattern
            self._hs = self._new_hs(pattern, body)
            return
        if self.handshake_done:
            self._plain += self._recv.decrypt_with_ad(b"", body)
            return
        if self._hs.my_turn():
            raise HandshakeError("UNEXPECTED_MESSAGE", "the peer sent a handshake message out of turn")
        try:
            payload = self._hs.read_message(body)
        except HandshakeError as e:
            if self.initiator and self.pattern == "IK" and e.code == "DECRYPT_FAILED":
                raise HandshakeError("IK_KEY_MISMATCH", IK_MISMATCH_MSG) from None
            raise
        if payload:
            raise HandshakeError("HANDSHAKE_PAYLOAD", "the peer put %d bytes in a handshake payload; the "
                                 "Alabama binding sends empty payloads" % len(payload))
        if not self._hs.complete:
            self._emit(self._hs.write_message(b""))
        if self._hs.complete:
            self._finish()

    def _finish(self):
        hs = self._hs
        self._send, self._recv = hs.cipher_send, hs.cipher_recv
        self.remote_static = hs.rs
        self.handshake_hash = hs.handshake_hash
        self.handshake_done = True
        self._hs = None

    def receive_eof(self):
        """The peer closed the TCP stream. Raises a typed error unless the close was clean."""
        if self.closed:
            return
        if not self.handshake_done and self._started and self.initiator and self.pattern == "IK":
            self._fail(HandshakeError("IK_KEY_MISMATCH", "the core closed the connection during the IK "
                                      "handshake, which is what it does when " + IK_MISMATCH_MSG))
        if not self.handshake_done and self._started:
            self._fail(HandshakeError("EOF", "the peer closed the connection during the Noise handshake"))
        if self._in:
            self._fail(TransportError("EOF", "the peer closed the connection in the middle of a Noise message"))
        self.closed = True

    def encrypt(self, plaintext):
        """Length-prefixed transport messages for plaintext, split at MAX_PLAINTEXT bytes."""
        self._alive()
        if not self.handshake_done:
            raise NoiseStateError("WRONG_STATE", "cannot send application data before the Noise handshake completes")
        if type(plaintext) is bytes and 0 < len(plaintext) <= MAX_PLAINTEXT:   # one message: no staging buffer
            body = self._send.encrypt_with_ad(b"", plaintext)
            return len(body).to_bytes(2, "big") + body
        mv = memoryview(bytes(plaintext))
        out = bytearray()
        if not len(mv):
            return b""
        pos = 0
        while True:
            chunk = mv[pos:pos + MAX_PLAINTEXT]
            body = self._send.encrypt_with_ad(b"", chunk)
            out += len(body).to_bytes(2, "big")
            out += body
            pos += len(chunk)
            if pos >= len(mv):
                break
        return bytes(out)

    def decrypt_stream(self, data):
        """``receive(data)`` then ``read_plaintext()`` in one call, with a fast path for the steady state.

        Once the handshake is done and nothing is buffered, the complete length-prefixed transport
        messages at the front of ``data`` are decrypted straight from it (no staging buffer, one
        ``CipherState.decrypt_with_ad`` each, so nonce, length and authentication rules are exactly
        ``receive``'s); an incomplete last message goes through ``receive`` as usual. Any failure fails
        the connection for good, exactly as ``receive`` does. Performance only: results are identical."""
        if not self.handshake_done or self.closed or self._in or self._plain:
            self.receive(data)
            return self.read_plaintext()
        dec = self._recv.decrypt_with_ad
        n = len(data)
        if n >= 2 and ((data[0] << 8) | data[1]) + 2 == n:   # exactly one message: the usual read of a satellite
            try:
                return dec(b"", data[2:])
            except NoiseError as e:
                self._fail(e)
        pos = 0
        out = []
        try:
            while pos + 2 <= n:
                end = pos + 2 + ((data[pos] << 8) | data[pos + 1])
                if end > n:
                    break
                out.append(dec(b"", data[pos + 2:end]))
                pos = end
        except NoiseError as e:
            self._fail(e)
        if pos < n:
            self.receive(data[pos:])
            out.append(self.read_plaintext())
        return out[0] if len(out) == 1 else b"".join(out)

    @property
    def received_messages(self):
        """Transport messages decrypted so far (the receive nonce; 0 before the handshake or once closed):
        a driver's liveness check reads progress here without touching the read path."""
        return self._recv.n if self._recv is not None else 0

    def read_plaintext(self):
        """All decrypted plaintext received so far (and not yet read), as one stream."""
        out = bytes(self._plain)
        self._plain.clear()
        return out

    def close(self):
        self.closed = True
        self._hs = None
        self._send = self._recv = None

    # -- continuing an established connection in another process of the same core ---------------
    def export_established(self):
        """The state of an established, open connection as plain values (pattern, both transport keys
        and nonces, handshake hash, peer key, bytes received but not yet read), so another process of
        the same core can continue it (``restore_established``): the core's workers hand a connection
        to the worker that owns its device. Secret (the transport keys): only over a private channel."""
        if not self.handshake_done or self.closed or self._out:
            raise NoiseStateError("WRONG_STATE", "only an established, open connection with nothing left to "
                                  "send can be continued elsewhere")
        return {"initiator": self.initiator, "pattern": self.pattern, "rs": bytes(self.remote_static).hex(),
                "hh": bytes(self.handshake_hash).hex(), "send": [self._send.k.hex(), self._send.n],
                "recv": [self._recv.k.hex(), self._recv.n], "in": bytes(self._in).hex(),
                "plain": bytes(self._plain).hex()}

    @classmethod
    def restore_established(cls, static_private, st):
        """The connection ``export_established`` described, ready for transport messages."""
        from .state import CipherState
        c = cls(st["initiator"], static_private, pattern=st["pattern"] if st["initiator"] else None,
                remote_static=bytes.fromhex(st["rs"]) if st["initiator"] else None)
        c.pattern = st["pattern"]
        c._offer_seen = c._started = c.handshake_done = True
        c.remote_static = bytes.fromhex(st["rs"])
        c.handshake_hash = bytes.fromhex(st["hh"])
        c._send, c._recv = CipherState(), CipherState()
        for cs, (k, n) in ((c._send, st["send"]), (c._recv, st["recv"])):
            cs.initialize_key(bytes.fromhex(k))
            cs.set_nonce(n)
        c._in = bytearray(bytes.fromhex(st["in"]))
        c._plain = bytearray(bytes.fromhex(st["plain"]))
        return c


__all__ = ["NoiseConnection", "PROTOCOL_NAMES", "LEN_PREFIX", "MAX_MESSAGE", "MAX_PLAINTEXT", "TAGLEN"]
