"""`alabama board sim --image [PATH] --slot-size SIZE` (issue 38): a user starts the image-OTA virtual board of
docs/virtual-board.md ("App images and simulated OTA slots") from the command line, as the tests do from Python;
wrong inputs are one line each, before anything starts."""
import os
import signal
import subprocess
import sys
import time

import pytest

from alabama.board import appimage, sim
from alabama.board.simchip import esp32 as chip
from alabama.cli import main as alabama

import vb_support as vs


@pytest.mark.parametrize("argv, says", [
    (["--slot-size", "1m"], "--slot-size goes with --image"),
    (["--image", "/nonexistent/firmware.bin"], "no such file"),
    (["--image", __file__], "is not a sim app image"),
    (["--image", "--slot-size", "12345"], "a whole number of 4 KB sectors"),
    (["--image", "--slot-size", "lots"], "give a size like 1m"),
    (["--core-key", "zz"], "--core-key is 64 hex digits"),
])
def test_board_sim_image_wrong_inputs_are_one_line(tmp_path, capsys, argv, says):
    rc = alabama(["board", "sim", "--dir", str(tmp_path / "flash"), "--core", "127.0.0.1:9"] + argv)
    err = capsys.readouterr().err.strip()
    assert rc != 0 and says in err and "\n" not in err and "Traceback" not in err, err
    assert not (tmp_path / "flash").exists() and not (tmp_path / "flash.chip").exists()   # nothing written


def test_slot_sizes():
    assert sim.parse_size("1m") == 0x100000 == sim.parse_size("0x100000") == sim.parse_size("1024k")
    assert sim.parse_size("1048576") == 0x100000
    for bad in ("0", "4097", "1.5m", "-4k", "", "0100", "0x"):
        with pytest.raises(sim.SimUsageError):
            sim.parse_size(bad)
    # sweep 9: a leading zero was int(..., 0)'s ValueError, a traceback (`board sim --image --slot-size 08k`)
    assert sim.parse_size("08k") == 8192 and sim.parse_size(" 4k ") == 4096


@pytest.mark.needs_micropython
def test_board_sim_image_starts_the_image_ota_board_and_refuses_another_slot_size(tmp_path, capsys):
    """--image alone builds the sim app image of the firmware; the board boots it from ota_0 of <DIR>.chip, with
    the given slot size, and answers as a frozen image with an OTA slot (what `alabama ota` sends an image to)."""
    core = vs.CoreThread(tmp_path / "core", host="127.0.0.1", brain="echo", control=False).start()
    exe = os.path.join(os.path.dirname(sys.executable), "alabama")
    flash = tmp_path / "flash"
    p = subprocess.Popen([exe, "board", "sim", "--dir", str(flash), "--core", "127.0.0.1:%d" % core.port,
                          "--core-key", core.key.hex(), "--image", "--slot-size", "1m"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.monotonic() + 90
        while not any("sat: accepted" in ln for ln in lines):
            assert time.monotonic() < deadline and p.poll() is None, "".join(lines)
            lines.append(p.stdout.readline())
        text = "".join(lines)
        assert "sim app image of" in text and "[virtual board] bootloader: booting ota_0" in text
        assert chip.size_of(str(tmp_path / "flash.chip"), "ota_1") == 0x100000
        assert chip.check_image(str(tmp_path / "flash.chip"), "ota_0") is None
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=20)
        assert p.returncode == 0 and "stopping the virtual board" in out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(5)
        core.close()
    # the same DIR with another slot size: one line (its slots are kept, never silently resized)
    img = appimage.OUT.parent / "image-sim" / "firmware.bin"
    rc = alabama(["board", "sim", "--dir", str(flash), "--image", str(img.parent), "--slot-size", "2m"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "holds slots of 1048576 bytes, not --slot-size 2m" in err and "\n" not in err
