# The virtual board's `esp32` module: esp32.Partition over flash files, and the ESP-IDF bootloader's OTA rules.
#
# Runs on the micropython unix port (the virtual board puts this directory on MICROPYPATH only when it
# simulates the chip's app partitions; it is never part of the firmware package) and on CPython (the
# supervisor, host/alabama/board/sim.py, imports it to act as the bootloader at every (re)start), so the
# otadata format and the boot rule have one owner.
#
# What it models (MicroPython v1.27.0 docs/library/esp32.rst "Flash partitions", ports/esp32/esp32_partition.c;
# ESP-IDF "Over The Air Updates (OTA)": "OTA Data Partition", "App rollback", "App OTA State"):
#   * the partitions of partitions-8MiBplus-ota.csv that an image OTA touches: ota_0, ota_1 (one file each,
#     <chip>/ota_0.bin, <chip>/ota_1.bin, erased = 0xFF) and otadata (<chip>/otadata.bin, two 4 KB sectors);
#   * NOR flash: a write can only clear bits (new = old & data) until the 4 KB sector is erased (ioctl 6),
#     so code that forgets to erase writes garbage here as on the chip;
#   * otadata: two sectors, each one esp_ota_select_entry_t {ota_seq, seq_label[20], ota_state, crc}; the
#     valid entry with the highest seq wins; slot = (seq - 1) % 2;
#   * set_boot(): the image is verified first (as esp_ota_set_boot_partition does; here: the sim image's
#     magic, length and appended sha256), then the new entry (state NEW) goes into the sector NOT holding the
#     active one, so a cut mid-write leaves the old entry valid;
#   * the bootloader (select_boot, called by the supervisor): NEW -> PENDING_VERIFY and boot it;
#     PENDING_VERIFY at boot (a reset before mark_app_valid_cancel_rollback) -> ABORTED and boot the other
#     entry's slot; no valid entry -> ota_0 (no factory app in this table);
#   * mark_app_valid_cancel_rollback(): the running slot's PENDING_VERIFY entry -> VALID.
#
# A sim "app image" (the virtual board's firmware.bin): MAGIC (8 bytes), payload length (u32 LE), 4 zero
# bytes, the payload (a tar of the compiled frozen set, alabama.board.appimage.sim_image), then the sha256 of
# everything before it (ESP-IDF app images end with an appended SHA-256 the bootloader checks the same way).
#
# Power cuts for tests: <chip>/powercut holding "EVENT N" (EVENT: erase, write, read, set_boot) kills this
# interpreter at the Nth such call (set_boot: after otadata is written), once (the file is removed first).
import os
import struct
import hashlib
import binascii

SECTOR = 4096
SLOTS = ("ota_0", "ota_1")
OTADATA = "otadata"
#: partitions-8MiBplus-ota.csv (MicroPython v1.27.0 ports/esp32): label -> (type, subtype, offset, size)
TABLE = {"otadata": (1, 0x00, 0xD000, 0x2000), "ota_0": (0, 0x10, 0x10000, 0x270000),
         "ota_1": (0, 0x11, 0x280000, 0x270000)}
# esp_ota_img_states_t (ESP-IDF esp_flash_partitions.h)
NEW, PENDING_VERIFY, VALID, INVALID, ABORTED, UNDEFINED = 0, 1, 2, 3, 4, 0xFFFFFFFF
STATES = {NEW: "NEW", PENDING_VERIFY: "PENDING_VERIFY", VALID: "VALID", INVALID: "INVALID", ABORTED: "ABORTED",
          UNDEFINED: "UNDEFINED"}
_ENTRY = "<I20sII"
MAGIC = b"ALSIMAPP"
HEAD = 16
TAIL = 32
# ESP-IDF error codes (esp_err.h, esp_ota_ops.h); esp32_partition.c raises OSError(-code)
ESP_ERR_INVALID_ARG = 0x102
ESP_ERR_INVALID_SIZE = 0x104
ESP_ERR_NOT_FOUND = 0x105
ESP_ERR_OTA_VALIDATE_FAILED = 0x1503
# The chip's flash calls take no Python heap, so neither do these in steady state (the interpreter's heap is the
# board's: a 4 KB temporary per sector fragmented it into a NO_MEMORY mid-update): one erased sector, made once,
# and one small scratch buffer for the NOR write's read-modify-write.
_ERASED = b"\xff" * SECTOR
_SCRATCH = bytearray(256)


def chip_dir():
    d = os.getenv("ALABAMA_SIM_CHIP")
    if not d:
        raise OSError(-ESP_ERR_NOT_FOUND, "no simulated chip (ALABAMA_SIM_CHIP)")
    return d


def path_of(d, label):
    return d + "/" + label + ".bin"


def _read(p, off, n):
    with open(p, "rb") as f:
        f.seek(off)
        return f.read(n)


def _write(p, off, data):
    with open(p, "r+b") as f:
        f.seek(off)
        f.write(data)


def blank(d, slot_size=None):
    """Create erased partition files (what an esptool erase leaves) where missing."""
    for label in SLOTS + (OTADATA,):
        p = path_of(d, label)
        try:
            os.stat(p)
        except OSError:
            size = TABLE[label][3] if (slot_size is None or label == OTADATA) else slot_size
            with open(p, "wb") as f:
                chunk = b"\xff" * SECTOR
                for _ in range(size // SECTOR):
                    f.write(chunk)


def size_of(d, label):
    return os.stat(path_of(d, label))[6]


# --- otadata -------------------------------------------------------------------------------------------

def _crc(seq):
    return binascii.crc32(struct.pack("<I", seq)) & 0xFFFFFFFF


def entries(d):
    """[(seq, state, crc_ok)] of the two otadata sectors."""
    out = []
    for i in (0, 1):
        seq, _, state, crc = struct.unpack(_ENTRY, _read(path_of(d, OTADATA), i * SECTOR, 32))
        out.append((seq, state, seq != 0xFFFFFFFF and crc == _crc(seq)))
    return out


def _usable(e):
    return e[2] and e[1] not in (INVALID, ABORTED)


def active(es):
    """Index of the valid entry with the highest seq, or -1 (ESP-IDF bootloader_common_get_active_otadata)."""
    best = -1
    for i, e in enumerate(es):
        if _usable(e) and (best < 0 or e[0] > es[best][0]):
            best = i
    return best


def write_entry(d, sector, seq, state):
    data = struct.pack(_ENTRY, seq, b"\xff" * 20, state, _crc(seq))
    p = path_of(d, OTADATA)
    _write(p, sector * SECTOR, b"\xff" * SECTOR)          # erase the sector, then write the entry
    _write(p, sector * SECTOR, data)


def _set_state(d, sector, state):
    seq = entries(d)[sector][0]
    write_entry(d, sector, seq, state)


def slot_of(seq):
    return SLOTS[(seq - 1) % len(SLOTS)]


# --- the sim app image -------------------------------------------------------------------------------------

def pack_image(payload):
    body = MAGIC + struct.pack("<II", len(payload), 0) + payload
    return body + hashlib.sha256(body).digest()


def check_image(d, label):
    """None when the slot holds a whole sim app image, else why not (the bootloader's image verification)."""
    p = path_of(d, label)
    head = _read(p, 0, HEAD)
    if head[:8] != MAGIC:
        return "no app image in %s (bad magic)" % label
    n = struct.unpack("<I", head[8:12])[0]
    if HEAD + n + TAIL > size_of(d, label):
        return "app image in %s longer than the slot" % label
    h = hashlib.sha256()
    off, left = 0, HEAD + n
    buf = bytearray(SECTOR)                      # one block for the whole image (set_boot runs on the board's heap)
    mv = memoryview(buf)
    with open(p, "rb") as f:
        while left:
            k = f.readinto(mv[:min(SECTOR, left)])
            if not k:
                break
            h.update(mv[:k])
            off += k
            left -= k
    if h.digest() != _read(p, off, TAIL):
        return "app image in %s fails its sha256" % label
    return None


def image_payload(d, label):
    n = struct.unpack("<I", _read(path_of(d, label), 8, 4))[0]
    return _read(path_of(d, label), HEAD, n)


def select_boot(d, log=None):
    """The bootloader: -> the slot to boot, applying ESP-IDF's rollback rule (writes otadata like it does)."""
    say = log or (lambda s: None)
    tried = []
    while True:
        es = entries(d)
        i = active(es)
        if i < 0:
            break
        seq, state, _ = es[i]
        slot = slot_of(seq)
        if state == PENDING_VERIFY:
            _set_state(d, i, ABORTED)
            say("bootloader: %s was not confirmed before this reset (PENDING_VERIFY): ABORTED, rolling back" % slot)
            continue
        why = check_image(d, slot)
        if why is not None:
            # an image that does not verify is not booted: the entry is skipped (marked INVALID)
            _set_state(d, i, INVALID)
            say("bootloader: %s: INVALID" % why)
            tried.append(slot)
            continue
        if state == NEW:
            _set_state(d, i, PENDING_VERIFY)
            say("bootloader: booting the new image in %s (NEW -> PENDING_VERIFY: confirm it or it is rolled back)"
                % slot)
        return slot
    for slot in SLOTS:                                # no usable otadata entry: the first OTA slot that verifies
        if slot not in tried and check_image(d, slot) is None:
            return slot
    return None


# --- power cuts (tests) -------------------------------------------------------------------------------------

_counts = {}


def _cut(event):
    try:
        d = chip_dir()
        with open(d + "/powercut") as f:
            want = f.read().split()
    except OSError:
        return
    if len(want) != 2 or want[0] != event:
        return
    _counts[event] = _counts.get(event, 0) + 1
    if _counts[event] >= int(want[1]):
        os.remove(d + "/powercut")
        print("sim chip: POWER CUT at %s %s" % (event, want[1]))
        os.system("kill -9 $PPID")


# --- esp32.Partition -----------------------------------------------------------------------------------------

class Partition:
    BOOT = 0
    RUNNING = 1
    TYPE_APP = 0
    TYPE_DATA = 1

    def __init__(self, id, block_size=4096):
        d = chip_dir()
        if id == Partition.RUNNING:
            label = os.getenv("ALABAMA_SIM_RUNNING") or SLOTS[0]
        elif id == Partition.BOOT:
            es = entries(d)
            i = active(es)
            label = slot_of(es[i][0]) if i >= 0 else SLOTS[0]
        else:
            label = id
        if label not in TABLE:
            raise ValueError("partition not found")
        self.d = d
        self.label = label
        self.path = path_of(d, label)
        self.size = size_of(d, label)
        self.bs = block_size

    def __repr__(self):
        return "<Partition type=%d, subtype=%d, address=%d, size=%d, label=%s, encrypted=0>" % self.info()[:5]

    def info(self):
        t, st, addr, _ = TABLE[self.label]
        return (t, st, addr, self.size, self.label, False)

    def _range(self, off, n):
        if off < 0 or off + n > self.size:
            raise OSError(-ESP_ERR_INVALID_SIZE)

    def readblocks(self, block, buf, offset=0):
        _cut("read")
        off = block * self.bs + offset
        self._range(off, len(buf))
        with open(self.path, "rb") as f:
            f.seek(off)
            f.readinto(buf)

    def writeblocks(self, block, buf, offset=None):
        _cut("write")
        off = block * self.bs + (offset or 0)
        n = len(buf)
        self._range(off, n)
        if offset is None:                      # the simple protocol erases first (esp32_partition.c)
            a = off // SECTOR * SECTOR
            while a < off + n:
                self._erase(a)
                a += SECTOR
        src = memoryview(buf)
        with open(self.path, "r+b") as f:
            i = 0
            while i < n:
                k = min(len(_SCRATCH), n - i)
                s = memoryview(_SCRATCH)[:k]
                f.seek(off + i)
                f.readinto(s)
                for j in range(k):
                    s[j] &= src[i + j]             # NOR flash: a write only clears bits
                f.seek(off + i)
                f.write(s)
                i += k

    def _erase(self, addr):
        _cut("erase")
        _write(self.path, addr, _ERASED)

    def ioctl(self, op, arg):
        if op in (1, 2, 3):                     # init, deinit, sync
            return 0
        if op == 4:
            return self.size // self.bs
        if op == 5:
            return self.bs
        if op == 6:                             # MP_BLOCKDEV_IOCTL_BLOCK_ERASE
            if self.bs != SECTOR:
                return -22
            self._range(arg * SECTOR, SECTOR)
            self._erase(arg * SECTOR)
            return 0
        return None

    def set_boot(self):
        if self.label not in SLOTS:
            raise OSError(-ESP_ERR_INVALID_ARG)
        if check_image(self.d, self.label) is not None:
            raise OSError(-ESP_ERR_OTA_VALIDATE_FAILED, "ESP_ERR_OTA_VALIDATE_FAILED")
        es = entries(self.d)
        i = active(es)
        want = SLOTS.index(self.label)
        if i < 0:
            seq, sector = want + 1, 0
        else:
            seq, sector = es[i][0] + 1, (i + 1) % 2
            while (seq - 1) % len(SLOTS) != want:
                seq += 1
        write_entry(self.d, sector, seq, NEW)
        _cut("set_boot")

    def get_next_update(self):
        nxt = SLOTS[(SLOTS.index(self.label) + 1) % len(SLOTS)] if self.label in SLOTS else SLOTS[0]
        return Partition(nxt)

    @classmethod
    def mark_app_valid_cancel_rollback(cls):
        d = chip_dir()
        running = os.getenv("ALABAMA_SIM_RUNNING") or SLOTS[0]
        es = entries(d)
        for i, e in enumerate(es):
            if e[2] and slot_of(e[0]) == running and e[1] == PENDING_VERIFY:
                _set_state(d, i, VALID)
