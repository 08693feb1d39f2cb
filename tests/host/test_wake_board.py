"""The board file's wake section and what deploy puts on the board for it (issue 37 item 3): the models compiled at
deploy time into wake/<name>.aww (the firmware's MODEL_DIR), never from the repository; a model the
board cannot run refused in one line; a half-duplex board saying it cannot barge in by voice; capture_mode wake
and wake_word checked against the models the board file lists."""
import copy

import pytest

from alabama.board import boards, deploy
from alabama.cli import main
from mpharness import FIRMWARE


def _problems(data):
    """The problems as "field: message" (boards.check prefixes each with the file)."""
    return [p.split(": ", 1)[1] for p in boards.check(data, boards.BOARDS_DIR / (data["id"] + ".json"))]


def _data(name):
    return boards.read(boards.BOARDS_DIR / (name + ".json"))


def test_the_firmware_and_deploy_agree_on_where_the_models_live():
    src = (FIRMWARE / "satellite" / "wake" / "__init__.py").read_text()
    assert 'MODEL_DIR = "%s"' % deploy.WAKE_DIR in src and 'SUFFIX = "%s"' % deploy.WAKE_SUFFIX in src


def test_half_duplex_boards_say_they_cannot_barge_in_by_voice():
    for name in ("esp32-s3-box-3", "esp32-s3-korvo-2", "atoms3r-echobase"):
        d = _data(name)
        assert d["duplex"] == "half" and d["wake"]["barge_in"] is False
        d["wake"]["barge_in"] = True
        assert any(p.startswith("wake.barge_in: a half-duplex board") for p in _problems(d))
        del d["wake"]["barge_in"]
        assert any(p.startswith("wake.barge_in: ") for p in _problems(d))      # it must say so, not leave it out
    assert not _problems(_data("xiao-esp32s3-sense-inmp441"))          # full duplex: barge-in by default


def test_capture_mode_wake_and_wake_word_need_the_models_the_board_lists():
    d = _data("xiao-esp32s3-sense-inmp441")
    d["settings"] = {"capture_mode": "wake", "wake_word": "okay_nabu"}
    assert not _problems(d)
    d["settings"]["wake_word"] = "alexa"
    assert 'settings.wake_word: "alexa" is not one of wake.models (okay_nabu)' in _problems(d)
    e = copy.deepcopy(d)
    del e["wake"]
    e["settings"] = {"capture_mode": "wake"}
    assert any(p.startswith("settings.capture_mode: ") and "wake.models" in p for p in _problems(e))
    d["wake"]["models"] = ["okay_nabuu"]
    assert any(p.startswith("wake.models[0]: ") and "okay_nabuu" in p for p in _problems(d))
    d["wake"] = {"models": ["okay_nabu"], "barge_in": "yes"}
    assert "wake.barge_in: must be true or false, got a string" in _problems(d)


def _need_models():
    pytest.importorskip("pymicro_wakeword", reason="pymicro-wakeword (the shipped models) has no wheel here")


def test_deploy_compiles_the_models_onto_the_board(tmp_path):
    _need_models()
    bd = boards.load("xiao-esp32s3-sense-inmp441")
    files = deploy.wake_files(bd, tmp_path)
    assert list(files) == ["wake/okay_nabu.aww"]
    blob = files["wake/okay_nabu.aww"].read_bytes()
    assert blob[:4] == b"AWW2"
    local, hashes = deploy.stage_frozen(bd, "xtensawin", "0" * 64, build_dir=tmp_path)
    assert "wake/okay_nabu.aww" in local and "wake/okay_nabu.aww" in hashes
    assert deploy.wake_files(boards.load("sim"), tmp_path) == {}


def test_a_model_the_board_cannot_run_is_refused_in_one_line(tmp_path, capsys):
    bad = tmp_path / "mine.tflite"
    bad.write_bytes(b"not a flatbuffer at all")
    (tmp_path / "mine.json").write_text('{"micro": {"probability_cutoff": 0.9, "sliding_window_size": 5, '
                                        '"feature_step_size": 10}}')
    d = _data("xiao-esp32s3-sense-inmp441")
    d["wake"] = {"models": [str(bad)]}
    bd = boards.Board(d, tmp_path / "b.json")
    with pytest.raises(deploy.DeployError) as e:
        deploy.wake_files(bd, tmp_path / "out")
    msg = str(e.value)
    assert "\n" not in msg and "mine.tflite" in msg and "wake.models" in msg
    # and as a user meets it: `alabama wake compile` of the same file, one line, non-zero, no traceback
    assert main(["wake", "compile", str(bad), "-o", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_model_larger_than_the_heap_the_firmware_leaves_is_refused_at_deploy(tmp_path):
    _need_models()
    d = _data("devkitc1-inmp441")                 # no PSRAM: 130k of heap, ~71 KB of it the frozen firmware at rest
    d["wake"] = {"models": ["okay_nabu"]}
    bd = boards.Board(d, boards.BOARDS_DIR / "devkitc1-inmp441.json")
    with pytest.raises(deploy.DeployError) as e:
        deploy.stage_frozen(bd, "xtensawin", "0" * 64, build_dir=tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("wake model okay_nabu needs ~8") and "devkitc1-inmp441's 130k" in msg
    assert "leaves ~58 KB" in msg and "PSRAM" in msg
    assert "make image BOARD=devkitc1-inmp441" in msg      # the way it fits: the model frozen into the image
    # an image that carries the model (the probe's frozen_wake, issue 37): nothing copied, only the arena and the
    # engine's buffers count (the weights stay in flash), and it fits
    local, _ = deploy.stage_frozen(bd, "xtensawin", "0" * 64, build_dir=tmp_path, frozen_wake=["okay_nabu"])
    assert not [p for p in local if p.startswith("wake/")]
    # the estimate is the measured one: file + arena + WAKE_ENGINE_RAM (83,936 B loaded on build/mp32)
    blob = deploy.wake_files(boards.load("xiao-esp32s3-sense-inmp441"), tmp_path)["wake/okay_nabu.aww"]
    assert 83936 <= deploy.wake_engine_bytes(blob.read_bytes()) <= 83936 + 1024


def test_the_models_live_outside_the_set_an_ota_swaps_and_deploy_owns_them():
    from alabama.board import fwset
    assert not deploy.WAKE_DIR.startswith(fwset.OWNED_DIR)          # otaboot swaps lib/satellite whole
    assert fwset.owned("wake/okay_nabu.aww") and not fwset.owned("data/settings.json")
    # a model dropped from wake.models is removed by the next deploy, its directory with it when empty
    copy, remove = deploy.plan({}, {"wake/alexa.aww": "ab"})
    assert remove == ["wake/alexa.aww"]
    assert "'wake'" in deploy.prepare_code(remove, copy)


def test_without_pymicro_wakeword_a_shipped_model_is_left_out_in_one_line(tmp_path, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "pymicro_wakeword" else real(n, *a))
    lines = []
    assert deploy.wake_files(boards.load("xiao-esp32s3-sense-inmp441"), tmp_path, out=lines.append) == {}
    assert len(lines) == 1 and lines[0].startswith("wake model okay_nabu left out: pymicro-wakeword") and \
        "capture by button" in lines[0]
