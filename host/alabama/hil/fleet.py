"""`alabama hil` with several boards: the per-board suite on every board at once, then the cross-board scenarios.

Responsible for running a fleet and nothing else: phase 1 runs the scenario suite on each board in parallel,
pytest-xdist with one worker per board and ``--dist each`` (every scenario to every worker; the plugin deals
each worker its own board, so no board is ever driven by two processes); phase 2, once the workers have let go
of the boards, runs the cross-board scenarios (one reference core serving every board at once) in this process;
then ``report.write_fleet`` merges both into one report with a column per board. A board that failed to come up
or went away in phase 1 is left out of phase 2, and its column says why in one line. The scenarios, the boards
and the report are the plugin's, the targets' and the report's business (docs/hil.md, "A fleet").
"""
import os
import pathlib
import shutil
import time

from . import report
from .report import board_label

#: pytest's exit codes this module reads (pytest.ExitCode, named here so the merge reads plainly).
OK, TESTS_FAILED, INTERRUPTED, NO_TESTS = 0, 1, 2, 5


def run(args, pytest_argv, out=print):
    """Run the fleet ``args.board`` (two or more) and write the merged report; returns the exit status: 0 when
    every scenario passed or skipped on every board and every board stayed up, 2 when interrupted, else 1.
    ``pytest_argv(args, extra)`` builds pytest's arguments (hil.cli's; passed in so the arrows run one way).
    The caller has checked that pytest-xdist is installed (hil.cli.missing_runners)."""
    import pytest
    boards = list(args.board)
    started = time.time()
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-%d" % (os.getpid() % 10000)
    run_dir = pathlib.Path(args.report) / run_id
    for i, f in enumerate(args.probe_json or []):
        d = run_dir / "boards" / str(i + 1)
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, d / report.PROBE_FILE)
    common = ["--hil-run-id", run_id]
    out("alabama hil: %d boards (%s), run %s" % (len(boards), ", ".join(
        "%s: %s" % (board_label(i), b) for i, b in enumerate(boards)), run_id))
    code1 = int(pytest.main(pytest_argv(args, common + [
        "--hil-phase", "boards", "-n", str(len(boards)), "--dist", "each",
        # a worker that dies is replaced (same board, the scenarios it had not run); twice per board at most
        "--max-worker-restart", str(2 * len(boards))])))
    labels = [(board_label(i), b) for i, b in enumerate(boards)]
    parts = [report.read_part(run_dir / "boards" / str(i + 1), lab, b) for i, (lab, b) in enumerate(labels)]
    down = ["%d:%s" % (i + 1, p["status"]["line"]) for i, p in enumerate(parts)
            if p.get("status", {}).get("state") in ("failed", "lost")]
    code2 = NO_TESTS
    if code1 != INTERRUPTED:
        extra = common + ["--hil-phase", "fleet", "--hil-no-deploy"]
        for d in down:
            extra += ["--hil-unavailable", d]
        code2 = int(pytest.main(pytest_argv(args, extra)))
    paths, merged = report.write_fleet(args.report, run_id, labels, started=started,
                                       argv=["hil"] + ["--board=%s" % b for b in boards])
    out("alabama hil: fleet report %s (JUnit %s)" % (paths["html"], paths["junit"]))
    problems = []
    for b in merged["boards"]:
        for line in report.board_problems(b):
            problems.append("%s: %s" % (report.board_column(b), line))
    for line in problems:
        out("alabama hil: " + line)
    return exit_status(code1, code2, bool(problems))


def exit_status(code1, code2, board_trouble):
    """One status for the two phases: interrupted wins, then any failure (a board in trouble is one); a phase
    that selected nothing (-k) is no failure unless neither selected anything."""
    codes = (code1, code2)
    if INTERRUPTED in codes:
        return INTERRUPTED
    if any(c not in (OK, NO_TESTS) for c in codes) or board_trouble:
        return TESTS_FAILED
    return NO_TESTS if codes == (NO_TESTS, NO_TESTS) else OK
