# One connection's bytes: the non-blocking socket (write with a bounded backlog, read_some) and the framing
# over Noise (sans socket above the write/poll calls): receive = on_plaintext -> FrameReader -> decode_into a
# reused Envelope -> on_frame; send = ONE frame buffer (conn.tx_plain: prefix | Envelope | tail) encrypted in
# place and written as one Noise message (frame-granular, R10.1-a), never over the core's max_frame_bytes
# (R6.1-b) or our tx capacity. `connect` opens the non-blocking socket itself (beside write and read, as
# micropython-lib's asyncio stream module keeps open_connection next to Stream.write); it does not handshake or
# decide anything (satellite.runtime does), and it never interprets an Envelope (satellite.device does).
from micropython import const

from satellite.wire import alabama_v1 as pb
from satellite.wire import pb as codec
from satellite.wire import frame as F

POLL_MS = const(5)                 # socket poll period while connected (latency bound of the receive path)
_MAX_PENDING = const(65536)         # unsent bytes kept while the socket is full; past it the link is dead
_EAGAIN = const(11)                # errno of a non-blocking read with nothing there (lwIP and linux)


class LinkError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def read_some(sock, buf):
    """One read of a non-blocking socket into buf: the byte count (0: the peer closed), or None when nothing
    has arrived yet (EAGAIN). Any other OSError propagates (the caller says what was cut). satellite.ota's
    download uses it too."""
    try:
        return sock.readinto(buf)
    except OSError as e:
        if e.args and e.args[0] == _EAGAIN:
            return None
        raise


async def connect(host, port, timeout_ms, on_poll=None):
    """A non-blocking TCP socket connected to host:port within timeout_ms, or LinkError("CONNECT", ...).
    on_poll(now_ms) runs at every poll while it waits (the runtime feeds its watchdog there: the wait is bounded)."""
    import socket
    import select
    import asyncio
    from time import ticks_ms, ticks_diff
    ai = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0]
    s = socket.socket(ai[0], socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(ai[-1])
    except OSError as e:
        if not e.args or e.args[0] not in (115, 119, 11):   # EINPROGRESS (linux 115, lwIP 119), EAGAIN
            s.close()
            raise LinkError("CONNECT", "cannot connect to %s:%d: %s" % (host, port, e))
    p = select.poll()
    p.register(s, select.POLLOUT | select.POLLERR | select.POLLHUP)
    t0 = ticks_ms()
    while True:
        ev = p.poll(0)
        if ev:
            if ev[0][1] & (select.POLLERR | select.POLLHUP):
                s.close()
                raise LinkError("CONNECT", "cannot connect to %s:%d (refused)" % (host, port))
            return s
        now = ticks_ms()
        if ticks_diff(now, t0) > timeout_ms:
            s.close()
            raise LinkError("CONNECT", "connect to %s:%d timed out" % (host, port))
        if on_poll is not None:
            on_poll(now)
        await asyncio.sleep_ms(POLL_MS)


class Link:
    """A socket and the NoiseConnection over it, from the first handshake message on; `write(buf, n)` moves
    bytes out (kept in a backlog while the socket is full), `poll(buf)` reads what is there."""

    def __init__(self, sock, conn, max_frame_bytes, frame_buf=None):
        self.sock = sock
        self._pend = None
        self.conn = conn
        conn.on_plaintext = self._on_plain
        self.reader = F.FrameReader(max_frame_bytes, buf=frame_buf)
        self._fbuf = self.reader.frame_buffer()  # received frames live here (on_frame's buf)
        self.writer = F.FrameWriter()
        self.env = pb.Envelope()               # reused receive Envelope
        self.on_frame = None                   # on_frame(env, buf, tail_start, tail_end)
        self.on_oversize = None                # on_oversize(env_or_None, total_len)
        self.tx = conn.tx_plain                # the send frame buffer: begin/begin_raw write into it, seal
                                               # encrypts it in place (an attribute, not a method: Link's class
                                               # dict stays at 17 entries)
        self.cap = conn.tx_capacity
        self.frames_in = 0
        self.frames_out = 0

    def negotiated(self, our_max, peer_max):
        self.reader.set_limit(our_max)
        self.writer.set_peer_limit(peer_max)

    # -- the socket (non-blocking, polled) ------------------------------------------------------------------
    def pending_bytes(self):
        return len(self._pend) if self._pend else 0

    def write(self, buf, n):
        if self._pend:
            if len(self._pend) + n > _MAX_PENDING:
                raise LinkError("BACKLOG", "the core has not read %d bytes: connection considered dead" % _MAX_PENDING)
            self._pend += memoryview(buf)[:n]
            return
        try:
            k = self.sock.write(buf, n)
        except OSError as e:
            raise LinkError("WRITE", "socket write failed: %s" % e)
        if k is None:
            k = 0
        if k < n:
            self._pend = bytearray(memoryview(buf)[k:n])

    def flush(self):
        p = self._pend
        if not p:
            return
        try:
            k = self.sock.write(p)
        except OSError as e:
            raise LinkError("WRITE", "socket write failed: %s" % e)
        if k:
            self._pend = p[k:] if k < len(p) else None

    def poll(self, buf):
        """Flush the backlog, then one non-blocking read into buf: bytes read, or None when nothing came.
        Raises LinkError READ, or EOF when the core closed the connection."""
        self.flush()
        try:
            n = read_some(self.sock, buf)
        except OSError as e:
            raise LinkError("READ", "socket read failed: %s" % e)
        if n == 0:
            raise LinkError("EOF", "the core closed the connection")
        return n

    async def read(self, buf, timeout_ms):
        """poll() until something comes (the handshake); LinkError TIMEOUT after timeout_ms."""
        import time             # the handshake's wait only: imported here, two module globals fewer at rest
        import asyncio
        t0 = time.ticks_ms()
        while True:
            n = self.poll(buf)
            if n is not None:
                return n
            if timeout_ms and time.ticks_diff(time.ticks_ms(), t0) > timeout_ms:
                raise LinkError("TIMEOUT", "no answer from the core within %d ms" % timeout_ms)
            await asyncio.sleep_ms(POLL_MS)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self._pend = None

    # -- receive --------------------------------------------------------------------------------------
    def feed(self, buf, start, end):
        self.conn.receive_into(buf, start, end)

    def _on_plain(self, buf, start, end):
        r = self.reader
        fb = self._fbuf
        while start < end:
            start += r.feed(buf, start, end)
            while True:
                kind = r.next()
                if kind == F.NEED_MORE:
                    break
                env = self.env
                try:
                    codec.decode_into(env, fb, r.header_start, r.header_end)
                except ValueError as e:
                    if kind == F.OVERSIZE:
                        env = None
                    else:
                        # The frame boundary is intact but its header is not an Envelope: say so and close.
                        raise LinkError("DECODE", "undecodable frame header from the core: %s" % e)
                self.frames_in += 1
                if kind == F.OVERSIZE:
                    if self.on_oversize is not None:
                        self.on_oversize(env, r.total_len)
                    continue
                self.on_frame(env, fb, r.tail_start, r.tail_end)

    # -- send -----------------------------------------------------------------------------------------
    def begin_raw(self, hl, tail_len):
        """The frame prefix for an hl-byte Envelope the caller encodes itself (satellite.deferred's chunk
        header); returns where that header goes in `tx`. Then header + tail, then seal(end).
        Raises FrameError over the send buffer."""
        if F.frame_size(hl, tail_len) > self.cap:
            raise F.FrameError(F.FRAME_TOO_LARGE, "frame of %d bytes over the %d-byte send buffer"
                               % (F.frame_size(hl, tail_len), self.cap))
        return self.writer.prefix(self.tx, 0, hl, tail_len)

    def begin(self, env, tail_len):
        """Write prefix + Envelope into the frame buffer; return where the tail goes (the caller fills
        tail_len bytes there, then calls seal(pos + tail_len)). Raises FrameError over a limit."""
        return codec.encode_into(env, self.tx, self.begin_raw(codec.size(env), tail_len))

    def seal(self, n):
        total = self.conn.encrypt_buffer(n)
        self.frames_out += 1
        self.write(self.conn.tx_buf, total)

    def send(self, env):
        self.seal(self.begin(env, 0))

    def header_room(self, env):
        """Largest tail that still fits the core's limit and our buffer for this Envelope."""
        hl = codec.size(env)
        lim = self.writer.peer_max if self.writer.peer_max > 0 else F.DEFAULT_MAX_FRAME_BYTES
        lim = lim + F.varint_size(lim)                 # the limit bounds total_len, not the whole frame
        if self.cap < lim:
            lim = self.cap
        return lim - 10 - hl
