# Multi-part sound provisioning: a record longer than ggwave's 140-byte payload arrives as numbered parts,
# reassembled here in any order (a repeat ignored, a part of another record starting a new set). Sans-IO and
# bounded: one record buffer of MAX_RECORD bytes made once, every length checked against a named limit
# before anything is copied. It does not decode the record (record.py) nor store it (listen.py).
#
# A part (host twin: host/alabama/provision/parts.py, which splits):
#   TAG (0x50) | index << 4 | count | record length (2, LE) | record CRC-32 (4, LE) | chunk | part CRC-32 (4, LE)
# The part CRC-32 covers everything before it; the record CRC-32 is the record's own last four bytes and
# names the set. Chunks are ceil(length / count) bytes (the last one what is left). A record that fits one
# payload is sent as it is: it starts with the record version (1), never with TAG.
from micropython import const

import binascii

from satellite.provision.record import MAX_RECORD

TAG = const(0x50)
HEADER = const(8)
PART_CRC = const(4)
MAX_PAYLOAD = const(140)          # ggwave's variable-length limit
MAX_PARTS = const(3)              # ceil(MAX_RECORD / (MAX_PAYLOAD - HEADER - PART_CRC))
_MIN_RECORD = const(5)            # version + CRC

# add() results
ADDED = const(0)                  # a new part of the set; more to come
REPEAT = const(1)                 # a part the set already holds: ignored
COMPLETE = const(2)               # every part is in: record() is the record


class PartError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def is_part(payload):
    return len(payload) > 0 and payload[0] == TAG


class Assembler:
    """Collects the parts of one record. `have` is the bit set of parts held, `count` the set's size (0: no
    set begun)."""

    def __init__(self):
        self._buf = bytearray(MAX_RECORD)
        self._set = bytearray(4)          # the record CRC-32 naming the set, as sent
        self.reset()

    def reset(self):
        self.count = 0
        self.total = 0
        self.have = 0

    def held(self):
        """How many parts of the set are in."""
        n = 0
        for i in range(self.count):
            if self.have & (1 << i):
                n += 1
        return n

    def missing(self):
        """The 1-based numbers of the parts still missing (for the log line)."""
        return [i + 1 for i in range(self.count) if not self.have & (1 << i)]

    def add(self, p):
        """One decoded ggwave payload that is_part(); ADDED, REPEAT or COMPLETE, or PartError (the part is
        dropped, the set kept)."""
        n = len(p)
        if n < HEADER + 1 + PART_CRC or n > MAX_PAYLOAD:
            raise PartError("PART_LENGTH", "a part is %d..%d bytes, got %d" % (HEADER + 1 + PART_CRC, MAX_PAYLOAD, n))
        crc = p[n - 4] | (p[n - 3] << 8) | (p[n - 2] << 16) | (p[n - 1] << 24)
        if binascii.crc32(memoryview(p)[:n - PART_CRC]) & 0xFFFFFFFF != crc:
            raise PartError("PART_CRC", "part CRC mismatch: the part was damaged in transit")
        idx = p[1] >> 4
        count = p[1] & 15
        total = p[2] | (p[3] << 8)
        if count < 2 or count > MAX_PARTS or idx >= count:
            raise PartError("PART_NUMBER", "part %d of %d: a record comes in 2..%d parts" % (idx + 1, count, MAX_PARTS))
        if total < _MIN_RECORD or total > MAX_RECORD:
            raise PartError("PART_LENGTH", "a record is %d..%d bytes, the parts say %d" % (_MIN_RECORD, MAX_RECORD, total))
        chunk = (total + count - 1) // count
        off = idx * chunk
        want = total - off
        if want > chunk:
            want = chunk
        if want <= 0 or n - HEADER - PART_CRC != want:
            raise PartError("PART_LENGTH", "part %d of %d carries %d bytes, want %d" % (idx + 1, count,
                                                                                    n - HEADER - PART_CRC, want))
        s = self._set
        if self.count and (count != self.count or total != self.total or s[0] != p[4] or s[1] != p[5]
                           or s[2] != p[6] or s[3] != p[7]):
            self.reset()                  # another record's parts: the set starts again
        if not self.count:
            self.count = count
            self.total = total
            for i in range(4):
                s[i] = p[4 + i]
        bit = 1 << idx
        if self.have & bit:
            return REPEAT
        self._buf[off:off + want] = memoryview(p)[HEADER:HEADER + want]
        self.have |= bit
        if self.have != (1 << count) - 1:
            return ADDED
        # the set is whole: it must be the record it names (its CRC-32 over all but its last four bytes, which
        # hold the same CRC); a part that passed its own CRC but belongs elsewhere is caught here
        b = self._buf
        c = binascii.crc32(memoryview(b)[:total - 4]) & 0xFFFFFFFF
        if (b[total - 4] != s[0] or b[total - 3] != s[1] or b[total - 2] != s[2] or b[total - 1] != s[3]
                or c & 0xFF != s[0] or (c >> 8) & 0xFF != s[1] or (c >> 16) & 0xFF != s[2] or c >> 24 != s[3]):
            self.reset()
            raise PartError("PART_SET", "the parts do not make the record they name: listening again")
        return COMPLETE

    def record(self):
        """The reassembled record (a view of the buffer: valid until the next add or reset)."""
        return memoryview(self._buf)[:self.total]
