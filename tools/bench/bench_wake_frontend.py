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
fe = FE.Frontend()
assert fe.viper
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
print('{"import": %d, "instance": %d, "viper": %d}' % (b - a, c - b, FE.VIPER))
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


def callgrind_per_step(mp, speech, stub=False):
    drv = _script(_DRIVER)
    try:
        n = []
        for k in (K1, K2):
            r = _run(mp, drv, [k, "stub" if stub else "real", speech], valgrind=True)
            n.append(int(re.search(r"Collected\s*:\s*(\d+)", r.stderr).group(1)))
        return (n[1] - n[0]) / (K2 - K1)
    finally:
        os.unlink(drv)


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
        print("wake-word frontend, one 10 ms step (%d steps/s), viper path, espeak-ng speech" % STEPS_PER_S)
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
