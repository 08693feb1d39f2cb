"""`alabama ota`: update a connected satellite's firmware modules over the air, or on a frozen image with
OTA slots its whole app image (the release `make image` leaves: load_image/update_image; docs/ota.md, "Image OTA").

Responsible for: building the .mpy set (fwset.build, the same compiler as `alabama deploy`) with its
manifest (fwset.set_manifest, format 1: version, .mpy ABI, and the size and sha256 of every file; its own
sha256 is the pin), serving the set over HTTP from this host (the standard library's http.server, one
thread), telling the board through the running core's control endpoint (``firmware.update`` {url,
sha256}), and waiting until the board comes back running the new set (``device.info`` firmware_digest ==
the pin) or reports a rollback. Not responsible for: the board side (firmware/satellite/ota.py downloads and verifies,
firmware/otaboot.py swaps and rolls back), MicroPython itself (never updated here: `alabama flash`),
boot.py/main.py/otaboot (`alabama deploy`). See docs/ota.md.
"""
import asyncio
import hashlib
import http.server
import json
import pathlib
import secrets
import threading
import time

from .. import BUILD as _BUILD
from ..errors import AlabamaError, UsageError, listen_error
from .. import carried, usage
from . import fwset
from .fwset import ARCHS, FIRMWARE

BUILD = _BUILD / "ota"


class OtaError(AlabamaError):
    """The update did not happen; the message says what to do."""


class FirmwareSet:
    """A built set: files {set path: bytes}, manifest bytes, digest (sha256 hex of the manifest), version."""

    def __init__(self, files, manifest):
        self.files = files
        self.manifest = manifest
        self.digest = hashlib.sha256(manifest).hexdigest()
        self.version = json.loads(manifest)["version"]
        self.sig = None             # the release signature, as SetServer serves it (ota._sign)

    @property
    def size(self):
        return sum(len(b) for b in self.files.values())


def build_set(march, root=FIRMWARE, build_dir=None, out=print):
    """Build the set of the firmware tree `root` for `march` (fwset.build, cached per tree) with its manifest."""
    root = pathlib.Path(root)
    bdir = pathlib.Path(build_dir) if build_dir else BUILD / hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    staged = fwset.build(march, root, bdir, out)
    files = {p: f.read_bytes() for p, f in fwset.set_files(staged).items()}
    return FirmwareSet(files, fwset.set_manifest(staged, march, root))


class SetServer:
    """Serves one FirmwareSet over HTTP/1.0 under a random prefix: GET /<prefix>/manifest.json and
    /<prefix>/satellite/... . `fault(path, body) -> (content_length, body_sent)` lets a test cut or alter a
    response; `requests` lists the paths served."""

    def __init__(self, fwset, bind="0.0.0.0", port=0, fault=None):
        self.set = fwset
        self.prefix = secrets.token_hex(6)
        self.fault = fault
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                outer._serve(self)

            def log_message(self, fmt, *args):
                pass

        try:
            self.httpd = http.server.ThreadingHTTPServer((bind, port), Handler)
        except OSError as e:            # in use, not this machine's address (one line naming the flag)
            raise listen_error(e, bind, port, "--bind ADDR / --port", "N") from None
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = None

    def url(self, host):
        return "http://%s:%d/%s/manifest.json" % (host, self.port, self.prefix)

    def _serve(self, h):
        want = "/%s/" % self.prefix
        path = h.path[len(want):] if h.path.startswith(want) else None
        body = None
        if path == "manifest.json":
            body = self.set.manifest
        elif path == "manifest.json.sig":
            body = self.set.sig
        elif path is not None:
            body = self.set.files.get(path)
        self.requests.append(path)
        if body is None:
            h.send_error(404)
            return
        length, sent = (len(body), body) if self.fault is None else self.fault(path, body)
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(length))
        h.end_headers()
        h.wfile.write(sent)

    def start(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="ota-http", daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def march_of(info):
    """The -march a device needs, from device.info's mpy (sys.implementation._mpy)."""
    mpy = info.get("mpy") or 0
    major, sub, arch = fwset.decode_mpy(mpy)
    if arch == "none":
        raise OtaError("the device reports no native .mpy architecture (mpy %r): pass --march" % mpy)
    tool = fwset.mpy_cross_version()
    if (major, sub) != tuple(tool):
        raise OtaError("the device loads .mpy v%d.%d but mpy-cross emits v%d.%d: reflash it (`alabama flash`); an "
                       "OTA never updates MicroPython itself" % (major, sub, tool[0], tool[1]))
    return arch


def _control(data_dir, req, timeout):
    from ..core.server import control_call
    return asyncio.run(control_call(data_dir, req, timeout=timeout + 5))


def _device_info(data_dir, device, timeout=10.0):
    res = _control(data_dir, {"op": "invoke", "device": device, "name": "device.info", "arguments": "{}",
                              "timeout": timeout}, timeout)
    return json.loads(res["content"][0]["text"])


def _first_info(data_dir, device, timeout=10.0):
    """device.info before anything is built or served; one line for each way it fails (no core, no such device, not
    connected, no answer, not an Alabama satellite)."""
    from ..core.errors import CoreError, NotConnected
    try:
        info = _device_info(data_dir, device, timeout)
    except (asyncio.TimeoutError, TimeoutError):          # the core itself did not answer in time
        info = TimeoutError
    except NotConnected as e:
        raise OtaError(str(e)) from None                  # no running core / no live session: it says what to do
    except CoreError as e:
        if e.code == "UNKNOWN_DEVICE":
            raise OtaError("%s (--device takes its fingerprint or a unique prefix of it)" % e) from None
        if e.code not in ("TimeoutError", "TIMEOUT"):     # the device refused the tool: not our firmware
            raise OtaError("%s cannot tell its firmware (device.info: %s): `alabama ota` updates an Alabama "
                           "satellite's firmware only" % (device, e)) from None
        info = TimeoutError
    except (ValueError, KeyError, IndexError, TypeError):
        info = None
    if info is TimeoutError:
        raise OtaError("%s did not answer device.info within %.0f s: is it still running? (`alabama core devices "
                       "--health`; its log: `alabama logs`)" % (device, timeout))
    if not isinstance(info, dict):
        raise OtaError("%s answered device.info with no JSON object: `alabama ota` updates an Alabama satellite's "
                       "firmware only" % device)
    return info


def _offer(data_dir, device, url, pin, invoke_timeout):
    """firmware.update {url, sha256} through the core; the tool's result dict, or OtaError with its refusal."""
    from ..core.errors import CoreError
    try:
        res = _control(data_dir, {"op": "invoke", "device": device, "name": "firmware.update", "arguments":
                                  json.dumps({"url": url, "sha256": pin}), "timeout": invoke_timeout}, invoke_timeout)
    except CoreError as e:
        raise OtaError("the device refused the update: %s (its running firmware is unchanged)" % e)
    return json.loads(res["content"][0]["text"])


def _sign(release, sign_key, out):
    """A module set or an image release, with its manifest signed when sign_key (an Ed25519PrivateKey) is given:
    boards that pin its public key need the signature (served as manifest.json.sig)."""
    if sign_key is not None:
        from .signing import sign_manifest
        release.sig = sign_manifest(sign_key, release.manifest)
        out("ota: manifest signed with the release key (served as manifest.json.sig)")
    return release


def update(data_dir, device, root=FIRMWARE, march=None, host=None, bind="0.0.0.0", port=0, timeout=180.0,
           out=print, invoke_timeout=120.0, image_dir=None, sign_key=None, release=None, force_board=False):
    """The whole update of one device through the core running on data_dir; returns the new device.info.
    release: a release tag whose image (the project's GitHub releases, board/release.py) is sent instead of
    image_dir (a frozen image with OTA slots only). force_board: send an image built for another board anyway
    (load_image)."""
    from ..local import lan_address
    before = _first_info(data_dir, device)
    if (image_dir or release) and before.get("image") != "frozen":
        raise OtaError("%s runs its firmware from files: it takes a module set, not an image; drop %s"
                       % (device, "--release (update it from a checkout of that tag)" if release else "--image"))
    if release:
        if not before.get("slot"):
            raise OtaError("%s runs a frozen image without OTA slots: flash the release over USB once "
                           "(alabama flash --release %s --board %s --port PORT)" % (device, release,
                                                                                  before.get("board") or "BOARD"))
        from . import boards
        from . import release as rel_mod
        image_dir = rel_mod.fetch_ota(boards.load(before.get("board") or "?"), release, out=out)
    if before.get("image") == "frozen" and before.get("slot"):
        # an image with the OTA partition table: the whole app image is replaced (docs/ota.md, "Image OTA")
        rel = _sign(load_image(before, root, image_dir, march, out, force_board), sign_key, out)
        return update_image(data_dir, device, before, rel, host=host, bind=bind, port=port, timeout=timeout, out=out,
                            invoke_timeout=invoke_timeout)
    if before.get("image") == "frozen":
        # its satellite package is frozen into MicroPython (alabama image) with no OTA slot: a set in /lib
        # would be shadowed, and there is no second app slot to write an image to
        b = before.get("board") or "<board>"
        from .appimage import build_command, flash_command
        raise OtaError("%s runs a frozen image (firmware digest %s...): OTA cannot replace it; build and flash a "
                       "new one over USB: %s, then %s" % (device, (before.get("firmware_digest") or "?")[:12],
                                                          build_command(b), flash_command(b)))
    march = march or march_of(before)
    fw = build_set(march, root, out=out)
    out("ota: firmware %s for %s: %d files, %d bytes, manifest sha256 %s" % (fw.version, march, len(fw.files),
                                                                            fw.size, fw.digest))
    _sign(fw, sign_key, out)
    if before.get("firmware_digest") == fw.digest:
        out("ota: %s already runs this set; nothing to do" % device)
        return before
    with SetServer(fw, bind=bind, port=port) as srv:
        url = srv.url(host or lan_address())
        out("ota: serving it at %s; telling the device" % url)
        staged = _offer(data_dir, device, url, fw.digest, invoke_timeout)
        out("ota: the device staged %s (%d files, every sha256 verified); it reboots into it" % (
            staged["staged"], staged["files"]))
        return wait_running(data_dir, device, fw.digest, before.get("boots"), timeout, out)


class ImageRelease:
    """What an image OTA serves (SetServer's shape): files {"firmware.bin": bytes}, the ota-image.json bytes
    (manifest; its sha256 is the pin), version, and the firmware digest the image froze."""

    def __init__(self, firmware, manifest):
        self.manifest = manifest
        self.sig = None             # the release signature, as SetServer serves it (ota._sign)
        self.digest = hashlib.sha256(manifest).hexdigest()
        m = json.loads(manifest)
        self.version, self.firmware_digest, self.size = m["version"], m["firmware_digest"], m["size"]
        self.files = {m["file"]: firmware}


def load_image(info, root=FIRMWARE, image_dir=None, march=None, out=print, force_board=False):
    """The image release for the device: for the virtual board a sim app image built from `root`; else
    build/image/<board>/ (or image_dir) as `make image` left it, checked against its firmware.bin.sha256. Its
    manifest must name the device's board (the board refuses another's too: WRONG_BOARD); with force_board the
    manifest is re-stamped with the device's board, so the board takes it (its pin and signature are of that
    manifest)."""
    from . import appimage as image
    board = info.get("board") or "<board>"
    if board == "sim" and image_dir is None:
        d = image.sim_image(root, march or march_of(info), out=BUILD / "image-sim")
        d = d.parent
    else:
        d = pathlib.Path(image_dir) if image_dir else image.OUT / board
    fw, man = read_image(d, board)
    man = _board_checked(man, d / image.OTA_MANIFEST, board, force_board, out)
    rel = ImageRelease(fw, man)
    out("ota: image %s (%d bytes of app, manifest sha256 %s) from %s" % (rel.version, rel.size, rel.digest, d))
    return rel


def read_image(d, board="<board>"):
    """(firmware.bin bytes, manifest bytes) of the image release in directory d, its sha256 checked; one line when
    a file is missing or damaged."""
    from . import appimage as image
    names = ("firmware.bin", "firmware.bin.sha256", image.OTA_MANIFEST)
    try:
        fw, pin, man = ((d / n).read_bytes() for n in names)
    except OSError:
        raise OtaError("no image release in %s (%s): %s, pass --release TAG for a published release, or --image DIR "
                       "holding its three files under these names" % (
                           d, ", ".join(n if (d / n).is_file() else "no " + n for n in names), _build_hint(board))) \
            from None
    pin = pin.decode("ascii", "replace").split()[:1]
    if not pin or hashlib.sha256(fw).hexdigest() != pin[0]:
        raise OtaError("%s/firmware.bin does not match its firmware.bin.sha256: download or build it again" % d)
    return fw, man


def _build_hint(board):
    """What makes an image release for BOARD (the virtual board's is built from --firmware by itself)."""
    if board == "sim":
        return "drop --image: the virtual board's image is built from --firmware"
    from .appimage import build_command
    return "build one with %s" % build_command(board)


def _manifest(man, path, board="<board>"):
    """The image manifest's dict, with every field ImageRelease reads; else one line naming what it lacks."""
    try:
        m = json.loads(man)
        missing = [k for k in ("version", "firmware_digest", "size", "file") if k not in m]
    except (ValueError, TypeError):
        m, missing = None, []
    if not isinstance(m, dict):
        missing = ["JSON object"]
    if missing:
        raise OtaError("%s is not an image manifest (no %s): %s" % (path, ", ".join(missing), _build_hint(board)))
    return m


def _board_checked(man, path, board, force, out):
    """The manifest bytes when they name `board`; re-stamped for it under force; else one line saying whose it is."""
    m = _manifest(man, path, board)
    built_for = m.get("board")
    if built_for == board:
        return man
    if not force:
        raise OtaError("%s is %s, and this device is a %s board: %s, or pass --force-board to send this one anyway" % (
            path, "an image for board %s" % built_for if built_for else "an image manifest naming no board", board,
            _build_hint(board)))
    out("ota: --force-board: sending an image built for %s to a %s board (its manifest re-stamped for %s)"
        % (built_for, board, board))
    m["board"] = board
    return (json.dumps(m, separators=(",", ":"), sort_keys=True) + "\n").encode()


def update_image(data_dir, device, before, rel, host=None, bind="0.0.0.0", port=0, timeout=180.0, out=print,
                 invoke_timeout=120.0):
    """Serve the image release, tell the device, wait until it runs the image's firmware from its other slot."""
    from ..local import lan_address
    if before.get("firmware_digest") == rel.firmware_digest:
        out("ota: %s already runs this image; nothing to do" % device)
        return before
    with SetServer(rel, bind=bind, port=port) as srv:
        url = srv.url(host or lan_address())
        out("ota: serving it at %s; telling the device (running %s)" % (url, before.get("slot")))
        staged = _offer(data_dir, device, url, rel.digest, invoke_timeout)
        out("ota: the device wrote image %s to %s (sha256 verified from flash); it reboots into it" % (
            staged["staged"], staged["slot"]))
    return wait_running(data_dir, device, rel.firmware_digest, before.get("boots"), timeout, out)


def wait_running(data_dir, device, digest, old_boots, timeout, out=print):
    """Poll device.info until the device runs `digest` and has confirmed it (a firmware on trial is confirmed only
    once a session proved it, docs/ota.md "The trial"), or reports a rollback / refusal after a reboot."""
    from ..core.errors import CoreError
    deadline = time.monotonic() + timeout
    last = None
    on_trial = False
    while time.monotonic() < deadline:
        try:
            info = _device_info(data_dir, device, 5.0)
        except CoreError as e:
            last = str(e)
            time.sleep(0.5)
            continue
        ota = info.get("ota") or {}
        if info.get("firmware_digest") == digest:
            if ota.get("state") in ("trial", "image_trial"):
                if not on_trial:
                    out("ota: %s runs firmware %s on trial; waiting until its session proves it" % (
                        device, info.get("firmware")))
                on_trial = True
                last = "firmware %s still on trial" % info.get("firmware")
                time.sleep(0.5)
                continue
            out("ota: %s runs firmware %s (digest %s), confirmed by its session" % (device, info.get("firmware"), digest))
            return info
        if info.get("boots") != old_boots and ota.get("state") in ("rolled_back", "refused"):
            raise OtaError("the device %s the update: %s; it runs firmware %s again" % (
                "rolled back" if ota["state"] == "rolled_back" else "refused", ota.get("error"), info.get("firmware")))
        time.sleep(0.5)
    raise OtaError("the device did not come back with the new firmware within %.0f s (last: %s): check its log "
                   "(`alabama logs`)" % (timeout, last or "old firmware still running"))


# --- command line -----------------------------------------------------------------------------------

def register(sub):
    p = sub.add_parser("ota", help="update a connected device's firmware over the air (its module set, or a "
                                   "frozen image whole)",
                       description="Build the firmware's .mpy set, serve it over HTTP from this host with a "
                                   "sha256-pinned manifest, tell the device (tool firmware.update) through the "
                                   "running core, and wait until it runs the new set. The device verifies every "
                                   "file, swaps at the next boot and rolls back by itself if the new set does not "
                                   "prove itself in a session within its trial (docs/ota.md); the command returns "
                                   "once it is confirmed. On a frozen image with OTA slots (device.info: image frozen, "
                                   "slot ota_N) the whole app image of build/image/<board>/ (--image) is sent "
                                   "instead and the bootloader rolls it back if it is not confirmed.")
    p.add_argument("--device", required=True, metavar="ID", help="device fingerprint (or a unique prefix)")
    from ..core import datadir
    p.add_argument("--data", metavar="DIR", help=datadir.data_help("the running core's state directory"))
    p.add_argument("--firmware", metavar="DIR", default=str(FIRMWARE),
                   help="firmware tree (default: %s)" % carried("firmware"))
    p.add_argument("--march", metavar="ARCH", help="mpy-cross -march (default: what the device reports)")
    p.add_argument("--host", metavar="ADDR", help="address the device fetches from (default: this machine's LAN address)")
    p.add_argument("--bind", metavar="ADDR", default="0.0.0.0", help="address the HTTP server listens on "
                   "(default %(default)s: every interface, as the board fetches over the LAN)")
    p.add_argument("--port", type=usage.tcp_port(zero_ok=True), default=0, help="HTTP port (default: a free one)")
    p.add_argument("--timeout", type=usage.positive(), default=180.0, help="seconds to wait for the device to come back")
    p.add_argument("--image", metavar="DIR", help="on a frozen image with OTA slots: the image release to send "
                   "(firmware.bin, firmware.bin.sha256, ota-image.json; default build/image/<board>)")
    p.add_argument("--release", metavar="TAG", help="on a frozen image with OTA slots: send the board's image of "
                   "this release of the project (downloaded and checked as `alabama flash --release` does; no "
                   "ESP-IDF needed) instead of --image")
    p.add_argument("--sign-key", metavar="FILE", help="sign the manifest with this release key (alabama release-key): "
                   "a board that pins its public key refuses an unsigned update")
    p.add_argument("--force-board", action="store_true", help="image OTA: send an image whose manifest names "
                   "another board (re-stamped for this one; the board refuses it otherwise)")
    p.set_defaults(func=cmd_ota)


def cmd_ota(args):
    from ..core import datadir
    if args.march and args.march not in ARCHS:
        raise UsageError("--march is one of %s" % ", ".join(ARCHS[1:]))
    if args.release and args.image:
        raise UsageError("give --release TAG or --image DIR, not both")
    if args.force_board and not (args.image or args.release):
        raise UsageError("--force-board goes with --image DIR or --release TAG (an image built for another board)")
    _check_paths(args)                          # the options first: a wrong one is said whatever the state
    key = None
    if args.sign_key:
        from .signing import load_private
        key = load_private(args.sign_key)     # before building: a bad key file is one line, not a half-done update
    args.data = datadir.resolve(args.data)
    update(args.data, args.device, root=args.firmware, march=args.march, host=args.host, bind=args.bind,
           port=args.port, timeout=args.timeout, image_dir=args.image, sign_key=key,
           release=args.release, force_board=args.force_board)
    return 0


def _check_paths(args):
    """What the options name, before the core or the device is asked: --device is a fingerprint (not a serial
    port), --firmware a firmware tree, --bind/--port free to listen on, --image an image release whose files are
    whole."""
    import os
    if os.sep in args.device or "/" in args.device or args.device.upper().startswith("COM"):
        raise UsageError("--device %s: give the device's fingerprint (`alabama core devices` lists them), not a "
                         "port: an OTA goes over the network through the running core (over USB: `alabama deploy "
                         "--port %s`)" % (args.device, args.device))
    if not (pathlib.Path(args.firmware) / "satellite").is_dir():
        raise UsageError("--firmware %s holds no satellite/ package: give a copy of the repository's firmware/ "
                         "(default: the one alabama ships)" % args.firmware)
    import socket
    with socket.socket() as s:      # the HTTP server's address, tried as it binds: said before the build, not after
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((args.bind, args.port))
        except OSError as e:
            raise listen_error(e, args.bind, args.port, "--bind ADDR / --port", "N") from None
    if args.image:
        if not pathlib.Path(args.image).is_dir():
            from .appimage import build_command, image_dir
            raise UsageError("--image %s is not a directory: give the one %s left (%s, with firmware.bin, "
                             "firmware.bin.sha256 and ota-image.json)" % (args.image, build_command("<board>"),
                                                                          image_dir("<board>")))
        from .appimage import OTA_MANIFEST
        d = pathlib.Path(args.image)
        _manifest(read_image(d)[1], d / OTA_MANIFEST)        # whole and a manifest; whose board: once it answers
