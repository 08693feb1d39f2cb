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
import otaboot as B


CHUNK = const(1024)             # bytes per socket read and per flash write (one preallocated buffer)
MAX_MANIFEST = const(16384)     # the manifest: ~128 bytes per file, 6.3 KB for the 49 files of today's set
MAX_FILES = const(96)           # files in one set (49 today)
MAX_FILE = const(98304)         # one .mpy (the largest today, noise/_x25519_viper.mpy, is 26 KB)
MAX_SET = const(1048576)        # the whole set (209 KB for xtensawin today)
FLASH_BLOCK = const(4096)       # littlefs/FAT block: each file costs whole blocks
FLASH_MARGIN = const(32768)     # left free after the stage (settings, logs, the manifest, directories)
RESET_DELAY_MS = const(700)     # after the ToolResult: time for the frame to leave before the reset

# The fetch and the errors every OTA module raises live one level down (satellite.otahttp), so that
# imgota and release use them without importing this module back; re-exported here for the tools and tests.
from satellite.otahttp import (OtaError, http_get, parse_url, HttpHead, _hex, _is_hex64,  # noqa: F401
                               UNAVAILABLE, INVALID_REQUEST, INTERNAL_ERROR, RESOURCE_EXHAUSTED)


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
