"""Issue 36.3: provisioning that fits real networks. The sound parts (host splitter against the firmware's
reassembler, and the dual test's vector), a pairing token minted only for a record that is then sent, tokens
that never start with '-', the Wi-Fi passphrase asked for without echo, the QR PNG's caption and a terminal
drawing that reads on light and dark themes (decoded by zxing-cpp, an independent decoder)."""
import importlib.util
import itertools
import pathlib
import random
import sqlite3

import pytest

from alabama import cli
from alabama.core import registry as reg
from alabama.provision import parts, qr, record, uri

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _firmware_test(name):
    spec = importlib.util.spec_from_file_location("fw_" + name, ROOT / "tests" / "firmware" / (name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _random_record(rng, n_min, n_max):
    while True:
        rec = record.build("h" * rng.randint(1, 64), rng.randint(1, 65535), bytes(rng.randrange(256) for _ in range(32)),
                           "t" * rng.randint(0, 64), rng.randint(0, 2 ** 32 - 1), "s" * rng.randint(0, 32),
                           "p" * rng.randint(0, 64), bytes(32) if rng.random() < 0.5 else None)
        data = record.encode(rec)
        if n_min <= len(data) <= n_max:
            return data


# --- parts: host splitter, firmware reassembler -------------------------------------------------------

def test_split_makes_the_dual_tests_vector_and_the_twins_share_the_format():
    fw = _firmware_test("test_provision_parts")
    from satellite.provision import parts as fp
    data = bytes.fromhex(fw.RECORD_HEX)
    assert parts.split(data) == [bytes.fromhex(h) for h in fw.PARTS_HEX]
    assert (parts.TAG, parts.HEADER_BYTES, parts.PART_CRC_BYTES, parts.MAX_PAYLOAD, parts.MAX_PARTS) == \
           (fp.TAG, fp.HEADER, fp.PART_CRC, fp.MAX_PAYLOAD, fp.MAX_PARTS)
    assert parts.TAG != record.VERSION                      # a part never reads as a single-part record


def test_every_record_length_splits_within_the_limits_and_the_firmware_reassembles_any_order():
    from satellite.provision import parts as fp
    rng = random.Random(36)
    seen = set()
    for _ in range(120):
        data = _random_record(rng, record.SOUND_MAX_BYTES + 1, record.MAX_RECORD_BYTES)
        ps = parts.split(data)
        seen.add(len(ps))
        assert 2 <= len(ps) <= parts.MAX_PARTS and all(len(p) <= parts.MAX_PAYLOAD for p in ps)
        for order in itertools.permutations(range(len(ps))):
            a = fp.Assembler()
            res = [a.add(ps[i]) for i in order]
            assert res[-1] == fp.COMPLETE and bytes(a.record()) == data
        a = fp.Assembler()
        assert a.add(ps[-1]) == fp.ADDED and a.add(ps[-1]) == fp.REPEAT
        assert parts.join(ps[::-1] + ps[:1]) == data
    assert seen == {2, 3}
    for n in (record.MIN_RECORD_BYTES, 88, record.SOUND_MAX_BYTES):  # a record that fits goes as it is
        data = _random_record(rng, n, n) if n > 60 else record.encode(record.build("h", 1))
        assert parts.split(data) == [data]


# --- tokens -----------------------------------------------------------------------------------------

def test_issue36_a_minted_token_never_starts_with_a_dash(tmp_path, monkeypatch):
    assert len(reg.new_token()) == reg.TOKEN_CHARS
    drawn = iter(["-startsWithADash_1234", "fine-token_1234567890"])
    monkeypatch.setattr(reg.secrets, "token_urlsafe", lambda n: next(drawn))   # 1 draw in 64 starts with '-'
    token, _ = reg.Registry(tmp_path / "core").mint_token(60)
    assert token == "fine-token_1234567890"


def _tokens(data_dir):
    with sqlite3.connect(data_dir / reg.DB_NAME) as db:
        return db.execute("SELECT count(*) FROM tokens").fetchone()[0]


def _main(argv):
    """cli.main's status, or the parser's (a usage mistake exits 2 before any command runs)."""
    try:
        return cli.main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("argv,msg", [
    (["sound", "--port", "70000", "--wav", "{t}/x.wav"], "70000 is not a TCP port: give 1..65535"),
    (["sound", "--play"], "no audio player found"),
    (["sound", "--wav", "{t}/no/such/dir/x.wav"], "cannot write"),
    (["qr", "--png", "{t}/no/such/dir/q.png"], "cannot write"),
    (["qr", "--wifi-ssid", "net", "--wifi-passphrase", "short"], "a WPA2 passphrase is 8..63"),
    (["qr", "--wifi-ssid", "s" * 33, "--wifi-passphrase", "password"],
     "a Wi-Fi name (--wifi-ssid) is 1..32 bytes, this one is 33"),
    (["qr", "--wifi-passphrase", "password"], "--wifi-passphrase needs --wifi-ssid"),
    (["qr", "--ttl", "0"], "--ttl: 0 is outside 1.."),
    (["serial", "--port", "{t}/ttyNONE"], "does not exist"),
    (["serial", "--port", "/dev/null"], "/dev/null is a character device that is no terminal, not a serial port"),
])
def test_issue36_no_token_is_minted_for_a_record_that_is_then_refused(tmp_path, capsys, monkeypatch, argv, msg):
    monkeypatch.setenv("PATH", str(tmp_path))               # no audio player
    data_dir = tmp_path / "core"
    reg.Registry(data_dir)
    argv = [a.replace("{t}", str(tmp_path)) for a in argv]
    rc = _main(["provision", argv[0], "--data", str(data_dir), "--host", "10.0.0.2", "--no-terminal"
                if argv[0] == "qr" else "--no-key"] + argv[1:])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and msg in err[0], err
    assert _tokens(data_dir) == 0
    assert not (tmp_path / "x.wav").exists()


def test_sweep7_play_with_a_player_but_no_audio_device_mints_and_prints_nothing(tmp_path, capsys, monkeypatch):
    """sox's `play` on a machine with no sound card: refused before the token is minted and printed, not after."""
    player = tmp_path / "play"
    player.write_text("#!/bin/sh\necho 'play FAIL sox: Sorry, there is no default audio device configured' >&2\n"
                      "exit 1\n")
    player.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    data_dir = tmp_path / "core"
    reg.Registry(data_dir)
    rc = _main(["provision", "sound", "--play", "--data", str(data_dir), "--host", "10.0.0.2", "--no-key"])
    out, err = capsys.readouterr()
    assert rc == 1 and out == "", out
    assert err == ("alabama: error: play cannot play here: it exited 1 (play FAIL sox: Sorry, there is no default "
                   "audio device configured): write a file with --wav out.wav and play it on a computer with a "
                   "speaker (nothing was minted)\n"), err
    assert _tokens(data_dir) == 0


def test_a_good_record_mints_exactly_one_token(tmp_path, capsys):
    data_dir = tmp_path / "core"
    reg.load_or_create_key(data_dir)       # a core that ran there (a --data that does not exist is refused)
    assert cli.main(["provision", "qr", "--data", str(data_dir), "--host", "10.0.0.2", "--no-terminal"]) == 0
    assert _tokens(data_dir) == 1


# --- the Wi-Fi passphrase -----------------------------------------------------------------------------

class _Tty:
    def isatty(self):
        return True


def test_issue36_the_passphrase_is_asked_for_without_echo_when_not_given(tmp_path, capsys, monkeypatch):
    import getpass
    import sys
    monkeypatch.setattr(sys, "stdin", _Tty())
    asked = []
    monkeypatch.setattr(getpass, "getpass", lambda prompt: asked.append(prompt) or "hunter2-hunter2")
    reg.load_or_create_key(tmp_path / "core")
    assert cli.main(["provision", "qr", "--data", str(tmp_path / "core"), "--host", "10.0.0.2", "--no-terminal",
                     "--wifi-ssid", "Home Net", "--show-secrets"]) == 0
    out = capsys.readouterr().out
    assert asked == ["Wi-Fi passphrase for Home Net (not shown; empty for an open network): "]
    data = bytes.fromhex(next(ln for ln in out.splitlines() if ln.startswith("record ")).split()[1])
    rec = record.decode(data)
    assert rec.wifi_ssid == "Home Net" and rec.wifi_passphrase == "hunter2-hunter2"
    assert "hunter2" not in out.replace(data.hex(), "")      # the passphrase is not printed in clear


def test_an_empty_answer_is_an_open_network_and_eof_is_one_line(tmp_path, capsys, monkeypatch):
    import getpass
    import sys
    monkeypatch.setattr(sys, "stdin", _Tty())
    monkeypatch.setattr(getpass, "getpass", lambda prompt: "")
    argv = ["provision", "qr", "--record", record.encode(record.build("h", 1)).hex(), "--no-terminal",
            "--wifi-ssid", "cafe"]
    assert cli.main(argv) == 0
    capsys.readouterr()

    def eof(prompt):
        raise EOFError
    monkeypatch.setattr(getpass, "getpass", eof)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Wi-Fi passphrase given: pass --wifi-passphrase P" in err[0]


def test_a_piped_passphrase_is_read_from_stdin_without_a_warning(tmp_path, capsys, monkeypatch):
    import io
    import sys
    import getpass

    def no_getpass(prompt):
        raise AssertionError("getpass on a pipe warns that it cannot control echo")
    monkeypatch.setattr(getpass, "getpass", no_getpass)
    monkeypatch.setattr(sys, "stdin", io.StringIO("piped secret 1\n"))
    argv = ["provision", "qr", "--record", record.encode(record.build("h", 1)).hex(), "--no-terminal",
            "--wifi-ssid", "cafe", "--show-secrets"]
    assert cli.main(argv) == 0
    data = bytes.fromhex(next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("record ")).split()[1])
    assert record.decode(data).wifi_passphrase == "piped secret 1"
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert cli.main(argv) == 2
    assert "no Wi-Fi passphrase given" in capsys.readouterr().err


# --- the QR code ----------------------------------------------------------------------------------------

THEMES = {"dark": ((255, 255, 255), (0, 0, 0)), "light": ((0, 0, 0), (255, 255, 255))}   # (fg, bg) defaults
_SGR = {"30": ("fg", 0), "97": ("fg", 255), "40": ("bg", 0), "107": ("bg", 255)}


def render_terminal(text, theme):
    """What a terminal shows for `text` (half blocks, spaces, SGR colours), as a grey image: each character
    cell is 1 pixel wide and 2 tall (its upper and lower half). theme: the default fore/background."""
    import numpy as np
    fg0, bg0 = THEMES[theme][0][0], THEMES[theme][1][0]
    rows = []
    for line in text.splitlines():
        fg, bg = fg0, bg0
        top, bottom = [], []
        i = 0
        while i < len(line):
            if line[i] == "\x1b":
                j = line.index("m", i)
                for code in line[i + 2:j].split(";"):
                    if code in ("0", ""):
                        fg, bg = fg0, bg0
                    elif code == "7":
                        fg, bg = bg, fg
                    elif code == "49":
                        bg = bg0
                    else:
                        which, v = _SGR[code]
                        fg, bg = (v, bg) if which == "fg" else (fg, v)
                i = j + 1
                continue
            ch = line[i]
            t, b = {"\u2580": (fg, bg), "\u2584": (bg, fg), "\u2588": (fg, fg), " ": (bg, bg)}[ch]
            top.append(t)
            bottom.append(b)
            i += 1
        rows += [top, bottom]
    img = np.array(rows, dtype=np.uint8)
    return np.kron(img, np.ones((4, 4), dtype=np.uint8))     # 4x: what a screenshot of the terminal gives


def _decode(img):
    """zxing-cpp without its inverted-image retry: many phone camera apps and the ISO 18004 reader do not read
    light-on-dark codes, so a drawing that only reads inverted does not count."""
    zxingcpp = pytest.importorskip("zxingcpp")
    return [f.text for f in zxingcpp.read_barcodes(img, try_invert=False)]


def test_issue36_the_terminal_qr_reads_on_light_and_dark_themes():
    import io
    text = uri.to_uri(record.encode(record.build("192.168.1.20", 7355, bytes(32), "t" * 22, 4102444800)))
    sym = qr.make(text)
    for kwargs in ({"compact": True}, {"compact": False}):
        out = io.StringIO()
        qr.terminal(sym, out, **kwargs)
        for theme in THEMES:
            assert _decode(render_terminal(out.getvalue(), theme)) == [text], (kwargs, theme)
    plain = io.StringIO()
    qr.terminal(sym, plain, plain=True)                      # segno's own drawing: what --plain gives
    assert _decode(render_terminal(plain.getvalue(), "dark")) == [text]
    assert _decode(render_terminal(plain.getvalue(), "light")) == []   # inverted on a light theme: why not default


def test_issue36_the_png_carries_a_caption_under_an_intact_code(tmp_path, capsys):
    from PIL import Image
    png = tmp_path / "pair.png"
    reg.load_or_create_key(tmp_path / "core")
    assert cli.main(["provision", "qr", "--data", str(tmp_path / "core"), "--host", "192.168.1.20", "--no-terminal",
                     "--wifi-ssid", "Home Net", "--wifi-passphrase", "hunter2-hunter2", "--png", str(png),
                     "--show-secrets"]) == 0
    out = capsys.readouterr().out
    token_line = next(ln for ln in out.splitlines() if ln.startswith("token "))
    expires = token_line.split(" expires ")[1].split(" (")[0]
    im = Image.open(png)
    caption = im.text["Description"].split(" / ")
    assert caption[0].startswith("Alabama core 192.168.1.20:7355 (key ")
    assert caption[1] == "pairing token expires %s" % expires
    assert caption[2] == "Wi-Fi Home Net" and caption[-1] == qr.READERS
    assert "hunter2" not in im.text["Description"]
    import numpy as np
    grey = np.array(im.convert("L"))
    data_line = next(ln for ln in out.splitlines() if ln.startswith("uri "))
    assert _decode(grey) == [data_line[4:]]
    sym = qr.make(data_line[4:])
    side = (sym.symbol_size(border=0)[0] + 2 * qr.BORDER) * qr.PNG_SCALE
    assert grey.shape[0] > side + len(caption) * qr.CAPTION_PX                 # the caption's rows
    assert (grey[side:] < 128).sum() > 500                                      # with text drawn in them
    assert (grey[side - qr.BORDER * qr.PNG_SCALE:side] == 255).all()            # the quiet zone left whole


def test_issue36_core_token_mints_no_token_for_a_record_it_cannot_build(tmp_path, capsys):
    """`alabama core token` checks the record (here a 70-character passphrase, and a TTL past the registry's limit)
    with a placeholder before it mints: a refusal is one line and costs no token; a good one mints exactly one."""
    data_dir = tmp_path / "core"
    reg.load_or_create_key(data_dir)
    reg.Registry(data_dir)
    for extra in (["--wifi-ssid", "Home", "--wifi-passphrase", "p" * 70], ["--ttl", str(reg.MAX_TTL_S + 1)]):
        rc = _main(["core", "token", "--data", str(data_dir), "--host", "10.0.0.2"] + extra)
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, err
    assert _tokens(data_dir) == 0
    assert cli.main(["core", "token", "--data", str(data_dir), "--host", "10.0.0.2", "--wifi-ssid", "Home",
                     "--wifi-passphrase", "hunter2-hunter2"]) == 0
    assert _tokens(data_dir) == 1 and "record " in capsys.readouterr().out
