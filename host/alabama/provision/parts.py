"""Sound provisioning parts: a record longer than ggwave's 140-byte payload split into numbered parts.

Responsible for the part format, host side (the firmware's twin, firmware/satellite/provision/parts.py,
reassembles them; tests run one against the other). Not for the record's fields (``record``) nor for
audio (``sound``).

A part is ``TAG (0x50) | index << 4 | count | record length (2, LE) | record CRC-32 (4, LE) | chunk |
part CRC-32 (4, LE, over everything before it)``. The record CRC-32 is the record's own last four bytes:
it names the set, so parts of two different records never mix. Chunks are ceil(length / count) bytes
(the last one what is left), so a receiver places any part without having seen the others. A record that
fits one payload is sent as it is (it starts with the record version, 0x01), never as parts.
"""
import zlib

from . import record

TAG = 0x50
HEADER_BYTES = 8
PART_CRC_BYTES = 4
#: ggwave's variable-length payload limit (kMaxLengthVariable).
MAX_PAYLOAD = record.SOUND_MAX_BYTES
MAX_CHUNK = MAX_PAYLOAD - HEADER_BYTES - PART_CRC_BYTES          # 128
#: Parts a record may take: the largest record (320 bytes) needs 3.
MAX_PARTS = -(-record.MAX_RECORD_BYTES // MAX_CHUNK)


def split(data):
    """Record bytes -> the payloads to send: [data] when it fits one, else 2..MAX_PARTS numbered parts."""
    data = bytes(data)
    n = len(data)
    if not record.MIN_RECORD_BYTES <= n <= record.MAX_RECORD_BYTES:
        raise record.RecordError("LENGTH", "a provisioning record is %d..%d bytes, got %d"
                                 % (record.MIN_RECORD_BYTES, record.MAX_RECORD_BYTES, n))
    if n <= MAX_PAYLOAD:
        return [data]
    count = -(-n // MAX_CHUNK)
    chunk = -(-n // count)
    out = []
    for i in range(count):
        head = bytes([TAG, i << 4 | count]) + n.to_bytes(2, "little") + data[-4:]
        body = head + data[i * chunk:(i + 1) * chunk]
        out.append(body + zlib.crc32(body).to_bytes(PART_CRC_BYTES, "little"))
    return out


def join(payloads):
    """The record from its parts in any order (repeats allowed): the tests' reference for the firmware twin.
    Raises RecordError naming what is wrong."""
    got = {}
    total = crc = count = None
    for p in payloads:
        p = bytes(p)
        if len(p) < HEADER_BYTES + 1 + PART_CRC_BYTES or p[0] != TAG:
            raise record.RecordError("PART", "not a provisioning part")
        if zlib.crc32(p[:-PART_CRC_BYTES]) != int.from_bytes(p[-PART_CRC_BYTES:], "little"):
            raise record.RecordError("PART_CRC", "part CRC mismatch")
        i, c, n = p[1] >> 4, p[1] & 15, int.from_bytes(p[2:4], "little")
        if (total, crc, count) != (None, None, None) and (n, p[4:8], c) != (total, crc, count):
            raise record.RecordError("PART_SET", "parts of different records")
        total, crc, count = n, p[4:8], c
        got[i] = p[HEADER_BYTES:-PART_CRC_BYTES]
    if count is None or sorted(got) != list(range(count)):
        raise record.RecordError("PART_MISSING", "parts missing: have %s of %s" % (sorted(got), count))
    data = b"".join(got[i] for i in range(count))
    if len(data) != total or data[-4:] != crc:
        raise record.RecordError("PART_SET", "the parts do not make the record they name")
    return data
