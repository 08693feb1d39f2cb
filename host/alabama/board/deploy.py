"""`alabama deploy`: compile the firmware with mpy-cross, copy only what changed to a board with mpremote.

Responsible for: staging the built set (fwset.build: one .mpy per firmware module, main.py/boot.py kept as
source) with the board file written as /board.json and the manifests, the content-hash plan against what the
board reports (mpremote.probe), the copy, and the final soft reset. It owns exactly these
paths on the board: ``main.py``, ``boot.py``, ``board.json``, ``lib/otaboot.mpy``, everything under
``lib/satellite/`` (its ``_manifest.json`` included, as an OTA installs it) and the manifest
``lib/.alabama-manifest.json``; the board file's wake models go to ``wake/<name>.aww`` (wake_files: compiled at
deploy time, in both the .mpy and the frozen case; outside lib/satellite, which a module-set OTA swaps whole). It
never reads, writes or deletes anything else (``/data``
keys, pins and the provisioning record survive every deploy).
On an image with the firmware frozen in (`alabama image`, docs/image.md: the probe finds ``satellite`` on
``.frozen``) it installs only what is not frozen: ``main.py``, ``boot.py``, ``board.json`` and its manifest,
and removes the owned ``lib/`` files the frozen ones shadow. It refuses the .mpy set on a board file whose heap
cannot hold it (MPY_SET_AT_REST), saying to build and flash the frozen image instead.
Not responsible for: the firmware set, its build, manifests and version (fwset.py), the mpremote plumbing and
the code run on the board (mpremote.py, onboard/), flashing MicroPython (flash.py), board pins (boards.py), the
REPL (repl.py).
"""
import json
import os
import pathlib
import re
import struct
import time

from ..errors import AlabamaError, UsageError
from . import fwset, mpremote
from .fwset import ARCHS, BOARD_FILE, FIRMWARE, OWNED_DIR, SOURCE_KEPT, build, shown
from .mpremote import MpremoteError, MpremoteTimeout, probe, resolve_port, run_mpremote, soft_reset
from .appimage import build_command, flash_command

MANIFEST = fwset.DEPLOY_MANIFEST
#: Where the firmware looks for its wake models (firmware/satellite/wake/__init__.py MODEL_DIR, SUFFIX; fwset.WAKE_DIR:
#: owned by deploy, so a model dropped from wake.models is removed by the next deploy, and outside lib/satellite,
#: which a module-set OTA swaps whole).
WAKE_DIR = fwset.WAKE_DIR
WAKE_SUFFIX = ".aww"
#: Board-file keys that only document the board (citations); left out of /board.json to save flash and RAM.
DOC_ONLY_KEYS = ("sources", "notes")
#: The .mpy architecture each chip needs (mpy-cross -march); None: take the one the board reports.
MARCH_FOR_CHIP = {"esp32s3": "xtensawin", "unix": None}
#: GC heap the firmware takes at rest when loaded from .mpy files, on 32 bits (4-byte words like the S3):
#: 181,376 B for the devkit at 876a638 (docs/memory.md, "Does it fit?"; tests/host/test_memory_fit.py
#: fails when the firmware's real figure moves more than 10 % from this), and the share of the heap that
#: test wants left free at rest. A board file whose heap cannot hold both gets the frozen image instead
#: (frozen: 72,880 B at rest).
MPY_SET_AT_REST = 181376
FREE_AT_REST = 0.125
#: The same for the frozen image (docs/memory.md).
FROZEN_AT_REST = 72880
#: What a loaded wake engine takes beyond its model file and arena on a 32-bit board: the frontend's buffers and
#: RAM copies of its tables and the parsed op list; measured on build/mp32 (okay_nabu 83,936 B loaded = 54,254
#: file + 7,721 arena + 21,961; hey_jarvis 62,688 B), rounded up.
WAKE_ENGINE_RAM = 22528


class DeployError(AlabamaError):
    """The deploy cannot go on; the message is one line saying what to do."""


# --- what goes on the board -------------------------------------------------------------------------

def board_json_bytes(board):
    """/board.json: the validated board file without its documentation-only keys, compact."""
    data = {k: v for k, v in board.data.items() if k not in DOC_ONLY_KEYS}
    return (json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n").encode()


def wake_engine_bytes(blob):
    """The heap one wake model takes on a 32-bit board once loaded, from its compiled file: the file's weights and
    tables, its arena, and WAKE_ENGINE_RAM (the frontend's buffers and tables, the parsed op list)."""
    hl = struct.unpack_from("<I", blob, 4)[0]
    return len(blob) + json.loads(blob[12:12 + hl])["arena"] + WAKE_ENGINE_RAM


def _without(board):
    """How to take a wake model out of BOARD's file: edit the user's own; a board file alabama ships is not theirs to
    edit (from a wheel it lies inside the installed package): a copy of it, given to --board."""
    from .. import CHECKOUT
    from .boards import BOARDS_DIR
    path = pathlib.Path(board.path).resolve()
    if path.parent != BOARDS_DIR.resolve():
        return "remove it from wake.models in %s" % shown(board.path)
    return "give --board a copy of %s without it in wake.models" % (shown(path) if CHECKOUT else path)


def wake_files(board, out_dir, at_rest=MPY_SET_AT_REST, out=print, frozen=()):
    """{remote path: local file} of the board file's wake models (wake.models), compiled now from the installed
    pymicro-wakeword (or the user's .tflite + JSON) into out_dir; never taken from the repository. A model the
    board cannot run (damaged, an op the firmware lacks, or larger than the heap the firmware leaves free at rest,
    `at_rest`) is a DeployError naming it. A shipped model on a system pymicro-wakeword has no wheel for is left out
    with one line saying so (the board then captures by button and says why in device.info). A model named in
    `frozen` (the image carries it, `alabama image`) is not copied: its weights stay in flash and only its arena and
    the engine's buffers count against the heap."""
    import importlib.util
    from ..wake.compile import ModelError
    from ..wake.reference import BUILTIN, compile_named
    from .boards import wake_model_name
    files = {}
    for m in (board.data.get("wake") or {}).get("models") or []:
        name = wake_model_name(m)
        if m in BUILTIN and importlib.util.find_spec("pymicro_wakeword") is None:
            out("wake model %s left out: pymicro-wakeword, which ships it, is not installed (no wheel for this system:"
                " give wake.models the path of the model's .tflite instead); the board will capture by button" % m)
            continue
        try:
            blob = compile_named(m)
        except (ModelError, OSError) as e:
            raise DeployError("wake model %s cannot go on the board: %s (fix wake.models in %s)"
                              % (m, getattr(e, "strerror", None) or e, shown(board.path))) from None
        need, free = wake_engine_bytes(blob), heap_bytes(board.heap) - at_rest
        if name in frozen:
            need -= len(blob)
        if need > free:
            frz = "" if name in frozen or at_rest != FROZEN_AT_REST or board.is_virtual else (
                ", or flash an image with it frozen in (%s freezes wake.models: its weights stay in flash)"
                % build_command(board.id))
            raise DeployError("wake model %s needs ~%d KB of heap, board %s's %s leaves ~%d KB beside the firmware: "
                              "%s%s, or use a board with PSRAM"
                              % (m, need // 1024, board.id, board.heap, max(0, free) // 1024, _without(board), frz))
        if name in frozen:
            continue                      # in the image already (satellite.wake.frozen): nothing on the filesystem
        path = pathlib.Path(out_dir) / "wake" / (name + WAKE_SUFFIX)
        path.parent.mkdir(parents=True, exist_ok=True)
        fwset.write_atomic(path, blob)
        files[WAKE_DIR + "/" + name + WAKE_SUFFIX] = path
    return files


def _board_dir(build_dir, march, kind, board):
    """Where one board file's staged files (board.json, manifest, wake models) go: named by the board's id *and* its
    content, so two boards with one id (a test's sim.json with a short watchdog beside the plain one, staged at once
    by two processes) never write each other's board.json."""
    digest = fwset.sha256_hex(board_json_bytes(board))[:12]
    extra = pathlib.Path(build_dir or fwset.BUILD) / march / kind / ("%s-%s" % (board.id, digest))
    extra.mkdir(parents=True, exist_ok=True)
    return extra


def stage(board, march, root=FIRMWARE, build_dir=None, out=print):
    """{remote path: local file} for the whole deploy, manifest included, and {remote path: sha256}."""
    files = build(march, root, build_dir, out)
    extra = _board_dir(build_dir, march, "_boards", board)
    # The set's own manifest (lib/satellite/_manifest.json), as an over-the-air update installs it: device.info
    # reports its sha256 as the firmware digest whichever way the firmware arrived.
    fwset.write_atomic(extra / fwset.SET_MANIFEST, fwset.set_manifest(files, march, root))
    files[OWNED_DIR + "/" + fwset.SET_MANIFEST] = extra / fwset.SET_MANIFEST
    fwset.write_atomic(extra / BOARD_FILE, board_json_bytes(board))
    files[BOARD_FILE] = extra / BOARD_FILE
    files.update(wake_files(board, extra, MPY_SET_AT_REST, out))
    hashes = {dest: fwset.sha256_hex(pathlib.Path(src).read_bytes()) for dest, src in files.items()}
    man = fwset.deploy_manifest(board.id, march, hashes, root=root)
    fwset.write_atomic(extra / "manifest.json", man)
    files[MANIFEST] = extra / "manifest.json"
    hashes[MANIFEST] = fwset.sha256_hex(man)
    return files, hashes


def stage_frozen(board, march, digest, root=FIRMWARE, build_dir=None, frozen_wake=()):
    """Like stage(), for an image with the firmware frozen in: only main.py, boot.py, /board.json, the wake models
    the image does not carry (frozen_wake: the probe's) and the manifest (which names the frozen firmware's digest)."""
    root = pathlib.Path(root)
    extra = _board_dir(build_dir, march, "_frozen", board)
    files = {name: root / name for name in SOURCE_KEPT if (root / name).is_file()}
    fwset.write_atomic(extra / BOARD_FILE, board_json_bytes(board))
    files[BOARD_FILE] = extra / BOARD_FILE
    files.update(wake_files(board, extra, FROZEN_AT_REST, frozen=frozen_wake))
    hashes = {dest: fwset.sha256_hex(pathlib.Path(src).read_bytes()) for dest, src in files.items()}
    man = fwset.deploy_manifest(board.id, march, hashes, frozen=digest or "", root=root)
    fwset.write_atomic(extra / "manifest.json", man)
    files[MANIFEST] = extra / "manifest.json"
    hashes[MANIFEST] = fwset.sha256_hex(man)
    return files, hashes


def plan(local, remote):
    """(copy, remove): remote paths whose content differs or is missing, in copy order (manifest last),
    and the owned remote files the build no longer has (on a frozen image: every lib/ file deploy owns, which
    the frozen modules shadow). Nothing outside deploy's own paths is listed."""
    copy = [p for p in sorted(local) if p != MANIFEST and remote.get(p) != local[p]]
    remove = sorted(p for p in remote if fwset.owned(p) and p not in local)
    if copy or remove or remote.get(MANIFEST) != local.get(MANIFEST):
        copy.append(MANIFEST)
    return copy, remove


def _dirs_for(paths):
    dirs = set()
    for p in paths:
        parts = p.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return sorted(dirs, key=lambda d: (d.count("/"), d))


def prepare_code(remove, copy):
    """The code run on the board before copying (onboard/prepare.py): drop the stale owned files and the
    manifest (rewritten last, so a half-finished deploy never looks finished), remove the owned directories
    left empty (deepest first), create the directories the copies need."""
    rmdirs = sorted((d for d in _dirs_for(remove) if d.startswith(OWNED_DIR + "/") or d == WAKE_DIR),
                    key=lambda d: -d.count("/"))
    return mpremote.script("prepare", remove + [MANIFEST], rmdirs, _dirs_for(copy))


def choose_march(board, info, port, tool_version):
    """The -march for this board, checked against what the connected board reports."""
    major, sub, arch = fwset.decode_mpy(info.get("mpy") or 0)
    if (major, sub) != tuple(tool_version):
        raise DeployError("the board on %s loads .mpy v%d.%d but mpy-cross emits v%d.%d: reflash it with "
                          "`alabama flash` (MicroPython %s) or install the matching mpy-cross"
                          % (port, major, sub, tool_version[0], tool_version[1], _flash_version()))
    want = MARCH_FOR_CHIP.get(board.chip)
    if want is None:
        if arch == "none":
            raise DeployError("the board on %s has no native emitter (.mpy arch none): the firmware's viper "
                              "modules need one" % port)
        return arch
    if arch != want:
        raise DeployError("the board on %s reports %s (.mpy arch %s), not the %s of board %s: check --port, "
                          "or pick the --board that matches the hardware" % (port, info.get("machine", "?"),
                                                                              arch, want, board.id))
    return want


def heap_bytes(heap):
    """A board file's heap ('130k', '8124k', '8m') in bytes."""
    m = re.fullmatch(r"(\d+)([kKmM]?)", str(heap).strip())
    if not m:
        raise DeployError("board heap %r is not a size like 256k or 8m: fix the board file" % heap)
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]


def mpy_set_fits(board):
    """Whether the board file's heap holds the firmware as .mpy files at rest with FREE_AT_REST to spare."""
    return heap_bytes(board.heap) * (1 - FREE_AT_REST) >= MPY_SET_AT_REST


def image_hint(board):
    """How to build and flash BOARD's frozen image: make in a checkout, the alabama commands from an installed wheel
    (no Makefile there; the image lands in the user cache's build dir)."""
    return "%s, then %s" % (build_command(board.id), flash_command(board.id))


def refuse_mpy(board):
    """The one line for a board file whose heap cannot hold the .mpy set."""
    from .. import CHECKOUT
    release = ("`make flash BOARD=%s RELEASE=TAG`" if CHECKOUT else "`alabama flash --board %s --release TAG`") \
        % board.id
    return ("board %s's heap (%s) cannot hold the firmware as .mpy files (~%d KB at rest, docs/memory.md): "
            "build and flash the image with it frozen in (%s), or flash a release's (%s), or pass --allow-mpy to "
            "deploy the .mpy files anyway" % (board.id, board.heap, MPY_SET_AT_REST // 1000, image_hint(board),
                                              release))


def choose_mode(board, info, port, root=FIRMWARE, allow_mpy=False, stale_image=False):
    """'frozen' when the board's image has the firmware frozen in, else 'mpy'; a DeployError (one line)
    when the image froze other firmware than `root` holds, or the board file's heap cannot hold the .mpy
    set and the image has none frozen (allow_mpy / stale_image override)."""
    if info.get("frozen"):
        want, got = fwset.firmware_digest(root), info.get("frozen_digest") or ""
        if got and got != want and not stale_image:
            raise DeployError("the image on %s froze other firmware (%s...) than %s holds (%s...): rebuild and "
                              "reflash it (%s), or pass --stale-image to update only main.py, boot.py and "
                              "board.json" % (port, got[:12], shown(root), want[:12], image_hint(board)))
        return "frozen"
    if not allow_mpy and not mpy_set_fits(board):
        raise DeployError(refuse_mpy(board))
    return "mpy"


def _flash_version():
    from . import images
    return images.MICROPYTHON_VERSION


#: Seconds a board may take to answer deploy's first contact (the raw REPL and the probe of its files; a board answers
#: in one or two): a port where nothing answers (a board in its ROM bootloader, another device) is said then, not
#: after mpremote's whole-run limit of 300 s with nothing printed meanwhile.
FIRST_CONTACT_S = 60


def _first_contact(port, runner):
    """mpremote.probe within FIRST_CONTACT_S (the real runner; a test's runner as it is), a silence said as such."""
    if runner is run_mpremote:
        def runner(p, args, on_line=None):
            return run_mpremote(p, args, on_line=on_line, timeout=FIRST_CONTACT_S)
    try:
        return probe(port, runner)
    except MpremoteTimeout:
        raise MpremoteError("the board on %s did not answer within %d s (no MicroPython REPL): press RESET and run "
                            "again; check that %s is the board's port (a board held in its bootloader, or another "
                            "device, never answers), or reflash it with `alabama flash`"
                            % (port, FIRST_CONTACT_S, port)) from None


def deploy(board, port=None, root=FIRMWARE, build_dir=None, reset=True, dry_run=False, wait=0,
           list_ports=None, runner=run_mpremote, out=print, allow_mpy=False, stale_image=False):
    """Deploy the firmware to `board` (a boards.Board) on `port`. Returns the list of copied remote paths.

    wait: seconds to wait for the port to appear first (after `alabama flash` the USB device re-enumerates).
    allow_mpy: deploy the .mpy set even where the board file's heap cannot hold it; stale_image: on a frozen
    image that froze other firmware than `root`, update main.py/boot.py/board.json anyway (choose_mode).
    """
    if wait and port is not None:
        _wait_for(port, wait)
    port = resolve_port(port, list_ports)
    tool = fwset.mpy_cross_version()
    info = _first_contact(port, runner)  # first: a port that is no board is its one line, without a header before it
    out("deploy %s to %s" % (board.id, port))
    march = choose_march(board, info, port, tool)
    if choose_mode(board, info, port, root, allow_mpy, stale_image) == "frozen":
        digest = info.get("frozen_digest") or ""
        out("the image on %s has the firmware frozen in (%s): installing only main.py, boot.py and board.json"
            % (port, "digest %s..." % digest[:12] if digest else "it does not say which firmware"))
        local, hashes = stage_frozen(board, march, digest, root, build_dir, info.get("frozen_wake") or ())
    else:
        local, hashes = stage(board, march, root, build_dir, out)
    copy, remove = plan(hashes, info.get("files") or {})
    # The probe's soft reset stopped main.py: every way out below restarts it when reset is set.
    if not copy and not remove:
        out("up to date: %d files on the board match the build, nothing copied" % len(hashes))
        if reset:
            soft_reset(port, out=out)
        return []
    if dry_run:
        for p in remove:
            out("would remove %s (no longer in the firmware)" % p)
        for p in copy:
            out("would copy %s (%d bytes)" % (p, pathlib.Path(local[p]).stat().st_size))
        if reset:
            soft_reset(port, out=out)
        return copy
    for p in remove:
        out("remove %s (no longer in the firmware)" % p)
    prepare = prepare_code(remove, copy)
    args = ["resume", "exec", prepare]
    for p in copy:
        args += ["+", "fs", "cp", str(local[p]), ":" + p]
    by_local = {str(local[p]): p for p in copy}
    done = []

    def on_line(line):
        m = re.match(r"^cp (.+) :(.+)$", line)
        if m:
            dest = m.group(2)
            src = m.group(1)
            size = pathlib.Path(src).stat().st_size if os.path.exists(src) else 0
            done.append(dest)
            out("copy %-44s %6d bytes  [%d/%d]" % (dest, size, len(done), len(copy)))
        elif line.startswith("Up to date:"):
            pass
        elif line.strip() and by_local:
            out("  " + line)

    runner(port, args, on_line=on_line)
    missing = [p for p in copy if p not in done]
    if missing and runner is run_mpremote:
        raise DeployError("mpremote did not report copying %s: run the deploy again" % ", ".join(missing[:3]))
    out("deployed %d of %d files (%d removed)" % (len(copy), len(hashes), len(remove)))
    if reset:
        soft_reset(port, out=out)
    return copy


def _wait_for(port, seconds):
    deadline = time.monotonic() + seconds
    while not os.path.exists(port) and time.monotonic() < deadline:
        time.sleep(0.2)


# --- command line -----------------------------------------------------------------------------------

def register(sub):
    p = sub.add_parser("deploy", help="compile the firmware and copy what changed to a board",
                       description="Compile every firmware module with mpy-cross (main.py/boot.py stay "
                                   "source), copy only the files whose sha256 differs from the board's with "
                                   "mpremote, write /board.json, then soft-reset. Nothing under /data "
                                   "(keys, pins, provisioning) is touched.")
    p.add_argument("--board", metavar="NAME", help="board id (boards/NAME.json) or a board file path")
    p.add_argument("--port", metavar="PORT", help="serial port (default: the one Espressif USB device attached)")
    p.add_argument("--build-dir", metavar="DIR", help="where compiled modules go (default build/deploy)")
    p.add_argument("--no-reset", action="store_true", help="do not soft-reset after copying")
    p.add_argument("--dry-run", action="store_true", help="compare with the board and list what would be copied")
    p.add_argument("--allow-mpy", action="store_true",
                   help="deploy the .mpy files even where the board file's heap cannot hold them")
    p.add_argument("--stale-image", action="store_true",
                   help="on an image that froze other firmware than firmware/, update main.py/boot.py/board.json anyway")
    p.add_argument("--package-json", action="store_true",
                   help="only rewrite firmware/package.json (the mip manifest) from the tree, no board needed")
    p.set_defaults(func=cmd_deploy)


def cmd_deploy(args):
    if args.package_json:
        path = fwset.write_package_json()
        print("wrote %s (%d files)" % (shown(path), len(fwset.package_json()["urls"])))
        return 0
    if not args.board:
        raise UsageError("deploy needs --board NAME (see `alabama board list`)")
    from . import boards
    board = boards.load(args.board, option="--board")
    deploy(board, port=args.port, build_dir=args.build_dir, reset=not args.no_reset, dry_run=args.dry_run,
           allow_mpy=args.allow_mpy, stale_image=args.stale_image)
    return 0
