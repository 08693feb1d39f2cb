"""Spec §7.3 admission, every path, from the board's side: which Noise pattern it uses, what it pins, what it
does after a Paired, a rejection, a version floor or a core that cannot prove the pinned key.

The core's report tells the pattern and the admission path of each session (docs/core.md).
"""
import time

import pytest

from alabama.hil import measures
from alabama.hil.timeline import CORE_TO_SAT, NOTE, SAT_TO_CORE
from alabama.v1 import operations_pb2 as ops

#: How long a scenario watches for a (forbidden) automatic retry: several times the board's first backoffs.
NO_RETRY_WATCH_S = 8.0


def _sessions(hil):
    return [r for r in hil.reports() if r.get("noise_pattern")]


def _connects(hil, after=0):
    return [e for e in hil.tl.find(NOTE, after=after) if e.summary.startswith("board connects")]


def _index(hil, ev):
    """The timeline index of row ``ev``."""
    return next(i for i, e in enumerate(hil.tl.snapshot()) if e is ev)


def _reconnect(hil):
    """Cut the connection and wait for the board to come back admitted; returns the new session's report."""
    n = len(_sessions(hil))
    m = hil.tl.mark()
    hil.core.cut()
    # the HelloResponse on the NEW connection: the core admits a board before it writes (and the bench records) its
    # HelloResponse, so under load the cut connection's may land after the mark and must not pass for this one
    c = hil.expect(NOTE, after=m, pred=lambda e: e.summary.startswith("board connects"), timeout=20,
                   what="the board connecting again after a cut")
    hil.expect(CORE_TO_SAT, "hello_response", after=_index(hil, c), timeout=20, what="the board back after a cut")
    for _ in range(100):
        s = _sessions(hil)
        if len(s) > n:
            return s[-1]
        time.sleep(0.05)
    hil.fail("no new session after the reconnect")


@pytest.mark.spec("§7.3", "R7.2-a", "R7.3-a", "R7.3-d")
def test_r7_3_a_guest_xx(hil):
    """Address only: the board connects with Noise XX, is admitted as a guest (Accepted, no Paired) and does
    not pin the core key on XX alone, so its next connection is XX again."""
    hil.start_core()
    hil.provision("guest")
    hil.boot()
    s = _sessions(hil)[0]
    assert s["noise_pattern"] == "XX" and s["admission"] == "new_guest", s
    hil.expect_none(CORE_TO_SAT, "paired", within=1.0)
    if hasattr(hil.target, "pinned_core_key"):
        assert hil.target.pinned_core_key() is None, "the board pinned the core key on XX alone (R7.3-d)"
    s2 = _reconnect(hil)
    assert s2["noise_pattern"] == "XX", "after a guest session the board reconnected with %s" % s2["noise_pattern"]
    assert s2["admission"] == "known_guest"
    hil.assert_conformant()


@pytest.mark.spec("§7.3", "R7.3-b", "R7.3-e", "R7.3-k")
def test_r7_3_b_token_paired_then_ik(hil):
    """Token path: XX with Hello.pairing_token -> Accepted + Paired; the board pins the key, drops the token,
    and every later connection uses IK (admitted paired, never sent Paired again)."""
    hil.start_core()
    hil.provision("token")
    hil.boot()
    hello = hil.expect(SAT_TO_CORE, "hello")
    assert hello.env.hello.pairing_token, "the Hello carries no pairing_token"
    hil.expect(CORE_TO_SAT, "paired", what="Paired after a valid token")
    s = _sessions(hil)[0]
    assert (s["noise_pattern"], s["admission"]) == ("XX", "token"), s
    if hasattr(hil.target, "pinned_core_key"):
        deadline = time.monotonic() + 5
        while hil.target.pinned_core_key() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hil.target.pinned_core_key() == hil.core.public_key, "Paired did not pin the core key (R7.3-e)"
    m = hil.tl.mark()
    s2 = _reconnect(hil)
    assert s2["noise_pattern"] == "IK", "after Paired the board reconnected with %s (R7.3-e)" % s2["noise_pattern"]
    assert s2["admission"] == "known_paired", s2
    h2 = hil.expect(SAT_TO_CORE, "hello", after=m)
    assert not h2.env.hello.pairing_token, "the used token was sent again"
    hil.expect_none(CORE_TO_SAT, "paired", after=m, within=1.0, what="a second Paired")
    hil.assert_conformant()


@pytest.mark.spec("§7.3", "R7.3-e")
def test_r7_3_manual_approval(hil):
    """Manual in-band path: a guest (XX) is approved by the admin while connected; the core sends Paired on
    the live session, the board pins the key and reconnects with IK as a paired device."""
    hil.start_core()
    hil.provision("guest")
    did = hil.boot()
    hil.expect_none(CORE_TO_SAT, "paired", within=0.5)
    m = hil.tl.mark()
    hil.note("bench: admin approves the device")
    hil.core.call_soon(hil.core.server.approve, did)
    hil.expect(CORE_TO_SAT, "paired", after=m)
    time.sleep(0.3)
    s2 = _reconnect(hil)
    assert (s2["noise_pattern"], s2["admission"]) == ("IK", "known_paired"), s2
    hil.assert_conformant()


@pytest.mark.spec("§7.3", "R7.2-a", "R7.3-k")
def test_r7_3_pre_provisioned_ik(hil):
    """Pre-provisioned path: the core key reaches the board out of band and the admin registered the device;
    the board's first connection is IK, admitted paired, and Paired is never sent."""
    hil.start_core()
    hil.provision("ik", preconfigure=True)
    hil.boot()
    s = _sessions(hil)[0]
    assert (s["noise_pattern"], s["admission"]) == ("IK", "known_paired"), s
    hil.expect_none(CORE_TO_SAT, "paired", within=1.5)
    hil.assert_conformant()


@pytest.mark.spec("§7.3", "R7.3-i", "R7.3-j")
def test_r7_3_j_closed_mode_no_retry(hil):
    """Closed mode: an unknown device gets HelloResponse{rejected: REJECTED_CLOSED} and the connection closes;
    the board must not retry by itself (it waits for re-provisioning)."""
    hil.start_core(closed=True)
    hil.provision("guest")
    hil.boot(wait=False)
    r = hil.expect(CORE_TO_SAT, "hello_response", timeout=20)
    assert r.env.hello_response.rejected.reason == ops.REJECTED_CLOSED, r.summary
    first = len(_connects(hil))
    time.sleep(NO_RETRY_WATCH_S)
    extra = len(_connects(hil)) - first
    assert extra == 0, "the board retried %d time(s) after REJECTED_CLOSED (R7.3-j)" % extra
    assert hil.target.log_wait(r"(?i)reject", timeout=1) is not None, "no legible log line about the rejection"


@pytest.mark.spec("§13", "R13-a")
def test_r13_a_version_floor(hil):
    """Version floor: a core whose floor is above the board's wire_version answers VersionMismatch carrying
    its version; the board reports it legibly and does not loop reconnecting."""
    hil.start_core(min_wire_version=2)
    hil.provision("ik")
    hil.boot(wait=False)
    r = hil.expect(CORE_TO_SAT, "hello_response", timeout=20)
    vm = r.env.hello_response.version_mismatch
    assert vm.min_wire_version == 2, r.summary
    first = len(_connects(hil))
    time.sleep(NO_RETRY_WATCH_S)
    extra = len(_connects(hil)) - first
    assert extra == 0, "the board reconnected %d time(s) after VersionMismatch" % extra
    assert hil.target.log_wait(r"(?i)version", timeout=1) is not None, "no legible log line about the version"


@pytest.mark.spec("§7.3", "R7.3-c", "R7.3-f")
def test_r7_3_c_ik_key_mismatch_no_xx(hil):
    """IK key mismatch: the board pinned a key that is not the core's; the IK handshake fails and the board
    aborts — it must never fall back to XX (which this core would accept), so no Hello ever arrives."""
    hil.start_core()
    hil.provision("wrong_key")
    hil.boot(wait=False)
    deadline = time.monotonic() + 15
    while not _connects(hil) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _connects(hil), "the board never connected"
    time.sleep(NO_RETRY_WATCH_S)
    hellos = hil.tl.find(SAT_TO_CORE, "hello")
    assert not hellos, "a Hello arrived: the board completed a handshake with a core whose key it had not pinned"
    assert not _sessions(hil), "the core admitted a session (%s)" % _sessions(hil)
    assert hil.core.server.handshake_failures >= 1
    assert hil.target.log_wait(r"(?i)IK", timeout=1) is not None, "no legible log line about the IK failure"


@pytest.mark.spec("§7.3", "R7.3-a")
def test_handshake_time(hil):
    """Handshake time over a few fresh connections (IK): measured, and each below 5 s on the virtual board."""
    hil.start_core()
    hil.provision("ik")
    hil.boot()
    hil.expect(CORE_TO_SAT, "hello_response", what="the first connection's HelloResponse")   # recorded after admission
    for _ in range(3):
        _reconnect(hil)
    hs = measures.handshakes(hil.tl)
    assert len(hs) >= 4
    assert max(hs) < 5.0, "handshakes took %s s" % ["%.2f" % h for h in hs]
    hil.assert_conformant()
