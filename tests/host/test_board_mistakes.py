"""`alabama board sim`, `repl` and `hil` given the mistakes a person makes (issue 36): each is ONE line on stderr
saying what to do, a non-zero exit status, no traceback, and nothing left running or half-written."""
import os
import stat
import subprocess
import sys

import pytest

from alabama import cli as alabama_cli

ALABAMA = [sys.executable, "-m", "alabama.cli"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args, timeout=60, env=None):
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "host"), **(env or {}))
    return subprocess.run(ALABAMA + list(args), capture_output=True, text=True, env=e, timeout=timeout)


def one_line(r, *words):
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("alabama: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------------------ board sim
@pytest.mark.parametrize("key", ["abc", "zz" * 32, "ab" * 31])
def test_board_sim_core_key_not_hex_is_one_line(tmp_path, key):
    one_line(run("board", "sim", "--dir", str(tmp_path / "vb"), "--core", "127.0.0.1:7355", "--core-key", key),
             "--core-key", "64 hex", "alabama core key")


@pytest.mark.parametrize("heap,words", [("lots", "not a size"), ("1k", "outside"), ("4096m", "outside"),
                                        ("12x", "not a size")])
def test_board_sim_heap_that_cannot_run_is_refused_before_anything_runs(tmp_path, heap, words):
    one_line(run("board", "sim", "--dir", str(tmp_path / "vb"), "--core", "127.0.0.1:7355", "--heap", heap),
             "--heap", words)
    assert not (tmp_path / "vb").exists()


def test_board_sim_core_key_without_core_is_one_line(tmp_path):
    one_line(run("board", "sim", "--dir", str(tmp_path / "vb"), "--core-key", "ab" * 32), "--core HOST:PORT")


def failing_micropython(tmp_path):
    """A stand-in interpreter: answers the supervisor's probes like the real port, then fails at every boot the
    way a refused -X heapsize does (`Invalid command line arguments`, status 1)."""
    from alabama.board.sim import find_micropython
    fake = tmp_path / "micropython"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *sys.implementation*) exec %s \"$@\";; esac\n"
                    "echo 'Invalid command line arguments. Use -h option for help.'\nexit 1\n" % find_micropython())
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake


@pytest.mark.parametrize("argv", [["--token", "-Abc_123"], ["--token=-Abc_123"], ["--token", "--Abc_123"]])
def test_a_token_that_starts_with_a_dash_is_taken_as_typed(argv):
    # secrets.token_urlsafe mints one in 64 that starts with '-': argparse alone calls it a missing value
    args = alabama_cli.build_parser().parse_args(alabama_cli.join_free_values(
        ["board", "sim", "--dir", "d", "--core", "127.0.0.1:7355"] + argv))
    assert args.token == argv[-1].split("=", 1)[-1]


def test_a_token_that_starts_with_a_dash_reaches_the_command_as_typed(tmp_path):
    # as typed at a shell: the parser takes it; the (deliberately) bad --core-key is what stops the command
    r = run("board", "sim", "--dir", str(tmp_path / "vb"), "--core", "127.0.0.1:7355", "--token", "-Abc_123",
            "--core-key", "abc")
    one_line(r, "--core-key")


@pytest.mark.needs_micropython
def test_a_token_that_starts_with_a_dash_is_provisioned_as_typed(tmp_path):
    from alabama.provision import record
    vb = tmp_path / "vb"
    r = run("board", "sim", "--dir", str(vb), "--core", "127.0.0.1:7355", "--token", "-Abc_123", "--micropython",
            str(failing_micropython(tmp_path)), timeout=120)
    one_line(r, "cannot start")                   # the stand-in interpreter; the record was written before it ran
    rec = record.decode((vb / record.DATA_DIR / record.RECORD).read_bytes())
    assert (rec.core_host, rec.core_port, rec.pairing_token) == ("127.0.0.1", 7355, "-Abc_123")


def test_a_wifi_passphrase_that_starts_with_a_dash_is_taken_as_typed():
    args = alabama_cli.build_parser().parse_args(alabama_cli.join_free_values(
        ["core", "token", "--wifi-ssid", "-net", "--wifi-passphrase", "-secret pass"]))
    assert (args.wifi_ssid, args.wifi_passphrase) == ("-net", "-secret pass")


@pytest.mark.needs_micropython
@pytest.mark.parametrize("web", [[], ["--web"]])
def test_a_virtual_board_that_cannot_start_stops_with_a_line_instead_of_rebooting_forever(tmp_path, web):
    from alabama.board.sim import MAX_FAST_EXITS
    fake = failing_micropython(tmp_path)
    r = run("board", "sim", "--dir", str(tmp_path / "vb"), "--core", "127.0.0.1:7355", "--micropython", str(fake),
            *web, timeout=120)
    line = one_line(r, "cannot start", "--heap", "Invalid command line arguments")
    assert r.stdout.count("] boot ") == MAX_FAST_EXITS, r.stdout
    assert str(fake) in line


# ------------------------------------------------------------------------------ repl / logs --port
def in_terminal(*args, timeout=30):
    """`alabama ARGS` on a pseudo-terminal, as a person types it: (exit status, everything it printed)."""
    import pty
    import select
    import time
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.environ["PYTHONPATH"] = os.path.join(ROOT, "host")
            os.execv(sys.executable, ALABAMA + list(args))
        finally:
            os._exit(127)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    break
                if not data:
                    break
                out += data
        _, status = os.waitpid(pid, 0)
        pid = None
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def terminal_line(status, out, *words):
    assert status != 0, out
    lines = [ln for ln in out.replace("\r", "").splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("alabama: error: "), out
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("cmd", [["repl"], ["logs", "--duration", "1"]])
def test_a_port_that_is_dev_null_is_named_for_what_it_is_not_busy(cmd):
    terminal_line(*in_terminal(*cmd, "--port", "/dev/null"), "/dev/null", "no terminal, not a serial port")


@pytest.mark.parametrize("cmd", [["repl"], ["logs", "--duration", "1"]])
def test_a_port_that_is_a_regular_file_or_a_directory_is_named_for_what_it_is(tmp_path, cmd):
    f = tmp_path / "notes.txt"
    f.write_text("not a board\n")
    terminal_line(*in_terminal(*cmd, "--port", str(f)), str(f), "regular file, not a serial port", "--port")
    terminal_line(*in_terminal(*cmd, "--port", str(tmp_path)), "a directory, not a serial port")


def test_repl_without_a_terminal_is_one_line_not_a_termios_error():
    # a real serial device (a pseudo-terminal standing in for /dev/ttyS0), the command run from a script
    master, slave = os.openpty()
    try:
        r = run("repl", "--port", os.ttyname(slave), timeout=30)
    finally:
        os.close(slave)
        os.close(master)
    one_line(r, "needs a terminal", "alabama logs --port")
    assert "termios" not in r.stderr
    assert r.stdout == ""        # said before mpremote opens the port: no "Connected to MicroPython at ..." first


# ------------------------------------------------------------------------------ hil, checked once up front
def test_hil_checks_a_real_boards_port_once_before_pytest_starts(tmp_path):
    report = tmp_path / "hil"
    r = run("hil", "--board", "/dev/nonexistent", "--board-type", "devkitc1-inmp441", "--bind", "127.0.0.1",
            "--report", str(report), timeout=120)
    one_line(r, "/dev/nonexistent", "does not exist", "--board")
    assert r.stdout == "" and not report.exists()           # no pytest session, no report of 35 errors


def test_hil_asks_for_the_wifi_variables_once_before_pytest_starts(tmp_path):
    master, slave = os.openpty()                            # a serial device that exists
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALABAMA_WIFI_")}
    env["PYTHONPATH"] = os.path.join(ROOT, "host")
    try:
        r = subprocess.run(ALABAMA + ["hil", "--board", os.ttyname(slave), "--board-type", "devkitc1-inmp441",
                                      "--bind", "127.0.0.1", "--report", str(tmp_path / "hil")],
                           capture_output=True, text=True, env=env, timeout=120)
    finally:
        os.close(slave)
        os.close(master)
    line = one_line(r, "ALABAMA_WIFI_SSID", "ALABAMA_WIFI_PASSPHRASE")
    assert line.count("ALABAMA_WIFI_SSID") <= 2 and r.stdout == ""


@pytest.mark.parametrize("busy", [True, False])
def test_board_sim_ctl_port_in_use_or_out_of_range_is_one_line(tmp_path, busy):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1] if busy else 99999
        r = run("board", "sim", "--dir", str(tmp_path / "vb"), "--core", "127.0.0.1:7355", "--ctl-port", str(port))
    finally:
        s.close()
    one_line(r, "--ctl-port", "in use" if busy else "not a TCP port")
    assert r.returncode == (1 if busy else 2)     # sweep 8: a port another program holds is the world's, not a typo
    assert not (tmp_path / "vb").exists()


def test_ota_server_on_a_port_in_use_or_a_foreign_address_is_one_line():
    import socket
    from alabama.board.ota import SetServer
    from alabama.errors import AlabamaError, UsageError
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        with pytest.raises(AlabamaError, match=r"in use.*--port") as e:
            SetServer(None, bind="127.0.0.1", port=s.getsockname()[1])
        assert e.value.exit_code == 1         # the world's state (sweep 8); a foreign address below is a usage one
    finally:
        s.close()
    with pytest.raises(UsageError, match=r"192\.0\.2\.1 is not an address of this machine.*--bind"):
        SetServer(None, bind="192.0.2.1", port=0)           # TEST-NET-1: never this machine's


def test_board_sim_dir_that_is_a_file_or_under_one_is_one_line(tmp_path):
    f = tmp_path / "flash.bin"
    f.write_bytes(b"x")
    one_line(run("board", "sim", "--dir", str(f), "--core", "127.0.0.1:7355"), "is a file", "--dir")
    one_line(run("board", "sim", "--dir", str(f / "sub"), "--core", "127.0.0.1:7355"), "--dir")


# ------------------------------------------------------------------------------ sweep 8: usage mistakes exit 2
def _sim_mistakes(t):
    """(argv after `board sim --dir DIR`, words of its line) for each usage mistake; T is a scratch directory."""
    (t / "afile").write_text("{}")
    (t / "junk.bin").write_bytes(b"junk")
    (t / "bad.wav").write_bytes(b"RIFFxxxx")
    core = ["--core", "127.0.0.1:7355"]
    return [
        (core + ["--heap", "lots"], "not a size"),
        (core + ["--heap", "1k"], "outside"),
        (["--core", "127.0.0.1:99999"], "not a TCP port"),
        (["--core", "127.0.0.1"], "HOST:PORT"),
        (core + ["--core-key", "abc"], "64 hex digits"),
        (["--core-key", "ab" * 32], "give its address too"),
        ([], "holds no provisioning record"),
        (core + ["--speaker", str(t / "nodir" / "x.wav")], "in a directory you can write"),
        (core + ["--slot-size", "1m"], "--slot-size goes with --image"),
        (core + ["--image", "--slot-size", "3"], "4 KB sectors"),
        (core + ["--image", str(t / "nope.bin")], "no such file"),
        (core + ["--image", str(t / "junk.bin")], "is not a sim app image"),
        (core + ["--mic", str(t / "nope.wav")], "no WAV file at"),
        (core + ["--mic", str(t / "bad.wav")], "not a PCM WAV file"),
        (core + ["--micropython", str(t / "afile")], "is not a MicroPython interpreter"),
        (core + ["--duplex", "quarter"], "'quarter' is not one of full, half"),
        (core + ["--ctl-port", "70000"], "not a TCP port"),
    ]


def test_board_sim_usage_mistakes_exit_2_as_argparses_do(tmp_path, capsys):
    """Sweep 8: most `board sim` option mistakes exited 1, a failure of the world's status; each is the command
    line's mistake: status 2 (as argparse's own), one line, and nothing written into DIR."""
    for i, (argv, words) in enumerate(_sim_mistakes(tmp_path)):
        d = tmp_path / ("vb%d" % i)
        code = _status_of(["board", "sim", "--dir", str(d)] + argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert err.count("\n") == 1 and err.startswith("alabama: error: ") and words in err, (argv, err)
        assert not d.exists(), argv
    (tmp_path / "flash").write_text("")
    assert _status_of(["board", "sim", "--dir", str(tmp_path / "flash"), "--core", "127.0.0.1:7355"]) == 2
    assert "is a file" in capsys.readouterr().err


def _status_of(argv):
    """`alabama ARGV`'s exit status, whether the parser exits (SystemExit) or the command returns it."""
    try:
        return alabama_cli.main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("checkout", [True, False])
def test_board_sim_help_says_which_firmware_image_builds_from_a_checkout_and_from_a_wheel(monkeypatch, checkout):
    """Sweep 8: `board sim --help` said "--image ... built from the repository's firmware" from a wheel too, where
    there is no repository: it names the tree it uses, this checkout's or the one installed with alabama."""
    import alabama
    monkeypatch.setattr(alabama, "CHECKOUT", checkout)
    monkeypatch.setenv("COLUMNS", "1000")
    sim_help = alabama_cli.build_parser()._subparsers._group_actions[0].choices["board"] \
        ._subparsers._group_actions[0].choices["sim"].format_help()
    line = next(ln for ln in sim_help.splitlines() if "--image" in ln and "no PATH" in ln)
    assert "repository" not in line, line
    said = ("this checkout's firmware/ (%s)" if checkout else "the firmware/ installed with alabama (%s)") % (
        alabama.REPO / "firmware")
    assert "no PATH: one built from %s" % said in line, line


def _as_a_terminal_job():
    """A shell starts a foreground job with SIGINT at its default; a test process may have it ignored (an ignored
    signal is inherited through exec: the whole suite once ran these tests with SIGINT ignored, and the board sim and
    the demo rightly never saw the Ctrl-C)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _Job:
    """`alabama ARGV` as a terminal runs a job: a process group of its own, its output read as it comes; ctrl_c()
    sends SIGINT to the whole group, as the terminal does on Ctrl-C."""

    def __init__(self, *argv):
        self.proc = subprocess.Popen(ALABAMA + list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "host")),
                                     start_new_session=True, preexec_fn=_as_a_terminal_job)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.out = b""

    def wait_for(self, pattern, seconds=120):
        """Until its output matches PATTERN (bytes regex); -> the match."""
        import re
        import time
        deadline = time.monotonic() + seconds
        while not re.search(pattern, self.out) and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.05)
            self.out += self.proc.stdout.read() or b""
        m = re.search(pattern, self.out)
        assert m, self.text()[-3000:]
        return m

    def ctrl_c(self, seconds=60):
        """SIGINT to its process group; -> its exit status."""
        import signal
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(seconds)

    def text(self):
        return self.out.decode("utf-8", "replace")

    def close(self):
        import signal
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.out += self.proc.stdout.read() or b""
        self.proc.stdout.close()


@pytest.mark.needs_micropython
@pytest.mark.parametrize("interpreter", ["64", "32"])
def test_ctrl_c_in_board_sim_stops_it_cleanly_while_the_board_streams(tmp_path, core, interpreter):
    """Sweep 8: Ctrl-C is SIGINT to the terminal's foreground process group. It must reach only the driver, which
    stops the interpreter itself: an interpreter that got it too, its heap locked in the audio path, died saying
    "FATAL: uncaught NLR". Here the button is held (the board streams) when the group gets SIGINT."""
    import time
    from alabama import local
    from alabama.board import simctl
    mp = local.find_micropython() if interpreter == "64" else local.micropython32()
    if mp is None:
        pytest.skip("no 32-bit build (make mp32)")
    job = _Job("board", "sim", "--dir", str(tmp_path / "vb"), "--core", "127.0.0.1:%d" % core.port, "--core-key",
               core.key.hex(), "--micropython", mp, "--mic", _tone_wav(tmp_path))
    try:
        job.wait_for(rb"sat: accepted[\s\S]*sim: board|sim: board[\s\S]*sat: accepted")
        port = int(job.wait_for(rb"control on 127\.0\.0\.1:(\d+)").group(1))
        child = int(job.wait_for(rb"\(pid (\d+)\)").group(1))
        # the interpreter is a session of its own (its pty its terminal): the terminal's SIGINT cannot reach it
        assert os.getsid(child) == child != os.getsid(job.proc.pid)
        simctl.send(port, "press")
        job.wait_for(rb"capture \d+ opened \(button\)")         # logwords.CAPTURE_OPENED_BUTTON
        time.sleep(1.0)                               # streaming: the audio path runs with the heap locked
        rc = job.ctrl_c()
    finally:
        job.close()
    text = job.text()
    assert rc == 0, text
    assert "stopping the virtual board" in text, text
    assert "FATAL" not in text and "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)                             # the driver stopped it


def _tone_wav(tmp_path):
    import math
    import struct
    import wave
    path = tmp_path / "tone.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i * 0.2))) for i in range(16000 * 5)))
    return str(path)


@pytest.mark.parametrize("argv, status, says", [
    (("board", "press"), 2, "which virtual board? pass --ctl-port N"),
    (("board", "mic", "{t}/nope.wav", "--ctl-port", "{p}"), 2, "no WAV file at {t}/nope.wav"),
    (("board", "mic", "{t}/bad.wav", "--ctl-port", "{p}"), 2, "{t}/bad.wav: not a PCM WAV file"),
    (("board", "press", "--ctl-port", "{p}"), 1, "no virtual board answers on 127.0.0.1:{p}"),
])
def test_board_controls_say_usage_mistakes_with_2_and_no_board_with_1(tmp_path, capsys, monkeypatch, argv, status,
                                                                      says):
    """Sweep 8: `board press` without --ctl-port and `board mic` of a missing or damaged WAV exited 1, the status of
    no board answering; they are the command line's mistakes (as `board sim --mic` says them): 2."""
    from alabama.board.sim import free_port
    from alabama.board.simctl import ENV_PORT
    monkeypatch.delenv(ENV_PORT, raising=False)
    (tmp_path / "bad.wav").write_bytes(b"RIFFxxxx")
    port = free_port()                                   # nothing listens there
    argv = [a.format(t=tmp_path, p=port) for a in argv]
    assert _status_of(argv) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("alabama: error: " + says.format(t=tmp_path, p=port)), err


@pytest.mark.needs_micropython
def test_ctrl_c_in_the_demo_while_the_board_streams_stops_everything_in_one_line(tmp_path):
    """Sweep 8, `make demo`'s Ctrl-C: SIGINT to the terminal's process group while the button is held. The demo says
    `alabama: interrupted` (status 130), no FATAL line, no traceback, and no interpreter is left running in its
    work directory."""
    import time
    work = tmp_path / "demo"
    job = _Job("demo", "--dir", str(work), "--out", str(tmp_path / "reply.wav"))
    try:
        job.wait_for(rb"button    : press")
        time.sleep(0.3)                               # the capture streams
        rc = job.ctrl_c()                             # Ctrl-C in the terminal make runs in
    finally:
        job.close()
    text = job.text()
    assert rc == 130 and text.rstrip().endswith("alabama: interrupted"), text[-2000:]
    assert "FATAL" not in text and "Traceback" not in text, text[-3000:]
    left = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and os.readlink("/proc/%s/cwd" % d).startswith(str(work)):
                left.append(d)
        except OSError:
            pass
    assert not left, left
