# The plain-HTTP fetch of over-the-air updates and the error every OTA module raises: a sans-IO response-head
# parser (HttpHead.feed), a GET that streams the body into a caller's sink through one caller-owned buffer,
# checking every length against its limit first. Used by satellite.ota (module sets), satellite.imgota (images)
# and satellite.release (signatures); it knows nothing of manifests, flash or slots.
import asyncio
from micropython import const
from time import ticks_ms, ticks_diff
from satellite.link import read_some     # loaded with the runtime: no heap of its own here

MAX_URL = const(256)            # a longer URL is refused before parsing
MAX_HEAD = const(1024)          # status line + headers of one HTTP response
IDLE_MS = const(10000)          # no byte for this long: the download is dead
POLL_MS = const(5)

# ErrorCode values (satellite.wire.alabama_v1 ErrorCode) without importing the codec here.
UNAVAILABLE = const(1)
INVALID_REQUEST = const(7)
INTERNAL_ERROR = const(8)
RESOURCE_EXHAUSTED = const(9)


class OtaError(Exception):
    """code: the ErrorCode on the wire; reason: a stable word for logs and Error.data."""

    def __init__(self, code, reason, message):
        super().__init__(message)
        self.code = code
        self.reason = reason


def _hex(b):
    return "".join("%02x" % x for x in b)


def _is_hex64(s):
    if type(s) is not str or len(s) != 64:
        return False
    for c in s:
        if c not in "0123456789abcdef":
            return False
    return True


def parse_url(url):
    """http://host[:port]/path -> (host, port, path). Only plain HTTP (the manifest pin is the integrity)."""
    if type(url) is not str or len(url) > MAX_URL:
        raise OtaError(INVALID_REQUEST, "BAD_URL", "url must be a string of at most %d characters" % MAX_URL)
    if not url.startswith("http://"):
        raise OtaError(INVALID_REQUEST, "BAD_URL", "url must start with http:// (got %r)" % url[:40])
    rest = url[7:]
    i = rest.find("/")
    hostport, path = (rest, "/") if i < 0 else (rest[:i], rest[i:])
    host, port = hostport, 80
    if ":" in hostport:
        host, _, p = hostport.rpartition(":")
        if not p.isdigit() or not 0 < int(p) < 65536:
            raise OtaError(INVALID_REQUEST, "BAD_URL", "bad port in %r" % url[:40])
        port = int(p)
    if not host:
        raise OtaError(INVALID_REQUEST, "BAD_URL", "no host in %r" % url[:40])
    return host, port, path


class HttpHead:
    """Sans-IO parser of one HTTP response head. feed(buf, n) -> offset of the first body byte in buf, or -1
    while the head is incomplete. Then status and length (Content-Length, required: without it a cut
    download could not be told from a complete one)."""

    def __init__(self):
        self.raw = bytearray()
        self.status = 0
        self.length = -1

    def feed(self, buf, n):
        start = len(self.raw)
        self.raw.extend(memoryview(buf)[:n])
        end = bytes(self.raw).find(b"\r\n\r\n")
        if end < 0:
            if len(self.raw) > MAX_HEAD:
                raise OtaError(UNAVAILABLE, "BAD_HTTP", "HTTP response head longer than %d bytes" % MAX_HEAD)
            return -1
        if end > MAX_HEAD:
            raise OtaError(UNAVAILABLE, "BAD_HTTP", "HTTP response head longer than %d bytes" % MAX_HEAD)
        lines = bytes(self.raw[:end]).decode().split("\r\n")
        first = lines[0].split()
        if len(first) < 2 or not first[0].startswith("HTTP/1.") or not first[1].isdigit():
            raise OtaError(UNAVAILABLE, "BAD_HTTP", "not an HTTP response: %r" % lines[0][:40])
        self.status = int(first[1])
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            if k.strip().lower() == "content-length":
                v = v.strip()
                if not v.isdigit():
                    raise OtaError(UNAVAILABLE, "BAD_HTTP", "bad Content-Length %r" % v[:20])
                self.length = int(v)
        return end + 4 - start


async def http_get(connect, url, limit, sink, buf):
    """GET url; sink(mv, n) gets the body in pieces of at most len(buf) bytes. The Content-Length is checked
    against `limit` before the first body byte is taken; returns it. Raises OtaError."""
    host, port, path = parse_url(url)
    try:
        sock = await connect(host, port)
    except MemoryError:
        raise                             # no room for the socket: Updater.update says NO_MEMORY, not CONNECT
    except Exception as e:  # noqa: BLE001 - LinkError/OSError: the server is not there
        raise OtaError(UNAVAILABLE, "CONNECT", "cannot reach %s:%d: %s" % (host, port, e))
    try:
        req = ("GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host)).encode()
        sent = 0
        while sent < len(req):
            try:
                n = sock.write(req[sent:]) if hasattr(sock, "write") else sock.send(req[sent:])
            except OSError as e:
                if e.args and e.args[0] == 11:
                    n = 0
                else:
                    raise OtaError(UNAVAILABLE, "CONNECT", "sending the request to %s failed: %s" % (host, e))
            sent += n or 0
            if not n:
                await asyncio.sleep_ms(POLL_MS)
        head = HttpHead()
        got = 0
        length = -1
        mv = memoryview(buf)
        last = ticks_ms()
        while True:
            try:
                n = read_some(sock, buf)
            except OSError as e:
                raise OtaError(UNAVAILABLE, "CUT", "download of %s cut: %s" % (path, e))
            if n is None:
                if ticks_diff(ticks_ms(), last) > IDLE_MS:
                    raise OtaError(UNAVAILABLE, "STALLED", "download of %s stalled (nothing for %d ms)" % (path, IDLE_MS))
                await asyncio.sleep_ms(POLL_MS)
                continue
            last = ticks_ms()
            if n == 0:
                break
            off = 0
            if length < 0:
                off = head.feed(buf, n)
                if off < 0:
                    continue
                if head.status != 200:
                    raise OtaError(UNAVAILABLE, "HTTP_%d" % head.status, "GET %s answered HTTP %d" % (path, head.status))
                length = head.length
                if length < 0:
                    raise OtaError(UNAVAILABLE, "BAD_HTTP", "GET %s: no Content-Length" % path)
                if length > limit:
                    raise OtaError(INVALID_REQUEST, "TOO_LARGE", "%s is %d bytes, over the limit of %d" % (path, length, limit))
            k = n - off
            if got + k > length:
                raise OtaError(UNAVAILABLE, "BAD_HTTP", "%s: more bytes than its Content-Length %d" % (path, length))
            if k:
                sink(mv[off:n], k)
                got += k
            if got == length:
                break
        if length < 0 or got != length:
            raise OtaError(UNAVAILABLE, "CUT", "download of %s cut after %d of %d bytes" % (path, got, max(length, 0)))
        return length
    finally:
        try:
            sock.close()
        except OSError:
            pass
