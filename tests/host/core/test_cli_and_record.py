"""`alabama core ...` as a real process, and the provisioning record codec."""
import asyncio
import os
import re
import signal
import stat
import subprocess
import sys
import zlib

import pytest

from alabama.core.testsat import TestSatellite, env, hello, tool
from alabama.provision import record
from alabama.v1 import provisioning_pb2

ALABAMA = [sys.executable, "-m", "alabama.cli"]


def _env():
    e = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    e["PYTHONPATH"] = os.path.join(root, "host")
    return e


def cli(*args):
    return subprocess.run(ALABAMA + list(args), capture_output=True, text=True, env=_env(), timeout=60)


def test_r7_3_cli_serve_token_invoke_approve_and_clean_sigterm(tmp_path, run):
    data = str(tmp_path / "d")
    proc = subprocess.Popen(ALABAMA + ["core", "serve", "--listen", "127.0.0.1:0", "--data", data,
                                       "--ping-interval", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env())
    try:
        key_line = proc.stdout.readline()
        listen_line = proc.stdout.readline()
        key = re.search(r"key ([0-9a-f]{64})$", key_line.strip()).group(1)
        port = int(re.search(r"127\.0\.0\.1:(\d+)", listen_line).group(1))
        assert stat.S_IMODE(os.stat(os.path.join(data, "core.key")).st_mode) == 0o600
        assert cli("core", "key", "--data", data).stdout.strip() == key
        out = cli("core", "token", "--data", data, "--ttl", "60", "--host", "127.0.0.1", "--port", str(port)).stdout
        token = out.splitlines()[0]
        rec = record.decode(bytes.fromhex(out.splitlines()[1].split()[1]))
        assert rec.pairing_token == token and rec.core_key.hex() == key and rec.core_port == port

        async def body():
            sat = TestSatellite("127.0.0.1", port, server_key=bytes.fromhex(key))   # IK with the record's key
            await sat.connect()
            await sat.send(hello(tools=[tool("device.blink")], pairing_token=token))
            await sat.expect("paired")

            async def answer():
                inv = await sat.expect("invoke", timeout=20)
                await sat.send(env(inv.id, "tool_result", content=[{"text": "blinked"}]))
            res, _ = await asyncio.gather(asyncio.to_thread(cli, "core", "invoke", "--data", data,
                                                            sat.device_id[:8], "device.blink", '{"n": 2}'), answer())
            assert res.returncode == 0, res.stderr
            assert '"blinked"' in res.stdout
            devs = cli("core", "devices", "--data", data).stdout
            assert sat.device_id in devs and "paired" in devs
            await sat.close()
        run(body())
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
    assert rc == 0
    assert not os.path.exists(os.path.join(data, "control.json"))


def test_cli_invoke_without_server_says_what_to_do(tmp_path):
    from alabama.core.registry import load_or_create_key
    load_or_create_key(tmp_path)                 # a core's directory, its core not running
    r = cli("core", "invoke", "--data", str(tmp_path), "abcd", "t")
    assert r.returncode == 1 and "alabama core serve" in r.stderr


# ------------------------------------------------------------------------------ provisioning record
def _rec(**kw):
    base = dict(core_host="192.168.1.20", core_port=7355, core_key=bytes(range(32)), pairing_token="tok-123",
                token_expires=1_900_000_000)
    base.update(kw)
    return provisioning_pb2.ProvisioningRecord(**base)


def test_record_round_trip_and_layout():
    rec = _rec()
    data = record.encode(rec)
    assert data[0] == 0x01
    assert int.from_bytes(data[-4:], "little") == zlib.crc32(data[:-4])
    assert data[1:-4] == rec.SerializeToString()
    assert record.decode(data) == rec


@pytest.mark.parametrize("mutate,code", [
    (lambda d: bytes([2]) + d[1:], "VERSION"),
    (lambda d: d[:5] + bytes([d[5] ^ 1]) + d[6:], "CRC"),
    (lambda d: d[:3], "LENGTH"),
    (lambda d: d + bytes(300), "LENGTH"),
])
def test_record_decode_checks_version_crc_length(mutate, code):
    with pytest.raises(record.RecordError) as ei:
        record.decode(mutate(record.encode(_rec())))
    assert ei.value.code == code


def test_record_encode_refuses_over_140_for_sound_naming_longest_field():
    rec = _rec(wifi_ssid="s" * 20, wifi_passphrase="p" * 64)
    assert len(record.encode(rec)) > record.SOUND_MAX_BYTES   # QR and serial carry it
    with pytest.raises(record.RecordError) as ei:
        record.encode(rec, record.SOUND_MAX_BYTES)
    msg = str(ei.value)
    assert ei.value.code == "RECORD_TOO_LONG" and "wifi_passphrase" in msg and "QR" in msg and "serial" in msg


def test_record_bad_key_length_refused():
    with pytest.raises(record.RecordError) as ei:
        record.encode(_rec(core_key=b"short"))
    assert ei.value.code == "BAD_KEY"


def test_r5_b_fingerprint_definition():
    import hashlib
    from alabama.core.registry import fingerprint
    k = bytes(range(32))
    assert fingerprint(k) == hashlib.sha256(k).hexdigest()[:32]
    assert len(fingerprint(k)) == 32
