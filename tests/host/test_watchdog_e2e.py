"""The watchdog end to end on the virtual board (docs/reliability.md, "The watchdog"; docs/virtual-board.md): the
real firmware under micropython arms the simulated watchdog (a heartbeat file the supervisor watches) with the
board file's watchdog_ms, here a short one so a hang costs seconds. A firmware whose frame handler loops for
ever, or whose serve loop awaits an event nobody sets, stops feeding it and is reset (the next boot's reset
cause WDT_RESET); the same hang shipped as an over-the-air trial set is rolled back by otaboot after
BOOT_BUDGET watchdog resets, with no reset from outside, and device.info then says so."""
import pathlib
import re
import shutil

import pytest

from alabama.board import boards, fwset, ota, sim
from alabama.board import logwords as lw

from test_ota_e2e import RUNNING, info, march, new_firmware, offer, wait_info
from vb_support import board, device_id

pytestmark = pytest.mark.needs_micropython

#: The test board's watchdog: short so a hang is reset in seconds, long enough that a healthy board on a
#: loaded machine is never reset by it (the test asserts it is not: no spurious reset before or after).
WDT_MS = 4000
DATA = pathlib.Path(__file__).resolve().parent / "data" / "wdt"
HANGS = {"handler_loops": ("app_hangs_in_handler.py", "mutant: the Accepted handler loops for ever"),
         "await_deadlocks": ("app_deadlocks.py", "mutant: the serve loop awaits an event nobody sets")}


def short_watchdog_board():
    """boards/sim.json with watchdog_ms = WDT_MS, validated like any board file."""
    data = boards.read(boards.BOARDS_DIR / "sim.json")
    data["watchdog_ms"] = WDT_MS
    assert boards.check(data, boards.BOARDS_DIR / "sim.json") == []
    return boards.Board(data, boards.BOARDS_DIR / "sim.json")


def hanging_firmware(tmp_path, version, hang):
    """A release whose app module is the hang mutant (tests/host/data/wdt), the real app beside it."""
    root = new_firmware(tmp_path, version)
    pkg = root / "satellite"
    shutil.copyfile(pkg / "app.py", pkg / "app_real.py")
    shutil.copyfile(DATA / HANGS[hang][0], pkg / "app.py")
    return root


def causes(vb, start=0):
    """The reset cause of every boot the supervisor logged since line `start`."""
    return [m.group(1) for m in (re.search(r"\[virtual board\] boot \d+: (\w+):", ln) for ln in vb.lines()[start:])
            if m]


@pytest.mark.parametrize("hang", sorted(HANGS))
def test_a_hung_firmware_is_reset_by_the_watchdog(core, tmp_path, hang):
    fw = hanging_firmware(tmp_path, "0.9.0-" + hang.replace("_", "-"), hang)
    token, _ = core.run(core.core.mint_token, 600)
    vb = board(tmp_path, core, token=token, board_name=short_watchdog_board())
    vb.firmware = fw
    vb.start()
    try:
        assert int(vb.wait_log(lw.WDT_ARMED, 30).group(1)) == WDT_MS
        vb.wait_log(re.escape(HANGS[hang][1]), 30)
        m = vb.mark()
        note = vb.wait_log(lw.WDT_RESET, WDT_MS / 1000 + 20, 0).group(0)
        assert int(re.search(r"not fed for (\d+) ms", note).group(1)) >= WDT_MS     # fired past the timeout; printed truncated to whole ms
        vb.wait_log(r"\[virtual board\] boot 2: WDT_RESET: ", 10, m)
        vb.wait_log(lw.WDT_ARMED, 30, m)                       # it boots again and arms it again
        assert vb.wdt_resets >= 1
    finally:
        vb.stop()


def test_a_trial_set_that_hangs_is_rolled_back_after_its_watchdog_resets(core, tmp_path):
    """The trial's boots are spent by the watchdog alone (BOOT_BUDGET = 3, otaboot): the boots after the update
    are the OTA's own reset, then three WDT_RESETs, then the old firmware, which reports the rollback."""
    token, _ = core.run(core.core.mint_token, 600)
    vb = board(tmp_path, core, token=token, board_name=short_watchdog_board())
    vb.start()
    try:
        vb.wait_log(lw.PAIRED, 30)
        dev = device_id(vb)
        old = info(core, dev)
        assert old["firmware"] == RUNNING and old["reset_reason"] == "PWRON_RESET" and old["watchdog_ms"] == WDT_MS
        fw = ota.build_set(march(vb), hanging_firmware(tmp_path, "0.9.1-hangs", "handler_loops"),
                           out=lambda *a: None)
        m = vb.mark()
        with ota.SetServer(fw, bind="127.0.0.1") as srv:
            offer(core, dev, srv, fw)
        back = wait_info(core, dev, lambda i: i["ota"]["state"] == "rolled_back", timeout=120)
        assert back["firmware"] == RUNNING and back["firmware_digest"] == old["firmware_digest"]
        assert "was not confirmed by a session within 3 boots" in back["ota"]["error"]
        assert back["reset_reason"] == "WDT_RESET"                  # the last reset was the watchdog's
        assert back["crash_count"] == old["crash_count"]             # nothing crashed: it hung
        assert causes(vb, m) == ["HARD_RESET", "WDT_RESET", "WDT_RESET", "WDT_RESET"]
        assert vb.wdt_resets == 3                                    # and none of the healthy firmware's
        log = vb.log_text()
        assert log.count("mutant: the Accepted handler loops for ever") == 3 and "ROLLED BACK" in log
        assert (vb.flash / "ota" / "bad" / "satellite" / "app_real.mpy").exists()
    finally:
        vb.stop()


def test_ctrl_c_to_the_repl_parks_the_watchdog_so_the_user_is_not_reset(core, tmp_path):
    """The watchdog cannot be stopped: Ctrl-C out of the runtime hands it to the HAL's feeder (app.main ->
    Runtime.park_watchdog -> hal.wdt_park), so a user at the REPL is not reset `watchdog_ms` later."""
    import os
    import time
    vb = board(tmp_path, core, board_name=short_watchdog_board())
    vb.start()
    try:
        vb.wait_log(lw.WDT_ARMED, 30)
        vb.wait_log(lw.ACCEPTED, 30)
        fd = os.open(vb.pty_path, os.O_RDWR | os.O_NOCTTY)
        try:
            os.write(fd, b"\x03")
            vb.wait_log(r"sat: watchdog parked", 10)
            vb.wait_log(r"KeyboardInterrupt", 10)
            time.sleep(2.5 * WDT_MS / 1000)                  # well past the timeout, at the REPL
        finally:
            os.close(fd)
        assert vb.wdt_resets == 0 and vb.boots == 1 and not re.search(lw.WDT_RESET, vb.log_text())
    finally:
        vb.stop()
