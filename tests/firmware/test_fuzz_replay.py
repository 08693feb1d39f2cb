# dual: cpython micropython
# Fuzz regression fixtures (tests/data/fuzz/fw_*/) replayed through the firmware targets of tools/fuzz/fwfuzz.py,
# plus a few hundred fresh seeded inputs per target; any Crash (uncaught exception, INTERNAL codec error,
# stuck reader, broken answer rule) fails the test on the interpreter it happened on.
import os
import sys

_HERE = __file__.rpartition("/")[0] or "."
_FUZZ = _HERE + "/../../tools/fuzz"
if _FUZZ not in sys.path:
    sys.path.append(_FUZZ)
_DATA = _HERE + "/../data/fuzz"

import fwfuzz  # noqa: E402


def _fixtures(target):
    d = _DATA + "/" + target
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return []
    out = []
    for n in names:
        if n.endswith(".bin"):
            with open(d + "/" + n, "rb") as f:
                out.append((n, bytearray(f.read())))
    return out


def _replay(target):
    got = {}
    for name, rec in _fixtures(target):
        try:
            got[name] = fwfuzz.run(target, rec)
        except fwfuzz.Crash as c:
            raise AssertionError("%s/%s: %s" % (target, name, c))
    return got


def test_fw_frame_fixtures_end_decoded_or_closed():
    got = _replay("fw_frame")
    assert len(got) >= 2, got
    # total_len 0 is a framing error (clean close), never an index past the buffer
    assert got["total-len-zero.bin"] == "close:FrameError:HEADER_LEN_OVER_TOTAL", got
    # the Hello decodes; the frame behind it is over the 4096-byte buffer room: discarded, header undecodable
    assert got["partial-big-frame-after-hello.bin"] == "oversize:undecodable", got


def test_fw_session_fixtures_r10_10_d_unknown_answered_r10_3_b_cancelled_silent():
    # chunks on a never-opened id (UNKNOWN_STREAM), a cancelled render, an ended render (STREAM_CLOSED) and
    # a cancelled capture: the oracle in fwfuzz raises Crash if any answer is missing or superfluous.
    got = _replay("fw_session")
    assert got["chunks-fresh-cancelled-ended.bin"] == "silent:stream_chunk", got


def test_fw_noise_fixtures_replay():
    _replay("fw_noise")


def test_oracle_flags_an_unanswered_ping_r10_8_a():
    s = fwfuzz.session_for(1)
    env = fwfuzz.v1.Envelope(id=8, ping=fwfuzz.v1.Ping(t1=1))
    try:
        fwfuzz._check_answer(s, env, None, [], 0, fwfuzz.S.ACTIVE)   # 0: _FRESH (a const, no global on micropython)
    except fwfuzz.Crash as c:
        assert c.kind == "spec"
    else:
        raise AssertionError("an unanswered Ping passed the oracle")


def test_short_seeded_budget_every_target():
    for target, n in (("fw_frame", 300), ("fw_session", 300), ("fw_noise", 40)):
        outcomes, crashes = fwfuzz.batch(target, 11, 0, n)
        assert not crashes, (target, crashes[:3])
        assert len(outcomes) >= 5, (target, outcomes)   # the generators reach several outcome classes
