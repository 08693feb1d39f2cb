"""Board definition files: every board loads; each kind of conflict is rejected with its one-line message."""
import copy
import json

import pytest

from alabama.board import boards
from alabama.cli import main

EXPECTED = {"esp32-s3-box-3", "atoms3r-echobase", "xiao-esp32s3-sense-inmp441", "devkitc1-inmp441",
            "esp32-s3-korvo-2", "sim"}


def _data(name):
    return boards.read(boards.BOARDS_DIR / (name + ".json"))


def _problems(data, name):
    return boards.check(data, boards.BOARDS_DIR / (name + ".json"))


def test_every_board_loads_and_validates():
    loaded = {b.id: b for b in boards.load_all()}
    assert set(loaded) >= EXPECTED
    for b in loaded.values():
        assert boards.check(b.data, b.path) == []
    assert loaded["devkitc1-inmp441"].duplex == "full"
    assert loaded["esp32-s3-box-3"].duplex == "half"
    assert loaded["esp32-s3-korvo-2"].duplex == "half"
    assert loaded["atoms3r-echobase"].duplex == "half"
    assert loaded["sim"].is_virtual and loaded["sim"].image is None and loaded["sim"].heap == "320k"
    assert loaded["devkitc1-inmp441"].image == "ESP32_GENERIC_S3"
    assert loaded["esp32-s3-box-3"].image == "ESP32_GENERIC_S3-SPIRAM_OCT"


def test_xiao_says_plainly_its_pdm_mic_is_unusable():
    d = _data("xiao-esp32s3-sense-inmp441")
    text = " ".join(d["unsupported"])
    assert "PDM" in text and "cannot" in text and "INMP441" in text
    assert d["audio"]["mic"]["format"] == "philips"


def test_a_gpio_used_twice_is_rejected():
    d = _data("devkitc1-inmp441")
    d["buttons"].append({"name": "extra", "pin": 6, "active_level": 0})
    d["sources"][0]["pins"].append(6)
    assert _problems(d, "devkitc1-inmp441") == [
        "boards/devkitc1-inmp441.json: audio.mic.sd: GPIO 6 is used twice: audio.mic.sd and buttons[1].pin"]


def test_shared_bus_pins_are_allowed_on_a_half_duplex_board_only():
    d = _data("esp32-s3-box-3")
    assert _problems(d, "esp32-s3-box-3") == []          # sck/ws/mck shared by mic and speaker
    d["audio"]["speaker"]["sd"] = 16                     # but a data line is never shared
    assert _problems(d, "esp32-s3-box-3") == [
        "boards/esp32-s3-box-3.json: audio.mic.sd: GPIO 16 is used twice: audio.mic.sd and audio.speaker.sd"]


def test_full_duplex_claim_on_a_shared_bus_is_rejected():
    d = _data("esp32-s3-box-3")
    d["duplex"] = "full"
    assert _problems(d, "esp32-s3-box-3") == [
        "boards/esp32-s3-box-3.json: duplex: full duplex claimed on a shared I2S bus (mic and speaker share "
        "sck/ws = GPIO 17): set \"duplex\": \"half\" (one TX and one RX machine.I2S object on the same pins is "
        "not established, see HARDWARE.md)"]


def test_full_duplex_on_one_controller_is_rejected():
    d = _data("devkitc1-inmp441")
    d["audio"]["speaker"]["i2s_id"] = 0
    (msg,) = _problems(d, "devkitc1-inmp441")
    assert msg.startswith("boards/devkitc1-inmp441.json: duplex: full duplex needs two I2S controllers")


@pytest.mark.parametrize("pin,expect", [
    (22, "GPIO 22 does not exist on the ESP32-S3 (valid: 0-21, 26-48"),
    (25, "GPIO 25 does not exist on the ESP32-S3"),
    (49, "GPIO 49 does not exist on the ESP32-S3"),
    (27, "GPIO 27 is a flash/PSRAM SPI pin (GPIO26-32"),
])
def test_pins_the_s3_does_not_have_or_flash_owns_are_rejected(pin, expect):
    d = _data("devkitc1-inmp441")
    d["audio"]["speaker"]["sd"] = pin
    d["sources"][0]["pins"].append(pin)
    (msg,) = _problems(d, "devkitc1-inmp441")
    assert msg.startswith("boards/devkitc1-inmp441.json: audio.speaker.sd: " + expect)


def test_octal_psram_pins_are_rejected_only_on_octal_boards():
    d = _data("devkitc1-inmp441")                        # psram none: GPIO35 is free
    d["audio"]["speaker"]["sd"] = 35
    d["sources"][0]["pins"].append(35)
    assert _problems(d, "devkitc1-inmp441") == []
    d["psram"] = "octal"
    d["image"] = "ESP32_GENERIC_S3-SPIRAM_OCT"
    (msg,) = _problems(d, "devkitc1-inmp441")
    assert msg.startswith("boards/devkitc1-inmp441.json: audio.speaker.sd: GPIO 35 is taken by octal PSRAM")


def test_formats_the_hal_cannot_drive_are_rejected():
    d = _data("devkitc1-inmp441")
    d["audio"]["mic"]["bits"] = 24
    d["audio"]["speaker"]["channels"] = 4
    assert _problems(d, "devkitc1-inmp441") == [
        "boards/devkitc1-inmp441.json: audio.mic.bits: 24-bit samples cannot be driven: machine.I2S takes 16 "
        "or 32 (24-bit devices go in 32-bit slots)",
        "boards/devkitc1-inmp441.json: audio.speaker.channels: 4 channels cannot be driven: machine.I2S is "
        "MONO or STEREO (at most 2; more needs TDM)"]
    d = _data("xiao-esp32s3-sense-inmp441")
    d["audio"]["mic"].update(format="pdm", sck=42, sd=41)
    msgs = _problems(d, "xiao-esp32s3-sense-inmp441")
    assert msgs[0] == ("boards/xiao-esp32s3-sense-inmp441.json: audio.mic.format: a PDM microphone cannot be "
                       "read: mainline MicroPython's machine.I2S has no PDM receive (micropython/micropython#14176 "
                       "is unmerged); wire an I2S mic instead")
    d = _data("esp32-s3-korvo-2")
    d["audio"]["mic"]["format"] = "tdm"
    assert _problems(d, "esp32-s3-korvo-2") == [
        "boards/esp32-s3-korvo-2.json: audio.mic.format: TDM cannot be driven: machine.I2S does MONO/STEREO "
        "only; configure the codec for plain I2S with at most 2 channels"]


def test_missing_sources_are_rejected():
    d = _data("atoms3r-echobase")
    d["sources"] = []
    assert _problems(d, "atoms3r-echobase") == ["boards/atoms3r-echobase.json: sources: needs at least 1 entry"]
    d = _data("atoms3r-echobase")
    del d["sources"]
    assert _problems(d, "atoms3r-echobase") == ["boards/atoms3r-echobase.json: sources: is missing"]
    d = _data("atoms3r-echobase")
    d["sources"][0]["pins"].remove(41)                   # the button pin is now vouched for by nobody
    (msg,) = _problems(d, "atoms3r-echobase")
    assert msg.startswith("boards/atoms3r-echobase.json: sources: GPIO 41 (buttons[0].pin) is not cited by any source")


def test_image_must_match_psram_and_shape_errors_name_the_field():
    d = _data("esp32-s3-korvo-2")
    d["image"] = "ESP32_GENERIC_S3"
    (msg,) = _problems(d, "esp32-s3-korvo-2")
    assert msg.startswith('boards/esp32-s3-korvo-2.json: image: "ESP32_GENERIC_S3" does not fit psram "octal"')
    d = _data("sim")
    d["limits"]["max_frame_bytes"] = 70000
    d["colour"] = "red"
    assert _problems(d, "sim") == [
        "boards/sim.json: colour: unknown field (allowed: %s)" % ", ".join(sorted(boards.SCHEMA[1])),
        "boards/sim.json: limits.max_frame_bytes: 70000 is outside 512..65516"]
    d = _data("esp32-s3-box-3")
    d["codecs"][1]["address"] = 0x18
    (msg,) = _problems(d, "esp32-s3-box-3")
    assert msg == "boards/esp32-s3-box-3.json: codecs[1].address: 0x18 is not a ES7210 address (7-bit: 0x40/0x41/0x42/0x43)"


def test_an_expander_amp_enable_needs_its_mask_and_the_codec_bus():
    d = _data("atoms3r-echobase")
    del d["amp_enable"]["mask"]
    (msg,) = _problems(d, "atoms3r-echobase")
    assert msg.startswith("boards/atoms3r-echobase.json: amp_enable.mask: is missing")
    d = _data("atoms3r-echobase")
    d["amp_enable"]["mask"] = 256
    (msg,) = _problems(d, "atoms3r-echobase")
    assert msg == "boards/atoms3r-echobase.json: amp_enable.mask: 256 is outside 1..255"
    d = _data("atoms3r-echobase")
    d["codecs"] = []
    (msg,) = _problems(d, "atoms3r-echobase")
    assert msg.startswith("boards/atoms3r-echobase.json: amp_enable.expander: needs i2c and a codec")


def test_watchdog_ms_is_optional_bounded_and_outlasts_wifi_on_a_chip():
    """watchdog_ms (docs/reliability.md): absent -> the firmware's 30 s default; a chip's must outlast the
    runtime's longest unfed stretch (Wi-Fi bring-up, 20 s); the virtual board takes a short one for tests."""
    assert boards.load("devkitc1-inmp441").watchdog_ms is None          # the default applies
    d = _data("devkitc1-inmp441")
    d["watchdog_ms"] = 30000
    assert _problems(d, "devkitc1-inmp441") == []
    d["watchdog_ms"] = 5000
    (msg,) = _problems(d, "devkitc1-inmp441")
    assert msg.startswith("boards/devkitc1-inmp441.json: watchdog_ms: 5000 ms is shorter than the firmware's "
                          "longest unfed stretch") and "at least 25000" in msg
    d["watchdog_ms"] = "30s"
    assert _problems(d, "devkitc1-inmp441") == [
        "boards/devkitc1-inmp441.json: watchdog_ms: must be an integer, got a string"]
    d = _data("sim")
    d["watchdog_ms"] = 3000
    assert _problems(d, "sim") == []
    d["watchdog_ms"] = 999
    assert _problems(d, "sim") == ["boards/sim.json: watchdog_ms: 999 is outside 1000..600000"]


def test_trial_is_optional_bounded_and_leaves_a_chip_time_to_prove_an_update():
    """trial (docs/ota.md, "The trial"): absent -> the firmware's 60 s window and 300 s deadline; the deadline must
    be longer than the window; a chip's must leave room for Wi-Fi, a reconnect at the backoff cap and the window."""
    assert boards.load("devkitc1-inmp441").trial == {}
    assert boards.load("sim").trial == {"confirm_ms": 3000, "deadline_ms": 60000}
    d = _data("devkitc1-inmp441")
    d["trial"] = {"confirm_ms": 30000, "deadline_ms": 180000}
    assert _problems(d, "devkitc1-inmp441") == []
    d["trial"] = {"deadline_ms": 90000}
    (msg,) = _problems(d, "devkitc1-inmp441")
    assert msg.startswith("boards/devkitc1-inmp441.json: trial.deadline_ms: 90000 ms leaves a trial no time") \
        and "at least %d" % boards.TRIAL_DEADLINE_MIN_CHIP_MS in msg
    d["trial"] = {"confirm_ms": 400000}                    # past the default deadline
    (msg,) = _problems(d, "devkitc1-inmp441")
    assert "trial.deadline_ms: 300000 ms is not longer than the confirmation window (confirm_ms 400000)" in msg
    d["trial"] = {"confirm": 3000}
    assert _problems(d, "devkitc1-inmp441")                 # a typo is an error, not a silent default
    d = _data("sim")
    d["trial"] = {"confirm_ms": 1000, "deadline_ms": 5000}
    assert _problems(d, "sim") == []


def test_load_raises_one_line_board_error(tmp_path):
    d = _data("sim")
    d["duplex"] = "both"
    p = tmp_path / "sim.json"
    p.write_text(json.dumps(d))
    with pytest.raises(boards.BoardError) as e:
        boards.load(str(p))
    assert "\n" not in str(e.value) and str(e.value).endswith('duplex: "both" is not one of "full", "half"')
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(boards.BoardError, match=r"broken.json: line 1: not valid JSON"):
        boards.load("broken", directory=tmp_path)
    with pytest.raises(boards.BoardError, match=r"no board 'nope': pick one of"):
        boards.load("nope")


def test_cli_board_validate_list_and_show(tmp_path, capsys):
    assert main(["board", "validate"]) == 0
    assert main(["board", "list"]) == 0
    out = capsys.readouterr().out
    assert "devkitc1-inmp441" in out and "half" in out
    assert main(["board", "show", "esp32-s3-box-3"]) == 0
    assert "GPIO17=audio.mic.sck+audio.speaker.sck" in capsys.readouterr().out
    d = copy.deepcopy(_data("sim"))
    d["heap"] = "lots"
    p = tmp_path / "sim.json"
    p.write_text(json.dumps(d))
    assert main(["board", "validate", str(p)]) == 1
    assert 'heap: "lots" is not a micropython -X heapsize value' in capsys.readouterr().out


def test_cli_board_without_action_names_its_commands_and_the_old_boards_command_names_the_new_one(capsys):
    assert main(["board"]) == 2                   # as every group: tests/host/test_cli_wrong_inputs.py
    assert capsys.readouterr().err.startswith("alabama: error: alabama board needs a command: list, show, validate")
    assert main(["boards", "show", "sim"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["alabama: error: `alabama boards` is now `alabama board`: run `alabama board show sim`"]
    assert main(["boards"]) == 2
    assert capsys.readouterr().err.strip().endswith("run `alabama board list`")


def test_board_settings_defaults_are_checked_against_the_firmware_table(tmp_path, capsys):
    """A board file may give defaults for the firmware's settings ("capture_mode": "ambient" streams from
    connect, firmware device.load_settings); keys and ranges come from firmware/satellite/device.py SETTINGS."""
    from alabama.board import fwset
    table = fwset.firmware_settings()
    assert table["capture_mode"][2] is None and "ambient" in table["capture_mode"][1]
    d = copy.deepcopy(_data("sim"))
    d["settings"] = {"capture_mode": "ambient", "volume": table["volume"][2]}
    assert _problems(d, "sim") == []
    for bad, needle in (({"capture_mode": "always"}, 'settings.capture_mode: "always" is not one of "ptt", "ambient"'),
                        ({"volume": table["volume"][2] + 1}, "settings.volume: %d is outside" % (table["volume"][2] + 1)),
                        ({"mic_gain": True}, "settings.mic_gain: must be an integer, got a boolean"),
                        ({"wake": "x"}, "settings.wake: unknown field (allowed: capture_mode, led_brightness"),
                        (["capture_mode"], "settings: must be an object, got a list")):
        d["settings"] = bad
        problems = _problems(d, "sim")
        assert len(problems) == 1 and needle in problems[0], problems
    p = tmp_path / "sim.json"
    p.write_text(json.dumps(d))
    assert main(["board", "validate", str(p)]) == 1
    assert "settings: must be an object" in capsys.readouterr().out


def test_firmware_settings_reads_the_table_with_its_consts(tmp_path):
    """The host reads the one settings table with the parser (a row may name a const such as _MAX_GAIN_DB);
    a tree without it is one line saying where the table lives."""
    from alabama.board import fwset
    pkg = tmp_path / "satellite"
    pkg.mkdir()
    (pkg / "device.py").write_text('from micropython import const\n_TOP = const(7)\n'
                                   'SETTINGS = const((("a", 1, 0, _TOP, "A"), ("m", "x", ("x", "y"), None, "M")))\n')
    assert fwset.firmware_settings(tmp_path) == {"a": (1, 0, 7), "m": ("x", ("x", "y"), None)}
    (pkg / "device.py").write_text("SETTINGS = []\n")
    with pytest.raises(fwset.FirmwareError, match="no SETTINGS = const"):
        fwset.firmware_settings(tmp_path)
