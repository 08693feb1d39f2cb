"""The one error hierarchy of the host tools: every error says what failed and what to do next.

Responsible for the error classes and the few translations of an OS error into such a line that several
commands share (a port that cannot be listened on); not for printing them (cli.py does, once)."""
import errno
import socket


class AlabamaError(Exception):
    """Base class. ``str(e)`` is one line a person can act on; the CLI prints it and exits 1."""

    exit_code = 1


class UsageError(AlabamaError):
    """The command line or a file the user gave is wrong."""

    exit_code = 2


def listen_error(exc, host, port, option="--listen", value="HOST:PORT"):
    """The one line for an OSError (or socket.gaierror) from binding HOST:PORT, naming the OPTION (and the VALUE it
    takes) to change. A port another program holds is a failure of the world (AlabamaError, status 1); an address
    not of this machine, a port below 1024 or a name that does not resolve is the command line's (UsageError, 2).

    Returned, not raised: ``raise listen_error(e, host, port) from None``."""
    where = "%s:%d" % (host, port)
    code = getattr(exc, "errno", None)
    if code == errno.EADDRINUSE:       # the world's state, not the command line's mistake: status 1
        return AlabamaError("%s is already in use (another core or program listens there): stop it, or pick another "
                          "port with %s %s (port 0: a free one)" % (where, option, value))
    if code == errno.EADDRNOTAVAIL:
        return UsageError("%s is not an address of this machine: use 0.0.0.0 (every interface), 127.0.0.1 (this "
                          "machine only) or one of its own addresses in %s" % (host, option))
    if code in (errno.EACCES, errno.EPERM):
        return UsageError("not allowed to listen on %s (ports below 1024 need root): pick a port of 1024 or more "
                          "with %s" % (where, option))
    if isinstance(exc, socket.gaierror):
        return UsageError("cannot resolve %r in %s: give an IP address such as 0.0.0.0 or 127.0.0.1"
                          % (host, option))
    return UsageError("cannot listen on %s (%s): check %s" % (where, exc.strerror or exc, option))
