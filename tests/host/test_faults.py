"""The fault-injecting link and the short fault campaign (docs/reliability.md): the relay's rules land on the
byte they name; a dozen faults over every phase each end with the virtual board back by itself and nothing
left behind in the core; a LIVE capture cut mid-way dies with its connection (R10.4-e); and the campaign
fails a board whose liveness check or reconnect backoff has been removed (alabama.hil.mutants).
Real MicroPython, real Noise, 127.0.0.1 only."""
import asyncio
import hashlib
import logging
import pathlib
import random
import shutil

import pytest

from alabama.hil import faults, mutants
from alabama.hil.bench import sim_bench
from alabama.hil.corehost import DOWN, UP, Relay, Rule, _Tracker
from alabama.hil.targets import default_firmware
from alabama.hil.timeline import CORE_TO_SAT, SAT_TO_CORE, Timeline
from alabama.v1 import operations_pb2 as ops

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED = 11


# ------------------------------------------------------------------------------------------ the relay
def test_tracker_finds_noise_messages_in_any_split():
    msgs = [b"\x00\x03abc", b"\x00\x00", b"\x01\x00" + bytes(256), b"\x00\x01z"]
    stream = b"".join(msgs)
    want = [(0, 0, 3), (1, 5, 0), (2, 7, 256), (3, 265, 1)]
    for step in (1, 2, 3, 7, len(stream)):
        t = _Tracker()
        got = []
        for i in range(0, len(stream), step):
            got += t.feed(stream[i:i + step])
        assert got == want, step


class _Echo:
    """A loopback TCP peer that records what it received."""

    def __init__(self):
        self.got = bytearray()
        self.closed = asyncio.Event()

    async def handle(self, r, w):
        while True:
            b = await r.read(65536)
            if not b:
                break
            self.got += b
        self.closed.set()
        w.close()


def _relay_run(rules, payload, next_link=False):
    """Send ``payload`` board -> core through a Relay with ``rules`` armed; returns (bytes the core got,
    whether the board's socket saw the close, the relay's fired list)."""
    async def go():
        echo = _Echo()
        srv = await asyncio.start_server(echo.handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        relay = Relay("127.0.0.1", 0, lambda: ("127.0.0.1", port), lambda: Timeline())
        await relay.start()
        for rule in rules:
            relay.arm_next(rule)
        r, w = await asyncio.open_connection("127.0.0.1", relay.port)
        for i in range(0, len(payload), 5):
            try:
                w.write(payload[i:i + 5])
                await w.drain()
            except ConnectionError:       # the relay cut the link: the rest is not sent
                break
            await asyncio.sleep(0.002)
        try:
            eof = await asyncio.wait_for(r.read(1), 0.5) == b""
        except asyncio.TimeoutError:
            eof = False
        except ConnectionError:           # closed under us (reset): closed as well
            eof = True
        w.close()
        await asyncio.wait_for(echo.closed.wait(), 5)
        await relay.stop()
        srv.close()
        return bytes(echo.got), eof, relay.fired
    return asyncio.run(go())


def _stream():
    return b"".join(len(m).to_bytes(2, "big") + m for m in (bytes(range(40)), bytes(range(100, 160)), b"x" * 30))


def test_cut_lands_on_its_byte_and_closes_both_halves():
    data = _stream()
    got, eof, fired = _relay_run([Rule("cut", UP, byte=50)], data)
    assert got == data[:50] and eof and len(fired) == 1


def test_cut_in_a_message_lands_inside_that_message():
    data = _stream()                          # message 1 starts at 42, 2 + 60 bytes long
    got, eof, _ = _relay_run([Rule("cut", UP, msg=1, frac=0.5)], data)
    assert got == data[:42 + 31] and eof


def test_flip_changes_one_ciphertext_byte_and_keeps_forwarding():
    data = _stream()
    got, eof, _ = _relay_run([Rule("flip", UP, msg=2, frac=0.0)], data)
    diff = [i for i in range(len(data)) if got[i] != data[i]]
    assert len(got) == len(data) and diff == [104 + 2] and got[106] == data[106] ^ 1 and not eof


def test_stall_forwards_nothing_more_and_keeps_the_connection_open():
    data = _stream()
    got, eof, _ = _relay_run([Rule("stall", UP, msg=1, frac=0.0)], data)
    assert got == data[:42] and not eof


def test_max_attempts_matches_the_shortest_backoff_schedule():
    # waits at their shortest: 100, 200, 400, 800, 1000, 1000 ... (base 200 doubling, cap 2000, jitter d/2)
    assert faults.max_attempts(0.05, 200, 2000) == 1
    assert faults.max_attempts(0.25, 200, 2000) == 2
    assert faults.max_attempts(1.6, 200, 2000) == 5
    assert faults.max_attempts(3.5, 200, 2000) == 7


# ------------------------------------------------------------------------------------------ the campaign
def _bench(tmp, firmware=None):
    return sim_bench(tmp, firmware=firmware, log=lambda *a: None)


@pytest.fixture(scope="module")
def fault_bench(tmp_path_factory):
    logging.getLogger("alabama.core").setLevel(logging.ERROR)
    bench = _bench(tmp_path_factory.mktemp("faults"))
    fb = faults.FaultBench(bench, rng=random.Random(SEED))
    try:
        fb.up()
        yield fb
    finally:
        bench.close()


def _explain(results):
    return "\n".join(repr(r) for r in results if not r.ok)


def test_short_campaign_every_phase_recovers_with_nothing_leaked(fault_bench):
    """A dozen faults (cuts in every phase: handshake, Hello, idle, mid-capture, mid-render, mid-tool-call,
    Paired on the token path; a stall; byte flips both ways; a delay; a core restart mid-capture): every one
    fires, the board is admitted again within its backoff (+ liveness for the stall) and the core then serves
    its new session only: every ended session released and collected, no registry entry, report, task or
    DEFERRED hold left."""
    rng = random.Random(SEED)
    results = [fault_bench.run(s) for s in faults.specs(faults.SHORT_PLAN, rng)]
    assert {r.spec.phase for r in results if r.spec.kind == "cut"} == set(faults.PHASES)
    assert all(r.injected for r in results), _explain(results)
    assert all(r.ok for r in results), _explain(results)
    assert sum(bool(r.leaks) for r in results) == 0


def test_r10_4_e_live_capture_dies_with_its_connection(fault_bench):
    """A push-to-talk (LIVE) capture cut mid-way: its CaptureOpen carried no correlation_ref; the core ends
    it with the connection (the dead session holds nothing: its capture, turn and streams are gone); the board
    comes back idle and never resumes it (no chunk, end or cancel of it in the new session); a new press opens
    a fresh capture that completes with a Response."""
    fb = fault_bench
    r = fb.run(faults.FaultSpec("cut", "capture", chunk=8))
    assert r.ok, r
    tl = fb.tl
    old = tl.find(SAT_TO_CORE, "capture_open", after=fb._cap_mark)[0]
    assert old.env.capture_open.mode == ops.LIVE and not old.env.capture_open.correlation_ref
    assert not tl.find(CORE_TO_SAT, "response", id_=old.id, after=fb._cap_mark,
                       pred=lambda e: e.session == old.session), "a Response on a capture of a dead connection"
    acc = fb.core.accounting()
    assert old.session not in acc["live"] and not acc["dead"], acc
    st = fb.hil.target.state()
    assert st["capture"] == 0 and not st["mic_open"] and st["pending"] == [], st
    # the user re-triggers: a fresh capture on the new connection, answered
    mark = tl.mark()
    fb.hil.target.set_mic(fb.wav)
    fb.hil.target.press()
    co = fb.hil.expect(SAT_TO_CORE, "capture_open", after=mark, timeout=10)
    fb.hil.target.release()
    assert co.session != old.session and not co.env.capture_open.correlation_ref
    fb.hil.expect(CORE_TO_SAT, "response", id_=co.id, after=mark, timeout=20, what="the new capture's Response")
    new_rows = tl.find(SAT_TO_CORE, after=mark, pred=lambda e: e.session == co.session and e.op in (
        "stream_chunk", "stream_end", "stream_cancel"))
    assert all(e.id == co.id for e in new_rows), "frames on an id the new session never opened"


# ------------------------------------------------------------------------------------------ it can fail
def _mutant_bench(tmp_path, name):
    fw = mutants.apply(mutants.BY_NAME[name], default_firmware(), tmp_path / "firmware")
    return fw, _bench(tmp_path / "run", firmware=fw)


def _drop_build(fw):
    key = hashlib.sha256(str(fw.resolve()).encode()).hexdigest()[:12]
    shutil.rmtree(ROOT / "build" / "sim" / key, ignore_errors=True)


@pytest.mark.parametrize("mutant,spec", [
    ("no_liveness_timeout", faults.FaultSpec("stall", "idle", after_ms=200, dir=DOWN)),
    ("no_backoff", faults.FaultSpec("restart", "idle", after_ms=100, dir=DOWN, down_s=2.0)),
], ids=["no-liveness-check", "no-backoff"])
def test_fault_check_fails_for_a_board_without_liveness_or_backoff(mutant, spec, tmp_path):
    """The same fault check that passes on the firmware fails when the board's liveness check is removed (a
    stalled link is then only ended by the core's slower liveness, R10.1-b) or its backoff is removed (a
    reconnect storm while the core is down)."""
    fw, bench = _mutant_bench(tmp_path, mutant)
    try:
        fb = faults.FaultBench(bench, rng=random.Random(SEED))
        fb.up()
        r = fb.run(spec)
    finally:
        bench.close()
        _drop_build(fw)
    assert r.injected, r
    assert not r.ok, "mutant %s passed the fault check: %r" % (mutant, r)
    want = "R10.1-b" if mutant == "no_liveness_timeout" else "reconnect storm"
    assert any(want in p for p in r.problems), r.problems
