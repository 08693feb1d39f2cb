"""`alabama conformance core`: the reference core passes every row the kit can observe; a mutant core that breaks one
rule fails that row (so rows can fail); a peer that is not Alabama, stalls or floods ends in a verdict quickly; the
CLI's output forms and its wrong inputs."""
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

import pytest

from alabama.conformance import corekit, rows
from alabama.core import session as cs
from alabama.v1 import envelope_pb2, operations_pb2 as ops

#: Rows the reference core must pass when the kit is given a pairing token (every other row is not observable).
PASS_ROWS = {"R2.2-a", "R2.2-b", "R5-a", "R5.1.1-a", "R5.1.2-a", "R5.1.2-b", "R6-a", "R6.1-a", "R6.1-b", "R6.1-c",
             "R6.3-a", "R6.3-b", "R7.3-a", "R7.3-b", "R8.2-b", "R8.2-c", "R8.2-f", "R10.2-a", "R10.3-a", "R10.3-b",
             "R10.3-c", "R10.4-c", "R10.8-a", "R10.10-a", "R10.10-b", "R10.10-c", "R10.10-d", "R10.10-e", "R13-a"}

#: The kit's "nothing was sent" window for a core on loopback (its answers take milliseconds; the kit's own 1 s,
#: probes.QUIET_S, is for a core across a network): 6 quiet waits per run, 6 runs in this file.
QUIET_S = 0.5


def _verdicts(result):
    return {r.rid: r.verdict for r in result}


def _failed(result):
    return {r.rid for r in result if r.verdict == rows.FAIL}


def test_the_reference_core_passes_every_row_the_kit_can_observe(core):
    token, _ = core.run(core.core.mint_token, 600)
    result = corekit.run("127.0.0.1", core.port, core_key=core.key, token=token, quiet_s=QUIET_S)
    v = _verdicts(result)
    assert [r.rid for r in result] == [rid for rid, _ in corekit.ROWS]
    assert {k for k, x in v.items() if x == rows.PASS} == PASS_ROWS, [r for r in result if r.verdict != rows.PASS]
    assert set(v) - PASS_ROWS == set(corekit.UNOBSERVABLE) | {"R7.3-i"}


def _mutant_error_code(monkeypatch, wrong_code, right_code):
    real = cs.CoreSession._error

    def _error(self, id_, code, message):
        return real(self, id_, right_code if code == wrong_code else code, message)
    monkeypatch.setattr(cs.CoreSession, "_error", _error)


def test_r10_3_c_a_core_that_does_not_say_too_many_streams_fails_that_row(core, monkeypatch):
    _mutant_error_code(monkeypatch, ops.TOO_MANY_STREAMS, ops.INVALID_REQUEST)
    result = corekit.run("127.0.0.1", core.port, quiet_s=QUIET_S)
    assert _failed(result) == {"R10.3-c"}, [r for r in result if r.verdict == rows.FAIL]
    (row,) = [r for r in result if r.rid == "R10.3-c"]
    assert "INVALID_REQUEST" in row.detail and any("INVALID_REQUEST" in t for t in row.timeline), row.timeline


def test_r10_10_b_a_core_that_answers_a_notification_fails_that_row(core, monkeypatch):
    real = cs._OPS["ping"]

    def on_ping(self, env, ping, tail):
        if env.id == 0:
            resp = envelope_pb2.Envelope(id=0)
            resp.ping_response.t1, resp.ping_response.t2, resp.ping_response.t3 = ping.t1, 1, 2
            self._queue(resp, control=True)
            return
        real(self, env, ping, tail)
    monkeypatch.setitem(cs._OPS, "ping", on_ping)
    result = corekit.run("127.0.0.1", core.port, quiet_s=QUIET_S)
    assert _failed(result) == {"R10.10-b"}, [r for r in result if r.verdict == rows.FAIL]


def test_r2_2_b_a_core_that_drops_an_unknown_arm_fails_that_row(core, monkeypatch):
    real = cs.CoreSession._envelope

    def _envelope(self, env, tail):
        if env.WhichOneof("op") is None:
            self.close("unknown operation")
            return
        real(self, env, tail)
    monkeypatch.setattr(cs.CoreSession, "_envelope", _envelope)
    result = corekit.run("127.0.0.1", core.port, quiet_s=QUIET_S)
    assert _failed(result) == {"R2.2-b"}, [r for r in result if r.verdict == rows.FAIL]


def test_r6_1_b_a_core_that_ignores_the_satellites_frame_limit_fails_that_row(core, monkeypatch):
    from alabama.core import surface
    real = surface.Surface.__init__

    def init(self, *a, **kw):
        real(self, *a, **kw)
        self.max_frame_bytes = 65516              # as if Hello.max_frame_bytes were never read
    monkeypatch.setattr(surface.Surface, "__init__", init)
    result = corekit.run("127.0.0.1", core.port, quiet_s=QUIET_S)
    assert _failed(result) == {"R6.1-b"}, [r for r in result if r.verdict == rows.FAIL]
    (row,) = [r for r in result if r.rid == "R6.1-b"]
    assert "to a satellite that receives %d" % corekit.SMALL_FRAME in row.detail


# ------------------------------------------------------------------------------------------------ bad peers
class _Peer:
    """A TCP peer on 127.0.0.1 that is not an Alabama core: ``kind`` http, garbage, stall or flood."""

    def __init__(self, kind):
        self.kind = kind
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.port = self.srv.getsockname()[1]
        self.stop = threading.Event()
        self.conns = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        self.srv.settimeout(0.2)
        while not self.stop.is_set():
            try:
                c, _ = self.srv.accept()
            except OSError:
                continue
            self.conns.append(c)
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c):
        try:
            if self.kind == "http":
                c.recv(4096)
                c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                c.close()
            elif self.kind == "garbage":
                c.sendall(b"\x16\x03\x01\x02\x00" + bytes(range(256)) * 4)      # a TLS-looking record and noise
            elif self.kind == "flood":
                c.settimeout(0.5)
                while not self.stop.is_set():
                    c.sendall(b"\xff" * 65536)
            # stall: accept and say nothing
        except OSError:
            pass

    def close(self):
        self.stop.set()
        self.srv.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("kind", ["http", "garbage", "stall", "flood", "refused"])
def test_a_peer_that_is_not_alabama_ends_in_a_verdict_within_bounded_time(kind):
    """Every step is bounded: with 1 s steps the whole run ends within a few seconds, R5.1.1-a fails saying what the
    peer did and what to check, and every other row is not observable for that reason (never a hang)."""
    if kind == "refused":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        peer = None
    else:
        peer = _Peer(kind)
        port = peer.port
    try:
        t = time.monotonic()
        result = corekit.run("127.0.0.1", port, step_s=1.0)
        took = time.monotonic() - t
    finally:
        if peer is not None:
            peer.close()
    v = _verdicts(result)
    assert v["R5.1.1-a"] == rows.FAIL and set(v.values()) == {rows.FAIL, rows.NOT_OBSERVABLE}, v
    (row,) = [r for r in result if r.rid == "R5.1.1-a"]
    assert "is an Alabama core listening there?" in row.detail and "\n" not in row.detail, row.detail
    if kind == "refused":
        assert "connection refused" in row.detail
    if kind == "stall":
        assert "within 1 s" in row.detail
    assert took < corekit.CHECK_S, took


# ------------------------------------------------------------------------------------------------ the CLI
def _cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(corekit.__file__).resolve().parents[2]))  # this tree's host/
    return subprocess.run([sys.executable, "-m", "alabama.cli", "conformance", "core"] + list(args),
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_cli_json_and_junit_and_exit_status(core, tmp_path):
    junit = tmp_path / "kit.xml"
    r = _cli("127.0.0.1:%d" % core.port, "--json", "--junit", str(junit))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["conformance"] == rows.JSON_FORMAT and doc["kind"] == "core" and doc["counts"]["fail"] == 0
    assert [x["id"] for x in doc["rows"]] == [rid for rid, _ in corekit.ROWS]
    suite = ET.parse(junit).getroot()
    assert int(suite.get("tests")) == len(corekit.ROWS) and suite.get("failures") == "0"
    assert int(suite.get("skipped")) == doc["counts"]["not observable"]


@pytest.mark.parametrize("args, says", [
    (["localhost"], "give the core as HOST:PORT"),
    (["127.0.0.1:99999"], "give the core as HOST:PORT"),
    (["127.0.0.1:7355", "--core-key", "abc"], "64 hex digits"),
    (["127.0.0.1:7355", "--step-timeout", "0"], "seconds > 0"),
])
def test_cli_wrong_inputs_are_one_line(args, says):
    r = _cli(*args, timeout=30)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and says in err[0], (r.returncode, r.stderr)


def test_cli_against_nothing_is_one_line_saying_so_and_a_failed_report_for_a_machine():
    """A typo'd port (or a core not running) is no core to judge: one line, status 1 as for any server that is down
    (sweep 8; it was 42 lines, 37 of them 'not observable'); --json (a CI job's report) still says it as the failed
    gate row, status 1."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = _cli("127.0.0.1:%d" % port, "--step-timeout", "1", timeout=60)
    assert r.returncode == 1 and r.stdout == "" and r.stderr.strip() == (
        "alabama: error: nothing listens on 127.0.0.1:%d: start the core there (`alabama core serve --listen "
        "127.0.0.1:%d`), or give the address its `listening on` line says" % (port, port)), r.stderr
    r = _cli("127.0.0.1:%d" % port, "--step-timeout", "1", "--json", timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    gate = next(row for row in json.loads(r.stdout)["rows"] if row["id"] == "R5.1.1-a")
    assert gate["verdict"] == "fail" and "connection refused" in gate["detail"]


@pytest.mark.parametrize("kind", ["http", "stall"])
def test_cli_against_another_program_is_one_line_and_a_full_report_for_a_machine(kind):
    """Sweep 7: a web server (or a peer that never answers) on the port gave ~40 rows, every one but the gate 'not
    observable': one line saying no session was had and what to give; --json still writes every row."""
    peer = _Peer(kind)
    try:
        r = _cli("127.0.0.1:%d" % peer.port, "--step-timeout", "1", timeout=60)
        j = _cli("127.0.0.1:%d" % peer.port, "--step-timeout", "1", "--json", timeout=60)
    finally:
        peer.close()
    err = r.stderr.strip().splitlines()
    assert r.returncode == 1 and r.stdout == "" and len(err) == 1, (r.returncode, r.stdout, r.stderr)
    assert err[0].startswith("alabama: error: no session with 127.0.0.1:%d, so no row could be judged (" % peer.port)
    assert err[0].endswith("): is it an Alabama core? Give the address `alabama core serve` prints as `listening "
                           "on` (--json or --junit write every row anyway)"), err[0]
    assert j.returncode == 1 and json.loads(j.stdout)["counts"]["fail"] == 1, j.stderr
