"""Shared by the benchmarks: the firmware as it was at BASELINE ("today's figure" for issue 12), unpacked
from git beside the current tree so one run can measure both and print the ratio.

Not a benchmark itself (run.py runs bench_*.py only). The copy lives in build/bench/baseline-<commit>/
(firmware/ and the two viper generators, exactly as committed then) and is reused by later runs.
"""
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASELINE = "51fcb6a"  # the crypto before the issue-12 speed work
PATHS = ("firmware", "tools/gen_chacha_viper.py", "tools/gen_x25519_viper.py")


def tree(commit=BASELINE):
    """Directory holding firmware/ and tools/gen_*_viper.py as of commit (made once, from git archive)."""
    d = ROOT / "build" / "bench" / ("baseline-" + commit)
    stamp = d / "STAMP"
    if not stamp.exists():
        d.mkdir(parents=True, exist_ok=True)
        arch = subprocess.run(["git", "-C", str(ROOT), "archive", commit] + list(PATHS),
                              capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(d)], input=arch, check=True)
        stamp.write_text(commit + "\n")
    return d
