"""`alabama flash --release TAG`: a board's release image fetched from a fake GitHub release on loopback
(ALABAMA_RELEASES_URL), its sha256 checked before esptool (mocked, as in test_flash.py) runs, cached under the
cache directory; every failure one line. And the staging step of the release workflow (asset names)."""
import hashlib
import http.server
import json
import os
import socket
import threading

import pytest

from alabama import cli
from alabama.board import boards, flash, release

TAG = "v0.2.0"
BOARD = "devkitc1-inmp441"


def _image(tag=TAG):
    return b"\xe9" + ("frozen image %s " % tag).encode() * 300


class FakeGitHub:
    """GitHub's "Get a release by tag name" and asset downloads (a 302 to the file, as GitHub's
    browser_download_url does), on 127.0.0.1 with a port from the OS."""

    def __init__(self):
        self.releases = {}          # tag -> {asset name: bytes}
        self.api_digest = {}        # asset name -> "sha256:<hex>" given in the release JSON
        self.status = None          # answer every request with this HTTP status
        self.body = None            # answer the API with this body instead of the release JSON
        self.lengths = {}           # asset name -> Content-Length to claim
        self.requests = []
        gh = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body=b"", headers=()):
                self.send_response(code)
                for k, v in headers:
                    self.send_header(k, v)
                if not any(k == "Content-Length" for k, _ in headers):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                gh.requests.append(self.path)
                if gh.status:
                    return self._send(gh.status, b'{"message": "API rate limit exceeded"}')
                parts = self.path.strip("/").split("/")
                if parts[:5] == ["repos", "o", "r", "releases", "tags"] and len(parts) == 6:
                    if gh.body is not None:
                        return self._send(200, gh.body)
                    assets = gh.releases.get(parts[5])
                    if assets is None:
                        return self._send(404, b'{"message": "Not Found"}')
                    listed = [{"name": n, "size": len(b), "browser_download_url": gh.url + "/download/%s/%s"
                               % (parts[5], n), **({"digest": gh.api_digest[n]} if n in gh.api_digest else {})}
                              for n, b in assets.items()]
                    return self._send(200, json.dumps({"tag_name": parts[5], "assets": listed}).encode())
                if parts[0] == "download" and len(parts) == 3:
                    return self._send(302, headers=[("Location", gh.url + "/objects/%s/%s" % (parts[1], parts[2]))])
                if parts[0] == "objects" and len(parts) == 3 and parts[2] in gh.releases.get(parts[1], {}):
                    body = gh.releases[parts[1]][parts[2]]
                    length = gh.lengths.get(parts[2])
                    return self._send(200, body, [("Content-Length", str(length))] if length else ())
                return self._send(404)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def publish(self, tag, board_ids, body=None, digest=None):
        assets = self.releases.setdefault(tag, {})
        for b in board_ids:
            data = body if body is not None else _image(tag)
            hexd = digest or hashlib.sha256(data).hexdigest()
            assets[release.asset_name(b, tag, "firmware.bin")] = data
            assets[release.asset_name(b, tag, "firmware.bin.sha256")] = ("%s  firmware.bin\n" % hexd).encode()
            assets[release.asset_name(b, tag, "ota-image.json")] = b'{"kind": "image"}'

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def github(monkeypatch):
    gh = FakeGitHub()
    monkeypatch.setenv("ALABAMA_RELEASES_URL", gh.url + "/repos/o/r")
    yield gh
    gh.close()


def _flash(tmp_path, board=BOARD, tag=TAG, **kw):
    calls, lines = [], []
    kw.setdefault("runner", lambda a: (calls.append(a) or (0, "")))
    master, slave = os.openpty()             # the board's port, opened by flash's port check (/dev/null is no terminal)
    try:
        steps = flash.flash(boards.load(board), port=os.ttyname(slave), release=tag, release_cache=tmp_path / "rel",
                            deploy=False, out=lines.append, **kw)
    finally:
        os.close(slave)
        os.close(master)
    return steps, calls, lines


def _refused(tmp_path, **kw):
    with pytest.raises(release.ReleaseError) as e:
        _flash(tmp_path, runner=lambda a: pytest.fail("esptool ran"), **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_release_image_is_downloaded_checked_cached_and_flashed_like_firmware(github, tmp_path):
    github.publish(TAG, [BOARD, "esp32-s3-box-3"])
    steps, calls, lines = _flash(tmp_path)
    cached = tmp_path / "rel" / TAG / BOARD / ("alabama-%s-%s-firmware.bin" % (BOARD, TAG))
    assert cached.read_bytes() == _image()
    assert (cached.parent / (cached.name + ".sha256")).read_text().split()[0] == hashlib.sha256(_image()).hexdigest()
    assert sorted(p.name for p in cached.parent.iterdir()) == sorted([cached.name, cached.name + ".sha256"])
    # exactly the argv `alabama flash --firmware` writes
    port = steps[0][steps[0].index("--port") + 1]
    assert calls == steps == flash.esptool_steps(port, cached)
    assert steps[1][-4:] == ["write-flash", "-z", "0x0", str(cached)]
    assert lines[-1] == "MicroPython 1.27.0 (%s) written to %s" % (cached.name, port)
    assert github.requests[0] == "/repos/o/r/releases/tags/" + TAG
    # the second time the checked cache is used: no request at all
    github.requests.clear()
    steps2, calls2, lines2 = _flash(tmp_path)
    port2 = steps2[0][steps2[0].index("--port") + 1]          # a new pty: its number may differ from the first's
    assert github.requests == [] and calls2 == steps2 == flash.esptool_steps(port2, cached)
    assert lines2[0].startswith("release %s for %s: using " % (TAG, BOARD))


def test_a_damaged_cached_copy_is_fetched_again(github, tmp_path):
    github.publish(TAG, [BOARD])
    _flash(tmp_path)
    cached = tmp_path / "rel" / TAG / BOARD / ("alabama-%s-%s-firmware.bin" % (BOARD, TAG))
    cached.write_bytes(b"\xe9 bit rot")
    github.requests.clear()
    _, calls, _ = _flash(tmp_path)
    assert cached.read_bytes() == _image() and len(calls) == 2
    assert github.requests[0].endswith("/releases/tags/" + TAG)
    (cached.parent / (cached.name + ".sha256")).write_text("garbage")      # so is one whose digest file is damaged
    github.requests.clear()
    _flash(tmp_path)
    assert github.requests and cached.read_bytes() == _image()


def test_digest_mismatch_is_refused_before_esptool_and_leaves_nothing(github, tmp_path):
    github.publish(TAG, [BOARD], digest="0" * 64)
    msg = _refused(tmp_path)
    assert msg.startswith("refusing alabama-%s-%s-firmware.bin: sha256 %s... does not match the release's "
                          "firmware.bin.sha256 (0000000000000000...)" % (BOARD, TAG, hashlib.sha256(_image()).hexdigest()[:16]))
    assert "run again" in msg
    d = tmp_path / "rel" / TAG / BOARD
    assert not d.exists() or list(d.iterdir()) == []


def test_githubs_own_asset_digest_is_checked_too(github, tmp_path):
    github.publish(TAG, [BOARD])
    github.api_digest[release.asset_name(BOARD, TAG, "firmware.bin")] = "sha256:" + "ab" * 32
    msg = _refused(tmp_path)
    assert "does not match GitHub's digest of the asset (abababababababab...)" in msg
    github.api_digest[release.asset_name(BOARD, TAG, "firmware.bin")] = "sha256:" + hashlib.sha256(_image()).hexdigest()
    _, calls, _ = _flash(tmp_path)
    assert len(calls) == 2


def test_unknown_tag_is_one_line(github, tmp_path):
    github.publish(TAG, [BOARD])
    msg = _refused(tmp_path, tag="v9.9.9")
    assert msg == ("no release v9.9.9 at %s/repos/o/r/releases/tags/v9.9.9: check the tag (the releases are listed "
                   "at %s)" % (github.url, release.PAGE))


def test_a_release_without_this_board_names_the_boards_it_has(github, tmp_path):
    github.publish(TAG, [BOARD, "xiao-esp32s3-sense-inmp441"])
    msg = _refused(tmp_path, board="esp32-s3-box-3")
    assert msg == ("release %s has no alabama-esp32-s3-box-3-%s-firmware.bin for board esp32-s3-box-3 (images for: "
                   "devkitc1-inmp441, xiao-esp32s3-sense-inmp441): pick the --board it was built for, or a release "
                   "that has this board" % (TAG, TAG))
    github.releases["v0.1.0"] = {}
    assert "(it has no board images)" in _refused(tmp_path, tag="v0.1.0")
    # a release whose .sha256 is missing is refused too, before anything is downloaded
    github.publish("v0.3.0", [BOARD])
    del github.releases["v0.3.0"][release.asset_name(BOARD, "v0.3.0", "firmware.bin.sha256")]
    assert "has no alabama-%s-v0.3.0-firmware.bin.sha256" % BOARD in _refused(tmp_path, tag="v0.3.0")


def test_no_network_is_one_line(monkeypatch, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                       # nothing listens there now
    monkeypatch.setenv("ALABAMA_RELEASES_URL", "http://127.0.0.1:%d/repos/o/r" % port)
    msg = _refused(tmp_path)
    assert msg.startswith("could not reach http://127.0.0.1:%d/repos/o/r/releases/tags/%s (" % (port, TAG))
    assert msg.endswith("check the network connection, or download alabama-%s-%s-firmware.bin and "
                        "alabama-%s-%s-firmware.bin.sha256 from %s/tag/%s by hand and pass --firmware PATH"
                        % (BOARD, TAG, BOARD, TAG, release.PAGE, TAG))


def test_rate_limit_and_garbage_answers_are_one_line(github, tmp_path):
    github.publish(TAG, [BOARD])
    github.status = 403
    msg = _refused(tmp_path)
    assert msg.startswith("%s/repos/o/r/releases/tags/%s refused the request (HTTP 403, most likely GitHub's limit "
                          "of 60 unauthenticated API requests an hour): wait and run again, or download "
                          % (github.url, TAG))
    github.status = None
    github.body = b"<html>a captive portal</html>"
    assert _refused(tmp_path) == ("%s/repos/o/r/releases/tags/%s did not answer with a GitHub release (JSON with "
                                  "assets): check ALABAMA_RELEASES_URL, or run again later" % (github.url, TAG))


def test_an_image_larger_than_the_boards_flash_is_refused(github, tmp_path):
    github.publish(TAG, [BOARD])
    github.lengths[release.asset_name(BOARD, TAG, "firmware.bin")] = (8 << 20) + 1    # the devkit: 8 MB flash
    msg = _refused(tmp_path)
    assert msg == ("alabama-%s-%s-firmware.bin is %d bytes, larger than the board's flash (%d): refusing it"
                   % (BOARD, TAG, (8 << 20) + 1, 8 << 20))


def test_a_malformed_sha256_asset_is_refused(github, tmp_path):
    github.publish(TAG, [BOARD])
    github.releases[TAG][release.asset_name(BOARD, TAG, "firmware.bin.sha256")] = b"<html>not a digest</html>"
    msg = _refused(tmp_path)
    assert msg.startswith("release %s's alabama-%s-%s-firmware.bin.sha256 is not a sha256 line" % (TAG, BOARD, TAG))


def test_dry_run_downloads_nothing(github, tmp_path):
    github.publish(TAG, [BOARD])
    steps, calls, lines = _flash(tmp_path, dry_run=True, runner=lambda a: pytest.fail("esptool ran"))
    assert github.requests == [] and calls == []
    assert lines[0].startswith("would download alabama-%s-%s-firmware.bin from release %s (%s/repos/o/r)"
                               % (BOARD, TAG, TAG, github.url))
    assert steps[1][-1].endswith("alabama-%s-%s-firmware.bin" % (BOARD, TAG))


def test_the_command_line(github, tmp_path, capsys, monkeypatch, serial_port):
    github.publish(TAG, [BOARD])
    assert cli.main(["flash", "--board", BOARD, "--release", "v0.2/../x", "--port", "/dev/null"]) == 2
    assert capsys.readouterr().err.startswith("alabama: error: --release 'v0.2/../x' is not a tag name: give one "
                                              "like v0.2.0")
    with pytest.raises(SystemExit):
        cli.main(["flash", "--board", BOARD, "--release", TAG, "--firmware", "x.bin"])
    assert "not allowed with argument" in capsys.readouterr().err
    assert cli.main(["flash", "--board", BOARD, "--release", "v7.0.0", "--port", serial_port, "--no-deploy"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("alabama: error: no release v7.0.0 at ") and err.count("\n") == 1
    seen = []
    monkeypatch.setattr(flash, "run_esptool", lambda a: (seen.append(a) or (0, "")))
    monkeypatch.setattr(release, "CACHE", tmp_path / "cache")
    assert cli.main(["flash", "--board", BOARD, "--release", TAG, "--port", serial_port, "--no-deploy"]) == 0
    assert seen[1][-1] == str(tmp_path / "cache" / TAG / BOARD / ("alabama-%s-%s-firmware.bin" % (BOARD, TAG)))


def test_make_flash_passes_release(tmp_path):
    import subprocess
    from alabama import REPO
    out = subprocess.run(["make", "-n", "-C", str(REPO), "flash", "BOARD=" + BOARD, "PORT=/dev/ttyACM0",
                          "RELEASE=" + TAG], capture_output=True, text=True).stdout
    out = " ".join(out.split())
    assert "flash --board %s --port /dev/ttyACM0 --release %s" % (BOARD, TAG) in out


# --- the release workflow's staging step ------------------------------------------------------------------

def _built(tmp_path, body=b"\xe9 image"):
    d = tmp_path / "image" / BOARD
    d.mkdir(parents=True)
    (d / "firmware.bin").write_bytes(body)
    (d / "firmware.bin.sha256").write_text("%s  firmware.bin\n" % hashlib.sha256(body).hexdigest())
    (d / "ota-image.json").write_text("{}")
    return d


def test_stage_names_every_file_per_board_and_tag(tmp_path):
    d = _built(tmp_path)
    out = tmp_path / "dist"
    assert release.main(["stage", "--board", BOARD, "--tag", TAG, "--image-dir", str(d), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        "alabama-%s-%s-%s" % (BOARD, TAG, f) for f in ("firmware.bin", "firmware.bin.sha256", "ota-image.json"))
    assert (out / release.asset_name(BOARD, TAG, "firmware.bin")).read_bytes() == b"\xe9 image"


def test_stage_refuses_a_missing_file_or_a_stale_digest(tmp_path, capsys):
    d = _built(tmp_path)
    (d / "ota-image.json").unlink()
    assert release.main(["stage", "--board", BOARD, "--tag", TAG, "--image-dir", str(d),
                         "--out", str(tmp_path / "dist")]) == 1
    assert capsys.readouterr().err.strip().endswith("has no ota-image.json: run `make image BOARD=%s` first" % BOARD)
    (d / "ota-image.json").write_text("{}")
    (d / "firmware.bin").write_bytes(b"\xe9 rebuilt")
    with pytest.raises(release.ReleaseError, match=r"differs from firmware.bin.sha256 .*run `make image BOARD="):
        release.stage(BOARD, TAG, d, tmp_path / "dist")
    assert not (tmp_path / "dist").exists()


def test_ota_release_fetches_the_image_release_a_maker_sends_over_the_air(github, tmp_path):
    """`alabama ota --release TAG` (issue 29): the board's firmware.bin (checked against its .sha256 as for
    flashing) and ota-image.json of the release, laid out as `make image` leaves them, are what ota.load_image
    serves; a release without the manifest, or a device that cannot take an image, is one line."""
    from alabama.board import ota
    github.publish(TAG, [BOARD])
    manifest = json.dumps({"format": 1, "kind": "image", "board": BOARD, "version": "0.2.0", "firmware_digest": "cd" * 32,
                           "size": 100, "offset": 0, "file": "firmware.bin",
                           "sha256": hashlib.sha256(_image()[:100]).hexdigest()}).encode()
    github.releases[TAG][release.asset_name(BOARD, TAG, "ota-image.json")] = manifest
    d = release.fetch_ota(boards.load(BOARD), TAG, cache=tmp_path / "rel", out=lambda *a: None)
    assert (d / "firmware.bin").read_bytes() == _image() and (d / "ota-image.json").read_bytes() == manifest
    rel = ota.load_image({"board": BOARD}, image_dir=d, out=lambda *a: None)
    assert rel.manifest == manifest and rel.digest == hashlib.sha256(manifest).hexdigest()
    assert rel.version == "0.2.0" and rel.files == {"firmware.bin": _image()}
    # a second time: the cache, no request
    github.requests.clear()
    assert release.fetch_ota(boards.load(BOARD), TAG, cache=tmp_path / "rel", out=lambda *a: None) == d
    assert github.requests == []
    # an older release without the OTA manifest
    github.publish("v0.1.0", [BOARD])
    del github.releases["v0.1.0"][release.asset_name(BOARD, "v0.1.0", "ota-image.json")]
    with pytest.raises(release.ReleaseError, match="predates image OTA.*alabama flash --release v0.1.0"):
        release.fetch_ota(boards.load(BOARD), "v0.1.0", cache=tmp_path / "rel", out=lambda *a: None)


def test_ota_release_is_refused_in_one_line_where_it_cannot_apply(github, tmp_path, monkeypatch, capsys):
    from alabama.board import ota
    from alabama.errors import UsageError
    infos = {"files": {"image": "files", "board": BOARD}, "noslot": {"image": "frozen", "board": BOARD}}
    monkeypatch.setattr(ota, "_device_info", lambda data, dev, *a, **k: infos[dev])
    with pytest.raises(ota.OtaError, match="runs its firmware from files.*drop --release"):
        ota.update(tmp_path, "files", release=TAG, out=lambda *a: None)
    with pytest.raises(ota.OtaError, match="without OTA slots: flash the release over USB once "
                                           r"\(alabama flash --release v0.2.0 --board devkitc1-inmp441"):
        ota.update(tmp_path, "noslot", release=TAG, out=lambda *a: None)
    assert github.requests == []
    assert cli.main(["ota", "--device", "x", "--release", TAG, "--image", str(tmp_path)]) == UsageError.exit_code
    assert "--release TAG or --image DIR, not both" in capsys.readouterr().err
