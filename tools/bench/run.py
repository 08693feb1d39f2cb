"""Run every benchmark in tools/bench/ (bench_*.py) in one go and print their reports.

Benchmarks report ratios measured in one run (never timed assertions). Pass names (or parts of names)
to run a subset, e.g. the firmware crypto (AEAD and X25519) side by side:
    .venv/bin/python tools/bench/run.py crypto
    .venv/bin/python tools/bench/run.py codec frame
"""
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def main(argv):
    names = sorted(p for p in HERE.glob("bench_*.py"))
    if argv:
        names = [p for p in names if any(a in p.stem for a in argv)]
        if not names:
            print("run.py: no benchmark named %s; have: %s" % (", ".join(argv),
                  ", ".join(p.stem[6:] for p in HERE.glob("bench_*.py"))), file=sys.stderr)
            return 2
    failed = []
    for p in names:
        print("=" * 78)
        print("%s   (%s)" % (p.stem, time.strftime("%Y-%m-%d %H:%M:%S")))
        print("=" * 78, flush=True)
        r = subprocess.run([sys.executable, str(p)], cwd=str(HERE.parent.parent))
        if r.returncode:
            failed.append(p.stem)
    if failed:
        print("run.py: failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
