"""Release signing on the host (alabama.board.signing) against the firmware's check (satellite.release, the
Ed25519 verifier), and the release key in the provisioning record (proto field 8) on both sides."""
import asyncio
import os

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from alabama.board import signing
from alabama.cli import main
from alabama.errors import UsageError
from alabama.provision import record as rc

from satellite import ota, release
from satellite.noise import ed25519
from satellite.provision import record as fwrec


def test_context_has_one_owner_mirrored_exactly():
    assert signing.CONTEXT == release.CONTEXT and signing.SIG_SUFFIX == release.SIG_SUFFIX


def test_keygen_files_load_and_sign_what_the_firmware_verifies(tmp_path):
    out, pub, raw = signing.keygen(tmp_path / "release.pem")
    assert os.stat(out).st_mode & 0o777 == 0o600 and pub.name == "release.pem.pub"
    assert signing.load_public(pub) == raw
    (tmp_path / "raw.pub").write_bytes(raw)
    (tmp_path / "hex.pub").write_text(raw.hex() + "\n")
    assert signing.load_public(tmp_path / "raw.pub") == signing.load_public(tmp_path / "hex.pub") == raw
    key = signing.load_private(out)
    manifest = b'{"format":1,"package":"satellite"}'
    sig = signing.sign_manifest(key, manifest)
    assert ed25519.verify(raw, release.message(__import__("hashlib").sha256(manifest).digest()), sig)
    assert not ed25519.verify(raw, manifest, sig)            # the bare manifest is not what is signed
    with pytest.raises(UsageError):
        signing.keygen(out)                                  # never overwritten


def test_bad_key_files_are_one_line_errors(tmp_path):
    (tmp_path / "junk").write_bytes(b"not a key")
    for fn in (signing.load_private, signing.load_public):
        for p in (tmp_path / "junk", tmp_path / "missing"):
            with pytest.raises(signing.SigningError) as e:
                fn(p)
            assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_provision_release_key_goes_into_the_record_and_the_firmware_reads_it(tmp_path, capsys):
    _, pub, raw = signing.keygen(tmp_path / "k.pem")
    rec = rc.encode(rc.build("10.0.0.2", 7000, bytes(32), "tok", 0))
    assert main(["provision", "qr", "--record", rec.hex(), "--release-key", str(pub), "--no-terminal"]) == 0
    text = capsys.readouterr().out
    assert "release key %s... pinned" % raw[:4].hex() in text
    data = bytes.fromhex(text.split("record ")[1].split()[0])
    assert rc.decode(data).release_key == raw
    assert bytes(fwrec.decode(data).release_key) == raw
    assert not fwrec.decode(rec).release_key                 # absent: channel trust
    with pytest.raises(rc.RecordError):
        rc.encode(rc.build("h", 1, release_key=raw[:31]))
    bad = rc.build("h", 1)
    bad.release_key = raw[:31]
    body = bytes([1]) + bad.SerializeToString()
    import zlib
    with pytest.raises(fwrec.RecordError) as e:
        fwrec.decode(body + zlib.crc32(body).to_bytes(4, "little"))
    assert e.value.code == "FIELD" and "release_key" in str(e.value)


class _Upd:
    """The Updater fields satellite.release uses: connect and buf for the .sig download, log, release_key."""

    def __init__(self, key, sig_body, status=200):
        self.release_key = key
        self.buf = bytearray(ota.CHUNK)
        self.lines = []
        self.log = self.lines.append

        async def connect(host, port):
            head = b"HTTP/1.0 %d X\r\nContent-Length: %d\r\n\r\n" % (status, len(sig_body))
            return _Sock(head + (sig_body if status == 200 else b""))
        self.connect = connect


class _Sock:
    def __init__(self, data):
        self.data = data

    def send(self, b):
        return len(b)

    def readinto(self, buf):
        n = min(len(buf), len(self.data))
        buf[:n] = self.data[:n]
        self.data = self.data[n:]
        return n

    def close(self):
        pass


def test_release_check_without_key_is_channel_trust_and_with_key_decides():
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes_raw()
    manifest = b'{"m":1}'
    url = "http://127.0.0.1:1/p/manifest.json"
    run = asyncio.run
    assert run(release.check(_Upd(b"", b""), url, manifest)) is False          # no pinned key: nothing fetched
    assert run(release.check(_Upd(raw, signing.sign_manifest(key, manifest)), url, manifest)) is True
    cases = [(_Upd(raw, b"", 404), "UNSIGNED"),
             (_Upd(raw, signing.sign_manifest(Ed25519PrivateKey.generate(), manifest)), "BAD_SIGNATURE"),
             (_Upd(raw, signing.sign_manifest(key, manifest)[:63]), "BAD_SIGNATURE"),
             (_Upd(raw, bytes(65)), "BAD_SIGNATURE")]
    for upd, reason in cases:
        with pytest.raises(ota.OtaError) as e:
            run(release.check(upd, url, manifest))
        assert e.value.reason == reason and e.value.code == ota.INVALID_REQUEST and "\n" not in str(e.value)


def test_image_release_is_signed_and_served_like_a_module_set(tmp_path):
    # issue 29: `alabama ota --sign-key` signs whichever manifest it serves; the board's check (satellite.release,
    # before the module/image split in satellite.ota) then covers an image update too
    import json
    import urllib.request
    from alabama.board import ota as host_ota
    key = Ed25519PrivateKey.generate()
    manifest = json.dumps({"format": 1, "kind": "image", "version": "1.0.0", "firmware_digest": "ab" * 32,
                           "size": 3, "file": "firmware.bin"}).encode()
    rel = host_ota._sign(host_ota.ImageRelease(b"app", manifest), key, lambda *a: None)
    with host_ota.SetServer(rel, bind="127.0.0.1") as srv:
        url = srv.url("127.0.0.1")
        with urllib.request.urlopen(url + ".sig", timeout=10) as r:
            sig = r.read()
    assert sig == rel.sig and len(sig) == 64
    key.public_key().verify(sig, signing.signed_message(manifest))     # raises InvalidSignature when wrong


def test_a_bad_release_key_file_costs_no_pairing_token(tmp_path, capsys):
    # the key file is read before a token is minted: a typo in --release-key must not leave a live token behind
    from alabama.core import registry as reg
    data = tmp_path / "core"
    r = reg.Registry(data)
    before = r.db.execute("SELECT COUNT(*) FROM tokens").fetchone()[0]
    assert main(["provision", "qr", "--data", str(data), "--release-key", str(tmp_path / "missing.pub"),
                 "--no-terminal"]) != 0
    err = capsys.readouterr().err
    assert "missing.pub" in err and err.count("\n") == 1
    assert reg.Registry(data).db.execute("SELECT COUNT(*) FROM tokens").fetchone()[0] == before
    assert main(["provision", "qr", "--data", str(data), "--no-terminal"]) == 0      # and a good run mints one
    assert reg.Registry(data).db.execute("SELECT COUNT(*) FROM tokens").fetchone()[0] == before + 1
