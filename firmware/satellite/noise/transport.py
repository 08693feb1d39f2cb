# The Noise-over-TCP binding (spec §5.1) for the satellite, sans-IO: bytes in, bytes out, no sockets.
# Owns the protocol-name offer, the 2-byte big-endian length prefix of every Noise message, and the
# two preallocated message buffers; it must not parse Alabama frames (it does not know frame bounds)
# and never does I/O -- the runtime driver moves the bytes. No fallback from IK to XX exists here.
#
# Wire (same as host/alabama/noise/transport.py):
#   1. the initiator first sends one length-prefixed message holding the ASCII protocol name it chose,
#      Noise_IK_25519_ChaChaPoly_SHA256 or Noise_XX_25519_ChaChaPoly_SHA256; a responder rejects any
#      other (HandshakeError "UNSUPPORTED_PROTOCOL"). Both sides use the name bytes as the prologue.
#   2. every handshake and transport message is len:u16be || body (body <= 65535); handshake payloads
#      are empty; transport plaintext is one continuous byte stream (split at <= 65519 bytes).
#
# API
#   conn = NoiseConnection(initiator, static_private, pattern="IK"|"XX", remote_static=None, rng=None,
#                          on_plaintext=None, tx_capacity=MAX_PLAINTEXT, static_public=None,
#                          rx_buf=None, rx_capacity=MAX_MESSAGE, tx_buf=None)
#   rx_message_bytes(max_frame_bytes) -> the rx_capacity for a peer that advertised that limit
#   (static_public: our cached public key, saving one X25519 per connection; the caller keeps it
#   consistent with static_private -- a wrong one makes every handshake fail, never succeed wrongly)
#   conn.start() -> bytes            initiator: offer + message 1 (responder: b"")
#   conn.receive(data)               TCP bytes in any split (whole, byte by byte, with trailing data)
#   conn.receive_into(buf, start, end)   the same for buf[start:end], without slicing
#   conn.data_to_send() -> bytes     pending handshake output
#   conn.receive_eof()               the peer closed; raises the typed reason when it was not clean
#   conn.handshake_done  conn.remote_static  conn.handshake_hash  conn.pattern  conn.closed
#   Receive, steady state (allocates nothing): each transport message is decrypted in place in the
#     receive buffer and handed out as on_plaintext(buf, start, end); buf is only valid during the
#     call (the next message overwrites it), so the framer consumes or copies it there. Without
#     on_plaintext the plaintext is queued and conn.read_plaintext() -> bytes returns it (allocates).
#   Send, steady state (allocates nothing): write up to conn.tx_capacity plaintext bytes into
#     conn.tx_plain (a memoryview at offset 2 of conn.tx_buf), call conn.encrypt_buffer(n) -> total;
#     then write conn.tx_buf[0:total] to the socket. conn.encrypt_from(buf, start, end) copies first.
#     conn.encrypt(data) -> bytes is the allocating convenience that splits any length.
#
# Memory: the receive buffer holds one whole Noise message (its tag is checked before any plaintext is
# released, so a message cannot be consumed piecemeal): rx_capacity bytes, plus 2 header bytes kept as
# ints. A satellite sizes it with rx_message_bytes(its advertised max_frame_bytes): the core sends each
# frame as its own Noise message(s) and never a frame over that limit (spec §6.1), so no message it
# sends is longer than max_frame_bytes + the frame prefix (10) + the 16-byte tag. A longer claimed length is refused before a
# byte is buffered (HandshakeError / TransportError "MESSAGE_TOO_LARGE": the connection closes). The
# default, MAX_MESSAGE = 65535, takes any message. The send buffer is tx_capacity + 18 bytes (65537 by
# default; a satellite that only sends small frames may pass a smaller tx_capacity, at least its Hello
# frame, spec §6.1). Both are allocated once, in __init__; pass rx_buf= / tx_buf= to place them yourself
# (kept across connections, or in PSRAM): rx_buf's length is the receive capacity. Any error closes the
# object for good: every later call raises NoiseStateError "CLOSED".
from micropython import const

from .state import (HandshakeError, HandshakeState, NoiseError, NoiseStateError, TransportError,
                    PATTERNS, protocol_name)

_LEN_PREFIX = const(2)
_TAGLEN = const(16)
MAX_MESSAGE = const(65535)
MAX_PLAINTEXT = const(65519)
# The smallest receive buffer that completes a handshake as initiator: XX message 2 is the longest one we
# receive (e 32 + encrypted s 32+16 + the empty payload's tag 16); the offer (32) and IK message 2 (48)
# are shorter.
MIN_RX_MESSAGE = const(96)
# A frame on the wire is its prefix (two varints, at most 10 bytes: wire/frame.py PREFIX_MAX_BYTES) plus
# total_len bytes; max_frame_bytes bounds total_len.
FRAME_PREFIX_MAX = const(10)
# The offer is one of the two 32-byte names: a longer claimed length is refused before buffering.
_MAX_OFFER = const(32)
_EMPTY = b""
NAMES = (b"Noise_IK_25519_ChaChaPoly_SHA256", b"Noise_XX_25519_ChaChaPoly_SHA256")

IK_MISMATCH_MSG = ("the core could not prove the pinned static key (IK): its key differs from the "
                   "pinned one, or the handshake was tampered with; not falling back to XX: if the core "
                   "was replaced, re-provision or factory-reset the satellite")

# The framer's allocation-free copy (viper where the emitter exists) serves the transport too.
from ..wire._copy import copy as _copy_pure

try:
    from ..wire._copy_viper import copy as _copy
except (ImportError, SyntaxError, NameError, NotImplementedError, MemoryError):  # CPython, no viper, no room
    _copy = _copy_pure


def rx_message_bytes(max_frame_bytes):
    """The receive buffer for a peer that advertised `max_frame_bytes` (0 = unset: the protocol default,
    one full Noise message): its largest frame (total_len + its prefix, wire/frame.py PREFIX_MAX_BYTES) plus
    the tag, between MIN_RX_MESSAGE and MAX_MESSAGE."""
    if max_frame_bytes <= 0 or max_frame_bytes + FRAME_PREFIX_MAX > MAX_PLAINTEXT:
        return MAX_MESSAGE
    n = max_frame_bytes + FRAME_PREFIX_MAX + _TAGLEN
    return n if n > MIN_RX_MESSAGE else MIN_RX_MESSAGE


def use_pure_copy(flag):
    """Tests: force the pure copy (True) or restore the viper one when present (False)."""
    global _copy
    if flag:
        _copy = _copy_pure
    else:
        try:
            from ..wire._copy_viper import copy as c
        except (ImportError, SyntaxError, NameError, NotImplementedError, MemoryError):
            c = _copy_pure
        _copy = c


class NoiseConnection:
    def __init__(self, initiator, static_private, pattern=None, remote_static=None, rng=None,
                 on_plaintext=None, patterns=("IK", "XX"), ephemeral=None, tx_capacity=MAX_PLAINTEXT,
                 rx_buf=None, static_public=None, rx_capacity=MAX_MESSAGE, tx_buf=None):
        self.initiator = bool(initiator)
        self._s = bytes(static_private)
        self._s_pub = static_public
        self._rng = rng
        self._ephemeral = ephemeral
        self._accept = patterns
        self.pattern = None
        self._rs = None
        if self.initiator:
            if pattern not in PATTERNS:
                raise NoiseStateError("UNKNOWN_PATTERN", "an initiator must choose IK or XX, not %r" % (pattern,))
            if pattern == "IK" and remote_static is None:
                raise NoiseStateError("MISSING_KEY", "IK needs the core's pinned static key")
            self.pattern = pattern
            if remote_static is not None:
                self._rs = bytes(remote_static)
        if tx_capacity > MAX_PLAINTEXT or tx_capacity < 1:
            raise NoiseStateError("BAD_CAPACITY", "tx_capacity must be 1..65519")
        self.on_plaintext = on_plaintext
        if rx_buf is None:
            if rx_capacity < MIN_RX_MESSAGE or rx_capacity > MAX_MESSAGE:
                raise NoiseStateError("BAD_CAPACITY", "rx_capacity must be %d..65535" % MIN_RX_MESSAGE)
            rx_buf = bytearray(rx_capacity)
        if len(rx_buf) < MIN_RX_MESSAGE:
            raise NoiseStateError("BAD_CAPACITY", "rx_buf must hold at least %d bytes (a handshake message)"
                                  % MIN_RX_MESSAGE)
        self._rx = rx_buf
        self.rx_capacity = len(rx_buf) if len(rx_buf) < MAX_MESSAGE else MAX_MESSAGE
        self.tx_capacity = tx_capacity
        if tx_buf is None:
            tx_buf = bytearray(tx_capacity + _LEN_PREFIX + _TAGLEN)
        elif len(tx_buf) < tx_capacity + _LEN_PREFIX + _TAGLEN:
            raise NoiseStateError("BAD_CAPACITY", "tx_buf must hold tx_capacity + 18 bytes")
        self.tx_buf = tx_buf
        self.tx_plain = memoryview(self.tx_buf)[_LEN_PREFIX:]
        self._hdr = 0  # header bytes seen of the current message (0..2)
        self._len = 0  # its length once the header is complete
        self._got = 0  # body bytes buffered
        self._out = bytearray()
        self._plain = None
        self._hs = None
        self._send = None
        self._recv = None
        self._offer_seen = self.initiator
        self._started = False
        self.closed = False
        self.error = None
        self.handshake_done = False
        self.remote_static = None
        self.handshake_hash = None

    # -- internals ----------------------------------------------------------------------------
    def _fail(self, exc):
        self.closed = True
        self.error = exc
        self._hs = None
        self._send = None
        self._recv = None
        raise exc

    def _alive(self):
        if self.closed:
            raise NoiseStateError("CLOSED", "this Noise connection is closed (%s); open a new one"
                                  % (self.error.code if self.error is not None else "closed"))

    def _emit(self, body):
        n = len(body)
        self._out.append(n >> 8)
        self._out.append(n & 0xFF)
        self._out += body

    def _new_hs(self, pattern, name):
        return HandshakeState(pattern, self.initiator, name, self._s, self._rs, self._ephemeral,
                              self._rng, name, self._s_pub)

    # -- handshake ----------------------------------------------------------------------------
    def start(self):
        self._alive()
        if self._started:
            raise NoiseStateError("WRONG_STATE", "start() was already called")
        self._started = True
        if self.initiator:
            name = protocol_name(self.pattern).encode()
            try:
                self._hs = self._new_hs(self.pattern, name)
                self._emit(name)
                self._emit(self._hs.write_message(_EMPTY))
            except NoiseError as e:
                self._fail(e)
        return self.data_to_send()

    def data_to_send(self):
        out = bytes(self._out)
        self._out = bytearray()
        return out

    def _handshake_message(self, n):
        body = bytes(self._rx[:n])
        if not self._offer_seen:
            if body not in NAMES or body[6:8].decode() not in self._accept:
                raise HandshakeError("UNSUPPORTED_PROTOCOL", "the peer offered Noise protocol %r; accepted: %s"
                                     % (body[:64], ", ".join(protocol_name(p) for p in self._accept)))
            self._offer_seen = True
            self.pattern = body[6:8].decode()
            self._hs = self._new_hs(self.pattern, body)
            return
        hs = self._hs
        if hs.my_turn():
            raise HandshakeError("UNEXPECTED_MESSAGE", "the peer sent a handshake message out of turn")
        try:
            payload = hs.read_message(body)
        except HandshakeError as e:
            if self.initiator and self.pattern == "IK" and e.code == "DECRYPT_FAILED":
                raise HandshakeError("IK_KEY_MISMATCH", IK_MISMATCH_MSG)
            raise
        if payload:
            raise HandshakeError("HANDSHAKE_PAYLOAD", "the peer put %d bytes in a handshake payload; the "
                                 "Alabama binding sends empty payloads" % len(payload))
        if not hs.complete:
            self._emit(hs.write_message(_EMPTY))
        if hs.complete:
            self._send = hs.cipher_send
            self._recv = hs.cipher_recv
            self.remote_static = hs.rs
            self.handshake_hash = hs.handshake_hash
            self.handshake_done = True
            self._hs = None

    # -- receive ------------------------------------------------------------------------------
    def receive(self, data):
        self.receive_into(data, 0, len(data))

    def receive_into(self, src, start, end):
        """Consume src[start:end]. Steady-state transport messages allocate nothing."""
        if self.closed:
            self._alive()
        if not self._started:
            self.start()
        try:
            while True:
                if self._hdr < _LEN_PREFIX:
                    if start >= end:
                        return
                    self._len = (self._len << 8) | src[start]
                    start += 1
                    self._hdr += 1
                    if self._hdr < _LEN_PREFIX:
                        continue
                    if not self._offer_seen and self._len > _MAX_OFFER:
                        raise HandshakeError("UNSUPPORTED_PROTOCOL", "the peer offered a %d-byte protocol name; "
                                             "only Noise_IK/XX_25519_ChaChaPoly_SHA256 are accepted" % self._len)
                    if self._len > self.rx_capacity:
                        self._too_large()
                k = self._len - self._got
                if k > end - start:
                    k = end - start
                if k > 0:
                    _copy(self._rx, self._got, src, start, k)
                    start += k
                    self._got += k
                if self._got < self._len:
                    return
                n = self._len
                self._hdr = 0
                self._len = 0
                self._got = 0
                if self.handshake_done:
                    m = self._recv.decrypt_into(_EMPTY, self._rx, n, self._rx)
                    if self.on_plaintext is not None:
                        self.on_plaintext(self._rx, 0, m)
                    else:
                        self._queue(m)
                else:
                    self._handshake_message(n)
        except NoiseError as e:
            self._fail(e)

    def _too_large(self):
        msg = ("the peer sent a %d-byte Noise message; this end receives at most %d (its max_frame_bytes plus "
               "the 16-byte tag): a core must not send a frame over the max_frame_bytes we advertised, nor put "
               "several frames in one Noise message beyond it" % (self._len, self.rx_capacity))
        if self.handshake_done:
            raise TransportError("MESSAGE_TOO_LARGE", msg)
        raise HandshakeError("MESSAGE_TOO_LARGE", msg)

    def _queue(self, m):
        if self._plain is None:
            self._plain = bytearray()
        self._plain += memoryview(self._rx)[:m]

    def read_plaintext(self):
        """Queued plaintext (only when on_plaintext is None); allocates, for tests and simple drivers."""
        if self._plain is None:
            return _EMPTY
        out = bytes(self._plain)
        self._plain = None
        return out

    def receive_eof(self):
        if self.closed:
            return
        if not self.handshake_done and self._started:
            if self.initiator and self.pattern == "IK":
                self._fail(HandshakeError("IK_KEY_MISMATCH", "the core closed the connection during the IK "
                                          "handshake, which is what it does when " + IK_MISMATCH_MSG))
            self._fail(HandshakeError("EOF", "the peer closed the connection during the Noise handshake"))
        if self._hdr or self._got:
            self._fail(TransportError("EOF", "the peer closed the connection in the middle of a Noise message"))
        self.closed = True

    # -- send ---------------------------------------------------------------------------------
    def encrypt_buffer(self, n):
        """Encrypt tx_plain[0:n] in place; return the byte count to write from tx_buf. No allocation."""
        self._alive()
        if not self.handshake_done:
            raise NoiseStateError("WRONG_STATE", "cannot send application data before the Noise handshake completes")
        if n > self.tx_capacity:
            raise NoiseStateError("PLAINTEXT_TOO_LARGE", "at most tx_capacity plaintext bytes per message")
        try:
            c = self._send.encrypt_into(_EMPTY, self.tx_plain, n, self.tx_plain)
        except NoiseError as e:
            self._fail(e)
        self.tx_buf[0] = c >> 8
        self.tx_buf[1] = c & 0xFF
        return c + _LEN_PREFIX

    def encrypt_from(self, src, start, end):
        """Copy src[start:end] (<= tx_capacity bytes) into tx_plain and encrypt it; as encrypt_buffer."""
        n = end - start
        if n > self.tx_capacity:
            raise NoiseStateError("PLAINTEXT_TOO_LARGE", "at most tx_capacity plaintext bytes per message")
        _copy(self.tx_buf, _LEN_PREFIX, src, start, n)
        return self.encrypt_buffer(n)

    def encrypt(self, data):
        """Length-prefixed transport messages for data of any length (allocates)."""
        out = bytearray()
        pos = 0
        end = len(data)
        while pos < end:
            k = end - pos
            if k > self.tx_capacity:
                k = self.tx_capacity
            t = self.encrypt_from(data, pos, pos + k)
            out += memoryview(self.tx_buf)[:t]
            pos += k
        return bytes(out)

    def close(self):
        self.closed = True
        self._hs = None
        self._send = None
        self._recv = None
