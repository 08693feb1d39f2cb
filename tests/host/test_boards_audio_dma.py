"""Board-file audio keys of the ESP32 HAL (issue 17): audio.*.dma_ms and audio.mic.mck_output."""
import copy
import json
import pathlib

from alabama.board import boards

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(name):
    return json.loads((ROOT / "boards" / (name + ".json")).read_text())


def test_validation_refuses_less_than_200ms_of_mic_dma_and_unknown_mck_output():
    d = _load("devkitc1-inmp441")
    assert boards.check(d, "devkitc1-inmp441.json") == []
    short = copy.deepcopy(d)
    short["audio"]["mic"]["dma_ms"] = 120
    errs = boards.check(short, "devkitc1-inmp441.json")
    assert len(errs) == 1 and "audio.mic.dma_ms" in errs[0] and "200" in errs[0]
    bad = copy.deepcopy(d)
    bad["audio"]["mic"]["mck_output"] = "pwm"
    errs = boards.check(bad, "devkitc1-inmp441.json")
    assert len(errs) == 1 and "audio.mic.mck_output" in errs[0]


def test_every_hardware_board_states_mic_dma_of_at_least_200ms_and_its_mck_output():
    for p in sorted((ROOT / "boards").glob("*.json")):
        d = json.loads(p.read_text())
        if d["chip"] != "esp32s3":
            continue
        mic = d["audio"]["mic"]
        assert mic["dma_ms"] >= 200, p.name
        assert mic["mck_output"] in ("none", "custom_image"), p.name
        assert "dma_ms" in d["audio"]["speaker"], p.name
        es7210 = [c for c in d.get("codecs", []) if c["chip"] == "es7210"]
        if es7210 and mic["mck_output"] == "none":
            assert any("ES7210" in u and "mck" in u for u in d.get("unsupported", [])), p.name
