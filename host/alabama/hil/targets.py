"""The board under test, behind one small interface: the virtual board or a real board on a serial port.

Responsible for provisioning (a fresh identity and a provisioning record per scenario), starting and
stopping the firmware, pressing its button, feeding its microphone, reading what it played, its serial
log and its free heap. ``SimTarget`` drives ``alabama.board.sim`` in-process (the unmodified firmware
under the real ``micropython``); ``SerialTarget`` drives a real board with ``alabama deploy`` and the
serial port. It knows nothing of scenarios or of the wire.

Features a scenario can ask for (``@pytest.mark.needs(...)``): ``button`` (press/release/long press
from the bench: virtual board only), ``mic`` (a microphone to capture with: the virtual board hears
the WAV the bench picks, a real board hears the room, whose silence the core's endpointer closes after
5 s), ``speaker`` (renders are played; the virtual board also hands the bench what it played),
``heap`` (free heap readable: control channel, or the ``heap_free=`` a real board logs), ``restart``,
``loopback`` (a real board's speaker acoustically looped into its own microphone: docs/hil.md),
``mic_feed`` (the bench can put a known WAV into the microphone: the virtual board's mic file; a real board
hears it from the host's loudspeaker on ``--speaker-out DEVICE``).
"""
import os
import pathlib
import re
import shutil
import subprocess
import threading
import time

from alabama import REPO
from alabama.provision import record as record_codec

from .corehost import BenchError

#: Serial log lines the bench reads the free heap from (the runtime logs gc.mem_free()).
HEAP_RE = re.compile(r"(?:mem_free|heap(?:_free)?|free heap)\D{0,3}(\d{3,})", re.I)


def default_firmware():
    return REPO / "firmware"


class Target:
    name = "board"
    virtual = False
    features = frozenset()
    #: The address the board must be given for the core (None: the bench's bind address).
    connect_host = None

    def setup(self):
        pass

    def teardown(self):
        pass

    def present(self):
        """False once the board is gone (a real board unplugged: its serial port vanished); the bench then
        stops using it and says so (docs/hil.md, "Bad input")."""
        return True

    def begin_scenario(self, workdir, t0=None):
        pass

    def provision(self, rec, fresh_identity=True):
        raise NotImplementedError

    def start(self):
        raise NotImplementedError

    def stop(self):
        pass

    def press(self):
        raise BenchError("this board's button cannot be pressed from the bench")

    release = long_press = press

    def set_mic(self, path):
        raise BenchError("this board's microphone cannot be fed from the bench")

    def heap(self):
        return None

    def log_text(self):
        return ""

    def waves(self):
        return []

    def played_frames(self):
        """Samples the speaker actually output (None when the bench cannot tell)."""
        return None

    def silence_after(self, t_cancel, done_row):
        """Seconds from a StreamCancel (timeline time) to the speaker going silent; by default up to the
        board's PlaybackDone, which it sends once its output has stopped (an upper bound)."""
        return done_row.t - t_cancel

    def log_wait(self, pattern, after=0, timeout=10.0):
        """The first match of regex ``pattern`` in the serial log past character ``after``, or None."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.log_text(), after)
            if m is not None or time.monotonic() > deadline:
                return m
            time.sleep(0.05)


def make_target(board, board_type=None, firmware=None, workdir=None, loopback=False, deploy=True, speaker_out=None):
    if board == "sim":
        return SimTarget(board_type or "sim", firmware=firmware, workdir=workdir)
    return SerialTarget(board, board_type, workdir=workdir, loopback=loopback, deploy=deploy, speaker_out=speaker_out)


# ------------------------------------------------------------------------------------------ virtual
class SimTarget(Target):
    """The virtual board (``alabama.board.sim.VirtualBoard``): the firmware (or a mutant copy) compiled and
    run under the real ``micropython`` unix port, one fresh flash directory per scenario, driven through the
    simulated HAL's control channel; its serial log lines are stamped with the scenario's timeline clock."""

    virtual = True
    features = frozenset({"button", "mic", "mic_feed", "speaker", "heap", "restart", "lamp"})   # lamp: hal/sim.py light.set
    #: Test knobs of the simulated HAL (hal/sim.py): quick pings and backoff so liveness scenarios are short.
    SIM_ENV = {"ALABAMA_SIM_PING_MS": "1000", "ALABAMA_SIM_BACKOFF_BASE_MS": "250",
               "ALABAMA_SIM_BACKOFF_CAP_MS": "4000"}

    def __init__(self, board_type="sim", firmware=None, workdir=None):
        self.board_type = board_type
        self.name = "virtual board (%s)" % board_type
        self.firmware = pathlib.Path(firmware) if firmware else default_firmware()
        self.workdir = pathlib.Path(workdir) if workdir else None
        self.flash = None
        self.proc = None
        self.rec = None
        self.mic_path = None
        self.speaker_path = None
        self._logs = []
        self._lines = []
        self.env = dict(self.SIM_ENV)
        self.t0 = time.monotonic()

    def setup(self):
        from alabama.board import boards, sim
        self.board = boards.load(self.board_type)
        if not self.board.is_virtual:
            raise BenchError("board type %s is not a virtual board: use --board PORT for it" % self.board_type)
        if not (self.firmware / "satellite").is_dir() or not (self.firmware / "main.py").exists():
            raise BenchError("%s holds no firmware (satellite/ and main.py)" % self.firmware)
        sim.find_micropython()

    def begin_scenario(self, workdir, t0=None):
        self.stop()
        self.flash = pathlib.Path(workdir) / "flash"
        if self.flash.exists():
            shutil.rmtree(self.flash)
        (self.flash / record_codec.DATA_DIR).mkdir(parents=True)
        self.speaker_path = str(pathlib.Path(workdir) / "speaker.wav")
        self.mic_path = None
        self._logs = []
        self.rec = None
        self.env = dict(self.SIM_ENV)
        self.t0 = time.monotonic() if t0 is None else t0

    def _data_dir(self):
        return self.flash / record_codec.DATA_DIR

    def provision(self, rec, fresh_identity=True):
        """Write the record where the firmware reads it (flash/data); with ``fresh_identity`` also a new
        device key, so the bench knows the public key before the board connects."""
        from alabama.noise.state import public_key
        d = self._data_dir()
        for name in (record_codec.RECORD, record_codec.CORE_KEY):
            try:
                os.remove(d / name)
            except OSError:
                pass
        if fresh_identity or not (d / record_codec.DEVICE_KEY).exists():
            (d / record_codec.DEVICE_KEY).write_bytes(os.urandom(32))
        (d / record_codec.RECORD).write_bytes(record_codec.encode(rec))
        self.rec = rec
        return public_key((d / record_codec.DEVICE_KEY).read_bytes())

    def pinned_core_key(self):
        p = self._data_dir() / record_codec.CORE_KEY
        return p.read_bytes() if p.exists() else None

    def stored_record(self):
        p = self._data_dir() / record_codec.RECORD
        return record_codec.decode(p.read_bytes()) if p.exists() else None

    def start(self):
        from alabama.board import sim
        if self.proc is not None:
            self.stop()
        lines = self._lines = []
        t0 = self.t0

        def echo(line):
            lines.append("%9.3f %s\n" % (time.monotonic() - t0, line))
        self.proc = sim.VirtualBoard(self.flash, board=self.board, firmware=self.firmware, mic=self.mic_path,
                                     speaker=self.speaker_path, env=self.env, echo=echo, pty=False,
                                     heap=os.environ.get("ALABAMA_HIL_HEAP") or None)
        self.proc.start()

    def restart(self):
        self.stop()
        self.start()

    def stop(self):
        p, self.proc = self.proc, None
        if p is not None:
            p.stop()
            self._logs.append("".join(self._lines))
            self._lines = []

    def _need(self):
        if self.proc is None:
            raise BenchError("the virtual board is not running")
        return self.proc

    def press(self):
        self._need().command("press")

    def release(self):
        self._need().command("release")

    def long_press(self):
        self._need().command("long")

    def control(self, line):
        """Any command of the simulated HAL's control channel (hal/sim.py), e.g. ``mute on``, ``knob volume 30``."""
        return self._need().command(line)

    def state(self):
        import json
        return json.loads(self._need().command("state"))

    def set_mic(self, path):
        self.mic_path = str(path) if path else None
        if self.proc is not None:
            self.proc.set_mic(self.mic_path)

    def heap(self):
        if self.proc is None or not self.proc.running:
            return None
        try:
            return self.proc.heap()
        except Exception:  # noqa: BLE001 — a board that stopped answering has no heap to report
            return None

    def log_text(self):
        return "".join(self._logs) + "".join(self._lines)

    def silence_after(self, t_cancel, done_row):
        """From the StreamCancel to the board's log line saying the render stopped (it silences the speaker
        in the same step); falls back to its PlaybackDone."""
        m = re.search(r"(?m)^\s*([\d.]+) sat: render %d cancelled" % done_row.id, self.log_text())
        if m and float(m.group(1)) >= t_cancel:
            return float(m.group(1)) - t_cancel
        return done_row.t - t_cancel

    def played_frames(self):
        from alabama import audio
        try:
            return audio.info(self.speaker_path).nframes
        except (OSError, audio.WavError):
            return None

    def waves(self):
        out = []
        if self.mic_path:
            out.append(("what the board heard (mic input)", self.mic_path))
        if self.speaker_path:
            out.append(("what the board played last (speaker)", self.speaker_path))
        return out


# ------------------------------------------------------------------------------------------ real
class SerialTarget(Target):
    """A real board: deployed once with ``alabama deploy``, provisioned per scenario over the serial port
    (the record and a fresh identity written under /data with mpremote), its serial log read with pyserial.
    The board reaches the core over its provisioned Wi-Fi (``ALABAMA_WIFI_SSID`` / ``ALABAMA_WIFI_PASSPHRASE``)."""

    virtual = False

    def __init__(self, port, board_type, workdir=None, loopback=False, deploy=True, speaker_out=None):
        self.port = port
        self.board_type = board_type
        self.name = "%s on %s" % (board_type, port)
        self.workdir = pathlib.Path(workdir) if workdir else None
        self.deploy = deploy
        self.speaker_out = speaker_out        # host audio device (sox/ALSA name) next to the board's mic
        self._player = None
        self.features = frozenset({"heap", "restart", "mic", "speaker"} | ({"loopback"} if loopback else set())
                                  | ({"mic_feed"} if speaker_out else set()))
        self._log = []
        self._reader = None
        self._stop = threading.Event()
        self.wifi = (os.environ.get("ALABAMA_WIFI_SSID", ""), os.environ.get("ALABAMA_WIFI_PASSPHRASE", ""))

    def setup(self):
        if not self.wifi[0]:
            raise BenchError("a real board needs Wi-Fi credentials: set ALABAMA_WIFI_SSID and ALABAMA_WIFI_PASSPHRASE")
        if self.deploy:
            from alabama.board import boards, deploy
            deploy.deploy(boards.load(self.board_type), port=self.port, reset=False)

    def provision(self, rec, fresh_identity=True):
        """Serial provisioning (alabama.provision.serial): the record (+ Wi-Fi) into /data; with
        ``fresh_identity`` a new device key too, so the bench knows it before the board connects."""
        from alabama.board import mpremote
        from alabama.noise.state import public_key
        from alabama.provision import serial as serial_prov
        self._close_log()
        rec.wifi_ssid, rec.wifi_passphrase = self.wifi
        serial_prov.write_record(self.port, record_codec.encode(rec), core_key=rec.core_key)
        if not fresh_identity:
            return None
        key = os.urandom(32)
        d = record_codec.DATA_DIR + "/"
        mpremote.run_mpremote(self.port, ["exec", "import os\ntry: os.remove(%r)\nexcept OSError: pass\n"
                                                  "f=open(%r,'wb')\nf.write(%r)\nf.close()\nprint('ok')"
                                                  % (d + record_codec.SETTINGS, d + record_codec.DEVICE_KEY, key)])
        return public_key(key)

    def start(self):
        from alabama.board import mpremote
        self._close_log()
        mpremote.soft_reset(self.port, out=lambda *a: None)
        self._open_log()

    def set_mic(self, path):
        """A real board hears the room (or, with an acoustic loopback, its own speaker). With ``--speaker-out``
        the WAV is played now on that host device (sox), which the board's microphone hears."""
        self.mic_path = None
        self._stop_player()
        if path and self.speaker_out:
            sox = shutil.which("sox")
            if not sox:
                raise BenchError("--speaker-out plays the utterance with sox: apt-get install sox")
            self._player = subprocess.Popen([sox, "-q", str(path), "-t", "alsa", self.speaker_out],
                                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    def _stop_player(self):
        p, self._player = self._player, None
        if p is not None and p.poll() is None:
            p.terminate()
            p.wait(5)

    def restart(self):
        self.start()

    def stop(self):
        self._stop_player()
        self._close_log()

    def _open_log(self):
        import serial
        self._stop.clear()
        ser = serial.Serial(self.port, 115200, timeout=0.2)

        def pump():
            buf = b""
            try:
                while not self._stop.is_set():
                    b = ser.read(4096)
                    if b:
                        buf += b
                        *lines, buf = buf.split(b"\n")
                        for ln in lines:
                            self._log.append("%.3f %s\n" % (time.time(), ln.decode("utf-8", "replace").rstrip("\r")))
            finally:
                ser.close()
        self._reader = threading.Thread(target=pump, name="hil-serial", daemon=True)
        self._reader.start()

    def _close_log(self):
        if self._reader is not None:
            self._stop.set()
            self._reader.join(5)
            self._reader = None

    def present(self):
        return os.path.exists(self.port)

    def heap(self):
        for line in reversed(self._log[-200:]):
            m = HEAP_RE.search(line)
            if m:
                return int(m.group(1))
        return None

    def log_text(self):
        return "".join(self._log)

    def teardown(self):
        self._close_log()
