"""`alabama flash`: put the pinned official MicroPython image (or a release / built image) on a board with
esptool, then deploy.

Responsible for: the order of the checks (port, heap, then any download), resolving and checking the image
(cache, download over https or from a mirror, its sha256 against --image-sha256, the repository's pin or the
first-use record in imagelock), running esptool in its version's command names (erase, then write at
FLASH_OFFSET) and turning its failures into one line each.
Not responsible for: copying the firmware package (alabama.board.deploy), knowing board pins, or finding a
project release's image (alabama.board.release: `--release TAG` hands its checked file over as --firmware).
"""
import functools
import hashlib
import os
import pathlib
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

from ..errors import AlabamaError, UsageError
from . import imagelock, images
from .mpremote import check_free, check_port, detect_port

ESP_IMAGE_MAGIC = 0xE9      # first byte of every ESP application/bootloader image
BAUD = 460800               # the rate MicroPython's esp32 deploy instructions use
_TAIL_CHARS = 8000          # esptool output kept to classify a failure


class FlashError(AlabamaError):
    """Flashing cannot go on; the message says what to do."""


#: The environment variable naming a mirror of the official images (what --image-url gives on the command line).
IMAGE_URL_ENV = "ALABAMA_IMAGE_URL"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_BLOCK = 1 << 16


def cache_dir():
    """Where downloaded images live: the platform's user cache dir (imagelock.cache_dir)."""
    return imagelock.cache_dir()


# --- image -----------------------------------------------------------------------------------------

def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            h.update(block)
    return h.hexdigest()


def check_sha256(text):
    """A --image-sha256 value: 64 hex digits (any case) -> lower case; UsageError otherwise."""
    hexd = (text or "").strip().lower()
    if not _HEX64.match(hexd):
        raise UsageError("--image-sha256 %r is not a sha256: give the 64 hex digits `sha256sum` prints" % text)
    return hexd


#: What to do about a --firmware file that is no ESP image.
NOT_AN_IMAGE_FIX = "pass the .bin from micropython.org/download/ESP32_GENERIC_S3/"


def check_image(path, pinned=None, sha256=None, source="the pinned", fix=NOT_AN_IMAGE_FIX):
    """Refuse a file that is not an ESP image (FIX says what to do), or whose sha256 differs from the pin (an
    images.Image, or the hex `sha256` with `source` saying where it came from)."""
    path = pathlib.Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(1)
    except FileNotFoundError:
        raise FlashError("firmware %s does not exist: check the path given to --firmware" % path) from None
    except IsADirectoryError:
        raise FlashError("firmware %s is a directory, not an image: give --firmware the .bin file" % path) from None
    except OSError as e:
        raise FlashError("cannot read firmware %s (%s): give --firmware a .bin file you can read"
                         % (path, e.strerror or e)) from None
    if not head or head[0] != ESP_IMAGE_MAGIC:
        raise FlashError("%s is not an ESP32 firmware image (first byte is not 0xE9): %s" % (path, fix))
    want = sha256 or (pinned.sha256 if pinned is not None else None)
    if want is not None:
        got = sha256_of(path)
        if got != want:
            raise FlashError("refusing %s: sha256 %s does not match %s %s (corrupt or substituted "
                             "download): delete it and run again" % (path, got[:16] + "...", source,
                                                                    want[:16] + "..."))


def image_url(img, mirror=None, env=None):
    """Where to download `img` from: the mirror (--image-url, else $ALABAMA_IMAGE_URL) or micropython.org.
    A mirror is a directory URL serving the official file names, or the URL of the .bin itself."""
    env = os.environ if env is None else env
    mirror = mirror or env.get(IMAGE_URL_ENV)
    if not mirror:
        return img.url
    if urllib.parse.urlsplit(mirror).path.endswith(".bin"):
        return mirror
    return mirror.rstrip("/") + "/" + img.file


def _check_url(url, trusted):
    """https always; plain http only from this machine (a test's or bench's server) or when the digest is known
    beforehand (a pin, --image-sha256 or the lock), since then a changed file is refused anyway."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and (trusted or parts.hostname in _LOOPBACK):
        return
    if parts.scheme == "http":
        raise FlashError("refusing %s: an image without a known sha256 is downloaded over https only: serve the "
                         "mirror over https, or pass --image-sha256 HEX" % url)
    raise FlashError("refusing %s: --image-url / %s must be an http(s) URL" % (url, IMAGE_URL_ENV))


def _download(url, dest, opener=None, limit=16 << 20):
    """Stream `url` into dest through dest.part, hashing as it goes; returns (sha256, size). The part file is
    left for the caller to keep (rename) or drop."""
    if opener is None:
        opener = functools.partial(urllib.request.urlopen, timeout=60)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    h, n = hashlib.sha256(), 0
    fallback = "fetch it by hand into %s, name a mirror (--image-url), or pass --firmware PATH" % dest.parent
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "alabama-flash"})
        with opener(req) as r, open(part, "wb") as f:
            for block in iter(lambda: r.read(_BLOCK), b""):
                n += len(block)
                if n > limit:
                    raise FlashError("%s is larger than the board's flash (%d bytes): refusing it; %s"
                                     % (url, limit, fallback))
                h.update(block)
                f.write(block)
    except urllib.error.HTTPError as e:
        part.unlink(missing_ok=True)
        raise FlashError("could not download %s (HTTP %d): %s" % (url, e.code, fallback)) from None
    except (urllib.error.URLError, OSError) as e:
        part.unlink(missing_ok=True)
        reason = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
        raise FlashError("could not download %s (%s): %s" % (url, reason, fallback)) from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return h.hexdigest(), n


def _want(img, image_sha256, cache):
    """(sha256 expected, where it came from, the lock entry) for `img`: --image-sha256, the repository's pin,
    the lock's first-use record, or (None, ...) on first use."""
    if image_sha256:
        return image_sha256, "--image-sha256", None
    if img.sha256:
        return img.sha256, "the pinned", None
    recorded = imagelock.entry(img.file, cache)
    if recorded:
        return recorded["sha256"], "the sha256 recorded on first use", recorded
    return None, None, None


def resolve_image(board, firmware=None, cache=None, opener=None, out=print, download=True, image_sha256=None,
                  mirror=None, env=None):
    """The image file to flash for `board`: --firmware, else the cached official image, else a download.

    The download is checked against, in order: --image-sha256, the repository's pin (images.py), the digest
    recorded on first use in the lock (imagelock); with none of them (first use) its sha256 and size are printed
    and recorded. With download=False (dry run) a missing image is not fetched: its cache path is returned.
    """
    if image_sha256:
        image_sha256 = check_sha256(image_sha256)
    if firmware:
        path = pathlib.Path(firmware).expanduser()
        pinned = images.by_file_name(path.name)
        if image_sha256:
            check_image(path, sha256=image_sha256, source="--image-sha256")
        else:
            check_image(path, pinned)
        if pinned is None and not image_sha256:
            out("note: %s is not a pinned image (%s): flashing it as given" % (path.name, ", ".join(images.VARIANTS)))
        return path
    if not board.image:
        raise FlashError("board %s is the virtual board: it runs on the unix port, there is nothing to flash "
                         "(run the virtual board instead)" % board.id)
    img = images.image_for(board.image)
    cache = pathlib.Path(cache or cache_dir())
    path = cache / img.file
    want, source, recorded = _want(img, image_sha256, cache)
    if path.exists():               # our own download, damaged since (a cut copy, a disk error, a hand edit)
        check_image(path, sha256=want, source=source or "",
                    fix="it is the cached download: delete it and run again (the image is downloaded anew)")
        if want is None or (image_sha256 and not img.sha256 and (recorded or {}).get("sha256") != want):
            _record(img, path, sha256_of(path), path.stat().st_size, str(path), cache, out)
        return path
    url = image_url(img, mirror, env)
    if not download:
        out("would download %s (%s)" % (url, "sha256 %s" % want if want else "first use: its sha256 is recorded"))
        return path
    _check_url(url, trusted=want is not None)
    out("downloading %s" % url)
    got, size = _download(url, path, opener, limit=int(board.data.get("flash_mb") or 16) << 20)
    part = path.with_name(path.name + ".part")
    if want is not None and got != want:
        part.unlink(missing_ok=True)
        if recorded is not None:
            raise imagelock.differs(img.file, got, recorded, cache)
        raise FlashError("refusing %s from %s: its sha256 is %s, not %s %s: a corrupt or substituted download, "
                         "nothing was flashed; check the URL%s" % (img.file, url, got, source, want,
                                                                 "" if image_sha256 else " or run again"))
    part.replace(path)
    out("downloaded %s: sha256 %s, %d bytes" % (img.file, got, size))
    if want is None or (image_sha256 and not img.sha256):
        _record(img, path, got, size, url, cache, out)
    check_image(path)
    return path


def _record(img, path, sha256, size, url, cache, out):
    lock = imagelock.record(img.file, sha256, size, url, cache)
    out("first use of %s: recorded sha256 %s (%d bytes) in %s; a later download that differs is refused "
        "(compare it with micropython.org/download/ESP32_GENERIC_S3/)" % (img.file, sha256, size, lock))


# --- esptool -------------------------------------------------------------------------------------

#: esptool 5 renamed its commands (erase_flash -> erase-flash, ...; the old names still run there with a deprecation
#: warning); esptool 4 knows only the old ones. The spelling follows the esptool that runs (esptool_major).
COMMANDS = {5: ("erase-flash", "write-flash"), 4: ("erase_flash", "write_flash")}


def esptool_major(run=None):
    """The major version of the esptool `python -m esptool` runs here (`esptool version`: "esptool v5.6.0" on 5,
    "esptool.py v4.8.1" on 4); FlashError when it is missing or says something else."""
    run = run or (lambda argv: subprocess.run(argv, capture_output=True, text=True, timeout=60))
    try:
        proc = run([sys.executable, "-m", "esptool", "version"])
        text = (proc.stdout or "") + (proc.stderr or "")
    except (OSError, subprocess.SubprocessError) as e:
        raise FlashError("cannot run esptool (%s): reinstall the tool (pip install alabama-satellite)" % e) from None
    m = re.search(r"esptool(?:\.py)? v(\d+)\.", text)
    if not m:
        raise FlashError("`python -m esptool version` did not name an esptool version: install esptool 4.7 or "
                         "newer (pip install 'esptool>=4.7')")
    return int(m.group(1))


def esptool_steps(port, image, major=5):
    """The esptool argument lists, in order: erase the whole flash, then write the image at 0x0, in the command
    names of esptool `major` (4 or older: the underscore names)."""
    erase, write = COMMANDS[5 if major >= 5 else 4]
    chip = ["--chip", "esp32s3", "--port", str(port)]
    return [
        chip + [erase],
        chip + ["--baud", str(BAUD), write, "-z", "0x%x" % images.FLASH_OFFSET, str(image)],
    ]


def run_esptool(args, out=None):
    """Run `python -m esptool ARGS`, passing its progress through; returns (exit code, output tail)."""
    out = out or sys.stdout
    proc = subprocess.Popen([sys.executable, "-m", "esptool"] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    tail = b""
    while True:
        chunk = proc.stdout.read1(4096) if hasattr(proc.stdout, "read1") else proc.stdout.read(4096)
        if not chunk:
            break
        out.write(chunk.decode(errors="replace"))
        out.flush()
        tail = (tail + chunk)[-_TAIL_CHARS:]
    return proc.wait(), tail.decode(errors="replace")


def explain_failure(port, rc, output):
    """One line for a failed esptool run, from its output."""
    low = output.lower()
    if "wrong chip argument" in low or ("this chip is" in low and "not esp32-s3" in low):
        detected = ""
        for line in output.splitlines():
            if "This chip is" in line:
                said = line.split("A fatal error occurred:")[-1].split("Wrong chip argument?")[0]
                detected = " (" + said.strip().rstrip(".") + ")"
                break
        return ("the device on %s is not an ESP32-S3%s: check --port, or pick the --board that matches "
                "the hardware" % (port, detected))
    if "errno 2]" in low or "no such file or directory" in low or "filenotfounderror" in low:
        return "serial port %s does not exist: plug the board in, or pass the right --port" % port
    if "errno 13]" in low or "permission denied" in low or "access is denied" in low:
        return ("no permission to open %s: add yourself to the dialout (Linux: `sudo usermod -aG dialout $USER`, "
                "then log in again) or uucp group" % port)
    if "errno 16]" in low or "resource busy" in low or "exclusively lock" in low or "port is busy" in low:
        return ("serial port %s is busy: close the program holding it (mpremote, screen, a serial monitor) "
                "and run again" % port)
    if "failed to connect" in low or "no serial data received" in low:
        return ("could not reach the bootloader on %s: hold BOOT, tap RESET, release BOOT, then run "
                "again" % port)
    last = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return "esptool failed on %s (exit %d): %s" % (port, rc, last[-1] if last else "no output")


def _deploy_module():
    from . import deploy         # lazily: deploy is what flash hands over to, never the other way
    return deploy


def flash(board, port=None, firmware=None, deploy=True, dry_run=False, runner=None, list_ports=None,
          cache=None, opener=None, out=print, allow_mpy=False, release=None, release_cache=None, image_sha256=None,
          mirror=None, env=None, major=None):
    """Flash `board` (a boards.Board). `runner(args) -> (rc, output)` replaces esptool in tests; `major` its
    version (default: asked of the esptool that runs, esptool_major).

    Everything that can be checked without the network comes first: the board file, the port, and — for the
    official image with a deploy after it — that the board file's heap holds the firmware as .mpy files
    (deploy.mpy_set_fits; that board needs the image with the firmware frozen: `alabama image`, then --firmware,
    or --release; allow_mpy overrides, as for deploy). Only then is an image downloaded (resolve_image: pinned,
    --image-sha256, or trusted on first use) or a release fetched.
    release=TAG: the image the project's release TAG carries for this board (release.fetch: downloaded into
    the release cache, sha256 checked), then written exactly as a --firmware file."""
    if board.is_virtual:
        raise UsageError("board %s is the virtual board: nothing to flash (it runs on the unix port)" % board.id)
    if release and firmware:
        raise UsageError("give --release TAG or --firmware PATH, not both")
    if release and (image_sha256 or mirror):
        raise UsageError("--image-sha256 and --image-url are for the official MicroPython image: a --release image "
                         "is checked against the release's own sha256")
    if image_sha256:
        image_sha256 = check_sha256(image_sha256)
    if release:
        from .release import check_tag
        check_tag(release)               # a mistyped tag is a usage mistake: said before the port is opened
    if firmware:                         # a file the user gave, and a mirror they typed: the command line's, said
        try:                             # before the port is opened or anything downloaded
            check_image(pathlib.Path(firmware).expanduser())
        except FlashError as e:
            raise UsageError(str(e)) from None
    if mirror and urllib.parse.urlsplit(mirror).scheme not in ("http", "https"):
        raise UsageError("%s is not an http(s) URL: give --image-url the mirror's address, e.g. "
                         "https://mirror.example/micropython/ (or the .bin's own URL)" % mirror)
    given = port is not None
    if port is None:
        port = detect_port(list_ports)
    if not dry_run and not str(port).upper().startswith("COM"):
        if given and not os.path.exists(port):
            raise FlashError("serial port %s does not exist: plug the board in, or pass the right --port" % port)
        check_port(port)                 # a directory, a file, /dev/ptmx: said before a download, as deploy says it
        # opened once, exclusively, and closed: /dev/null (no terminal) and a port another program holds (a REPL,
        # `alabama logs`) are said here, in one line, before an image is downloaded or esptool erases anything
        check_free(port)
    mod = _deploy_module() if deploy else None
    if mod is not None and not firmware and not release and not allow_mpy and not mod.mpy_set_fits(board):
        raise FlashError(mod.refuse_mpy(board))          # before any download, before esptool erases anything
    if release:
        from . import release as releases
        image = releases.fetch(board, release, cache=release_cache, opener=opener, out=out, download=not dry_run)
        firmware = image
        if not dry_run:
            check_image(image)
    else:
        image = resolve_image(board, firmware, cache=cache, opener=opener, out=out, download=not dry_run,
                              image_sha256=image_sha256, mirror=mirror, env=env)
    steps = esptool_steps(port, image, esptool_major() if major is None else major)
    if dry_run:
        for args in steps:
            out("esptool " + " ".join(args))
        if deploy:
            out("then: deploy the firmware to %s" % port)
        return steps
    runner = runner or run_esptool
    for args in steps:
        out("esptool " + " ".join(args))
        rc, output = runner(args)
        if rc != 0:
            raise FlashError(explain_failure(port, rc, output))
    out("MicroPython %s (%s) written to %s" % (images.MICROPYTHON_VERSION, pathlib.Path(image).name, port))
    if not deploy:
        return steps
    if mod is None or not hasattr(mod, "deploy"):
        out("next: alabama deploy --board %s --port %s   (copies the firmware package)" % (board.id, port))
    else:
        mod.deploy(board, port, wait=15, allow_mpy=allow_mpy)  # native USB re-enumerates after esptool's reset
    return steps
