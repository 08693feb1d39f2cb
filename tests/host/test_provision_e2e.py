"""End to end on the virtual board (real micropython, compiled firmware, real Noise, 127.0.0.1): an
unprovisioned board listens; `alabama provision sound` (the real ggwave) is what its microphone hears;
the board stores the record, connects, sends the token, is Paired, pins the core key, and after a
reset reconnects over IK (spec §7.3 token path, R7.3-b, R7.3-d, R7.3-e).

The stock firmware enters listening mode by itself when it holds no record (runtime._wait_reprovision)."""
import pytest

from alabama import cli
from alabama.board import logwords as lw, sim
from alabama.core import registry as reg
from alabama.provision import record

pytestmark = pytest.mark.needs_micropython
ggwave = pytest.importorskip("ggwave")


def test_r7_3_b_r7_3_e_sound_provisioning_token_paired_then_ik(core, tmp_path, capsys):
    wav = tmp_path / "provision.wav"
    assert cli.main(["provision", "sound", "--data", str(core.data_dir), "--host", "127.0.0.1",
                     "--port", str(core.port), "--no-key", "--wav", str(wav), "--rate", "16000"]) == 0
    out = capsys.readouterr().out
    sent = bytes.fromhex(next(ln for ln in out.splitlines() if ln.startswith("record ")).split()[1])
    token = record.decode(sent).pairing_token
    flash = tmp_path / "flash"
    vb = sim.VirtualBoard(flash, mic=wav, speaker=tmp_path / "speaker.wav",
                        env={"ALABAMA_SIM_BACKOFF_BASE_MS": "300", "ALABAMA_SIM_BACKOFF_CAP_MS": "2000"})
    vb.start()
    try:
        vb.wait_log(lw.LISTENING, 30)
        vb.wait_log(lw.HEARD, 20)
        vb.wait_log(lw.record_stored("127.0.0.1", core.port) + r"no core key \(XX\), pairing token", 30)
        assert (flash / "data" / "provision.bin").exists()
        vb.wait_log(lw.connecting("127.0.0.1", core.port, "XX"), 20)
        vb.wait_log(lw.ACCEPTED, 20)
        vb.wait_log(lw.PAIRED, 20)                         # token path: Paired on the session
        assert (flash / "data" / "core.pub").read_bytes() == core.key    # R7.3-e: pinned on Paired
        rec = record.decode((flash / "data" / "provision.bin").read_bytes())
        assert rec.core_host == "127.0.0.1" and rec.core_port == core.port and rec.pairing_token == ""
        m = vb.mark()
        vb.reset()                                                   # reconnect: IK with the pinned key
        vb.wait_log(lw.connecting(), 30, m)
        vb.wait_log(lw.ACCEPTED, 20, m)
        assert not any("provision:" in ln for ln in vb.lines()[m:])  # a stored record: no listening
        assert not any("paired" in ln for ln in vb.lines()[m:])
    finally:
        vb.stop()
    dev = reg.Registry(core.data_dir).lookup(reg.fingerprint(sim.device_public_key(flash)))
    assert dev is not None and dev.trust == reg.PAIRED
    assert not reg.Registry(core.data_dir).consume_token(token, "someone-else")   # the token was used
    assert [r.as_dict()["noise_pattern"] for r in core.reports()] == ["XX", "IK"]
    assert core.violations() == []


def test_button_gesture_enters_listening_mode_and_a_new_record_reconnects(core, tmp_path):
    """Five short presses leave the core for listening mode (sound provisioning on demand); a record
    written by another carrier (serial) while listening is picked up and the board connects again."""
    flash = tmp_path / "flash"
    sim.provision(flash, "127.0.0.1", core.port, core_key=core.key)
    vb = sim.VirtualBoard(flash, speaker=tmp_path / "speaker.wav")
    vb.start()
    try:
        vb.wait_log(lw.ACCEPTED, 30)
        m = vb.mark()
        for _ in range(5):
            vb.press()
            vb.release()
        vb.wait_log(lw.GESTURE_TO_LISTENING, 10, m)
        vb.wait_log(lw.LISTENING, 10, m)
        m = vb.mark()
        sim.provision(flash, "127.0.0.1", core.port, core_key=core.key, token="again")   # as serial would
        vb.wait_log(lw.NEW_RECORD, 15, m)
        vb.wait_log(lw.ACCEPTED, 30, m)
    finally:
        vb.stop()
