"""`alabama repl` (mpremote's REPL on a board) and `alabama logs` (the board's serial output, timestamped).

Responsible for: finding the port, running `mpremote connect PORT repl` as it is, and reading the serial
output with pyserial into lines stamped with the host clock (for bug reports). It never writes to the
board except for `logs --reset` (Ctrl-C, Ctrl-D: a soft reboot, to capture the boot log).
Not responsible for: copying files (deploy.py) or flashing (flash.py).
"""
import datetime
import os
import signal
import subprocess
import sys
import time

from ..errors import AlabamaError
from .. import usage
from .mpremote import check_port, close_serial, explain, needs_terminal, resolve_port

IDLE_FLUSH = 0.3            # seconds: a partial line (a prompt) is written after this much silence
REOPEN_EVERY = 0.5          # seconds between attempts to reopen a port that went away (USB re-enumeration)


class ReplError(AlabamaError):
    """The REPL or the log reader cannot go on; the message says what to do."""


# --- repl -------------------------------------------------------------------------------------------

def _default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def repl_command(port, capture=None):
    cmd = [sys.executable, "-m", "mpremote", "connect", port, "repl"]
    if capture:
        cmd += ["--capture", str(capture)]
    return cmd


def _isatty(stream):
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):          # a closed or replaced stream
        return False


def repl(port=None, capture=None, list_ports=None, call=None):
    """Run mpremote's REPL on the terminal (Ctrl-] or Ctrl-X leaves it). Returns mpremote's exit code."""
    port = resolve_port(port, list_ports)
    cmd = repl_command(port, capture)
    if call is not None:
        return call(cmd)
    if not (_isatty(sys.stdin) and _isatty(sys.stdout)):   # before mpremote opens the port and says "Connected"
        raise ReplError(needs_terminal(port))
    # Ctrl-C belongs to the REPL (it interrupts the board's program): this process ignores it meanwhile.
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, preexec_fn=_default_sigint)
        err = proc.stderr.read().decode(errors="replace")
        rc = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old)
    if rc != 0:
        check_port(port, probe=True)
        raise ReplError(explain(port, rc, err))
    if err.strip():
        sys.stderr.write(err)
    return rc


# --- logs -------------------------------------------------------------------------------------------

def stamp(t):
    """Host wall-clock time of a line, local, millisecond precision: 2025-12-02 12:41:00.123."""
    d = datetime.datetime.fromtimestamp(t)
    return d.strftime("%Y-%m-%d %H:%M:%S.") + "%03d" % (d.microsecond // 1000)


def _printable(text):
    out = []
    for ch in text:
        o = ord(ch)
        if ch == "\t" or o >= 32 and o != 127:
            out.append(ch)
        else:
            out.append("\\x%02x" % o)
    return "".join(out)


class LineStamper:
    """Bytes in, (time, line) out: each line stamped with the host time of its first byte.

    "\\r\\n" and "\\n" end a line; a lone "\\r" is dropped; other control bytes are shown as \\xNN.
    A partial line (a REPL prompt) comes out by flush() after a quiet spell.
    """

    def __init__(self):
        self.buf = bytearray()
        self.t0 = None

    def feed(self, data, now):
        lines = []
        for b in data:
            if self.t0 is None:
                self.t0 = now
            if b == 10:
                lines.append(self._take())
            elif b != 13:
                self.buf.append(b)
        return lines

    def _take(self):
        line = (self.t0, _printable(bytes(self.buf).decode("utf-8", "replace")))
        self.buf = bytearray()
        self.t0 = None
        return line

    def flush(self):
        if self.t0 is None:
            return None
        if not self.buf:
            self.t0 = None
            return None
        return self._take()


def _open(port, baud):
    import serial
    try:
        return serial.Serial(port, baud, timeout=0.05, exclusive=True)
    except (serial.SerialException, OSError) as e:
        text = str(e)
        low = text.lower()
        if "lock" in low or "busy" in low or "errno 11" in low or "errno 16" in low:
            raise ReplError("serial port %s is busy: close the program holding it (a REPL, mpremote, a serial "
                            "monitor) and run again" % port) from None
        check_port(port, probe=True)
        if "errno 2" in low or "no such file" in low:
            raise ReplError("serial port %s does not exist: plug the board in, or pass the right --port" % port) from None
        if "errno 13" in low or "permission" in low:
            raise ReplError("no permission to open %s: add yourself to the dialout group" % port) from None
        raise ReplError("cannot open %s (%s): check --port" % (port, text)) from None


def logs(port=None, output=None, duration=None, reset=False, baud=115200, list_ports=None,
         out=None, clock=time.time, stop=None):
    """Copy the board's serial output to `out` (stdout) and `output` (a file), one stamped line each.

    Runs until Ctrl-C, `duration` seconds, or stop() returns True. A port that disappears (a board
    reset re-enumerating its USB) is waited for and reopened. Returns the number of lines written.
    """
    import serial
    port = resolve_port(port, list_ports)
    out = out or sys.stdout
    sinks = [out]
    fh = None
    if output:
        try:
            fh = open(output, "w", encoding="utf-8")
        except OSError as e:
            raise ReplError("cannot write %s (%s): pick another --output" % (output, e.strerror or e)) from None
        sinks.append(fh)

    def emit(text):
        for s in sinks:
            s.write(text + "\n")
            s.flush()

    try:
        ser = _open(port, baud)              # before the header: a port that cannot open is the one line printed
    except ReplError:
        if fh is not None:
            fh.close()
        raise
    start = clock()
    offset = datetime.datetime.now().astimezone().strftime("%z")
    emit("# alabama logs: %s from %s (host clock, UTC%s); Ctrl-C stops" % (port, stamp(start), offset))
    if reset:
        ser.write(b"\r\x03\x03\x02\x04")       # stop main.py, leave raw REPL, soft reboot
    stamper = LineStamper()
    count = 0
    last_data = clock()
    try:
        while True:
            now = clock()
            if duration is not None and now - start >= duration:
                break
            if stop is not None and stop():
                break
            try:
                data = ser.read(4096) if ser is not None else b""
            except (serial.SerialException, OSError):
                emit("%s # port %s went away, waiting for it" % (stamp(now), port))
                close_serial(ser)
                ser = None
                data = b""
            if ser is None:
                time.sleep(REOPEN_EVERY)
                if os.path.exists(port):
                    try:
                        ser = _open(port, baud)
                        emit("%s # port %s is back" % (stamp(clock()), port))
                    except ReplError:
                        ser = None
                continue
            now = clock()
            if data:
                last_data = now
                for t, line in stamper.feed(data, now):
                    emit("%s %s" % (stamp(t), line))
                    count += 1
            elif now - last_data >= IDLE_FLUSH:
                item = stamper.flush()
                if item:
                    emit("%s %s" % (stamp(item[0]), item[1]))
                    count += 1
    except KeyboardInterrupt:
        pass
    finally:
        item = stamper.flush()
        if item:
            emit("%s %s" % (stamp(item[0]), item[1]))
            count += 1
        if ser is not None:
            close_serial(ser)
        if fh:
            fh.close()
    return count


# --- command line -----------------------------------------------------------------------------------

def register(sub):
    p = sub.add_parser("repl", help="the board's MicroPython REPL (mpremote repl)",
                       description="Attach mpremote's REPL to the board (Ctrl-] or Ctrl-X leaves; Ctrl-C stops "
                                   "the running firmware, Ctrl-D soft-reboots it).")
    p.add_argument("--port", metavar="PORT", help="serial port (default: the one Espressif USB device attached)")
    p.add_argument("--capture", metavar="FILE", help="also write the session to FILE (mpremote repl --capture)")
    p.set_defaults(func=cmd_repl)

    lg = sub.add_parser("logs", help="the board's serial output with host timestamps (for bug reports)",
                        description="Print every line the board writes to its serial port, prefixed with the "
                                    "host's time; Ctrl-C stops. Read-only unless --reset.")
    lg.add_argument("--port", metavar="PORT", help="serial port (default: the one Espressif USB device attached)")
    lg.add_argument("--output", "-o", metavar="FILE", help="also write the log to FILE")
    lg.add_argument("--duration", type=usage.positive(), metavar="SECONDS", help="stop after this long")
    lg.add_argument("--reset", action="store_true", help="soft-reboot the board first to capture its boot log")
    lg.add_argument("--baud", type=usage.positive(int, "a baud rate"), default=115200, help="UART speed (ignored by native USB; default 115200)")
    lg.set_defaults(func=cmd_logs)


def cmd_repl(args):
    return repl(args.port, capture=args.capture)


def cmd_logs(args):
    logs(args.port, output=args.output, duration=args.duration, reset=args.reset, baud=args.baud)
    return 0
