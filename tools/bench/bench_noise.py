#!/usr/bin/env python3
"""Noise handshake benchmark: the satellite's whole IK handshake (firmware initiator) vs the host's.

Run: .venv/bin/python tools/bench/bench_noise.py   (prints times and ratios measured in this one run)

Measured, all in one run:
  * firmware initiator, micropython unix port, viper and pure primitives: NoiseConnection() + start()
    + receive(message 2) -- everything the satellite computes for an IK handshake (6 X25519 with the
    static public key recomputed, 5 with it cached via static_public=), plus one 640-byte transport
    message each way for scale;
  * the host (CPython + pyca/cryptography) initiator doing the same, and the host responder;
  * with valgrind: callgrind instruction count of one firmware initiator IK handshake (viper path,
    x86-64 unix port), by differencing runs with 0 and N handshakes against a precomputed message 2
    (fixed ephemeral, so the same reply is valid every time).
ESP32-S3 estimate: instructions / 240 MHz at 1 instruction per cycle -- a lower bound (Xtensa may need
more instructions than x86-64 for the same work, and load-use stalls and flash-cache misses are not
modelled; the unix port's hashlib is software SHA-256, the board's uses the accelerator). Target: <= 0.25 s.
"""
import pathlib
import re
import shutil
import sys
import timeit

import baseline  # noqa: E402  (tools/bench is the script's directory)
import mpscript  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
MP = BIN / "micropython"
S3_HZ = 240e6
TARGET_S3_S = 0.25  # issue 12: the satellite's IK handshake <= 0.25 s on the ESP32-S3

COMMON = """
import sys, time
from satellite.noise import state, x25519
from satellite.noise.transport import NoiseConnection
SI = bytes(range(1, 33)); SR = bytes(range(101, 133)); EI = bytes(range(51, 83))
PR = x25519.public_key(SR); PI = x25519.public_key(SI)
ctr = [0]
def rng(n):
    ctr[0] += 1
    return bytes((ctr[0] * 7 + k) & 255 for k in range(n))
def reply_for(ephemeral):
    i = NoiseConnection(True, SI, "IK", PR, ephemeral=ephemeral)
    r = NoiseConnection(False, SR, rng=rng)
    r.receive(i.start())
    return r.data_to_send()
"""

MP_TIMER = COMMON + """
n = int(sys.argv[1])
impls = x25519.IMPLS
for impl in impls:
    state.set_impl(impl)
    m2 = reply_for(EI)
    for cached in (False, True):
        best = None
        for rep in range(3):
            t = time.ticks_us()
            for k in range(n):
                i = NoiseConnection(True, SI, "IK", PR, ephemeral=EI, static_public=PI if cached else None)
                i.start()
                i.receive(m2)
                assert i.handshake_done
            dt = time.ticks_diff(time.ticks_us(), t) / n
            best = dt if best is None or dt < best else best
        print(impl, "cached" if cached else "full", best)
    i = NoiseConnection(True, SI, "IK", PR, ephemeral=EI)
    i.start(); i.receive(m2)
    src = bytearray(640)
    t = time.ticks_us()
    for k in range(200):
        i.encrypt_from(src, 0, 640)
    print(impl, "msg640", time.ticks_diff(time.ticks_us(), t) / 200)
"""

MP_COUNT = COMMON + """
n = int(sys.argv[1])
state.set_impl("viper")
m2 = reply_for(EI)
for k in range(n):
    i = NoiseConnection(True, SI, "IK", PR, ephemeral=EI, static_public=PI)
    i.start()
    i.receive(m2)
"""

# How many X25519s one initiator handshake computes (x25519() counted; public_key goes through it).
MP_DH_COUNT = COMMON + """
state.set_impl("viper")
m2 = reply_for(EI)
real = x25519.x25519
calls = []
def counted(k, u, impl=None):
    calls.append(bytes(u) == b"\\x09" + bytes(31))
    return real(k, u, impl)
x25519.x25519 = counted
i = NoiseConnection(True, SI, "IK", PR, ephemeral=EI, static_public=PI)
i.start()
i.receive(m2)
print(len(calls), sum(calls))
"""


def micropython_times(n=10):
    res = {}
    for line in mpscript.run(MP_TIMER, n).stdout.splitlines():
        impl, what, us = line.split()
        res[(impl, what)] = float(us) / 1000  # ms
    return res


def host_times():
    sys.path.insert(0, str(ROOT / "host"))
    from alabama.noise import NoiseConnection, public_key
    si, sr = bytes(range(1, 33)), bytes(range(101, 133))
    pr = public_key(sr)

    def initiator_and_reply():
        i = NoiseConnection(True, si, pattern="IK", remote_static=pr)
        r = NoiseConnection(False, sr)
        first = i.start()
        r.receive(first)
        return i, r.data_to_send()

    pairs = [initiator_and_reply() for _ in range(300)]
    it = iter(pairs)

    def init_side():
        i, m2 = next(it)
        i.receive(m2)

    # initiator: construct + start() + receive(m2); start() is timed separately and added
    n = 300
    t_recv = timeit.timeit(init_side, number=n) / n
    t_start = min(timeit.repeat(lambda: NoiseConnection(True, si, pattern="IK", remote_static=pr).start(),
                                number=200, repeat=3)) / 200

    def responder():
        i = NoiseConnection(True, si, pattern="IK", remote_static=pr)
        r = NoiseConnection(False, sr)
        r.receive(i.start())
    t_pair = min(timeit.repeat(responder, number=200, repeat=3)) / 200
    return {"initiator": (t_start + t_recv) * 1000, "responder": (t_pair - t_start) * 1000}

# SHA-256 inside one initiator handshake: every hashlib.sha256 object counted with the bytes it hashed
# (MixHash, HMAC/HKDF), so the blocks the board's SHA accelerator takes over are known.
MP_SHA_COUNT = COMMON + """
import hashlib
from satellite.noise import hkdf
real = hashlib.sha256
digests = []
class Counted:
    def __init__(self, data=b""):
        self.h = real(data)
        self.n = len(data)
        digests.append(self)
    def update(self, data):
        self.h.update(data)
        self.n += len(data)
    def digest(self):
        return self.h.digest()
state.hashlib = hkdf.hashlib = type("H", (), {"sha256": Counted})
state.set_impl("viper")
m2 = reply_for(EI)
del digests[:]
i = NoiseConnection(True, SI, "IK", PR, ephemeral=EI, static_public=PI)
i.start()
i.receive(m2)
print(len(digests), sum((d.n + 9 + 63) // 64 for d in digests))
"""

# x86 instructions of hashlib.sha256 on the unix port (software SHA-256): n digests of `size` bytes.
MP_SHA_COST = """
import sys, hashlib
n = int(sys.argv[1])
size = int(sys.argv[2])
d = bytes(size)
for k in range(n):
    hashlib.sha256(d).digest()
"""


def sha_share(root=ROOT):
    """(digests, blocks, x86 instructions of software SHA-256) for one initiator handshake, or None."""
    vg = shutil.which("valgrind")
    if not vg:
        return None
    nd, nb = (int(x) for x in mpscript.run(MP_SHA_COUNT, root=root).stdout.split())
    cg = []
    for n, size in ((0, 55), (200, 55), (200, 55 + 64 * 7)):     # 1 block and 8 blocks per digest
        r = mpscript.run(MP_SHA_COST, n, size, wrap=(vg, "--tool=callgrind", "--callgrind-out-file=/dev/null"))
        cg.append(int(re.search(r"Collected : (\d+)", r.stderr).group(1)))
    per_block = (cg[2] - cg[1]) / 200.0 / 7.0                   # the compression function alone
    per_digest = (cg[1] - cg[0]) / 200.0 - per_block            # object, padding, digest, bytecode call
    return nd, nb, per_block, per_digest


def callgrind_per_handshake(n=3, root=ROOT):
    vg = shutil.which("valgrind")
    if not vg:
        return None
    counts = []
    for m in (0, n):
        r = mpscript.run(MP_COUNT, m, wrap=(vg, "--tool=callgrind", "--callgrind-out-file=/dev/null"), root=root)
        counts.append(int(re.search(r"Collected : (\d+)", r.stderr).group(1)))
    return (counts[1] - counts[0]) / n


def main():
    if not MP.exists():
        raise SystemExit("no micropython in %s: make install" % BIN)
    mp = micropython_times()
    host = host_times()
    v, p = mp[("viper", "full")], mp[("pure", "full")]
    print("Noise IK handshake, satellite (initiator) side, best of 3:")
    print("  micropython unix, firmware viper           : %8.2f ms" % v)
    print("  micropython unix, firmware viper, cached s : %8.2f ms" % mp[("viper", "cached")])
    print("  micropython unix, firmware pure            : %8.2f ms   (%.1fx viper)" % (p, p / v))
    print("  CPython host initiator (pyca/cryptography) : %8.3f ms   (firmware viper is %.0fx slower)"
          % (host["initiator"], v / host["initiator"]))
    print("  CPython host responder (pyca/cryptography) : %8.3f ms" % host["responder"])
    print("  one 640-byte transport message, viper: %.3f ms, pure: %.3f ms"
          % (mp[("viper", "msg640")], mp[("pure", "msg640")]))
    dh, dh_base = (int(x) for x in mpscript.run(MP_DH_COUNT).stdout.split())
    print("initiator IK handshake (static public key cached): %d X25519s, %d of them with u = 9 (the ephemeral"
          " key); SHA-256 through hashlib (mbedtls on the esp32 port)" % (dh, dh_base))
    ir = callgrind_per_handshake()
    if ir is None:
        print("valgrind not found: no instruction count (apt-get install -y valgrind)")
        return
    old = baseline.tree()
    ir_old = callgrind_per_handshake(root=old)
    est, est_old = ir / S3_HZ, ir_old / S3_HZ
    print("callgrind, viper path, x86-64 unix port: %.2f M instructions per IK initiator handshake "
          "(static public key cached; %s: %.2f M)" % (ir / 1e6, baseline.BASELINE, ir_old / 1e6))
    print("  -> ESP32-S3 estimate: %.0f ms at 240 MHz, 1 instr/cycle (lower bound)" % (est * 1e3))
    print("Issue 12 target: the satellite's IK handshake <= %.0f ms (x86-64 callgrind count / 240 MHz)"
          % (TARGET_S3_S * 1e3))
    print("  %s %.0f ms -> now %.0f ms: now/%s = %.2f; now/target = %.2f (%s)"
          % (baseline.BASELINE, est_old * 1e3, est * 1e3, baseline.BASELINE, est / est_old, est / TARGET_S3_S,
             "met" if est <= TARGET_S3_S else "NOT met"))
    sh = sha_share()
    nd, nb, pb, pd = sh
    soft = nb * pb
    print("SHA-256 in that handshake: %d hashlib.sha256 digests, %d compression blocks; on the unix port (software "
          "SHA-256) %.0f instructions a block + %.0f a digest -> %.2f M of the %.2f M counted (%.0f ms at 240 MHz)"
          % (nd, nb, pb, pd, soft / 1e6, ir / 1e6, soft / S3_HZ * 1e3))
    print("  on the board hashlib.sha256 is mbedTLS's (MicroPython v1.27.0 ports/esp32/mpconfigport.h: "
          "MICROPY_SSL_MBEDTLS; extmod/modhashlib.c), which ESP-IDF backs with the SHA accelerator "
          "(components/mbedtls/Kconfig: MBEDTLS_HARDWARE_SHA, default y): the handshake estimate without the "
          "software compression share is %.0f ms (now/target = %.2f); the accelerator's own cycles and "
          "mbedTLS's per-digest overhead are not modelled" % ((ir - soft) / S3_HZ * 1e3,
                                                              (ir - soft) / S3_HZ / TARGET_S3_S))


if __name__ == "__main__":
    main()
