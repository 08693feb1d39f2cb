"""Benchmark of the firmware ChaCha20-Poly1305 (pure vs viper on the micropython unix port) against
pyca/cryptography on CPython, plus heap bytes per message and a callgrind-based ESP32-S3 estimate.

Run from CPython:   .venv/bin/python tools/bench/bench_crypto_aead.py
  (it launches the micropython part itself; `--mp` is that part, run under micropython:
   MICROPYPATH=firmware .venv/bin/micropython tools/bench/bench_crypto_aead.py --mp)
Prints ratios measured in one run; asserts nothing about speed.
"""
import sys

SIZES = (640, 4096)
FRAME_SEAL = 640  # one 20 ms frame sent (satellite -> core)
FRAME_OPEN = 960  # one 20 ms frame received (core -> satellite)
AD = b"\x5a" * 32


def _mp_setup(impl, size, shift=0):
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
    cp.encrypt_into(1, AD, src, size, msg)
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
        cps, src, msg, _ = _mp_setup(impl, seal_len, shift)
        cpo, _, omsg, oout = _mp_setup(impl, open_len)
        if "--stub" in argv:  # the bytecode glue alone: the native call does nothing
            import micropython

            @micropython.viper
            def stub(T: uint, Q: uint, ctx, ad, adl: int, src, dst, n: int, mode: int) -> int:
                return 0
            cps._fast = cpo._fast = stub
        for i in range(k):
            cps.encrypt_into(1, AD, src, seal_len, msg)
            cpo.decrypt_into(1, AD, omsg, open_len + 16, oout)
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


def _run_mp(root, args, valgrind=None):
    import os
    import subprocess
    mp = os.path.join(os.path.dirname(sys.executable), "micropython")
    env = dict(os.environ, MICROPYPATH=os.path.join(root, "firmware"))
    cmd = (valgrind or []) + [mp, os.path.abspath(__file__), "--mp"] + args
    return subprocess.run(cmd, capture_output=True, env=env, timeout=900, cwd=root)


def _callgrind_instructions(root, args):
    import os
    import re
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        r = _run_mp(root, args, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out])
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
    k1, k2 = 5, 45
    a = _callgrind_instructions(root, ["--frames", str(k1)])
    b = _callgrind_instructions(root, ["--frames", str(k2)])
    per_frame = (b - a) / (k2 - k1)
    a0 = _callgrind_instructions(root, ["--frames", str(k1), "--seal", "0", "--open", "0"])
    b0 = _callgrind_instructions(root, ["--frames", str(k2), "--seal", "0", "--open", "0"])
    per_empty = (b0 - a0) / (k2 - k1)
    hz = 240e6
    secs = per_frame / hz  # assumption: ~1 instruction per cycle
    print("callgrind, viper path, micropython unix x86-64 (difference of %d and %d frame runs)" % (k1, k2))
    print("  one 20 ms frame each way (seal %d B + open %d B): %.0f instructions" % (FRAME_SEAL, FRAME_OPEN, per_frame))
    print("  of which fixed per-message cost (seal 0 B + open 0 B): %.0f instructions" % per_empty)
    print("  ESP32-S3 estimate, assuming Xtensa executes about as many instructions as x86-64 for this")
    print("  viper/VM code at ~1 instruction/cycle, 240 MHz: %.2f ms per frame = %.1f%% of one core"
          " (target <= 10%%)" % (secs * 1e3, 100 * secs / 0.020))


if __name__ == "__main__":
    if "--mp" in sys.argv:
        mp_main(sys.argv)
    else:
        host_main()
