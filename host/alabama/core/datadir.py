"""Where the reference core keeps its state: the default ``--data`` directory and the rule for a missing one.

Responsible for choosing the directory only (the platform's user data dir, via platformdirs, never the
current directory) and for refusing a directory that does not exist to commands that only read; not for
what is inside it (registry.py: key and registry, control.py: the control file).
"""
import os
import pathlib

from ..errors import UsageError


def default_data_dir():
    """<user data dir>/alabama/core: ~/.local/share/alabama/core on Linux ($XDG_DATA_HOME respected),
    ~/Library/Application Support/alabama/core on macOS, %LOCALAPPDATA%\\alabama\\core on Windows."""
    import platformdirs
    return pathlib.Path(platformdirs.user_data_dir("alabama", appauthor=False)) / "core"


def data_help(action="state directory (key, registry, reports)"):
    """The ``--data`` help line every command that takes the core's directory shows."""
    return "%s; default %s (the platform's user data dir)" % (action, default_data_dir())


def resolve(given, create=False):
    """The core's state directory from ``--data`` (None: the default). ``create``: a command that writes
    state (serve, approve --pubkey; key and token the default directory only) makes it, mode 0700 (it holds the core's private key); any other
    command refuses a directory that does not exist, or one with neither core.key nor registry.sqlite3 in it
    (a typo such as `--data ~`), instead of starting an empty registry there."""
    path = pathlib.Path(given).expanduser() if given else default_data_dir()
    if path.is_dir():
        from .registry import DB_NAME, KEY_NAME       # here: building the CLI parser must not load the registry
        if create or any((path / n).exists() for n in (KEY_NAME, DB_NAME)):
            return path
        raise UsageError("%s holds no core state (no %s, no %s): give --data the directory `alabama core serve` "
                         "uses%s" % (path, KEY_NAME, DB_NAME, "" if given else ", or start the core once with "
                                     "`alabama core serve`"))
    if path.exists():
        raise UsageError("--data %s is a file, not the core's state directory: give the directory `alabama core "
                         "serve` uses" % path)
    if not create:
        if given:
            raise UsageError("no core state in %s (no such directory): check the --data path, or start a core "
                             "there with `alabama core serve --data %s`" % (path, given))
        raise UsageError("no core state yet in %s: start the core once with `alabama core serve` (or give --data "
                         "the directory your core uses)" % path)
    try:
        os.makedirs(path, mode=0o700)
    except OSError as e:
        raise UsageError("cannot create the core's state directory %s (%s): give a writable --data DIR"
                         % (path, e.strerror or e)) from None
    return path
