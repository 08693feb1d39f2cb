"""`alabama flash` end to end for an image the repository does not pin: trust on first use against a loopback image
server (the mirror: --image-url / ALABAMA_IMAGE_URL), a pty as the serial port and a fake esptool; the explicit
pin (--image-sha256); the checks that come before any download (port, heap); esptool 4 and 5 command names."""
import hashlib
import http.server
import json
import os
import sys
import threading
import types

import pytest

from alabama import cli
from alabama.board import boards, flash, imagelock, images
from alabama.errors import UsageError

OCT = "ESP32_GENERIC_S3-SPIRAM_OCT"
BOARD = "esp32-s3-box-3"          # octal PSRAM: its image is not pinned in the repository
FIRST = b"\xe9" + b"first image " * 100
CHANGED = b"\xe9" + b"changed image " * 100


def _sha(b):
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def server():
    files, requests = {}, []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
            body = files.get(self.path.rsplit("/", 1)[-1])
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield types.SimpleNamespace(url="http://127.0.0.1:%d/mirror" % srv.server_address[1], files=files,
                                requests=requests)
    srv.shutdown()
    srv.server_close()
    t.join(5)


@pytest.fixture
def cache(tmp_path, monkeypatch, server):
    d = tmp_path / "cache"
    monkeypatch.setenv("ALABAMA_IMAGE_CACHE", str(d))
    monkeypatch.setenv(flash.IMAGE_URL_ENV, server.url)
    return d


class Esptool:
    def __init__(self):
        self.calls = []

    def __call__(self, args):
        self.calls.append(args)
        return 0, "Hash of data verified.\n"


def _flash(serial_port, board=BOARD, **kw):
    lines, esp = [], kw.pop("runner", None) or Esptool()
    kw.setdefault("deploy", False)
    steps = flash.flash(boards.load(board), port=serial_port, runner=esp, out=lines.append, major=5, **kw)
    return steps, esp.calls, lines


def test_first_use_records_the_sha256_then_the_cached_copy_is_used(server, cache, serial_port):
    img = images.image_for(OCT)
    assert img.sha256 is None                              # the case this file is about
    server.files[img.file] = FIRST
    steps, calls, lines = _flash(serial_port)
    path = cache / img.file
    assert path.read_bytes() == FIRST
    assert server.requests == ["/mirror/" + img.file]
    assert "downloaded %s: sha256 %s, %d bytes" % (img.file, _sha(FIRST), len(FIRST)) in lines
    lock = cache / imagelock.LOCK_NAME
    assert any(ln.startswith("first use of %s: recorded sha256 %s (%d bytes) in %s" % (img.file, _sha(FIRST),
                                                                                        len(FIRST), lock))
               for ln in lines)
    rec = json.loads(lock.read_text())["images"][img.file]
    assert (rec["sha256"], rec["size"], rec["url"]) == (_sha(FIRST), len(FIRST), server.url + "/" + img.file)
    assert calls == steps == [["--chip", "esp32s3", "--port", serial_port, "erase-flash"],
                              ["--chip", "esp32s3", "--port", serial_port, "--baud", "460800", "write-flash", "-z",
                               "0x0", str(path)]]
    assert sorted(p.name for p in cache.iterdir()) == sorted([img.file, imagelock.LOCK_NAME])
    # second use: the checked cache, no request, nothing recorded again
    server.requests.clear()
    _, calls2, lines2 = _flash(serial_port)
    assert server.requests == [] and calls2 == calls
    assert not any(ln.startswith(("first use", "downloading")) for ln in lines2)


def test_a_download_that_differs_from_the_first_use_record_is_refused(server, cache, serial_port):
    img = images.image_for(OCT)
    server.files[img.file] = FIRST
    _flash(serial_port)
    lock_before = (cache / imagelock.LOCK_NAME).read_text()
    (cache / img.file).unlink()                           # gone from the cache: the next flash downloads again
    server.files[img.file] = CHANGED
    esp = Esptool()
    with pytest.raises(imagelock.LockError) as e:
        _flash(serial_port, runner=esp)
    msg = str(e.value)
    assert "\n" not in msg and esp.calls == []
    assert msg.startswith("refusing %s: its sha256 is %s but %s recorded %s on first use"
                          % (img.file, _sha(CHANGED), cache / imagelock.LOCK_NAME, _sha(FIRST)))
    assert msg.endswith("run again with --image-sha256 %s" % _sha(CHANGED))
    assert sorted(p.name for p in cache.iterdir()) == [imagelock.LOCK_NAME]       # no image, no .part
    assert (cache / imagelock.LOCK_NAME).read_text() == lock_before
    # the maker checked the new image and pins it: flashed, and the record follows
    _, calls, lines = _flash(serial_port, image_sha256=_sha(CHANGED).upper())
    assert (cache / img.file).read_bytes() == CHANGED and len(calls) == 2
    assert imagelock.entry(img.file, cache)["sha256"] == _sha(CHANGED)


def test_a_cached_copy_that_differs_from_the_record_is_refused(server, cache, serial_port):
    img = images.image_for(OCT)
    server.files[img.file] = FIRST
    _flash(serial_port)
    (cache / img.file).write_bytes(CHANGED)
    with pytest.raises(flash.FlashError, match="^refusing .*: sha256 %s... does not match the sha256 recorded on "
                       "first use %s... \\(corrupt or substituted download\\): delete it and run again$" % (_sha(CHANGED)[:16], _sha(FIRST)[:16])):
        _flash(serial_port, runner=lambda a: pytest.fail("esptool ran"))


def test_explicit_pin_refuses_any_other_download_and_records_nothing(server, cache, serial_port):
    img = images.image_for(OCT)
    server.files[img.file] = FIRST
    with pytest.raises(flash.FlashError) as e:
        _flash(serial_port, image_sha256=_sha(CHANGED), runner=lambda a: pytest.fail("esptool ran"))
    assert str(e.value).startswith("refusing %s from %s/%s: its sha256 is %s, not --image-sha256 %s: "
                                   % (img.file, server.url, img.file, _sha(FIRST), _sha(CHANGED)))
    assert not cache.exists() or sorted(p.name for p in cache.iterdir()) == []
    with pytest.raises(flash.UsageError, match="--image-sha256 'abc' is not a sha256"):
        _flash(serial_port, image_sha256="abc")
    _, calls, _ = _flash(serial_port, image_sha256=_sha(FIRST))
    assert len(calls) == 2 and imagelock.entry(img.file, cache)["sha256"] == _sha(FIRST)


def test_the_mirror_flag_wins_over_the_variable_and_may_name_the_bin(server, cache, serial_port, monkeypatch):
    img = images.image_for(OCT)
    server.files[img.file] = FIRST
    server.files["renamed.bin"] = FIRST
    base = server.url.rsplit("/", 1)[0]
    monkeypatch.setenv(flash.IMAGE_URL_ENV, "https://mirror.invalid/images")
    _flash(serial_port, mirror=base + "/other/")
    assert server.requests == ["/other/" + img.file]
    (cache / img.file).unlink()
    _flash(serial_port, mirror=base + "/x/renamed.bin")
    assert server.requests[-1] == "/x/renamed.bin"
    assert flash.image_url(img, env={}) == "https://micropython.org/resources/firmware/" + img.file


def test_plain_http_off_this_machine_needs_a_known_digest(cache, serial_port):
    def no_network(req):
        pytest.fail("downloaded")
    with pytest.raises(flash.FlashError, match="^refusing http://192.0.2.1/m/.*: an image without a known sha256 is "
                       "downloaded over https only: serve the mirror over https, or pass --image-sha256 HEX$"):
        _flash(serial_port, mirror="http://192.0.2.1/m", opener=no_network)
    with pytest.raises(UsageError, match="^ftp://127.0.0.1/m is not an http\\(s\\) URL: give --image-url "):   # sweep 9:
        _flash(serial_port, mirror="ftp://127.0.0.1/m", opener=no_network)         # a usage mistake, said first
    with pytest.raises(flash.FlashError, match="must be an http\\(s\\) URL"):        # ALABAMA_IMAGE_URL's
        _flash(serial_port, env={flash.IMAGE_URL_ENV: "ftp://127.0.0.1/m"}, opener=no_network)


def test_port_and_heap_are_checked_before_any_download(server, cache, tmp_path):
    """The devkit (no PSRAM, 130k) is refused for its heap and a missing port for itself before a byte is
    fetched: the server sees no request and the cache stays empty."""
    for variant in images.VARIANTS:
        server.files[images.image_for(variant).file] = FIRST
    gone = str(tmp_path / "ttyGONE")
    with pytest.raises(flash.FlashError, match="^serial port .*ttyGONE does not exist"):
        flash.flash(boards.load(BOARD), port=gone, out=lambda s: None, runner=lambda a: pytest.fail("ran"))
    master, slave = os.openpty()
    try:
        with pytest.raises(flash.FlashError, match="^board devkitc1-inmp441's heap \\(130k\\) cannot hold the "
                           "firmware as .mpy files.*RELEASE=TAG"):
            flash.flash(boards.load("devkitc1-inmp441"), port=os.ttyname(slave), out=lambda s: None,
                        runner=lambda a: pytest.fail("ran"))
    finally:
        os.close(master)
        os.close(slave)
    assert server.requests == []
    assert not cache.exists()


def test_a_damaged_lock_is_one_line(cache, serial_port):
    cache.mkdir()
    (cache / imagelock.LOCK_NAME).write_text("{not json")
    with pytest.raises(imagelock.LockError) as e:
        _flash(serial_port, opener=lambda r: pytest.fail("downloaded"))
    assert str(e.value) == ("the image lock %s is damaged: delete it (the next flash records each image anew, "
                            "check the sha256 it prints against the download page) or restore it"
                            % (cache / imagelock.LOCK_NAME))


def test_the_cli_takes_the_pin_and_the_mirror(server, cache, serial_port, capsys):
    img = images.image_for(OCT)
    server.files[img.file] = FIRST
    rc = cli.main(["flash", "--board", BOARD, "--port", serial_port, "--image-sha256", "12ab", "--no-deploy"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and err == ["alabama: error: --image-sha256 '12ab' is not a sha256: give the 64 hex digits "
                               "`sha256sum` prints"]
    rc = cli.main(["flash", "--board", BOARD, "--port", serial_port, "--image-url", server.url,
                   "--image-sha256", _sha(FIRST), "--no-deploy", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and out.splitlines()[0] == "would download %s/%s (sha256 %s)" % (server.url, img.file, _sha(FIRST))
    assert server.requests == []


# --- esptool 4 and 5: the command names of the esptool that runs -------------------------------------------------

FAKE_ESPTOOL = '''
import json, os, sys
major = int(os.environ["FAKE_ESPTOOL_MAJOR"])
args = sys.argv[1:]
if args == ["version"]:
    print("esptool v%d.6.0" % major if major >= 5 else "esptool.py v%d.8.1\\n%d.8.1" % (major, major))
    sys.exit(0)
with open(os.environ["FAKE_ESPTOOL_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
known = {"erase_flash", "write_flash"} | ({"erase-flash", "write-flash"} if major >= 5 else set())
cmd = [a for a in args if a in known or a.replace("_", "-") in ("erase-flash", "write-flash")][0]
if cmd not in known:
    print("esptool.py: error: argument operation: invalid choice: %r" % cmd)
    sys.exit(2)
if major >= 5 and "_" in cmd:
    print("Warning: Deprecated: Command %r is deprecated. Use %r instead." % (cmd, cmd.replace("_", "-")))
print("Hash of data verified.")
'''


@pytest.mark.parametrize("major,names", [(5, ["erase-flash", "write-flash"]), (4, ["erase_flash", "write_flash"])])
def test_the_esptool_that_runs_picks_the_command_names(tmp_path, monkeypatch, serial_port, major, names):
    pkg = tmp_path / "fake" / "esptool"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(FAKE_ESPTOOL)
    log = tmp_path / "esptool.log"
    monkeypatch.setenv("PYTHONPATH", str(pkg.parent))
    monkeypatch.setenv("FAKE_ESPTOOL_MAJOR", str(major))
    monkeypatch.setenv("FAKE_ESPTOOL_LOG", str(log))
    assert flash.esptool_major() == major
    fw = tmp_path / "fw.bin"
    fw.write_bytes(FIRST)
    out = open(tmp_path / "out.txt", "w")
    monkeypatch.setattr(sys, "stdout", out)
    flash.flash(boards.load(BOARD), port=serial_port, firmware=str(fw), deploy=False, out=lambda s: None)
    out.close()
    ran = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert [a[4] if a[4] != "--baud" else a[6] for a in ran] == names
    assert "deprecated" not in (tmp_path / "out.txt").read_text().lower()
    # the other spelling is what the fake refuses (esptool 4) or warns about (esptool 5): the check can fail
    other = flash.esptool_steps(serial_port, fw, 9 - major)[0]
    rc, text = flash.run_esptool(other, out=open(os.devnull, "w"))
    assert (rc != 0) if major == 4 else ("deprecated" in text.lower())


@pytest.mark.parametrize("board_id", sorted(b.id for b in boards.load_all()
                                            if b.image and b.data.get("psram") not in (None, "none")))
def test_every_psram_board_flashes_and_deploys_with_no_source_edits(server, cache, serial_port, monkeypatch, board_id):
    """Every board file with PSRAM: its image (pinned or first use) from the mirror, erase + write, and the deploy
    after it goes ahead (its heap holds the .mpy set; deploy itself is faked here: test_deploy drives it)."""
    board = boards.load(board_id)
    img = images.image_for(board.image)
    server.files[img.file] = FIRST
    if img.sha256 is not None:                               # a pinned image: the mirror serves the pinned bytes
        monkeypatch.setitem(images.IMAGES, board.image, images.Image(img.variant, img.version, img.file, img.url,
                                                                     _sha(FIRST), len(FIRST), "test"))
    deployed = []
    from alabama.board import deploy
    monkeypatch.setattr(deploy, "deploy", lambda b, p, wait=0, allow_mpy=False: deployed.append((b.id, p, allow_mpy)))
    steps, calls, _ = _flash(serial_port, board=board_id, deploy=True)
    assert [c[4] if c[4] != "--baud" else c[6] for c in calls] == ["erase-flash", "write-flash"]
    assert deployed == [(board_id, serial_port, False)]


def test_image_sha256_checks_a_firmware_file_too(tmp_path, serial_port):
    fw = tmp_path / "mine.bin"
    fw.write_bytes(FIRST)
    with pytest.raises(flash.FlashError, match="does not match --image-sha256 %s..." % _sha(CHANGED)[:16]):
        _flash(serial_port, firmware=str(fw), image_sha256=_sha(CHANGED), runner=lambda a: pytest.fail("esptool ran"))
    _, calls, lines = _flash(serial_port, firmware=str(fw), image_sha256=_sha(FIRST))
    assert calls[1][-1] == str(fw) and not any(ln.startswith("note:") for ln in lines)
