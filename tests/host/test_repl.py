"""`alabama repl` and `alabama logs` against the virtual board's pseudo-terminal, with the real mpremote."""
import io
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from alabama import cli
from alabama.board import repl
from alabama.board.mpremote import MpremoteError

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}"


@pytest.fixture
def board(tmp_path):
    from alabama.board.sim import VirtualBoard
    # The virtual board's default interpreter: the 32-bit build when built, whose 1.26.1 REPL has no raw
    # REPL: mpremote then talks to the board's raw-REPL shim (alabama.board.rawrepl, docs/virtual-board.md).
    vb = VirtualBoard(tmp_path / "flash")
    vb.start()
    yield vb
    vb.stop()


def _read_until(fd, needle, timeout):
    out = b""
    deadline = time.monotonic() + timeout
    while needle not in out and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                out += os.read(fd, 4096)
            except OSError:
                break
    return out


def test_repl_evaluates_an_expression(board):
    """`alabama repl` on a terminal: Ctrl-C stops the firmware, 6*7 answers 42, Ctrl-] leaves."""
    pid, fd = pty.fork()
    if pid == 0:                                                  # the child: the user's terminal
        try:
            os.execv(sys.executable, [sys.executable, "-m", "alabama.cli", "repl", "--port", board.pty_path])
        finally:
            os._exit(127)
    try:
        banner = _read_until(fd, b"Ctrl-x to exit this shell", 20)
        assert b"Connected to MicroPython at " + board.pty_path.encode() in banner
        time.sleep(1.0)                       # let mpremote put the terminal in raw mode (a person is slower)
        os.write(fd, b"\x03")
        assert b">>> " in _read_until(fd, b">>> ", 10)
        os.write(fd, b"6*7\r")
        got = _read_until(fd, b"42\r\n", 10)          # the whole answer line: 42 may come before its newline
        assert re.search(rb"6\*7\r?\n42\r?\n", got), got
        os.write(fd, b"\x1d")                                     # Ctrl-]: leave mpremote
        _read_until(fd, b"\x00", 2)
        _, status = os.waitpid(pid, 0)
        pid = None
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)


def test_mpremote_exec_evaluates_on_the_virtual_board(board):
    r = subprocess.run([sys.executable, "-m", "mpremote", "connect", board.pty_path, "exec", "print(6*7)"],
                       capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout) == (0, "42\n"), r.stderr


def test_logs_stamp_the_boot_log_and_write_the_file(board, tmp_path):
    """`alabama logs --reset`: the soft reboot and the boot lines, each with the host time."""
    path = tmp_path / "board.log"
    out = io.StringIO()
    t0 = time.time()
    seen = []

    def stop():
        if not seen and "soft reboot" in out.getvalue():
            seen.append(time.time())
        return (seen and time.time() - seen[0] > 1.5) or time.time() - t0 > 15

    n = repl.logs(board.pty_path, output=str(path), reset=True, out=out, stop=stop)
    text = path.read_text()
    assert text == out.getvalue()
    first, *lines = text.splitlines()
    assert first.startswith("# alabama logs: %s from " % board.pty_path) and "(host clock, UTC" in first
    assert len(lines) == n and n >= 2
    assert all(re.match(STAMP + " ", ln) for ln in lines), lines
    reboot = [i for i, ln in enumerate(lines) if re.match(STAMP + " .*soft reboot$", ln)]
    assert reboot, lines
    assert len(lines) > reboot[0] + 1, lines                      # what the board printed after it
    stamps = [ln[:23] for ln in lines]
    assert stamps == sorted(stamps)


def test_logs_command_line(board, tmp_path, capsys):
    path = tmp_path / "b.log"
    assert cli.main(["logs", "--port", board.pty_path, "--duration", "0.5", "--output", str(path)]) == 0
    assert capsys.readouterr().out == path.read_text()
    assert path.read_text().startswith("# alabama logs: " + board.pty_path)


def test_busy_port_is_one_line_for_logs_and_repl(board, capsys, monkeypatch):
    import serial
    monkeypatch.setattr(repl, "_isatty", lambda stream: True)     # the REPL as typed in a terminal
    holder = serial.Serial(board.pty_path, 115200, exclusive=True)
    try:
        assert cli.main(["logs", "--port", board.pty_path, "--duration", "1"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["alabama: error: serial port %s is busy: close the program holding it (a REPL, mpremote, "
                       "a serial monitor) and run again" % board.pty_path]
        assert cli.main(["repl", "--port", board.pty_path]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("alabama: error: serial port %s is busy" % board.pty_path)
    finally:
        holder.close()


def test_missing_port_and_no_board_are_one_line(tmp_path, capsys):
    assert cli.main(["repl", "--port", str(tmp_path / "ttyNOPE")]) == 1
    assert cli.main(["logs", "--port", str(tmp_path / "ttyNOPE")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("does not exist: plug the board in, or pass the right --port" in e for e in err)
    with pytest.raises(MpremoteError, match="no Espressif USB device found"):
        repl.repl(None, list_ports=lambda: [])


def test_repl_wraps_mpremote_repl():
    assert repl.repl_command("/dev/ttyACM0")[1:] == ["-m", "mpremote", "connect", "/dev/ttyACM0", "repl"]
    assert repl.repl_command("/dev/ttyACM0", "s.txt")[-2:] == ["--capture", "s.txt"]


# --- the line stamper (no board) --------------------------------------------------------------------

def test_line_stamper_stamps_each_line_with_its_first_byte():
    s = repl.LineStamper()
    assert s.feed(b"boot", 1.0) == []
    assert s.feed(b"ing\r\nsat: up\r", 2.0) == [(1.0, "booting")]
    assert s.feed(b"\n>>> ", 3.0) == [(2.0, "sat: up")]
    assert s.flush() == (3.0, ">>> ")
    assert s.flush() is None
    assert s.feed(b"a\x04b\x1b[K\tc\xff\n\n", 4.0) == [(4.0, "a\\x04b\\x1b[K\tc\ufffd"), (4.0, "")]


def test_stamp_format():
    t = time.mktime((2025, 12, 2, 12, 41, 0, 0, 0, -1)) + 0.1234
    assert repl.stamp(t) == "2025-12-02 12:41:00.123"
