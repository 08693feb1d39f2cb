"""Paths and the micropython runner shared by tests (import it as `mpharness`; conftest names collide)."""
import os
import pathlib
import subprocess

from alabama import local

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIRMWARE = ROOT / "firmware"
SHARED = pathlib.Path(os.environ.get("ALABAMA_SHARED", ROOT.parent / "shared"))


def micropython_cmd():
    """The unix-port interpreter: the venv's first, then PATH (alabama.local owns the search)."""
    return local.find_micropython(RuntimeError)


#: The 32-bit unix port (tools/mp32/build.sh; ALABAMA_MICROPYTHON32 names another one).
MP32 = local.micropython32_path()
#: Heap for dual test files on the 32-bit build: its default (1 MiB on 32-bit) is too small for the largest
#: test fixtures (the ggwave recordings, X25519 vector tables), not for the firmware itself.
MP32_HEAP = "2m"


#: The 32-bit interpreter, or None when it has not been built.
micropython32_cmd = local.micropython32


def micropython_env(extra=None):
    e = dict(os.environ)
    e["MICROPYPATH"] = os.pathsep.join([str(FIRMWARE), str(ROOT / "tests" / "firmware"), ".frozen"])
    e["ALABAMA_SHARED"] = str(SHARED)
    if extra:
        e.update(extra)
    return e


def run_micropython(args, timeout=600, heap=None, env=None, input=None, micropython=None):
    cmd = [micropython or micropython_cmd()]
    if heap:
        cmd += ["-X", "heapsize=%s" % heap]
    return subprocess.run(cmd + list(args), capture_output=True, timeout=timeout, env=micropython_env(env), input=input)
