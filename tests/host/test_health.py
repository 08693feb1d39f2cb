"""Device health end to end: the virtual board's device.health Event (declared with a metadata_schema the core
validates, R8.2-e), device.info through the core's control endpoint, and `alabama core devices --health`."""
import json

import pytest

from alabama.board import logwords as lw
from alabama.cli import main as alabama

from vb_support import board, device_id

pytestmark = pytest.mark.needs_micropython


def devices_health(core, capsys):
    capsys.readouterr()
    assert alabama(["core", "devices", "--health", "--data", str(core.data_dir)]) == 0
    return capsys.readouterr().out


def test_r8_2_e_health_event_at_boot_validates_against_its_schema(core, tmp_path, capsys):
    """A guest (no pairing token): its device.health Event at boot is validated by the core against the declared
    metadata_schema (a violation would be in the report) and is what `devices --health` shows for it."""
    with board(tmp_path, core) as vb:
        vb.wait_log(lw.HEALTH_BOOT, 30)
        dev = device_id(vb)
        conn = core.run(lambda: core.core.connections[dev])
        ev = None
        for _ in range(50):
            ev = core.run(lambda: conn.health_event)
            if ev:
                break
            import time
            time.sleep(0.1)
        assert ev["reason"] == "boot" and ev["firmware"] == "0.1.0" and ev["rssi"] == -52
        assert ev["crash_count"] == 0 and ev["ota"] == "ok" and ev["heap_min"] > 0 and len(ev["digest"]) == 64
        h = core.call(core.core.device_health(dev))
        assert h["source"] == "event" and h["firmware"] == "0.1.0"
        out = devices_health(core, capsys)
        row = [ln for ln in out.splitlines() if ln.startswith(dev[:16])]
        assert row and "0.1.0" in row[-1] and "-52 dBm" in row[-1] and "(event)" in row[-1]   # guests: no tools
    assert core.violations() == []


def test_device_info_health_fields_and_devices_health_table(core, tmp_path, capsys):
    token, _ = core.run(core.core.mint_token, 600)
    with board(tmp_path, core, token=token) as vb:
        vb.wait_log(lw.PAIRED, 30)
        dev = device_id(vb)
        vb.command("rssi -81")                         # the sim HAL's Wi-Fi signal moves
        info = json.loads(core.call(core.core.invoke(dev, "device.info", "{}")).content[0].text)
        assert info["rssi"] == -81 and info["reset_reason"] == "PWRON_RESET" and info["boots"] == 1
        assert info["heap_min"] <= info["heap_free"] and info["uptime_ms"] > 0 and info["reconnect_count"] == 0
        assert info["frames_dropped"] == 0 and info["crash_count"] == 0 and info["ota"] == {"state": "ok"}
        assert info["mpy"] and info["flash_free"] > 0
        out = devices_health(core, capsys)
        head = [ln for ln in out.splitlines() if ln.startswith("DEVICE")][0]
        for col in ("FIRMWARE", "DIGEST", "UPTIME", "HEAP FREE/MIN", "RSSI", "RESET", "CRASHES", "RECONN", "DROPPED"):
            assert col in head
        row = [ln for ln in out.splitlines() if ln.startswith(dev[:16])][-1]
        assert "-81 dBm" in row and "PWRON_RESET" in row and info["firmware_digest"][:12] in row
        # a reconnect is counted
        m = vb.mark()
        core.call(core.core.connections[dev].session.close("test: drop the session") or _noop())
        vb.wait_log(lw.ACCEPTED, 30, m)
        info = json.loads(core.call(core.core.invoke(dev, "device.info", "{}")).content[0].text)
        assert info["reconnect_count"] == 1
    assert core.violations() == []


async def _noop():
    return None


def test_hil_report_shows_the_boards_health(tmp_path):
    """One HIL scenario on the virtual board: the bench samples device health at teardown and the report shows
    it per device (run page and scenario)."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "alabama.cli", "hil", "--board", "sim", "-k", "tool_call",
                        "--report", str(tmp_path / "rep")], capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    run = json.loads(next((tmp_path / "rep").glob("*/run.json")).read_text())
    (sc,) = run["scenarios"]
    (h,) = sc["health"].values()
    assert h["source"] == "device.info" and h["firmware"] == "0.1.0" and h["rssi"] == -52
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "<h2>Device health</h2>" in page and h["firmware_digest"][:12] in page and "PWRON_RESET" in page
