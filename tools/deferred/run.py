#!/usr/bin/env python3
"""The DEFERRED cut campaign (`make deferred`, issue 13): recordings made on the virtual board while the core is
out of reach, their uploads cut at random points (>= 100 cuts that land with chunks still to go), judged
against what the board recorded on its flash: chunks lost, chunks stored twice by the core, byte-identical
audio (sha256), capture_ts mapped to the wall clock within 20 ms, one Response each. Then the allocation of
one steady-state deferred chunk under both micropython builds (tests/firmware/test_deferred.py's path).

Prints the table and writes build/deferred/<seed>.json; with --doc it replaces the table between the markers
in docs/deferred.md. Exit status 0 only when every recording was delivered exactly once, byte-identical,
within the clock bound, and >= --min-cuts cuts landed.

    .venv/bin/python tools/deferred/run.py [--seed N] [--recordings 60] [--min-cuts 100] [--doc]
"""
import argparse
import json
import logging
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(ROOT / "tests"))

from alabama.hil import deferred as HD  # noqa: E402
from alabama.hil.bench import sim_bench  # noqa: E402

DOC = ROOT / "docs" / "deferred.md"
BEGIN, END = "<!-- deferred-table:begin -->", "<!-- deferred-table:end -->"

#: The micropython side of the allocation measure (run with an empty store directory).
MP_ALLOC = pathlib.Path(__file__).resolve().parent / "mp_alloc.py"


def alloc_per_chunk():
    """{build: bytes per chunk} over 200 chunks, on the venv's 64-bit and build/mp32's 32-bit micropython."""
    from mpharness import MP32, MP32_HEAP, micropython32_cmd, run_micropython
    out = {}
    for name, cmd, heap in (("micropython 64-bit", None, None), ("micropython 32-bit (build/mp32)",
                                                                  micropython32_cmd(), MP32_HEAP)):
        if name.endswith("(build/mp32)") and cmd is None:
            out[name] = "not built (%s)" % MP32
            continue
        with tempfile.TemporaryDirectory(prefix="alabama-deferred-alloc-") as store:
            p = run_micropython([str(MP_ALLOC), store], micropython=cmd, heap=heap)
        line = [ln for ln in p.stdout.decode().splitlines() if ln.startswith("ALLOC")]
        if not line:
            out[name] = "failed: %s" % (p.stderr.decode() or p.stdout.decode())[-300:]
            continue
        _, total, n = line[0].split()
        out[name] = int(total) / int(n)
    return out


def table(summary, alloc, seed, seconds):
    lines = [
        "| measured | value |",
        "|---|---|",
        "| recordings (made offline, 0.4-1.6 s each) | %d |" % summary["recordings"],
        "| deferred chunks recorded (20 ms each) | %d |" % summary["chunks"],
        "| cuts that landed with chunks still to go | %d |" % summary["cuts"],
        "| recordings delivered | %d |" % summary["delivered"],
        "| chunks lost | %d |" % summary["lost"],
        "| chunks stored twice by the core | %d |" % summary["stored_twice"],
        "| chunks the board resent below the core's CaptureAck (flagged) | %d |" % summary["resent_flagged"],
        "| recordings byte-identical at the core (sha256 vs the board's flash) | %d / %d |" % (
            summary["identical"], summary["recordings"]),
        "| extra Responses (a recording answered twice) | %d |" % summary["responses_extra"],
        "| capture_ts -> wall clock, max error | %.1f ms |" % (summary["clock_err_us_max"] / 1000.0),
        "| capture_ts -> wall clock, median error | %.1f ms |" % (summary["clock_err_us_median"] / 1000.0),
    ]
    for k, v in alloc.items():
        lines.append("| bytes allocated per steady-state deferred chunk, %s | %s |" % (
            k, ("%g" % v) if isinstance(v, (int, float)) else v))
    lines.append("")
    lines.append("Seed %d, %.0f s, %s, Python %s, `tools/deferred/run.py` on %s." % (
        seed, seconds, platform.machine(), platform.python_version(), time.strftime("%Y-%m-%d")))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--recordings", type=int, default=80)
    ap.add_argument("--min-cuts", type=int, default=100)
    ap.add_argument("--doc", action="store_true", help="write the table into docs/deferred.md")
    a = ap.parse_args()
    logging.getLogger("alabama.core").setLevel(logging.ERROR)
    work = pathlib.Path(tempfile.mkdtemp(prefix="alabama-deferred-"))
    bench = sim_bench(work)
    t0 = time.monotonic()
    ok = True
    try:
        db = HD.DeferredBench(bench, rng=__import__("random").Random(a.seed))
        db.up()
        rows, summary = [], None
        try:
            rows, summary = HD.scenario_cuts(db, a.recordings, seed=a.seed)
        except AssertionError as e:
            print("FAIL:", e)
            ok = False
            rows, dup = db.judge([])
        if summary is None:
            summary = HD.summarize(rows, 0, 0)
    finally:
        bench.close()
    seconds = time.monotonic() - t0
    alloc = alloc_per_chunk()
    txt = table(summary, alloc, a.seed, seconds)
    print(txt)
    out = ROOT / "build" / "deferred"
    out.mkdir(parents=True, exist_ok=True)
    (out / ("%d.json" % a.seed)).write_text(json.dumps({"summary": summary, "alloc": alloc, "rows": rows}, indent=1))
    ok = ok and summary["cuts"] >= a.min_cuts and summary["lost"] == 0 and summary["stored_twice"] == 0 \
        and summary["identical"] == summary["recordings"] and all(v == 0 for v in alloc.values() if not isinstance(v, str))
    if a.doc:
        doc = DOC.read_text()
        i, j = doc.index(BEGIN) + len(BEGIN), doc.index(END)
        DOC.write_text(doc[:i] + "\n" + txt + "\n" + doc[j:])
    print("deferred campaign: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
