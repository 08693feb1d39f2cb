"""Liveness and recovery (spec §10.1, §10.2, issue: "never needs a human to recover it").

The relay between board and core can go silent (TCP stays open, nothing gets through: a hung core or a
half-open connection) or the core can restart; the board must notice within a bounded time, reconnect
with backoff and be admitted again, by itself.
"""
import time

import pytest

from alabama.hil.faults import max_attempts
from alabama.hil.timeline import CORE_TO_SAT, NOTE, SAT_TO_CORE

#: The virtual board pings every 1 s (targets.SimTarget.SIM_ENV); it must call a connection dead after 3 ping
#: intervals plus one max-frame allowance (R10.1-b). The bound asserted leaves room for a loaded machine.
DETECT_BOUND_S = 12.0
RECONNECT_BOUND_S = 20.0


@pytest.mark.spec("§10.1", "§10.2", "R10.1-b")
def test_r10_1_b_core_goes_silent(hil):
    """The core goes silent (connection open, nothing flows): the board detects it, closes, reconnects and is
    admitted again. Measures the detection and the reconnect time."""
    hil.start_core()
    hil.provision("ik")
    hil.boot()
    time.sleep(1.5)
    t_silent = hil.tl.now()
    hil.core.silence()
    closed = hil.expect(NOTE, pred=lambda e: "closed by the board" in e.summary and e.t > t_silent,
                        timeout=DETECT_BOUND_S + 5, what="the board closing the silent connection")
    detect = closed.t - t_silent
    hil.measure("liveness_detect_ms", 1000 * detect)
    acc = hil.expect(CORE_TO_SAT, "hello_response", pred=lambda e: e.t > closed.t and "accepted" in e.summary,
                     timeout=RECONNECT_BOUND_S, what="the board admitted again after the silence")
    hil.measure("reconnect_ms", 1000 * (acc.t - t_silent))
    assert detect <= DETECT_BOUND_S, "the board took %.1f s to notice a silent core" % detect
    offset, rtt = hil.core.call(hil.core.server.ping(hil.core.wait_device(timeout=5)))
    assert rtt is not None
    hil.assert_conformant()


@pytest.mark.spec("§10.1", "R10.1-b")
def test_reconnect_after_core_restart(hil):
    """The core stops for 2 s and comes back (same key, same registry): the board reconnects by itself within
    its backoff and is admitted with the same pattern."""
    hil.start_core()
    hil.provision("ik")
    hil.boot()
    time.sleep(0.5)
    t_stop = hil.tl.now()
    hil.restart_core(down_s=2.0)
    acc = hil.expect(CORE_TO_SAT, "hello_response", pred=lambda e: e.t > t_stop and "accepted" in e.summary,
                     timeout=RECONNECT_BOUND_S, what="the board back after the core restart")
    hil.measure("reconnect_ms", 1000 * (acc.t - t_stop))
    pats = [r["noise_pattern"] for r in hil.reports()]
    assert pats == ["IK", "IK"], "sessions: %s" % pats
    hil.assert_conformant()


@pytest.mark.spec("§10.1")
def test_reconnect_backoff_no_storm(hil):
    """The core is down for 3 s: the board keeps its backoff (base doubling to the cap, jitter in [d/2, d)),
    so its connection attempts in that window are at most what the shortest waits of that schedule allow
    (derived from the board's backoff knobs), never a storm; then it is back by itself."""
    hil.start_core()
    hil.provision("ik")
    hil.boot()
    env = getattr(hil.target, "env", {})
    base = int(env.get("ALABAMA_SIM_BACKOFF_BASE_MS", 500))
    cap = int(env.get("ALABAMA_SIM_BACKOFF_CAP_MS", 60000))
    n0 = len(hil.core.link_events)
    t0, t_stop = time.monotonic(), hil.tl.now()
    hil.restart_core(down_s=3.0)
    window = time.monotonic() - t0
    attempts = sum(1 for e in hil.core.link_events[n0:] if e[0] == "connect")
    allowed = max_attempts(window, base, cap) + 1
    hil.measure("attempts_while_down", attempts)
    assert attempts <= allowed, ("%d connection attempts in %.1f s with the core down: a board keeping its backoff "
                                 "(base %d ms, cap %d ms) makes at most %d" % (attempts, window, base, cap, allowed))
    hil.expect(CORE_TO_SAT, "hello_response", pred=lambda e: e.t > t_stop and "accepted" in e.summary,
               timeout=RECONNECT_BOUND_S, what="the board back after the core was down")
    hil.assert_conformant()


@pytest.mark.spec("§10.2", "R10.2-a", "R10.10-a")
def test_r10_2_a_ping_both_ways(hil):
    """Pings both ways: the board answers the core's Ping on its id (t1 echoed, t3 >= t2) and pings the core on
    its own odd ids; the clock-offset round completes."""
    hil.start_core(ping_interval=0.5)
    hil.provision("ik")
    did = hil.boot()
    offset, rtt = hil.core.call(hil.core.server.ping(did))
    assert rtt is not None and 0 <= rtt < 2_000_000, "round trip %s us" % rtt
    time.sleep(2.5)
    core_pings = hil.tl.find(CORE_TO_SAT, "ping")
    answers = {e.id: e for e in hil.tl.find(SAT_TO_CORE, "ping_response")}
    assert core_pings and all(p.id in answers for p in core_pings[:-1]), "unanswered core Pings"
    for p in core_pings[:-1]:
        a = answers[p.id].env.ping_response
        assert a.t1 == p.env.ping.t1 and a.t3 >= a.t2
    board_pings = hil.tl.find(SAT_TO_CORE, "ping")
    assert board_pings and all(p.id % 2 == 1 for p in board_pings), "the board's Pings: %s" % board_pings[:3]
    hil.assert_conformant()
