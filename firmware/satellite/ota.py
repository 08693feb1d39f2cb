# The download half of over-the-air updates: the `firmware.update` tool. Given a manifest URL and its
# sha256 (which arrive over the Noise session from the pinned core, so the pin is as authentic as the core
# key), it fetches the manifest with a minimal HTTP/1.0 GET, checks it (format, package, .mpy ABI, paths,
# sizes, every limit below), checks the flash has room BEFORE touching anything, streams every file into
# ota/stage/ in fixed CHUNK-byte pieces while hashing it, hashes it again from flash, and only then marks
# the stage pending; otaboot swaps it in on the next boot. Any failure removes the stage and leaves the
# running firmware exactly as it was. It never writes lib/ (otaboot does), and it does not update boot.py,
# main.py, otaboot or the MicroPython image.
#
# The socket comes from `connect(host, port)`, the runtime's non-blocking connect (the same socket module
# on the board and on the unix port); reads are polled with asyncio.sleep_ms so the session keeps serving
# (pings, tools) during a download. The HTTP parser is sans-IO (HttpHead.feed).
import json
import os

import asyncio
from micropython import const
from time import ticks_ms, ticks_diff
import otaboot as B
from satellite.link import read_some     # loaded with the runtime: no heap of its own here


CHUNK = const(1024)             # bytes per socket read and per flash write (one preallocated buffer)
MAX_URL = const(256)            # a longer URL is refused before parsing
MAX_HEAD = const(1024)          # status line + headers of one HTTP response
MAX_MANIFEST = const(16384)     # the manifest: ~128 bytes per file, 6.3 KB for the 49 files of today's set
MAX_FILES = const(96)           # files in one set (49 today)
MAX_FILE = const(98304)         # one .mpy (the largest today, noise/_x25519_viper.mpy, is 26 KB)
MAX_SET = const(1048576)        # the whole set (209 KB for xtensawin today)
FLASH_BLOCK = const(4096)       # littlefs/FAT block: each file costs whole blocks
FLASH_MARGIN = const(32768)     # left free after the stage (settings, logs, the manifest, directories)
IDLE_MS = const(10000)          # no byte for this long: the download is dead
POLL_MS = const(5)
RESET_DELAY_MS = const(700)     # after the ToolResult: time for the frame to leave before the reset

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


def parse_manifest(raw):
    try:
        m = json.loads(raw)
    except ValueError:
        raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "the manifest is not JSON")
    if type(m) is not dict:
        raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "the manifest is not a JSON object")
    return m


def check_manifest(raw, mpy):
    """The manifest bytes (already matched against the pin) -> its dict. Every field is checked against the
    limits; `mpy` is sys.implementation._mpy of this interpreter (the .mpy ABI must match exactly)."""
    m = parse_manifest(raw) if type(raw) is not dict else raw
    if m.get("format") != 1 or m.get("package") != B.PKG:
        raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "not a format-1 manifest of package %s" % B.PKG)
    v = m.get("version")
    if type(v) is not str or not 0 < len(v) <= 32:
        raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "manifest version missing or over 32 characters")
    want = m.get("mpy")
    if type(want) is not int or (want & 0xFF, (want >> 8) & 3, (want >> 10) & 0x3F) != (
            mpy & 0xFF, (mpy >> 8) & 3, (mpy >> 10) & 0x3F):
        raise OtaError(INVALID_REQUEST, "WRONG_MPY", "the set is built for .mpy %r, this board loads %d: build it for "
                       "this board's architecture" % (want, mpy))
    files = m.get("files")
    if type(files) is not list or not 0 < len(files) <= MAX_FILES:
        raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "a set holds 1 to %d files" % MAX_FILES)
    total = 0
    seen = set()
    for e in files:
        if type(e) is not dict:
            raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "a file entry is not an object")
        p, size, h = e.get("path"), e.get("size"), e.get("sha256")
        if (type(p) is not str or not p.startswith(B.PKG + "/") or len(p) > 96 or ".." in p or "//" in p
                or "\\" in p or p.endswith("/") or p.endswith(B.MANIFEST) or p in seen):
            raise OtaError(INVALID_REQUEST, "BAD_PATH", "file path %r is not a new path inside %s/" % (str(p)[:40], B.PKG))
        if type(size) is not int or not 0 <= size <= MAX_FILE:
            raise OtaError(INVALID_REQUEST, "TOO_LARGE", "%s: size %r over the limit of %d" % (p, size, MAX_FILE))
        if not _is_hex64(h):
            raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "%s: sha256 is not 64 lower-case hex digits" % p)
        seen.add(p)
        total += size
    if total > MAX_SET:
        raise OtaError(INVALID_REQUEST, "TOO_LARGE", "the set is %d bytes, over the limit of %d" % (total, MAX_SET))
    for need in (B.PKG + "/__init__.mpy", B.PKG + "/app.mpy", B.PKG + "/runtime.mpy"):
        if need not in seen:
            raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "the set has no %s: it would not boot" % need)
    return m


def flash_need(m):
    n = FLASH_MARGIN
    for e in m["files"]:
        n += (e["size"] + FLASH_BLOCK - 1) // FLASH_BLOCK * FLASH_BLOCK
    return n


def flash_free(path="."):
    st = os.statvfs(path)
    return st[0] * st[4]            # f_bsize * f_bavail


class _Writer:
    """sink for http_get: writes each piece to the open file and hashes it."""

    def __init__(self, f):
        import hashlib
        self.f = f
        self.h = hashlib.sha256()

    def __call__(self, mv, n):
        self.h.update(mv)
        self.f.write(mv)


class Updater:
    """One firmware.update at a time. connect(host, port) -> socket (async); free() -> free flash bytes;
    mpy: this interpreter's sys.implementation._mpy; log(line); board: the board file's id (an image manifest
    must name it, satellite.imgota)."""

    def __init__(self, connect, free=None, mpy=0, log=print, image=False, board=None):
        self.connect = connect
        self.board = board
        self.image = image          # a frozen image: it takes image manifests (satellite.imgota), not sets
        self.free = free or flash_free
        self.mpy = mpy
        self.log = log
        self.busy = False
        self.buf = bytearray(CHUNK)
        self.sector = None          # satellite.imgota's flash-sector buffer, allocated by the first image update

    async def update(self, url, sha256):
        """Download, verify and stage; returns a result dict. Raises OtaError; the stage is then removed and
        the running firmware untouched."""
        if self.busy:
            raise OtaError(UNAVAILABLE, "BUSY", "an update is already downloading")
        if not _is_hex64(sha256):
            raise OtaError(INVALID_REQUEST, "BAD_ARGUMENTS", "sha256 must be 64 lower-case hex digits")
        parse_url(url)
        st = B.state()
        if st.get("state") in ("trial", "image_trial"):
            raise OtaError(UNAVAILABLE, "BUSY", "firmware %s is on trial until a session proves it (or it is rolled "
                           "back): try again then" % st.get("version"))
        if st.get("state") in ("pending", "swap", "rollback", "image_pending"):
            raise OtaError(UNAVAILABLE, "BUSY", "an update is %s: reboot the board first" % st.get("state"))
        self.busy = True
        try:
            return await self._update(url, sha256)
        except OtaError as e:
            self._fail(e)
            raise
        except OSError as e:
            code = RESOURCE_EXHAUSTED if e.args and e.args[0] == 28 else INTERNAL_ERROR
            err = OtaError(code, "FLASH_FULL" if code == RESOURCE_EXHAUSTED else "FLASH",
                           "writing the stage failed: %s" % e)
            self._fail(err)
            raise err
        except MemoryError:
            # The heap ran out mid-update (a fragmented or small heap: the frozen devkit at 130k, after the
            # whole set, could not read the running manifest back). Without this the task died with the
            # Invoke left without a terminal (R10.8-a) and the stage on flash.
            err = OtaError(RESOURCE_EXHAUSTED, "NO_MEMORY", "the heap ran out during the update")
            self._fail(err)
            raise err
        except Exception as e:  # noqa: BLE001 - a bug here must still answer the Invoke (R10.8-a), stage removed
            err = OtaError(INTERNAL_ERROR, "INTERNAL", "the update failed: %r" % (e,))
            self._fail(err)
            raise err
        finally:
            self.busy = False

    def _fail(self, e):
        try:
            B.rmtree(B.STAGE)
        except OSError:
            pass
        B.note("refused %s: %s" % (e.reason, e))
        self.log("ota: update refused (%s): %s; the running firmware is untouched" % (e.reason, e))

    async def _update(self, url, pin):
        import hashlib
        B.rmtree(B.STAGE)                 # a stage is never the running firmware: an old one is garbage
        body = bytearray()

        def into(mv, n):
            body.extend(mv)

        await http_get(self.connect, url, MAX_MANIFEST, into, self.buf)
        got = _hex(hashlib.sha256(body).digest())
        if got != pin:
            raise OtaError(INVALID_REQUEST, "DIGEST_MISMATCH", "the manifest's sha256 is %s..., not the pinned %s..."
                           % (got[:12], pin[:12]))
        if getattr(self, "release_key", None):      # a pinned release key: the manifest's signature, before any
            from satellite import release           # write (loaded only then: channel-trust boards keep its RAM)
            await release.check(self, url, body)
        m = parse_manifest(bytes(body))
        if (m.get("kind") == "image") != self.image:
            raise OtaError(INVALID_REQUEST, "WRONG_KIND", "this board runs %s: it takes %s, not %s" % (
                ("a frozen image", "an image manifest (ota-image.json of make image)", "a module set")
                if self.image else ("firmware from files", "a module set", "an image manifest")))
        base = url.rpartition("/")[0] + "/"
        if self.image:
            from satellite import imgota
            res = await imgota.apply(self, m, pin, base)
            B.note("image %s written to %s" % (m["version"], res["slot"]))
            return res
        m = check_manifest(m, self.mpy)
        need = flash_need(m)
        free = self.free()
        if need > free:
            raise OtaError(RESOURCE_EXHAUSTED, "FLASH_FULL", "flash full: the set needs %d bytes, %d are free"
                           % (need, free))
        self.log("ota: manifest %s... ok: firmware %s, %d files; downloading" % (pin[:12], m["version"], len(m["files"])))
        total = 0
        for e in m["files"]:
            p = B.STAGE + "/" + e["path"]
            B.mkdirs(p.rpartition("/")[0])
            with open(p, "wb") as f:
                w = _Writer(f)
                n = await http_get(self.connect, base + e["path"], e["size"], w, self.buf)
            if n != e["size"] or _hex(w.h.digest()) != e["sha256"]:
                raise OtaError(INVALID_REQUEST, "DIGEST_MISMATCH", "%s does not match the manifest's size/sha256"
                               % e["path"])
            if B.file_sha256(p, self.buf) != e["sha256"]:      # what the flash holds, not what was sent
                raise OtaError(INTERNAL_ERROR, "FLASH", "%s reads back different from flash" % e["path"])
            total += n
        with open(B.STAGE + "/" + B.PKG + "/" + B.MANIFEST, "wb") as f:
            f.write(body)
        B.set_state({"state": "pending", "version": m["version"], "digest": pin, "from": running_digest()})
        self.log("ota: firmware %s staged (%d files, %d bytes, all sha256 verified): it is swapped in at the next boot"
                 % (m["version"], len(m["files"]), total))
        return {"staged": m["version"], "digest": pin, "files": len(m["files"]), "bytes": total}


def running_digest():
    return B.running_manifest()[0]


async def reset_soon(note="ota"):
    await asyncio.sleep_ms(RESET_DELAY_MS)
    B.reset(note)
