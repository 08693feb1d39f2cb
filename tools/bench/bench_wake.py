"""Benchmark of the on-device wake-model inference (satellite.wake.model, viper kernels) for the four shipped
microWakeWord models: multiply-accumulates per inference, callgrind x86 instruction counts per inference on the
32-bit unix port (build/mp32) beside one 20 ms AEAD audio frame (bench_crypto_aead's driver) in the same run,
static Xtensa instructions of the MAC inner loop as mpy-cross -march=xtensawin emits it (needs
xtensa-lx106-elf-objdump) and the estimate of a 240 MHz core's share they give, time per inference on the unix
port, and RAM: the model file's weights and tables, the arena and state, and the heap one loaded model takes
(gc.mem_alloc) and one step allocates (must be 0).

Side by side in the same run on the 32-bit build: the kernels of the C module _wake_c (firmware/native/wake.c, the
board image's path) and the viper ones, each per inference (callgrind), and the C kernels' static Xtensa counts
(xtensa-lx106-elf-gcc -O2, as bench_crypto_aead.py counts aead.c) times each model's trip counts, plus the x86
count of everything around them; with the frontend's figure (bench_wake_frontend.py's estimate, computed here)
the "frontend + one model" share of a 240 MHz core that issue 37 budgets (<= 15 %, goal <= 8 %).

Run from CPython:   .venv/bin/python tools/bench/bench_wake.py   (or: tools/bench/run.py wake crypto)
Prints figures measured in one run; asserts nothing about speed.
"""
import sys

INFERENCES_PER_S = 100 / 3          # one inference every 3 feature frames of 10 ms
CORE_HZ = 240e6


def mp_main(argv):
    """Runs under micropython: prints one JSON line (or only runs K inferences for callgrind)."""
    import array
    import gc
    import json
    import time
    from satellite.wake import model as M
    path = argv[argv.index("--model") + 1]
    k = int(argv[argv.index("--inferences") + 1]) if "--inferences" in argv else -1
    if "--impl" in argv:        # force one set of kernels (c / viper / pure), as model.py's seam would pick it
        impl = argv[argv.index("--impl") + 1]
        if impl == "c":
            import _wake_c as K
        elif impl == "viper":
            from satellite.wake import _model_viper as K
        else:
            from satellite.wake import _model_pure as K
        M._mac, M._dw, M._copy, M._lut, M._quant_in = K.mac, K.dw, K.copy, K.lut, K.quant_in
        M._run = getattr(K, "run", None)       # c: the whole program in one call, as model.py runs it
        M.IMPL = impl
    gc.collect()
    a0 = gc.mem_alloc()
    m = M.load(open(path, "rb"))
    gc.collect()
    heap = gc.mem_alloc() - a0
    buf = array.array("H", bytes(2 * M.FEATURES))
    for i in range(M.FEATURES):
        buf[i] = 300 + 7 * i
    if k >= 0:          # callgrind driver
        for _ in range(3 * k):
            m.step(buf)
        return
    for _ in range(30):
        m.step(buf)
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    for _ in range(30):
        m.step(buf)
    step_alloc = gc.mem_alloc() - a
    gc.enable()
    n = 0
    t0 = time.ticks_us()
    while True:
        m.step(buf)
        m.step(buf)
        m.step(buf)
        n += 1
        dt = time.ticks_diff(time.ticks_us(), t0)
        if dt > 500000 and n >= 10:
            break
    print(json.dumps({"impl": M.IMPL, "heap": heap, "step_alloc": step_alloc, "us_per_inference": dt / n}))


def _macs(header):
    n = 0
    for op in header["ops"]:
        p = op[1:]
        if op[0] in ("CONV_2D", "FULLY_CONNECTED"):
            n += p[4] * p[5] * p[6] * p[2]
        elif op[0] == "DEPTHWISE_CONV_2D":
            n += p[4] * p[5] * p[6]
    return n


def _inner_loop_xtensa(root):
    """Static Xtensa instructions of one MAC of _model_viper.mac's inner loop (the loop with and without it)."""
    import importlib.util
    import os
    import shutil
    objdump = shutil.which("xtensa-lx106-elf-objdump")
    mpy_cross = os.path.join(os.path.dirname(sys.executable), "mpy-cross")
    if not objdump or not os.path.exists(mpy_cross):
        return None
    spec = importlib.util.spec_from_file_location("aead", os.path.join(root, "tools", "bench", "bench_crypto_aead.py"))
    aead = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(aead)
    base = ["a = ptr8(src)", "w = ptr8(dst)", "acc = 0", "xi = 0", "wi = 0", "xe = n"]
    loop = ["while xi < xe:", "    acc += ((a[xi] ^ 0x80) - 0x80) * ((w[wi] ^ 0x80) - 0x80)", "    xi += 1",
            "    wi += 1"]
    return aead._xtensa_count(objdump, mpy_cross, base + loop) - aead._xtensa_count(objdump, mpy_cross, base)


#: The count build's stand-in for the ESP32-S3's signed 32x32->64 product (MULL + MULSH there; the lx106 has no
#: MULSH and GCC would call __muldi3): an asm pair of the same shape, MUL16S standing in for MULSH. Counted, never run.
S3_MUL64S = """
static inline long long wake_s3_mul64s(int a, int b) {
    unsigned int lo; int hi;
    __asm__("mull %0, %2, %3\\n\\tmul16s %1, %2, %3" : "=&r"(lo), "=r"(hi) : "r"(a), "r"(b));
    return ((long long)hi << 32) | lo;
}
#define WAKE_MUL64S(a, b) wake_s3_mul64s((a), (b))
"""


def _nest(loops, inner):
    """The loops around `inner`, innermost first (each a list of (address, mnemonic, operands))."""
    lo, hi = inner[0][0], inner[-1][0]
    outer = [lp for lp in loops if lp[0][0] <= lo and lp[-1][0] >= hi and len(lp) > len(inner)]
    return [inner] + sorted(outer, key=len)


def c_xtensa_static(root, aead):
    """Static Xtensa counts of wake.c's conv and depthwise kernels (xtensa-lx106-elf-gcc -O2, WAKE_CORE_ONLY, the S3's
    product shape): {"mac": per MAC, "mac_k": per output and kernel row, "mac_out": per output, "dw": per MAC,
    "dw_out": per output}; None without the compiler. Each loop body counted whole at every trip (both arms of
    the requantization's branches: an upper bound)."""
    import os
    import pathlib
    import shutil
    import subprocess
    import tempfile
    gcc, objdump = shutil.which("xtensa-lx106-elf-gcc"), shutil.which("xtensa-lx106-elf-objdump")
    src = os.path.join(root, "firmware", "native", "wake.c")
    if not gcc or not objdump or not os.path.exists(src):
        return None
    with tempfile.TemporaryDirectory() as d:
        hdr, obj = pathlib.Path(d, "s3mul.h"), pathlib.Path(d, "wake.o")
        hdr.write_text(S3_MUL64S)
        subprocess.run([gcc, "-O2", "-ffreestanding", "-DWAKE_CORE_ONLY", "-include", str(hdr), "-c", src,
                        "-o", str(obj)], check=True)
        dis = subprocess.run([objdump, "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    funcs = aead.xtensa_functions(dis)
    res = {}
    for name, depth in (("wake_mac", 3), ("wake_dw", 2)):
        loops = aead.xtensa_loops(funcs[name])
        if any(x[1].startswith("call") for lp in loops for x in lp):
            raise RuntimeError("%s calls out of a loop (is S3_MUL64S in effect?)" % name)
        macs = [lp for lp in loops if any(x[1] in ("mul16s", "mull") for x in lp)]
        inner = min(macs, key=len)
        nest = _nest(loops, inner)
        if len(nest) < depth:
            raise RuntimeError("%s: %d nested loops around the MAC, expected %d" % (name, len(nest), depth))
        if name == "wake_mac":      # inner: one kernel row; then the rows of one output; then the outputs
            res["mac"] = len(nest[0])
            res["mac_k"] = len(nest[1]) - len(nest[0])
            res["mac_out"] = len(nest[2]) - len(nest[1])
        else:                       # inner: the kernel rows of one channel; then the channels
            res["dw"] = len(nest[0])
            res["dw_out"] = len(nest[1]) - len(nest[0])
    # copies: per byte the byte loop (an upper bound: the non-overlapping rows go through memmove, word-wise on
    # the board), per row the rest of the row loop with the memmove call; tables and the input: per element
    loops = aead.xtensa_loops(funcs["wake_copy"])
    byte = [lp for lp in loops if not any(x[1].startswith("call") for x in lp)]
    rows = [lp for lp in loops if any(x[1].startswith("call") for x in lp)]
    if len(byte) != 1 or len(rows) != 1:
        raise RuntimeError("wake_copy: expected a byte loop inside a row loop with the memmove call")
    res["copy_byte"] = len(byte[0])
    res["copy_row"] = len(rows[0]) - len(byte[0])
    for name in ("wake_lut", "wake_quant_in"):
        loops = aead.xtensa_loops(funcs[name])
        if len(loops) != 1:
            raise RuntimeError("%s: expected one loop, found %d" % (name, len(loops)))
        res[name[5:]] = len(loops[0])
    return res


def _c_native(header, xt):
    """Xtensa instructions of one inference's conv and depthwise kernels from the static counts."""
    n = 0
    for op in header["ops"]:
        p = op[1:]
        if op[0] in ("CONV_2D", "FULLY_CONNECTED"):
            outs = p[4] * p[5]
            n += outs * p[6] * p[2] * xt["mac"] + outs * p[6] * xt["mac_k"] + outs * xt["mac_out"]
        elif op[0] == "DEPTHWISE_CONV_2D":
            outs = p[4] * p[2]
            n += outs * p[6] * xt["dw"] + outs * xt["dw_out"]
        elif op[0] in ("LOGISTIC", "QUANTIZE"):
            n += p[2] * xt["lut"]
        else:                                       # the copies: rows x cols bytes
            n += p[2] * (p[3] * xt["copy_byte"] + xt["copy_row"])
    # the input: `stride` frames of FEATURES through the input table
    n += header["stride"] * header["features"] * xt["quant_in"]
    return n


#: the C functions the Xtensa count prices (the x86 count of everything else stays in the figure); memmove is
#: the copies' (glibc's on the unix port, newlib's on the board)
C_KERNELS = ("wake_mac", "wake_dw", "wake_copy", "wake_lut", "wake_quant_in", "memmove")


def _callgrind_self(path, names):
    """Instructions spent in the named C functions themselves (callgrind_annotate of a callgrind output; a name
    also matches its libc variants, __memmove_sse2... for memmove)."""
    import re
    import subprocess
    out = subprocess.run(["callgrind_annotate", "--threshold=100", path], capture_output=True, text=True).stdout
    n = 0
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+)\s.*?[:\s](\w+)\s*(\[|$)", line)
        if m and any(m.group(2) == k or (k == "memmove" and "memmove" in m.group(2)) for k in names):
            n += int(m.group(1).replace(",", ""))
    return n


def frontend_pct(root):
    """(path, share of a 240 MHz core) of the frontend per bench_wake_frontend.py's estimate: its C stages
    (_wake_fe_c, the board image's path) where build/mp32 has them, else its viper path; None without
    objdump/valgrind/build/mp32."""
    import os
    import shutil
    import tempfile
    sys.path[:0] = [os.path.join(root, "tools", "bench"), os.path.join(root, "tools", "wake"),
                    os.path.join(root, "firmware")]
    import bench_wake_frontend as F
    if not shutil.which("valgrind") or not os.access(str(F.MP32), os.X_OK):
        return None
    from alabama import mpcompat
    mpcompat.install()
    c = F.c_estimate(True)
    if c is not None:
        return "c", c["pct"]
    xt = F.xtensa_stages()
    if xt is None:
        return None
    import gen_frontend_vectors as GV
    segs = GV.decode(GV.OUT.read_bytes())
    with tempfile.NamedTemporaryFile(suffix=".raw") as speech:
        speech.write(b"".join(p for name, p, _ in segs if name.startswith("speech")))
        speech.flush()
        glue = F.callgrind_per_step(F.MP32, speech.name, stub=True)
    return "viper", F.pct((sum(xt.values()) + glue) * F.STEPS_PER_S)


def main():
    import json
    import os
    import pathlib
    import struct
    import subprocess
    import tempfile
    root = str(pathlib.Path(__file__).resolve().parents[2])
    sys.path.insert(0, os.path.join(root, "host"))
    from alabama.local import micropython32_path
    from alabama.wake import reference as R
    mp32 = str(micropython32_path())
    if not os.path.exists(mp32):
        print("bench_wake: no 32-bit port at %s (make mp32): the 64-bit port stands in" % mp32)
        mp32 = os.path.join(os.path.dirname(sys.executable), "micropython")
    spec = __import__("importlib.util").util.spec_from_file_location(
        "aead", os.path.join(root, "tools", "bench", "bench_crypto_aead.py"))
    aead = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(aead)
    have_cg = bool(__import__("shutil").which("valgrind"))
    env = dict(os.environ, MICROPYPATH=os.path.join(root, "firmware"))

    def run(args, valgrind=None):
        cmd = (valgrind or []) + [mp32, "-X", "heapsize=2m", os.path.abspath(__file__), "--mp"] + args
        return subprocess.run(cmd, capture_output=True, env=env, timeout=900, cwd=root)

    def callgrind(args, selfs=()):
        """(x86 instructions of the run, of them in the C functions `selfs` themselves)."""
        import re
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "cg")
            r = run(args, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out])
            m = re.search(r"Collected\s*:\s*(\d+)", r.stderr.decode())
            if r.returncode or not m:
                raise RuntimeError(r.stderr.decode()[-1500:])
            return int(m.group(1)), (_callgrind_self(out, selfs) if selfs else 0)

    probe = subprocess.run([mp32, "-c", "import _wake_c"], capture_output=True)
    impls = (["c"] if probe.returncode == 0 else []) + ["viper"]
    if "c" not in impls:
        print("bench_wake: %s has no _wake_c (firmware/native/wake.c): rebuild it with tools/mp32/build.sh; "
              "the c rows are skipped" % mp32)
    per_mac = _inner_loop_xtensa(root)
    try:
        xt = c_xtensa_static(root, aead)
    except Exception as e:          # a compiler that cannot build it, or a disassembly the counter does not know
        print("c (firmware/native/wake.c): the Xtensa count failed (%s), skipped" % e)
        xt = None
    aead_frame = None
    fe_pct = fe_path = None
    if have_cg:
        k = 50
        a1 = aead._callgrind_instructions(root, ["--frames", str(k)], mp32)
        a0 = aead._callgrind_instructions(root, ["--frames", "0"], mp32)
        aead_frame = (a1 - a0) / k / 2          # one 20 ms frame one way (the driver seals and opens)
        try:
            fe = frontend_pct(root)
            if fe:
                fe_path, fe_pct = fe
        except Exception as e:      # the frontend's own bench cannot run here: the sum is left out, said so
            print("frontend estimate failed (%s): tools/bench/bench_wake_frontend.py says why" % e)
    print("interpreter: %s" % mp32)
    print("Xtensa instructions per MAC (viper inner loop, static): %s" % (per_mac if per_mac is not None else
                                                                          "n/a (no xtensa-lx106-elf-objdump)"))
    if xt:
        print("Xtensa instructions of wake.c (xtensa-lx106-elf-gcc -O2, static): conv %d per MAC + %d per kernel row"
              " + %d per output (requantization); depthwise %d per MAC + %d per output; copies %d per byte + %d per"
              " row; tables %d, input %d per element"
              % (xt["mac"], xt["mac_k"], xt["mac_out"], xt["dw"], xt["dw_out"], xt["copy_byte"], xt["copy_row"],
                 xt["lut"], xt["quant_in"]))
    else:
        print("wake.c Xtensa counts: n/a (apt-get install -y gcc-xtensa-lx106 binutils-xtensa-lx106)")
    if aead_frame:
        print("callgrind: one 20 ms AEAD frame (650/970 B mean) = %.0f x86 instructions" % aead_frame)
    if fe_pct is not None:
        print("frontend (bench_wake_frontend's estimate, its %s path: static Xtensa counts + the x86 count around "
              "them): %.1f %% of a 240 MHz core" % (fe_path, fe_pct))
    print()
    print("%-12s %-5s %7s %8s %8s %7s %8s %9s %9s %10s %9s %9s %9s" % (
        "model", "impl", "MACs", "file B", "arena B", "heap B", "alloc/st", "us/infer", "x86 ins", "ins/AEADfr",
        "native", "S3 est %", "+frontend"))
    with tempfile.TemporaryDirectory() as d:
        for name in R.BUILTIN:
            blob = R.compile_named(name)
            hl = struct.unpack_from("<I", blob, 4)[0]
            header = json.loads(blob[12:12 + hl])
            path = os.path.join(d, name + ".aww")
            with open(path, "wb") as f:
                f.write(blob)
            macs = _macs(header)
            for impl in impls:
                r = run(["--model", path, "--impl", impl])
                if r.returncode:
                    print("%s %s: %s" % (name, impl, r.stderr.decode()[-800:]))
                    continue
                res = json.loads(r.stdout.decode().strip().splitlines()[-1])
                ins = native = est = None
                if have_cg:
                    k = 20
                    kern = C_KERNELS if impl == "c" else ()
                    t1, s1 = callgrind(["--model", path, "--inferences", str(k), "--impl", impl], kern)
                    t0, s0 = callgrind(["--model", path, "--inferences", "0", "--impl", impl], kern)
                    ins = (t1 - t0) / k
                    if impl == "c" and xt:
                        # the kernels at their Xtensa count, everything around them (bytecode, the binding's
                        # checks, copies and tables) at its x86 count
                        native = _c_native(header, xt)
                        est = 100.0 * (native + ins - (s1 - s0) / k) * INFERENCES_PER_S / CORE_HZ
                if impl == "viper" and per_mac:
                    est = 100.0 * macs * per_mac * INFERENCES_PER_S / CORE_HZ
                print("%-12s %-5s %7d %8d %8d %7d %9d %9.0f %9s %10s %9s %9s %9s" % (
                    name, impl, macs, len(blob), header["arena"], res["heap"], res["step_alloc"] // 30,
                    res["us_per_inference"], "%.0f" % ins if ins else "-",
                    "%.1f" % (ins / aead_frame) if ins and aead_frame else "-", "%d" % native if native else "-",
                    "%.1f" % est if est is not None else "-",
                    "%.1f" % (est + fe_pct) if est is not None and fe_pct is not None else "-"))
    print()
    print("S3 est %%, viper: MACs x the inner loop's static Xtensa instructions x %.1f inferences/s over a 240 MHz "
          "core, one instruction a cycle, the loop only (no per-output requantization, no op dispatch): a floor."
          % INFERENCES_PER_S)
    print("S3 est %, c: wake.c's kernels (conv, depthwise, copies, tables, input) at their static Xtensa counts x "
          "the model's trip counts (every loop body whole at each trip, copies as byte loops: an upper bound for "
          "the code, the lx106's missing SEXT and zero-overhead loops counted against it) + the rest of an "
          "inference (the bytecode of its three steps, the binding's checks of every op) at its x86 callgrind "
          "count on the 32-bit build, 1 instruction/cycle, no cache misses or load-use stalls modelled. +frontend "
          "adds the frontend's figure above (issue 37: frontend + one model <= 15 %, goal <= 8 %). Estimates, no "
          "chip here: `alabama board probe` measures.")


if __name__ == "__main__":
    if "--mp" in sys.argv:
        mp_main(sys.argv)
    else:
        main()
