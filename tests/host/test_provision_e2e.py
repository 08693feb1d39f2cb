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


SSID_32 = "Upstairs-Office-Network-5GHz-Ext"
PASS_63 = "correct horse battery staple and a long tail of words to 63 ch!"


def _noisy_mic(wav48, out16, snr_db, drop_part=None, seed=36):
    """The board's microphone for a multi-part sound: [the sound with part `drop_part` (1-based) cut out in
    its middle, as a door slam would] + 1 s + [the whole sound again], white noise over all of it at
    snr_db as the reliability table defines it (P_tones / P_noise over the full 48 kHz band), then 16 kHz
    as a board's I2S microphone delivers it (sound.to_rate)."""
    import numpy as np
    from alabama import audio
    from alabama.provision import sound
    rate, channels, width, raw = audio.read(wav48)
    assert (channels, width) == (1, 2)
    x = np.frombuffer(raw, "<i2").astype(np.float64) / 32767.0
    first = x.copy()
    if drop_part is not None:
        on = np.flatnonzero(np.abs(x) > 0)
        # the parts are the runs of sound between silences longer than half the gap between them
        breaks = np.flatnonzero(np.diff(on) > int(sound.PART_GAP_S * rate / 2))
        starts = np.concatenate([[on[0]], on[breaks + 1]])
        ends = np.concatenate([on[breaks], [on[-1]]])
        a, b = starts[drop_part - 1], ends[drop_part - 1]
        mid = (a + b) // 2
        first[mid - 3 * rate // 2:mid + 3 * rate // 2] = 0.0           # 3 s of the part lost
    sig = np.concatenate([first, np.zeros(rate), x])
    p = np.mean(x[np.abs(x) > 0] ** 2)
    sig = sig + np.random.default_rng(seed).normal(0.0, np.sqrt(p / 10 ** (snr_db / 10.0)), len(sig))
    y = sound.to_s16(sound.to_rate(sig, sound.MIC_RATE))
    audio.write(str(out16), y.tobytes(), sound.MIC_RATE)
    return out16


@pytest.mark.parametrize("snr_db", [0.0, -5.0])
def test_issue36_long_wifi_record_in_parts_a_lost_part_asked_for_again(core, tmp_path, capsys, snr_db):
    """Issue 36.3 on the virtual board: a record with a 32-byte SSID and a 63-byte passphrase (over ggwave's
    140 bytes) played as numbered parts at 0 and -5 dB SNR (points where the table in docs/provisioning.md
    decodes every single payload at drift 0); the first play loses part 2 (the board says which part is missing and keeps part
    1), the second play's part 1 is a repeat (ignored) and its part 2 completes the record: stored, XX +
    token, Paired, and the Wi-Fi credentials are on the board's flash."""
    wav = tmp_path / "provision48.wav"
    assert cli.main(["provision", "sound", "--data", str(core.data_dir), "--host", "127.0.0.1",
                     "--port", str(core.port), "--no-key", "--wifi-ssid", SSID_32, "--wifi-passphrase", PASS_63,
                     "--wav", str(wav), "--show-secrets"]) == 0
    out = capsys.readouterr().out
    sent = bytes.fromhex(next(ln for ln in out.splitlines() if ln.startswith("record ")).split()[1])
    assert len(sent) > 140 and "2 parts" in out
    mic = _noisy_mic(wav, tmp_path / "mic16.wav", snr_db, drop_part=2)
    flash = tmp_path / "flash"
    vb = sim.VirtualBoard(flash, mic=mic, speaker=tmp_path / "speaker.wav",
                          env={"ALABAMA_SIM_BACKOFF_BASE_MS": "300", "ALABAMA_SIM_BACKOFF_CAP_MS": "2000"})
    vb.start()
    try:
        vb.wait_log(lw.LISTENING, 30)
        vb.wait_log(r"provision: part 1 of 2 received", 40)
        vb.wait_log(r"provision: part 2 of 2 missing: play the sound again", 30)
        vb.wait_log(r"provision: part 1 of 2 again: already held, ignored", 40)
        vb.wait_log(r"provision: all 2 parts in", 30)
        vb.wait_log(lw.record_stored("127.0.0.1", core.port) + r"no core key \(XX\), pairing token", 10)
        vb.wait_log(lw.PAIRED, 30)
    finally:
        vb.stop()
    stored = record.decode((flash / "data" / "provision.bin").read_bytes())
    assert stored.wifi_ssid == SSID_32 and stored.wifi_passphrase == PASS_63
    assert stored.pairing_token == ""                                     # used up on Paired, as ever
    assert core.violations() == []


@pytest.mark.parametrize("damage", ["record", "device_key"])
def test_issue36_a_damaged_record_or_key_is_said_once_with_its_fix_and_the_board_waits(core, tmp_path, damage):
    """A damaged data/provision.bin or data/device.key: one line naming the file, what happened and the
    command that fixes it, then halted (no reconnect loop); the fix (a new record, with the identity
    forgotten for a damaged key, as `alabama provision serial [--factory-reset]` writes them) brings the
    board to the core."""
    flash = tmp_path / "flash"
    sim.provision(flash, "127.0.0.1", core.port, core_key=core.key)
    data = flash / "data"
    if damage == "record":
        raw = bytearray((data / record.RECORD).read_bytes())
        raw[0] = 0x37                                       # was read as "version 55: update the firmware"
        (data / record.RECORD).write_bytes(bytes(raw))
        want = (r"data/provision\.bin is damaged \(its first byte is not the record version.*\): provision this "
                r"board again: `alabama provision serial --data DIR --port PORT`.*halted until then \(no retry\)")
    else:
        (data / record.DEVICE_KEY).write_bytes(b"\x01" * 7)
        want = (r"data/device\.key is damaged \(holds 7 bytes, not a 32-byte key\): factory-reset this board: "
                r"`alabama provision serial --factory-reset --data DIR --port PORT`.*\(no retry\)")
    vb = sim.VirtualBoard(flash, speaker=tmp_path / "speaker.wav",
                          env={"ALABAMA_SIM_BACKOFF_BASE_MS": "100", "ALABAMA_SIM_BACKOFF_CAP_MS": "200"})
    vb.start()
    try:
        vb.wait_log(want, 30)
        vb.wait_log(lw.HALTED, 10)
        m = vb.mark()
        import time
        time.sleep(2.0)                                     # ten backoffs' worth: nothing is retried
        assert not any("reconnecting" in ln or "is damaged" in ln or "INTERNAL ERROR" in ln
                       for ln in vb.lines()[m:]), vb.lines()[m:]
        sim.provision(flash, "127.0.0.1", core.port, core_key=core.key, token="again",
                      fresh_identity=damage == "device_key")
        vb.wait_log(lw.NEW_RECORD, 15, m)
        vb.wait_log(lw.ACCEPTED, 30, m)
    finally:
        vb.stop()
