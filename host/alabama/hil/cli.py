"""`alabama hil`: run the HIL scenario suite against the virtual board or a real one; argument parsing only.

Runs pytest in-process on the scenarios shipped in ``alabama.hil.scenarios`` with the plugin
``alabama.hil.plugin``; everything after ``--`` goes to pytest unchanged.
"""
import os
import pathlib
import sys

from ..errors import AlabamaError, UsageError

SCENARIOS = pathlib.Path(__file__).resolve().parent / "scenarios"
DEFAULT_REPORT = os.path.join("build", "hil")
# A backstop, not a budget: every wait in a scenario has its own deadline. The longest scenario (the long run
# at --long-runs 10 on a real board) takes well under this.
DEFAULT_TIMEOUT = 900


def register(sub):
    p = sub.add_parser("hil", help="run the HIL scenario suite (virtual board or a real one) and write a report",
                       description="Bring up a reference core, provision the board, run every scenario (spec "
                                   "§4 examples, §7.3 admission, limits, forward compatibility, liveness, long run) "
                                   "and write DIR/report.html, DIR/junit.xml and DIR/history.json.")
    p.add_argument("--board", required=True, metavar="sim|PORT",
                   help="'sim' for the virtual board, or the serial port of a real board (e.g. /dev/ttyACM0)")
    p.add_argument("--board-type", metavar="NAME", help="board file name (boards/NAME.json); default sim "
                                                        "for the virtual board, required for a real one")
    p.add_argument("-k", dest="pattern", metavar="PATTERN", help="only scenarios matching this pytest -k expression")
    p.add_argument("--report", metavar="DIR", default=DEFAULT_REPORT, help="report directory (default %(default)s)")
    p.add_argument("--bind", metavar="ADDR", help="real board: the LAN address of this computer the board "
                                                  "connects to (the core listens there)")
    p.add_argument("--port", type=int, default=0, metavar="N", help="TCP port for the board (default: any free)")
    p.add_argument("--loopback", action="store_true", help="real board: speaker acoustically looped to the mic")
    p.add_argument("--speaker-out", metavar="DEVICE", help="real board: the host's audio output (ALSA device) "
                   "next to the board's microphone; the intelligibility scenarios play known utterances there "
                   "(skipped without it)")
    p.add_argument("--no-deploy", action="store_true", help="real board: do not run `alabama deploy` first")
    p.add_argument("--firmware", metavar="DIR", help="virtual board: run this firmware tree instead of firmware/")
    p.add_argument("--long-runs", type=int, default=10, metavar="N", help="exchanges in the long-run scenario")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, metavar="S",
                   help="fail a scenario still running after S seconds, its bring-up included, and go on with "
                        "the next (pytest-timeout; 0 = never; default %(default)s)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed to pytest after --")
    p.set_defaults(func=cmd_hil)


def pytest_argv(args):
    if args.board != "sim" and not args.board_type:
        raise UsageError("a real board needs --board-type NAME (see `alabama board list`)")
    if args.timeout < 0:
        raise UsageError("--timeout %d: give the seconds a scenario may take, or 0 for no limit" % args.timeout)
    if args.board != "sim" and not args.bind and not args.list:
        raise UsageError("a real board reaches the core over Wi-Fi: pass --bind <this computer's LAN address>")
    argv = [str(SCENARIOS), "-p", "alabama.hil.plugin", "-p", "no:cacheprovider", "--rootdir", str(SCENARIOS),
            "-c", os.devnull, "-o", "console_output_style=classic", "-ra",
            "--board", args.board, "--report", args.report, "--hil-long-runs", str(args.long_runs),
            "-o", "timeout=%d" % args.timeout]
    if args.board_type:
        argv += ["--board-type", args.board_type]
    if args.pattern:
        argv += ["-k", args.pattern]
    if args.bind:
        argv += ["--hil-bind", args.bind]
    if args.port:
        argv += ["--hil-port", str(args.port)]
    if args.loopback:
        argv.append("--hil-loopback")
    if args.no_deploy:
        argv.append("--hil-no-deploy")
    if args.speaker_out:
        if args.board == "sim":
            raise UsageError("--speaker-out is for a real board: the virtual board hears the WAV itself")
        argv += ["--hil-speaker-out", args.speaker_out]
    if args.firmware:
        if not os.path.isdir(os.path.join(args.firmware, "satellite")):
            raise UsageError("--firmware %s holds no satellite/ package: give a copy of the repository's firmware/"
                             % args.firmware)
        argv += ["--hil-firmware", os.path.abspath(args.firmware)]
    if args.list:
        argv += ["--collect-only", "-q"]
    return argv + list(args.pytest_args)


def cmd_hil(args):
    argv = pytest_argv(args)
    import importlib.util
    missing = [m for m in ("pytest", "pytest_timeout") if importlib.util.find_spec(m) is None]
    if missing:       # found, not imported: pytest loads pytest_timeout itself (and rewrites its asserts)
        raise AlabamaError("alabama hil runs its scenarios with pytest and pytest-timeout, and %s is not installed: "
                           "reinstall the host package (pip install -e .) or `pip install pytest pytest-timeout`"
                           % " and ".join(missing))
    import pytest
    code = pytest.main(argv)
    return int(code)


if __name__ == "__main__":
    from ..cli import main
    sys.exit(main(["hil"] + sys.argv[1:]))
