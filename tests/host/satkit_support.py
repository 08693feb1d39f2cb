"""The satellite conformance kit against the virtual board, for the test files that score our firmware and its
mutants (test_conformance_satellite*.py). Responsible for: a board for the kit, scoring it, the mutant -> row table
and the check that a mutant fails its row. Not for: peers that are not a satellite, the CLI's wrong inputs
(test_conformance_satellite.py).

The mutant runs (~10-20 s each) are split over two files, MUTANT_ROWS_A and MUTANT_ROWS_B: `--dist loadfile` runs a
file on one worker, so ten of them in one file bound the whole run. MUTANT_ROWS is both, every mutant once
(test_conformance_satellite.py checks that)."""
import hashlib
import pathlib
import shutil
import threading

from alabama.board import sim
from alabama.conformance import rows, satkit
from alabama.hil import mutants

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: The board's reconnect backoff, short: the kit's pinning checks wait on reconnections. An IK failure retries at
#: the cap, every 0.5-1 s here, so WATCH_S sees at least two attempts after one (an XX offer among them fails R7.3-f).
BOARD_ENV = {"ALABAMA_SIM_BACKOFF_BASE_MS": "300", "ALABAMA_SIM_BACKOFF_CAP_MS": "1000"}
#: The kit's watch for a forbidden reconnection (R7.3-f, R7.3-j; satkit.WATCH_S = 8 is for any satellite's backoff).
WATCH_S = 2.5
#: How long the kit waits for the virtual board's button to open a capture (it takes a fraction of a second; a
#: mutant still streaming a capture never opens one: satkit.PRESS_S = 30 is for a person reading a prompt).
PRESS_S = 5.0


def failed_rows(result):
    return {r.rid for r in result if r.verdict == rows.FAIL}


def board(tmp, port, firmware=None):
    flash = pathlib.Path(tmp) / "flash"
    sim.provision(flash, "127.0.0.1", port, fresh_identity=True)       # the address only: a guest, XX first
    return sim.VirtualBoard(flash, firmware=firmware, speaker=pathlib.Path(tmp) / "speaker.wav", env=BOARD_ENV)


def score(tmp, firmware=None):
    """The kit (in-process, on its own thread) against a virtual board running ``firmware``; [Row]."""
    port = sim.free_port()
    vb = board(tmp, port, firmware)
    out = {}

    def press(down):
        vb.press() if down else vb.release()

    def go():
        out["rows"] = satkit.run("127.0.0.1", port, press=press, connect_s=90, watch_s=WATCH_S, press_s=PRESS_S)
    t = threading.Thread(target=go)
    t.start()
    try:
        vb.start()
        t.join(400)
    finally:
        vb.stop()
    assert not t.is_alive() and "rows" in out, vb.log_text()[-3000:]
    return out["rows"]


#: A firmware that answers a failed IK with XX at its next attempt (the HIL catalogue's xx_fallback goes XX on every
#: retry, so the kit already sees it fail R7.3-e; this one keeps IK after Paired and breaks R7.3-f alone).
IK_FAIL_THEN_XX = mutants.Mutant(
    "ik_fail_then_xx", "", "after an IK handshake failure the next attempt is XX (R7.3-f)",
    [("satellite/runtime.py", "        core_key = rec.core_key or self.ks.pinned_core_key()\n",
      "        core_key = None if getattr(self, '_xx_next', False) else (rec.core_key or self.ks.pinned_core_key())\n"),
     ("satellite/runtime.py", "                self.attempts = 16 ",
      "                self._xx_next = True\n                self.attempts = 16 ")])
#: Rows no HIL scenario guards the same way: a firmware that leaves a RequestCapture unanswered, one that keeps
#: streaming after the core's StreamCancel, one whose mic follows PipelineState.
KIT_MUTANTS = [
    IK_FAIL_THEN_XX,
    mutants.Mutant("request_unanswered", "", "a RequestCapture is neither accepted nor declined (R10.4-a)",
                   [("satellite/device.py", "    def _on_capture_requested(self, ev):\n",
                     "    def _on_capture_requested(self, ev):\n        return\n")]),
    mutants.Mutant("cancel_ignored", "", "the capture keeps streaming after the core's StreamCancel (R10.3-a)",
                   [("satellite/session.py", '        st, ok = self._stream_op(id, _IN_CANCEL, "stream_cancel")\n',
                     "        st, ok = self._streams.get(id), True\n"),
                    ("satellite/device.py", "            return\n        if ev.id == self.capture_id:\n",
                     "            return\n        if ev.id == self.capture_id and not ev.cancelled:\n")]),
    mutants.Mutant("phase_opens_mic", "", "PipelineState LISTENING opens a capture (R10.4.1-a)",
                   [("satellite/device.py", "            self.phase = ev.phase\n",
                     "            self.phase = ev.phase\n            if ev.phase == 1 and not self.capture_id:\n"
                     "                self.open_capture(pb.Trigger.BUTTON)\n")]),
]
#: (mutant of alabama.hil.mutants or above, the one row it must fail), in two files of about equal time
#: (the two runs that wait out PRESS_S, cancel_ignored and phase_opens_mic, one in each)
MUTANT_ROWS_A = [("even_capture_ids", "R6.3-a"), ("cancel_ignored", "R10.3-a"), ("ping_wrong_t1", "R10.2-a"),
                 ("ik_fail_then_xx", "R7.3-f"), ("pin_on_xx", "R7.3-d")]
MUTANT_ROWS_B = [("seq_steps_by_two", "R10.10-c"), ("phase_opens_mic", "R10.4.1-a"), ("request_unanswered", "R10.4-a"),
                 ("unknown_arm_drops", "R2.2-b"), ("xx_fallback", "R7.3-e")]
MUTANT_ROWS = MUTANT_ROWS_A + MUTANT_ROWS_B

#: Rows a mutant may also fail because the one behaviour it breaks shows in them too.
CASCADE = {"ping_wrong_t1": {"R2.2-a"},                  # the Ping with unknown fields is answered with the wrong t1
           "xx_fallback": {"R7.2-a"},                     # XX with a key pinned
           "ik_fail_then_xx": {"R7.3-c"}}                 # the XX session it fell back to is with another key


def check_mutant_fails_its_row(name, rid, tmp_path):
    """The mutant ``name`` on the virtual board fails row ``rid`` (with its detail and timeline), and only rows the
    same broken behaviour also breaks (CASCADE)."""
    (m,) = [m for m in mutants.MUTANTS + KIT_MUTANTS if m.name == name]
    fw = mutants.apply(m, sim.default_firmware(), tmp_path / "firmware")
    try:
        result = score(tmp_path, fw)
    finally:   # the virtual board caches a compiled tree per firmware path: drop this throwaway one
        key = hashlib.sha256(str(fw.resolve()).encode()).hexdigest()[:12]
        shutil.rmtree(ROOT / "build" / "sim" / key, ignore_errors=True)
    failed = failed_rows(result)
    assert rid in failed, [r for r in result if r.rid == rid]
    (row,) = [r for r in result if r.rid == rid]
    assert row.detail and row.timeline or rid in ("R7.3-d", "R7.3-f"), row
    if name == "even_capture_ids":      # a row judged over the whole run shows the frame that broke it, in view
        assert any("sat -> core hello {id 2}" in t for t in row.timeline[-12:]), row.timeline
    # the rule it breaks, not a cascade: every other failure is a row the same broken behaviour also breaks
    assert failed <= {rid} | CASCADE.get(name, set()), [r for r in result if r.verdict == rows.FAIL]


def mutant_row_test(table):
    """The test function of one mutant file: each (mutant, row) of ``table`` fails its row."""
    import pytest

    @pytest.mark.needs_micropython
    @pytest.mark.slow
    @pytest.mark.parametrize("name,rid", table, ids=[m for m, _ in table])
    def test_a_mutant_firmware_fails_its_row(name, rid, tmp_path):
        check_mutant_fails_its_row(name, rid, tmp_path)
    return test_a_mutant_firmware_fails_its_row
