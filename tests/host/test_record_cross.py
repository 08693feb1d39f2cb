"""The board's record reader (firmware/satellite/provision/record.py) against the host's writer, on CPython
and under real micropython: the record QR, sound and serial carry must mean the same on both ends."""
import binascii
import json
import subprocess

import pytest

from alabama.provision import record as host
from alabama.v1 import provisioning_pb2
from satellite.provision import record as fw

from mpharness import run_micropython

RECORDS = [
    provisioning_pb2.ProvisioningRecord(core_host="192.168.1.20", core_port=7531),
    provisioning_pb2.ProvisioningRecord(core_host="core.local", core_port=1, core_key=bytes(range(32)),
                                        pairing_token="k3J9-xq", token_expires=1_900_000_000),
    provisioning_pb2.ProvisioningRecord(core_host="h", core_port=65535, wifi_ssid="home",
                                        wifi_passphrase="correct horse battery"),
]


@pytest.mark.parametrize("rec", RECORDS)
def test_host_record_decodes_on_firmware_and_back(rec):
    data = host.encode(rec)
    got = fw.decode(data)
    assert (got.core_host, got.core_port, got.core_key, got.pairing_token, got.token_expires,
            got.wifi_ssid, got.wifi_passphrase) == (rec.core_host, rec.core_port, rec.core_key,
                                                     rec.pairing_token, rec.token_expires, rec.wifi_ssid,
                                                     rec.wifi_passphrase)
    assert fw.encode(got) == data  # byte-identical re-encoding (the board re-stores it after pairing)


def test_firmware_refuses_damage_with_typed_codes():
    data = bytearray(host.encode(RECORDS[1]))
    assert fw.decode(bytes(data)).core_port == 1
    flipped = bytes(data[:5]) + bytes([data[5] ^ 1]) + bytes(data[6:])
    assert pytest.raises(fw.RecordError, fw.decode, flipped).value.code == "CRC"
    assert pytest.raises(fw.RecordError, fw.decode, b"\x02" + bytes(data[1:])).value.code == "VERSION"
    assert pytest.raises(fw.RecordError, fw.decode, bytes(data[:4])).value.code == "LENGTH"
    assert pytest.raises(fw.RecordError, fw.decode, b"\x01" * 321).value.code == "LENGTH"
    # a well-formed CRC over a body that is not a record with an address
    body = b"\x01" + provisioning_pb2.ProvisioningRecord(core_port=5).SerializeToString()
    crc = binascii.crc32(body).to_bytes(4, "little")
    assert pytest.raises(fw.RecordError, fw.decode, body + crc).value.code == "FIELD"


def test_firmware_record_reader_under_micropython(tmp_path):
    cases = [host.encode(r).hex() for r in RECORDS]
    bad = bytearray(host.encode(RECORDS[0]))
    bad[-1] ^= 0xFF
    cases.append(bytes(bad).hex())
    script = tmp_path / "rec.py"
    script.write_text(
        "import json\nfrom satellite.provision import record\n"
        "for h in %r:\n"
        "    try:\n"
        "        r = record.decode(bytes.fromhex(h))\n"
        "        print(json.dumps([r.core_host, r.core_port, r.core_key.hex(), r.pairing_token,"
        " r.token_expires, r.wifi_ssid, r.wifi_passphrase, record.encode(r).hex() == h]))\n"
        "    except record.RecordError as e:\n"
        "        print(json.dumps(['error', e.code]))\n" % cases)
    r = run_micropython([str(script)])
    assert r.returncode == 0, r.stderr.decode()
    lines = [json.loads(x) for x in r.stdout.decode().splitlines()]
    for rec, got in zip(RECORDS, lines):
        assert got == [rec.core_host, rec.core_port, rec.core_key.hex(), rec.pairing_token, rec.token_expires,
                       rec.wifi_ssid, rec.wifi_passphrase, True]
    assert lines[-1] == ["error", "CRC"]
