"""`alabama provision sound`: the record as ggwave [DT] Fastest audio (the real ggwave package), the WAV
at 48 and 16 kHz, decoded back by ggwave's own decoder and by our firmware receiver, the 140-byte limit
a longer record as numbered parts, and --play with and without a player. Also makes (and checks) the real
ggwave recording the dual test tests/firmware/test_provision_listen.py feeds to listening mode:

    .venv/bin/python tests/host/test_provision_sound.py --make-data
"""
import io
import os
import pathlib
import shutil
import stat
import sys
import wave

import numpy as np
import pytest

from alabama import cli
from alabama.provision import record, sound
from alabama.v1 import provisioning_pb2

ggwave = pytest.importorskip("ggwave")

ROOT = pathlib.Path(__file__).resolve().parents[2]
LISTEN_DATA = ROOT / "tests" / "firmware" / "data" / "provision_record_16k.raw"


def listen_record():
    """The record in LISTEN_DATA (tests/firmware/test_provision_listen.py repeats its fields)."""
    from alabama.noise.state import public_key
    return provisioning_pb2.ProvisioningRecord(
        core_host="10.0.0.2", core_port=7355, core_key=public_key(bytes(range(1, 33))),
        pairing_token="k3J9-pQ2vX7mZr0aLw5eYt", token_expires=1767225600)


def make_listen_audio():
    """ggwave.encode(record, protocolId=8) -> 16 kHz (our low-pass + decimate), 0.3 s lead, 0.2 s tail,
    white noise 20 dB below the transmission's power (seeded): s16 little-endian samples."""
    data = record.encode(listen_record())
    x = sound.to_rate(sound.waveform(data, volume=sound.DEFAULT_VOLUME), sound.MIC_RATE)
    x = np.concatenate([np.zeros(int(0.3 * sound.MIC_RATE)), x, np.zeros(int(0.2 * sound.MIC_RATE))])
    p = np.mean(x[x != 0] ** 2)
    x = x + np.random.default_rng(7).normal(0.0, np.sqrt(p / 10 ** 2.0), len(x))
    return sound.to_s16(x), data


def _rec(**kw):
    base = dict(core_host="192.168.1.20", core_port=7355, core_key=bytes(range(32)), pairing_token="T" * 22,
                token_expires=4102444800)
    base.update(kw)
    return provisioning_pb2.ProvisioningRecord(**base)


def _wav(blob):
    with wave.open(io.BytesIO(blob), "rb") as w:
        return w.getframerate(), w.getnchannels(), w.getsampwidth(), np.frombuffer(w.readframes(w.getnframes()), "<i2")


def _ggwave_decode(x48):
    ggwave.disableLog()
    inst = ggwave.init(ggwave.getDefaultParameters())
    try:
        b = (x48.astype(np.float32) / 32768.0).tobytes()
        for i in range(0, len(b), 4096):
            p = ggwave.decode(inst, b[i:i + 4096])
            if p is not None:
                return bytes(p)
    finally:
        ggwave.free(inst)
    return None


def _ours_decode(x16):
    from satellite.provision.ggwave_rx import GgwaveReceiver
    rx = GgwaveReceiver()
    buf = x16.astype("<i2").tobytes()
    for i in range(0, len(buf), 640):
        p = rx.feed(buf[i:i + 640], len(buf[i:i + 640]) // 2)
        if p is not None:
            return p
    return None


def test_waveform_is_ggwave_dt_fastest_of_the_record_bytes():
    data = record.encode(_rec())
    x = sound.waveform(data)
    ref = np.frombuffer(ggwave.encode(data, protocolId=8, volume=50), dtype=np.float32)
    assert np.array_equal(x, ref.astype(np.float64))
    assert len(x) == round(sound.duration_s(len(data)) * sound.SAMPLE_RATE)
    assert abs(np.max(np.abs(x)) - 0.5) < 1e-3


@pytest.mark.parametrize("rate", [48000, 16000])
def test_wav_decodes_back_to_the_exact_record(rate):
    data = record.encode(_rec(wifi_ssid="home", wifi_passphrase="correct horse"))
    r, ch, width, pcm = _wav(sound.wav_bytes(data, rate=rate))
    assert (r, ch, width) == (rate, 1, 2)
    assert len(pcm) == int(0.25 * rate) * 2 + len(sound.to_rate(sound.waveform(data), rate))
    if rate == 48000:
        assert _ggwave_decode(pcm) == data                  # ggwave's own decoder
    else:
        got = _ours_decode(pcm)                             # the firmware receiver (pure path on CPython)
        assert got == data
        assert record.decode(got) == record.decode(data)


def _ggwave_decode_all(x48):
    """Every payload ggwave's own decoder hears in x48, in order."""
    ggwave.disableLog()
    inst = ggwave.init(ggwave.getDefaultParameters())
    got = []
    try:
        b = (x48.astype(np.float32) / 32768.0).tobytes()
        for i in range(0, len(b), 4096):
            p = ggwave.decode(inst, b[i:i + 4096])
            if p is not None:
                got.append(bytes(p))
    finally:
        ggwave.free(inst)
    return got


def test_a_record_over_140_bytes_goes_as_its_numbered_parts(tmp_path, capsys):
    """Issue 36: a 32-byte SSID and a 63-byte passphrase (was: refused, "shorten wifi_passphrase"). The WAV
    holds the parts one after another; ggwave's own decoder hears exactly parts.split's payloads."""
    from alabama.provision import parts
    argv = ["provision", "sound", "--record", record.encode(_rec()).hex(), "--wifi-ssid", "S" * 32,
            "--wifi-passphrase", "P" * 63, "--wav", str(tmp_path / "x.wav"), "--show-secrets"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    data = bytes.fromhex(next(ln for ln in out.splitlines() if ln.startswith("record ")).split()[1])
    assert len(data) > sound.MAX_PAYLOAD and "2 parts" in out and "play the same sound again" in out
    rate, _, _, pcm = _wav((tmp_path / "x.wav").read_bytes())
    heard = _ggwave_decode_all(pcm)
    assert heard == parts.split(data) and parts.join(heard[::-1]) == data
    assert abs(len(pcm) / rate - (sound.record_s(data) + 0.5)) < 0.01
    e = pytest.raises(sound.SoundError, sound.waveform, bytes(141))       # one payload is still <= 140
    assert e.value.code == "TOO_LONG"


def test_cli_wav_at_16k_and_its_message(tmp_path, capsys):
    data = record.encode(_rec())
    out = tmp_path / "p.wav"
    assert cli.main(["provision", "sound", "--record", data.hex(), "--wav", str(out), "--rate", "16000"]) == 0
    text = capsys.readouterr().out
    assert "wrote %s (16000 Hz, %.1f s of ggwave [DT] Fastest)" % (out, sound.duration_s(len(data))) in text
    rate, _, _, pcm = _wav(out.read_bytes())
    assert rate == 16000 and _ours_decode(pcm) == data


def test_cli_needs_wav_or_play(capsys):
    rc = cli.main(["provision", "sound", "--record", record.encode(_rec()).hex()])
    assert rc == 2 and "--wav FILE" in capsys.readouterr().err


def _fake_player(d, name):
    """A player on PATH that copies the WAV it is given into d/played.wav."""
    p = d / name
    p.write_text("#!/bin/sh\nfor a; do f=$a; done\n%s \"$f\" %s\n" % (shutil.which("cp"), d / "played.wav"))
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return p


def test_play_uses_the_first_player_found(tmp_path, monkeypatch, capsys):
    _fake_player(tmp_path, "aplay")
    monkeypatch.setenv("PATH", str(tmp_path))
    data = record.encode(_rec())
    assert cli.main(["provision", "sound", "--record", data.hex(), "--play"]) == 0
    assert "played with %s" % (tmp_path / "aplay") in capsys.readouterr().out
    rate, _, _, pcm = _wav((tmp_path / "played.wav").read_bytes())
    assert rate == 48000 and _ggwave_decode(pcm) == data
    assert sound.find_player(lambda c: "/x/" + c if c in ("play", "paplay") else None) == ["/x/paplay"]
    assert sound.find_player(lambda c: "/x/" + c if c == "play" else None) == ["/x/play", "-q"]


def test_no_player_says_use_wav(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    rc = cli.main(["provision", "sound", "--record", record.encode(_rec()).hex(), "--play"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1
    assert "no audio player found (tried paplay, pw-play, aplay, play, afplay): write a file with --wav" in err[0]


def test_failing_player_is_one_line_and_temp_file_removed(tmp_path):
    seen = []

    def run(argv, **kw):
        seen.append(argv[-1])
        assert os.path.exists(argv[-1])
        return type("R", (), {"returncode": 1, "stderr": b"aplay: main: audio open error: No such device\n"})()

    with pytest.raises(sound.SoundError, match=r"aplay exited 1 \(aplay: main: audio open error: No such device\)"):
        sound.play(b"RIFF", which=lambda c: "/usr/bin/aplay" if c == "aplay" else None, run=run)
    assert seen and not os.path.exists(seen[0])


def test_listen_audio_file_is_ggwave_encode_of_the_record():
    """The committed recording is what make_listen_audio() makes (so it is ggwave's own audio)."""
    x16, data = make_listen_audio()
    have = np.fromfile(LISTEN_DATA, dtype="<i2")
    assert len(have) == len(x16)
    assert int(np.max(np.abs(have.astype(np.int32) - x16.astype(np.int32)))) <= 1
    assert _ours_decode(have) == data


if __name__ == "__main__":
    if sys.argv[1:] == ["--make-data"]:
        x16, data = make_listen_audio()
        LISTEN_DATA.parent.mkdir(parents=True, exist_ok=True)
        x16.tofile(LISTEN_DATA)
        print("wrote %s: %d samples, record %s" % (LISTEN_DATA, len(x16), data.hex()))
    else:
        print(__doc__)
