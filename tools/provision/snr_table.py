"""The sound-provisioning reliability table (docs/provisioning.md, issue 16): decode success of our
firmware receiver and of ggwave's own decoder on the SAME samples, in one run, over SNR x sender
clock drift, with random payload lengths. Prints a markdown table; asserts nothing.

    .venv/bin/python tools/provision/snr_table.py                 # the doc's table (make snr-table)
    .venv/bin/python tools/provision/snr_table.py --trials 2 --snr=20,-5 --drift 1.0  # quick look
        (negative values need the --snr=... form: argparse takes "-5" for an option)
    .venv/bin/python tools/provision/snr_table.py --check-cpython 6   # + 6 trials also on CPython

Channel (one per trial, fully determined by --seed, the point and the trial number):
  payload: random length 1..140 bytes (ggwave's variable-length limit), random bytes;
  signal:  ggwave.encode(payload, protocolId=8 = [DT] Fastest, volume 25) at 48 kHz, the real
           encoder of the protocol our receiver decodes;
  drift:   band-limited FFT resampling by the sender/receiver clock ratio r (tones x r, durations
           / r); 0.3..1.3 s of silence before, 0.4 s after;
  noise:   white Gaussian noise at 48 kHz over the whole recording, of power
           P_noise = P_tones / 10^(SNR/10), where P_tones is the mean square of the (resampled)
           transmission over its own duration (markers and data tones, ramps included) and
           P_noise is the noise's total power over the full 0..24 kHz band;
  ggwave's decoder (PyPI `ggwave` ggwave.decode, listening for protocol 8 only) gets that 48 kHz
           float32 mixture in 1024-sample blocks; ours gets the same mixture low-passed (7 kHz)
           and decimated to 16 kHz s16, as an I2S microphone at 16 kHz delivers it.

Our receiver runs as the firmware itself: firmware/satellite/provision/ggwave_rx.py under the
venv's micropython unix port (viper kernels). --check-cpython N re-decodes N trials with the same
module on CPython (pure kernels) and reports any decision that differs (there should be none: the
fixed-point kernels give the same numbers bit for bit).
"""
import argparse
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "firmware"))
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(ROOT / "tools" / "bench"))
sys.path.insert(0, str(ROOT / "host"))
from alabama import mpcompat  # noqa: E402
mpcompat.install()  # CPython stand-ins for micropython.const, time.ticks_*, asyncio.sleep_ms

import bench_ggwave as B  # noqa: E402  (the channel: ggwave encoder, resampling, noise, 16 kHz)

MAX_PAYLOAD = 140
DEFAULT_SNR = "30,20,10,5,3,0,-3,-5,-8,-10"
DEFAULT_DRIFT = "0.98,0.99,1.0,1.01,1.02"

# runs under micropython: decode each raw s16 file named on stdin, one result line per file
_MP_SCRIPT = r"""
import sys
from satellite.provision.ggwave_rx import GgwaveReceiver
buf = bytearray(1024)
while True:
    name = sys.stdin.readline().strip()
    if not name:
        break
    rx = GgwaveReceiver()
    got = None
    f = open(name, 'rb')
    while True:
        k = f.readinto(buf)
        if not k:
            break
        p = rx.feed(buf, k // 2)
        if p is not None and got is None:
            got = p
    f.close()
    print('R', name, got.hex() if got is not None else '-', rx.state, rx.fail_code, repr(rx.ratio),
          bytes(rx._data).hex())
"""


def micropython():
    from alabama.local import find_micropython
    return find_micropython(SystemExit)


def point_rng(seed, snr, r, t):
    # entropy from (seed, point, trial) only: any row or point run alone gives the same samples
    return np.random.default_rng([seed, int(round(snr * 10)) + 1000, int(round(r * 10000)), t])


def make_trial(seed, snr, r, t):
    rng = point_rng(seed, snr, r, t)
    n = int(rng.integers(1, MAX_PAYLOAD + 1))
    payload = bytes(rng.integers(0, 256, n, dtype=np.uint8))
    mix48, mix16 = B.channel(B.ggwave_wave(payload), r, snr, rng)
    return payload, mix48, mix16


def stream_of(payload):
    """The byte stream ggwave sends: the length and its 2 RS parity bytes, the payload, its RS parity
    (firmware/satellite/provision/rs.py encodes; tests/firmware/test_ggwave_rx.py checks this layout)."""
    from satellite.provision import rs
    n, ecc = len(payload), rs.ecc_len(len(payload))
    buf = bytearray(3 + n + ecc)
    buf[0] = n
    code = rs.RS()
    code.encode(buf, 0, 1, 2)
    buf[3:3 + n] = payload
    code.encode(buf, 3, n, ecc)
    return bytes(buf)


def decode_cpython(x16):
    """Our receiver on CPython (pure kernels), the same feed pattern as the micropython run."""
    from satellite.provision import _goertzel_pure
    from satellite.provision.ggwave_rx import GgwaveReceiver
    rx = GgwaveReceiver(kernels=_goertzel_pure)
    raw = x16.astype("<i2").tobytes()
    got = None
    for i in range(0, len(raw), 1024):
        blk = raw[i:i + 1024]
        p = rx.feed(blk, len(blk) // 2)
        if p is not None and got is None:
            got = p
    return (got, rx.state, rx.fail_code, rx.ratio, bytes(rx._data))


def run_script(script, paths, fw=None, mp=None):
    """Run `script` under micropython with the firmware on its path and `paths` on stdin, one a line; its
    "R ..." result lines, split. fw: another firmware tree, mp: another interpreter (the 32-bit one)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(script)
        scr = f.name
    try:
        env = dict(os.environ)
        env["MICROPYPATH"] = str(fw or ROOT / "firmware")
        r = subprocess.run([mp or micropython(), scr], input="\n".join(paths) + "\n\n", capture_output=True,
                           text=True, env=env, timeout=3600)
    finally:
        os.unlink(scr)
    if r.returncode:
        raise SystemExit("micropython failed:\n" + r.stdout[-2000:] + r.stderr[-2000:])
    return [line.split() for line in r.stdout.splitlines() if line.startswith("R ")]


def decode_micropython(paths, fw=None, mp=None):
    """{path: (payload or None, state, fail_code, ratio, decided bytes)} from one micropython run;
    fw: another firmware tree (before/after comparisons), mp: another interpreter (the 32-bit one)."""
    res = {}
    for _, name, got, st, fc, ratio, data in run_script(_MP_SCRIPT, paths, fw, mp):
        res[name] = (None if got == "-" else bytes.fromhex(got), int(st), int(fc), float(ratio), bytes.fromhex(data))
    return res


def same_decision(a, b):
    """Payload, state, fail code and every decided byte equal; clock ratio equal to 1e-9 (the two
    ports print floats with different digit counts)."""
    return a[:3] == b[:3] and a[4] == b[4] and abs(a[3] - b[3]) < 1e-9


def _stage(state, fail_code):
    from satellite.provision import ggwave_rx as G
    if state == G.STATE_IDLE:
        return "marker"
    return {G.FAIL_MARKER: "marker-end", G.FAIL_LENGTH: "length", G.FAIL_SIGNAL: "signal",
            G.FAIL_END: "end", G.FAIL_RS: "rs"}.get(fail_code, "?")


def _work(args):
    """Build one trial's samples, run ggwave's decoder on them, write ours' input to dir."""
    seed, snr, r, t, d = args
    payload, mix48, mix16 = make_trial(seed, snr, r, t)
    theirs = B.ggwave_decode(mix48)
    path = os.path.join(d, "t_%+.1f_%.4f_%d.raw" % (snr, r, t))
    mix16.astype("<i2").tofile(path)
    return path, payload, theirs == payload


def _chunks(xs, k):
    return [xs[i::k] for i in range(k)]


def _decode_part(args):
    return decode_micropython(*args)


def run(trials, snrs, drifts, seed, jobs, check_cpython=0, out=print, fw=None):
    import multiprocessing
    from satellite.provision import rs as RS
    t0 = time.time()
    work = []
    with tempfile.TemporaryDirectory() as d:
        for snr in snrs:
            for r in drifts:
                for t in range(trials):
                    work.append((seed, snr, r, t, d))
        with multiprocessing.Pool(jobs) as pool:
            built = pool.map(_work, work, chunksize=2)
            paths = [b[0] for b in built]
            ours = {}
            for part in pool.map(_decode_part, [(c, fw) for c in _chunks(paths, jobs) if c]):
                ours.update(part)
        differ = []
        checked = 0
        if check_cpython:
            # the lowest-SNR trials first: the decisions that can go either way
            order = sorted(range(len(work)), key=lambda i: (work[i][1], work[i][3]))
            for i in order[:check_cpython]:
                x16 = np.fromfile(paths[i], dtype="<i2")
                got = decode_cpython(x16)
                checked += 1
                if not same_decision(got, ours[paths[i]]):
                    differ.append(paths[i])
    dt = time.time() - t0
    rows = {}
    lost = {}
    wrong = 0
    for (s, snr, r, t, _), (path, payload, g_ok) in zip(work, built):
        got, st, fc, _ratio, data = ours[path]
        o_ok = got == payload
        if got is not None and not o_ok:
            wrong += 1
        k = (snr, r)
        a = rows.setdefault(k, [0, 0, 0, 0])       # ours, ggwave, ggwave-only, ours-only
        a[0] += o_ok
        a[1] += g_ok
        a[2] += g_ok and not o_ok
        a[3] += o_ok and not g_ok
        if not o_ok:
            stage = _stage(st, fc)
            if stage in ("rs", "signal", "end"):
                # how many of the symbols were decided wrong, against what RS can correct
                ref = stream_of(payload)
                nerr = sum(1 for j in range(3, len(ref)) if data[j] != ref[j])
                stage += "(%d/%d)" % (nerr, RS.ecc_len(len(payload)) // 2)
            lost.setdefault(k, []).append(stage)
    out("receiver %s/satellite/provision/ggwave_rx.py on micropython %s (viper); ggwave %s"
        % (fw or "firmware", _mp_version(), _gg_version()))
    out("%s, %s, python %s; seed %d; random payloads 1..%d bytes; %d trials per point; %.0f s with "
        "%d job(s)" % (time.strftime("%Y-%m-%d"), platform.node() or platform.machine(),
                       platform.python_version(), seed, MAX_PAYLOAD, trials, dt, jobs))
    out("")
    out("| SNR (dB) |" + "".join(" drift %s: ours / ggwave |" % _pct(r) for r in drifts))
    out("|---" * (len(drifts) + 1) + "|")
    for snr in snrs:
        line = "| %g |" % snr
        for r in drifts:
            o, g, _, _ = rows[(snr, r)]
            line += " %s / %s |" % (_rate(o, trials), _rate(g, trials))
        out(line)
    out("")
    out("same samples: trials ggwave decoded and ours did not / ours decoded and ggwave did not")
    for snr in snrs:
        out("  SNR %g: " % snr + ", ".join("drift %s %d / %d" % (_pct(r), rows[(snr, r)][2], rows[(snr, r)][3])
                                        for r in drifts))
    out("wrong payloads returned by our receiver: %d" % wrong)
    for k in sorted(lost):
        out("our losses at SNR %g, drift %s: %s" % (k[0], _pct(k[1]), " ".join(sorted(lost[k]))))
    if check_cpython:
        out("CPython (pure kernels) vs micropython (viper): %d trial(s) re-decoded, %d decision(s) "
            "differ" % (checked, len(differ)))
    return rows, wrong, differ


def _rate(k, n):
    return "%d%%" % round(100.0 * k / n)


def _pct(r):
    return "%+.0f%%" % ((r - 1.0) * 100) if r != 1.0 else "0"


def _mp_version():
    try:
        r = subprocess.run([micropython(), "-c", "import sys; print(sys.version.split()[-1] if 0 else "
                            "'%d.%d.%d' % sys.implementation.version[:3])"], capture_output=True, text=True)
        return r.stdout.strip()
    except OSError:
        return "?"


def _gg_version():
    try:
        from importlib.metadata import version
        return version("ggwave")
    except Exception:
        return "?"


def points(ap, a):
    """(snrs, drifts) from --snr and --drift, or ap.error saying what they take."""
    try:
        snrs = [float(s) for s in a.snr.split(",")]
        drifts = [float(s) for s in a.drift.split(",")]
    except ValueError:
        ap.error("--snr and --drift take comma-separated numbers, e.g. --snr=5,-3 --drift 0.98,1.0")
    if any(not 0.9 <= r <= 1.1 for r in drifts):
        ap.error("--drift is a clock ratio near 1 (0.98 = -2 %), within 0.9..1.1")
    return snrs, drifts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=50, help="trials per point (default 50)")
    ap.add_argument("--snr", default=DEFAULT_SNR, help="dB, comma separated; --snr=-5,0 for negative values (default %s)" % DEFAULT_SNR)
    ap.add_argument("--drift", default=DEFAULT_DRIFT,
                    help="sender/receiver clock ratios (default %s)" % DEFAULT_DRIFT)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--check-cpython", type=int, default=0, metavar="N",
                    help="re-decode the N lowest-SNR trials on CPython and compare decisions")
    ap.add_argument("--fw", default=None, help="decode with another firmware tree (DIR holding "
                    "satellite/), e.g. an older commit's: git archive OLD firmware | tar -x -C /tmp/old")
    a = ap.parse_args(argv)
    if a.trials < 1 or a.jobs < 1 or a.seed < 0:
        ap.error("--trials and --jobs must be >= 1, --seed >= 0")
    snrs, drifts = points(ap, a)
    if a.fw and a.check_cpython:
        ap.error("--check-cpython compares this tree's receiver; leave it out with --fw")
    _, wrong, differ = run(a.trials, snrs, drifts, a.seed, a.jobs, a.check_cpython, fw=a.fw)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
