"""The board tools' structure: no import circle between alabama.board's modules (a new one fails here), the
firmware's one version (fwset), and the scripts in alabama/board/onboard/ run on the real micropython unix
port with a temporary directory standing in for the board's flash."""
import ast
import hashlib
import importlib
import json
import os
import pathlib
import shutil
import subprocess

import pytest

from alabama.board import deploy, fwset, mpremote

from mpharness import FIRMWARE, micropython_cmd

HOST = pathlib.Path(fwset.__file__).resolve().parents[2]          # host/: the package's own tree
ALABAMA = HOST / "alabama"

needs_micropython = pytest.mark.needs_micropython      # tests/host/conftest.py


# --- the import graph ------------------------------------------------------------------------------------

def _module_name(path):
    rel = path.relative_to(HOST).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path, name, known):
    """alabama modules `path` imports anywhere in it (a lazy import inside a function counts: it is still a
    dependency, and the deploy <-> image <-> ota circle was made of them)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            targets = [mod] + ["%s.%s" % (mod, a.name) for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:          # `from a.b import name`: the module is a.b
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def import_graph():
    files = {_module_name(p): p for p in ALABAMA.rglob("*.py")
             if "__pycache__" not in p.parts and "onboard" not in p.parts}
    return {name: _imports(path, name, files) for name, path in files.items()}


def _cycle_through(graph, start):
    """A path start -> ... -> start, or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def test_the_graph_reader_sees_a_lazy_import():
    graph = import_graph()
    assert "alabama.board.fwset" in graph["alabama.board.deploy"]
    assert "alabama.board.deploy" in graph["alabama.board.flash"]          # lazy, inside _deploy_module
    assert "alabama.board.mpremote" in graph["alabama.provision.serial"]


def test_no_board_tool_is_on_an_import_circle():
    """deploy, image, ota, flash, ... depend on fwset and mpremote; neither of those imports any of them back,
    and no module of alabama.board (or provision.serial, its mpremote user) lies on a circle of imports."""
    graph = import_graph()
    board = sorted(n for n in graph if n.startswith("alabama.board.") or n == "alabama.provision.serial")
    assert "alabama.board.fwset" in board and "alabama.board.mpremote" in board
    circles = [c for c in (_cycle_through(graph, n) for n in board) if c]
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)
    # the package itself (its __init__ imports nothing), errors, and extras (the missing-package line; it imports
    # only errors)
    base = {"alabama", "alabama.errors", "alabama.extras", "alabama.board"}
    assert graph["alabama.board.fwset"] <= base
    assert graph["alabama.board.mpremote"] <= base | {"alabama.board.fwset"}
    for name in ("deploy", "image", "ota"):
        board_deps = {d for d in graph["alabama.board." + name] if d.startswith("alabama.board.")}
        assert not board_deps & {"alabama.board.deploy", "alabama.board.image", "alabama.board.ota"}, name
    for name in board:
        importlib.import_module(name)


# --- the firmware's version ------------------------------------------------------------------------------

def test_the_firmware_version_is_read_and_written_by_the_parser(tmp_path):
    pkg = tmp_path / fwset.PACKAGE
    pkg.mkdir()
    shutil.copyfile(FIRMWARE / fwset.PACKAGE / "__init__.py", pkg / "__init__.py")
    original = (pkg / "__init__.py").read_bytes()
    version = fwset.firmware_version()
    assert fwset.firmware_version(tmp_path) == version
    fwset.set_version(tmp_path, "9.8.7-rc1")
    assert fwset.firmware_version(tmp_path) == "9.8.7-rc1"
    changed = ast.parse((pkg / "__init__.py").read_bytes())
    assert [type(n) for n in changed.body] == [type(n) for n in ast.parse(original).body]
    fwset.set_version(tmp_path, version)
    assert (pkg / "__init__.py").read_bytes() == original          # only the literal moved
    with pytest.raises(fwset.FirmwareError, match="is not 1 to 32 of"):
        fwset.set_version(tmp_path, "x" * 33)
    (pkg / "__init__.py").write_text("# no version here\n")
    with pytest.raises(fwset.FirmwareError, match='no VERSION = "..." in'):
        fwset.firmware_version(tmp_path)


def test_deploy_and_ota_manifests_report_the_firmware_version(tmp_path):
    fw = tmp_path / "firmware"
    shutil.copytree(FIRMWARE, fw, ignore=shutil.ignore_patterns("__pycache__"))
    fwset.set_version(fw, "4.5.6")
    staged = {"lib/satellite/x.mpy": FIRMWARE / "main.py"}
    assert json.loads(fwset.set_manifest(staged, "x64", fw))["version"] == "4.5.6"
    assert json.loads(fwset.deploy_manifest("sim", "x64", {}, root=fw))["version"] == "4.5.6"
    assert fwset.package_json(fw)["version"] == "4.5.6"


# --- the scripts run on the board --------------------------------------------------------------------------

def run_on_board(flash, code):
    """Run `code` as the board would (mpremote exec): the unix port, cwd = the stand-in flash."""
    env = {k: v for k, v in os.environ.items() if k != "MICROPYPATH"}
    r = subprocess.run([micropython_cmd(), "-c", code], cwd=str(flash), capture_output=True, text=True,
                       timeout=30, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _files(flash):
    return sorted(p.relative_to(flash).as_posix() for p in flash.rglob("*"))


@needs_micropython
def test_probe_hashes_exactly_the_owned_files_and_changes_nothing(tmp_path):
    flash = tmp_path / "flash"
    for rel, data in {"main.py": b"print(1)\n", "board.json": b"{}\n", "lib/otaboot.mpy": b"M\x06",
                      "lib/satellite/__init__.mpy": b"M\x06init", "lib/satellite/wire/frame.mpy": b"x" * 1500,
                      "data/device.key": b"k" * 32, "lib/other/user.py": b"u", "notes.txt": b"n"}.items():
        (flash / rel).parent.mkdir(parents=True, exist_ok=True)
        (flash / rel).write_bytes(data)
    before = _files(flash)
    info = mpremote.parse_probe(run_on_board(flash, mpremote.probe_code()))
    want = {rel: hashlib.sha256((flash / rel).read_bytes()).hexdigest()
            for rel in ("main.py", "board.json", "lib/otaboot.mpy", "lib/satellite/__init__.mpy",
                        "lib/satellite/wire/frame.mpy")}
    assert info["files"] == want                       # boot.py and the manifest are absent: not listed
    major, sub, arch = fwset.decode_mpy(info["mpy"])
    assert major == fwset.mpy_cross_version()[0] and arch != "none"
    assert info["frozen"] == "" and info["frozen_digest"] == ""        # the venv's port freezes no firmware
    assert info["cwd"] == str(flash) and info["machine"]
    assert _files(flash) == before


@needs_micropython
def test_probe_reports_nothing_on_an_empty_flash(tmp_path):
    info = mpremote.parse_probe(run_on_board(tmp_path, mpremote.probe_code()))
    assert info["files"] == {}


@needs_micropython
def test_prepare_drops_stale_owned_files_and_makes_the_directories(tmp_path):
    flash = tmp_path
    for rel in ("lib/satellite/gone.mpy", "lib/satellite/old/a.mpy", deploy.MANIFEST, "lib/satellite/keep.mpy",
                "data/device.key"):
        (flash / rel).parent.mkdir(parents=True, exist_ok=True)
        (flash / rel).write_bytes(b"x")
    code = deploy.prepare_code(["lib/satellite/gone.mpy", "lib/satellite/old/a.mpy"],
                               ["lib/satellite/noise/x.mpy", "lib/satellite/keep.mpy", deploy.MANIFEST])
    run_on_board(flash, code)
    assert _files(flash) == ["data", "data/device.key", "lib", "lib/satellite", "lib/satellite/keep.mpy",
                             "lib/satellite/noise"]
    run_on_board(flash, code)                          # again: nothing left to remove, directories exist
    assert _files(flash) == ["data", "data/device.key", "lib", "lib/satellite", "lib/satellite/keep.mpy",
                             "lib/satellite/noise"]


def test_the_onboard_scripts_ship_with_the_package():
    """pyproject's package-data installs onboard/*.py beside the code that sends them."""
    import tomllib
    data = tomllib.loads((HOST.parent / "pyproject.toml").read_text())
    globs = data["tool"]["setuptools"]["package-data"]["alabama.board"]
    assert "onboard/*.py" in globs
    assert sorted(p.name for p in mpremote.ONBOARD.glob("*.py")) == ["prepare.py", "probe.py", "probe_set.py", "write_record.py"]
