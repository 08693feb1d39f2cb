"""Over-the-air updates end to end: the virtual board (real micropython, compiled firmware in its flash dir)
paired with the reference core, the set served by alabama.board.ota's HTTP server on 127.0.0.1, the board
downloading it itself, otaboot swapping it at boot and rolling it back. docs/ota.md."""
import json
import pathlib
import shutil
import time

import pytest

from alabama.board import fwset, ota, sim
from alabama.core.errors import RequestFailed
from alabama.board import logwords as lw

from vb_support import board, device_id

pytestmark = pytest.mark.needs_micropython

FIRMWARE = pathlib.Path(__file__).resolve().parents[2] / "firmware"
#: A whole app module whose main() raises: the broken release a rollback must undo.
#: The version the virtual board runs before an update (the repository's firmware).
RUNNING = fwset.firmware_version()
CRASHING_APP = pathlib.Path(__file__).resolve().parent / "data" / "ota" / "app_crashes.py"


def new_firmware(tmp_path, version, crash=False):
    """A release of the firmware as a release tool makes one: a copy of the tree with another version stamped
    in (fwset.set_version, the owner of the version); with crash, its app module is the crashing one."""
    root = tmp_path / ("fw-" + version)
    shutil.copytree(FIRMWARE, root, ignore=shutil.ignore_patterns("__pycache__"))
    fwset.set_version(root, version)
    if crash:
        shutil.copyfile(CRASHING_APP, root / "satellite" / "app.py")
    return root


def paired_board(tmp_path, core, env=None):
    token, _ = core.run(core.core.mint_token, 600)
    vb = board(tmp_path, core, token=token, env=env)
    vb.start()
    vb.wait_log(lw.PAIRED, 30)
    return vb


def info(core, dev):
    return json.loads(core.call(core.core.invoke(dev, "device.info", "{}")).content[0].text)


def wait_info(core, dev, pred, timeout=60):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = info(core, dev)
            if pred(last):
                return last
        except Exception as e:  # noqa: BLE001 - rebooting: not connected yet
            last = e
        time.sleep(0.3)
    raise AssertionError("device.info never matched; last: %r" % (last,))


def offer(core, dev, srv, fw, timeout=60):
    args = json.dumps({"url": srv.url("127.0.0.1"), "sha256": fw.digest})
    return core.call(core.core.invoke(dev, "firmware.update", args, timeout), timeout + 5)


def march(vb):
    return sim.native_march(vb.micropython)


def lib_digest(flash):
    return {p.relative_to(flash).as_posix(): p.read_bytes() for p in sorted((flash / "lib" / "satellite").rglob("*"))
            if p.is_file()}


def test_ota_updates_the_virtual_board_and_the_new_version_answers_device_info(core, tmp_path):
    vb = paired_board(tmp_path, core)
    try:
        dev = device_id(vb)
        before = info(core, dev)
        assert before["firmware"] == RUNNING and len(before["firmware_digest"]) == 64
        for k in ("uptime_ms", "heap_free", "heap_min", "rssi", "reset_reason", "crash_count", "reconnect_count",
                  "frames_dropped"):
            assert k in before, k
        assert before["rssi"] == -52 and before["heap_min"] <= before["heap_free"]
        fw = ota.build_set(march(vb), new_firmware(tmp_path, "0.2.0-ota"), out=lambda *a: None)
        with ota.SetServer(fw, bind="127.0.0.1") as srv:
            res = json.loads(offer(core, dev, srv, fw).content[0].text)
            assert res["staged"] == "0.2.0-ota" and res["digest"] == fw.digest and res["files"] == len(fw.files)
            # on trial first: confirmed once its session proved it (boards/sim.json trial.confirm_ms)
            after = wait_info(core, dev, lambda i: i["firmware"] == "0.2.0-ota" and i["ota"]["state"] != "trial")
        assert after["firmware_digest"] == fw.digest
        assert after["ota"]["state"] == "ok" and after["reset_reason"] == "ota"
        assert after["boots"] == before["boots"] + 1
        # what the flash runs is byte for byte the served set, and nothing is left staged
        lib = lib_digest(vb.flash)
        for path, data in fw.files.items():
            assert lib["lib/" + path] == data
        assert not (vb.flash / "ota" / "stage").exists() and not (vb.flash / "ota" / "prev").exists()
        assert srv.requests[0] == "manifest.json" and len(srv.requests) == 1 + len(fw.files)
    finally:
        vb.stop()
    assert core.violations() == []


def test_ota_wrong_digest_is_refused_and_nothing_changes(core, tmp_path):
    vb = paired_board(tmp_path, core)
    try:
        dev = device_id(vb)
        before = lib_digest(vb.flash)
        fw = ota.build_set(march(vb), new_firmware(tmp_path, "0.2.1-bad"), out=lambda *a: None)
        # one file altered in transit: its sha256 no longer matches the pinned manifest
        bad = lambda path, body: (len(body), body if path != "satellite/session.mpy" else bytes(len(body)))
        with ota.SetServer(fw, bind="127.0.0.1", fault=bad) as srv:
            with pytest.raises(RequestFailed) as e:
                offer(core, dev, srv, fw)
            assert e.value.code == "INVALID_REQUEST" and "session.mpy" in e.value.error_message
            # the manifest itself not matching the pin
            with pytest.raises(RequestFailed) as e:
                core.call(core.core.invoke(dev, "firmware.update", json.dumps(
                    {"url": srv.url("127.0.0.1"), "sha256": "0" * 64})))
            assert e.value.code == "INVALID_REQUEST" and "pinned" in e.value.error_message
        vb.wait_log(lw.ota_refused("DIGEST_MISMATCH"), 5)
        assert lib_digest(vb.flash) == before and not (vb.flash / "ota" / "stage").exists()
        i = info(core, dev)
        assert i["firmware"] == RUNNING and i["ota"]["state"] == "ok"
        # a reboot still runs the old firmware
        m = vb.mark()
        vb.reset()
        vb.wait_log(r"accepted", 30, m)
        assert info(core, dev)["firmware"] == RUNNING
    finally:
        vb.stop()


def test_ota_download_cut_leaves_the_old_firmware_booting(core, tmp_path):
    vb = paired_board(tmp_path, core)
    try:
        dev = device_id(vb)
        before = lib_digest(vb.flash)
        fw = ota.build_set(march(vb), new_firmware(tmp_path, "0.2.2-cut"), out=lambda *a: None)
        cut = lambda path, body: (len(body), body if path != "satellite/runtime.mpy" else body[:len(body) // 2])
        with ota.SetServer(fw, bind="127.0.0.1", fault=cut) as srv:
            with pytest.raises(RequestFailed) as e:
                offer(core, dev, srv, fw)
        assert e.value.code == "UNAVAILABLE" and "cut" in e.value.error_message
        assert lib_digest(vb.flash) == before
        m = vb.mark()
        vb.reset()
        vb.wait_log(lw.ACCEPTED, 30, m)
        i = info(core, dev)
        assert i["firmware"] == RUNNING and i["ota"]["state"] == "ok"
    finally:
        vb.stop()


def test_ota_new_firmware_crashing_at_boot_is_rolled_back_by_itself(core, tmp_path):
    vb = paired_board(tmp_path, core)
    try:
        dev = device_id(vb)
        old = info(core, dev)
        fw = ota.build_set(march(vb), new_firmware(tmp_path, "0.2.3-crash", crash=True), out=lambda *a: None)
        with ota.SetServer(fw, bind="127.0.0.1") as srv:
            offer(core, dev, srv, fw)
        back = wait_info(core, dev, lambda i: i["ota"]["state"] == "rolled_back", timeout=90)
        assert back["firmware"] == RUNNING and back["firmware_digest"] == old["firmware_digest"]
        assert "was not confirmed by a session within 3 boots" in back["ota"]["error"]
        assert back["crash_count"] == old["crash_count"] + 3 and "broken firmware" in back["last_crash"]
        assert (vb.flash / "ota" / "bad" / "satellite" / "_manifest.json").exists()
        log = vb.log_text()
        assert log.count("trial firmware 0.2.3-crash crashed") == 3 and "ROLLED BACK" in log
    finally:
        vb.stop()


def test_ota_flash_full_is_refused_before_anything_is_replaced(core, tmp_path):
    vb = paired_board(tmp_path, core, env={"ALABAMA_SIM_FLASH_FREE": "60000"})
    try:
        dev = device_id(vb)
        before = lib_digest(vb.flash)
        fw = ota.build_set(march(vb), new_firmware(tmp_path, "0.2.4-big"), out=lambda *a: None)
        with ota.SetServer(fw, bind="127.0.0.1") as srv:
            with pytest.raises(RequestFailed) as e:
                offer(core, dev, srv, fw)
            assert srv.requests == ["manifest.json"]            # refused before a single file was fetched
        assert e.value.code == "RESOURCE_EXHAUSTED" and "flash full" in e.value.error_message
        assert lib_digest(vb.flash) == before and not (vb.flash / "ota" / "stage").exists()
        assert info(core, dev)["firmware"] == RUNNING
    finally:
        vb.stop()


def test_alabama_ota_cli_updates_through_the_running_core_and_reports_a_rollback(core, tmp_path, capsys):
    """`alabama ota --device ID --data DIR`: the march comes from the device's device.info, the set is served
    and offered through the core's control endpoint, and the command returns once device.info shows the new
    digest; a set that crashes at boot makes the command fail with the rollback's reason."""
    from alabama.cli import main as alabama
    vb = paired_board(tmp_path, core)
    try:
        dev = device_id(vb)
        fw_dir = new_firmware(tmp_path, "0.3.0-cli")
        rc = alabama(["ota", "--device", dev[:12], "--data", str(core.data_dir), "--firmware", str(fw_dir),
                      "--host", "127.0.0.1", "--bind", "127.0.0.1", "--timeout", "60"])
        out = capsys.readouterr().out
        assert rc == 0 and "runs firmware 0.3.0-cli" in out, out
        assert info(core, dev)["firmware"] == "0.3.0-cli"
        with pytest.raises(ota.OtaError, match="rolled back the update: was not confirmed by a session within 3 boots"):
            ota.update(core.data_dir, dev, root=new_firmware(tmp_path, "0.3.1-crash", crash=True), host="127.0.0.1",
                       bind="127.0.0.1", timeout=90, out=lambda *a: None)
        assert info(core, dev)["firmware"] == "0.3.0-cli"          # the set before the broken one, not RUNNING
    finally:
        vb.stop()
