"""`alabama hil`: run the HIL scenario suite against the virtual board or a real one; argument parsing only.

Runs pytest in-process on the scenarios shipped in ``alabama.hil.scenarios`` with the plugin
``alabama.hil.plugin``; everything after ``--`` goes to pytest unchanged. ``--board`` more than once runs a
fleet (``alabama.hil.fleet``).
"""
import os
import time
import pathlib
import sys

from ..errors import UsageError
from ..extras import MissingExtra, hint
from .. import usage

SCENARIOS = pathlib.Path(__file__).resolve().parent / "scenarios"
DEFAULT_REPORT = os.path.join("build", "hil")
# A backstop, not a budget: every wait in a scenario has its own deadline. The longest scenario (the long run
# at --long-runs 10 on a real board) takes well under this.
DEFAULT_TIMEOUT = 900


def register(sub):
    p = sub.add_parser("hil", help="run the HIL scenario suite on virtual or real boards (one, or a fleet) and "
                                   "write a report",
                       description="Bring up a reference core, provision the board, run every scenario (spec "
                                   "§4 examples, §7.3 admission, limits, forward compatibility, liveness, long run) "
                                   "and write DIR/report.html, DIR/junit.xml and DIR/history.json.")
    p.add_argument("--board", required=True, action="append", metavar="sim|PORT",
                   help="'sim' for the virtual board, or the serial port of a real board (e.g. /dev/ttyACM0); "
                        "repeat it for a fleet: every board runs the suite at once (one pytest-xdist worker "
                        "each), then the cross-board scenarios run on all of them with one core, one report")
    p.add_argument("--board-type", action="append", metavar="NAME",
                   help="board file name (boards/NAME.json); default sim for the virtual board, required for a "
                        "real one; a fleet: once for every real board, or once per real board in --board order")
    p.add_argument("-k", dest="pattern", metavar="PATTERN", help="only scenarios matching this pytest -k expression")
    p.add_argument("--report", metavar="DIR", default=DEFAULT_REPORT, help="report directory (default %(default)s)")
    p.add_argument("--bind", metavar="ADDR", help="real board: the LAN address of this computer the board "
                                                  "connects to (the core listens there)")
    p.add_argument("--port", type=usage.tcp_port(zero_ok=True), default=0, metavar="N", help="TCP port for the board (default: any free); "
                                                                   "a fleet's board n gets N + n - 1")
    p.add_argument("--loopback", action="store_true", help="real board: speaker acoustically looped to the mic")
    p.add_argument("--speaker-out", action="append", metavar="DEVICE",
                   help="real board: the host's audio output (ALSA device) next to the board's microphone; the "
                        "intelligibility scenarios play known utterances there (skipped without it); a fleet: "
                        "once per real board, in --board order (each board its own loudspeaker)")
    p.add_argument("--probe-json", action="append", metavar="FILE",
                   help="`alabama board probe --json` output of a board, shown in the report's header beside our "
                        "estimates; once per board, in --board order")
    p.add_argument("--probe", action="store_true",
                   help="probe every board first (`alabama board probe`: its figures beside our estimates in the "
                        "report's header); a board whose probe fails says why there and still runs the suite")
    p.add_argument("--no-deploy", action="store_true", help="real board: do not run `alabama deploy` first")
    p.add_argument("--firmware", metavar="DIR", help="virtual board: run this firmware tree instead of firmware/")
    p.add_argument("--long-runs", type=usage.positive(int, "exchanges"), default=10, metavar="N", help="exchanges in the long-run scenario")
    p.add_argument("--timeout", type=usage.non_negative(int, "seconds", "never"), default=DEFAULT_TIMEOUT, metavar="S",
                   help="fail a scenario still running after S seconds, its bring-up included, and go on with "
                        "the next (pytest-timeout; 0 = never; default %(default)s)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed to pytest after --")
    p.set_defaults(func=cmd_hil)


def pytest_argv(args, extra=()):
    """pytest's arguments for the run (``extra`` go before what followed ``--``); one line for a bad option."""
    boards = args.board
    real = [b for b in boards if b != "sim"]
    types = args.board_type or []
    speakers = args.speaker_out or []
    if len(boards) == 1 and len(types) > 1:
        raise UsageError("one board takes one --board-type")
    if len(boards) > 1 and len(types) > 1 and len(types) != len(real):
        raise UsageError("--board-type given %d times for %d real boards: give it once (every real board) or once "
                         "per real board, in --board order" % (len(types), len(real)))
    if real and not types:
        raise UsageError("a real board needs --board-type NAME (see `alabama board list`)")
    if args.timeout < 0:
        raise UsageError("--timeout %d: give the seconds a scenario may take, or 0 for no limit" % args.timeout)
    if real and not args.bind and not args.list:
        raise UsageError("a real board reaches the core over Wi-Fi: pass --bind <this computer's LAN address>")
    if len(boards) > 1 and len(set(real)) != len(real):
        raise UsageError("%s is given twice: a board runs in one worker only (give each real board once)"
                         % next(b for b in real if real.count(b) > 1))
    argv = [str(SCENARIOS), "-p", "alabama.hil.plugin", "-p", "no:cacheprovider", "--rootdir", str(SCENARIOS),
            "-c", os.devnull, "-o", "console_output_style=classic", "-ra"]
    for b in boards:
        argv += ["--board", b]
    argv += ["--report", args.report, "--hil-long-runs", str(args.long_runs), "-o", "timeout=%d" % args.timeout]
    for t in types:
        argv += ["--board-type", t]
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
    if speakers:
        if not real:
            raise UsageError("--speaker-out is for a real board: the virtual board hears the WAV itself")
        if len(speakers) != len(real):
            raise UsageError("--speaker-out given %d times for %d real boards: one loudspeaker per real board, in "
                             "--board order (boards run at once: one speaker cannot serve two)"
                             % (len(speakers), len(real)))
        for sp in speakers:
            argv += ["--hil-speaker-out", sp]
    if args.firmware:
        if not os.path.isdir(os.path.join(args.firmware, "satellite")):
            raise UsageError("--firmware %s holds no satellite/ package: give a copy of the repository's firmware/"
                             % args.firmware)
        argv += ["--hil-firmware", os.path.abspath(args.firmware)]
    from . import report              # here, not at import: `alabama --help` need not load numpy
    probes = args.probe_json or []
    if len(probes) > len(boards):
        raise UsageError("--probe-json given %d times for %d boards: one probe report per board, in --board order"
                         % (len(probes), len(boards)))
    for f in probes:
        try:
            report.read_probe(f)
        except report.ProbeFileError as e:
            raise UsageError("--probe-json %s: give the file `alabama board probe --json` wrote" % e) from None
    if len(boards) == 1 and probes:
        argv += ["--hil-probe-json", os.path.abspath(probes[0])]
    if args.list:
        argv += ["--collect-only", "-q"]
    return argv + list(extra) + list(args.pytest_args)


def probe_boards(args, out=print):
    """--probe: `alabama board probe` on each board, in --board order, before the suite; the reports become the
    run's --probe-json files (a failed probe: a report with no figures and its one-line reason as ``error``)."""
    import json
    import pathlib
    from ..board import probe
    if args.probe_json:
        raise UsageError("--probe measures the boards itself: give --probe or --probe-json, not both")
    types = args.board_type or []
    import tempfile
    base = pathlib.Path(args.report) / "probes"
    base.mkdir(parents=True, exist_ok=True)
    d = pathlib.Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=base))   # this run's, not shared
    files, real = [], 0
    for i, b in enumerate(args.board):
        btype = None                   # a virtual board: the probe's default (sim)
        if b != "sim":                 # --board-type once for every real board, or once per real board
            btype = types[0] if len(types) == 1 else types[real]
            real += 1
        out("alabama hil: probing board %d (%s)" % (i + 1, b))
        try:
            rep = probe.run_probe(b, board=btype, bind=args.bind, workdir=d / ("board%d" % (i + 1)),
                                  out=lambda *a: None)
        except probe.ProbeError as e:
            out("alabama hil: the probe of board %d (%s) failed: %s; its suite runs without figures" % (i + 1, b, e))
            rep = {"probe": probe.PROBE_FORMAT, "board": btype, "port": b, "sim": b == "sim", "image": {},
                   "figures": [], "error": str(e)}
        f = d / ("board%d.json" % (i + 1))
        f.write_text(json.dumps(rep, indent=1))
        files.append(str(f))
    args.probe_json = files


def missing_runners(fleet):
    """The pytest plugins `alabama hil` runs with that are not installed (found, not imported: pytest loads
    pytest_timeout itself and rewrites its asserts); a fleet also needs pytest-xdist (a worker per board)."""
    import importlib.util
    need = [("pytest", "pytest"), ("pytest_timeout", "pytest-timeout")] + ([("xdist", "pytest-xdist")] if fleet else [])
    return [dist for mod, dist in need if importlib.util.find_spec(mod) is None]


def check_boards(args, environ=os.environ):
    """Once, before pytest starts: the real board's port exists and is a device, its board file loads, and the
    Wi-Fi it joins is set (otherwise every scenario would fail on it in turn). One line for the first problem.
    A fleet's board whose port is gone costs only its column (fleet.py says so in one line), so the ports are
    checked here for a single board only; the board files and the Wi-Fi variables for every run."""
    from ..board import boards, mpremote
    for t in args.board_type or []:       # a virtual board takes one too: a typo made every scenario an error
        boards.load(t)
    real = [b for b in args.board if b != "sim"]
    if not real or args.list:
        return
    for b in real if len(args.board) == 1 else ():
        try:          # opened to ask whether it is a terminal: the deploy that follows resets the board anyway
            mpremote.resolve_port(b, option="--board", probe=True)
        except mpremote.MpremoteError as e:
            raise UsageError(str(e)) from None
    if not environ.get("ALABAMA_WIFI_SSID"):
        raise UsageError("a real board reaches the core over Wi-Fi: set ALABAMA_WIFI_SSID and ALABAMA_WIFI_PASSPHRASE "
                         "(e.g. `ALABAMA_WIFI_SSID=home ALABAMA_WIFI_PASSPHRASE=... alabama hil ...`)")


class _Collected:
    """A pytest plugin that keeps the names of the scenarios -k selected and of those it deselected."""

    def __init__(self):
        self.selected, self.deselected = [], []

    def pytest_deselected(self, items):
        self.deselected += [i.nodeid for i in items]

    def pytest_collection_finish(self, session):
        self.selected = [i.nodeid for i in session.items]

    @property
    def all(self):
        return self.selected + self.deselected


def check_pattern(args, argv):
    """-k PATTERN that selects no scenario (pytest would deselect them all and exit 5) or is no -k expression, or
    an option after -- that pytest or the plugin refuses (its usage block, four lines): one line naming it (and the
    nearest scenario names), before any board is touched (a quiet collection)."""
    import contextlib
    import difflib
    import io
    import pytest
    got, said = _Collected(), io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        code = pytest.main(list(argv) + ["--collect-only", "-q"], plugins=[got])
    lines = said.getvalue().splitlines()
    errors = [ln[len("ERROR: "):] for ln in lines if ln.startswith("ERROR: ")]
    if code == pytest.ExitCode.USAGE_ERROR and errors:
        # argparse's (an option after -- that pytest or the plugin refuses): its "PROG: error: WHAT" line
        refused = [ln.split(": error: ", 1)[1] for ln in lines if ": error: " in ln]
        if refused or not args.pattern:
            raise UsageError("pytest refused the options after --: %s (`alabama hil --help` lists the bench's own; "
                             "`pytest --help`, pytest's)" % (refused or errors)[0])
        raise UsageError("-k %r: %s (pytest's -k syntax: words joined by and, or, not)" % (args.pattern, errors[0]))
    if not args.pattern or got.selected or not got.all:
        return
    files = sorted({n.split("::")[0][len("test_"):-len(".py")] for n in got.all})
    words = files + [n.split("::")[-1] for n in got.all]
    near = difflib.get_close_matches(args.pattern.lower(), words, n=3, cutoff=0.6)
    raise UsageError("-k %r matches none of the %d scenarios%s: give a word of their names, e.g. a file's: %s "
                     "(`alabama hil --board sim --list` lists them)" % (
                         args.pattern, len(got.all), " (did you mean %s?)" % " or ".join(repr(w) for w in near)
                         if near else "", ", ".join(files)))


def check_report(report):
    """--report DIR made (as the run would) and written to, before any board is touched: a folder that cannot be made
    there (/proc, a file in the way, no permission) was a traceback per scenario and one at the end."""
    import pathlib
    from ..outfile import problem
    d = pathlib.Path(report)
    if d.exists() and not d.is_dir():
        raise UsageError("--report %s is a file: give a folder for the report (made if missing)" % report)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError("--report %s: cannot make that folder (%s): give a folder you can write"
                         % (report, e.strerror or e)) from None
    why = problem(d / "junit.xml")
    if why:
        raise UsageError("--report %s: cannot write in it (%s): give a folder you can write" % (report, why))


def cmd_hil(args):
    argv = pytest_argv(args)           # the options checked before a board is touched
    fleet_run = len(args.board) > 1 and not args.list
    missing = missing_runners(fleet_run)
    if missing:                        # before any probe: a fleet without xdist would probe every board for nothing
        raise MissingExtra("alabama hil%s needs %s, not installed: %s" % (
            " with several boards (a pytest-xdist worker each)" if fleet_run else "", " and ".join(missing),
            hint("hil")))
    check_boards(args)
    if args.pattern or args.pytest_args:
        check_pattern(args, pytest_argv(args))
    if not args.list:
        check_report(args.report)
    if args.probe and not args.list:
        probe_boards(args)
        argv = pytest_argv(args)
    if fleet_run:
        from . import fleet
        return fleet.run(args, pytest_argv)
    import pytest
    code = pytest.main(argv)
    return int(code)


if __name__ == "__main__":
    from ..cli import main
    sys.exit(main(["hil"] + sys.argv[1:]))
