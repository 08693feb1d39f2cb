#!/usr/bin/env python3
"""The fault campaign (`make faults`): >= 100 random cuts over every protocol phase plus stalls, byte flips,
delays and core restarts mid-exchange, between one virtual board and the reference core on 127.0.0.1.

Prints the fault table (kind x phase: injected, recovered, time to recover p50/p99, leaked) and writes
build/faults/<seed>.json; with --doc it replaces the table between the markers in docs/reliability.md.
Deterministic placement: --seed (printed) draws the order and every fault's point; timings are the
machine's. Exit status 0 only when every fault was injected, recovered within its bound and leaked nothing.

    .venv/bin/python tools/faults/run.py [--seed N] [--scale 0.2] [--short] [--firmware DIR] [--doc]
"""
import argparse
import json
import logging
import os
import pathlib
import platform
import random
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "host"))

from alabama.hil import faults  # noqa: E402
from alabama.hil.bench import sim_bench  # noqa: E402

DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- fault-table:begin -->", "<!-- fault-table:end -->"


def run_campaign(plan, seed, firmware=None, workdir=None, log=print, env=None, stop_on_fail=False):
    """Run ``plan`` on one fresh board + core; returns (results, seconds)."""
    rng = random.Random(seed)
    work = pathlib.Path(workdir or tempfile.mkdtemp(prefix="alabama-faults-"))
    bench = sim_bench(work, firmware=firmware, log=log)
    fb = faults.FaultBench(bench, rng=rng, env=env)
    results = []
    t0 = time.monotonic()
    try:
        fb.up()
        todo = faults.specs(plan, rng)
        for i, spec in enumerate(todo, 1):
            r = fb.run(spec)
            results.append(r)
            log("%3d/%d %-34s %s" % (i, len(todo), "%s@%s" % (spec.kind, spec.phase),
                                     ("ok %6.0f ms" % (1000 * r.recover_s) if r.recover_s is not None else "ok (%s)" % r.detail) if r.ok else
                                     "FAIL " + "; ".join(r.problems + r.leaks)[:300]))
            if stop_on_fail and not r.ok:
                break
    finally:
        bench.close()
    return results, time.monotonic() - t0, bench


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every count of the plan")
    ap.add_argument("--short", action="store_true", help="the short plan of tests/host/test_faults.py")
    ap.add_argument("--firmware", help="another firmware tree (e.g. a mutant: python -m alabama.hil.mutants)")
    ap.add_argument("--out", default=str(ROOT / "build" / "faults"))
    ap.add_argument("--doc", action="store_true", help="write the table into docs/reliability.md")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)   # the core logs every expected decrypt failure and reset otherwise
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "big")
    plan = faults.SHORT_PLAN if a.short else [(k, p, max(1, round(n * a.scale))) for k, p, n in faults.PLAN]
    print("fault campaign: seed %d, %d faults planned (rerun: tools/faults/run.py --seed %d%s)"
          % (seed, sum(n for _, _, n in plan), seed, " --short" if a.short else ""))
    results, secs, bench = run_campaign(plan, seed, firmware=a.firmware)
    rows = faults.table(results)
    text = faults.format_table(rows)
    s = faults.summary(results)
    print()
    print(text)
    print()
    print("%d faults (%d cuts) in %.0f s: %d injected, %d recovered with nothing leaked, %d leaked; "
          "recover p50 %.0f ms, p99 %.0f ms" % (s["faults"], s["cuts"], secs, s["injected"], s["ok"], s["leaked"],
                                               s["recover_p50_ms"] or 0, s["recover_p99_ms"] or 0))
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"seed": seed, "date": time.strftime("%Y-%m-%d %H:%M"), "seconds": round(secs, 1),
            "machine": "%s, %d CPUs, Python %s" % (platform.platform(), os.cpu_count() or 0, platform.python_version()),
            "env": faults.CAMPAIGN_ENV, "core_ping_s": faults.CORE_PING_S, "summary": s, "table": rows,
            "faults": [r.as_dict() for r in results]}
    path = out / ("%d.json" % seed)
    path.write_text(json.dumps(meta, indent=1))
    print("details: %s" % path)
    if a.doc:
        doc = DOC.read_text()
        if BEGIN not in doc or END not in doc:
            print("docs/reliability.md has no %s ... %s markers" % (BEGIN, END))
            return 2
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        block = ("%s\n`tools/faults/run.py --seed %d` on %s (%s): %d faults in %.0f s.\n\n%s\n%s"
                 % (BEGIN, seed, meta["date"], meta["machine"], s["faults"], secs, text, END))
        DOC.write_text(head + block + tail)
        print("table written into %s" % DOC)
    bad = [r for r in results if not r.ok]
    for r in bad:
        print("FAILED: %r" % r)
    return 0 if results and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
