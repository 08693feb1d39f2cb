"""Thin asyncio driver for the sans-IO Noise binding: moves bytes between streams and NoiseConnection.

Responsible only for I/O: it holds no protocol logic (all of that is in ``transport.py``). Used by
tests and by the reference core. ``await open_connection(host, port, ...)`` (initiator) or
``await accept(reader, writer, ...)`` (responder, from an ``asyncio.start_server`` callback) returns
a ``NoiseStream`` once the handshake is complete, with ``send(plaintext)``, ``recv() -> bytes``
(b"" at a clean EOF), ``remote_static``, ``handshake_hash`` and ``close()``.
"""
import asyncio

from .state import NoiseError
from .transport import NoiseConnection

#: Bytes asked of the socket per read; any split works, this only sets the syscall size.
READ_CHUNK = 65536


class NoiseStream:
    """An established Noise connection over asyncio streams."""

    def __init__(self, conn, reader, writer):
        self.conn = conn
        self.reader = reader
        self.writer = writer

    @property
    def remote_static(self):
        return self.conn.remote_static

    @property
    def handshake_hash(self):
        return self.conn.handshake_hash

    @property
    def pattern(self):
        return self.conn.pattern

    async def send(self, plaintext):
        self.writer.write(self.conn.encrypt(plaintext))
        await self.writer.drain()

    async def recv(self):
        """The next decrypted plaintext bytes (any amount >= 1), or b"" when the peer closed."""
        while True:
            out = self.conn.read_plaintext()
            if out:
                return out
            data = await self.reader.read(READ_CHUNK)
            if not data:
                self.conn.receive_eof()
                return b""
            try:
                out = self.conn.decrypt_stream(data)
            except NoiseError:
                self.writer.close()
                raise
            if out:
                return out

    async def recv_exactly(self, n):
        buf = bytearray()
        while len(buf) < n:
            more = await self.recv()
            if not more:
                raise EOFError("peer closed after %d of %d bytes" % (len(buf), n))
            buf += more
        return bytes(buf)

    def close(self):
        self.conn.close()
        self.writer.close()

    async def wait_closed(self):
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def _handshake(conn, reader, writer):
    try:
        out = conn.start()
        while True:
            if out:
                writer.write(out)
                await writer.drain()
            if conn.handshake_done:
                return NoiseStream(conn, reader, writer)
            data = await reader.read(READ_CHUNK)
            if not data:
                conn.receive_eof()
                raise NoiseError("EOF", "the peer closed the connection during the Noise handshake")
            conn.receive(data)
            out = conn.data_to_send()
    except BaseException:
        writer.close()
        raise


async def open_connection(host, port, static_private, pattern, remote_static=None, **kw):
    """Connect as the Noise initiator and complete the handshake."""
    reader, writer = await asyncio.open_connection(host, port)
    conn = NoiseConnection(True, static_private, pattern=pattern, remote_static=remote_static, **kw)
    return await _handshake(conn, reader, writer)


async def accept(reader, writer, static_private, **kw):
    """Complete the responder side of the handshake on an accepted connection."""
    conn = NoiseConnection(False, static_private, **kw)
    return await _handshake(conn, reader, writer)
