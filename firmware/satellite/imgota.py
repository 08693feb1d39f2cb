# The image half of over-the-air updates (docs/ota.md, "Image OTA"): on a frozen image (the firmware inside
# MicroPython, `make image`) `firmware.update` replaces the whole app image. The manifest (ota-image.json,
# kind "image", already matched against the pin by satellite.ota) names the app's size and sha256; this
# module checks it, checks the size against the next OTA slot BEFORE writing anything, streams the app into
# that slot one 4 KB flash sector at a time (erase, then write: one preallocated sector buffer, nothing
# image-sized in RAM) while hashing it, hashes the slot again from flash, and only then calls set_boot();
# otaboot notes the trial at the next boot and confirms it (mark_app_valid_cancel_rollback) once a session has
# proven it (satellite.trial). It never touches the running slot or /data: only the other slot, otadata, and on
# the filesystem otaboot's ota/state.json (image_pending) and ota/boot.json (the outcome).
#
# esp32.Partition calls (MicroPython v1.27.0 docs/library/esp32.rst, ports/esp32/esp32_partition.c):
#   Partition(Partition.RUNNING).get_next_update()  the slot to write (ESP-IDF esp_ota_get_next_update_partition)
#   info()[3], info()[4]                            size and label
#   ioctl(6, n)                                     MP_BLOCKDEV_IOCTL_BLOCK_ERASE of 4 KB block n (block_size 4096)
#   writeblocks(n, buf, 0)                          the extended block protocol: writes without erasing
#   readblocks(n, buf)                              read back
#   set_boot()                                      esp_ota_set_boot_partition: verifies the image, writes otadata
# The `esp32` module is a parameter (the board's builtin one; the virtual board's simulated one).
from micropython import const
import otaboot as B
from satellite.otahttp import OtaError, http_get, _hex, _is_hex64, INVALID_REQUEST, INTERNAL_ERROR, RESOURCE_EXHAUSTED

SECTOR = const(4096)            # the flash erase unit and the write buffer (the only image buffer)
MAX_IMAGE = const(0x270000)     # an app slot of partitions-8MiBplus-ota.csv; the slot's own size is checked too
MAX_NAME = const(64)
_ERASE = const(6)               # MP_BLOCKDEV_IOCTL_BLOCK_ERASE (vfs.AbstractBlockDev)


def check_manifest(m, board=None):
    """An image manifest (dict, kind "image") -> itself, every field checked; `board` (this board file's id):
    the image must have been built for it (an image for another board has other pins, heap and partitions)."""
    v = m.get("version")
    if m.get("format") != 1 or type(v) is not str or not 0 < len(v) <= 32:
        raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "not a format-1 image manifest with a version")
    f = m.get("file")
    if type(f) is not str or not 0 < len(f) <= MAX_NAME or "/" in f or "\\" in f or f.startswith("."):
        raise OtaError(INVALID_REQUEST, "BAD_PATH", "image file name %r is not a plain name" % str(f)[:40])
    size, off = m.get("size"), m.get("offset", 0)
    if type(off) is not int or not 0 <= off <= 0x100000:
        raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "image offset %r out of range" % (off,))
    if type(size) is not int or not 0 < size <= MAX_IMAGE:
        raise OtaError(INVALID_REQUEST, "TOO_LARGE", "image size %r: an app slot holds 1 to %d bytes" % (size, MAX_IMAGE))
    if not _is_hex64(m.get("sha256")) or not _is_hex64(m.get("firmware_digest")):
        raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "sha256/firmware_digest are not 64 lower-case hex digits")
    b = m.get("board")
    if board and b != board:
        if type(b) is not str or not 0 < len(b) <= MAX_NAME:
            raise OtaError(INVALID_REQUEST, "BAD_MANIFEST", "the image manifest names no board")
        raise OtaError(INVALID_REQUEST, "WRONG_BOARD", "this image is for board %s, this board is %s: send the image "
                       "built for %s (make image BOARD=%s)" % (b, board, board, board))
    return m


class SlotWriter:
    """http_get's sink: skips `skip` leading bytes (the bootloader and partition table of a merged
    firmware.bin), then fills one sector buffer; each full sector is erased and written, and hashed."""

    def __init__(self, part, buf, skip):
        import hashlib
        self.part, self.buf, self.skip = part, buf, skip
        self.h = hashlib.sha256()
        self.fill = 0
        self.block = 0
        self.n = 0

    def __call__(self, mv, n):
        i = 0
        if self.skip:
            i = min(self.skip, n)
            self.skip -= i
        while i < n:
            k = min(SECTOR - self.fill, n - i)
            self.buf[self.fill:self.fill + k] = mv[i:i + k]
            self.fill += k
            i += k
            if self.fill == SECTOR:
                self.flush()

    def flush(self):
        if not self.fill:
            return
        mv = memoryview(self.buf)[:self.fill]
        self.h.update(mv)
        self.part.ioctl(_ERASE, self.block)
        self.part.writeblocks(self.block, mv, 0)
        self.n += self.fill
        self.block += 1
        self.fill = 0


def slot_sha256(part, n, buf):
    """sha256 hex of the first n bytes of a partition, read back one sector at a time through buf."""
    import hashlib
    h = hashlib.sha256()
    mv = memoryview(buf)
    block = 0
    while n > 0:
        part.readblocks(block, buf)
        h.update(mv[:min(n, SECTOR)])
        n -= SECTOR
        block += 1
    return _hex(h.digest())


async def apply(up, m, pin, base, esp32=None):
    """Write the image the manifest m names into the next slot and set it to boot; returns the result dict."""
    check_manifest(m, getattr(up, "board", None))
    if esp32 is None:
        import esp32
    run = esp32.Partition(esp32.Partition.RUNNING)
    nxt = run.get_next_update()
    rinfo, ninfo = run.info(), nxt.info()
    if not ninfo[4].startswith("ota_"):
        raise OtaError(INVALID_REQUEST, "NO_SLOT", "this image has no OTA slot (running %s): flash an image with "
                       "the OTA partition table over USB" % rinfo[4])
    if m["size"] > ninfo[3]:
        raise OtaError(RESOURCE_EXHAUSTED, "TOO_LARGE", "the image is %d bytes, slot %s holds %d"
                       % (m["size"], ninfo[4], ninfo[3]))
    up.log("ota: image manifest %s... ok: firmware %s, %d bytes; writing slot %s (running %s)"
           % (pin[:12], m["version"], m["size"], ninfo[4], rinfo[4]))
    buf = getattr(up, "sector", None)
    if buf is None:
        # one 4 KB block for the board's life (kept by the Updater): a second update in the same boot finds it
        # instead of a fresh contiguous 4 KB in a heap the first one fragmented (NO_MEMORY on the virtual board)
        import gc
        gc.collect()
        buf = up.sector = bytearray(SECTOR)
    w = SlotWriter(nxt, buf, m.get("offset", 0))
    got = await http_get(up.connect, base + m["file"], m.get("offset", 0) + m["size"], w, up.buf)
    w.flush()
    if got != m.get("offset", 0) + m["size"] or w.n != m["size"] or _hex(w.h.digest()) != m["sha256"]:
        raise OtaError(INVALID_REQUEST, "DIGEST_MISMATCH", "the image does not match the manifest's size/sha256")
    if slot_sha256(nxt, m["size"], buf) != m["sha256"]:
        raise OtaError(INTERNAL_ERROR, "FLASH", "slot %s reads back different from what was written" % ninfo[4])
    st = {"state": "image_pending", "version": m["version"], "digest": pin, "image": m["firmware_digest"],
          "from": rinfo[4], "to": ninfo[4]}
    B.set_state(st)
    try:
        nxt.set_boot()
    except OSError as e:
        B.set_state({"state": "ok"})
        raise OtaError(INVALID_REQUEST, "BAD_IMAGE", "the bootloader refuses the image in %s: %s" % (ninfo[4], e))
    up.log("ota: image %s written to %s and verified (sha256 from flash); it boots at the next reset, on trial "
           "until a session proves it" % (m["version"], ninfo[4]))
    return {"staged": m["version"], "digest": pin, "slot": ninfo[4], "bytes": m["size"]}
