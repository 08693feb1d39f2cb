"""The virtual board: the unmodified firmware under the real ``micropython`` unix port, supervised.

Responsible for running ``firmware/`` (boot.py then main.py) with a flash directory as its filesystem
(cwd = the flash dir, which holds ``board.json`` and ``data/`` like a board's ``/board.json`` and
``/data``; MICROPYPATH = ``.:<firmware>`` so files copied into the flash dir shadow the firmware, as a
deploy would), the board file's heap limit (``micropython -X heapsize=...``), the simulated HAL, and a
REPL on a pseudo-terminal (``mpremote connect <pty>``). It restarts the interpreter whenever it exits,
the way a board reboots: after a Ctrl-D in the raw REPL (mpremote's soft reset) the new interpreter is
put back into the raw REPL without running main.py, as a board does. It holds no protocol logic.

It is also the board's watchdog: the simulated HAL's wdt_start/wdt_feed write a heartbeat file
(``$ALABAMA_SIM_WDT``: the timeout in ms, rewritten at every feed; 0 when parked); when it has not moved for
longer than that timeout the supervisor kills the interpreter and boots it again, the next boot's
``$ALABAMA_SIM_RESET_CAUSE`` saying ``WDT_RESET`` (the HAL's reset_cause(), device.info's reset_reason). Every
boot starts disarmed: a hard reset clears the chip's watchdog, and after a soft reset boot.py parks it until
the runtime arms it again (docs/reliability.md), which the supervisor models by not watching until then.

Like ``alabama deploy``, start() compiles the firmware with mpy-cross (for the unix port's native arch,
cached under build/sim) and installs it into the flash dir: ``main.py``, ``boot.py``, ``board.json``,
``lib/satellite/*.mpy``. Running compiled modules is what makes the heap limit meaningful (compiling
the sources on the fly needs far more RAM than a deployed board ever spends). ``compiled=False`` runs
the sources straight from ``firmware/`` instead (MICROPYPATH=.:<firmware>), with a larger heap.

In-process API (HIL bench, tests, ``alabama demo``)::

    vb = VirtualBoard(flash_dir, board="sim", firmware=None, mic=None, speaker=None, duplex=None)
    vb.start(); vb.pty_path; vb.press(); vb.release(); vb.long_press(); vb.set_mic(path)
    vb.heap() -> int; vb.state() -> dict; vb.command("knob volume 30"); vb.wait_log(regex, timeout)
    vb.log_text(); vb.stop()
    VirtualBoard(..., image=PATH)   a board whose firmware is an app image in simulated OTA slots (below)
    provision(flash_dir, core_host, core_port, core_key=None, token="", token_expires=0)
"""
import hashlib
import io
import json
import os
import pathlib
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import termios
import threading
import time

from .. import BUILD, CORE_PORT, REPO, carried, local
from . import rawrepl
from ..errors import AlabamaError, UsageError, listen_error
from .. import outfile, usage
from ..provision import record as rc
from ..provision.record import DATA_DIR

RAW_PROMPT = b"raw REPL; CTRL-B to exit\r\n"
#: The simulated `esp32` module (esp32.Partition, otadata, the bootloader's rollback rule); on MICROPYPATH only
#: for a board with an app image.
SIMCHIP = pathlib.Path(__file__).resolve().parent / "simchip"


class SimError(AlabamaError):
    pass


class SimUsageError(SimError, UsageError):
    """A mistake in `board sim`'s options or in a file one names (a size that is none, a missing --core, a damaged
    image): exit status 2, as argparse's own refusals; a failure of the world (a board that stops) stays SimError."""


def _size(text, line, hex_ok=False):
    """The bytes of a size as written (256k, 8m, 300000; HEX_OK: 0x270000 too), else SimUsageError(LINE)."""
    m = re.fullmatch(r"\s*(%s\d+)([kKmM]?)\s*" % ("0x[0-9a-fA-F]+|" if hex_ok else ""), str(text))
    if not m:
        raise SimUsageError(line)
    n = int(m.group(1), 16) if m.group(1).startswith("0x") else int(m.group(1))
    return n * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]


def _within(n, low, high, line):
    """A number N in LOW..HIGH (both included), else SimUsageError(LINE)."""
    if not low <= n <= high:
        raise SimUsageError(line)
    return n


def default_firmware():
    return REPO / "firmware"


def find_micropython():
    """The interpreter the virtual board runs: $ALABAMA_MICROPYTHON, else the 32-bit unix port when it has
    been built (`make mp32`; $ALABAMA_MICROPYTHON32 names another one), else the venv's 64-bit port.

    The 32-bit build is preferred because its objects are the size they are on the ESP32-S3 (4-byte words),
    so the board file's heap means the same thing here as on the chip."""
    explicit = os.environ.get("ALABAMA_MICROPYTHON")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise SimError("ALABAMA_MICROPYTHON=%s is not an executable micropython" % explicit)
        return explicit
    return micropython32() or local.find_micropython(SimError)


#: The 32-bit unix port (tools/mp32/build.sh), or None when it has not been built.
micropython32 = local.micropython32


_PROBED = {}
#: Heap allowance on a 64-bit interpreter only (the 32-bit build runs at the board file's heap as-is). The
#: firmware's modules and buffers take 1.43x the bytes on the 64-bit unix port (8-byte words and object
#: headers; tools/bench/bench_memory.py, docs/memory.md), so a 64-bit virtual board gets the board heap
#: times this, rounded up: a fallback for hosts without the 32-bit build, not the measure of fit.
HEAP_ALLOWANCE_64 = 1.5
#: A heap the interpreter can start in at all, and one a 32-bit port can address (2**31 wraps): --heap outside
#: these is refused before anything runs.
MIN_HEAP = 32 * 1024
MAX_HEAP = 1024 * 1024 * 1024
#: An interpreter that exits with an error status this soon after it started, this many boots in a row, cannot
#: start at all (a heap it refuses, a broken interpreter): the board stops with a line instead of rebooting forever.
#: A reset the firmware asks for (otaboot: kill -9) or a soft reset (status 0) never counts.
FAST_EXIT_S = 3.0
MAX_FAST_EXITS = 3


def _asked(key, micropython, code, parse):
    """PARSE(the words MICROPYTHON prints running CODE), cached under KEY; SimError (not_a_unix_port) when it does not
    run, or answers something PARSE cannot read."""
    if key not in _PROBED:
        try:
            out = subprocess.run([micropython, "-c", code], capture_output=True, text=True, timeout=10).stdout.split()
            _PROBED[key] = parse(out)
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            raise SimError(not_a_unix_port(micropython)) from None
    return _PROBED[key]


def interpreter(micropython):
    """(sys.implementation._mpy, word bits) of a micropython unix port."""
    return _asked(micropython, micropython, "import sys; print(sys.implementation._mpy, sys.maxsize)",
                  lambda out: (int(out[0]), 64 if int(out[1]) > 2 ** 32 else 32))


def not_a_unix_port(micropython):
    """The line for a micropython that does not run, said for what the path is: only the 32-bit build's own path,
    missing, gets "`make mp32`" (in a checkout: a wheel has no Makefile); /bin/true or a text file is no MicroPython."""
    from .. import CHECKOUT
    p = pathlib.Path(micropython)
    instead = ("give --micropython the path of a micropython unix port, or leave it out (the venv's or PATH's "
               "micropython)")
    if not p.exists():
        if CHECKOUT and p.absolute() == local.micropython32_path().absolute():
            return "%s does not exist: the 32-bit micropython is not built yet: `make mp32` builds it (or leave " \
                   "--micropython out: the venv's 64-bit one)" % micropython
        return "%s does not exist: %s" % (micropython, instead)
    what = ("a directory" if p.is_dir() else "not executable" if not os.access(p, os.X_OK)
            else "a program that does not answer as one")
    return "%s is not a MicroPython interpreter (%s): %s" % (micropython, what, instead)


def heap_bytes(text, what="--heap"):
    """The bytes of a heap size written as micropython -X heapsize takes it (256k, 8m, 300000), or SimError."""
    n = _size(text, "%s %r is not a size: give bytes with an optional k or m, e.g. 256k or 8m" % (what, text))
    return _within(n, MIN_HEAP, MAX_HEAP, "%s %s is outside %dk..%dm: give a heap the interpreter can start in, "
                   "e.g. 256k or 8m" % (what, text, MIN_HEAP // 1024, MAX_HEAP // (1024 * 1024)))


def heap_for(heap, micropython):
    """The -X heapsize for a board heap on this interpreter: as-is on a 32-bit one, x HEAP_ALLOWANCE_64
    on a 64-bit one ('192k' -> '288k')."""
    n = _size(heap, "board heap %r is not a size like 256k or 8m" % heap)
    if interpreter(micropython)[1] == 32:
        return str(heap).strip().lower()
    return "%dk" % -(-int(n * HEAP_ALLOWANCE_64) // 1024)


def has_raw_repl(micropython):
    """Whether this unix port's REPL answers Ctrl-A (the shared pyexec REPL, MicroPython 1.27 and later);
    1.26.1 (the 32-bit build, tools/mp32) does not."""
    return _asked(("version", micropython), micropython, "import sys; print(sys.implementation.version[0], "
                  "sys.implementation.version[1])", lambda out: (int(out[0]), int(out[1])) >= (1, 27))


def native_march(micropython):
    """The mpy-cross -march of the unix port's native code (from sys.implementation._mpy): x64 for the
    venv's port, x86 for the 32-bit build."""
    from . import fwset
    return fwset.ARCHS[(interpreter(micropython)[0] >> 10) & 0xF]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def provision(flash_dir, core_host, core_port, core_key=None, token="", token_expires=0, fresh_identity=False):
    """Write a provisioning record into the flash dir's key store (what ggwave/QR/serial would deliver)."""
    d = pathlib.Path(flash_dir) / DATA_DIR
    d.mkdir(parents=True, exist_ok=True)
    rec = rc.build(core_host, core_port, core_key, token, token_expires)
    (d / rc.RECORD).write_bytes(rc.encode(rec))
    if fresh_identity:
        for name in (rc.DEVICE_KEY, rc.CORE_KEY, rc.SETTINGS):
            try:
                (d / name).unlink()
            except FileNotFoundError:
                pass
    return rec


def device_public_key(flash_dir):
    """The board's public key (None before its first start, when the firmware generates it)."""
    from alabama.noise.state import public_key
    p = pathlib.Path(flash_dir) / DATA_DIR / rc.DEVICE_KEY
    return public_key(p.read_bytes()) if p.exists() else None


def _raw_tty(fd, isig):
    a = termios.tcgetattr(fd)
    a[0] &= ~(termios.ICRNL | termios.INLCR | termios.IGNCR | termios.IXON | termios.ISTRIP)
    a[1] &= ~termios.OPOST
    a[3] &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN | (0 if isig else termios.ISIG))
    if isig:
        a[3] |= termios.ISIG
    a[6][termios.VMIN] = 1
    a[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, a)


class VirtualBoard:
    def __init__(self, flash_dir, board="sim", firmware=None, mic=None, speaker=None, duplex=None, ctl_port=0,
                 heap=None, micropython=None, env=None, echo=None, pty=True, compiled=True, image=None,
                 slot_size=None, run_main=True):
        from . import boards
        self.flash = pathlib.Path(flash_dir).resolve()
        self.board = boards.load(board) if isinstance(board, str) else board
        self.firmware = pathlib.Path(firmware).resolve() if firmware else default_firmware()
        self.mic = str(pathlib.Path(mic).resolve()) if mic else None
        self.speaker = str(pathlib.Path(speaker).resolve()) if speaker else str(self.flash / "speaker.wav")
        self.duplex = duplex
        self.ctl_port = ctl_port or free_port()
        self.micropython = micropython or find_micropython()
        # The board file's heap is a 32-bit board's: as-is on the 32-bit build, with the measured 64-bit
        # allowance on the venv's port (heap_for). An explicit heap= is taken literally.
        self.heap_limit = heap or os.environ.get("ALABAMA_SIM_HEAP") or heap_for(self.board.heap, self.micropython)
        heap_bytes(self.heap_limit, "--heap" if heap else "ALABAMA_SIM_HEAP" if os.environ.get("ALABAMA_SIM_HEAP")
                   else "board heap")
        self.extra_env = dict(env or {})
        self.echo = echo                  # callable(line) for every serial log line, or None
        self.use_pty = pty
        self.compiled = compiled
        # run_main=False: boot.py only, then the REPL (a board held in safe mode): what `alabama board probe --port
        # sim` wants, which loads its own set and never interrupts a running firmware (a Ctrl-C can kill the venv's
        # unix port while its heap is locked)
        self.run_main = run_main
        # image=: the firmware is a sim app image (alabama.board.appimage.sim_image) in the simulated OTA slots of
        # <flash>.chip/ (ota_0.bin, ota_1.bin, otadata.bin; ota_0 gets it at the first start, as esptool
        # flashes it); this supervisor is the bootloader at every (re)start and puts the booted slot's frozen
        # set first on MICROPYPATH (the board's '.frozen'). /data and the flash dir are the filesystem as ever.
        self.image = pathlib.Path(image).resolve() if image else None
        self.chip = self.flash.parent / (self.flash.name + ".chip") if image else None
        self.slot_size = slot_size
        self.slot = None
        self._appdir = None
        if not compiled and heap is None:
            self.heap_limit = "4m"
        self.proc = None
        self.boots = 0
        self.failed = None                # why the board stopped rebooting (it cannot start at all), or None
        self._spawned_at = 0.0
        self._fast_exits = 0              # consecutive boots that exited with an error status within FAST_EXIT_S
        self.wdt_resets = 0               # resets by the simulated watchdog (the interpreter stopped feeding it)
        self._cause = "PWRON_RESET"       # why the next boot happens (ALABAMA_SIM_RESET_CAUSE)
        self._wdt_path = None             # the heartbeat file (start() makes it, stop() removes it)
        self._wdt_seen = None             # (mtime_ns, size) last seen, the monotonic time then, timeout ms
        self._wdt_fired = False
        self._log = bytearray()
        self._lines = []
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread = None
        self._ctl = None
        self._ctl_lock = threading.Lock()
        self._raw_mode = False
        self._swallow = None              # after a raw-REPL soft reset: swallow output until the raw prompt
        self._partial = b""
        self.pty_path = None
        self._a_master = self._a_slave = self._b_master = self._b_slave = None
        # MicroPython < 1.27's unix REPL has no raw REPL (Ctrl-A), which mpremote needs: shim it.
        self._shim = None if has_raw_repl(self.micropython) else rawrepl.RawReplShim()

    # ------------------------------------------------------------------------------ lifecycle
    def start(self):
        self.flash.mkdir(parents=True, exist_ok=True)
        (self.flash / DATA_DIR).mkdir(exist_ok=True)
        if self.image is not None:
            self.install_image()
        elif self.compiled:
            self.install()
        else:
            (self.flash / "board.json").write_text(json.dumps(self.board.data, indent=1))
        self._a_master, self._a_slave = os.openpty()
        _raw_tty(self._a_slave, isig=True)
        if self.use_pty:
            self._b_master, self._b_slave = os.openpty()
            _raw_tty(self._b_slave, isig=False)
            self.pty_path = os.ttyname(self._b_slave)
        os.set_blocking(self._a_master, False)
        fd, self._wdt_path = tempfile.mkstemp(prefix="alabama-wdt-")
        os.close(fd)
        self._spawn(raw=False)
        self._thread = threading.Thread(target=self._pump, name="virtual-board", daemon=True)
        self._thread.start()
        return self

    def install(self):
        """Build (cached) and copy the firmware into the flash dir, as `alabama deploy` lays it out."""
        from . import deploy
        march = native_march(self.micropython)
        key = hashlib.sha256(str(self.firmware).encode()).hexdigest()[:12]
        files, _ = deploy.stage(self.board, march, root=self.firmware, build_dir=BUILD / "sim" / key,
                                out=lambda *a: None)
        for dest, src in files.items():
            d = self.flash / dest
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, d)

    def install_image(self):
        """Blank slots and otadata, the image into ota_0 unless a slot already holds one, and on the filesystem
        only what a frozen image does not hold (main.py, boot.py, board.json: `alabama deploy` to a frozen image)."""
        from .simchip import esp32 as chip
        self.chip.mkdir(parents=True, exist_ok=True)
        chip.blank(str(self.chip), self.slot_size)
        if all(chip.check_image(str(self.chip), s) is not None for s in chip.SLOTS):
            data = self.image.read_bytes()
            if len(data) > chip.size_of(str(self.chip), "ota_0"):
                raise SimError("%s (%d bytes) does not fit the simulated slot" % (self.image, len(data)))
            with open(chip.path_of(str(self.chip), "ota_0"), "r+b") as f:
                f.write(data)
        for name in ("main.py", "boot.py"):
            shutil.copyfile(self.firmware / name, self.flash / name)
        (self.flash / "board.json").write_text(json.dumps(self.board.data, indent=1))

    def _boot_slot(self):
        """The bootloader (simchip.select_boot: ESP-IDF's slot choice and rollback rule), then the booted slot's
        frozen set unpacked (cached by content) for MICROPYPATH."""
        import tarfile
        from .simchip import esp32 as chip
        d = str(self.chip)
        self.slot = chip.select_boot(d, log=self._note)
        if self.slot is None:
            self._note("[virtual board] bootloader: no bootable app image in %s" % d)
            self._appdir = None
            return
        payload = chip.image_payload(d, self.slot)
        app = self.chip / ("app-" + hashlib.sha256(payload).hexdigest()[:16])
        if not app.is_dir():
            tmp = self.chip / ("app.tmp.%d" % os.getpid())
            shutil.rmtree(tmp, ignore_errors=True)
            with tarfile.open(fileobj=io.BytesIO(payload)) as t:
                t.extractall(tmp, filter="data")
            os.replace(tmp, app)
        self._appdir = app
        self._note("[virtual board] bootloader: booting %s" % self.slot)

    def _env(self):
        env = dict(os.environ)
        # The board's order: '' and '.frozen' (py/runtime.c mp_init), then '/lib' (ports/esp32/main.c), so
        # an interpreter with the firmware frozen in (tools/mp32/build_frozen.sh) runs it like a custom image.
        env["MICROPYPATH"] = ".:.frozen:lib" if self.compiled else ".:%s:.frozen" % self.firmware
        if self.chip is not None:
            # the booted slot's frozen set first, then the interpreter's own .frozen (asyncio, as the port freezes it), /lib; esp32 last
            env["MICROPYPATH"] = ".:%s.frozen:lib:%s" % (str(self._appdir) + ":" if self._appdir else "", SIMCHIP)
            env["ALABAMA_SIM_CHIP"] = str(self.chip)
            env["ALABAMA_SIM_RUNNING"] = self.slot or ""
        env["ALABAMA_SIM_CTL_PORT"] = str(self.ctl_port)
        env["ALABAMA_SIM_SPEAKER"] = self.speaker
        env["ALABAMA_SIM_WDT"] = self._wdt_path or ""
        env["ALABAMA_SIM_RESET_CAUSE"] = self._cause
        if self.mic:
            env["ALABAMA_SIM_MIC"] = self.mic
        else:
            env.pop("ALABAMA_SIM_MIC", None)
        if self.duplex:
            env["ALABAMA_SIM_DUPLEX"] = self.duplex
        env.update(self.extra_env)
        return env

    def _spawn(self, raw):
        slave = self._a_slave
        # The terminal settings belong to the pty, not the process: an interpreter that exits from its line
        # editor (Ctrl-D at the prompt) leaves ISIG off, and the next one would never see Ctrl-C.
        _raw_tty(slave, isig=True)
        code = "import boot" if raw or not self.run_main else "import boot\nimport main"
        if self.chip is not None:
            self._boot_slot()

        def pre():
            os.setsid()
            import fcntl
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

        if self._wdt_path:
            open(self._wdt_path, "wb").close()      # every boot starts with the watchdog disarmed (docstring)
        self._wdt_seen = None
        argv = [self.micropython, "-X", "heapsize=%s" % self.heap_limit, "-i", "-c", code]
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=str(self.flash),
                                     env=self._env(), preexec_fn=pre, close_fds=True)
        self.boots += 1
        self._spawned_at = time.monotonic()
        if raw:
            self._swallow = b""
        self._note("[virtual board] boot %d: %s: %s -X heapsize=%s (pid %d)%s" % (
            self.boots, self._cause, self.micropython, self.heap_limit, self.proc.pid,
            " into the raw REPL" if raw else ""))

    def _terminate(self):
        """SIGTERM to the interpreter's process group; -> the process, or None when it is not running."""
        p = self.proc
        if p is None or p.poll() is not None:
            return None
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            p.terminate()
        return p

    def stop(self):
        self._stop.set()
        p = self._terminate()
        if p is not None:
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(3)
        if self._thread is not None:
            self._thread.join(3)
        # never wait on the control lock for good while stopping: a Ctrl-C landing between a `with` block's
        # acquire and its try can leave a Lock held (CPython bpo-29988), and stop() runs right after one
        got = self._ctl_lock.acquire(timeout=3)
        try:
            if self._ctl is not None:
                self._ctl.close()
                self._ctl = None
        finally:
            if got:
                self._ctl_lock.release()
        if self._wdt_path:
            try:
                os.unlink(self._wdt_path)
            except OSError:
                pass
        for fd in (self._a_master, self._a_slave, self._b_master, self._b_slave):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._a_master = self._a_slave = self._b_master = self._b_slave = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    # ------------------------------------------------------------------------------ the pump thread
    def _note(self, line):
        with self._cv:
            self._lines.append(line)
            self._log += (line + "\n").encode()
            self._cv.notify_all()
        if self.echo:
            self.echo(line)

    def _from_child(self, data):
        # Serial output: into the log (by line) and out to the user's pty (unless being swallowed).
        with self._cv:
            self._log += data
            self._partial += data
            while b"\n" in self._partial:
                line, _, self._partial = self._partial.partition(b"\n")
                text = line.decode("utf-8", "replace").rstrip("\r")
                self._lines.append(text)
                if self.echo:
                    self.echo(text)
            self._cv.notify_all()
        if RAW_PROMPT in data or RAW_PROMPT in self._partial:
            self._raw_mode = True
        if self._swallow is not None and self._shim is not None:
            self._swallow += data
            if b">>> " in self._swallow:          # rebooted: back into the shim's raw REPL
                self._swallow = None
                self._shim_io(self._shim.rebooted(), b"")
            return
        if self._shim is not None:
            to_child, data = self._shim.from_child(data)
            self._shim_io(to_child, b"")
            if not data:
                return
        if self._swallow is not None:
            self._swallow += data
            if b">>> " in self._swallow and b"\x01" not in self._swallow[-1:] and not getattr(self, "_sent_a", False):
                self._sent_a = True
                os.write(self._a_master, b"\r\x01")
            i = self._swallow.find(RAW_PROMPT)
            if i < 0:
                return
            data = self._swallow[i:]
            self._swallow = None
            self._sent_a = False
        if self._b_master is not None:
            try:
                os.write(self._b_master, data)
            except (BlockingIOError, OSError):
                pass                     # nobody reads the pty: drop, as a serial port would

    def _shim_io(self, to_child, to_user):
        if to_user and self._b_master is not None:
            try:
                os.write(self._b_master, to_user)
            except OSError:
                pass
        if to_child:
            try:
                os.write(self._a_master, to_child)
            except OSError:
                pass
        self._raw_mode = self._shim.active
        if self._shim.take_restart():    # a soft reset: the pump reboots it into the raw REPL
            self._terminate()

    def _from_user(self, data):
        if self._shim is not None:       # an interpreter without a raw REPL: the shim speaks it (rawrepl.py)
            data, to_user = self._shim.from_user(data)
            self._shim_io(b"", to_user)
            if not data:
                return
        if b"\x02" in data:
            self._raw_mode = False
        try:
            os.write(self._a_master, data)
        except OSError:
            pass

    def _pump(self):
        if self._b_master is not None:
            os.set_blocking(self._b_master, False)
        while not self._stop.is_set():
            fds = [self._a_master] + ([self._b_master] if self._b_master is not None else [])
            try:
                r, _, _ = select.select(fds, [], [], 0.05)
            except (OSError, ValueError):
                return
            for fd in r:
                try:
                    data = os.read(fd, 65536)
                except (BlockingIOError, OSError):
                    continue
                if fd == self._a_master:
                    self._from_child(data)
                else:
                    self._from_user(data)
            if self._shim is not None:
                self._shim_io(self._shim.poll(time.monotonic()), b"")
            self._watchdog()
            p = self.proc
            if p is not None and p.poll() is not None and not self._stop.is_set():
                # Drain what it printed last, then reboot it like a board.
                try:
                    while True:
                        data = os.read(self._a_master, 65536)
                        if not data:
                            break
                        self._from_child(data)
                except (BlockingIOError, OSError):
                    pass
                raw = self._raw_mode
                self._cause = "WDT_RESET" if self._wdt_fired else "SOFT_RESET" if raw else "HARD_RESET"
                self._wdt_fired = False
                fast = p.returncode > 0 and time.monotonic() - self._spawned_at < FAST_EXIT_S
                self._fast_exits = self._fast_exits + 1 if fast else 0
                if self._fast_exits >= MAX_FAST_EXITS:
                    self._give_up(p.returncode)
                    return
                self._note("[virtual board] interpreter exited (status %d): rebooting" % p.returncode)
                if self._b_master is not None:
                    try:
                        os.write(self._b_master, b"MPY: soft reboot\r\n")
                    except OSError:
                        pass
                with self._ctl_lock:
                    if self._ctl is not None:
                        self._ctl.close()
                        self._ctl = None
                time.sleep(0.05)
                self._spawn(raw=raw)

    def _give_up(self, status):
        said = [ln.strip() for ln in self.lines() if ln.strip() and not ln.startswith("[virtual board]")]
        self.failed = ("the interpreter cannot start: it exited (status %d) within %.0f s, %d boots in a row%s; "
                       "check --heap (now %s) and --micropython (%s)" % (
                           status, FAST_EXIT_S, self._fast_exits, (", saying: %s" % said[-1]) if said else "",
                           self.heap_limit, self.micropython))
        self._note("[virtual board] " + self.failed)

    def _watchdog(self):
        """The simulated watchdog (module docstring): called by the pump every 50 ms."""
        p = self.proc
        if self._wdt_path is None or p is None or p.poll() is not None:
            return
        try:
            st = os.stat(self._wdt_path)
        except OSError:
            return
        now = time.monotonic()
        stamp = (st.st_mtime_ns, st.st_size)
        if self._wdt_seen is None or self._wdt_seen[0] != stamp:
            try:
                with open(self._wdt_path, "rb") as f:
                    ms = int((f.read().split() or [b"0"])[0])
            except (OSError, ValueError):
                ms = 0
            self._wdt_seen = (stamp, now, ms)
            return
        _, fed, ms = self._wdt_seen
        if ms > 0 and (now - fed) * 1000 > ms:
            self.wdt_resets += 1
            self._note("[virtual board] watchdog: not fed for %d ms (timeout %d ms): WDT reset"
                       % ((now - fed) * 1000, ms))
            self._wdt_fired = True
            self._raw_mode = False
            self._wdt_seen = None
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # ------------------------------------------------------------------------------ log
    def log_text(self):
        with self._lock:
            return self._log.decode("utf-8", "replace")

    def lines(self):
        with self._lock:
            return list(self._lines)

    def wait_log(self, pattern, timeout=10.0, start=0):
        """Wait for a serial log line matching `pattern` (regex) among lines[start:]; return the match."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for line in self._lines[start:]:
                    m = rx.search(line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if self.failed:
                    raise SimError("virtual board: " + self.failed)
                if self._stop.is_set():     # stopped (Ctrl-C): the line cannot come; a waiting thread must not hold
                    raise SimError("virtual board: stopped while waiting for a log line matching %r" % pattern)
                if left <= 0:
                    tail = "\n".join(self._lines[-25:])
                    raise SimError("virtual board: no log line matching %r within %.1fs; last lines:\n%s"
                                   % (pattern, timeout, tail))
                self._cv.wait(min(left, 0.2))

    def mark(self):
        """The current log position, for wait_log(start=...)."""
        with self._lock:
            return len(self._lines)

    # ------------------------------------------------------------------------------ control channel
    def command(self, line, timeout=5.0):
        deadline = time.monotonic() + timeout
        with self._ctl_lock:
            while self._ctl is None:
                try:
                    self._ctl = socket.create_connection(("127.0.0.1", self.ctl_port), timeout=1.0)
                    self._ctl_buf = b""
                except OSError:
                    if time.monotonic() > deadline:
                        raise SimError("the virtual board's control channel (port %d) does not answer: is it "
                                       "running? (see its log)" % self.ctl_port)
                    time.sleep(0.05)
            try:
                self._ctl.settimeout(timeout)
                self._ctl.sendall(line.encode() + b"\n")
                while b"\n" not in self._ctl_buf:
                    d = self._ctl.recv(4096)
                    if not d:
                        raise OSError("closed")
                    self._ctl_buf += d
            except OSError as e:
                self._ctl.close()
                self._ctl = None
                raise SimError("control command %r failed: %s" % (line, e))
            reply, _, self._ctl_buf = self._ctl_buf.partition(b"\n")
        reply = reply.decode()
        if not reply.startswith("ok"):
            raise SimError("virtual board refused %r: %s" % (line, reply))
        return reply[3:]

    def press(self):
        self.command("press")

    def release(self):
        self.command("release")

    def long_press(self):
        self.command("long")

    def set_mic(self, path):
        self.mic = str(pathlib.Path(path).resolve()) if path else None
        try:
            self.command("mic %s" % (self.mic or "silence"))
        except SimError:
            pass   # not up yet: the environment carries it at the next boot

    def heap(self):
        m = re.search(r"free=(\d+)", self.command("heap"))
        return int(m.group(1)) if m else None

    def state(self):
        return json.loads(self.command("state"))

    def knob(self, key, value):
        self.command("knob %s %s" % (key, value))

    def mute(self, on=True):
        self.command("mute %s" % ("on" if on else "off"))

    def reset(self):
        """Hard reset: the interpreter is killed and booted again (boot.py, main.py), flash kept."""
        self._raw_mode = False
        p = self.proc
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(5)
        deadline = time.monotonic() + 5
        while self.proc is p and time.monotonic() < deadline:
            time.sleep(0.02)


# ---------------------------------------------------------------------------------- CLI
def register(sub):
    p = sub.add_parser("sim", help="run the firmware on a virtual board (micropython unix port)",
                       description="Run the unmodified firmware under micropython with DIR as its flash, the "
                                   "simulated HAL and the board file's heap limit; its REPL is on a pseudo-"
                                   "terminal for mpremote. Ctrl-C stops it.")
    p.add_argument("--dir", required=True, metavar="DIR", help="the board's flash directory (created if missing)")
    p.add_argument("--core", metavar="HOST:PORT", help="provision the core's address (writes DIR/data/provision.bin)")
    p.add_argument("--core-key", metavar="HEX", help="the core's static public key: connect with Noise IK")
    p.add_argument("--token", metavar="TOKEN", help="a pairing token from `alabama core token`")
    p.add_argument("--board", default="sim", metavar="NAME", help="board file (default: sim)")
    p.add_argument("--mic", metavar="WAV", help="what the microphone hears while the button is held (any PCM WAV: "
                   "converted to 16 kHz mono; `alabama board mic FILE` changes it while the board runs)")
    p.add_argument("--speaker", metavar="WAV", help="where the speaker's output goes (default DIR/speaker.wav)")
    p.add_argument("--ctl-port", type=usage.tcp_port(zero_ok=True), default=0, metavar="N", help="control channel port (default: a free one)")
    p.add_argument("--duplex", choices=("full", "half"), help="override the board file's duplex mode")
    p.add_argument("--micropython", metavar="PATH",
                   help="the unix port to run (default: the 32-bit build/mp32/micropython when built, else the "
                        "venv's 64-bit one; $ALABAMA_MICROPYTHON overrides)")
    p.add_argument("--heap", metavar="SIZE",
                   help="micropython -X heapsize, literally (default: the board file's heap, as-is on a 32-bit "
                        "port, x%.1f on a 64-bit one)" % HEAP_ALLOWANCE_64)
    p.add_argument("--image", nargs="?", const="", default=None, metavar="PATH",
                   help="run a sim app image from simulated OTA slots (DIR.chip/: ota_0, ota_1, otadata; the "
                        "supervisor is the ESP-IDF bootloader), so image OTA (alabama ota) works on it: PATH is its "
                        "firmware.bin or the directory holding it; no PATH: one built from %s "
                        "(docs/virtual-board.md)" % carried("firmware"))
    p.add_argument("--slot-size", metavar="SIZE", help="with --image: the size of each simulated app slot, e.g. 1m "
                   "or 0x100000 (default: the real table's 0x270000)")
    p.add_argument("--web", nargs="?", type=usage.tcp_port(zero_ok=True), const=0, default=None, metavar="PORT",
                   help="also serve the board as a page on http://127.0.0.1:PORT/ (button, LED ring, panel, "
                        "browser mic and speaker, frame timeline, serial log; no PORT: a free one)")
    p.set_defaults(func=cmd_sim)


def _check_ctl_port(port, option="--ctl-port", value="N"):
    """--ctl-port (or --web): a port the board's control channel (its page) can listen on, checked before the board
    boots (the firmware binds the control port: one in use would only show as a traceback in the board's log and a
    board no command reaches)."""
    _within(port, 0, 65535, "%s %d is not a TCP port: give 1024..65535, or leave it out for a free one"
            % (option, port))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError as e:
        raise listen_error(e, "127.0.0.1", port, option, value) from None
    finally:
        s.close()


def parse_size(text):
    """'1m', '2560k', '0x100000', '1048576' -> bytes; SimError unless a whole number of 4 KB flash sectors."""
    line = "--slot-size %s: give a size like 1m, 2560k or 0x270000, a whole number of 4 KB sectors" % text
    n = _size(text, line, hex_ok=True)
    if n <= 0 or n % 4096:                   # whole 4 KB sectors
        raise SimUsageError(line)
    return n


def sim_image_args(args):
    """(image path or None, slot size or None) from `board sim --image [PATH] --slot-size SIZE`."""
    from .simchip import esp32 as chip
    if args.image is None:
        if args.slot_size:
            raise SimUsageError("--slot-size goes with --image (a board whose firmware is an app image in OTA slots)")
        return None, None
    slot = parse_size(args.slot_size) if args.slot_size else None
    if args.image == "":
        from . import appimage
        mp = args.micropython or find_micropython()
        path = appimage.sim_image(default_firmware(), native_march(mp), out=BUILD / "image-sim")
        print("sim app image of %s built: %s" % (default_firmware(), path), flush=True)
    else:
        path = pathlib.Path(args.image)
        if path.is_dir():
            path = path / "firmware.bin"
        if not path.is_file():
            raise SimUsageError("--image %s: no such file: give a sim app image's firmware.bin (or its directory), or "
                                "--image alone to build one from %s" % (path, carried("firmware")))
    with open(path, "rb") as f:
        head = f.read(len(chip.MAGIC))
    if head != chip.MAGIC:
        raise SimUsageError("%s is not a sim app image (it does not start with %r): the virtual board runs the "
                            "images alabama.board.appimage.sim_image builds (--image alone builds one), not a chip's "
                            "firmware.bin" % (path, chip.MAGIC.decode()))
    flash = pathlib.Path(args.dir).resolve()
    have = flash.parent / (flash.name + ".chip") / "ota_0.bin"
    if slot and have.is_file() and have.stat().st_size != slot:
        raise SimUsageError("%s holds slots of %d bytes, not --slot-size %s: leave --slot-size out, or remove %s to "
                            "start with blank slots" % (have.parent, have.stat().st_size, args.slot_size, have.parent))
    size, room = path.stat().st_size, slot or chip.TABLE["ota_0"][3]
    _within(size, 0, room, "%s is %d bytes, larger than a %d-byte slot: give a larger --slot-size" % (path, size, room))
    return path, slot


def cmd_sim(args):
    if args.heap:
        heap_bytes(args.heap)                 # before anything is written or run
    if args.micropython:                      # the path given: one that does not run is the command line's mistake
        try:
            interpreter(args.micropython)
        except SimError as e:
            raise SimUsageError(str(e)) from None
    if args.ctl_port:
        _check_ctl_port(args.ctl_port)
    if args.web:
        _check_ctl_port(args.web, "--web", "PORT")
    flash = pathlib.Path(args.dir)
    if flash.exists() and not flash.is_dir():
        raise SimUsageError("--dir %s is a file: give the board's flash directory (created if missing)" % args.dir)
    if args.speaker:                      # the firmware opens it at the first reply: a bad path is said now
        why = outfile.problem(pathlib.Path(args.speaker).resolve())
        if why:
            raise SimUsageError("--speaker %s: %s: give a WAV file path in a directory you can write"
                                % (args.speaker, why))
    if args.core:
        host, _, port = args.core.rpartition(":")
        if host and port.isdigit():
            _within(int(port), 1, 65535, "--core %s: %s is not a TCP port: give 1..65535, e.g. 127.0.0.1:%d"
                    % (args.core, port, CORE_PORT))
        else:
            raise SimUsageError("--core wants HOST:PORT, e.g. 127.0.0.1:%d" % CORE_PORT)
        try:
            key = bytes.fromhex(args.core_key) if args.core_key else None
        except ValueError:
            key = b""
        if key is not None and len(key) != 32:
            raise SimUsageError("--core-key is 64 hex digits (the core's 32-byte static key: `alabama core key`), "
                                "not %r" % args.core_key)
    elif args.core_key or args.token:
        raise SimUsageError("--core-key and --token provision a core: give its address too, --core HOST:PORT")
    elif not (pathlib.Path(args.dir) / DATA_DIR / rc.RECORD).exists():
        raise SimUsageError("%s holds no provisioning record: pass --core HOST:PORT" % args.dir)
    image, slot_size = sim_image_args(args)          # before anything is written into DIR
    mic = mic_dir = None
    if args.mic:                          # any rate/channels, as the web page takes it; a missing file said now
        import tempfile
        from . import simctl
        mic_dir = tempfile.mkdtemp(prefix="alabama-sim-mic-")
        try:
            mic, _ = simctl.mic_file(args.mic, pathlib.Path(mic_dir) / "mic.wav")
        except simctl.SimCtlError as e:   # a WAV that is missing or no WAV: the command line's mistake
            shutil.rmtree(mic_dir, ignore_errors=True)
            raise SimUsageError(str(e)) from None
    if args.core:                         # every option checked: now the record is written
        try:
            flash.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SimUsageError("cannot make the flash directory %s (%s): give another --dir"
                                % (args.dir, e.strerror or e))
        provision(args.dir, host, int(port), key, args.token or "", int(time.time()) + 600 if args.token else 0)
    vb = VirtualBoard(args.dir, board=args.board, mic=mic, speaker=args.speaker, ctl_port=args.ctl_port,
                      duplex=args.duplex, echo=lambda line: print(line, flush=True), heap=args.heap,
                      micropython=args.micropython, image=image, slot_size=slot_size)
    def _term(signum, frame):
        raise KeyboardInterrupt

    wb = None
    if args.web is not None:              # made before the board starts: the page replays it from its boot
        from . import web
        wb = web.WebBoard(vb, port=args.web, mic_wav=args.mic)
    signal.signal(signal.SIGTERM, _term)
    vb.start()
    print("virtual board %s: REPL on %s (mpremote connect %s), control on 127.0.0.1:%d"
          % (vb.board.id, vb.pty_path, vb.pty_path, vb.ctl_port), flush=True)
    try:
        if wb is not None:
            import asyncio
            asyncio.run(web.serve(wb))
        while not vb.failed:
            time.sleep(0.2)
        raise SimError("virtual board %s: %s" % (vb.board.id, vb.failed))
    except KeyboardInterrupt:
        print("stopping the virtual board", flush=True)
    finally:
        vb.stop()
        if mic_dir:
            shutil.rmtree(mic_dir, ignore_errors=True)
    return 0
