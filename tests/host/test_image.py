"""The frozen image (issue 12, the deploy path that fits the no-PSRAM devkit): firmware/manifest.py resolved by
MicroPython's own tools/manifestfile.py, the esp32 manifest `alabama image` generates, its build command lines
and one-line failures (no ESP-IDF toolchain here: the build itself is not run), and `alabama deploy` on an image
with the firmware frozen in, against the virtual board running the 32-bit interpreter that froze it with the
same manifest (tools/mp32/build_frozen.sh)."""
import importlib.util
import os
import pathlib
import shutil
import subprocess
import tarfile

import pytest

from alabama.board import logwords as lw
from alabama import cli
from alabama.board import boards, deploy, fwset, image
from alabama.wake.compile import MAGIC

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIRMWARE = ROOT / "firmware"
ORIG = ROOT / "build" / "mp32" / "micropython_1.26.1+ds.orig.tar.xz"
#: A git mirror of micropython/micropython with the v1.27.0 tag, where one is at hand (ALABAMA_MICROPYTHON_GIT:
#: its git directory); without it the 1.26.1 source tarball tools/mp32 fetched stands in.
MIRROR = pathlib.Path(os.environ.get("ALABAMA_MICROPYTHON_GIT", ROOT / "build" / "micropython.git"))
MP32_FROZEN = ROOT / "build" / "mp32-frozen" / "micropython"


# --- MicroPython's manifestfile.py -------------------------------------------------------------------

@pytest.fixture(scope="module")
def manifestfile(tmp_path_factory):
    """tools/manifestfile.py of MicroPython v1.27.0 (the git mirror, where present) or of the 1.26.1 source
    tarball tools/mp32 builds from (one line differs between the two: `git diff v1.26.1 v1.27.0 --stat`)."""
    d = tmp_path_factory.mktemp("manifestfile")
    path = d / "manifestfile.py"
    if MIRROR.is_dir() and subprocess.run(["git", "--git-dir", str(MIRROR), "cat-file", "-e", "v1.27.0"],
                                          capture_output=True).returncode == 0:
        path.write_bytes(subprocess.run(["git", "--git-dir", str(MIRROR), "show", "v1.27.0:tools/manifestfile.py"],
                                        capture_output=True, check=True).stdout)
    elif ORIG.is_file():
        with tarfile.open(ORIG) as t:
            path.write_bytes(t.extractfile("micropython-1.26.1/tools/manifestfile.py").read())
    elif os.environ.get("CI"):
        pytest.fail("no MicroPython source for tools/manifestfile.py: run `make mp32`", pytrace=False)
    else:
        pytest.skip("no MicroPython source for tools/manifestfile.py: run `make mp32`")
    spec = importlib.util.spec_from_file_location("manifestfile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def resolve(mf, manifest, port_dir=None):
    """{target path: source file} of a manifest in freeze mode, as the port's build resolves it."""
    m = mf.ManifestFile(mf.MODE_FREEZE, {"MPY_DIR": None, "PORT_DIR": port_dir and str(port_dir),
                                         "BOARD_DIR": None, "MPY_LIB_DIR": None})
    m.execute(str(manifest))
    return {f.target_path: f.full_path for f in m.files()}


def test_the_firmware_manifest_freezes_exactly_the_deployed_modules_but_main_and_boot(manifestfile):
    got = resolve(manifestfile, image.MANIFEST)
    want = [rel for rel in fwset.firmware_files() if rel not in fwset.SOURCE_KEPT]
    assert sorted(got) == sorted(want) == sorted(fwset.frozen_files())
    assert "otaboot.py" in got and "satellite/session.py" in got and "satellite/wire/frame.py" in got
    assert "main.py" not in got and "boot.py" not in got and "manifest.py" not in got
    for target, full in got.items():
        assert pathlib.Path(full) == FIRMWARE / target


def test_the_generated_esp32_manifest_includes_the_port_manifest_ours_and_the_digest(manifestfile, tmp_path):
    """The port's own boards/manifest.py first (here a stand-in for ports/esp32's, whose require()s need
    micropython-lib), then every firmware file, then alabama_image.py with the digest."""
    port = tmp_path / "esp32"
    (port / "boards").mkdir(parents=True)
    (port / "boards" / "manifest.py").write_text('module("portmod.py")\n')
    (port / "boards" / "portmod.py").write_text("X = 1\n")
    out = tmp_path / "out"
    text = image.port_manifest_text(out)
    assert text.splitlines()[1] == 'include("$(PORT_DIR)/boards/manifest.py")'
    image.write_stamp(out)
    (out / "manifest.py").write_text(text)
    got = resolve(manifestfile, out / "manifest.py", port_dir=port)
    assert list(got)[0] == "portmod.py"
    assert sorted(got) == sorted(["portmod.py", "alabama_image.py"] + fwset.frozen_files())
    ns = {}
    exec((out / "alabama_image.py").read_text(), ns)
    assert ns["DIGEST"] == fwset.firmware_digest()


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no MicroPython git mirror")
def test_the_real_esp32_port_manifest_is_what_we_include():
    """At v1.27.0 ports/esp32/boards/manifest.py exists (what the official image freezes: asyncio, the
    networking bundle, ...) and the S3 board freezes no manifest of its own we would drop."""
    show = lambda p: subprocess.run(["git", "--git-dir", str(MIRROR), "show", "v1.27.0:" + p],
                                    capture_output=True, text=True, check=True).stdout
    assert 'include("$(MPY_DIR)/extmod/asyncio")' in show("ports/esp32/boards/manifest.py")
    assert "FROZEN_MANIFEST" not in show("ports/esp32/boards/ESP32_GENERIC_S3/mpconfigboard.cmake")
    assert "-D MICROPY_FROZEN_MANIFEST=$(FROZEN_MANIFEST)" in show("ports/esp32/Makefile")
    # USER_C_MODULES (our firmware/native/micropython.cmake) reaches CMake in every idf.py call, and the
    # port links the `usermod` INTERFACE library our cmake file adds _aead_c to
    mk = show("ports/esp32/Makefile")
    assert "CMAKE_ARGS += -DUSER_C_MODULES=${USER_C_MODULES}" in mk and "$(CMAKE_ARGS)" in mk
    assert "target_link_libraries(${MICROPY_TARGET} usermod)" in show("ports/esp32/esp32_common.cmake")
    assert "add_library(usermod INTERFACE)" in show("py/usermod.cmake")


def test_the_c_module_build_files_keep_the_documented_shape():
    """firmware/native: micropython.cmake is an INTERFACE library linked to usermod, micropython.mk adds
    to SRC_USERMOD_C from $(USERMOD_DIR) (docs/develop/cmodules.rst), both naming aead.c, which
    registers _aead_c."""
    native = FIRMWARE / "native"
    cm = (native / "micropython.cmake").read_text()
    assert "add_library(usermod_aead_c INTERFACE)" in cm
    assert "${CMAKE_CURRENT_LIST_DIR}/aead.c" in cm
    assert "target_link_libraries(usermod INTERFACE usermod_aead_c)" in cm
    mk = (native / "micropython.mk").read_text()
    assert "AEAD_MOD_DIR := $(USERMOD_DIR)" in mk and "SRC_USERMOD_C += $(AEAD_MOD_DIR)/aead.c" in mk
    assert "MP_REGISTER_MODULE(MP_QSTR__aead_c, " in (native / "aead.c").read_text()
    # every C file of the directory is in both builds (a file in one only would be a module the board lacks
    # or the 32-bit test build lacks): the wake word's _wake_c and _wake_fe_c (issue 37) beside _aead_c
    for c in sorted(native.glob("*.c")):
        assert "${CMAKE_CURRENT_LIST_DIR}/%s" % c.name in cm and "$(AEAD_MOD_DIR)/%s" % c.name in mk, c.name
    assert "MP_REGISTER_MODULE(MP_QSTR__wake_c, " in (native / "wake.c").read_text()
    assert "MP_REGISTER_MODULE(MP_QSTR__wake_fe_c, " in (native / "wake_fe.c").read_text()


def test_the_digest_changes_with_any_frozen_file_and_not_with_main(tmp_path):
    fw = tmp_path / "fw"
    shutil.copytree(FIRMWARE, fw, ignore=shutil.ignore_patterns("__pycache__"))
    d0 = fwset.firmware_digest(fw)
    assert d0 == fwset.firmware_digest()
    (fw / "main.py").write_text("# edited\n")
    assert fwset.firmware_digest(fw) == d0
    with open(fw / "satellite" / "app.py", "a") as f:
        f.write("\n")
    assert fwset.firmware_digest(fw) != d0


# --- the build: checks, command lines, failures (no ESP-IDF here) ------------------------------------

def fake_source(tmp_path, version=(1, 27, 0)):
    """The few files of a MicroPython tree the checks read (the build itself is a maker's `make`)."""
    src = tmp_path / "micropython"
    (src / "py").mkdir(parents=True)
    (src / "py" / "mpconfig.h").write_text("#define MICROPY_VERSION_MAJOR %d\n#define MICROPY_VERSION_MINOR %d\n"
                                          "#define MICROPY_VERSION_MICRO %d\n" % version)
    b = src / "ports" / "esp32" / "boards" / "ESP32_GENERIC_S3"
    b.mkdir(parents=True)
    (b / "mpconfigboard.cmake").write_text("set(IDF_TARGET esp32s3)\n")
    (b / "mpconfigvariant_SPIRAM_OCT.cmake").write_text("")
    (src / "ports" / "esp32" / "boards" / "manifest.py").write_text("")
    (src / "ports" / "esp32" / image.PARTITIONS).write_text("")
    return src


def fake_idf(tmp_path, version=(5, 5, 1)):
    idf = tmp_path / "esp-idf"
    (idf / "tools" / "cmake").mkdir(parents=True)
    (idf / "tools" / "cmake" / "version.cmake").write_text(
        "set(IDF_VERSION_MAJOR %d)\nset(IDF_VERSION_MINOR %d)\nset(IDF_VERSION_PATCH %d)\n" % version)
    return {"IDF_PATH": str(idf), "PATH": "/nowhere"}, (lambda name, path=None: "/idf/tools/idf.py")


@pytest.mark.parametrize("board_id,variant", [("devkitc1-inmp441", []), ("esp32-s3-box-3", ["BOARD_VARIANT=SPIRAM_OCT"])])
def test_dry_run_prints_the_build_the_maker_runs(tmp_path, board_id, variant):
    src = fake_source(tmp_path)
    env, which = fake_idf(tmp_path)
    out, lines = tmp_path / "out", []
    board = boards.load(board_id)
    cmds = image.build(board, src=src, out=out, dry_run=True, env=env, which=which, say=lines.append)
    port = ["make", "-C", str(src / "ports/esp32"), "BOARD_DIR=%s/ALABAMA_S3_OTA" % out] + variant + ["BUILD=%s/idf" % out,
            "USER_C_MODULES=%s" % (FIRMWARE / "native" / "micropython.cmake")]
    assert cmds == [["make", "-C", str(src / "mpy-cross")], port + ["submodules"],
                    port + ["FROZEN_MANIFEST=%s/manifest.py" % out]]
    assert lines[0] == "ESP-IDF 5.5.1 at %s" % env["IDF_PATH"]
    assert lines[-1] == " ".join(cmds[-1])
    # the board file's wake models are frozen in (issue 37: their weights stay in flash), compiled now
    wake = (board.data.get("wake") or {}).get("models") or []
    assert (out / "manifest.py").read_text() == image.port_manifest_text(out, wake=bool(wake))
    assert ("alabama_wake.py" in (out / "manifest.py").read_text()) == bool(wake)
    if wake:
        ns = {}
        exec((out / "alabama_wake.py").read_text(), ns)
        assert list(ns["NAMES"]) == wake and all(ns["MODEL_%d" % i][:4] == MAGIC for i in range(len(wake)))
    assert "DIGEST = %r" % fwset.firmware_digest() in (out / "alabama_image.py").read_text()
    bdir = out / "ALABAMA_S3_OTA"
    assert (bdir / "sdkconfig.ota").read_text() == image.SDKCONFIG_OTA
    assert "include(%s)" % (src / "ports/esp32/boards/ESP32_GENERIC_S3/mpconfigboard.cmake") in \
        (bdir / "mpconfigboard.cmake").read_text()
    assert (bdir / "mpconfigboard.h").read_text() == '#include "%s"\n' % (src / "ports/esp32/boards/ESP32_GENERIC_S3/mpconfigboard.h")
    if variant:
        assert "include(%s)" % (src / "ports/esp32/boards/ESP32_GENERIC_S3/mpconfigvariant_SPIRAM_OCT.cmake") in \
            (bdir / "mpconfigvariant_SPIRAM_OCT.cmake").read_text()


APP = b"\xe9" + bytes(range(256)) * 40       # a stand-in app image (idf/micropython.bin)


def test_a_build_copies_firmware_bin_and_a_failing_step_is_one_line(tmp_path):
    src = fake_source(tmp_path)
    env, which = fake_idf(tmp_path, (5, 3, 0))
    out, ran = tmp_path / "out", []

    def runner(argv):
        ran.append(argv)
        if argv[-1].startswith("FROZEN_MANIFEST="):
            (out / "idf").mkdir(parents=True, exist_ok=True)
            (out / "idf" / "micropython.bin").write_bytes(APP)
            (out / "idf" / "firmware.bin").write_bytes(b"\xe9" + bytes(image.APP_OFFSET - 1) + APP)
        return 0

    board = boards.load("devkitc1-inmp441")
    lines = []
    got = image.build(board, src=src, out=out, env=env, which=which, runner=runner, say=lines.append)
    assert got == out / "firmware.bin" and got.read_bytes()[:1] == b"\xe9" and len(ran) == 3
    # the three release files: the merged image, its sha256 (sha256sum format), the OTA manifest of the app in it
    import hashlib
    import json
    assert sorted(p.name for p in out.iterdir() if p.is_file() and p.suffix != ".py") == sorted(image.RELEASE_FILES)
    assert (out / "firmware.bin.sha256").read_text() == "%s  firmware.bin\n" % hashlib.sha256(got.read_bytes()).hexdigest()
    m = json.loads((out / image.OTA_MANIFEST).read_text())
    assert m == {"format": 1, "kind": "image", "board": "devkitc1-inmp441", "version": fwset.firmware_version(),
                 "firmware_digest": fwset.firmware_digest(), "file": "firmware.bin", "offset": 0x10000,
                 "size": len(APP), "sha256": hashlib.sha256(APP).hexdigest()}
    assert got.read_bytes()[m["offset"]:m["offset"] + m["size"]] == APP
    assert lines[-2].startswith("built ") and "FIRMWARE=" in lines[-1]
    with pytest.raises(image.ImageError) as e:
        image.build(board, src=src, out=out, env=env, which=which, runner=lambda argv: 2, say=lambda s: None)
    assert str(e.value).startswith("`make -C %s` failed (exit 2): see its output above" % (src / "mpy-cross"))
    (out / "idf" / "firmware.bin").write_bytes(b"\xe9" + bytes(255))
    with pytest.raises(image.ImageError, match="does not hold idf/micropython.bin at 0x10000"):
        image.build(board, src=src, out=out, env=env, which=which, runner=lambda argv: 0, say=lambda s: None)
    (out / "idf" / "firmware.bin").unlink()
    with pytest.raises(image.ImageError, match="^the build left no firmware image: firmware .* does not exist"):
        image.build(board, src=src, out=out, env=env, which=which, runner=lambda argv: 0, say=lambda s: None)


def test_missing_or_wrong_source_and_idf_are_one_line_each(tmp_path):
    board = boards.load("devkitc1-inmp441")
    src = fake_source(tmp_path)
    env, which = fake_idf(tmp_path)
    cases = [
        (dict(src=None, env={}), "no MicroPython source given: `git clone -b v1.27.0 --depth 1 "
                                 "https://github.com/micropython/micropython DIR`, then `make image BOARD=... MICROPY_DIR=DIR`"),
        (dict(src=tmp_path / "nope", env=env), "is not a MicroPython source tree (no py/mpconfig.h)"),
        (dict(src=fake_source(tmp_path / "old", (1, 26, 1)), env=env), "is MicroPython 1.26.1, the images are pinned to 1.27.0"),
        (dict(src=src, env={"PATH": "/usr/bin"}), "no ESP-IDF: IDF_PATH is not set: install ESP-IDF v5.5.1"),
        (dict(src=src, env=dict(env, IDF_PATH=str(tmp_path / "gone"))), "does not exist: install ESP-IDF v5.5.1"),
        (dict(src=src, env=env, which=lambda n, path=None: None), "idf.py is not on PATH: `source %s/export.sh`" % env["IDF_PATH"]),
        (dict(src=src, env=fake_idf(tmp_path / "v6", (6, 0, 0))[0]), "ESP-IDF 6.0.0 is not one MicroPython v1.27.0 supports"),
    ]
    for kw, expect in cases:
        kw.setdefault("which", which)
        with pytest.raises(image.ImageError) as e:
            image.build(board, out=tmp_path / "out", runner=lambda a: pytest.fail("ran"), say=lambda s: None, **kw)
        assert expect in str(e.value) and "\n" not in str(e.value), (kw, str(e.value))
    with pytest.raises(image.UsageError, match="virtual board: it has no image"):
        image.build(boards.load("sim"))



def test_cli_without_idf_prints_one_line(tmp_path, capsys, monkeypatch):
    """What this machine shows: a real source tree, no ESP-IDF."""
    monkeypatch.delenv("IDF_PATH", raising=False)
    rc = cli.main(["image", "--board", "devkitc1-inmp441", "--micropy-dir", str(fake_source(tmp_path)),
                   "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and err[0].startswith("alabama: error: no ESP-IDF: IDF_PATH is not set")
    monkeypatch.delenv("MICROPY_DIR", raising=False)
    rc = cli.main(["image", "--board", "devkitc1-inmp441"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "no MicroPython source given" in err[0]      # a missing option (sweep 8)


def test_make_image_without_micropy_dir_is_one_line():
    """The Makefile target, with this interpreter as `alabama` (-o install: no venv is made or updated)."""
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("MICROPY_DIR", "IDF_PATH", "MAKEFLAGS", "MAKELEVEL")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "host")] + [p for p in [env.get("PYTHONPATH")] if p])
    alabama = "%s -c 'import sys; from alabama.cli import main; sys.exit(main())'" % sys.executable
    r = subprocess.run(["make", "-s", "-C", str(ROOT), "-o", "install", "image", "BOARD=devkitc1-inmp441",
                        "ALABAMA=" + alabama], capture_output=True, text=True, env=env, timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("alabama:")]
    assert r.returncode != 0 and len(lines) == 1 and "no MicroPython source given" in lines[0], r.stderr


# --- deploy on a frozen image ------------------------------------------------------------------------

def _info(frozen="", digest=""):
    return {"frozen": frozen, "frozen_digest": digest}


def test_choose_mode_frozen_image_stale_image_and_the_heap_refusal():
    devkit, sim = boards.load("devkitc1-inmp441"), boards.load("sim")
    here = fwset.firmware_digest()
    assert deploy.choose_mode(devkit, _info("satellite/__init__.py", here), "P") == "frozen"
    assert deploy.choose_mode(devkit, _info("satellite/__init__.py", ""), "P") == "frozen"   # no digest module
    with pytest.raises(deploy.DeployError) as e:
        deploy.choose_mode(devkit, _info("satellite/__init__.py", "ab" * 32), "P")
    assert str(e.value) == (
        "the image on P froze other firmware (abababababab...) than firmware holds (%s...): rebuild and reflash it "
        "(`make image BOARD=devkitc1-inmp441`, then `make flash BOARD=devkitc1-inmp441 "
        "FIRMWARE=build/image/devkitc1-inmp441/firmware.bin`), or pass --stale-image to update only main.py, "
        "boot.py and board.json" % here[:12])
    assert deploy.choose_mode(devkit, _info("satellite/__init__.py", "ab" * 32), "P", stale_image=True) == "frozen"
    with pytest.raises(deploy.DeployError, match=r"^board devkitc1-inmp441's heap \(130k\) cannot hold the firmware "
                                                 r"as \.mpy files .*`make image BOARD=devkitc1-inmp441`.*--allow-mpy"):
        deploy.choose_mode(devkit, _info(), "P")
    assert deploy.choose_mode(devkit, _info(), "P", allow_mpy=True) == "mpy"
    assert deploy.choose_mode(sim, _info(), "P") == "mpy"
    assert deploy.choose_mode(boards.load("esp32-s3-box-3"), _info(), "P") == "mpy"


def test_plan_on_a_frozen_image_removes_the_shadowed_lib_files():
    local = {"main.py": "a", "boot.py": "b", "board.json": "c", deploy.MANIFEST: "m"}
    remote = {"main.py": "a", "boot.py": "b", "board.json": "c", deploy.MANIFEST: "m0",
              "lib/satellite/session.mpy": "s", "lib/otaboot.mpy": "o", "data/device.key": "k"}
    assert deploy.plan(local, remote) == ([deploy.MANIFEST], ["lib/otaboot.mpy", "lib/satellite/session.mpy"])


def _frozen_interpreter():
    if not os.access(str(MP32_FROZEN), os.X_OK):
        pytest.skip("no frozen-firmware interpreter: run tools/mp32/build_frozen.sh")
    r = subprocess.run([str(MP32_FROZEN), "-c", "import alabama_image; print(alabama_image.DIGEST)"],
                       capture_output=True, text=True, env=dict(os.environ, MICROPYPATH=".frozen"))
    if r.stdout.strip() != fwset.firmware_digest():
        pytest.skip("build/mp32-frozen froze other firmware than firmware/: run tools/mp32/build_frozen.sh again")
    return str(MP32_FROZEN)


def _vb(flash, micropython, **kw):
    from alabama.board.sim import VirtualBoard
    vb = VirtualBoard(flash, compiled=False, micropython=micropython,
                      env={"MICROPYPATH": ".frozen:lib:" + str(FIRMWARE)}, **kw)
    return vb.start()


def _mpremote(port, code):
    import sys
    r = subprocess.run([sys.executable, "-m", "mpremote", "connect", port, "exec", code], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


@pytest.mark.slow
def test_a_frozen_image_offers_no_ota_and_alabama_ota_says_flash_an_image(tmp_path, monkeypatch):
    """A paired board on the frozen interpreter: device.info reports the image and the digest it froze (not
    empty, not a /lib set's), firmware.update is not declared so an Invoke of it is CAPABILITY_MISSING (an OTA
    set would be staged, swapped and confirmed while the frozen package went on running: docs/ota.md), and
    `alabama ota` refuses before building a set, in one line naming make image and make flash."""
    import json
    from alabama.board import ota
    from alabama.core.errors import LocalProtocolError, RequestFailed
    from vb_support import CoreThread, board, device_id
    monkeypatch.setenv("ALABAMA_MICROPYTHON", _frozen_interpreter())
    core = CoreThread(tmp_path / "core").start()
    try:
        token, _ = core.run(core.core.mint_token, 600)
        vb = board(tmp_path, core, token=token)
        vb.start()
        try:
            vb.wait_log(lw.ACCEPTED, 30)
            dev = device_id(vb)
            info = json.loads(core.call(core.core.invoke(dev, "device.info", "{}")).content[0].text)
            assert info["image"] == "frozen" and info["firmware_digest"] == fwset.firmware_digest()
            args = json.dumps({"url": "http://127.0.0.1:9/manifest.json", "sha256": "0" * 64})
            with pytest.raises(LocalProtocolError, match="declared no tool 'firmware.update'"):
                core.call(core.core.invoke(dev, "firmware.update", args, 10), 15)   # the core will not send it
            with pytest.raises(RequestFailed) as e:                                 # and the device refuses it
                core.call(core.core._request(dev, lambda s: s.invoke("firmware.update", args, unchecked=True), 10), 15)
            assert e.value.code == "CAPABILITY_MISSING", e.value
            with pytest.raises(ota.OtaError, match=r"runs a frozen image \(firmware digest %s\.\.\.\): OTA cannot "
                               r"replace it; build and flash a new one over USB: `make image BOARD=sim`, then "
                               r"`make flash BOARD=sim FIRMWARE=build/image/sim/firmware.bin`"
                               % fwset.firmware_digest()[:12]):
                ota.update(core.data_dir, dev, host="127.0.0.1", bind="127.0.0.1", timeout=10, out=lambda *a: None)
        finally:
            vb.stop()
    finally:
        core.close()
    assert not list((tmp_path / "flash").glob("ota/stage*"))


@pytest.mark.slow
def test_deploy_to_a_frozen_image_installs_only_what_is_not_frozen(tmp_path):
    """On the 32-bit interpreter with the firmware frozen by firmware/manifest.py (as the board image): deploy
    finds it, copies main.py, boot.py, board.json and its manifest, removes the .mpy files it would shadow,
    and leaves /data alone; a second deploy copies nothing; a tree that differs from what the image froze is
    refused in one line (--stale-image goes on)."""
    mp = _frozen_interpreter()
    flash = tmp_path / "flash"
    (flash / "data").mkdir(parents=True)
    (flash / "data" / "device.key").write_bytes(b"\x05" * 32)
    (flash / "lib" / "satellite").mkdir(parents=True)
    (flash / "lib" / "satellite" / "session.mpy").write_bytes(b"M\x06old")
    (flash / "lib" / "otaboot.mpy").write_bytes(b"M\x06old")
    vb = _vb(flash, mp)
    try:
        sim, lines = boards.load("sim"), []
        copied = deploy.deploy(sim, vb.pty_path, build_dir=tmp_path / "b", reset=False, out=lines.append)
        assert copied == ["board.json", "boot.py", "main.py", deploy.MANIFEST]
        assert any(ln.startswith("the image on %s has the firmware frozen in (digest %s...)"
                                 % (vb.pty_path, fwset.firmware_digest()[:12])) for ln in lines), lines
        assert "remove lib/satellite/session.mpy (no longer in the firmware)" in lines
        assert not list((flash / "lib").rglob("*.mpy"))           # the frozen modules come first on sys.path
        assert (flash / "main.py").read_bytes() == (FIRMWARE / "main.py").read_bytes()
        assert (flash / "data" / "device.key").read_bytes() == b"\x05" * 32
        import json
        assert json.loads((flash / deploy.MANIFEST).read_text())["frozen"] == fwset.firmware_digest()
        assert _mpremote(vb.pty_path, "import satellite.session as s; print(s.__file__)") == "satellite/session.py"
        assert deploy.deploy(sim, vb.pty_path, build_dir=tmp_path / "b", reset=False, out=lambda s: None) == []
        fw = tmp_path / "fw"
        shutil.copytree(FIRMWARE, fw, ignore=shutil.ignore_patterns("__pycache__"))
        with open(fw / "satellite" / "app.py", "a") as f:
            f.write("\n# edited after the image was built\n")
        (fw / "main.py").write_text((FIRMWARE / "main.py").read_text() + "# new main\n")
        with pytest.raises(deploy.DeployError, match="froze other firmware .*--stale-image"):
            deploy.deploy(sim, vb.pty_path, root=fw, build_dir=tmp_path / "b", reset=False, out=lambda s: None)
        assert (flash / "main.py").read_bytes() == (FIRMWARE / "main.py").read_bytes()
        assert deploy.deploy(sim, vb.pty_path, root=fw, build_dir=tmp_path / "b", reset=False, stale_image=True,
                             out=lambda s: None) == ["main.py", deploy.MANIFEST]
    finally:
        vb.stop()


@pytest.mark.mp32
def test_deploy_of_the_mpy_set_where_the_heap_cannot_hold_it_is_refused(tmp_path, capsys):
    """A board file with the devkit's 130k heap, on the 32-bit interpreter without the firmware frozen: one
    line saying to build the image, nothing written (the devkit's own board file is refused earlier by the
    arch check here: the virtual board is not an ESP32-S3)."""
    from mpharness import MP32
    if not os.access(str(MP32), os.X_OK):
        pytest.skip("no 32-bit micropython: run `make mp32`")
    bf = tmp_path / "small.json"
    data = dict(boards.load("sim").data, id="small", heap="130k")
    import json
    bf.write_text(json.dumps(data))
    flash = tmp_path / "flash"
    flash.mkdir()
    vb = _vb(flash, str(MP32), heap="512k")
    try:
        rc = cli.main(["deploy", "--board", str(bf), "--port", vb.pty_path, "--build-dir", str(tmp_path / "b"),
                       "--no-reset"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 1 and len(err) == 1, err
        assert err[0].startswith("alabama: error: board small's heap (130k) cannot hold the firmware as .mpy files")
        assert "`make image BOARD=small`" in err[0] and err[0].endswith("--allow-mpy to deploy the .mpy files anyway")
        assert not (flash / "lib").exists() and not (flash / "main.py").exists()
    finally:
        vb.stop()


def test_an_image_without_the_c_modules_is_refused_in_one_line(tmp_path):
    fw = tmp_path / "fw"
    shutil.copytree(FIRMWARE, fw, ignore=shutil.ignore_patterns("__pycache__", "native"))
    env, which = fake_idf(tmp_path)
    with pytest.raises(image.ImageError, match="^no .*native/micropython.cmake: the image builds the C modules"):
        image.build(boards.load("devkitc1-inmp441"), src=fake_source(tmp_path), out=tmp_path / "out", dry_run=True,
                    env=env, which=which, say=lambda s: None, root=fw)


def test_the_ota_partition_table_and_sdkconfig_against_micropython_v1_27_0():
    """At the tag: partitions-8MiBplus-ota.csv has otadata and two app slots of APP_SLOT bytes ending inside
    8 MiB (the filesystem takes the rest: ports/esp32/main.c), the generic S3 board's defaults end with a
    factory table our fragment replaces, and sdkconfig.base already enables the rollback we set again."""
    if not MIRROR.is_dir():
        pytest.skip("no MicroPython git mirror")

    def show(path):
        r = subprocess.run(["git", "--git-dir", str(MIRROR), "show", "v1.27.0:" + path], capture_output=True, text=True)
        if r.returncode:
            pytest.skip("v1.27.0 not in the mirror")
        return r.stdout

    rows = {}
    for ln in show("ports/esp32/" + image.PARTITIONS).splitlines():
        f = [c.strip() for c in ln.split(",")]
        if ln.strip() and not ln.startswith("#"):
            rows[f[0]] = (f[1], f[2], int(f[3], 16), int(f[4], 16))
    assert rows["otadata"][:2] == ("data", "ota") and rows["otadata"][3] == 0x2000
    assert rows["ota_0"] == ("app", "ota_0", image.APP_OFFSET, image.APP_SLOT)
    assert rows["ota_1"][:2] == ("app", "ota_1") and rows["ota_1"][3] == image.APP_SLOT
    assert max(off + size for _, _, off, size in rows.values()) <= 8 * 1024 * 1024
    from alabama.board.simchip import esp32 as chip        # the virtual board models the same table
    assert {k: (v[2], v[3]) for k, v in chip.TABLE.items()} == {k: rows[k][2:] for k in chip.TABLE}
    base = show("ports/esp32/boards/sdkconfig.base")
    assert "CONFIG_BOOTLOADER_APP_ROLLBACK_ENABLE=y" in base and '"partitions-4MiBplus.csv"' in base
    cmake = show("ports/esp32/boards/ESP32_GENERIC_S3/mpconfigboard.cmake")
    assert "SDKCONFIG_DEFAULTS" in cmake and "sdkconfig.base" in cmake
    combined = base + show("ports/esp32/boards/ESP32_GENERIC_S3/sdkconfig.board") + image.SDKCONFIG_OTA
    last = [ln for ln in combined.splitlines() if ln.startswith("CONFIG_PARTITION_TABLE_CUSTOM_FILENAME=")][-1]
    assert last == 'CONFIG_PARTITION_TABLE_CUSTOM_FILENAME="%s"' % image.PARTITIONS
    assert "BOARD_DIR" in show("ports/esp32/Makefile")      # an out-of-tree board directory is supported
