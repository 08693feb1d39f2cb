"""Shared by the benchmarks: run a snippet under the venv's micropython with the firmware on its path."""
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
MP = pathlib.Path(sys.executable).parent / "micropython"


def run(text, *args, wrap=(), timeout=1800, root=ROOT):
    """Run `text` as a script (argv = args), optionally under `wrap` (e.g. valgrind), with root/firmware
    on the path (root: another checkout, e.g. baseline.tree()); fixed hash seed so instruction counts
    repeat. Exits the benchmark with micropython's output when it fails."""
    env = dict(os.environ, MICROPYPATH=str(pathlib.Path(root) / "firmware"), PYTHONHASHSEED="0")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(text)
    try:
        r = subprocess.run(list(wrap) + [str(MP), f.name] + [str(a) for a in args],
                           capture_output=True, text=True, env=env, timeout=timeout)
    finally:
        os.unlink(f.name)
    if r.returncode:
        raise SystemExit("micropython failed:\n" + r.stdout + r.stderr)
    return r
