"""`alabama provision serial`: the code run on the board (under the real micropython: atomic write, pin
follows the record, read back), and the real mpremote against the virtual board's pseudo-terminal: an
unprovisioned board gets a record minted from the core's state directory, resets, connects with IK and
is paired by the token (spec §7.3)."""
import os
import pathlib

import pytest

from alabama import cli
from alabama.board import logwords as lw, sim
from alabama.provision import record, serial
from alabama.v1 import provisioning_pb2

from mpharness import micropython_cmd

pytestmark = pytest.mark.needs_micropython


def _run_board_code(cwd, code):
    import subprocess
    (cwd / "w.py").write_text(code)
    r = subprocess.run([micropython_cmd(), "w.py"], cwd=str(cwd), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_board_code_writes_atomically_and_the_pin_follows_the_record(tmp_path):
    key = bytes(range(32))
    a = record.encode(provisioning_pb2.ProvisioningRecord(core_host="10.0.0.2", core_port=7355, core_key=key))
    out = _run_board_code(tmp_path, serial.board_code(a, key))
    assert out.strip() == serial.MARK + a.hex()
    assert (tmp_path / "data" / "provision.bin").read_bytes() == a
    assert (tmp_path / "data" / "core.pub").read_bytes() == key
    # over existing files, without a key: record replaced, old pin removed, no .tmp left
    b = record.encode(provisioning_pb2.ProvisioningRecord(core_host="core.local", core_port=1, pairing_token="t"))
    out = _run_board_code(tmp_path, serial.board_code(b))
    assert out.strip() == serial.MARK + b.hex()
    assert (tmp_path / "data" / "provision.bin").read_bytes() == b
    assert sorted(os.listdir(tmp_path / "data")) == ["provision.bin"]


def test_issue36_factory_reset_forgets_identity_and_settings_and_writes_the_record(tmp_path, serial_port):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("device.key", "device.key.tmp", "settings.json", "core.pub", "provision.bin"):
        (data / name).write_bytes(b"old")
    (data / "deferred").mkdir()                             # the DEFERRED queue is not the key store's
    wifi = record.encode(provisioning_pb2.ProvisioningRecord(core_host="10.0.0.2", core_port=7355,
                                                             wifi_ssid="Home Net", wifi_passphrase="hunter2-hunter2"))
    out = _run_board_code(tmp_path, serial.board_code(wifi, b"", serial.FORGET))
    assert out.strip() == serial.MARK + wifi.hex()
    assert sorted(os.listdir(data)) == ["deferred", "provision.bin"]
    assert record.decode((data / "provision.bin").read_bytes()).wifi_passphrase == "hunter2-hunter2"
    seen = []
    serial.provision(serial_port, wifi, runner=lambda port, args: seen.append(args[1]) or serial.MARK + wifi.hex(),
                     reset=False, out=seen.append, factory_reset=True)
    assert "'data/device.key', 'data/settings.json'" in seen[0]
    assert seen[1].startswith("factory reset on %s: removed data/device.key, data/settings.json" % serial_port)


def test_a_board_that_reads_back_something_else_is_an_error():
    data = record.encode(provisioning_pb2.ProvisioningRecord(core_host="h", core_port=1))
    with pytest.raises(serial.SerialProvisionError, match="read back a different record"):
        serial.write_record("P", data, runner=lambda port, args: serial.MARK + "00\n")
    with pytest.raises(serial.SerialProvisionError, match="did not confirm the record"):
        serial.write_record("P", data, runner=lambda port, args: "Traceback: boom\n")


def test_missing_serial_port_is_one_line(tmp_path, capsys):
    data = record.encode(provisioning_pb2.ProvisioningRecord(core_host="h", core_port=1))
    rc = cli.main(["provision", "serial", "--port", str(tmp_path / "ttyNOPE"), "--record", data.hex()])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "does not exist" in err[0]


def test_r7_3_b_serial_provisioning_of_the_virtual_board_ends_paired_over_ik(core, tmp_path, capsys):
    flash = tmp_path / "flash"
    # the default interpreter (the 32-bit build when built): mpremote goes through the raw-REPL shim
    vb = sim.VirtualBoard(flash, speaker=tmp_path / "speaker.wav",
                          env={"ALABAMA_SIM_BACKOFF_BASE_MS": "300", "ALABAMA_SIM_BACKOFF_CAP_MS": "2000"})
    vb.start()
    try:
        vb.wait_log(lw.NO_RECORD, 30)
        m = vb.mark()
        rc = cli.main(["provision", "serial", "--port", vb.pty_path, "--data", str(core.data_dir),
                       "--host", "127.0.0.1", "--core-port", str(core.port), "--ttl", "120"])
        out = capsys.readouterr().out
        assert rc == 0, out
        assert "wrote data/provision.bin (" in out and ", pinned the core key" in out
        assert "soft reset:" in out
        vb.wait_log(lw.connecting("127.0.0.1", core.port), 30, m)
        vb.wait_log(lw.ACCEPTED, 20, m)
        vb.wait_log(lw.PAIRED, 20, m)
        assert (flash / "data" / "core.pub").read_bytes() == core.key
        rec = record.decode((flash / "data" / "provision.bin").read_bytes())
        assert rec.core_host == "127.0.0.1" and rec.core_port == core.port and rec.core_key == core.key
        assert rec.pairing_token == ""                              # used: the board dropped it
        assert not [p for p in os.listdir(flash / "data") if p.endswith(".tmp")]
    finally:
        vb.stop()
    from alabama.core import registry as reg
    dev = reg.Registry(core.data_dir).lookup(reg.fingerprint(sim.device_public_key(flash)))
    assert dev is not None and dev.trust == reg.PAIRED
    assert [r.as_dict()["noise_pattern"] for r in core.reports()] == ["IK"]
    assert core.violations() == []
