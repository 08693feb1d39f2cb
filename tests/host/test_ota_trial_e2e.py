"""A trial that never proves itself is rolled back (issue 38; docs/ota.md, "The trial"), on the image-OTA virtual
board (simulated OTA slots and the ESP-IDF bootloader's rollback rule, alabama/board/simchip/esp32.py) paired with
the reference core. Its board file is the sim's with a short watchdog and a short trial (confirmation window 3 s,
deadline 15 s) so each case costs seconds. Two mutant images, each of which today's main keeps for ever:
  * the core is unreachable (it connects to a port where nothing listens: no crash, no hang, the backoff feeds the
    watchdog) -> the firmware resets itself at the trial's deadline and the bootloader rolls the image back;
  * it hangs right after the handshake, in the ClockSync handler (~50 ms after Accepted) -> never confirmed, so the
    watchdog's reset rolls it back (a trial confirmed at Accepted would be VALID and reset for ever).
And a link drop right after firmware.update answers does not cancel the reboot into the staged image. One board is
shared by the module's tests, in order."""
import json
import pathlib
import re
import shutil

import pytest

from alabama.board import appimage as image, boards, ota
from alabama.board import logwords as lw
from alabama.board.simchip import esp32 as chip

from test_ota_e2e import wait_info
from test_ota_image_e2e import Rig as ImageRig, release as image_release
from vb_support import device_id

pytestmark = pytest.mark.needs_micropython

DATA = pathlib.Path(__file__).resolve().parent / "data" / "trial"
WDT_MS = 4000
TRIAL = {"confirm_ms": 3000, "deadline_ms": 15000}
MUTANTS = {"unreachable": "app_core_unreachable.py", "clocksync": "app_clocksync_hangs.py"}


def trial_board():
    """boards/sim.json with a short watchdog and a short trial, validated like any board file."""
    data = boards.read(boards.BOARDS_DIR / "sim.json")
    data["watchdog_ms"] = WDT_MS
    data["trial"] = dict(TRIAL)
    assert boards.check(data, boards.BOARDS_DIR / "sim.json") == []
    return boards.Board(data, boards.BOARDS_DIR / "sim.json")


def release(tmp, version, mutant=None):
    return image_release(tmp, version, mutant=DATA / MUTANTS[mutant] if mutant else None)


class Rig(ImageRig):
    def __init__(self, tmp):
        super().__init__(tmp, board=trial_board())

    def offer(self, srv, pin, timeout=60):
        return json.loads(super().offer(srv, pin, timeout).content[0].text)

    def states(self):
        return {chip.slot_of(e[0]): e[1] for e in chip.entries(str(self.vb.chip)) if e[2]}


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    r = Rig(tmp_path_factory.mktemp("trial"))
    yield r
    r.close()


def test_a_good_image_is_confirmed_only_after_its_session_proved_it(rig):
    run = rig.wait_info(lambda i: i["ota"]["state"] == "ok")
    out, rel = release(rig.tmp, "1.1.0-good")
    m = rig.vb.mark()
    with ota.SetServer(rel, bind="127.0.0.1") as srv:
        res = rig.offer(srv, rel.digest)
    assert res["slot"] != run["slot"]
    acc = rig.vb.wait_log(lw.ACCEPTED, 30, m)
    i = rig.info()                              # the new image answers, on trial: not confirmed at Accepted
    assert i["firmware"] == "1.1.0-good" and i["ota"]["state"] == "image_trial", i["ota"]
    assert rig.states()[res["slot"]] == chip.PENDING_VERIFY
    i = rig.wait_info(lambda i: i["ota"]["state"] == "ok", timeout=30)
    assert i["slot"] == res["slot"] and rig.states()[res["slot"]] == chip.VALID
    conf = rig.vb.wait_log(r"sat: firmware 1.1.0-good confirmed: a session healthy for (\d+) ms, (\d+) Ping rounds",
                           5, m)
    assert int(conf.group(1)) >= TRIAL["confirm_ms"] and int(conf.group(2)) >= 2
    assert rig.vb.lines().index(conf.string) > rig.vb.lines().index(acc.string)


def test_an_image_whose_core_is_unreachable_is_rolled_back_by_the_firmware_at_its_deadline(rig):
    run = rig.wait_info(lambda i: i["ota"]["state"] == "ok")
    resets = rig.vb.wdt_resets
    out, rel = release(rig.tmp, "1.2.0-unreachable", "unreachable")
    m = rig.vb.mark()
    with ota.SetServer(rel, bind="127.0.0.1") as srv:
        res = rig.offer(srv, rel.digest)
    rig.vb.wait_log(r"mutant: the core is unreachable", 30, m)
    back = rig.wait_info(lambda i: i["ota"]["state"] == "rolled_back" and i["firmware"] == run["firmware"], timeout=60)
    assert back["slot"] == run["slot"] and back["rollback_count"] == run["rollback_count"] + 1
    assert "deadline" in back["ota"]["error"] and back["reset_reason"] == "trial"
    log = "\n".join(rig.vb.lines()[m:])
    assert re.search(r"trial firmware 1\.2\.0-unreachable was not confirmed within its 15 s deadline", log)
    assert "PENDING_VERIFY): ABORTED, rolling back" in log and "1.2.0-unreachable confirmed" not in log
    assert rig.vb.wdt_resets == resets                      # nothing hung: the firmware reset itself
    assert rig.states()[res["slot"]] == chip.ABORTED


def test_an_image_that_hangs_right_after_the_handshake_is_never_confirmed_and_rolled_back(rig):
    run = rig.wait_info(lambda i: i["ota"]["state"] in ("ok", "rolled_back"))
    out, rel = release(rig.tmp, "1.3.0-clocksync", "clocksync")
    m = rig.vb.mark()
    with ota.SetServer(rel, bind="127.0.0.1") as srv:
        res = rig.offer(srv, rel.digest)
    rig.vb.wait_log(r"mutant: the ClockSync handler loops for ever", 30, m)
    back = rig.wait_info(lambda i: i["boots"] > run["boots"] + 1 and i["ota"]["state"] == "rolled_back"
                         and i["firmware"] == run["firmware"], timeout=60)
    assert back["slot"] == run["slot"] and back["rollback_count"] == run["rollback_count"] + 1
    assert back["reset_reason"] == "WDT_RESET" and "not confirmed by a session" in back["ota"]["error"]
    log = "\n".join(rig.vb.lines()[m:])
    assert log.count("mutant: the ClockSync handler loops for ever") == 1       # one boot, then rolled back
    assert "1.3.0-clocksync confirmed" not in log and "PENDING_VERIFY): ABORTED, rolling back" in log
    assert rig.states()[res["slot"]] == chip.ABORTED


def other_board(out, board="esp32-s3-box-3"):
    """The image release in `out` as if `make image` had built it for another board (its manifest names it)."""
    d = out.parent / (out.name + "-" + board)
    if not d.is_dir():
        shutil.copytree(out, d)
        m = json.loads((d / image.OTA_MANIFEST).read_bytes())
        m["board"] = board
        (d / image.OTA_MANIFEST).write_bytes((json.dumps(m, separators=(",", ":"), sort_keys=True) + "\n").encode())
    return d, ota.ImageRelease((d / "firmware.bin").read_bytes(), (d / image.OTA_MANIFEST).read_bytes())


def test_an_image_for_another_board_is_refused_by_the_board_and_the_host_unless_forced(rig):
    from alabama.core.errors import RequestFailed
    run = rig.wait_info(lambda i: i["ota"]["state"] in ("ok", "rolled_back"))
    d, rel = other_board(release(rig.tmp, "1.5.0-box")[0])
    with ota.SetServer(rel, bind="127.0.0.1") as srv:         # the board: refused before firmware.bin is fetched
        with pytest.raises(RequestFailed) as e:
            rig.offer(srv, rel.digest)
    assert e.value.code == "INVALID_REQUEST" and "for board esp32-s3-box-3, this board is sim" in e.value.error_message
    assert srv.requests == ["manifest.json"]
    i = rig.info()
    assert "WRONG_BOARD" in i["last_update"] and i["slot"] == run["slot"]
    # the host says so in one line before serving anything, and --force-board re-stamps the manifest for this board
    with pytest.raises(ota.OtaError, match=r"is an image for board esp32-s3-box-3, and this device is a sim board.*"
                                           r"--force-board"):
        ota.update(rig.core.data_dir, rig.dev, image_dir=d, host="127.0.0.1", bind="127.0.0.1", out=lambda *a: None)
    said = []
    after = ota.update(rig.core.data_dir, rig.dev, image_dir=d, host="127.0.0.1", bind="127.0.0.1", timeout=60,
                       out=said.append, force_board=True)
    assert after["firmware"] == "1.5.0-box" and after["ota"]["state"] == "ok" and after["slot"] != run["slot"]
    assert any("--force-board: sending an image built for esp32-s3-box-3 to a sim board" in s for s in said)


def test_a_link_drop_right_after_the_answer_does_not_cancel_the_reboot(rig):
    run = rig.wait_info(lambda i: i["ota"]["state"] in ("ok", "rolled_back"))
    out, rel = release(rig.tmp, "1.4.0-drop")
    with ota.SetServer(rel, bind="127.0.0.1") as srv:
        res = rig.offer(srv, rel.digest)
        rig.core.run(lambda: rig.core.core.connections[rig.dev]._close_now("test: the link drops"))
        i = rig.wait_info(lambda i: i["firmware"] == "1.4.0-drop" and i["ota"]["state"] == "ok", timeout=60)
    assert i["slot"] == res["slot"] != run["slot"] and i["reset_reason"] == "ota"


def test_a_module_set_whose_core_is_unreachable_is_rolled_back_at_its_deadline(core, tmp_path):
    """The same for a module set on a files board: no crash, no hang, so neither the boot budget nor the watchdog
    would ever act; the trial's deadline, counted by the firmware, rolls it back (otaboot at the next boot)."""
    from test_ota_e2e import RUNNING, info, march, new_firmware, offer
    from vb_support import board
    token, _ = core.run(core.core.mint_token, 600)
    vb = board(tmp_path, core, token=token, board_name=trial_board())
    vb.start()
    try:
        vb.wait_log(lw.PAIRED, 30)
        dev = device_id(vb)
        old = info(core, dev)
        root = new_firmware(tmp_path, "0.9.2-unreachable")
        shutil.copyfile(root / "satellite" / "app.py", root / "satellite" / "app_real.py")
        shutil.copyfile(DATA / MUTANTS["unreachable"], root / "satellite" / "app.py")
        fw = ota.build_set(march(vb), root, out=lambda *a: None)
        m = vb.mark()
        with ota.SetServer(fw, bind="127.0.0.1") as srv:
            offer(core, dev, srv, fw)
        vb.wait_log(r"mutant: the core is unreachable", 30, m)
        back = wait_info(core, dev, lambda i: i["ota"]["state"] == "rolled_back", timeout=60)
        assert back["firmware"] == RUNNING and back["firmware_digest"] == old["firmware_digest"]
        assert "was not confirmed within its 15 s deadline" in back["ota"]["error"] and back["reset_reason"] == "trial"
        assert vb.wdt_resets == 0 and back["crash_count"] == old["crash_count"]
        assert (vb.flash / "ota" / "bad" / "satellite" / "app_real.mpy").exists()
        log = "\n".join(vb.lines()[m:])
        assert "trial boot 2 of" not in log                  # one trial boot: the deadline acted, not the budget
    finally:
        vb.stop()


def test_a_first_boot_cut_before_otaboot_ran_is_reported_as_the_bootloader_saw_it(rig):
    """The new image is set to boot; its first boot is cut before boot.py ran otaboot (the bootloader had already
    marked it PENDING_VERIFY: done here by running the bootloader once, as that boot did); the next boot's bootloader
    ABORTS it and boots the old slot. otaboot reads otadata and says so: a rollback, counted, not "never booted"."""
    run = rig.wait_info(lambda i: i["ota"]["state"] in ("ok", "rolled_back"))
    out, rel = release(rig.tmp, "1.6.0-cut")
    with ota.SetServer(rel, bind="127.0.0.1") as srv:
        args = json.dumps({"url": srv.url("127.0.0.1"), "sha256": rel.digest, "reboot": False})
        res = json.loads(rig.core.call(rig.core.core.invoke(rig.dev, "firmware.update", args, 60), 65).content[0].text)
    assert res["reboot"] is False and rig.info()["ota"]["state"] == "image_pending"
    assert chip.select_boot(str(rig.vb.chip)) == res["slot"]          # the cut first boot: NEW -> PENDING_VERIFY
    m = rig.vb.mark()
    rig.vb.reset()
    rig.vb.wait_log(lw.ACCEPTED, 30, m)
    i = rig.wait_info(lambda i: i["boots"] > run["boots"])
    assert i["slot"] == run["slot"] and i["ota"]["state"] == "rolled_back", i["ota"]
    assert "PENDING_VERIFY" in i["ota"]["error"] and "ABORTED" in i["ota"]["error"]
    assert "never booted" not in i["ota"]["error"] and i["rollback_count"] == run["rollback_count"] + 1
    assert rig.states()[res["slot"]] == chip.ABORTED
