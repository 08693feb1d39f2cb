"""The multi-part sound-provisioning table (issue 36, docs/provisioning.md "Records over 140 bytes"): how
often the board's listening mode stores a long record (a 32-byte SSID and a 63-byte passphrase, so two
parts) after one play of `alabama provision sound`, and after two plays (the user plays it again while the
LED asks for a missing part), over SNR x sender clock drift. Prints a markdown table; asserts nothing.

    .venv/bin/python tools/provision/parts_table.py                       # the doc's table (make parts-table)
    .venv/bin/python tools/provision/parts_table.py --trials 1 --snr=0 --drift 1.0     # quick look

The channel is snr_table.py's (tools/bench/bench_ggwave.py): ggwave's real encoder at 48 kHz for each part
(what alabama.provision.sound sends: parts.split, PART_GAP_S apart, volume 25), band-limited resampling by
the clock ratio, white Gaussian noise over the full 48 kHz band at P_tones / P_noise = SNR (P_tones: the
mean square of the sound's non-silent samples, so the gaps between parts do not lower the noise), low-pass
and decimation to 16 kHz s16. Two plays are two independent noisy copies, 1 s apart. Each trial's record
is random (host, key, token, SSID and passphrase of those lengths) and fully determined by --seed, the
point and the trial number. The receiver is the firmware's listening mode itself (satellite.provision.
listen.Listener: ggwave_rx, parts, record, a key store in a scratch directory) under the venv's micropython.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

import snr_table as T   # noqa: E402  (puts firmware/, host/ and tools/bench on the path; the channel)

B = T.B
from alabama.provision import parts, record, sound  # noqa: E402

DEFAULT_SNR = "10,5,3,0,-3,-5"
DEFAULT_DRIFT = "0.98,1.0,1.02"
VOLUME = 25              # the reliability table's volume
SSID_BYTES, PASS_BYTES = 32, 63

# runs under micropython: listen to each raw s16 file named on stdin; print the stored record (or '-')
_MP_SCRIPT = r"""
import os, sys
from satellite import keystore as K
from satellite.provision import listen as L
buf = bytearray(640)
n = 0
while True:
    name = sys.stdin.readline().strip()
    if not name:
        break
    n += 1
    root = name + '.ks'
    ks = K.KeyStore(root, lambda k: b'\x11' * k, lambda k: bytes(reversed(k)))
    li = L.Listener(ks)
    got = None
    f = open(name, 'rb')
    while got is None:
        k = f.readinto(buf)
        if not k:
            break
        got = li.feed(buf, k // 2)
    f.close()
    print('R', name, li.raw.hex() if got is not None else '-', li.parts.held(), li.lost)
"""


def _text(rng, n):
    return "".join(chr(c) for c in rng.integers(33, 127, n))


def make_record(rng):
    """A random record with a SSID_BYTES SSID and a PASS_BYTES passphrase (a long home network's)."""
    host = "192.168.%d.%d" % (rng.integers(0, 256), rng.integers(1, 255))
    rec = record.build(host, 7355, bytes(rng.integers(0, 256, 32, dtype=np.uint8)), _text(rng, 22),
                       1767225600 + int(rng.integers(0, 10 ** 6)), _text(rng, SSID_BYTES), _text(rng, PASS_BYTES))
    return record.encode(rec)


def sound48(data):
    """The sound `alabama provision sound` sends for `data`, at 48 kHz, without lead or tail."""
    gap = np.zeros(int(sound.PART_GAP_S * B.FS48))
    xs = []
    for i, p in enumerate(parts.split(data)):
        if i:
            xs.append(gap)
        xs.append(B.ggwave_wave(p, VOLUME))
    return np.concatenate(xs)


def channel(x, r, snr_db, rng, plays):
    """`plays` noisy copies of x (drifted by r), 1 s apart, as a 16 kHz s16 microphone hears them."""
    sig = B.stretch(x, r)
    p = np.mean(sig[np.abs(sig) > 1e-6] ** 2)
    lead = np.zeros(int(rng.uniform(0.3, 1.3) * B.FS48))
    pause = np.zeros(B.FS48)
    y = np.concatenate([lead] + [np.concatenate([sig, pause]) for _ in range(plays)])
    y = y + rng.normal(0.0, np.sqrt(p / 10 ** (snr_db / 10.0)), len(y))
    return B.to16k(y)


def _work(args):
    seed, snr, r, t, plays, d = args
    rng = T.point_rng(seed, snr, r, t)
    data = make_record(rng)
    path = os.path.join(d, "p%d_%+.1f_%.4f_%d.raw" % (plays, snr, r, t))
    channel(sound48(data), r, snr, rng, plays).astype("<i2").tofile(path)
    return path, data


def decode(paths, mp=None):
    """{path: (stored record or None, parts held at the end, transmissions lost)} from one micropython run."""
    return {name: (None if got == "-" else bytes.fromhex(got), int(held), int(lost))
            for _, name, got, held, lost in T.run_script(_MP_SCRIPT, paths, mp=mp)}


def run(trials, snrs, drifts, seed, out=print, mp=None):
    t0 = time.time()
    rows = {}
    wrong = 0
    with tempfile.TemporaryDirectory() as d:
        work = [(seed, snr, r, t, plays, d) for snr in snrs for r in drifts for t in range(trials) for plays in (1, 2)]
        built = [_work(w) for w in work]
        got = decode([b[0] for b in built], mp)
    nparts = set()
    for (s, snr, r, t, plays, _), (path, data) in zip(work, built):
        rec, _, _ = got[path]
        nparts.add(len(parts.split(data)))
        wrong += rec is not None and rec != data
        a = rows.setdefault((snr, r), [0, 0])
        a[plays - 1] += rec == data
    out("listening mode (firmware/satellite/provision/listen.py + parts.py) on micropython %s; ggwave %s"
        % (T._mp_version(), T._gg_version()))
    out("%s; seed %d; records with a %d-byte SSID and a %d-byte passphrase (%s parts); %d trials per point; "
        "%.0f s" % (time.strftime("%Y-%m-%d"), seed, SSID_BYTES, PASS_BYTES, "/".join(map(str, sorted(nparts))),
                    trials, time.time() - t0))
    out("")
    out("| SNR (dB) |" + "".join(" drift %s: one play / two plays |" % T._pct(r) for r in drifts))
    out("|---" * (len(drifts) + 1) + "|")
    for snr in snrs:
        out("| %g |" % snr + "".join(" %s / %s |" % (T._rate(rows[(snr, r)][0], trials),
                                                    T._rate(rows[(snr, r)][1], trials)) for r in drifts))
    out("")
    out("wrong records stored: %d" % wrong)
    return rows, wrong


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=10, help="trials per point (default 10)")
    ap.add_argument("--snr", default=DEFAULT_SNR, help="dB, comma separated; --snr=-5,0 for negative values "
                                                      "(default %s)" % DEFAULT_SNR)
    ap.add_argument("--drift", default=DEFAULT_DRIFT, help="sender/receiver clock ratios (default %s)" % DEFAULT_DRIFT)
    ap.add_argument("--seed", type=int, default=36)
    a = ap.parse_args(argv)
    if a.trials < 1 or a.seed < 0:
        ap.error("--trials must be >= 1, --seed >= 0")
    snrs, drifts = T.points(ap, a)
    _, wrong = run(a.trials, snrs, drifts, a.seed)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
