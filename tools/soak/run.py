"""`make soak`: >= 500 back-to-back push-to-talk exchanges on the virtual board with periodic link cuts;
free heap (after gc.collect()) and the core's RSS sampled after every exchange; least-squares trends.

    .venv/bin/python tools/soak/run.py                       # 500 exchanges, a cut every 25, board heap
    .venv/bin/python tools/soak/run.py --exchanges 40 --cut-every 15 --warmup 8
    .venv/bin/python tools/soak/run.py --micropython build/mp32/micropython    # the 32-bit unix port
    .venv/bin/python tools/soak/run.py --probe-heap          # smallest heap the firmware runs an exchange in

Exit status 0 when the soak passes (every exchange completed, heap and RSS flat, no internal error, no
reboot), 1 when it does not, 2 when the rig could not start. Method and figures: docs/soak.md.
"""
import argparse
import json
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import soak  # noqa: E402


def board_heap(board="sim"):
    from alabama.board import boards
    return boards.load(board).heap


def word_bits(micropython):
    import subprocess
    out = subprocess.run([micropython, "-c", "import sys; print(sys.maxsize)"], capture_output=True, text=True,
                         timeout=10).stdout.strip()
    return 64 if int(out) > 2 ** 32 else 32


def probe(heap, micropython, workdir):
    """Does the firmware boot, complete 4 exchanges and survive a cut at this heap? (ok, detail)."""
    s = soak.Soak(workdir, exchanges=4, cut_every=3, heap=heap, micropython=micropython, warmup=0,
                  log=lambda *a: None, max_consecutive_failures=1)
    try:
        r = s.run()
    except Exception as e:  # noqa: BLE001 - a failed boot is the answer
        lines = [ln for ln in str(e).splitlines() if "MemoryError" in ln]
        return False, (lines[-1] if lines else str(e).splitlines()[0])[:200]
    ok = r["completed"] == r["exchanges"] == 4 and not r["failures"] and r["internal_errors"] == 0 \
        and r["board_boots"] == 1
    return ok, "free heap after gc %d..%d" % (min(x["heap_free"] for x in r["samples"]),
                                              max(x["heap_free"] for x in r["samples"]))


def probe_heap(micropython, workdir, lo_k, hi_k, step_k=8, out=print):
    """Bisect (in step_k KiB) the smallest heap that passes probe(); returns (KiB or None, log rows)."""
    rows = []

    def test(k):
        ok, why = probe("%dk" % k, micropython, pathlib.Path(workdir) / ("probe-%dk" % k))
        rows.append((k, ok, why))
        out("  heap %4dk: %s (%s)" % (k, "runs" if ok else "FAILS", why))
        return ok

    if not test(hi_k):
        return None, rows
    lo, hi = lo_k, hi_k                       # invariant: hi passes; lo assumed failing
    while hi - lo > step_k:
        mid = (lo + hi) // 2 // step_k * step_k
        if mid <= lo:
            mid = lo + step_k
        if test(mid):
            hi = mid
        else:
            lo = mid
    return hi, rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exchanges", type=int, default=500, help="exchanges that must complete (default 500)")
    ap.add_argument("--cut-every", type=int, default=25, metavar="N",
                    help="cut the link through the relay every N exchanges, rotating where the cut lands: "
                         "mid-capture, mid-render, idle (0: never; default 25)")
    ap.add_argument("--heap", default=None,
                    help="micropython -X heapsize (default: the sim board file's heap, as-is: no 64-bit allowance)")
    ap.add_argument("--micropython", default=None, metavar="PATH",
                    help="the micropython unix port to run the board on (default: what the virtual board picks; "
                         "build/mp32/micropython is the 32-bit build, where the board heap means what it means "
                         "on the chip)")
    ap.add_argument("--firmware", default=None, metavar="DIR", help="another firmware tree (e.g. a mutant)")
    ap.add_argument("--seed", type=int, default=1, help="where the cuts land inside their phase (default 1)")
    ap.add_argument("--warmup", type=int, default=soak.DEFAULT_WARMUP,
                    help="exchanges left out of the trend fit (default %(default)s)")
    ap.add_argument("--utterance-ms", type=int, default=400, help="audio per exchange (default 400 ms)")
    ap.add_argument("--report", default="build/soak/report.json", metavar="PATH",
                    help="JSON report (samples included); an SVG plot is written next to it (default %(default)s)")
    ap.add_argument("--workdir", default=None, help="flash dir, core data, logs (default: next to the report)")
    ap.add_argument("--probe-heap", action="store_true",
                    help="instead of soaking: find the smallest heap (8 KiB steps) the firmware completes "
                         "exchanges and a cut in, on this micropython")
    a = ap.parse_args(argv)

    mp = str(pathlib.Path(a.micropython).resolve()) if a.micropython else soak.default_micropython()
    bits = word_bits(mp)
    report = pathlib.Path(a.report)
    report.parent.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(a.workdir) if a.workdir else report.parent / "work"

    if a.probe_heap:
        bh = soak.parse_size(board_heap()) // 1024
        print("soak: probing the smallest working heap on %s (%d-bit); board file heap %dk" % (mp, bits, bh))
        k, rows = probe_heap(mp, work, lo_k=bh // 2, hi_k=bh * 3)
        if k is None:
            print("soak: the firmware does not run even at %dk" % (bh * 3))
            return 1
        print("soak: smallest working heap %dk = %.2f x the board file's %dk (%+dk)" % (k, k / bh, bh, k - bh))
        report.with_name("heap-probe.json").write_text(json.dumps(
            {"micropython": mp, "bits": bits, "board_heap_k": bh, "smallest_k": k,
             "probes": [{"heap_k": h, "ok": ok, "detail": d} for h, ok, d in rows]}, indent=1))
        return 0

    heap = a.heap or board_heap()
    print("soak: %d exchanges, a cut every %s, heap %s on %s (%d-bit)%s" % (
        a.exchanges, a.cut_every or "never", heap, mp, bits,
        "" if a.heap or bits == 32 else " - the board file's heap, with no allowance for 8-byte words"))
    s = soak.Soak(work, exchanges=a.exchanges, cut_every=a.cut_every, heap=heap, micropython=mp,
                  firmware=a.firmware, seed=a.seed, warmup=a.warmup, utterance_ms=a.utterance_ms)
    try:
        r = s.run()
    except Exception as e:  # noqa: BLE001
        print("soak: the rig did not come up: %s" % e, file=sys.stderr)
        return 2
    r["bits"] = bits
    r["host"] = os.uname().nodename
    report.write_text(json.dumps(r, indent=1))
    plot = soak.svg(r)
    if plot:
        report.with_suffix(".svg").write_text(plot)
    print()
    print(soak.table(r))
    for f in r["failures"][:5]:
        print("failure at exchange %d (%s): %s" % (f["i"], f["what"], f["error"].splitlines()[0]))
    print("\nreport %s%s" % (report, ", plot %s" % report.with_suffix(".svg") if plot else ""))
    return 0 if r["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
