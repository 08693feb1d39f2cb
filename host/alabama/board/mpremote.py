"""Talking to a board over its serial port: the real ``mpremote`` command line, and the code run on the board.

Responsible for: finding the port (resolve_port: as given, or the one Espressif USB device) and what can be one
(check_port: the one rule every command's port goes through), running
``mpremote connect PORT ...`` with its output line by line and a failure turned into one line saying what to
do (run_mpremote, explain), the friendly-REPL soft reset that runs main.py (soft_reset), the probe of what a
board holds (probe), and the MicroPython scripts sent to a board: real files in onboard/ (tested on the unix
port), each sent as its text followed by one call ``run(...)`` with the arguments as Python literals (script).
Not responsible for: which files a board should hold (fwset.py) or what to copy (deploy.py).
mpremote's Python API is declared unstable: every round trip is its command line.
"""
import json
import os
import re
import pathlib
import subprocess
import sys
import threading
import time

from ..errors import AlabamaError, UsageError
from . import fwset

ESPRESSIF_VID = 0x303A      # USB vendor id of the ESP32-S3's native USB (USB-Serial/JTAG, TinyUSB CDC)
ONBOARD = pathlib.Path(__file__).resolve().parent / "onboard"
PROBE_MARK = "ALABAMA-PROBE "
MPREMOTE_TIMEOUT = 300          # seconds for one mpremote run (a first deploy over a slow UART)
RESET_WAIT = 5.0                # seconds to wait for "soft reboot" after Ctrl-D


class MpremoteError(AlabamaError):
    """The board cannot be reached or did not do what was asked; the message is one line saying what to do.
    ``board_raised``: the board itself raised (its traceback came back), as opposed to the host losing the port."""

    def __init__(self, message, board_raised=False):
        super().__init__(message)
        self.board_raised = board_raised


class MpremoteTimeout(MpremoteError):
    """mpremote did not finish within its time (a board that never answers, or a long run cut off)."""


class NotAPortError(MpremoteError, UsageError):
    """The path given for a port cannot be one (a file, a directory, /dev/null, /dev/ptmx): the command line's
    mistake, status 2. A port that is busy or gone is the world's state: MpremoteError, status 1."""


#: mpremote's own (host-side) traceback: frames in mpremote's or pyserial's files. The port went away under it
#: (OSError: [Errno 5], SerialException), whatever the last line's exception looks like.
_HOST_FRAME = re.compile(r'File "[^"]*[/\\](?:mpremote|serial)[/\\][^"]*", line \d+')
#: A board-side exception as mpremote relays it: "Traceback ..." with the board's frames, then "Name: ...".
_BOARD_RAISED = re.compile(r"^[A-Z]\w*(?:Error|Exception|Interrupt)\b.*$", re.M)


def board_raised(output):
    """True when mpremote's output ends with an exception the board raised, not one mpremote hit on the host."""
    return bool(_BOARD_RAISED.search(output)) and "Traceback" in output and not _HOST_FRAME.search(output)


def script(name, *args):
    """The code that runs onboard/<name>.py on a board: its text, then `run(*args)` (args: Python literals)."""
    text = (ONBOARD / (name + ".py")).read_text()
    return "%s\nrun(%s)\n" % (text.rstrip("\n"), ", ".join(repr(a) for a in args))


def _list_ports():
    from serial.tools import list_ports
    return list(list_ports.comports())


def detect_port(list_ports=None):
    """The one Espressif USB serial device (VID 0x303A); none or several is an MpremoteError saying what to do."""
    ports = (list_ports or _list_ports)()
    esp = [p for p in ports if getattr(p, "vid", None) == ESPRESSIF_VID]
    if len(esp) == 1:
        return esp[0].device
    if not esp:
        others = [p.device for p in ports if getattr(p, "vid", None) is not None]
        hint = (" (other USB serial ports: %s; a board behind a USB-UART bridge needs --port)"
                % ", ".join(others)) if others else ""
        raise MpremoteError("no Espressif USB device found%s: plug the board's USB port in (hold BOOT while "
                            "plugging if it does not appear) or pass --port" % hint)
    raise MpremoteError("%d Espressif USB devices found (%s): pass --port to pick one"
                        % (len(esp), ", ".join(p.device for p in esp)))


def resolve_port(port=None, list_ports=None, option="--port", probe=False):
    """The port to use: as given (checked to exist and to be a device, not a file; ``probe``: see not_a_port),
    or the one Espressif USB device (detect_port). ``option`` names the flag the lines tell the user to fix."""
    if port is None:
        return detect_port(list_ports)
    port = str(port)
    if "://" in port or port.upper().startswith("COM"):
        return port
    if not os.path.exists(port):
        raise MpremoteError("serial port %s does not exist: plug the board in, or pass the right %s" % (port, option))
    check_port(port, option, probe)
    return port


def check_port(port, option="--port", probe=False):
    """NotAPortError (one line, status 2) when the path PORT cannot be a serial port (not_a_port); else nothing.
    flash, deploy, provision serial, board probe, repl, logs and hil all ask this, so they agree on what a port is."""
    if "://" in str(port) or str(port).upper().startswith("COM"):
        return
    why = not_a_port(port, probe, option)
    if why:
        raise NotAPortError(why)


#: What a path that is no serial port is, by its stat kind (checked without opening it).
_KINDS = (("S_ISREG", "a regular file"), ("S_ISDIR", "a directory"), ("S_ISFIFO", "a named pipe"),
          ("S_ISSOCK", "a socket"), ("S_ISBLK", "a block device (a disk)"))

#: Linux character devices that are never a board's port, by (major, minor) (the kernel's
#: Documentation/admin-guide/devices.txt). Each but the first answers termios as a port does, so opening it proves
#: nothing: /dev/ptmx makes a new pseudo-terminal with nothing on its other end.
_LINUX_TERMINALS = {(5, 0): "this shell's own terminal", (5, 1): "the system console",
                    (5, 2): "the pseudo-terminal multiplexer (opening it makes a new pseudo-terminal with nothing on "
                            "its other end)"}
NO_TERMINAL = "a character device that is no terminal"


def _linux_char_kind(rdev):
    """What the Linux character device RDEV is when it cannot be a serial port, or None. A serial port on Linux is a
    terminal that is not one of this machine's own: a UART (ttyS*, ttyUSB*, ttyACM*) or a pseudo-terminal's slave end
    (/dev/pts/N: the virtual board's REPL, socat)."""
    major, minor = os.major(rdev), os.minor(rdev)
    if major == 1:                       # /dev/null, /dev/zero, /dev/random, /dev/full, /dev/kmsg
        return NO_TERMINAL
    if major == 2:                       # a BSD pseudo-terminal's master side (/dev/ptyp0)
        return "a pseudo-terminal's master side"
    if major == 4 and minor < 64:        # /dev/tty0../dev/tty63 (major 4 from minor 64 on: ttyS*, real UARTs)
        return "a virtual console of this machine"
    return _LINUX_TERMINALS.get((major, minor))


def not_a_port(port, probe=False, option="--port"):
    """Why the path PORT cannot be a serial port (one line saying what to pass instead), or None.

    Without ``probe`` only its kind is looked at (nothing is opened: opening a board's port can reset it): a file,
    a directory, a pipe, a socket, a disk, and on Linux the character devices that are never a port (/dev/null,
    /dev/ptmx, /dev/tty, /dev/console, a virtual console; _linux_char_kind). ``probe=True`` also opens any other
    character device to ask whether it is a terminal (termios works on it), which e.g. /dev/fuse is not."""
    import stat
    try:
        st = os.stat(port)
    except OSError:
        return None
    mode = st.st_mode
    kind = next((name for test, name in _KINDS if getattr(stat, test)(mode)), None)
    if kind is None and stat.S_ISCHR(mode) and sys.platform.startswith("linux"):
        kind = _linux_char_kind(st.st_rdev)
    if kind is None and probe and stat.S_ISCHR(mode):
        try:
            fd = os.open(port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not os.isatty(fd):
                kind = NO_TERMINAL
        finally:
            os.close(fd)
    if kind is None:
        return None
    return ("%s is %s, not a serial port: pass the board's port with %s (/dev/ttyACM0 or /dev/ttyUSB0 on Linux, "
            "/dev/cu.usbmodem* on macOS, COM3 on Windows)%s" % (port, kind, option,
                                                               ", or leave --port out to find it" if option == "--port"
                                                               else ""))


def check_free(port):
    """MpremoteError (explain's one line) when another program holds PORT (a REPL, `alabama logs`, mpremote: they
    lock it), before something is made for it (a token) or bytes are written into that program's session."""
    if "://" in str(port):
        return
    close_serial(open_port(port))


def open_port(port):
    """PORT opened for this program alone (pyserial, 115200, exclusive), or MpremoteError (explain's one line)."""
    import serial
    check_port(port)
    try:
        return serial.Serial(port, 115200, timeout=0.1, exclusive=True)
    except (serial.SerialException, OSError) as e:
        check_port(port, probe=True)
        raise MpremoteError(explain(port, 1, str(e))) from None


def last_line(text):
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def needs_terminal(port):
    """The line for a REPL asked for where stdin or stdout is no terminal."""
    return ("the REPL is interactive and needs a terminal (stdin or stdout is redirected): run it in a terminal; "
            "from a script read the board with `alabama logs --port %s` or run code with `mpremote connect %s "
            "exec ...`" % (port, port))


def explain(port, rc, output):
    """One line for a failed mpremote run."""
    low = output.lower()
    why = not_a_port(port, probe=True) if "://" not in port else None
    if why:
        return why
    if "termios.error" in low and "inappropriate ioctl" in low:
        return needs_terminal(port)
    if _HOST_FRAME.search(output):
        return ("the board on %s went away (%s): check the USB cable and power, press RESET, and run again"
                % (port, last_line(output)[:80]))
    if "failed to access" in low or "could not exclusively lock" in low or "resource busy" in low:
        return ("serial port %s is busy: close the program holding it (a REPL, `alabama logs`, a serial "
                "monitor, another mpremote) and run again" % port)
    if "permission denied" in low:
        return ("no permission to open %s: add yourself to the dialout group (Linux: `sudo usermod -aG dialout "
                "$USER`, then log in again)" % port)
    if "could not enter raw repl" in low or "timeout waiting for" in low:
        return ("the board on %s does not answer MicroPython's raw REPL: press RESET and run again; if it "
                "still fails, reflash it with `alabama flash`" % port)
    if "enospc" in low or "errno 28" in low:
        return ("the board's filesystem on %s is full: remove files you added (`mpremote fs rm`) or reflash "
                "with `alabama flash` (erases everything, keys included)" % port)
    if "no module named" in low and ("hashlib" in low or "json" in low):
        return "the MicroPython on %s lacks hashlib/json: flash the official image with `alabama flash`" % port
    return "mpremote failed on %s (exit %d): %s" % (port, rc, last_line(output) or "no output")


def run_mpremote(port, args, on_line=None, timeout=MPREMOTE_TIMEOUT):
    """Run `mpremote connect PORT ARGS...`; returns its stdout. on_line(line) sees each line as it comes.

    A failure is an MpremoteError with one line saying what to do.
    """
    cmd = [sys.executable, "-m", "mpremote", "connect", port] + list(args)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    lines = []
    deadline = time.monotonic() + timeout
    # mpremote waits without end (and prints nothing) for a raw REPL a peer that is not MicroPython never
    # opens: a timer kills it at the deadline, so the loop below cannot block past it.
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.daemon = True
    watchdog.start()
    try:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\r\n")
            lines.append(line)
            if on_line:
                on_line(line)
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(cmd, timeout)
        rc = proc.wait(timeout=max(1, deadline - time.monotonic()))
        if time.monotonic() >= deadline and rc != 0:
            raise subprocess.TimeoutExpired(cmd, timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise MpremoteTimeout("mpremote did not finish within %d s on %s (%s): press RESET on the board and run "
                              "again" % (timeout, port, last_line("\n".join(lines))[:80] or "no output")) from None
    finally:
        watchdog.cancel()
        proc.stdout.close()
    text = "\n".join(lines)
    if rc != 0:
        check_port(port, probe=True)
        raise MpremoteError(explain(port, rc, text), board_raised=board_raised(text))
    return text


def probe_code():
    """The code probe() runs on the board (onboard/probe.py with deploy's paths)."""
    return script("probe", fwset.owned_top(), [fwset.OWNED_DIR, fwset.WAKE_DIR], PROBE_MARK)


def parse_probe(text):
    """The probe's report from the board's output, or None when it printed none."""
    for line in text.splitlines():
        if line.startswith(PROBE_MARK):
            try:
                return json.loads(line[len(PROBE_MARK):])
            except ValueError:
                return None
    return None


def probe(port, runner=run_mpremote):
    """What the board holds: {'mpy': int, 'files': {path: sha256}, 'machine': str, 'cwd': str, 'frozen': str,
    'frozen_digest': str, 'frozen_wake': [wake model names frozen into the image]}.

    The first mpremote command soft-resets the board (mpremote's default), which stops a running
    main.py and leaves a clean interpreter in the raw REPL (main.py does not run there).
    """
    text = runner(port, ["exec", probe_code()])
    info = parse_probe(text)
    if info is None:
        raise MpremoteError("the board on %s did not report its files (got %r): is it running MicroPython? "
                            "reflash with `alabama flash`" % (port, last_line(text)[:80]))
    return info


def close_serial(ser):
    """Close a pyserial port with RTS and DTR deasserted first (on an auto-reset circuit or the S3's
    USB-Serial/JTAG they drive the chip's reset and boot pins)."""
    import serial
    try:
        ser.rts = False
        ser.dtr = False
    except (OSError, serial.SerialException):
        pass
    ser.close()


def soft_reset(port, wait=RESET_WAIT, out=print):
    """Ctrl-C then Ctrl-D at the friendly REPL: MicroPython soft-reboots and runs boot.py and main.py.

    (mpremote's own soft-reset happens in the raw REPL, where main.py is not run.) Returns True when
    the board said "soft reboot".
    """
    ser = open_port(port)
    try:
        ser.write(b"\r\x03\x02")     # interrupt anything, leave the raw REPL if still in it
        time.sleep(0.1)
        ser.reset_input_buffer()
        ser.write(b"\x04")
        seen = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and b"soft reboot" not in seen:
            seen = (seen + ser.read(256))[-256:]
        ok = b"soft reboot" in seen
    finally:
        close_serial(ser)
    if ok:
        out("soft reset: the board restarts with the new firmware (`alabama logs` to watch it)")
    else:
        out("warning: the board did not confirm the soft reset: press RESET to start the new firmware")
    return ok
