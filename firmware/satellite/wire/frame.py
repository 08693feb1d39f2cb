# Alabama frame codec (spec §6, §6.1): splits the plaintext stream into frames and writes frame prefixes; it never decodes the Envelope and never does I/O.
#
# A frame on the wire:  varint total_len | varint header_len | Envelope (header_len bytes) | raw tail
# total_len counts everything after its own varint. Varints are protobuf base-128, little-endian
# groups, at most 5 bytes for a uint32; a non-minimal encoding of <= 5 bytes is accepted, as
# protobuf accepts it.
#
# Limits, and which length each one bounds:
#   * max_frame_bytes (negotiated, per direction) bounds total_len (§6.1, §10.10). 0 on the wire
#     means DEFAULT_MAX_FRAME_BYTES.
#   * HANDSHAKE_CEILING bounds the WHOLE frame, its total_len varint included, before set_limit():
#     Hello/HelloResponse must fit one Noise transport message, whose plaintext is at most 65519
#     bytes (R6.1-a). A frame over it raises FrameError FRAME_TOO_LARGE (rejected outright: the
#     caller closes). Note 65516 + len(varint(65516)) == 65519, so with minimal varints the
#     ceiling admits exactly total_len <= DEFAULT_MAX_FRAME_BYTES.
#   * The reader's buffer bounds everything it holds: a buffer of B bytes accepts total_len up to
#     B - PREFIX_MAX_BYTES (room for both varints at their longest), and can expose the header of an
#     over-limit frame only if varints + header fit in B bytes.

from micropython import const

try:
    from ._copy_viper import copy
except (ImportError, SyntaxError, NotImplementedError, MemoryError):
    # CPython, or a port without viper; MemoryError: on a board its native code found no room (issue 17)
    from ._copy import copy

# The largest frame (total_len) that rides one Noise transport message: 65519 plaintext bytes less
# the 3-byte varint of 65516. A peer advertising max_frame_bytes = 0 means this (§6.1).
DEFAULT_MAX_FRAME_BYTES = const(65516)
# Noise transport message plaintext limit: 65535-byte message less its 16-byte Poly1305 tag (§5.1.2).
# Before negotiation the whole frame (length prefix included) must fit in it (§6.1, R6.1-a).
HANDSHAKE_CEILING = const(65519)
# A uint32 varint is at most 5 bytes (5 * 7 = 35 >= 32 bits); a 6th continuation byte is an error.
VARINT_MAX_BYTES = const(5)
# Both prefix varints at their longest: the reader's buffer is sized limit + this.
PREFIX_MAX_BYTES = const(10)
UINT32_MAX = const(0xFFFFFFFF)

# What FrameReader.next() returns.
NEED_MORE = const(0)  # no complete event buffered: feed more bytes
FRAME = const(1)      # a complete frame: header_start/header_end/tail_start/tail_end index buf
OVERSIZE = const(2)   # total_len over the limit: header indices valid, rest of the frame discarded

# Error codes (FrameError.code).
VARINT_TOO_LONG = "VARINT_TOO_LONG"              # 6th continuation byte, or a value over 32 bits
HEADER_LEN_OVER_TOTAL = "HEADER_LEN_OVER_TOTAL"  # header_len varint + header_len > total_len
HEADER_TOO_LARGE = "HEADER_TOO_LARGE"            # an over-limit frame whose header cannot be held: close
FRAME_TOO_LARGE = "FRAME_TOO_LARGE"              # over the handshake ceiling, or over the peer's limit (send)

_CONT = const(0x80)
_LOW7 = const(0x7F)


class FrameError(Exception):
    """A framing violation. ``code`` is one of the codes above; the connection cannot continue
    (except FRAME_TOO_LARGE from check_limit/FrameWriter, which concerns a frame not yet sent)."""

    def __init__(self, code, message):
        super().__init__(code + ": " + message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------------------------------------
# Writing

def varint_size(v):
    """Bytes of the minimal varint encoding of 0 <= v <= UINT32_MAX."""
    if v < 0x80:
        return 1
    if v < 0x4000:
        return 2
    if v < 0x200000:
        return 3
    if v < 0x10000000:
        return 4
    return 5


def write_varint(buf, pos, v):
    """Write v as a minimal varint into buf at pos; return the position after it."""
    while v >= _CONT:
        buf[pos] = (v & _LOW7) | _CONT
        v >>= 7
        pos += 1
    buf[pos] = v
    return pos + 1


def frame_total_len(header_len, tail_len):
    """total_len of a frame: the header_len varint, the header and the tail."""
    return varint_size(header_len) + header_len + tail_len


def frame_size(header_len, tail_len):
    """Bytes the whole frame occupies on the wire, its total_len varint included."""
    t = frame_total_len(header_len, tail_len)
    return varint_size(t) + t


def check_limit(total_len, peer_max):
    """Raise FrameError FRAME_TOO_LARGE if total_len exceeds the peer's max_frame_bytes
    (0 means DEFAULT_MAX_FRAME_BYTES). A sender MUST NOT emit such a frame (R6.1-b, §10.10)."""
    limit = peer_max if peer_max else DEFAULT_MAX_FRAME_BYTES
    if total_len > limit:
        raise FrameError(FRAME_TOO_LARGE, "frame total_len %d over the peer's max_frame_bytes %d: "
                         "chunk the tail or stream the content" % (total_len, limit))


def check_handshake(total_len):
    """Raise FrameError FRAME_TOO_LARGE if a pre-negotiation frame would not fit one Noise
    transport message (whole frame, prefix included, <= HANDSHAKE_CEILING; R6.1-a)."""
    if total_len + varint_size(total_len) > HANDSHAKE_CEILING:
        raise FrameError(FRAME_TOO_LARGE, "handshake frame of %d bytes over the %d-byte ceiling: "
                         "shrink the Hello" % (total_len + varint_size(total_len), HANDSHAKE_CEILING))


def write_frame_prefix(buf, pos, header_len, tail_len):
    """Write varint(total_len) and varint(header_len) into buf at pos; return the position where
    the Envelope must be encoded (then the tail after it). Checks only that the values are uint32
    and that the prefix fits buf; limits are check_limit()'s job (or use FrameWriter)."""
    if header_len < 0 or tail_len < 0:
        raise FrameError(FRAME_TOO_LARGE, "negative frame length")
    total = frame_total_len(header_len, tail_len)
    if total > UINT32_MAX:
        raise FrameError(FRAME_TOO_LARGE, "frame total_len over 32 bits")
    if pos + varint_size(total) + varint_size(header_len) > len(buf):
        raise FrameError(FRAME_TOO_LARGE, "frame prefix does not fit the output buffer")
    pos = write_varint(buf, pos, total)
    return write_varint(buf, pos, header_len)


def encode_frame(header_bytes, tail=b""):
    """The whole frame as new bytes (allocates; for tests, tools and cold paths)."""
    hl = len(header_bytes)
    out = bytearray(frame_size(hl, len(tail)))
    pos = write_frame_prefix(out, 0, hl, len(tail))
    out[pos:pos + hl] = header_bytes
    out[pos + hl:] = tail
    return bytes(out)


class FrameWriter:
    """Sender-side limits: the handshake ceiling until set_peer_limit(), then the peer's
    max_frame_bytes. prefix() checks the limit and writes the two varints into a caller buffer."""

    def __init__(self):
        self.peer_max = -1  # -1: not negotiated yet, the handshake ceiling applies

    def set_peer_limit(self, peer_max):
        """Apply the peer's advertised max_frame_bytes (0 means DEFAULT_MAX_FRAME_BYTES)."""
        if peer_max < 0 or peer_max > UINT32_MAX:
            raise ValueError("max_frame_bytes must be a uint32")
        self.peer_max = peer_max if peer_max else DEFAULT_MAX_FRAME_BYTES

    def check(self, header_len, tail_len):
        """Raise FrameError FRAME_TOO_LARGE if this frame may not be sent now; return total_len."""
        total = frame_total_len(header_len, tail_len)
        if self.peer_max < 0:
            check_handshake(total)
        else:
            check_limit(total, self.peer_max)
        return total

    def prefix(self, buf, pos, header_len, tail_len):
        """check() then write_frame_prefix(); returns where the Envelope goes."""
        self.check(header_len, tail_len)
        return write_frame_prefix(buf, pos, header_len, tail_len)


# ---------------------------------------------------------------------------------------------
# Reading

class FrameReader:
    """Incremental frame reader over one buffer allocated up front (or passed in).

    Drive it as: ``k = r.feed(data, pos, end)`` (copies what fits, returns bytes consumed) then
    ``r.next()`` until it returns NEED_MORE, then feed the rest. Any split of the input works.

    After FRAME: ``buf[header_start:header_end]`` is the Envelope and ``buf[tail_start:tail_end]``
    the raw tail. After OVERSIZE: the header indices are valid (``tail_start == tail_end``), and
    ``total_len`` holds the claimed length; the rest of the frame is discarded as it arrives,
    never buffered, so the caller can answer Error{FRAME_TOO_LARGE} on the envelope id (R6.1-c)
    and carry on. Indices and views point into the shared buffer: valid until the next feed().

    Steady state allocates nothing (the viper copy moves bytes, compaction reuses the buffer).
    """

    def __init__(self, max_frame_bytes=DEFAULT_MAX_FRAME_BYTES, buf=None):
        if buf is None:
            if not max_frame_bytes:
                max_frame_bytes = DEFAULT_MAX_FRAME_BYTES
            if max_frame_bytes < 1:
                raise ValueError("max_frame_bytes must be positive")
            buf = bytearray(max_frame_bytes + PREFIX_MAX_BYTES)
        if len(buf) <= PREFIX_MAX_BYTES:
            raise ValueError("frame buffer must exceed %d bytes" % PREFIX_MAX_BYTES)
        self._buf = buf
        self.buf = memoryview(buf)
        self._cap = len(buf)
        # Largest total_len the buffer always holds, whatever the varint encodings' lengths.
        self._room = self._cap - PREFIX_MAX_BYTES
        self._limit = self._room
        self._handshake = True
        self._rd = 0     # start of unparsed bytes
        self._wr = 0     # end of buffered bytes
        self._skip = 0   # bytes of an over-limit frame still to discard from the input
        self.header_start = 0
        self.header_end = 0
        self.tail_start = 0
        self.tail_end = 0
        self.total_len = 0

    @property
    def limit(self):
        """The total_len limit in force (before set_limit: the buffer's room; the handshake
        ceiling is checked on top)."""
        return self._limit

    def set_limit(self, max_frame_bytes):
        """Apply our negotiated receive limit (the max_frame_bytes we advertised); 0 means
        DEFAULT_MAX_FRAME_BYTES. A limit larger than the buffer can hold is cut to the buffer's
        room (len(buf) - PREFIX_MAX_BYTES): the buffer size wins. Ends the handshake ceiling."""
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be a uint32")
        if not max_frame_bytes:
            max_frame_bytes = DEFAULT_MAX_FRAME_BYTES
        self._limit = max_frame_bytes if max_frame_bytes < self._room else self._room
        self._handshake = False

    def buffered(self):
        """Bytes held and not yet returned as events."""
        return self._wr - self._rd

    def feed(self, data, start=0, end=None):
        """Take bytes data[start:end]; return how many were consumed (copied or discarded).

        Fewer than offered are consumed when the buffer is full: call next() to release frames,
        then feed the remainder. Invalidates indices and views of earlier events."""
        if end is None:
            end = len(data)
        n = end - start
        if n <= 0:
            return 0
        used = 0
        if self._skip:  # the unbuffered rest of an over-limit frame
            k = self._skip if self._skip < n else n
            self._skip -= k
            if k == n:
                return n
            start += k
            n -= k
            used = k
        rd = self._rd
        wr = self._wr
        if rd == wr:
            rd = wr = 0
        elif rd and wr + n > self._cap:  # compact: move the partial frame to the front
            wr -= rd
            copy(self.buf, 0, self.buf, rd, wr)
            rd = 0
        room = self._cap - wr
        k = n if n < room else room
        if k:
            copy(self.buf, wr, data, start, k)
            wr += k
        self._rd = rd
        self._wr = wr
        return used + k

    def next(self):
        """Parse the next event from the buffer: NEED_MORE, FRAME or OVERSIZE (see the class).

        Raises FrameError VARINT_TOO_LONG, HEADER_LEN_OVER_TOTAL, HEADER_TOO_LARGE, or (before
        set_limit) FRAME_TOO_LARGE; after any of these the stream is out of sync: close it."""
        if self._skip:
            return NEED_MORE
        b = self._buf
        rd = self._rd
        wr = self._wr
        # total_len varint
        p = rd
        total = 0
        shift = 0
        while True:
            if p == wr:
                return NEED_MORE
            c = b[p]
            p += 1
            if shift == 28:
                if c > 0x0F:  # a 6th byte would follow, or bits past 32
                    raise FrameError(VARINT_TOO_LONG, "total_len varint over 5 bytes / 32 bits")
                total |= c << 28
                break
            total |= (c & _LOW7) << shift
            if c < _CONT:
                break
            shift += 7
        plen = p - rd
        if self._handshake and total + plen > HANDSHAKE_CEILING:
            raise FrameError(FRAME_TOO_LARGE, "handshake frame of %d bytes over the %d-byte ceiling"
                             % (total + plen, HANDSHAKE_CEILING))
        if total == 0:
            raise FrameError(HEADER_LEN_OVER_TOTAL, "total_len 0 leaves no room for header_len")
        # header_len varint, which must lie inside total_len
        body = p
        hl = 0
        shift = 0
        while True:
            if p - body == total:
                raise FrameError(HEADER_LEN_OVER_TOTAL, "header_len varint runs past total_len")
            if p == wr:
                return NEED_MORE
            c = b[p]
            p += 1
            if shift == 28:
                if c > 0x0F:
                    raise FrameError(VARINT_TOO_LONG, "header_len varint over 5 bytes / 32 bits")
                hl |= c << 28
                break
            hl |= (c & _LOW7) << shift
            if c < _CONT:
                break
            shift += 7
        if hl > total - (p - body):
            raise FrameError(HEADER_LEN_OVER_TOTAL, "header_len %d over total_len %d less its varint"
                             % (hl, total))
        if total <= self._limit:
            end = body + total
            if end > wr:
                return NEED_MORE
            self.header_start = p
            self.header_end = p + hl
            self.tail_start = p + hl
            self.tail_end = end
            self.total_len = total
            self._rd = end
            return FRAME
        # Over the limit: expose the header if it can be held, discard the rest unbuffered.
        hend = p + hl
        if hend - rd > self._cap:
            raise FrameError(HEADER_TOO_LARGE, "frame of %d bytes over the %d limit with a %d-byte "
                             "header that cannot be held: close the connection" % (total, self._limit, hl))
        if hend > wr:
            return NEED_MORE
        self.header_start = p
        self.header_end = hend
        self.tail_start = hend
        self.tail_end = hend
        self.total_len = total
        rest = body + total - hend  # bytes of the frame after its header
        have = wr - hend
        if have >= rest:
            self._rd = hend + rest
        else:
            self._rd = wr
            self._skip = rest - have
        return OVERSIZE

    def frame_buffer(self):
        """The buffer every event's indices (header_start.., tail_start..) point into: fixed for the reader's
        life, so a caller may keep it (link.Link does, for allocation-free decode_into)."""
        return self._buf

    def header(self):
        """The last event's Envelope bytes: a view into the shared buffer, valid until the next
        feed() (a view object costs 32 bytes on micropython: use the indices on hot paths)."""
        return self.buf[self.header_start:self.header_end]

    def tail(self):
        """The last frame's raw tail: a view into the shared buffer, valid until the next feed()."""
        return self.buf[self.tail_start:self.tail_end]
