#!/usr/bin/env python3
"""Ed25519 verification (satellite.noise.ed25519, the release signature of issue 29) against X25519, in one run.

Run: .venv/bin/python tools/bench/bench_crypto_ed25519.py   (figures and ratios measured in this one run)
  * time per verify and per X25519 (viper and pure) on the micropython unix port, 64-bit (venv) and 32-bit
    (build/mp32, big ints on 31-bit small ints like the ESP32-S3); SHA-512 per 128-byte block;
  * heap: bytes allocated by one verify (gc off; all of it garbage afterwards) on the 32-bit build, and the
    smallest -X heapsize it runs in;
  * with valgrind: callgrind x86-64 instruction counts on the 32-bit build of one verify and one viper X25519
    (the same process layout, differenced), their ratio, and the ESP32-S3 estimate it gives at 240 MHz and
    1 instruction per cycle; the X25519 board figure of docs/benchmarks.md times that ratio is the second
    estimate. Big-int maths is C (mpz) on both, so the x86 count carries over better than for viper code;
    neither is a board measurement.
The message verified is what satellite.release verifies: 15 bytes of context + a 32-byte sha256 (with R and A,
one SHA-512 block).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
MP64 = BIN / "micropython"
MP32 = ROOT / "build" / "mp32" / "micropython"
S3_HZ = 240e6
X25519_BOARD_MS = 43.0   # docs/benchmarks.md: one viper X25519 on the ESP32-S3, ~43 ms with dispatch and decode

SETUP = """
import sys, time, gc
from satellite.noise import ed25519 as E, x25519 as X
from satellite.noise.sha512 import sha512
pub = bytes.fromhex(sys.argv[2]); msg = bytes.fromhex(sys.argv[3]); sig = bytes.fromhex(sys.argv[4])
assert E.verify(pub, msg, sig)
"""

TIMER = SETUP + """
def best(fn, *a):
    b = None
    for _ in range(3):
        t = time.ticks_us()
        fn(*a)
        d = time.ticks_diff(time.ticks_us(), t)
        b = d if b is None or d < b else b
    return b
k = bytes(range(32)); u = bytes(range(1, 33))
print("verify", best(E.verify, pub, msg, sig))
for impl in X.IMPLS:
    print("x25519_" + impl, best(X.x25519, k, u, impl))
print("sha512_16blocks", best(sha512, bytes(16 * 128 - 17)))
gc.collect(); gc.disable(); a = gc.mem_alloc(); E.verify(pub, msg, sig); print("alloc", gc.mem_alloc() - a)
"""

COUNT = SETUP + """
what, n = sys.argv[1], 0
n = int(what[1:])
k = bytes(range(32)); u = bytes(range(1, 33))
X.x25519(k, u, "viper")
for i in range(n):
    if what[0] == "v":
        E.verify(pub, msg, sig)
    else:
        X.x25519(k, u, "viper")
"""


def _vector():
    sys.path[:0] = [str(ROOT / "firmware"), str(ROOT / "host")]
    from alabama import mpcompat
    mpcompat.install()
    import hashlib
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from satellite import release
    k = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    msg = release.message(hashlib.sha256(b"a manifest").digest())
    pub = k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return pub.hex(), msg.hex(), k.sign(msg).hex()


def _run(mp, text, args, wrap=(), heap=None):
    env = dict(os.environ, MICROPYPATH=str(ROOT / "firmware"), PYTHONHASHSEED="0")
    with tempfile.NamedTemporaryFile("w", suffix="_ed25519_bench.py", delete=False) as f:
        f.write(text)
    try:
        cmd = list(wrap) + [str(mp)] + (["-X", "heapsize=%s" % heap] if heap else []) + [f.name] + list(args)
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    finally:
        os.unlink(f.name)


def times(mp, vec):
    r = _run(mp, TIMER, ["t"] + list(vec), heap="8m")
    if r.returncode:
        raise SystemExit("micropython failed:\n" + r.stdout + r.stderr)
    out = r.stdout.split()
    return {out[i]: int(out[i + 1]) for i in range(0, len(out), 2)}


def smallest_heap(mp, vec):
    """The smallest -X heapsize (in 2 KB steps from 8 KB) the verify runs in, the firmware modules imported."""
    for kb in range(8, 130, 2):
        if _run(mp, SETUP, ["-"] + list(vec), heap="%dk" % kb).returncode == 0:
            return kb
    return None


def callgrind(mp, vec, what, n=2):
    vg = shutil.which("valgrind")
    if not vg:
        return None
    counts = []
    for m in (0, n):
        r = _run(mp, COUNT, ["%s%d" % (what, m)] + list(vec), wrap=(vg, "--tool=callgrind", "--callgrind-out-file=/dev/null"),
                 heap="8m")
        counts.append(int(re.search(r"Collected : (\d+)", r.stderr).group(1)))
    return (counts[1] - counts[0]) / n


def main():
    vec = _vector()
    legs = [("64-bit unix", MP64)] + ([("32-bit unix (build/mp32)", MP32)] if MP32.exists() else [])
    for label, mp in legs:
        t = times(mp, vec)
        print("%s: Ed25519 verify %.1f ms; X25519 viper %.2f ms, pure %.1f ms; SHA-512 %.2f ms per block" % (
            label, t["verify"] / 1e3, t.get("x25519_viper", 0) / 1e3, t["x25519_pure"] / 1e3,
            t["sha512_16blocks"] / 16e3))
        print("  verify / X25519 viper = %.1f; verify / X25519 pure = %.2f; heap allocated per verify %d B (garbage)" % (
            t["verify"] / t.get("x25519_viper", float("nan")), t["verify"] / t["x25519_pure"], t["alloc"]))
    if not MP32.exists():
        print("no build/mp32: no 32-bit figures (make mp32)")
        return
    print("32-bit: smallest heap the verify runs in (modules imported): %s KB" % smallest_heap(MP32, vec))
    v, x = callgrind(MP32, vec, "v"), callgrind(MP32, vec, "x")
    if v is None:
        print("valgrind not found: no instruction count (apt-get install -y valgrind)")
        return
    print("callgrind, 32-bit build, x86 instructions: Ed25519 verify %.1f M, X25519 viper %.2f M (ratio %.1f)"
          % (v / 1e6, x / 1e6, v / x))
    print("  -> ESP32-S3 estimate: %.2f s at 240 MHz, 1 instr/cycle; %.2f s as %.1f x the X25519 board figure (%.0f ms)"
          % (v / S3_HZ, v / x * X25519_BOARD_MS / 1e3, v / x, X25519_BOARD_MS))


if __name__ == "__main__":
    main()
