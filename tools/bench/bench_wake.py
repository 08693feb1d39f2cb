"""Benchmark of the on-device wake-model inference (satellite.wake.model, viper kernels) for the four shipped
microWakeWord models: multiply-accumulates per inference, callgrind x86 instruction counts per inference on the
32-bit unix port (build/mp32) beside one 20 ms AEAD audio frame (bench_crypto_aead's driver) in the same run,
static Xtensa instructions of the MAC inner loop as mpy-cross -march=xtensawin emits it (needs
xtensa-lx106-elf-objdump) and the estimate of a 240 MHz core's share they give, time per inference on the unix
port, and RAM: the model file's weights and tables, the arena and state, and the heap one loaded model takes
(gc.mem_alloc) and one step allocates (must be 0).

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
    print(json.dumps({"viper": M.VIPER, "heap": heap, "step_alloc": step_alloc, "us_per_inference": dt / n}))


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

    def callgrind(args):
        import re
        with tempfile.TemporaryDirectory() as d:
            r = run(args, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + os.path.join(d, "cg")])
            m = re.search(r"Collected\s*:\s*(\d+)", r.stderr.decode())
            if r.returncode or not m:
                raise RuntimeError(r.stderr.decode()[-1500:])
            return int(m.group(1))

    per_mac = _inner_loop_xtensa(root)
    aead_frame = None
    if have_cg:
        k = 50
        a1 = aead._callgrind_instructions(root, ["--frames", str(k)], mp32)
        a0 = aead._callgrind_instructions(root, ["--frames", "0"], mp32)
        aead_frame = (a1 - a0) / k / 2          # one 20 ms frame one way (the driver seals and opens)
    print("interpreter: %s" % mp32)
    print("Xtensa instructions per MAC (inner loop, static): %s" % (per_mac if per_mac is not None else
                                                                    "n/a (no xtensa-lx106-elf-objdump)"))
    if aead_frame:
        print("callgrind: one 20 ms AEAD frame (viper, 650/970 B mean) = %.0f x86 instructions" % aead_frame)
    print()
    print("%-12s %7s %8s %8s %7s %9s %10s %8s %12s %9s" % ("model", "MACs", "file B", "arena B", "heap B",
                                                              "alloc/st", "us/infer", "x86 ins", "ins/AEADfr",
                                                              "S3 est %"))
    with tempfile.TemporaryDirectory() as d:
        for name in R.BUILTIN:
            blob = R.compile_named(name)
            hl = struct.unpack_from("<I", blob, 4)[0]
            header = json.loads(blob[12:12 + hl])
            path = os.path.join(d, name + ".aww")
            with open(path, "wb") as f:
                f.write(blob)
            r = run(["--model", path])
            if r.returncode:
                print("%s: %s" % (name, r.stderr.decode()[-800:]))
                continue
            res = json.loads(r.stdout.decode().strip().splitlines()[-1])
            macs = _macs(header)
            ins = None
            if have_cg:
                k = 20
                ins = (callgrind(["--model", path, "--inferences", str(k)]) -
                       callgrind(["--model", path, "--inferences", "0"])) / k
            est = (100.0 * macs * per_mac * INFERENCES_PER_S / CORE_HZ) if per_mac else None
            print("%-12s %7d %8d %8d %7d %9d %10.0f %8s %12s %9s" % (
                name, macs, len(blob), header["arena"], res["heap"], res["step_alloc"] // 30,
                res["us_per_inference"], "%.0f" % ins if ins else "-",
                "%.1f" % (ins / aead_frame) if ins and aead_frame else "-", "%.1f" % est if est else "-"))
    print()
    print("S3 est %%: MACs x the inner loop's static Xtensa instructions x %.1f inferences/s over a 240 MHz core, "
          "one instruction a cycle, the loop only (no per-output requantization, no op dispatch): a floor, "
          "not a measurement; `alabama board probe` on a chip is the measurement." % INFERENCES_PER_S)


if __name__ == "__main__":
    if "--mp" in sys.argv:
        mp_main(sys.argv)
    else:
        main()
