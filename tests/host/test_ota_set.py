"""The set `alabama ota` builds for the ESP32-S3 fits the limits the board checks (firmware/satellite/ota.py),
and its manifest is what the board's check_manifest accepts: a set that outgrows them fails here, not on a board."""
import json

from alabama.board import fwset, ota
from satellite import ota as board_ota


def test_xtensawin_set_fits_the_boards_limits_and_its_manifest_is_accepted():
    fw = ota.build_set("xtensawin", out=lambda *a: None)
    m = json.loads(fw.manifest)
    assert len(fw.manifest) <= board_ota.MAX_MANIFEST
    assert len(m["files"]) <= board_ota.MAX_FILES and fw.size <= board_ota.MAX_SET
    assert max(e["size"] for e in m["files"]) <= board_ota.MAX_FILE
    assert board_ota.check_manifest(fw.manifest, m["mpy"])["version"] == fwset.firmware_version()
    # the ABI a board reports for this set: what fwset.decode_mpy reads back as xtensawin
    assert fwset.decode_mpy(m["mpy"])[2] == "xtensawin"
    assert tuple(fwset.decode_mpy(m["mpy"])[:2]) == fwset.mpy_cross_version()
    # deterministic: the same tree gives the same pin
    assert ota.build_set("xtensawin", out=lambda *a: None).digest == fw.digest
