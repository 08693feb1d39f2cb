"""What counts as a serial port (sweep 9): one rule, mpremote.check_port, for flash, deploy, provision serial, board
probe, repl and logs. On Linux a port is a terminal that is not one of this machine's own: /dev/ptmx (it answers
termios, and opening it makes a new pseudo-terminal with nothing on its other end), /dev/null, /dev/tty, a directory
or a regular file are not; a pseudo-terminal's slave end (the virtual board's REPL) is. Refusing one is the command
line's mistake: one line, status 2."""
import os
import sys

import pytest

from alabama.board import mpremote

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux device numbers")


def _line(call, *argv):
    r = call(*argv)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("alabama: error: ") and "Traceback" not in r.stderr, r.stderr
    return r.returncode, err[0], r.stdout


@linux
@pytest.mark.parametrize("path, kind", [("/dev/ptmx", "the pseudo-terminal multiplexer"),
                                        ("/dev/null", "a character device that is no terminal"),
                                        ("/dev/tty", "this shell's own terminal"),
                                        ("/dev/console", "the system console")])
@pytest.mark.parametrize("probe", [False, True])
def test_this_machines_own_devices_are_no_serial_port_without_opening_them(path, kind, probe):
    if not os.path.exists(path):
        pytest.skip("no %s here" % path)
    with pytest.raises(mpremote.NotAPortError) as e:
        mpremote.check_port(path, probe=probe)
    assert str(e.value).startswith("%s is %s" % (path, kind)) and "not a serial port" in str(e.value), e.value
    assert e.value.exit_code == 2


def test_a_pseudo_terminals_slave_end_is_a_port(serial_port):
    """The virtual board's REPL (/dev/pts/N) and the tests' stand-in for a board's port."""
    for probe in (False, True):
        mpremote.check_port(serial_port, probe=probe)
    assert mpremote.resolve_port(serial_port, probe=True) == serial_port


@pytest.fixture
def not_ports(tmp_path):
    (tmp_path / "notes.txt").write_text("not a board\n")
    return {"ptmx": "/dev/ptmx", "null": "/dev/null", "dir": str(tmp_path), "file": str(tmp_path / "notes.txt")}


@linux
@pytest.mark.parametrize("which", ["ptmx", "null", "dir", "file"])
@pytest.mark.parametrize("command", [
    ("flash", "--board", "xiao-esp32s3-sense-inmp441", "--port", "{p}"),
    ("deploy", "--board", "xiao-esp32s3-sense-inmp441", "--port", "{p}"),
    ("provision", "serial", "--data", "{d}", "--host", "10.0.0.2", "--port", "{p}"),
    ("board", "probe", "--port", "{p}"),
    ("logs", "--duration", "1", "--port", "{p}"),
], ids=["flash", "deploy", "provision-serial", "board-probe", "logs"])
def test_a_port_that_cannot_be_one_is_the_same_one_line_status_2_in_every_command(tmp_path, call, monkeypatch,
                                                                                 not_ports, which, command):
    """/dev/ptmx passed flash's check (and esptool then wrote to a fresh pseudo-terminal); the refusals exited 1."""
    from alabama.board import flash
    from alabama.core import registry as reg
    monkeypatch.setattr(flash, "resolve_image", lambda *a, **k: pytest.fail("an image was fetched"))
    reg.load_or_create_key(tmp_path / "core")
    port = not_ports[which]
    argv = [a.format(p=port, d=tmp_path / "core") for a in command]
    status, line, out = _line(call, *argv)
    assert status == 2, (status, line)
    assert line.startswith("alabama: error: %s is " % port) and ", not a serial port: pass the board's port" in line
    assert not out                                               # no header, no token
    assert not (tmp_path / "core" / reg.DB_NAME).exists()        # provision serial minted nothing


def test_a_port_another_program_holds_is_still_the_worlds_state_status_1(call, serial_port):
    import serial
    held = serial.Serial(serial_port, 115200, exclusive=True)
    try:
        status, line, _ = _line(call, "flash", "--board", "xiao-esp32s3-sense-inmp441", "--port", serial_port)
    finally:
        held.close()
    assert status == 1 and "is busy" in line, (status, line)


def test_deploy_to_a_port_where_nothing_answers_says_so_within_its_first_contact_bound(call, monkeypatch,
                                                                                       serial_port):
    """Sweep 9: deploy (and deploy --dry-run) to a port where nothing answers printed nothing for mpremote's 300 s;
    its first contact is bounded (FIRST_CONTACT_S) and its line says what to check."""
    import time
    from alabama.board import deploy
    monkeypatch.setattr(deploy, "FIRST_CONTACT_S", 3)
    t0 = time.monotonic()
    status, line, out = _line(call, "deploy", "--board", "xiao-esp32s3-sense-inmp441", "--port", serial_port,
                              "--dry-run")
    assert time.monotonic() - t0 < 60
    assert status == 1 and not out, (status, out)
    assert line == ("alabama: error: the board on %s did not answer within 3 s (no MicroPython REPL): press RESET and "
                    "run again; check that %s is the board's port (a board held in its bootloader, or another device, "
                    "never answers), or reflash it with `alabama flash`" % (serial_port, serial_port)), line
