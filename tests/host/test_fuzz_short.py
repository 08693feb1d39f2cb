"""A short budget of every fuzz target (tools/fuzz) inside `make test`, and the core's fuzz fixtures.

The full >= 1,000,000-input run is `make fuzz` (docs/fuzzing.md). Each test fails on any Crash: an uncaught
exception, an internal table past its bound, a stuck reader, or a spec answer the oracle finds missing.
"""
import json
import pathlib
import sys

import pytest

from mpharness import ROOT, run_micropython

FUZZ = ROOT / "tools" / "fuzz"
sys.path.insert(0, str(FUZZ))

import corefuzz  # noqa: E402
import fwfuzz  # noqa: E402

DATA = ROOT / "tests" / "data" / "fuzz"


def _core_fixture(name):
    return (DATA / "core" / name).read_bytes()


def test_r6_1_a_core_held_partial_frame_survives_the_limit_drop_at_hello():
    # Finding 1: a partial frame held under the pre-Hello limit became over-limit when the Hello lowered it;
    # the host FrameDecoder hit an assertion. Now it is an over-limit frame like any other.
    assert corefuzz.run(_core_fixture("limit-lowered-under-held-frame.bin")).startswith("close:core:")


def test_r6_a_core_fast_path_total_len_zero_is_a_framing_close():
    # Finding 2: total_len 0 as the last plaintext byte raised IndexError in CoreSession._fast_frames.
    assert corefuzz.run(_core_fixture("fast-path-total-len-zero.bin")) == "close:core:framing"


def test_r6_1_b_core_answer_over_tiny_max_frame_bytes_closes_cleanly():
    # Finding 3: a Hello with max_frame_bytes 6 then a Ping: the PingResponse cannot be sent, and the
    # LocalProtocolError escaped receive_data. Now the core reports R6.1-b and closes.
    c = corefuzz.session_for(0)
    rec = _core_fixture("reply-over-tiny-max-frame-bytes.bin")
    c.receive_data(rec[3:])
    assert c.phase == "CLOSED" and "max_frame_bytes 6" in c.close_reason
    assert any(v.check == "max_frame_bytes_too_small" for v in c.report.violations)


def test_every_core_fixture_replays_without_crash():
    names = sorted(p.name for p in (DATA / "core").glob("*.bin"))
    assert len(names) >= 3
    for n in names:
        corefuzz.run(_core_fixture(n))


def test_core_short_budget_no_crash():
    outcomes = {}
    for i in range(1200):
        o = corefuzz.run(corefuzz.gen(5, i))   # raises Crash on a finding
        outcomes[o] = outcomes.get(o, 0) + 1
    assert len(outcomes) >= 8, outcomes
    assert any(o.startswith("event:") for o in outcomes) and any(o.startswith("close:") for o in outcomes)


def test_core_oracle_flags_a_missing_unknown_stream_r10_10_d():
    from alabama.v1 import envelope_pb2
    env = envelope_pb2.Envelope(id=41)
    env.stream_chunk.seq = 0
    with pytest.raises(fwfuzz.Crash):
        corefuzz._check_answers(1, [env], [])


@pytest.mark.parametrize("target", ["fw_frame", "fw_noise", "fw_session"])
def test_firmware_short_budget_under_micropython(target):
    n = 200 if target == "fw_noise" else 800
    r = run_micropython([str(FUZZ / "mp_main.py"), "batch", target, "3", "0", str(n)], timeout=300, heap="8m",
                        env={"MICROPYPATH": "%s:%s" % (ROOT / "firmware", FUZZ)})
    out = r.stdout.decode(errors="replace")
    line = [x for x in out.splitlines() if x.startswith("RESULT ")]
    assert line, out[-2000:] + r.stderr.decode(errors="replace")[-2000:]
    res = json.loads(line[-1][7:])
    assert res["count"] == n
    assert res["crashes"] == [], res["crashes"][:3]
    assert len(res["outcomes"]) >= 5, res["outcomes"]
