"""`alabama flash`: put the pinned official MicroPython image (or a release / built image) on a board with
esptool, then deploy.

Responsible for: finding the serial port, resolving and checking the image (cache, download, sha256),
running esptool (erase, then write at FLASH_OFFSET) and turning its failures into one line each.
Not responsible for: copying the firmware package (alabama.board.deploy), knowing board pins, or finding a
project release's image (alabama.board.release: `--release TAG` hands its checked file over as --firmware).
"""
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

from ..errors import AlabamaError, UsageError
from . import images
from .mpremote import detect_port

ESP_IMAGE_MAGIC = 0xE9      # first byte of every ESP application/bootloader image
BAUD = 460800               # the rate MicroPython's esp32 deploy instructions use
_TAIL_CHARS = 8000          # esptool output kept to classify a failure


class FlashError(AlabamaError):
    """Flashing cannot go on; the message says what to do."""


def cache_dir():
    """~/.cache/alabama/images (ALABAMA_IMAGE_CACHE overrides, XDG_CACHE_HOME respected)."""
    env = os.environ.get("ALABAMA_IMAGE_CACHE")
    if env:
        return pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "alabama" / "images"


# --- image -----------------------------------------------------------------------------------------

def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


def check_image(path, pinned=None):
    """Refuse a file that is not an ESP image, or whose sha256 differs from the pin."""
    path = pathlib.Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(1)
    except FileNotFoundError:
        raise FlashError("firmware %s does not exist: check the path given to --firmware" % path) from None
    except OSError as e:
        raise FlashError("cannot read firmware %s (%s)" % (path, e.strerror or e)) from None
    if not head or head[0] != ESP_IMAGE_MAGIC:
        raise FlashError("%s is not an ESP32 firmware image (first byte is not 0xE9): pass the .bin from "
                         "micropython.org/download/ESP32_GENERIC_S3/" % path)
    if pinned is not None and pinned.sha256 is not None:
        got = sha256_of(path)
        if got != pinned.sha256:
            raise FlashError("refusing %s: sha256 %s does not match the pinned %s (corrupt or substituted "
                             "download): delete it and run again" % (path, got[:16] + "...", pinned.sha256[:16] + "..."))


def _download(url, dest, opener=None):
    opener = opener or urllib.request.urlopen
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        with opener(url) as r, open(part, "wb") as f:
            shutil.copyfileobj(r, f)
    except (urllib.error.URLError, OSError) as e:
        part.unlink(missing_ok=True)
        reason = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
        raise FlashError("could not download %s (%s): fetch it by hand into %s, or pass --firmware PATH"
                         % (url, reason, dest.parent)) from None
    part.replace(dest)


def resolve_image(board, firmware=None, cache=None, opener=None, out=print, download=True):
    """The image file to flash for `board`: --firmware, else the cached pinned image, else a download.

    With download=False (dry run) a missing image is not fetched: its cache path is returned unchecked.
    """
    if firmware:
        path = pathlib.Path(firmware).expanduser()
        pinned = images.by_file_name(path.name)
        check_image(path, pinned)
        if pinned is None:
            out("note: %s is not a pinned image (%s): flashing it as given" % (path.name, ", ".join(images.VARIANTS)))
        return path
    if not board.image:
        raise FlashError("board %s is the virtual board: it runs on the unix port, there is nothing to flash "
                         "(run the virtual board instead)" % board.id)
    img = images.image_for(board.image)
    path = pathlib.Path(cache or cache_dir()) / img.file
    if img.sha256 is None:
        raise FlashError("no sha256 pinned for %s (%s): download it from %s, record its sha256 in "
                         "host/alabama/board/images.py, or pass --firmware PATH" % (img.file, img.variant, img.url))
    if not path.exists():
        if not download:
            out("would download %s (sha256 %s)" % (img.url, img.sha256))
            return path
        out("downloading %s" % img.url)
        _download(img.url, path, opener)
    check_image(path, img)
    return path


# --- esptool -------------------------------------------------------------------------------------

def esptool_steps(port, image):
    """The esptool argument lists, in order: erase the whole flash, then write the image at 0x0."""
    chip = ["--chip", "esp32s3", "--port", str(port)]
    return [
        chip + ["erase_flash"],
        chip + ["--baud", str(BAUD), "write_flash", "-z", "0x%x" % images.FLASH_OFFSET, str(image)],
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
          cache=None, opener=None, out=print, allow_mpy=False, release=None, release_cache=None):
    """Flash `board` (a boards.Board). `runner(args) -> (rc, output)` replaces esptool in tests.

    release=TAG: the image the project's release TAG carries for this board (release.fetch: downloaded into
    build/releases/ or release_cache, sha256 checked), then written exactly as a --firmware file.
    The official image with a deploy after it is refused up front, before anything is erased, where the board
    file's heap cannot hold the firmware as .mpy files (deploy.mpy_set_fits): that board needs the image
    with the firmware frozen (`alabama image`, then --firmware); allow_mpy overrides, as for deploy."""
    if board.is_virtual:
        raise UsageError("board %s is the virtual board: nothing to flash (it runs on the unix port)" % board.id)
    if release and firmware:
        raise UsageError("give --release TAG or --firmware PATH, not both")
    if release:
        from . import release as releases
        firmware = releases.fetch(board, release, cache=release_cache, opener=opener, out=out, download=not dry_run)
        image = firmware
        if not dry_run:
            check_image(image)
    else:
        image = resolve_image(board, firmware, cache=cache, opener=opener, out=out, download=not dry_run)
    if port is None:
        port = detect_port(list_ports)
    elif not dry_run and not str(port).upper().startswith("COM") and not os.path.exists(port):
        raise FlashError("serial port %s does not exist: plug the board in, or pass the right --port" % port)
    mod = _deploy_module() if deploy else None
    if mod is not None and not firmware and not allow_mpy and not mod.mpy_set_fits(board):
        raise FlashError(mod.refuse_mpy(board))          # before esptool erases anything
    steps = esptool_steps(port, image)
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
