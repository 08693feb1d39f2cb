"""`alabama provision qr` and the provisioning URI: exact URI form, round trips, every refusal, the PNG
decoded by an independent QR decoder (zxing-cpp) back to the same record, and the record options
shared by every carrier (--data mints a token, --record HEX, overrides, --no-key, limits)."""
import base64
import io
import pathlib
import struct
import zlib

import pytest

from alabama import cli
from alabama.provision import qr, record, uri
from alabama.provision.cli import build_record, register
from alabama.v1 import provisioning_pb2


def _rec(**kw):
    base = dict(core_host="192.168.1.20", core_port=7355, core_key=bytes(range(32)), pairing_token="A" * 22,
                token_expires=4102444800)
    base.update(kw)
    return provisioning_pb2.ProvisioningRecord(**base)


# --- the URI --------------------------------------------------------------------------------------------

def test_uri_is_scheme_target_and_unpadded_base64url_of_the_whole_record():
    data = record.encode(_rec())
    u = uri.to_uri(data)
    assert u.startswith("alabama://provision?r=")
    param = u[len("alabama://provision?r="):]
    assert "=" not in param and "+" not in param and "/" not in param
    assert base64.urlsafe_b64decode(param + "=" * (-len(param) % 4)) == data      # CRC included
    assert uri.from_uri(u) == data and uri.decode_uri(u) == _rec()
    # a known vector (docs/provisioning.md shows it)
    small = record.encode(provisioning_pb2.ProvisioningRecord(core_host="h", core_port=1))
    assert small.hex() == "010a016810019db593f3"
    assert uri.to_uri(small) == "alabama://provision?r=AQoBaBABnbWT8w"


@pytest.mark.parametrize("n", range(1, 10))
def test_uri_round_trips_every_length_remainder(n):
    rec = _rec(pairing_token="x" * n, core_key=b"")
    data = record.encode(rec)
    assert uri.from_uri(uri.to_uri(data)) == data


def test_uri_accepts_what_scanners_hand_back():
    data = record.encode(_rec())
    p = base64.urlsafe_b64encode(data).decode()                         # padded
    assert uri.from_uri("ALABAMA://Provision?r=" + p) == data
    assert uri.from_uri("  alabama://provision/?v=2&r=%s \n" % p.rstrip("=")) == data   # extra param, slash


@pytest.mark.parametrize("text,code", [
    ("https://provision?r=AQoBaBABnbWT8w", "SCHEME"),
    ("alabama://pair?r=AQoBaBABnbWT8w", "SCHEME"),
    ("alabama://provision/x?r=AQoBaBABnbWT8w", "SCHEME"),
    ("alabama://provision?x=1", "PARAM"),
    ("alabama://provision?r=a&r=b", "PARAM"),
    ("alabama://provision?r=AQo+aBABA7ShTQ", "BASE64"),
    ("alabama://provision?r=AQoBa", "BASE64"),                          # 5 chars: not a whole byte
    ("alabama://provision?r=" + "A" * 428, "LENGTH"),
    ("alabama://provision?r=" + "A" * 600, "LENGTH"),
    ("alabama://provision?r=AQoBaBABA7ShTQ\u00e9", "BASE64"),
])
def test_uri_refusals(text, code):
    with pytest.raises(uri.UriError) as e:
        uri.from_uri(text)
    assert e.value.code == code and "\n" not in str(e.value)
    assert len(uri.from_uri("alabama://provision?r=" + "A" * 427)) == 320   # the longest accepted


def test_uri_with_a_damaged_record_fails_the_crc():
    u = uri.to_uri(record.encode(_rec()))
    i = len(uri.PREFIX) + 10
    bad = u[:i] + ("B" if u[i] != "B" else "C") + u[i + 1:]
    with pytest.raises(record.RecordError) as e:
        uri.decode_uri(bad)
    assert e.value.code == "CRC"
    with pytest.raises(uri.UriError):
        uri.to_uri(b"\x01\x02")


# --- the QR symbol and its PNG --------------------------------------------------------------------------

def read_png_grey(blob):
    """A minimal PNG reader for what segno writes (greyscale, bit depth 1..8, no interlace): rows of 0..255."""
    import numpy as np
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    i, idat, ihdr = 8, b"", None
    while i < len(blob):
        n, kind = struct.unpack(">I4s", blob[i:i + 8])
        body = blob[i + 8:i + 8 + n]
        assert zlib.crc32(kind + body) == struct.unpack(">I", blob[i + 8 + n:i + 12 + n])[0]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        i += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    assert ctype == 0 and interlace == 0 and depth in (1, 2, 4, 8)
    raw = zlib.decompress(idat)
    stride = (w * depth + 7) // 8
    rows, prev, pos = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[pos], bytearray(raw[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        for x in range(stride):
            a = line[x - 1] if x else 0
            b, c = prev[x], prev[x - 1] if x else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        bits = np.unpackbits(np.frombuffer(bytes(line), np.uint8)) if depth == 1 else np.frombuffer(bytes(line), np.uint8)
        rows.append((bits[:w] * (255 if depth == 1 else 1)).astype(np.uint8))
    return np.stack(rows)


def test_png_decodes_with_zxing_to_the_same_record(tmp_path):
    zxingcpp = pytest.importorskip("zxingcpp")
    data = record.encode(_rec(wifi_ssid="home", wifi_passphrase="a passphrase"))
    text = uri.to_uri(data)
    sym = qr.make(text)
    path = qr.save_png(sym, tmp_path / "p.png")
    img = read_png_grey(pathlib.Path(path).read_bytes())
    side = (sym.symbol_size(border=0)[0] + 2 * qr.BORDER) * qr.PNG_SCALE
    assert img.shape == (side, side)
    found = zxingcpp.read_barcodes(img)
    assert len(found) == 1 and found[0].format == zxingcpp.BarcodeFormat.QRCode
    assert found[0].text == text
    assert uri.decode_uri(found[0].text) == record.decode(data)


def test_symbol_parameters_and_matrix_reencode_identically():
    text = uri.to_uri(record.encode(_rec()))
    a, b = qr.make(text), qr.make(text)
    assert qr.matrix(a) == qr.matrix(b)
    assert a.mode == "byte" and not a.is_micro and a.error in ("M", "Q", "H")
    # a sound-sized record still fits an 80-column terminal in compact mode (version <= 17)
    big = record.encode(_rec(core_host="h" * 50, wifi_ssid="s" * 14))
    assert len(big) == 140
    sym = qr.make(uri.to_uri(big))
    assert sym.version <= 17
    # and the largest record any board reads still makes a QR code
    biggest = record.encode(_rec(core_host="h" * 64, pairing_token="t" * 64, token_expires=2 ** 64 - 1,
                                 wifi_ssid="s" * 32, wifi_passphrase="p" * 64))
    assert len(biggest) <= record.MAX_RECORD_BYTES
    assert qr.make(uri.to_uri(biggest)).version <= 40


def test_cli_qr_prints_uri_symbol_and_writes_png(tmp_path, capsys):
    zxingcpp = pytest.importorskip("zxingcpp")
    data = record.encode(_rec())
    png = tmp_path / "q.png"
    assert cli.main(["provision", "qr", "--record", data.hex(), "--png", str(png)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("record %s (%d bytes)" % (data.hex(), len(data)))
    assert out[1] == "uri " + uri.to_uri(data)
    assert any("\u2580" in ln or "\u2584" in ln for ln in out)          # half-block terminal drawing
    assert out[-1] == "wrote %s" % png
    found = zxingcpp.read_barcodes(read_png_grey(png.read_bytes()))
    assert [f.text for f in found] == [uri.to_uri(data)]


def test_cli_unwritable_png_is_one_line(tmp_path, capsys):
    rc = cli.main(["provision", "qr", "--record", record.encode(_rec()).hex(), "--no-terminal",
                   "--png", str(tmp_path / "nodir" / "q.png")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("alabama: error: cannot write ")   # a usage mistake


# --- the record options (shared by qr, sound and serial) -------------------------------------------------

def _args(argv):
    import argparse
    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    return p.parse_args(["provision"] + argv)


def test_data_mints_a_live_token_in_the_cores_registry(tmp_path):
    from alabama.core import registry as reg
    reg.load_or_create_key(tmp_path / "core")     # a core that ran there (a --data that does not exist is refused)
    lines = []
    data, rec = build_record(_args(["qr", "--data", str(tmp_path / "core"), "--ttl", "120", "--host", "10.1.2.3"]),
                             out=lines.append)
    assert rec.core_host == "10.1.2.3" and rec.core_port == 7355
    assert rec.core_key == reg.server_public_key(tmp_path / "core")
    assert lines[0].startswith("token %s expires " % rec.pairing_token) and lines[0].endswith("(in 120 s)")
    assert record.decode(data) == rec
    r = reg.Registry(tmp_path / "core")
    assert r.consume_token(rec.pairing_token, "dev-1")                   # the core will honour it once
    assert not r.consume_token(rec.pairing_token, "dev-2")


def test_record_hex_with_overrides_and_no_key():
    src = record.encode(_rec())
    data, rec = build_record(_args(["sound", "--record", src.hex(), "--port", "9000", "--no-key",
                                    "--wifi-ssid", "net", "--wifi-passphrase", "password"]), out=lambda s: None)
    assert rec.core_port == 9000 and rec.core_key == b"" and rec.wifi_ssid == "net" and rec.wifi_passphrase == "password"
    assert rec.pairing_token == "A" * 22 and record.decode(data) == rec
    # serial: --port is the serial port, the core's is --core-port
    a = _args(["serial", "--port", "/dev/ttyACM0", "--record", src.hex(), "--core-port", "7000"])
    assert a.port == "/dev/ttyACM0" and build_record(a, out=lambda s: None)[1].core_port == 7000


def test_expired_token_warns(capsys):
    src = record.encode(_rec(token_expires=1000))
    lines = []
    build_record(_args(["qr", "--record", src.hex()]), out=lines.append)
    assert lines[0].startswith("warning: the record's pairing token expired at ")


@pytest.mark.parametrize("argv,msg", [
    (["--record", "zz"], "--record is hex"),
    (["--record", "0102"], "a provisioning record is 5..320 bytes"),
    (["--record", record.encode(_rec()).hex(), "--ttl", "60"], "--ttl mints a token: use it with --data"),
    (["--record", record.encode(_rec()).hex(), "--port", "70000"], "70000 is not a TCP port: give 1..65535"),
])
def test_bad_record_options_are_one_line(capsys, argv, msg):
    try:
        rc = cli.main(["provision", "qr", "--no-terminal"] + argv)
    except SystemExit as e:         # the parser's (a port out of range): status 2 before the command runs
        rc = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc in (1, 2) and len(err) == 1 and msg in err[0], err


def test_without_data_or_record_the_cores_default_state_is_used(capsys, tmp_path, monkeypatch):
    """No --data and no --record: the core's default state directory (the user data dir), refused in one line
    while no core has run there, used once one has (the core's key, a token minted there)."""
    from alabama.core import datadir, registry as reg
    monkeypatch.setattr(datadir, "default_data_dir", lambda: tmp_path / "default-core")
    assert cli.main(["provision", "qr", "--no-terminal", "--host", "10.0.0.2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no core state yet in %s" % (tmp_path / "default-core") in err[0], err
    reg.load_or_create_key(tmp_path / "default-core")
    assert cli.main(["provision", "qr", "--no-terminal", "--host", "10.0.0.2"]) == 0
    assert "token " in capsys.readouterr().out


def test_long_wifi_credentials_go_by_qr_and_by_sound(capsys, tmp_path):
    """Issue 36: a 32-byte SSID and a long passphrase used to be refused by sound (146 bytes > 140); sound
    now sends the record in numbered parts, QR and serial carry it whole."""
    argv = ["--record", record.encode(_rec()).hex(), "--wifi-ssid", "S" * 32, "--wifi-passphrase", "P" * 60]
    assert cli.main(["provision", "qr", "--no-terminal", "--png", str(tmp_path / "q.png")] + argv) == 0
    capsys.readouterr()
    assert cli.main(["provision", "sound", "--wav", str(tmp_path / "s.wav")] + argv) == 0
    out = capsys.readouterr().out
    assert "record " in out and "(182 bytes)" in out and ", 2 parts):" in out, out


def test_provision_without_a_carrier_names_them_in_one_line(capsys):
    assert cli.main(["provision"]) == 2
    r = capsys.readouterr()
    assert not r.out and r.err == "alabama: error: alabama provision needs a command: qr, sound, serial " \
                                  "(`alabama provision --help` says what each does)\n"
