"""Image OTA end to end (issue 29): a virtual board whose firmware is a sim app image in simulated OTA slots
(alabama/board/simchip/esp32.py: esp32.Partition over one file per slot + otadata, the ESP-IDF bootloader's
slot choice and rollback rule run by the supervisor at every start), paired with the reference core; the
image served by alabama.board.ota over 127.0.0.1 and written by the board itself (satellite/imgota.py), the
same code path as on the chip. One board is shared by the module's tests, in order. docs/ota.md, "Image OTA"."""
import hashlib
import json
import pathlib
import shutil

import pytest

from alabama.board import appimage as image, fwset, ota, sim
from alabama.board import logwords as lw
from alabama.board.simchip import esp32 as chip

from test_ota_e2e import wait_info
from vb_support import CoreThread, device_id

pytestmark = pytest.mark.needs_micropython

FIRMWARE = pathlib.Path(__file__).resolve().parents[2] / "firmware"
CRASHING_APP = pathlib.Path(__file__).resolve().parent / "data" / "ota" / "app_crashes.py"
SLOT = 0x100000          # the simulated slots of this board: 1 MiB (the sim image is ~290 KB)


def release(tmp, version, crash=False, mutant=None):
    """An image release (firmware.bin + .sha256 + ota-image.json) of the firmware stamped `version`; mutant: a
    module shipped as satellite/app.py, the real app kept beside it as app_real (test_ota_trial_e2e)."""
    root, out = tmp / ("fw-" + version), tmp / ("img-" + version)
    if out.is_dir():                     # built once per module
        return out, ota.ImageRelease((out / "firmware.bin").read_bytes(), (out / image.OTA_MANIFEST).read_bytes())
    shutil.copytree(FIRMWARE, root, ignore=shutil.ignore_patterns("__pycache__"))
    fwset.set_version(root, version)
    if crash:
        shutil.copyfile(CRASHING_APP, root / "satellite" / "app.py")
    if mutant:
        shutil.copyfile(root / "satellite" / "app.py", root / "satellite" / "app_real.py")
        shutil.copyfile(mutant, root / "satellite" / "app.py")
    image.sim_image(root, sim.native_march(sim.find_micropython()), out=out)
    return out, ota.ImageRelease((out / "firmware.bin").read_bytes(), (out / image.OTA_MANIFEST).read_bytes())


class Rig:
    """A paired image-OTA virtual board (board: a board name or boards.Board) and its core."""

    def __init__(self, tmp, board="sim"):
        self.tmp = tmp
        self.core = CoreThread(tmp / "core").start()
        token, _ = self.core.run(self.core.core.mint_token, 600)
        first, self.first = release(tmp, "1.0.0-img")
        flash = tmp / "flash"
        sim.provision(flash, "127.0.0.1", self.core.port, None, token, 0)
        self.vb = sim.VirtualBoard(flash, board=board, image=first / "firmware.bin", slot_size=SLOT,
                                   speaker=tmp / "speaker.wav",
                                   env={"ALABAMA_SIM_BACKOFF_BASE_MS": "300", "ALABAMA_SIM_BACKOFF_CAP_MS": "2000"})
        self.vb.start()
        self.vb.wait_log(lw.PAIRED, 30)
        self.dev = device_id(self.vb)

    def info(self):
        return json.loads(self.core.call(self.core.core.invoke(self.dev, "device.info", "{}")).content[0].text)

    def wait_info(self, pred, timeout=60):
        return wait_info(self.core, self.dev, pred, timeout)

    def offer(self, srv, pin, timeout=60):
        args = json.dumps({"url": srv.url("127.0.0.1"), "sha256": pin})
        return self.core.call(self.core.core.invoke(self.dev, "firmware.update", args, timeout), timeout + 5)

    def data(self):
        """/data: keys, pairing, settings, recordings: every byte must survive an image update."""
        d = self.vb.flash / "data"
        return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}

    def close(self):
        self.vb.stop()
        self.core.close()


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    r = Rig(tmp_path_factory.mktemp("imgota"))
    yield r
    r.close()


def test_image_ota_good_update_runs_the_new_image_from_the_other_slot_and_confirms_it(rig):
    before = rig.info()
    assert before["image"] == "frozen" and before["slot"] == "ota_0" and before["firmware"] == "1.0.0-img"
    assert before["firmware_digest"] == rig.first.firmware_digest and before["rollback_count"] == 0
    data = rig.data()
    assert data, "the board has keys and a pairing in /data"
    out, rel = release(rig.tmp, "1.1.0-img")
    # `alabama ota` chooses the image path from device.info (frozen, with a slot)
    after = ota.update(rig.core.data_dir, rig.dev, image_dir=out, host="127.0.0.1", bind="127.0.0.1", timeout=60,
                       out=lambda *a: None)
    assert after["firmware"] == "1.1.0-img" and after["firmware_digest"] == rel.firmware_digest
    after = rig.wait_info(lambda i: i["ota"]["state"] == "ok" and i["firmware"] == "1.1.0-img")
    assert after["slot"] == "ota_1" and after["reset_reason"] == "ota" and "confirmed image 1.1.0-img" in after["last_update"]
    es = chip.entries(str(rig.vb.chip))
    top = max((e for e in es if e[2]), key=lambda e: e[0])
    assert chip.slot_of(top[0]) == "ota_1" and top[1] == chip.VALID          # mark_app_valid_cancel_rollback
    assert rig.data() == data                                                 # nothing in /data lost
    # the slot holds exactly the served app bytes
    with open(chip.path_of(str(rig.vb.chip), "ota_1"), "rb") as f:
        assert f.read(rel.size) == rel.files["firmware.bin"]
    # and a module set offered to an image board is refused in one line by the host, WRONG_KIND by the board
    fw = ota.build_set(sim.native_march(rig.vb.micropython), FIRMWARE, out=lambda *a: None)
    with ota.SetServer(fw, bind="127.0.0.1") as srv:
        from alabama.core.errors import RequestFailed
        with pytest.raises(RequestFailed) as e:
            rig.offer(srv, fw.digest)
    assert e.value.code == "INVALID_REQUEST" and "frozen image" in e.value.error_message


def test_image_ota_refusals_leave_the_running_image_and_data(rig):
    from alabama.core.errors import RequestFailed
    run = rig.info()
    data = rig.data()
    out, rel = release(rig.tmp, "1.2.0-bad")
    app = rel.files["firmware.bin"]
    big = dict(json.loads(rel.manifest), size=SLOT + 4096)
    big_rel = ota.ImageRelease(app, (json.dumps(big, separators=(",", ":"), sort_keys=True) + "\n").encode())
    cases = [
        ("altered in transit", rel, rel.digest, lambda p, b: (len(b), b if p != "firmware.bin" else b[:-9] + bytes(9)),
         "INVALID_REQUEST", "DIGEST_MISMATCH", 2),
        ("manifest not the pin", rel, "0" * 64, None, "INVALID_REQUEST", "DIGEST_MISMATCH", 1),
        ("short download", rel, rel.digest, lambda p, b: (len(b), b if p != "firmware.bin" else b[:len(b) // 2]),
         "UNAVAILABLE", "CUT", 2),
        ("larger than the slot", big_rel, big_rel.digest, None, "RESOURCE_EXHAUSTED", "TOO_LARGE", 1),
    ]
    for name, r, pin, fault, code, reason, nreq in cases:
        with ota.SetServer(r, bind="127.0.0.1", fault=fault) as srv:
            with pytest.raises(RequestFailed) as e:
                rig.offer(srv, pin)
        assert e.value.code == code, (name, e.value)
        assert len(srv.requests) == nreq, (name, srv.requests)        # too large: refused before one byte is written
        i = rig.info()
        assert reason in i["last_update"] and i["slot"] == run["slot"] and i["firmware"] == run["firmware"], name
        assert "\n" not in e.value.error_message
    m = rig.vb.mark()
    rig.vb.reset()
    rig.vb.wait_log(lw.ACCEPTED, 30, m)
    i = rig.info()
    assert i["slot"] == run["slot"] and i["firmware"] == run["firmware"] and rig.data() == data


@pytest.mark.parametrize("cut", ["erase 20", "write 7", "read 3"])
def test_image_ota_power_cut_before_set_boot_keeps_the_old_image(rig, cut):
    run = rig.info()
    data = rig.data()
    out, rel = release(rig.tmp, "1.3.0-cut")
    (rig.vb.chip / "powercut").write_text(cut)
    m = rig.vb.mark()
    with ota.SetServer(rel, bind="127.0.0.1") as srv:
        with pytest.raises(Exception):
            rig.offer(srv, rel.digest, timeout=20)
    rig.vb.wait_log("POWER CUT at " + cut, 20, m)
    rig.vb.wait_log(lw.ACCEPTED, 30, m)
    i = rig.wait_info(lambda i: i["boots"] > run["boots"])
    assert i["slot"] == run["slot"] and i["firmware"] == run["firmware"] and rig.data() == data
    assert not (rig.vb.chip / "powercut").exists()


def test_image_ota_power_cut_after_set_boot_boots_the_new_image_on_trial_and_confirms_it(rig):
    run = rig.info()
    out, rel = release(rig.tmp, "1.4.0-after")
    (rig.vb.chip / "powercut").write_text("set_boot 1")
    with ota.SetServer(rel, bind="127.0.0.1") as srv:
        with pytest.raises(Exception):
            rig.offer(srv, rel.digest, timeout=20)
        i = rig.wait_info(lambda i: i["firmware"] == "1.4.0-after" and i["ota"]["state"] == "ok")
    assert i["slot"] != run["slot"] and "confirmed" in i["last_update"]


def test_image_ota_new_image_that_never_reaches_a_session_is_rolled_back_by_the_bootloader(rig):
    run = rig.info()
    data = rig.data()
    out, rel = release(rig.tmp, "1.5.0-crash", crash=True)
    with ota.SetServer(rel, bind="127.0.0.1") as srv:
        res = json.loads(rig.offer(srv, rel.digest).content[0].text)
    assert res["staged"] == "1.5.0-crash" and res["slot"] != run["slot"]
    back = rig.wait_info(lambda i: i["ota"]["state"] == "rolled_back", timeout=60)
    assert back["slot"] == run["slot"] and back["firmware"] == run["firmware"]
    assert back["rollback_count"] == run["rollback_count"] + 1 and "was not confirmed by a session" in back["ota"]["error"]
    assert rig.data() == data
    log = rig.vb.log_text()
    assert "trial firmware 1.5.0-crash crashed" in log and "PENDING_VERIFY): ABORTED, rolling back" in log
    states = {chip.slot_of(e[0]): e[1] for e in chip.entries(str(rig.vb.chip)) if e[2]}
    assert states[res["slot"]] == chip.ABORTED
