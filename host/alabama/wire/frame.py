"""Alabama frame codec for the host (spec §6, §6.1): frames bytes and splits a plaintext stream into
frames; it never does I/O and treats the Envelope as opaque bytes, with one exception: the per-frame
fast path of the core (``split_frame`` + ``parse_chunk_header``) reads a canonical StreamChunk header
without protobuf, and gives up (None) on any other shape so protobuf decides. All varints here are
read by ``read_varint``.

A frame is ``varint total_len | varint header_len | Envelope | raw tail``, total_len counting
everything after its own varint. This is the CPython twin of ``firmware/satellite/wire/frame.py``
with the same constants, error codes and limit rules, so the two can be cross-tested:

* before :meth:`FrameDecoder.set_limit` the whole frame, length prefix included, must fit
  ``HANDSHAKE_CEILING`` (one Noise transport message, R6.1-a), else ``FrameError FRAME_TOO_LARGE``;
* a frame whose total_len exceeds the limit is reported as :class:`Oversize` (its header, if it can
  be held, so the caller can answer Error{FRAME_TOO_LARGE} on its id, R6.1-c) and its remainder is
  discarded as it arrives; if the header cannot be held: ``FrameError HEADER_TOO_LARGE`` (close);
* the decoder retains at most one incomplete frame (bounded by ``buffer_size``) between calls.
"""

from collections import deque
from typing import Iterator, NamedTuple, Optional, Union

from alabama.errors import AlabamaError

#: Largest total_len that rides one Noise message (65519 less the 3-byte varint); 0 on the wire means this.
DEFAULT_MAX_FRAME_BYTES = 65516
#: Noise transport plaintext limit (65535 less the 16-byte tag): pre-negotiation whole-frame ceiling.
HANDSHAKE_CEILING = 65519
#: A uint32 varint is at most 5 bytes; a 6th continuation byte is an error.
VARINT_MAX_BYTES = 5
#: Both prefix varints at their longest; a decoder's buffer holds limit + this.
PREFIX_MAX_BYTES = 10
UINT32_MAX = 0xFFFFFFFF

VARINT_TOO_LONG = "VARINT_TOO_LONG"
HEADER_LEN_OVER_TOTAL = "HEADER_LEN_OVER_TOTAL"
HEADER_TOO_LARGE = "HEADER_TOO_LARGE"
FRAME_TOO_LARGE = "FRAME_TOO_LARGE"

_ADVICE = {
    VARINT_TOO_LONG: "the peer sent a corrupt length prefix: close the connection",
    HEADER_LEN_OVER_TOTAL: "the peer sent an inconsistent frame: close the connection",
    HEADER_TOO_LARGE: "the over-limit frame's header cannot be held: close the connection",
    FRAME_TOO_LARGE: "keep frames under the receiver's max_frame_bytes (chunk the tail or stream it)",
}


class FrameError(AlabamaError):
    """A framing violation; ``code`` matches the firmware's FrameError codes."""

    def __init__(self, code: str, message: str):
        super().__init__("%s: %s; %s" % (code, message, _ADVICE.get(code, "close the connection")))
        self.code = code
        self.message = message


class Frame(NamedTuple):
    """A complete frame: the opaque Envelope bytes and the raw tail."""

    header: bytes
    tail: bytes


class Oversize(NamedTuple):
    """A frame over the receive limit: its Envelope bytes (answer Error{FRAME_TOO_LARGE} on its id)
    and the total_len it claimed; the rest of it is discarded unbuffered."""

    header: bytes
    total_len: int


Event = Union[Frame, Oversize]


# --------------------------------------------------------------------------------------- writing

def varint(v: int) -> bytes:
    """Minimal protobuf varint of a uint32."""
    if not 0 <= v <= UINT32_MAX:
        raise FrameError(FRAME_TOO_LARGE, "length %d is not a uint32" % v)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def frame_total_len(header_len: int, tail_len: int) -> int:
    return len(varint(header_len)) + header_len + tail_len


def frame_size(header_len: int, tail_len: int) -> int:
    """Bytes of the whole frame on the wire, total_len varint included."""
    t = frame_total_len(header_len, tail_len)
    return len(varint(t)) + t


def check_limit(total_len: int, peer_max: int) -> None:
    """A sender MUST NOT emit total_len over the peer's max_frame_bytes (0 -> default; R6.1-b)."""
    limit = peer_max or DEFAULT_MAX_FRAME_BYTES
    if total_len > limit:
        raise FrameError(FRAME_TOO_LARGE, "frame total_len %d over the peer's max_frame_bytes %d"
                         % (total_len, limit))


def check_handshake(total_len: int) -> None:
    """A pre-negotiation frame must fit one Noise transport message, prefix included (R6.1-a)."""
    whole = total_len + len(varint(total_len))
    if whole > HANDSHAKE_CEILING:
        raise FrameError(FRAME_TOO_LARGE, "handshake frame of %d bytes over the %d-byte ceiling"
                         % (whole, HANDSHAKE_CEILING))


def encode_frame(header: bytes, tail: bytes = b"") -> bytes:
    """The whole frame as bytes (no limit check: see check_limit / FrameEncoder)."""
    hl = varint(len(header))
    return varint(len(hl) + len(header) + len(tail)) + hl + bytes(header) + bytes(tail)


class FrameEncoder:
    """Sender with limits: the handshake ceiling until set_peer_limit(), then the peer's limit."""

    def __init__(self) -> None:
        self.peer_max: Optional[int] = None

    def set_peer_limit(self, peer_max: int) -> None:
        if not 0 <= peer_max <= UINT32_MAX:
            raise ValueError("max_frame_bytes must be a uint32")
        self.peer_max = peer_max or DEFAULT_MAX_FRAME_BYTES

    def encode(self, header: bytes, tail: bytes = b"") -> bytes:
        total = frame_total_len(len(header), len(tail))
        if self.peer_max is None:
            check_handshake(total)
        else:
            check_limit(total, self.peer_max)
        return encode_frame(header, tail)


# --------------------------------------------------------------------------------------- reading

def read_varint(buf, pos: int, end: int, what: str = "varint", bits: int = 32):
    """The one varint reader: (value, next_pos) of the unsigned varint at ``buf[pos:end]``, or
    (None, pos_needed) when it is incomplete. One that does not fit ``bits`` bits (5 bytes for 32, 10
    for 64) raises FrameError VARINT_TOO_LONG. Runs on every frame: one loop, no allocation."""
    v = shift = 0
    top = bits - 7
    while pos < end:
        c = buf[pos]
        pos += 1
        if shift >= top and c >> (bits - shift):
            raise FrameError(VARINT_TOO_LONG, "%s varint over %d bytes / %d bits" % (what, (bits + 6) // 7, bits))
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, pos
        shift += 7
    return None, pos + 1


def split_frame(buf, pos: int, end: int, limit: int):
    """(header_start, header_end, frame_end) of the complete, well-formed frame at ``buf[pos:end]``
    with 0 < total_len <= ``limit``; None whenever the FrameDecoder must decide instead (incomplete,
    total_len 0, over the limit, a malformed prefix). The core's per-frame fast path: no copy."""
    try:
        total, p = read_varint(buf, pos, end, "total_len")
        if total is None or total == 0 or total > limit:
            return None
        fend = p + total
        if fend > end:
            return None
        hl = buf[p]
        if hl < 0x80:                   # the usual one-byte header_len, without the call
            h = p + 1
        else:
            hl, h = read_varint(buf, p, fend, "header_len")
    except FrameError:
        return None
    if hl is None or hl > fend - h:
        return None
    return h, h + hl, fend


def parse_chunk_header(h):
    """(id, seq, capture_ts) when ``h`` is exactly a canonical ``Envelope{id, stream_chunk{seq,
    capture_ts}}`` (fields in that order, each at most once, nothing else, id/seq below 2**32); None
    for anything else (the caller then decodes it with pb2, so every other shape keeps protobuf's
    own semantics). Runs once per audio frame of the core."""
    n = len(h)
    pos = 0
    id_ = seq = ts = 0
    try:
        if n > 1 and h[0] == 0x08:                  # id (uint32)
            id_ = h[1]
            if id_ < 0x80:                          # the usual one-byte id, without the call
                pos = 2
            else:
                id_, pos = read_varint(h, 1, n)
                if id_ is None:
                    return None
        elif n and h[0] == 0x08:
            return None
        if pos + 2 > n or h[pos] != 0x42 or h[pos + 1] >= 0x80 or pos + 2 + h[pos + 1] != n:
            return None                             # stream_chunk (field 8, one-byte length) ends the header
        pos += 2
        if pos < n and h[pos] == 0x08:              # seq (uint32)
            seq, pos = read_varint(h, pos + 1, n)
            if seq is None:
                return None
        if pos < n and h[pos] == 0x10:              # capture_ts (uint64)
            ts, pos = read_varint(h, pos + 1, n, "capture_ts", 64)
            if ts is None:
                return None
    except FrameError:
        return None
    if pos != n:
        return None
    return id_, seq, ts


class FrameDecoder:
    """Incremental decoder: ``feed(data)`` then iterate for :class:`Frame` / :class:`Oversize`.

    ``max_frame_bytes`` sizes the (virtual) buffer like the firmware's FrameReader:
    ``buffer_size`` defaults to ``max_frame_bytes + PREFIX_MAX_BYTES``; total_len up to
    ``buffer_size - PREFIX_MAX_BYTES`` is accepted before set_limit (plus the handshake ceiling),
    and set_limit(n) applies ``min(n or DEFAULT, buffer_size - PREFIX_MAX_BYTES)``.

    A FrameError is raised from iteration after the events that preceded it, and from every later
    feed(): the stream is out of sync and the connection must close.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, buffer_size: Optional[int] = None):
        if buffer_size is None:
            buffer_size = (max_frame_bytes or DEFAULT_MAX_FRAME_BYTES) + PREFIX_MAX_BYTES
        if buffer_size <= PREFIX_MAX_BYTES:
            raise ValueError("frame buffer must exceed %d bytes" % PREFIX_MAX_BYTES)
        self._cap = buffer_size
        self._room = buffer_size - PREFIX_MAX_BYTES
        self._limit = self._room
        self._handshake = True
        self._buf = bytearray()   # one incomplete frame (or prefix), never more than _cap bytes
        self._skip = 0            # remainder of an over-limit frame to discard
        self._events: deque = deque()
        self._error: Optional[FrameError] = None

    @property
    def limit(self) -> int:
        return self._limit

    def set_limit(self, max_frame_bytes: int) -> None:
        """Apply our advertised receive limit (0 -> default); the buffer size wins if smaller."""
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be a uint32")
        self._limit = min(max_frame_bytes or DEFAULT_MAX_FRAME_BYTES, self._room)
        self._handshake = False

    def buffered(self) -> int:
        return len(self._buf)

    def _parse(self, buf, start: int, end: int):
        """(event, bytes_used) or (None, bytes_needed_from_start)."""
        total, p = read_varint(buf, start, end, "total_len")
        if total is None:
            return None, p - start
        plen = p - start
        if self._handshake and total + plen > HANDSHAKE_CEILING:
            raise FrameError(FRAME_TOO_LARGE, "handshake frame of %d bytes over the %d-byte ceiling"
                             % (total + plen, HANDSHAKE_CEILING))
        if total == 0:
            raise FrameError(HEADER_LEN_OVER_TOTAL, "total_len 0 leaves no room for header_len")
        body = p
        # The header_len varint must lie within total_len.
        hl, p = read_varint(buf, body, min(end, body + total), "header_len")
        if hl is None:
            if p > body + total:
                raise FrameError(HEADER_LEN_OVER_TOTAL, "header_len varint runs past total_len")
            return None, p - start
        if hl > total - (p - body):
            raise FrameError(HEADER_LEN_OVER_TOTAL, "header_len %d over total_len %d less its varint"
                             % (hl, total))
        hend = p + hl
        if total <= self._limit:
            fend = body + total
            if fend > end:
                return None, fend - start
            return Frame(bytes(buf[p:hend]), bytes(buf[hend:fend])), fend - start
        if hend - start > self._cap:
            raise FrameError(HEADER_TOO_LARGE, "frame of %d bytes over the %d limit with a %d-byte header"
                             % (total, self._limit, hl))
        if hend > end:
            return None, hend - start
        self._skip = body + total - hend
        return Oversize(bytes(buf[p:hend]), total), hend - start

    def feed(self, data) -> None:
        """Take all of ``data`` (bytes-like); parsed events queue up for iteration."""
        if self._error is not None:
            raise self._error
        mv = memoryview(data).cast("B")
        pos, n = 0, len(mv)
        try:
            while True:
                if self._skip:
                    k = min(self._skip, n - pos)
                    self._skip -= k
                    pos += k
                if pos >= n:
                    break
                if self._buf:
                    # top up the held partial frame with just what the next decision needs
                    ev, k = self._parse(self._buf, 0, len(self._buf))
                    while ev is None and pos < n:
                        take = min(k - len(self._buf), n - pos)
                        self._buf += mv[pos:pos + take]
                        pos += take
                        ev, k = self._parse(self._buf, 0, len(self._buf))
                    if ev is None:
                        break
                    extra = len(self._buf) - k
                    if extra > 0:
                        # set_limit() lowered the limit after this partial frame was held: it is now an
                        # over-limit frame, and the held bytes past its header belong to the remainder
                        # being discarded (the buffer never holds bytes past one frame's end).
                        self._skip -= extra
                    self._events.append(ev)
                    self._buf = bytearray()
                    continue
                ev, k = self._parse(mv, pos, n)
                if ev is None:
                    self._buf += mv[pos:n]
                    pos = n
                    break
                self._events.append(ev)
                pos += k
        except FrameError as e:
            self._error = e
            self._events.append(e)
            self._buf = bytearray()

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        if not self._events:
            if self._error is not None:
                raise self._error  # the stream stays broken
            raise StopIteration
        ev = self._events.popleft()
        if isinstance(ev, FrameError):
            raise ev
        return ev

    def events(self) -> list:
        """All queued events as a list (raises FrameError where the stream broke)."""
        return list(self)
