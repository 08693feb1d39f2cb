"""The satellite's RAM budget: what each firmware module and each preallocated buffer costs in the heap.

For every micropython unix port available (the venv's 64-bit one and the 32-bit build of `make mp32`,
whose word size is the ESP32-S3's), the firmware is compiled with mpy-cross for that interpreter's native
arch exactly as `alabama deploy` / the virtual board install it, then imported module by module in
dependency order (leaves first), each delta being gc.mem_free() before and after the import (after
gc.collect()). The buffers are the ones satellite.buffers.sizes() gives for the board file, allocated one by
one the same way. The 32-bit column IS the 32-bit object figure (no correction factor); the board's own
.mpy (xtensawin) differ only in the size of the viper modules' machine code, listed beside them.

    .venv/bin/python tools/bench/run.py memory                # the devkitc1-inmp441 board file
    .venv/bin/python tools/bench/bench_memory.py --board sim --json /tmp/mem.json

It prints a markdown table (docs/memory.md holds a copy, with the interpreter and the date of the run).
A memory figure is a report, never an assertion: the functional proof that the firmware fits is the
virtual board running every scenario at the board file's heap (tests/host, `alabama hil --board sim`).
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "host"))

#: Imported on every boot of a board (app.boot: the buffers, keystore, x25519, runtime with everything it
#: imports, the HAL; boot.py's otaboot leaves sys.modules before main.py runs), leaves first so that each
#: delta is the module's own cost (satellite.device imports the small satellite.hal package for the gesture
#: codes: its cost lands in device's row). Package __init__ modules are listed where first needed.
#: tests/host/test_memory_fit.py checks that this list plus the board's HAL is exactly what app.boot leaves in
#: sys.modules.
BOOT = [
    "satellite", "satellite.wire", "satellite.wire._copy", "satellite.wire._copy_viper", "satellite.wire.pb",
    "satellite.wire.alabama_v1", "satellite.wire.frame",
    "satellite.noise", "satellite.noise._chacha_viper", "satellite.noise.chachapoly",
    "satellite.noise._x25519_viper", "satellite.noise.x25519", "satellite.noise.hkdf", "satellite.noise.state",
    "satellite.noise.transport",
    "satellite.buffers", "satellite.session", "satellite._audio_viper", "satellite.audio",
    "satellite.keystore", "satellite.provision", "satellite.provision.record",
    "satellite.link", "satellite.device", "satellite.runtime", "satellite.app",
]
#: The ChaCha20 kernel chachapoly picks by word size: the 32-bit one on the board and the 32-bit build.
CHACHA32 = "satellite.noise._chacha32_viper"


def boot_modules(maxsize):
    """BOOT as an interpreter of that sys.maxsize imports it."""
    return [CHACHA32 if n == "satellite.noise._chacha_viper" and maxsize < (1 << 32) else n for n in BOOT]


#: The HAL: one of these per board (esp32 on the chip, with stub machine/network modules here; sim on the
#: virtual board). es8311/es7210 only on boards with codec chips.
HALS = ["satellite.hal", "satellite.hal.esp32", "satellite.hal.sim", "satellite.hal.es8311",
        "satellite.hal.es7210"]
#: Cold paths: imported only when they run (a press imports gesture; listening mode the rest).
COLD = ["satellite.provision.gesture", "satellite.provision.rs", "satellite.provision._goertzel_pure",
        "satellite.provision._goertzel_viper", "satellite.provision.ggwave_rx", "satellite.provision.listen"]
#: From the first session on (Runtime.health: the device.info / firmware.update tools, the device.health Event).
SESSION = ["otaboot", "satellite.health"]
#: The DEFERRED store (docs/deferred.md): imported by app.boot only when the store holds something, else at the
#: first offline press (app.IdleDeferred stands in until then); its Deferred object is measured beside it.
DEFERRED = ["satellite.deferred"]
#: Only while a firmware.update runs (satellite.health imports it then), or while a new firmware is on trial
#: (runtime.Runtime imports satellite.trial then, docs/ota.md "The trial").
OTA = ["satellite.ota", "satellite.trial"]
#: The pure twins of the viper modules: imported only where the native emitter is missing.
FALLBACK = ["satellite.noise._chacha_pure", "satellite.noise._poly1305_pure", "satellite.noise._x25519_pure",
            "satellite._audio_pure"]
#: Only on a board whose board file has a "display" section (runtime.Runtime imports them then; imgdec when an
#: image is first shown; simpanel or ili9342 by the HAL). A board without a panel pays none of it.
DISPLAY = ["satellite.font8x16", "satellite.display", "satellite.imgdec", "satellite.hal.simpanel",
           "satellite.hal.ili9342"]

BUFFERS = ("socket read chunk (RX_CHUNK)", "Noise receive (prefix + max_frame_bytes + 16 tag)",
           "frame reassembly (max_frame_bytes + 10 prefix)", "jitter ring (buffer_ms + 1 frame, >= LISTEN_RING: the ggwave ring when listening)",
           "playout step (20 ms)", "Noise send (TX_CAPACITY + 18)")

# Stand-ins for the board-only modules hal/esp32.py imports at module level (their own RAM is the port's,
# not the firmware's: they are built into the image).
STUB_MACHINE = "class I2S:\n    pass\n\n\nclass Pin:\n    pass\n"
STUB_NETWORK = ""

PROBE = r"""
import gc, sys, json
def free():
    gc.collect()
    gc.collect()
    return gc.mem_free()
out = {"base": free(), "mods": [], "bufs": [], "boot": []}
def load(names):
    for n in names:
        if n in sys.modules:
            out["mods"].append([n, 0, "loaded earlier"])
            continue
        f0 = free()
        try:
            __import__(n)
            note = ""
        except ImportError as e:
            note = "not importable: %%s" %% e
        out["mods"].append([n, f0 - free(), note])
boot = %(boot)r
if sys.maxsize < (1 << 32):
    boot = [%(chacha32)r if n == "satellite.noise._chacha_viper" else n for n in boot]
load(boot)
for r in out["mods"]:
    if r[0] == %(chacha32)r:
        r[0] = "satellite.noise._chacha_viper"        # one row: the twin this word size imports
load(%(hals)r)
out["boot"] = sorted(k for k in sys.modules if k.startswith("satellite") or k == "otaboot")
load(%(session)r)
load(%(cold)r)
load(%(deferred)r)
with open(%(board)r) as f:
    board = json.load(f)
class _Rt:                                            # what Deferred.__init__ reads of the runtime
    hal = None
    mic_rate = ((board.get("audio") or {}).get("mic") or {}).get("rates", [16000])[0]
    def log(self, line):
        pass
f0 = free()
from satellite import deferred
d = deferred.Deferred(_Rt(), deferred.Store("data/deferred", 1 << 20, None))
out["mods"].append(["deferred.Deferred", f0 - free(), ""])
load(%(ota)r)
load(%(fallback)r)
load(%(display)r)
out["after_modules"] = free()
from satellite import buffers
keep = []
for i, n in enumerate(buffers.sizes(board)):
    f0 = free()
    keep.append(bytearray(n if i != 3 or n > buffers.LISTEN_RING else buffers.LISTEN_RING))   # as Buffers does
    out["bufs"].append([i, len(keep[-1]), f0 - free()])
out["mpy"] = sys.implementation._mpy
out["version"] = ".".join(str(x) for x in sys.implementation.version[:3])
out["maxsize"] = sys.maxsize
print("MEMJSON " + json.dumps(out))
"""


def frozen_interpreter():
    """build/mp32-frozen/micropython (tools/mp32/build_frozen.sh) when it froze the firmware on disk, else None."""
    mp = REPO / "build" / "mp32-frozen" / "micropython"
    if not os.access(str(mp), os.X_OK):
        print("bench_memory: no frozen column (no %s: run tools/mp32/build_frozen.sh)" % mp, file=sys.stderr)
        return None
    want = subprocess.run("find . -name '*.py' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16",
                          shell=True, capture_output=True, text=True, cwd=str(REPO / "firmware")).stdout.strip()
    stamp = mp.parent / "STAMP"
    if not stamp.exists() or stamp.read_text().strip() != want:
        print("bench_memory: no frozen column (%s froze other firmware than firmware/: run "
              "tools/mp32/build_frozen.sh)" % mp, file=sys.stderr)
        return None
    return str(mp)


def interpreters():
    """(label, micropython, frozen): the 64-bit port, the 32-bit build, and the 32-bit build with the firmware
    frozen into it (the deploy path that fits the no-PSRAM board, docs/memory.md)."""
    from alabama import local
    found = [("64-bit", local.find_micropython(), False)]
    mp32 = pathlib.Path(os.environ.get("ALABAMA_MICROPYTHON32", REPO / "build" / "mp32" / "micropython"))
    if os.access(str(mp32), os.X_OK):
        found.append(("32-bit", str(mp32), False))
        fz = frozen_interpreter()
        if fz:
            found.append(("32-bit frozen", fz, True))
    return found


def measure(micropython, board, build_root, frozen=False):
    from alabama.board import deploy, fwset, sim
    march = sim.native_march(micropython)
    files = fwset.build(march, build_dir=build_root, out=lambda *a: None)
    lib = pathlib.Path(files["lib/satellite/__init__.mpy"]).parent.parent
    if frozen:
        march += ", frozen"
    with tempfile.TemporaryDirectory() as tmp:
        t = pathlib.Path(tmp)
        (t / "stubs").mkdir()
        (t / "stubs" / "machine.py").write_text(STUB_MACHINE)
        (t / "stubs" / "network.py").write_text(STUB_NETWORK)
        bj = t / "board.json"
        bj.write_bytes(deploy.board_json_bytes(board))
        code = PROBE % {"boot": BOOT, "chacha32": CHACHA32, "hals": HALS, "cold": COLD, "session": SESSION,
                        "deferred": DEFERRED, "ota": OTA, "fallback": FALLBACK, "display": DISPLAY, "board": str(bj)}
        # The stubs come after lib so they shadow nothing of the firmware; a roomy heap: this measures.
        path = ".frozen:%s" % (t / "stubs") if frozen else "%s:.frozen:%s" % (lib, t / "stubs")
        env = dict(os.environ, MICROPYPATH=path)
        p = subprocess.run([micropython, "-X", "heapsize=4m", "-c", code], capture_output=True, text=True,
                           cwd=tmp, env=env, timeout=120)
    for line in p.stdout.splitlines():
        if line.startswith("MEMJSON "):
            r = json.loads(line[8:])
            r["march"] = march
            q = subprocess.run([micropython, "-X", "heapsize=%s" % board.heap, "-c",
                                "import gc; gc.collect(); print(gc.mem_free())"], capture_output=True, text=True,
                               timeout=30)
            r["heap_free"] = int(q.stdout.strip())
            return r
    raise SystemExit("bench_memory: %s printed no result (exit %d): %s" % (micropython, p.returncode,
                                                                          (p.stderr or p.stdout)[-800:]))


def xtensa_sizes(build_root):
    from alabama.board import fwset
    files = fwset.build("xtensawin", build_dir=build_root, out=lambda *a: None)
    return {rel[4:-4].replace("/", "."): pathlib.Path(src).stat().st_size
            for rel, src in files.items() if rel.endswith(".mpy")}


def heap_bytes(text):
    n, unit = text[:-1], text[-1].lower()
    if unit == "k":
        return int(n) * 1024
    if unit == "m":
        return int(n) * 1024 * 1024
    return int(text)


def row_label(n):
    if n == "satellite.noise._chacha_viper":
        return "noise._chacha_viper (_chacha32_viper on 32 bits)"
    if n == "deferred.Deferred":
        return "its Deferred + Store (batch 8 records, 1 record)"
    return n[len("satellite."):] if n.startswith("satellite.") else n if n != "satellite" else "satellite"


def mpy_name(n):
    """The module the board (32-bit xtensawin) loads for row n."""
    return CHACHA32 if n == "satellite.noise._chacha_viper" else n


def table(results, board, mpy_sizes):
    cols = [label for label, _ in results]
    rows = []
    head = "| module | " + " | ".join("%s (%s)" % (c, r["march"]) for c, r in results) + " | .mpy xtensawin |"
    rows.append(head)
    rows.append("|" + "---|" * (len(cols) + 2))
    by = [{m[0]: m for m in r["mods"]} for _, r in results]
    boot = set(results[-1][1]["boot"])

    def mod_rows(names, title):
        rows.append("| **%s** |" % title + " |" * (len(cols) + 1))
        tot = [0] * len(cols)
        for n in names:
            cells = []
            for i, b in enumerate(by):
                d, note = b[n][1], b[n][2]
                tot[i] += d
                cells.append(("%d" % d) if not note else ("%d (%s)" % (d, note[:40])))
            rows.append("| %s | %s | %s |" % (row_label(n), " | ".join(cells),
                                              mpy_sizes.get(mpy_name(n), mpy_sizes.get(n + ".__init__", ""))))
        rows.append("| *subtotal* | %s | |" % " | ".join("*%d*" % t for t in tot))
        return tot

    t_boot = mod_rows(BOOT, "imported at boot")
    t_hal = mod_rows(HALS, "HAL (one per board)")
    t_sess = mod_rows(SESSION, "from the first session on (satellite.health and its otaboot)")
    t_cold = mod_rows(COLD, "cold paths (lazy)")
    t_def = mod_rows(DEFERRED + ["deferred.Deferred"], "DEFERRED store (only with something queued or recording)")
    mod_rows(OTA, "OTA (only during a firmware.update or a trial)")
    mod_rows(FALLBACK, "pure twins (only without the native emitter)")
    mod_rows(DISPLAY, "display (only on a board with a panel; docs/display.md)")
    rows.append("| **buffers for %s** |" % board.id + " |" * (len(cols) + 1))
    t_buf = [0] * len(cols)
    bufs = [{b[0]: b for b in r["bufs"]} for _, r in results]
    for i in range(len(BUFFERS)):
        name = BUFFERS[i]
        cells = []
        for j, b in enumerate(bufs):
            t_buf[j] += b[i][2]
            cells.append("%d" % b[i][2])
        rows.append("| %s: %d B | %s | |" % (name, bufs[0][i][1], " | ".join(cells)))
    rows.append("| *subtotal* | %s | |" % " | ".join("*%d*" % t for t in t_buf))
    heap = heap_bytes(board.heap)
    usable = [r.get("heap_free", heap) for _, r in results]
    esp_hal = [by[i]["satellite.hal.esp32"][1] for i in range(len(cols))]
    sim_hal = [by[i]["satellite.hal.sim"][1] for i in range(len(cols))]
    on_chip = [t_boot[i] + esp_hal[i] + t_buf[i] for i in range(len(cols))]
    rows.append("| **board at rest** (boot modules + esp32 HAL + buffers) | %s | |"
                % " | ".join("**%d**" % v for v in on_chip))
    rows.append("| free in a fresh `-X heapsize=%s` (%d B) | %s | |"
                % (board.heap, heap, " | ".join("%d" % u for u in usable)))
    rows.append("| headroom at rest | %s | |"
                % " | ".join("%d (%.0f %%)" % (usable[i] - v, 100.0 * (usable[i] - v) / heap)
                             for i, v in enumerate(on_chip)))
    rows.append("| + the first session's modules (health, otaboot) | %s | |"
                % " | ".join("%d left" % (usable[i] - on_chip[i] - t_sess[i]) for i in range(len(cols))))
    rows.append("| + listening mode (cold paths) | %s | |"
                % " | ".join("%d left" % (usable[i] - on_chip[i] - t_cold[i]) for i in range(len(cols))))
    rows.append("| + DEFERRED store loaded (recordings queued) | %s | |"
                % " | ".join("%d left" % (usable[i] - on_chip[i] - t_def[i]) for i in range(len(cols))))
    rows.append("| virtual board at rest (sim HAL instead of esp32) | %s | |"
                % " | ".join("%d" % (t_boot[i] + sim_hal[i] + t_buf[i]) for i in range(len(cols))))
    if len(cols) >= 2 and on_chip[1]:
        rows.append("| 64-bit / 32-bit | %.2fx |" % (on_chip[0] / on_chip[1]) + " |" * len(cols))
    return "\n".join(rows), boot


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", default="devkitc1-inmp441", help="board file (default devkitc1-inmp441)")
    ap.add_argument("--json", metavar="PATH", help="also write the raw figures here")
    args = ap.parse_args(argv)
    from alabama.board import boards
    board = boards.load(args.board)
    build_root = REPO / "build" / "memory"
    results = [(label, measure(mp, board, build_root, frozen)) for label, mp, frozen in interpreters()]
    text, boot = table(results, board, xtensa_sizes(build_root))
    print("satellite RAM budget, board %s, %s" % (board.id, datetime.date.today().isoformat()))
    for label, r in results:
        print("  %s: micropython %s (.mpy arch %s), fresh heap free %d" % (label, r["version"], r["march"],
                                                                           r["base"]))
    print()
    print(text)
    print()
    print("imported at boot (sys.modules after the boot set and the HALs): %s"
          % ", ".join(row_label(m) for m in sorted(boot)))
    leaked = [m for m in SESSION + COLD + DEFERRED + OTA if m in boot]
    print("cold modules loaded at boot: %s" % (", ".join(leaked) if leaked else "none"))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"board": board.id, "results": dict(results)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
