"""Sound provisioning, sender side: the record as ggwave audio ([DT] Fastest, protocol id 8).

Responsible for turning record bytes into ggwave's waveform (the real ``ggwave`` package, variable-length
payload, at most 140 bytes; a longer record goes as numbered parts, ``parts.split``, one after another),
into a 16-bit mono WAV (48 kHz as ggwave makes it, or 16 kHz — what a
board's microphone and the virtual board's mic file take), and for playing it with a player found on
the host. Never decodes: the firmware receiver (firmware/satellite/provision/ggwave_rx.py) does.
"""
import io
import os
import shutil
import subprocess
import tempfile

from ..errors import AlabamaError, UsageError
from . import parts, record

PROTOCOL_ID = 8                  # GGWAVE_PROTOCOL_DT_FASTEST: 3 frames per byte, 48 kHz, tones from 1125 Hz
SAMPLE_RATE = 48000              # ggwave's own output rate
MIC_RATE = 16000                 # the rate the firmware receiver listens at
RATES = (SAMPLE_RATE, MIC_RATE)
MAX_PAYLOAD = record.SOUND_MAX_BYTES   # ggwave's variable-length limit (kMaxLengthVariable = 140)
DEFAULT_VOLUME = 50              # ggwave volume 0..100 (50: peak at half of full scale)
#: Players tried by --play, in order: (command, arguments before the file).
PLAYERS = (("paplay", ()), ("pw-play", ()), ("aplay", ("-q",)), ("play", ("-q",)), ("afplay", ()))
PLAY_TIMEOUT_S = 120
#: Before a token is minted, --play plays this much silence: a player with no audio device fails on it.
SILENCE_S = 0.02
PROBE_TIMEOUT_S = 15
#: Silence between the parts of a long record: the board's receiver is listening again a quarter of a
#: second into the end marker of the part before (firmware ggwave_rx, "End").
PART_GAP_S = 0.75


class SoundError(AlabamaError):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def _ggwave():
    try:
        import ggwave
    except ImportError:
        from ..extras import package_hint
        raise SoundError("NO_GGWAVE", "the ggwave package is not installed: %s, or provision by QR code or serial "
                         "instead" % package_hint("ggwave")) from None
    return ggwave


def waveform(data, volume=DEFAULT_VOLUME):
    """Record bytes -> ggwave's float32 waveform at 48 kHz (numpy array)."""
    import numpy as np
    data = bytes(data)
    if not 1 <= len(data) <= MAX_PAYLOAD:
        raise SoundError("TOO_LONG", "a sound payload is 1..%d bytes, this record is %d: provision by QR code "
                         "or serial instead" % (MAX_PAYLOAD, len(data)))
    if not 0 < volume <= 100:
        raise UsageError("--volume is 1..100 (ggwave's volume), got %d" % volume)
    raw = _ggwave().encode(data, protocolId=PROTOCOL_ID, volume=int(volume))
    return np.frombuffer(raw, dtype=np.float32).astype(np.float64)


def _lowpass(taps=127, cutoff_hz=7000.0, rate=SAMPLE_RATE):
    import numpy as np
    t = np.arange(taps) - (taps - 1) / 2
    fc = cutoff_hz / rate
    h = 2 * fc * np.sinc(2 * fc * t) * np.hamming(taps)
    return h / h.sum()


def to_rate(x48, rate):
    """48 kHz float waveform -> `rate` (48000, or 16000 by low-pass at 7 kHz and keeping every third
    sample: ggwave's tones are 1.1-3.3 kHz, so nothing of the signal is lost)."""
    import numpy as np
    if rate == SAMPLE_RATE:
        return np.asarray(x48, dtype=np.float64)
    if rate != MIC_RATE:
        raise UsageError("--rate is %s, got %d" % (" or ".join(str(r) for r in RATES), rate))
    return np.convolve(x48, _lowpass(), mode="same")[::SAMPLE_RATE // MIC_RATE]


def to_s16(x):
    import numpy as np
    return np.clip(np.round(np.asarray(x) * 32767.0), -32768, 32767).astype("<i2")


def wav_bytes(data, rate=SAMPLE_RATE, volume=DEFAULT_VOLUME, lead_s=0.25, tail_s=0.25):
    """Record bytes -> a complete 16-bit mono WAV file (bytes), with a little silence either side so a
    player's start-up click does not land on the start marker. A record over MAX_PAYLOAD bytes goes as its
    numbered parts, PART_GAP_S apart."""
    import numpy as np
    gap = np.zeros(int(PART_GAP_S * rate))
    pcm = [np.zeros(int(lead_s * rate))]
    for i, p in enumerate(parts.split(data)):
        if i:
            pcm.append(gap)
        pcm.append(to_rate(waveform(p, volume), rate))
    pcm.append(np.zeros(int(tail_s * rate)))
    from alabama import audio
    return audio.write(io.BytesIO(), to_s16(np.concatenate(pcm)).tobytes(), rate).getvalue()


def duration_s(n):
    """Seconds ggwave [DT] Fastest takes for an n-byte payload (markers 2 x 16 frames, 3 frames a byte,
    1024-sample frames at 48 kHz): the receiver's progress bar spans this."""
    ecc = 2 if n < 4 else max(4, 2 * (n // 5))
    return (2 * 16 + 3 * (3 + n + ecc)) * 1024 / SAMPLE_RATE


def record_s(data):
    """Seconds of sound for record bytes: its one payload, or its parts and the gaps between them."""
    ps = parts.split(data)
    return sum(duration_s(len(p)) for p in ps) + PART_GAP_S * (len(ps) - 1)


def check_ready(play=False, which=shutil.which, run=subprocess.run):
    """Refuse now what would fail after the record is made: no ggwave package, or --play with no player, or a
    player that cannot play here (no audio device: it plays SILENCE_S of silence to find out)."""
    _ggwave()
    if play:
        _play(_player(which), silence_wav(), run, PROBE_TIMEOUT_S, probe=True)


def find_player(which=shutil.which):
    """(argv prefix) of the first audio player on PATH, or None."""
    for cmd, args in PLAYERS:
        path = which(cmd)
        if path:
            return [path] + list(args)
    return None


def _player(which):
    argv = find_player(which)
    if argv is None:
        raise SoundError("NO_PLAYER", "no audio player found (tried %s): write a file with --wav out.wav and "
                         "play it with any player" % ", ".join(c for c, _ in PLAYERS))
    return argv


def silence_wav(seconds=SILENCE_S, rate=SAMPLE_RATE):
    """A WAV of SECONDS of silence: what check_ready plays to learn whether the player has an audio device."""
    from alabama import audio
    return audio.write(io.BytesIO(), bytes(2 * int(seconds * rate)), rate).getvalue()


def play(wav, which=shutil.which, run=subprocess.run):
    """Play WAV bytes with the first player found; SoundError when there is none or it fails."""
    argv = _player(which)
    _play(argv, wav, run, PLAY_TIMEOUT_S)
    return argv[0]


def _play(argv, wav, run, timeout, probe=False):
    """Run the player ARGV on WAV from a temporary file (removed after); PROBE: the line says nothing was made yet."""
    name = os.path.basename(argv[0])
    fix = ("play it on a computer with a speaker (nothing was minted)" if probe else "play it with another player")
    fd, path = tempfile.mkstemp(prefix="alabama-provision-", suffix=".wav")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(wav)
        try:
            r = run(argv + [path], capture_output=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SoundError("PLAYER", "%s failed (%s): write a file with --wav out.wav and %s" % (name, e, fix)) \
                from None
        if r.returncode != 0:
            tail = (r.stderr or b"").decode(errors="replace").strip().splitlines()
            raise SoundError("PLAYER", "%s %s %d (%s): write a file with --wav out.wav and %s"
                             % (name, "cannot play here: it exited" if probe else "exited", r.returncode,
                                tail[-1] if tail else "no message", fix))
    finally:
        os.unlink(path)
