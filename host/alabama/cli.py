"""The `alabama` command: one argparse tree, each sub-command registered by its own module.

A module in COMMANDS exposes ``register(subparsers)``; it adds its parser(s) and sets
``func(args) -> int`` as the default. Errors derived from AlabamaError print one line and exit.
"""
import faulthandler
import importlib
import logging
import signal
import sys

from . import __version__
from .errors import AlabamaError
from . import usage
from .usage import Parser, as_typed, quiet_broken_pipe

#: Modules that add sub-commands, in the order `alabama --help` lists them.
COMMANDS = [
    "alabama.codegen.cli",
    "alabama.conformance.cli",
    "alabama.board.cli",
    "alabama.demo",
    "alabama.core.cli",
    "alabama.provision.cli",
    "alabama.hil.cli",
    "alabama.wake.cli",
]


#: Options whose value is free text that may begin with '-' (a pairing token: secrets.token_urlsafe mints one in 64
#: that way; a Wi-Fi name or passphrase). argparse would read `--token -abc` as a missing value and an unknown option,
#: so the value after one of these is joined to it (`--token=-abc`) before parsing: it is always the option's value.
FREE_VALUE_OPTIONS = ("--token", "--wifi-ssid", "--wifi-passphrase")


def join_free_values(argv):
    out = []
    it = iter(argv)
    for a in it:
        if a in FREE_VALUE_OPTIONS:
            nxt = next(it, None)
            a = a if nxt is None else "%s=%s" % (a, nxt)
        out.append(a)
    return out


def build_parser():
    p = Parser(prog="alabama", description="Alabama satellite toolchain")
    p.add_argument("--version", action="version", version="alabama " + __version__)
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv: one line per frame)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    usage.ROOT_COMMANDS[:] = [a.dest for a in sub._choices_actions]     # listed ones: an old spelling is hidden
    return p


def main(argv=None):
    try:
        status = _main(argv)
        sys.stdout.flush()                  # here, not at exit: a reader that went away is one quiet status
        return status
    except BrokenPipeError:                 # `alabama core token | head -1`: the reader has what it wanted
        return quiet_broken_pipe()
    except SystemExit:                      # --help, --version, a usage error: printed in full, or quietly cut
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            return quiet_broken_pipe()
        raise


def _main(argv):
    # `kill -USR1 PID` prints every thread's stack to stderr: what a stuck command waits on
    if hasattr(faulthandler, "register") and hasattr(signal, "SIGUSR1"):
        try:
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        except (OSError, ValueError, AttributeError):     # stderr without a file descriptor (captured in tests)
            pass
    parser = build_parser()
    args = parser.parse_args(join_free_values(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=logging.WARNING - 10 * min(args.verbose, 2),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return args.func(args) or 0
    except AlabamaError as e:
        print("alabama: error: %s" % as_typed(str(e)), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("alabama: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
