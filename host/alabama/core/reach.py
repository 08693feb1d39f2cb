"""Responsible for the core port a provisioning record may carry: where the running core of a data dir listens (its
control file says) and whether another program holds that port on this machine. Not for listening or minting."""
import errno
import json
import pathlib
import socket

from ..errors import UsageError
from .control import CONTROL_FILE


def running_port(data_dir):
    """The TCP port the running core of DATA_DIR listens on; None when none runs there (no control file, or a stale
    one whose endpoint is gone); 0 for a running core whose control file does not say (an older core)."""
    path = pathlib.Path(data_dir) / CONTROL_FILE
    try:
        info = json.loads(path.read_text())
        first = json.loads((path.parent / info["workers"][0]).read_text()) if "workers" in info else info
        control_port = int(first["port"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    try:            # alive? an empty request line: the endpoint answers it with an error and closes
        with socket.create_connection(("127.0.0.1", control_port), timeout=2) as s:
            s.sendall(b"\n")
            s.recv(1)
    except OSError:
        return None
    listen = first.get("listen") or info.get("listen")
    try:
        return int(listen[1])
    except (TypeError, ValueError, IndexError):
        return 0


def is_local(host):
    """True when HOST is an address of this machine (something here could listen on it)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
        return True
    except (OSError, UnicodeError):            # not ours, a name that does not resolve here
        return False


def taken(port):
    """True when a program on this machine listens on PORT (a core could not listen on 0.0.0.0:PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)       # as the core binds: TIME_WAIT is no owner
        try:
            s.bind(("0.0.0.0", port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def record_port(data_dir, host, port, option="--port"):
    """The core port a record for HOST should carry: PORT as given (None: not given), checked against the running core
    of DATA_DIR (its port, the default) or, when none runs and HOST is this machine, refused when another program
    holds it (a board given the record would dial that program). One line saying what to do otherwise."""
    from .. import CORE_PORT
    running = running_port(data_dir)
    if running:
        if port is not None and port != running:
            raise UsageError("the core for %s listens on port %d, not %d: a board given this record would dial the "
                             "wrong port; pass %s %d (or leave %s out)" % (data_dir, running, port, option, running,
                                                                           option))
        return running
    port = CORE_PORT if port is None else port
    if running is None and is_local(host) and taken(port):
        raise UsageError("port %d on this machine is held by another program, and no core runs for %s: a board given "
                         "this record would dial that program; if it is a core started with another --data, give "
                         "that --data, else start this one there first (`alabama core serve --data %s --listen "
                         "0.0.0.0:%d`) or pick a free port with %s N" % (port, data_dir, data_dir, port, option))
    return port
