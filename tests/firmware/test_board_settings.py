# dual: cpython micropython
# A board file may choose a setting's default ("settings": {"capture_mode": "ambient"}: a living-room board
# streams ambiently from connect, spec §10.4); a stored (written) setting beats it; a bad value falls through.
import json

import rt_harness as H
from satellite import device as D
from satellite.wire import alabama_v1 as pb


def board_with(settings):
    b = dict(H.BOARD)
    b["settings"] = settings
    return b


def store_with(d):
    st = H.MemStore()
    st.files["settings.json"] = json.dumps(d).encode()
    return st


def test_board_file_default_opens_an_ambient_capture_at_connect():
    rt, sat, core, sink, hal = H.make(board=board_with({"capture_mode": "ambient"}), record_output=True)
    assert rt.settings["capture_mode"] == "ambient"
    opens = [e for e, _ in H.sent(core) if e.op == "capture_open"]
    assert len(opens) == 1 and opens[0].capture_open.trigger == pb.Trigger.TRIGGER_UNSPECIFIED   # no trigger: ambient
    assert sat.capture_id == opens[0].id and sat.capture_ambient


def test_without_the_board_key_the_table_default_holds():
    rt, sat, core, sink, hal = H.make(record_output=True)
    assert rt.settings["capture_mode"] == "ptt"
    assert not [e for e, _ in H.sent(core) if e.op == "capture_open"]


def test_a_stored_setting_beats_the_board_file():
    st = store_with({"capture_mode": "ptt"})
    assert D.load_settings(st, print, board_with({"capture_mode": "ambient", "volume": 30}))["capture_mode"] == "ptt"
    rt, sat, core, sink, hal = H.make(board=board_with({"capture_mode": "ambient"}), store=st, record_output=True)
    assert rt.settings["capture_mode"] == "ptt"
    assert not [e for e, _ in H.sent(core) if e.op == "capture_open"]


def test_each_setting_falls_through_on_its_own():
    st = store_with({"volume": 20, "mic_gain": 999})          # mic_gain out of range: the board's value holds
    got = D.load_settings(st, print, board_with({"capture_mode": "ambient", "mic_gain": 6, "volume": 90,
                                                 "led_brightness": "bright", "no_such": 1}))
    assert got == {"volume": 20, "mic_gain": 6, "led_brightness": 50, "capture_mode": "ambient",
                   "wake_word": ""}          # no wake model deployed here: none chosen


def test_a_write_stores_only_its_key_so_the_board_keeps_owning_the_rest():
    rt, sat, core, sink, hal = H.make(board=board_with({"capture_mode": "ambient"}), record_output=True)
    H.feed(sat.link, core, pb.Envelope(id=6, settings_write=pb.SettingsWrite(key="volume",
                                                                         value=pb.SettingValue(int_value=25))))
    assert json.loads(rt.ks.files["settings.json"]) == {"volume": 25}
    # the next boot, with the board file now saying ptt: capture_mode follows the board, volume the store
    got = D.load_settings(rt.ks, print, board_with({"capture_mode": "ptt"}))
    assert got["capture_mode"] == "ptt" and got["volume"] == 25


def test_an_unreadable_store_keeps_the_board_defaults():
    st = H.MemStore()
    st.files["settings.json"] = b"[1, 2"
    lines = []
    got = D.load_settings(st, lines.append, board_with({"capture_mode": "ambient"}))
    assert got["capture_mode"] == "ambient" and len(lines) == 1 and "unreadable" in lines[0]
    st.files["settings.json"] = b"[1, 2]"                     # JSON, not an object
    assert D.load_settings(st, lines.append, board_with({"capture_mode": "ambient"}))["capture_mode"] == "ambient"
