"""The firmware fits each board file's heap (issues 12 and 17): boot it the way app.main does, on the 32-bit
unix port (4-byte words like the ESP32-S3) with `-X heapsize=` the board file's `heap` as-is, from the
same .mpy files deploy installs, and check what is left.

Per board: satellite.app.boot itself (what app.main runs before the event loop: the long-lived buffers first,
every module imported at boot, the board's HAL, a Runtime and the DEFERRED store's stand-in), with the HAL made
here: satellite.hal.esp32 with a few-line stand-in for `machine`, the real one being in the image's ROM, or on
codec boards tests/firmware/fake_machine, whose own cost is credited back; satellite.hal.sim on the virtual
board. It fits when, at rest, at least FREE_AT_REST of the heap is still free (a connection adds satellite.health
and otaboot, ~6 KB resident and the handshake's garbage, docs/memory.md) and listening mode after a session (the
first session's satellite.health, then the lazy provisioning modules and a ggwave receiver: the five-press
gesture's path, the highest) still loads. A MemoryError anywhere is "does not fit". This test fails when the
firmware outgrows a board heap.

Two legs: `mpy`, the deploy path of today (.mpy files on the filesystem, loaded into RAM), and `frozen`, the
same firmware frozen into the interpreter as a custom image would carry it (tools/mp32/build_frozen.sh; the
leg skips, saying so, where that build is missing or froze other firmware than firmware/ holds). The no-PSRAM
devkit (130k, boards/devkitc1-inmp441.json notes) does not fit on the `mpy` leg today: that case is a strict
xfail, so it turns into a failure the day the firmware fits and the mark must go."""
import json
import os
import pathlib
import re
import subprocess
import tempfile

import pytest

from mpharness import MP32, ROOT

MP32_FROZEN = ROOT / "build" / "mp32-frozen" / "micropython"

#: share of the board heap that must stay free at rest
FREE_AT_REST = 0.125

PROBE = r"""
import gc, sys, json, micropython
def free():
    gc.collect()
    gc.collect()
    return gc.mem_free()
spare = bytearray(1024)  # released first by the MemoryError handler: the report itself needs some room
e = None
out = {"start": free()}
board = json.load(open("board.json"))
try:
    out["fake"] = 0
    class _Pin:
        IN = OUT = PULL_UP = PULL_DOWN = IRQ_FALLING = IRQ_RISING = 0
        def __init__(self, *a, **k):
            pass
        def value(self, *a):
            return 1
        def irq(self, *a, **k):
            pass
    class _Machine:                                   # what a board without codec chips touches at boot
        Pin = _Pin
        I2S = None
        def freq(hz):
            pass
    class _Clock:
        def ticks_ms():
            return 0
        def ticks_us():
            return 0
        def ticks_diff(a, b):
            return a - b
    def new_hal(board):                               # app.boot calls it where app.make_hal would run
        if board.get("chip") == "unix":
            from satellite.hal.sim import SimHal
            return SimHal(board)
        from satellite.hal.esp32 import Esp32Hal
        class _NP:
            class NeoPixel:
                def __init__(self, pin, n):
                    self.px = [(0, 0, 0)] * n
                def __setitem__(self, i, v):
                    pass
                def write(self):
                    pass
        if board.get("codecs"):
            f0 = free()
            import fake_machine                     # I2C and the codec chips' registers: the fake (credited)
            out["fake"] = f0 - free()
            fm = fake_machine.FakeMachine()
            return Esp32Hal(board, machine=fm, neopixel=_NP, clock=fm.clock)
        return Esp32Hal(board, machine=_Machine, neopixel=_NP, clock=_Clock)
    with open("boot.py") as f:
        exec(f.read(), {})                            # the board's boot.py first (otaboot), as on every reset
    from satellite import app
    rt = app.boot(board, new_hal=new_hal)             # as app.main does, up to the event loop
    rt.hal.log = rt._log = lambda line: None
    bufs = rt.buffers
    out["rest_free"] = free() + out["fake"]
    out["modules"] = sorted(k for k in sys.modules if k.startswith("satellite") or k == "otaboot")
    rt.health                                         # what the first session imports (satellite.health)
    out["session_free"] = free() + out["fake"]
    from satellite.provision import listen, ggwave_rx
    rx = ggwave_rx.GgwaveReceiver(ring=bufs.ring)        # as Runtime._wait_reprovision lends it
    out["listen_free"] = free() + out["fake"]
except MemoryError as e:
    spare = None
    out["error"] = "MemoryError: %s" % e
    bufs = hal = rt = rx = None                       # room to report in: forget what was loaded
    for k in [k for k in sys.modules if k.startswith("satellite") or k == "fake_machine"]:
        del sys.modules[k]
    out["failed_free"] = free()
print("FITJSON " + json.dumps(out))
"""


def _boards():
    from alabama.board import boards
    return sorted(boards.load_all(), key=lambda b: b.id)


def _heap_bytes(text):
    m = re.fullmatch(r"(\d+)([km]?)", text.lower())
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2)]


@pytest.fixture(scope="module")
def lib_dir():
    if not os.access(str(MP32), os.X_OK):
        if os.environ.get("CI"):
            pytest.fail("no 32-bit micropython at %s: run `make mp32`" % MP32, pytrace=False)
        pytest.skip("no 32-bit micropython at %s: run `make mp32`" % MP32)
    from alabama.board import fwset, sim
    march = sim.native_march(str(MP32))
    files = fwset.build(march, build_dir=ROOT / "build" / "memfit", out=lambda *a: None)
    lib = pathlib.Path(files["lib/satellite/__init__.mpy"]).parent.parent
    extra = ROOT / "build" / "memfit" / march / "_test"
    extra.mkdir(parents=True, exist_ok=True)
    fwset.run_mpy_cross(["-march=" + march, "-o", str(extra / "fake_machine.mpy"),
                         str(ROOT / "tests" / "firmware" / "fake_machine.py")])
    return "%s:%s:.frozen" % (lib, extra)


def _frozen_interpreter():
    """build/mp32-frozen/micropython when built from the committed firmware, else skip saying why."""
    if not os.access(str(MP32_FROZEN), os.X_OK):
        pytest.skip("no frozen-firmware interpreter: run tools/mp32/build_frozen.sh")
    want = subprocess.run("find . -name '*.py' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16",
                          shell=True, capture_output=True, text=True, cwd=str(ROOT / "firmware")).stdout
    got = (MP32_FROZEN.parent / "STAMP").read_text() if (MP32_FROZEN.parent / "STAMP").exists() else ""
    if want.strip() != got.strip():
        pytest.skip("build/mp32-frozen froze other firmware than firmware/: run tools/mp32/build_frozen.sh again")
    return str(MP32_FROZEN)


def fit(board, path, micropython=None, flash=None):
    """Boot in a fresh directory holding board.json and `flash` ({relative path: bytes}: the board's files)."""
    from alabama.board import deploy
    with tempfile.TemporaryDirectory() as tmp:
        pathlib.Path(tmp, "board.json").write_bytes(deploy.board_json_bytes(board))
        pathlib.Path(tmp, "boot.py").write_bytes((ROOT / "firmware" / "boot.py").read_bytes())
        for rel, data in (flash or {}).items():
            f = pathlib.Path(tmp, rel)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data)
        p = subprocess.run([micropython or str(MP32), "-X", "heapsize=%s" % board.heap, "-c", PROBE], capture_output=True,
                           text=True, cwd=tmp, env=dict(os.environ, MICROPYPATH=path), timeout=120)
    for line in p.stdout.splitlines():
        if line.startswith("FITJSON "):
            return json.loads(line[8:])
    raise AssertionError("the probe printed no result (exit %d): %s" % (p.returncode, (p.stderr or p.stdout)[-800:]))


BOARDS = [b.id for b in _boards()]


@pytest.mark.mp32
@pytest.mark.parametrize("board_id", [
    pytest.param(i, marks=pytest.mark.xfail(strict=True, reason=(
        "the firmware does not fit the no-PSRAM devkit's 130k heap yet (docs/memory.md: ~181 KB at rest on "
        "32 bits from .mpy files, ~73 KB frozen); remove this mark when it does"))) if i == "devkitc1-inmp441" else i for i in BOARDS])
def test_firmware_fits_the_board_heap_at_rest_and_in_listening_mode(board_id, lib_dir):
    from alabama.board import boards
    board = boards.load(board_id)
    heap = _heap_bytes(board.heap)
    r = fit(board, lib_dir)
    assert "error" not in r, "%s: the firmware does not fit -X heapsize=%s: %s at boot" % (
        board_id, board.heap, r["error"])
    assert r["rest_free"] >= FREE_AT_REST * heap, "%s: %d B free at rest of %d: under %d %%" % (
        board_id, r["rest_free"], heap, 100 * FREE_AT_REST)
    assert r["listen_free"] > 0
    assert "satellite.provision.ggwave_rx" not in r["modules"], "the ggwave receiver is loaded at boot"


@pytest.mark.mp32
@pytest.mark.parametrize("board_id", BOARDS)
def test_frozen_firmware_fits_the_board_heap(board_id, lib_dir):
    """The deploy path that fits the no-PSRAM devkit: the firmware frozen (bytecode in flash), measured on the
    32-bit port with the board heap as-is. Only the test helpers come from the filesystem."""
    from alabama.board import boards
    mp = _frozen_interpreter()
    board = boards.load(board_id)
    heap = _heap_bytes(board.heap)
    r = fit(board, ".frozen:" + lib_dir.split(":")[1], micropython=mp)
    assert "error" not in r, "%s: frozen firmware does not fit -X heapsize=%s: %s" % (
        board_id, board.heap, r["error"])
    assert r["rest_free"] >= FREE_AT_REST * heap and r["listen_free"] > 0, r


@pytest.mark.mp32
def test_the_fit_check_fails_on_a_heap_the_firmware_cannot_fit(lib_dir):
    """The same probe on a heap smaller than the boot modules alone: it must report a MemoryError, so the
    check above cannot pass by measuring nothing."""
    from alabama.board import boards
    board = boards.load("sim")
    board.heap = "64k"
    r = fit(board, lib_dir)
    assert "error" in r and r["error"].startswith("MemoryError")


@pytest.mark.mp32
def test_deploys_mpy_heap_figure_is_the_measured_one(lib_dir):
    """alabama deploy refuses the .mpy set on a board file whose heap cannot hold deploy.MPY_SET_AT_REST: that
    constant must stay what the devkit's boot at rest really takes (within 10 %), measured here on a heap
    large enough to boot, so the refusal follows the firmware as it grows or shrinks."""
    from alabama.board import boards, deploy
    board = boards.load("devkitc1-inmp441")
    board.heap = "1m"                                 # as docs/memory.md's "used at rest" figures
    r = fit(board, lib_dir)
    assert "error" not in r, r
    used = r["start"] - r["rest_free"]               # the boot's own cost, not the GC's tables
    assert abs(used - deploy.MPY_SET_AT_REST) <= 0.10 * used, (
        "the devkit's .mpy firmware takes %d B at rest; deploy.MPY_SET_AT_REST says %d: update it"
        % (used, deploy.MPY_SET_AT_REST))


#: Loaded only when their path runs, never by a boot at rest (docs/memory.md, tools/bench/bench_memory.py).
COLD_AT_REST = ("satellite.deferred", "satellite.ota", "satellite.trial", "satellite.health", "otaboot",
                "satellite.provision.listen",
                "satellite.provision.ggwave_rx", "satellite.provision.gesture", "satellite.wire.pbtable")

#: A DEFERRED store on flash with one recording queued (satellite.deferred's index layout: header, then one line
#: per recording "<n> <count> <nframes> <rate> <done> <fails> <boot> <anchor>"), one 648-byte record.
QUEUED = {"data/deferred/idx": b"v1 abababab 2 0 1\n1 1 320 16000 1 0 1 -\n", "data/deferred/1.rec": bytes(648)}


def _bench_memory():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_memory", ROOT / "tools" / "bench" / "bench_memory.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


@pytest.mark.mp32
@pytest.mark.parametrize("board_id", ["devkitc1-inmp441", "sim"])
def test_a_boot_at_rest_imports_no_cold_module_and_exactly_the_budget_tables_boot_list(board_id, lib_dir):
    """At rest with nothing queued the DEFERRED store, health, OTA and the provisioning paths stay unloaded; and
    what app.boot leaves in sys.modules is the boot list of tools/bench/bench_memory.py plus the board's HAL, so
    the budget table in docs/memory.md prices what a board really loads. The same boot with a recording queued
    on flash does load satellite.deferred (the store has work: boot recovery, then the upload), so the first
    check can fail."""
    from alabama.board import boards
    bm = _bench_memory()
    board = boards.load(board_id)
    board.heap = "1m"                            # room to boot the .mpy firmware on every board: this checks imports
    r = fit(board, lib_dir)
    assert "error" not in r, r
    mods = set(r["modules"])
    assert not mods & set(COLD_AT_REST), "cold modules imported at boot: %s" % sorted(mods & set(COLD_AT_REST))
    want = set(bm.boot_modules((1 << 31) - 1))
    if (board.data.get("wake") or {}).get("models"):
        want.add("satellite.wake")               # a board with wake models lists them at boot (runtime: WAKE_WORDS)
    assert mods - set(bm.HALS) == want, ("app.boot and bench_memory.BOOT disagree: only imported %s, only listed %s"
                                         % (sorted(mods - set(bm.HALS) - want), sorted(want - mods)))
    assert {"satellite.hal", "satellite.hal.sim" if board_id == "sim" else "satellite.hal.esp32"} <= mods
    q = fit(board, lib_dir, flash=QUEUED)
    assert "error" not in q, q
    assert "satellite.deferred" in q["modules"], "a queued recording did not load the DEFERRED store at boot"
