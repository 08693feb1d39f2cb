"""Benchmark of the wake-word audio frontend (satellite/wake/frontend.py, issue 37 item 4's frontend share):
its cost per 10 ms step as the AEAD bench measures cost, beside the AEAD frame figure in the same run, and
its RAM. Prints; asserts nothing (tests/firmware/test_wake_frontend.py proves exactness and 0 B per step).

* callgrind: x86 instructions per 10 ms step, viper path, on the 32-bit build (build/mp32, the board's word
  size) and the venv's 64-bit unix port: the difference of two runs of K1 and K2 steps over espeak-ng
  speech from the test corpus; and the bytecode glue alone (Frontend.step over viper stubs that do nothing).
* Xtensa: static counts of what mpy-cross -march=xtensawin emits for each stage (xtensa-lx106-elf-objdump):
  each loop body priced by compiling the function with and without it, times its trip count per step
  (every trip count is fixed except the square root's, priced at its bound of 24 bit pairs per channel;
  both arms of a branch are counted, so the figure is an upper bound), plus the x86 glue.
  The step is priced on speech; its cost hardly depends on the audio (fixed trip counts but the root's).
* c: the same for the C module _wake_fe_c (firmware/native/wake_fe.c, the board image's path): its stages'
  static Xtensa counts as xtensa-lx106-elf-gcc -O2 compiles them, times their trip counts, plus the x86
  callgrind count of everything around them on the 32-bit build (bytecode and the binding's checks).
* AEAD: bench_crypto_aead's callgrind figure for one 20 ms frame each way (the same driver, same run).
* RAM: heap bytes of importing the frontend (tables included: a .mpy's bytes constants are heap; frozen,
  they stay in flash) and of one Frontend, on the 32-bit build (4-byte words and headers, as the board).

    .venv/bin/python tools/bench/bench_wake_frontend.py
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools" / "bench"), str(ROOT / "tools" / "wake")]
MP64 = pathlib.Path(sys.executable).parent / "micropython"
MP32 = ROOT / "build" / "mp32" / "micropython"
HZ = 240e6
STEPS_PER_S = 100
K1, K2 = 20, 220

_DRIVER = """
import sys, gc
from array import array
from satellite.wake import frontend as FE
k = int(sys.argv[1]); stub = sys.argv[2] == "stub"
with open(sys.argv[3], "rb") as f:
    pcm = f.read()
fe = FE.Frontend(impl=sys.argv[4] if len(sys.argv) > 4 else "viper")
if stub:
    import micropython
    @micropython.viper
    def z4(a, b, c, d) -> int:
        return 0
    @micropython.viper
    def z5(a, b, c, d, e) -> int:
        return 0
    @micropython.viper
    def z6(a, b, c, d, e, f) -> int:
        return 0
    @micropython.viper
    def z3(a, b, c) -> int:
        return 0
    fe._f = (z4, z3, z4, z3, z6, z5)
out = array("H", bytes(80))
n = len(pcm) // 320
i = 0
while i < k:
    fe.step(pcm, (i % n) * 320, out)
    i += 1
"""

_RAM = """
import gc
from array import array
gc.collect()
a = gc.mem_alloc()
from satellite.wake import frontend as FE
gc.collect()
b = gc.mem_alloc()
fe = FE.Frontend()
gc.collect()
c = gc.mem_alloc()
print('{"import": %d, "instance": %d, "impl": "%s"}' % (b - a, c - b, FE.IMPL))
"""


def _script(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    f.write(text)
    f.close()
    return f.name


def _run(mp, script, args, valgrind=False):
    env = dict(os.environ, MICROPYPATH=str(ROOT / "firmware"), PYTHONHASHSEED="0")
    cmd = (["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] if valgrind else []) + \
        [str(mp), script] + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, cwd=str(ROOT))
    if r.returncode:
        raise SystemExit("micropython failed:\n" + r.stdout + r.stderr[-2000:])
    return r


def callgrind_per_step(mp, speech, stub=False, impl="viper"):
    drv = _script(_DRIVER)
    try:
        n = []
        for k in (K1, K2):
            r = _run(mp, drv, [k, "stub" if stub else "real", speech, impl], valgrind=True)
            n.append(int(re.search(r"Collected\s*:\s*(\d+)", r.stderr).group(1)))
        return (n[1] - n[0]) / (K2 - K1)
    finally:
        os.unlink(drv)


#: the C functions the Xtensa count prices; the helpers are inlined into the stages there (xtensa-lx106-elf-gcc -O2),
#: called on the -Os x86 build
C_STAGES = ("fe_push", "fe_window", "fe_fft", "fe_energy", "fe_filterbank", "fe_post", "fe_step", "floor_log2", "le16u",
            "le16s", "fixdiv4")


def callgrind_c_step(mp, speech):
    """(x86 instructions per step on the C stages, of them inside the stages' C code itself): the rest is the
    bytecode around them and the binding's checks."""
    import bench_wake as W
    drv = _script(_DRIVER)
    try:
        n, own = [], []
        with tempfile.TemporaryDirectory() as d:
            for k in (K1, K2):
                out = os.path.join(d, "cg%d" % k)
                env = dict(os.environ, MICROPYPATH=str(ROOT / "firmware"), PYTHONHASHSEED="0")
                r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, str(mp), drv,
                                    str(k), "real", speech, "c"], capture_output=True, text=True, env=env,
                                   timeout=1800, cwd=str(ROOT))
                if r.returncode:
                    raise SystemExit("micropython failed:\n" + r.stdout + r.stderr[-2000:])
                n.append(int(re.search(r"Collected\s*:\s*(\d+)", r.stderr).group(1)))
                own.append(W._callgrind_self(out, C_STAGES))
        return (n[1] - n[0]) / (K2 - K1), (own[1] - own[0]) / (K2 - K1)
    finally:
        os.unlink(drv)


def c_xtensa_stages():
    """{stage: Xtensa instructions per step} of firmware/native/wake_fe.c compiled by xtensa-lx106-elf-gcc -O2
    (WAKE_CORE_ONLY, as bench_crypto_aead.py compiles aead.c), each instruction times the trip count of its
    innermost loop (fixed, but the root's pair loops at their bounds of 16 and 8 per channel; a loop body's
    branches all counted: an upper bound); None without the compiler."""
    import shutil
    import bench_crypto_aead as A
    from array import array
    from satellite.wake import _frontend_tables as T
    gcc, objdump = shutil.which("xtensa-lx106-elf-gcc"), shutil.which("xtensa-lx106-elf-objdump")
    if not gcc or not objdump:
        return None
    with tempfile.TemporaryDirectory() as d:
        obj = os.path.join(d, "fe.o")
        subprocess.run([gcc, "-O2", "-ffreestanding", "-DWAKE_CORE_ONLY", "-c",
                        str(ROOT / "firmware" / "native" / "wake_fe.c"), "-o", obj], check=True)
        funcs = A.xtensa_functions(subprocess.run([objdump, "-d", obj], capture_output=True, text=True,
                                                  check=True).stdout)
    edges = list(array("h", T.EDGES))
    down = sum(edges[j + 1] - edges[j] for j in range(T.CHANNELS))
    up = sum(edges[j + 2] - edges[j + 1] for j in range(T.CHANNELS))
    # per function: the total trips of each loop in address order of its back branch, and each loop's parent
    # (the index of the loop around it, or None)
    shapes = {
        "fe_push": ([160], [None]),
        "fe_window": ([480, 320], [None, None]),
        "fe_fft": ([256, 171, 85, 4], [None, 2, 3, None]),
        "fe_energy": ([128], [None]),
        "fe_filterbank": ([down, up, 40 * 16, 40 * 8, 40], [4, 4, 4, 4, None]),
        "fe_post": ([40], [None]),
    }
    out = {}
    for name, (trips, parents) in shapes.items():
        ins = funcs[name]
        if any(x[1].startswith("call") for x in ins):
            raise RuntimeError("%s calls out (a 64-bit helper?): the count would miss it" % name)
        loops = sorted(A.xtensa_loops(ins), key=lambda lp: lp[-1][0])
        if len(loops) != len(trips):
            raise RuntimeError("%s: %d loops, the count expects %d" % (name, len(loops), len(trips)))
        n = len(ins)
        for i, lp in enumerate(loops):
            par = parents[i]
            n += (trips[i] - (trips[par] if par is not None else 1)) * len(lp)
        out[name[3:]] = n
    # the whole step's own code around its calls of the stages (one call from bytecode a step): its shift loop at
    # its bound of 15 trips
    ins = funcs["fe_step"]
    loops = A.xtensa_loops(ins)
    if len(loops) != 1:
        raise RuntimeError("fe_step: %d loops, the count expects its shift loop" % len(loops))
    out["step"] = len(ins) + 14 * len(loops[0])
    return out


def xtensa_stages():
    """{stage: Xtensa instructions per step} from static counts and fixed trip counts."""
    import shutil
    if not shutil.which("xtensa-lx106-elf-objdump"):
        return None
    import bench_ggwave as G      # its static-count helpers (mpy-cross -march=xtensawin + objdump)
    from array import array
    from satellite.wake import _frontend_tables as T
    fns = G._viper_functions(str(ROOT / "firmware" / "satellite" / "wake" / "_frontend_viper.py"))
    cnt = G._xt_count
    edges = list(array("h", T.EDGES))
    down = sum(edges[j + 1] - edges[j] for j in range(T.CHANNELS))        # filterbank: falling half-triangles
    up = sum(edges[j + 2] - edges[j + 1] for j in range(T.CHANNELS))      # rising ones

    def body(src, header):
        return cnt(src) - cnt(G._without(src, header))

    out = {}
    s = fns["push"]
    out["push"] = cnt(s) + 159 * body(s, "while i < 160:")
    s = fns["window"]
    out["window"] = cnt(s) + 479 * body(s, "while i < 480:") + 319 * body(s, "while i < 320:")
    s = fns["fft"]
    full = cnt(s)
    perm = body(s, "while i < 256:")
    bfly = body(s, "while i0 < end:")
    block = body(s, "while base < 512:") - bfly                 # a block's own code, its butterflies apart
    stage = body(s, "while m2 < 512:") - block - bfly
    # 85 blocks (64 + 16 + 4 + 1): each does its k = 0 butterfly in its own code (no twiddles), the
    # other 256 - 85 = 171 butterflies run the inner loop
    out["fft"] = (full - perm - stage - block - bfly) + 256 * perm + 4 * stage + 85 * block + 171 * bfly
    s = fns["energy"]
    out["energy"] = cnt(s) + 127 * body(s, "while k <= 128:")
    s = fns["filterbank"]
    full = cnt(s)
    iu = body(s, "while b < mid:")
    iw = body(s, "while b < end:")
    sq = body(s, "while sh >= 0:")          # the first of the root's two pair loops (hi's; lo's is alike)
    chan = body(s, "while j < 40:") - iu - iw - 2 * sq
    out["filterbank"] = (full - chan - iu - iw - 2 * sq) + 40 * chan + down * iu + up * iw + 40 * 24 * sq
    s = fns["post"]
    out["post"] = cnt(s) + 39 * body(s, "while j < 40:")
    return out


def aead_frame_x86():
    """bench_crypto_aead's callgrind count of one 20 ms frame each way (x86-64, viper path)."""
    import bench_crypto_aead as A
    a = A._callgrind_instructions(str(ROOT), ["--frames", "5"])
    b = A._callgrind_instructions(str(ROOT), ["--frames", "25"])
    return (b - a) / 20


def ram(mp):
    s = _script(_RAM)
    try:
        return json.loads(_run(mp, s, [], valgrind=False).stdout.strip().splitlines()[-1])
    finally:
        os.unlink(s)


def c_estimate(have_vg):
    """The C stages' figure per step: {"stages", "native", "x86", "x86_own", "glue", "total", "pct"}, or None
    (no cross compiler, no valgrind or no _wake_fe_c in build/mp32: said in one line)."""
    try:
        xt = c_xtensa_stages()
    except Exception as e:       # a compiler that cannot build it, or a disassembly the counter does not know
        print("  c: the Xtensa count of wake_fe.c failed (%s), skipped" % e)
        return None
    if xt is None:
        print("  c: xtensa-lx106-elf-gcc not found (apt-get install -y gcc-xtensa-lx106), skipped")
        return None
    has_c = os.access(str(MP32), os.X_OK) and subprocess.run(
        [str(MP32), "-c", "import _wake_fe_c"], capture_output=True).returncode == 0
    if not have_vg or not has_c:
        print("  c: needs valgrind and build/mp32 with _wake_fe_c (tools/mp32/build.sh), skipped")
        return None
    import gen_frontend_vectors as GV
    segs = GV.decode(GV.OUT.read_bytes())
    with tempfile.NamedTemporaryFile(suffix=".raw") as speech:
        speech.write(b"".join(p for name, p, _ in segs if name.startswith("speech")))
        speech.flush()
        x86, own = callgrind_c_step(MP32, speech.name)
    native = sum(xt.values())
    total = native + x86 - own
    return {"stages": xt, "native": native, "x86": x86, "x86_own": own, "glue": x86 - own, "total": total,
            "pct": pct(total * STEPS_PER_S)}


def pct(instr_per_s):
    return 100.0 * instr_per_s / HZ


def main():
    import shutil
    import gen_frontend_vectors as GV
    segs = GV.decode(GV.OUT.read_bytes())
    speech = tempfile.NamedTemporaryFile(suffix=".raw", delete=False)
    speech.write(b"".join(p for name, p, _ in segs if name.startswith("speech")))
    speech.close()
    try:
        have_vg = shutil.which("valgrind") is not None
        print("wake-word frontend, one 10 ms step (%d steps/s), viper path then the C one, espeak-ng speech"
              % STEPS_PER_S)
        rows = {}
        if not have_vg:
            print("callgrind: valgrind not installed, skipped (apt-get install valgrind)")
        else:
            for label, mp in (("32-bit build (build/mp32)", MP32), ("64-bit unix port (venv)", MP64)):
                if not os.access(str(mp), os.X_OK):
                    print("callgrind %s: missing, skipped (make mp32)" % label)
                    continue
                step = callgrind_per_step(mp, speech.name)
                glue = callgrind_per_step(mp, speech.name, stub=True)
                rows[label] = (step, glue)
                print("  callgrind x86, %s: %.0f instructions a step (bytecode glue %.0f) = %.2f M/s -> %.1f%% of "
                      "one 240 MHz core at 1 instruction/cycle" % (label, step, glue, step * STEPS_PER_S / 1e6,
                                                                   pct(step * STEPS_PER_S)))
        xt = xtensa_stages()
        if xt is None:
            print("Xtensa: xtensa-lx106-elf-objdump not installed, skipped (apt-get install binutils-xtensa-lx106)")
        else:
            glue = rows.get("32-bit build (build/mp32)", (0, 0))[1]
            native = sum(xt.values())
            total = native + glue
            print("  Xtensa, mpy-cross -march=xtensawin static counts x trip counts (upper bound), per step: " +
                  ", ".join("%s %d" % kv for kv in xt.items()))
            print("    = %d native + %.0f x86 glue = %.0f a step = %.2f M/s -> %.1f%% of one 240 MHz core"
                  % (native, glue, total, total * STEPS_PER_S / 1e6, pct(total * STEPS_PER_S)))
        c = c_estimate(have_vg)
        if c is not None:
            print("  c (firmware/native/wake_fe.c, _wake_fe_c: the board image's path), Xtensa static counts of "
                  "xtensa-lx106-elf-gcc -O2 x trip counts (upper bound), per step: " +
                  ", ".join("%s %d" % kv for kv in c["stages"].items()))
            print("    = %d native + %.0f x86 around the stages (bytecode, the binding's checks; callgrind on the "
                  "32-bit build: %.0f a step, %.0f of it in the C stages) = %.0f a step -> %.1f%% of one 240 MHz "
                  "core" % (c["native"], c["glue"], c["x86"], c["x86_own"], c["total"], c["pct"]))
        if have_vg:
            fr = aead_frame_x86()
            print("  beside it, same run: AEAD, one 20 ms frame each way (bench_crypto_aead's driver, viper, x86-64 "
                  "callgrind): %.0f instructions = %.1f%% of one core (50 frames/s)" % (fr, pct(fr * 50)))
        for label, mp in (("32-bit build", MP32), ("64-bit unix port", MP64)):
            if os.access(str(mp), os.X_OK):
                r = ram(mp)
                print("  RAM, %s: import %d B (module code and the tables' bytes: heap for a .mpy set, flash "
                      "when frozen), one Frontend %d B (buffers, state, the twiddles' RAM copy)"
                      % (label, r["import"], r["instance"]))
    finally:
        os.unlink(speech.name)


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT / "firmware"), str(ROOT / "host")]
    from alabama import mpcompat
    mpcompat.install()
    main()
