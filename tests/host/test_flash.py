"""`alabama flash`: esptool argv per image variant, port detection, one-line errors, sha256 refusal."""
import hashlib
import types
import urllib.error

import pytest

from alabama import cli
from alabama.board import boards, flash, images, mpremote


def _port(device, vid=None):
    return types.SimpleNamespace(device=device, vid=vid)


def _fake_image(path, body=b"\xe9" + b"\x00" * 1023):
    path.write_bytes(body)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "images"
    d.mkdir()
    monkeypatch.setenv("ALABAMA_IMAGE_CACHE", str(d))
    return d


def _pin(monkeypatch, variant, body):
    """Pin `variant` to the sha256 of `body` (the real image cannot be downloaded here)."""
    old = images.IMAGES[variant]
    new = images.Image(old.variant, old.version, old.file, old.url, hashlib.sha256(body).hexdigest(),
                       len(body), "test")
    monkeypatch.setitem(images.IMAGES, variant, new)
    return new


def test_pinned_images_are_official_urls_at_offset_zero():
    assert images.FLASH_OFFSET == 0
    generic = images.image_for("ESP32_GENERIC_S3")
    assert generic.url == "https://micropython.org/resources/firmware/ESP32_GENERIC_S3-20251209-v1.27.0.bin"
    assert len(generic.sha256) == 64
    assert images.image_for("ESP32_GENERIC_S3-SPIRAM_OCT").file == "ESP32_GENERIC_S3-SPIRAM_OCT-20251209-v1.27.0.bin"


@pytest.mark.parametrize("board,variant", [("devkitc1-inmp441", "ESP32_GENERIC_S3"),
                                           ("esp32-s3-box-3", "ESP32_GENERIC_S3-SPIRAM_OCT")])
def test_esptool_argv_per_variant_from_the_cache(cache, monkeypatch, board, variant, serial_port):
    body = b"\xe9" + variant.encode() * 10
    img = _pin(monkeypatch, variant, body)
    _fake_image(cache / img.file, body)
    calls, lines = [], []
    steps = flash.flash(boards.load(board), port=serial_port, deploy=False,
                        runner=lambda a: (calls.append(a) or (0, "")), out=lines.append)
    path = str(cache / img.file)
    assert calls == steps == [
        ["--chip", "esp32s3", "--port", serial_port, "erase-flash"],
        ["--chip", "esp32s3", "--port", serial_port, "--baud", "460800", "write-flash", "-z", "0x0", path],
    ]
    assert lines[-1] == "MicroPython 1.27.0 (%s) written to %s" % (img.file, serial_port)


def test_dry_run_prints_the_commands_and_runs_nothing(cache, monkeypatch):
    lines = []
    steps = flash.flash(boards.load("devkitc1-inmp441"), port="/dev/ttyACM7", dry_run=True,
                        runner=lambda a: pytest.fail("ran esptool"), out=lines.append,
                        opener=lambda url: pytest.fail("downloaded"), allow_mpy=True)
    img = images.image_for("ESP32_GENERIC_S3")
    assert lines[0].startswith("would download " + img.url)
    assert lines[1] == "esptool --chip esp32s3 --port /dev/ttyACM7 erase-flash"
    assert lines[2] == "esptool " + " ".join(steps[1])
    assert steps[1][-4:] == ["write-flash", "-z", "0x0", str(cache / img.file)]


def test_firmware_path_is_used_as_given(tmp_path):
    fw = _fake_image(tmp_path / "custom.bin")
    lines = []
    steps = flash.flash(boards.load("esp32-s3-korvo-2"), port="/dev/null", firmware=str(fw), dry_run=True,
                        deploy=False, out=lines.append)
    assert steps[1][-1] == str(fw)
    assert lines[0].startswith("note: custom.bin is not a pinned image")


def test_corrupted_cached_image_is_refused_by_sha256(cache, monkeypatch, serial_port):
    img = _pin(monkeypatch, "ESP32_GENERIC_S3", b"\xe9good image")
    _fake_image(cache / img.file, b"\xe9tampered image")
    with pytest.raises(flash.FlashError) as e:
        flash.flash(boards.load("devkitc1-inmp441"), port=serial_port, runner=lambda a: pytest.fail("flashed"),
                    allow_mpy=True)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("refusing %s: sha256 " % (cache / img.file))
    assert "does not match the pinned %s..." % img.sha256[:16] in msg


def test_a_cached_download_that_is_no_image_says_to_delete_it_not_to_pass_another_file(cache, serial_port):
    """First use (no pin, no lock entry): the cached file the user never named is damaged (sweep 6)."""
    path = cache / images.image_for("ESP32_GENERIC_S3-SPIRAM_OCT").file
    path.write_text("junk")
    with pytest.raises(flash.FlashError) as e:
        flash.flash(boards.load("xiao-esp32s3-sense-inmp441"), port=serial_port,
                    runner=lambda a: pytest.fail("flashed"))
    assert str(e.value) == ("%s is not an ESP32 firmware image (first byte is not 0xE9): it is the cached download: "
                            "delete it and run again (the image is downloaded anew)" % path)


def test_a_pinned_file_name_given_with_firmware_is_checked_too(tmp_path, monkeypatch):
    img = _pin(monkeypatch, "ESP32_GENERIC_S3", b"\xe9good image")
    fw = _fake_image(tmp_path / img.file, b"\xe9other bytes")
    with pytest.raises(flash.FlashError, match="^refusing .*does not match the pinned"):
        flash.resolve_image(boards.load("devkitc1-inmp441"), firmware=str(fw))


def test_no_image_errors_are_one_line(cache, tmp_path):
    board = boards.load("devkitc1-inmp441")

    def offline(url):
        raise urllib.error.URLError("Name or service not known")

    with pytest.raises(flash.FlashError) as e:
        flash.resolve_image(board, opener=offline, out=lambda s: None)
    assert str(e.value) == ("could not download %s (Name or service not known): fetch it by hand into %s, name a "
                            "mirror (--image-url), or pass --firmware PATH" % (images.image_for("ESP32_GENERIC_S3").url, cache))
    assert list(cache.iterdir()) == []                      # no half-written file left behind
    with pytest.raises(flash.FlashError, match=r"^firmware .*nothing.bin does not exist"):
        flash.resolve_image(board, firmware=str(tmp_path / "nothing.bin"))
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(flash.FlashError, match=r"is not an ESP32 firmware image \(first byte is not 0xE9\)"):
        flash.resolve_image(board, firmware=str(tmp_path / "notes.txt"))
    with pytest.raises(flash.UsageError, match="virtual board: nothing to flash"):
        flash.flash(boards.load("sim"))


def test_port_detection_needs_exactly_one_espressif_device():
    assert mpremote.detect_port(lambda: [_port("/dev/ttyS0"), _port("/dev/ttyACM0", 0x303A)]) == "/dev/ttyACM0"
    with pytest.raises(mpremote.MpremoteError) as e:
        mpremote.detect_port(lambda: [_port("/dev/ttyS0"), _port("/dev/ttyUSB0", 0x10C4)])
    assert str(e.value) == ("no Espressif USB device found (other USB serial ports: /dev/ttyUSB0; a board behind a "
                            "USB-UART bridge needs --port): plug the board's USB port in (hold BOOT while plugging "
                            "if it does not appear) or pass --port")
    with pytest.raises(mpremote.MpremoteError) as e:
        mpremote.detect_port(lambda: [_port("/dev/ttyACM0", 0x303A), _port("/dev/ttyACM1", 0x303A)])
    assert str(e.value) == "2 Espressif USB devices found (/dev/ttyACM0, /dev/ttyACM1): pass --port to pick one"


def test_detected_port_goes_into_the_argv(cache, monkeypatch):
    body = b"\xe9x"
    img = _pin(monkeypatch, "ESP32_GENERIC_S3", body)
    _fake_image(cache / img.file, body)
    steps = flash.flash(boards.load("devkitc1-inmp441"), dry_run=True, deploy=False, out=lambda s: None,
                        list_ports=lambda: [_port("/dev/ttyACM3", 0x303A)])
    assert steps[0] == ["--chip", "esp32s3", "--port", "/dev/ttyACM3", "erase-flash"]


def test_missing_port_is_one_line(cache, monkeypatch, tmp_path):
    body = b"\xe9x"
    img = _pin(monkeypatch, "ESP32_GENERIC_S3", body)
    _fake_image(cache / img.file, body)
    with pytest.raises(flash.FlashError) as e:
        flash.flash(boards.load("devkitc1-inmp441"), port=str(tmp_path / "ttyGONE"), runner=lambda a: pytest.fail())
    assert str(e.value) == ("serial port %s does not exist: plug the board in, or pass the right --port"
                            % (tmp_path / "ttyGONE"))


def _no_download(*a, **kw):
    pytest.fail("downloaded an image before the port was checked")


@pytest.mark.parametrize("board", ["devkitc1-inmp441", "xiao-esp32s3-sense-inmp441"])
def test_a_port_that_is_no_terminal_is_refused_before_any_download(cache, board):
    """Sweep 8: `alabama flash --port /dev/null` downloaded the image (nothing cached here) and only then failed."""
    with pytest.raises(mpremote.MpremoteError) as e:
        flash.flash(boards.load(board), port="/dev/null", opener=_no_download, out=lambda s: None,
                    runner=lambda a: pytest.fail("ran esptool"))
    assert str(e.value).startswith("/dev/null is a character device that is no terminal, not a serial port: pass "
                                   "the board's port with --port")
    assert not list(cache.iterdir())


def test_a_port_another_program_holds_is_refused_before_any_download(cache, serial_port):
    import serial
    held = serial.Serial(serial_port, 115200, exclusive=True)      # a REPL or serial monitor on it
    try:
        with pytest.raises(mpremote.MpremoteError) as e:
            flash.flash(boards.load("xiao-esp32s3-sense-inmp441"), port=serial_port, opener=_no_download,
                        out=lambda s: None, runner=lambda a: pytest.fail("ran esptool"))
    finally:
        held.close()
    assert str(e.value) == ("serial port %s is busy: close the program holding it (a REPL, `alabama logs`, a serial "
                            "monitor, another mpremote) and run again" % serial_port)
    assert not list(cache.iterdir())


def test_the_detected_port_is_checked_too(cache):
    """Without --port the one Espressif device found is opened before the download, as a given one is."""
    found = [_port("/dev/null", vid=mpremote.ESPRESSIF_VID)]
    with pytest.raises(mpremote.MpremoteError, match="^/dev/null is a character device that is no terminal"):
        flash.flash(boards.load("xiao-esp32s3-sense-inmp441"), list_ports=lambda: found, opener=_no_download,
                    out=lambda s: None, runner=lambda a: pytest.fail("ran esptool"))


# Real esptool 5.x failure texts (esptool/loader.py), fed to the classifier.
_BUSY = ("A fatal error occurred: Could not open /dev/ttyACM0, the port is busy or doesn't exist.\n"
         "([Errno 16] could not open port /dev/ttyACM0: [Errno 16] Device or resource busy: '/dev/ttyACM0')\n")
_GONE = ("A fatal error occurred: Could not open /dev/ttyACM0, the port is busy or doesn't exist.\n"
         "([Errno 2] could not open port /dev/ttyACM0: [Errno 2] No such file or directory: '/dev/ttyACM0')\n")
_WRONG_CHIP = "Connecting....\nA fatal error occurred: This chip is ESP32-C3, not ESP32-S3. Wrong chip argument?\n"
_NO_SYNC = "Connecting......\nA fatal error occurred: Failed to connect to ESP32-S3: No serial data received.\n"


@pytest.mark.parametrize("output,expect", [
    (_BUSY, "serial port /dev/ttyACM0 is busy: close the program holding it (mpremote, screen, a serial monitor) "
            "and run again"),
    (_GONE, "serial port /dev/ttyACM0 does not exist: plug the board in, or pass the right --port"),
    (_WRONG_CHIP, "the device on /dev/ttyACM0 is not an ESP32-S3 (This chip is ESP32-C3, not ESP32-S3): check "
                  "--port, or pick the --board that matches the hardware"),
    (_NO_SYNC, "could not reach the bootloader on /dev/ttyACM0: hold BOOT, tap RESET, release BOOT, then run again"),
    ("something odd\nA fatal error occurred: Unexpected thing\n",
     "esptool failed on /dev/ttyACM0 (exit 2): A fatal error occurred: Unexpected thing"),
])
def test_esptool_failures_become_one_line(cache, monkeypatch, output, expect):
    body = b"\xe9x"
    img = _pin(monkeypatch, "ESP32_GENERIC_S3", body)
    _fake_image(cache / img.file, body)
    monkeypatch.setattr(flash.os.path, "exists", lambda p: True)
    monkeypatch.setattr(flash, "check_free", lambda port: None)     # esptool's texts, not the port check
    calls = []
    with pytest.raises(flash.FlashError) as e:
        flash.flash(boards.load("devkitc1-inmp441"), port="/dev/ttyACM0", out=lambda s: None,
                    runner=lambda a: (calls.append(a) or (2, output)), allow_mpy=True)
    assert str(e.value) == expect
    assert len(calls) == 1                                   # stopped after the failing erase


def test_real_esptool_reports_a_missing_port(tmp_path):
    rc, out = flash.run_esptool(["--chip", "esp32s3", "--port", str(tmp_path / "ttyNONE"), "erase-flash"],
                                out=open(tmp_path / "log", "w"))
    assert rc != 0 or "fatal error" in out.lower()
    assert flash.explain_failure(str(tmp_path / "ttyNONE"), rc, out).startswith(
        "serial port %s does not exist" % (tmp_path / "ttyNONE"))


def test_deploy_step_runs_when_the_module_exists(cache, monkeypatch, serial_port):
    body = b"\xe9x"
    img = _pin(monkeypatch, "ESP32_GENERIC_S3", body)
    _fake_image(cache / img.file, body)
    seen = []
    monkeypatch.setattr(flash, "_deploy_module", lambda: types.SimpleNamespace(
        deploy=lambda b, p, wait=0, allow_mpy=False: seen.append((b.id, p, wait, allow_mpy)), mpy_set_fits=lambda b: True))
    flash.flash(boards.load("devkitc1-inmp441"), port=serial_port, runner=lambda a: (0, ""), out=lambda s: None)
    assert seen == [("devkitc1-inmp441", serial_port, 15, False)]
    lines = []
    monkeypatch.setattr(flash, "_deploy_module", lambda: None)
    flash.flash(boards.load("devkitc1-inmp441"), port=serial_port, runner=lambda a: (0, ""), out=lines.append)
    assert lines[-1].startswith("next: alabama deploy --board devkitc1-inmp441 --port " + serial_port)


def test_official_image_is_refused_up_front_where_the_mpy_set_cannot_fit(cache, monkeypatch, serial_port):
    """The no-PSRAM devkit's heap (130k) cannot hold the .mpy set: `alabama flash` with the official image and a
    deploy after it stops before esptool erases anything, with one line naming `make image` and FIRMWARE=;
    the frozen image (--firmware), --no-deploy or --allow-mpy go on."""
    body = b"\xe9x"
    img = _pin(monkeypatch, "ESP32_GENERIC_S3", body)
    _fake_image(cache / img.file, body)
    board = boards.load("devkitc1-inmp441")
    with pytest.raises(flash.FlashError) as e:
        flash.flash(board, port=serial_port, runner=lambda a: pytest.fail("ran esptool"), out=lambda s: None)
    assert str(e.value) == (
        "board devkitc1-inmp441's heap (130k) cannot hold the firmware as .mpy files (~181 KB at rest, "
        "docs/memory.md): build and flash the image with it frozen in (`make image BOARD=devkitc1-inmp441`, then "
        "`make flash BOARD=devkitc1-inmp441 FIRMWARE=build/image/devkitc1-inmp441/firmware.bin`), or flash a "
        "release's (`make flash BOARD=devkitc1-inmp441 RELEASE=TAG`), or pass --allow-mpy to deploy the .mpy files "
        "anyway")
    with pytest.raises(flash.FlashError, match="cannot hold the firmware as .mpy files"):
        flash.flash(board, port=serial_port, dry_run=True, out=lambda s: None)
    ran = []
    for kw in ({"deploy": False}, {"allow_mpy": True, "deploy": False}):
        flash.flash(board, port=serial_port, runner=lambda a: (ran.append(a[-1]) or (0, "")), out=lambda s: None, **kw)
    assert len(ran) == 4
    seen = []
    monkeypatch.setattr(flash, "_deploy_module", lambda: types.SimpleNamespace(
        deploy=lambda b, p, wait=0, allow_mpy=False: seen.append(allow_mpy), mpy_set_fits=deploy_fits))
    frozen = _fake_image(cache / "firmware.bin", b"\xe9frozen image")
    flash.flash(board, port=serial_port, firmware=str(frozen), runner=lambda a: (0, ""), out=lambda s: None)
    assert seen == [False]                       # the deploy after it checks what the image froze
    # a PSRAM board's heap holds the .mpy set
    assert deploy_fits(boards.load("esp32-s3-box-3")) and deploy_fits(boards.load("sim"))


def deploy_fits(board):
    from alabama.board import deploy
    return deploy.mpy_set_fits(board)


@pytest.mark.parametrize("kind, says", [
    ("missing", "firmware {p} does not exist: check the path given to --firmware"),
    ("directory", "firmware {p} is a directory, not an image: give --firmware the .bin file"),
    ("truncated", "{p} is not an ESP32 firmware image (first byte is not 0xE9): pass the .bin from "),
    ("empty", "{p} is not an ESP32 firmware image"),
])
def test_a_firmware_file_that_is_no_image_is_a_usage_mistake_said_before_the_port(tmp_path, capsys, kind, says):
    """Sweep 9: --firmware nope.bin, a directory or a truncated file exited 1 (a directory: "cannot read firmware adir
    (Is a directory)", nothing to do), and only after the port was opened: each is the command line's, status 2."""
    p = tmp_path / "fw.bin"
    if kind == "directory":
        p.mkdir()
    elif kind == "truncated":
        p.write_bytes(b"trunc")
    elif kind == "empty":
        p.write_bytes(b"")
    status = cli.main(["flash", "--board", "xiao-esp32s3-sense-inmp441", "--port", str(tmp_path / "ttyGONE"),
                       "--firmware", str(p)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("alabama: error: " + says.format(p=p)), (status, err)
