"""`alabama core ...` given the mistakes a person makes (issue 36): each is ONE line on stderr saying what to do,
a non-zero exit status, no traceback; and the core's state lives in the user data dir, never the cwd."""
import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from alabama.core.testsat import TestSatellite, env, hello, setting_int

ALABAMA = [sys.executable, "-m", "alabama.cli"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _env(xdg):
    # COLUMNS: argparse wraps --help at the terminal width (a long default path must come out whole)
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "host"), XDG_DATA_HOME=str(xdg), COLUMNS="1000")
    return e


@pytest.fixture
def cli(tmp_path):
    """Run `alabama ARGS` in tmp_path/cwd with the user data dir at tmp_path/xdg."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    def _cli(*args, timeout=60):
        return subprocess.run(ALABAMA + list(args), capture_output=True, text=True, env=_env(tmp_path / "xdg"),
                              cwd=cwd, timeout=timeout)
    _cli.cwd = cwd
    _cli.default = tmp_path / "xdg" / "alabama" / "core"
    return _cli


def one_line(r, *words):
    """The failure is one line on stderr, starting `alabama: error:`, no traceback, exit status non-zero."""
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("alabama: error: "), r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------------------ state where it belongs
def test_core_key_default_data_is_the_user_data_dir_never_the_cwd(cli):
    r = cli("core", "key")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"[0-9a-f]{64}", r.stdout.strip())
    assert (cli.default / "core.key").is_file()
    assert os.listdir(cli.cwd) == []                      # nothing in the directory the user stands in
    assert oct(os.stat(cli.default).st_mode & 0o777) == oct(0o700)
    assert "default %s (the platform's user data dir)" % cli.default in cli("core", "serve", "--help").stdout


def test_default_data_dir_follows_platformdirs(monkeypatch, tmp_path):
    from alabama.core import datadir
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    if sys.platform.startswith("linux"):
        assert datadir.default_data_dir() == tmp_path / "alabama" / "core"
    assert datadir.default_data_dir().is_absolute()


@pytest.mark.parametrize("argv", [("core", "devices"), ("core", "devices", "--json"), ("core", "key"),
                                  ("core", "approve", "abcd"), ("core", "setting", "abcd", "volume", "80"),
                                  ("core", "say", "abcd", "hi")])
def test_a_data_dir_that_does_not_exist_is_refused_by_read_only_commands(cli, tmp_path, argv):
    typo = tmp_path / "alabama-cor"
    r = cli(*argv, "--data", str(typo))
    one_line(r, str(typo), "--data")
    assert not typo.exists()                              # no empty registry (nor a new identity) made there


@pytest.mark.parametrize("exists", [False, True], ids=["no-such-dir", "empty-dir"])
def test_core_token_with_a_data_dir_no_core_uses_is_one_line_and_makes_no_identity(cli, tmp_path, exists):
    """Sweep 9: a typo'd --data made a new core identity there and minted a token signed by a key no core has."""
    typo = tmp_path / "alabama-cor"
    if exists:
        typo.mkdir()
    r = cli("core", "token", "--data", str(typo), "--host", "10.0.0.2")
    one_line(r, str(typo), "`alabama core serve")
    assert r.returncode == 2 and not r.stdout               # a usage mistake; no token printed
    assert (os.listdir(typo) == []) if exists else not typo.exists()


def test_core_token_first_run_as_documented_serve_makes_the_identity_token_carries_it(cli, tmp_path):
    """The first run the README shows: `core serve --data DIR` makes the core's identity, `core token --data DIR` mints
    a record with that key and the port the core listens on; with no --data at all the default directory is made."""
    from alabama.provision import record
    with _core_serving(tmp_path) as core:                     # its data in tmp_path/d
        r = cli("core", "token", "--data", str(tmp_path / "d"), "--host", "127.0.0.1")
    assert r.returncode == 0, r.stderr
    rec = record.decode(bytes.fromhex(re.search(r"^record ([0-9a-f]+)$", r.stdout, re.M).group(1)))
    assert (rec.core_key.hex(), rec.core_port) == (core["key"], core["port"])
    r = cli("core", "token", "--host", "10.0.0.2")
    assert r.returncode == 0 and (cli.default / "core.key").is_file(), r.stderr


def test_core_devices_before_any_core_ran_says_start_one(cli):
    one_line(cli("core", "devices"), "alabama core serve")
    assert not cli.default.exists()


def test_gitignore_keeps_a_core_state_dir_out_of_commits():
    r = subprocess.run(["git", "check-ignore", "-q", "alabama-core/core.key"], cwd=ROOT)
    if r.returncode == 128:
        pytest.skip("not a git checkout")
    assert r.returncode == 0


def test_makefile_data_default_is_not_the_cwd():
    with open(os.path.join(ROOT, "Makefile")) as f:
        text = f.read()
    assert re.search(r"^DATA \?=\s*$", text, re.M), "Makefile's DATA must default to empty (the user data dir)"


# ------------------------------------------------------------------------------ damaged registry
def _damaged(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "registry.sqlite3").write_bytes(b"this is not an sqlite database, it is a damaged file" * 100)
    return d


def test_a_damaged_registry_is_one_line_in_core_devices(cli, tmp_path):
    d = _damaged(tmp_path)
    one_line(cli("core", "devices", "--data", str(d)), "registry.sqlite3", "damaged", "mv ")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_damaged_registry_is_one_line_in_core_serve(cli, tmp_path, workers):
    d = _damaged(tmp_path)
    one_line(cli("core", "serve", "--listen", "127.0.0.1:0", "--data", str(d), "--workers", workers),
             "registry.sqlite3", "damaged")


# ------------------------------------------------------------------------------ --listen
@pytest.mark.parametrize("workers", ["1", "2"])
def test_core_serve_on_a_port_in_use_is_one_line(cli, tmp_path, workers):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        r = cli("core", "serve", "--listen", "127.0.0.1:%d" % port, "--data", str(tmp_path / "d"),
                "--workers", workers)
    finally:
        s.close()
    one_line(r, "127.0.0.1:%d" % port, "in use", "--listen")
    assert r.returncode == 1              # sweep 8: the world's state (another program listens), not a usage mistake


def test_core_serve_on_an_address_not_on_this_machine_is_one_line(cli, tmp_path):
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this machine
    one_line(cli("core", "serve", "--listen", "192.0.2.1:7355", "--data", str(tmp_path / "d")),
             "192.0.2.1", "not an address of this machine", "0.0.0.0")


@pytest.mark.parametrize("spec, says", [("127.0.0.1:99999", "99999 is not a TCP port: give 1..65535"),
                                        ("127.0.0.1", "HOST:PORT"), ("127.0.0.1:http", "HOST:PORT")])
def test_core_serve_listen_that_is_not_host_port_is_one_line(cli, tmp_path, spec, says):
    one_line(cli("core", "serve", "--listen", spec, "--data", str(tmp_path / "d")), says)


# ------------------------------------------------------------------------------ core setting, as typed
def test_core_setting_takes_the_value_as_typed_and_the_core_logs_no_traceback(cli, tmp_path, run):
    data = str(tmp_path / "d")
    proc = subprocess.Popen(ALABAMA + ["core", "serve", "--listen", "127.0.0.1:0", "--data", data,
                                       "--ping-interval", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(tmp_path / "xdg"))
    try:
        key = re.search(r"key ([0-9a-f]{64})$", proc.stdout.readline().strip()).group(1)
        port = int(re.search(r"127\.0\.0\.1:(\d+)", proc.stdout.readline()).group(1))

        async def body():
            sat = TestSatellite("127.0.0.1", port, server_key=bytes.fromhex(key))
            await sat.connect()
            await sat.send(hello(settings=[setting_int("volume", 0, 100, 50)]))
            await asyncio.sleep(0.3)

            async def answer():
                w = await sat.expect("settings_write", timeout=20)
                assert w.env.settings_write.value.int_value == 80
                await sat.send(env(w.id, "setting_state", key="volume", value={"int_value": 80}))
            res, _ = await asyncio.gather(asyncio.to_thread(cli, "core", "setting", "--data", data,
                                                            sat.device_id[:8], "volume", "80"), answer())
            assert res.returncode == 0, res.stderr
            assert '"intValue": "80"' in res.stdout
            # the wrong type, out of range, an undeclared key, a broken JSON object: one line each, nothing sent
            bad = [(("volume", "loud"), "whole number from 0 to 100"), (("volume", "101"), "outside 0..100"),
                   (("volum", "80"), "declares: volume"), (("volume", "{\"intValue\": "), "JSON"),
                   (("volume", "{\"intValue\": [1]}"), "SettingValue")]
            for argv, words in bad:
                r = await asyncio.to_thread(cli, "core", "setting", "--data", data, sat.device_id[:8], *argv)
                one_line(r, words)
            await sat.close()
        run(body())
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
        err = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    assert rc == 0
    assert "Traceback" not in err and "control request failed" not in err, err


# ------------------------------------------------------------------------------ more of the same kind
def test_core_token_for_a_port_that_is_not_tcp_is_one_line_and_mints_nothing(cli, tmp_path):
    d = tmp_path / "d"
    one_line(cli("core", "token", "--data", str(d), "--port", "99999"), "--port: 99999", "1..65535")
    assert not (d / "registry.sqlite3").exists()


@pytest.mark.parametrize("arguments", ["[1]", "3", "{nope"])
def test_core_invoke_arguments_that_are_not_a_json_object_are_one_line(cli, tmp_path, arguments):
    d = tmp_path / "d"
    d.mkdir()
    one_line(cli("core", "invoke", "--data", str(d), "abcd", "device.blink", arguments), "JSON object")


@pytest.mark.parametrize("how", ["qr", "sound"])
def test_provision_from_a_data_dir_that_does_not_exist_is_refused_not_a_new_core_identity(cli, tmp_path, how):
    typo = tmp_path / "alabama-cor"
    extra = ["--png", str(tmp_path / "p.png")] if how == "qr" else ["--wav", str(tmp_path / "p.wav")]
    one_line(cli("provision", how, "--data", str(typo), *extra), str(typo))
    assert not typo.exists()


def test_a_core_key_that_cannot_be_read_is_one_line(cli, tmp_path):
    d = tmp_path / "d"
    (d / "core.key").mkdir(parents=True, mode=0o700)   # a directory where the key file belongs
    one_line(cli("core", "key", "--data", str(d)), "core.key", "--data")
    one_line(cli("core", "serve", "--listen", "127.0.0.1:0", "--data", str(d)), "core.key")


def test_a_data_path_that_is_a_file_is_one_line(cli, tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    one_line(cli("core", "serve", "--listen", "127.0.0.1:0", "--data", str(f)), "is a file")
    one_line(cli("core", "devices", "--data", str(f)), "is a file")


@pytest.mark.parametrize("argv", [("core", "devices"), ("core", "approve", "abcd"), ("core", "invoke", "abcd", "t")])
def test_an_existing_directory_without_core_state_is_refused_by_read_only_commands(cli, tmp_path, argv):
    d = tmp_path / "home"                     # `--data ~` or any directory that is not the core's
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    one_line(cli(*argv, "--data", str(d)), "holds no core state", "core.key")
    assert sorted(os.listdir(d)) == ["notes.txt"]


# ------------------------------------------------------------------------------ the wake word (issue 40)
@pytest.mark.parametrize("word", ["", " "])
def test_core_serve_empty_wake_word_is_one_line_naming_the_models(cli, tmp_path, word):
    """Sweep 9: `--wake-word ""` (a variable left empty in a script) silently took the default model."""
    r = cli("core", "serve", "--listen", "127.0.0.1:0", "--data", str(tmp_path / "d"), "--wake-word", word)
    one_line(r, "--wake-word is empty: give a microWakeWord model: okay_nabu, hey_jarvis, hey_mycroft, alexa or "
                "FILE.json")
    assert r.returncode == 2 and not (tmp_path / "d").exists()


def test_core_serve_wake_word_and_wake_phrase_together_is_one_line(cli, tmp_path):
    one_line(cli("core", "serve", "--listen", "127.0.0.1:0", "--data", str(tmp_path / "d"), "--wake-word",
                 "okay_nabu", "--wake-phrase", "hey alabama"), "--wake-word", "--wake-phrase", "not both")


@pytest.mark.parametrize("flag", [["--wake-threshold", "1e-20"], ["--wake-min-ms", "300"]])
def test_core_serve_keyphrase_tuning_without_a_phrase_is_one_line(cli, tmp_path, flag):
    """The default engine is a model: the keyphrase spotter's knobs without --wake-phrase would do nothing."""
    one_line(cli("core", "serve", "--listen", "127.0.0.1:0", "--data", str(tmp_path / "d"), *flag),
             flag[0], "--wake-phrase")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_core_serve_wake_phrase_with_a_word_pocketsphinx_lacks_is_one_line(cli, tmp_path, workers):
    pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx")
    one_line(cli("core", "serve", "--listen", "127.0.0.1:0", "--data", str(tmp_path / "d"), "--workers", workers,
                 "--wake-phrase", "hey zzqxw"), "zzqxw", "dictionary", "--wake-word")


# ------------------------------------------------------------------------------ sweep 8: a speech server that is down
@contextlib.contextmanager
def _core_serving(tmp_path, *args):
    """`alabama core serve ARGS` on a free port until the block ends (then SIGTERM): yields a dict with its key and
    port; after the block it holds the exit status (rc) and stderr (err)."""
    proc = subprocess.Popen(ALABAMA + ["core", "serve", "--listen", "127.0.0.1:0", "--data", str(tmp_path / "d"),
                                       "--ping-interval", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(tmp_path / "xdg"))
    got = {}
    try:
        got["key"] = re.search(r"key ([0-9a-f]{64})$", proc.stdout.readline().strip()).group(1)
        got["port"] = int(re.search(r"listening on 127\.0\.0\.1:(\d+)", proc.stdout.readline()).group(1))
        yield got
    finally:
        proc.send_signal(signal.SIGTERM)
        got["rc"] = proc.wait(20)
        got["err"] = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize("option", ["--stt", "--tts"])
def test_core_serve_says_at_start_that_a_wyoming_server_cannot_be_reached_then_each_turn_in_one_line(
        tmp_path, run, option):
    """`core serve --brain speech --stt wyoming://...` with nothing listening started without a word, and each turn
    then logged a traceback. Now: one line at start naming the server, what the core does (serves, asks it again at
    every turn) and what to do; a turn that cannot reach it is one line too, and the board gets an Error."""
    pytest.importorskip("wyoming", reason="pip install wyoming")
    from alabama.board.sim import free_port
    from alabama.core.testsat import capture_open, mic_cap, speaker_cap, tone
    from alabama.v1 import operations_pb2 as ops
    uri = "wyoming://127.0.0.1:%d" % free_port()            # nothing listens there
    with _core_serving(tmp_path, "--brain", "speech", option, uri) as core:
        async def body():
            sat = TestSatellite("127.0.0.1", core["port"], server_key=bytes.fromhex(core["key"]))
            await sat.connect()
            await sat.hello(caps=[mic_cap(), speaker_cap()])
            cid = sat.mint()
            await sat.send(capture_open(cid, trigger=ops.BUTTON))
            await sat.stream_audio(cid, tone(400))
            await sat.send(env(cid, "stream_end", reason=ops.PTT_RELEASE))
            await sat.expect("error", cid, timeout=60)
            await sat.close()
        run(body())
    err = core["err"]
    assert core["rc"] == 0, err
    kind = "STT" if option == "--stt" else "TTS"
    said = [ln for ln in err.splitlines() if uri in ln]
    assert len(said) == 2, err                                # at start, and at the turn
    assert said[0].endswith("WARNING Wyoming %s server %s refused the connection (Connect call failed ('127.0.0.1', "
                            "%s)): the core serves anyway and asks it again at every turn (each turn ends with an "
                            "error until it answers): start it, or use %s embedded"
                            % (kind, uri, uri.rsplit(":", 1)[1], option)), said[0]
    assert re.search(r"WARNING turn \d+ failed: Wyoming %s server %s refused the connection" % (kind, uri), said[1]), \
        said[1]
    assert "Traceback" not in err, err


@pytest.mark.parametrize("option", ["--stt", "--tts"])
def test_core_serve_says_what_failed_with_its_own_advice_not_the_clients_hint(monkeypatch, caplog, option):
    """Sweep 9: _remote_at_start cut the client's hint off the error's text by suffix (an error whose hint differs
    from the class's kept it, two pieces of advice in one line); the error now carries what failed apart."""
    pytest.importorskip("wyoming", reason="pip install wyoming")
    from alabama.core import cli as core_cli
    from alabama.speech import engines, wyoming_io

    def down(self):
        raise engines.EngineError("Wyoming server %s refused the connection (Connection refused)" % self.name,
                                  "a hint of this error's own")
    kind = wyoming_io.WyomingSTT if option == "--stt" else wyoming_io.WyomingTTS
    monkeypatch.setattr(kind, "describe", down)
    with caplog.at_level("WARNING", logger="alabama.core"):
        assert core_cli._remote_at_start("speech", option, "wyoming://127.0.0.1:9") is False
    assert [r.getMessage() for r in caplog.records] == [
        "Wyoming server wyoming://127.0.0.1:9 refused the connection (Connection refused): the core serves anyway and "
        "asks it again at every turn (each turn ends with an error until it answers): start it, or use %s embedded"
        % option]


@pytest.mark.parametrize("brain", [(), ("--brain", "espeak")])
def test_core_serve_says_a_stt_or_tts_no_brain_uses_is_not_used(tmp_path, brain):
    """Sweep 8: `core serve --stt wyoming://...` without --brain speech (the default brain is echo) took the flag
    and never used it, without a word."""
    with _core_serving(tmp_path, "--stt", "wyoming://127.0.0.1:9", *brain) as core:
        pass
    said = [ln for ln in core["err"].splitlines() if "wyoming://127.0.0.1:9" in ln]
    assert core["rc"] == 0 and len(said) == 1, core["err"]
    assert said[0].endswith("WARNING --stt wyoming://127.0.0.1:9 is not used: only the speech brain hears and speaks "
                            "through --stt/--tts, and the %s brain answers (add --brain speech)"
                            % (brain[1] if brain else "echo")), said[0]


def test_core_serve_says_a_wyoming_server_that_offers_no_speech_to_text_is_the_wrong_one(tmp_path):
    """Sweep 8: --stt pointed at a Wyoming TTS-only server (piper's port for whisper's) answered Describe and every
    turn then failed; the start-up probe reads what the server offers and says so in one line."""
    pytest.importorskip("wyoming", reason="pip install wyoming")
    from alabama.board.sim import free_port
    port = free_port()
    uri = "wyoming://127.0.0.1:%d" % port
    server = subprocess.Popen([sys.executable, "-m", "alabama.speech.wyoming_server", "--uri",
                               "tcp://127.0.0.1:%d" % port, "--tts"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_env(tmp_path / "xdg"))
    try:
        assert "listening" in server.stdout.readline(), server.stderr.read()
        with _core_serving(tmp_path, "--brain", "speech", "--stt", uri) as core:
            pass
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(20)
        server.stdout.close()
        server.stderr.close()
    said = [ln for ln in core["err"].splitlines() if uri in ln]
    assert core["rc"] == 0 and len(said) == 1, core["err"]
    assert said[0].endswith("WARNING --stt %s answers but offers no speech-to-text (its Describe lists none): give "
                            "--stt the port of a Wyoming speech-to-text server, or --stt embedded" % uri), said[0]
