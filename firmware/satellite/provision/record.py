# The provisioning record as the board reads it: `version (1) | ProvisioningRecord | CRC-32 LE (4)`.
# It validates and decodes; it never stores (keystore.py does) and never connects (runtime.py does).
# The host writes records with alabama.provision.record; both sides are tested against each other.
from micropython import const

import binascii

from satellite.wire import alabama_v1 as pb
from satellite.wire import pb as codec

VERSION = const(1)
MAX_RECORD = const(320)     # every record within the field bounds fits (QR, serial); sound carries <= 140
_MIN_RECORD = const(5)      # version + CRC


class RecordError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def decode(data):
    """bytes -> ProvisioningRecord, or RecordError (LENGTH, VERSION, CRC, FORMAT, FIELD)."""
    n = len(data)
    if n < _MIN_RECORD or n > MAX_RECORD:
        raise RecordError("LENGTH", "a provisioning record is 5..%d bytes, got %d" % (MAX_RECORD, n))
    if data[0] != VERSION:
        raise RecordError("VERSION", "record version %d is not supported (want %d): update the firmware"
                          % (data[0], VERSION))
    crc = data[n - 4] | (data[n - 3] << 8) | (data[n - 2] << 16) | (data[n - 1] << 24)
    if binascii.crc32(bytes(data[:n - 4])) & 0xFFFFFFFF != crc:
        raise RecordError("CRC", "record CRC mismatch: the record was damaged in transit, send it again")
    try:
        rec = codec.decode(pb.ProvisioningRecord, data, 1, n - 4)
    except ValueError as e:
        raise RecordError("FORMAT", "record does not decode: %s" % e)
    if not rec.core_host or not 0 < rec.core_port < 65536:
        raise RecordError("FIELD", "record has no usable core address")
    if rec.core_key and len(rec.core_key) != 32:
        raise RecordError("FIELD", "core_key must be 32 bytes")
    if rec.release_key and len(rec.release_key) != 32:
        raise RecordError("FIELD", "release_key must be 32 bytes")
    return rec


def encode(rec):
    """ProvisioningRecord -> bytes (the board re-stores a record after its token was used)."""
    body = bytes([VERSION]) + codec.encode(rec)
    crc = binascii.crc32(body) & 0xFFFFFFFF
    out = body + bytes([crc & 0xFF, (crc >> 8) & 0xFF, (crc >> 16) & 0xFF, crc >> 24])
    if len(out) > MAX_RECORD:
        raise RecordError("LENGTH", "record is %d bytes, over %d" % (len(out), MAX_RECORD))
    return out
