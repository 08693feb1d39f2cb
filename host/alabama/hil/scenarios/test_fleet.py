"""Cross-board scenarios: one reference core serving several boards at once.

`alabama hil` runs them when it drives two or more boards, after every board ran the suite on its own, in one
process that owns every board (the ``fleet`` fixture, ``bench.Fleet``: one core, one timeline, each board's
frames told apart by its core session). With a single board they are skipped, saying so (docs/hil.md, "A fleet").
"""
import time

import pytest

from alabama.hil import steps
from alabama.hil.timeline import CORE_TO_SAT, SAT_TO_CORE
from alabama.v1 import operations_pb2 as ops
from alabama.v1 import surface_pb2

pytestmark = pytest.mark.fleet

#: The long reply board 1 barges into, and the share of it that must have played first (in chunks of 20 ms).
REPLY_MS, BARGE_AFTER_CHUNKS = 6000, 40
#: Seconds both boards have to pair and come back over IK after a cut.
PAIR_TIMEOUT_S = 30.0


def _stream_seqs(fleet, board, cid, after):
    return [e.seq for e in fleet.tl.find(SAT_TO_CORE, "stream_chunk", cid, after, fleet.mine(board))]


@pytest.mark.spec("§4.3", "§10.4", "R10.8-a")
@pytest.mark.needs("button", "mic", "speaker")
def test_fleet_barge_in_while_another_streams(fleet):
    """One core, two boards: board 2 streams its microphone (an ambient capture, §10.4) while board 1 runs a
    push-to-talk exchange and barges in over its long reply (§4.3: new CaptureOpen, StreamCancel{BARGE_IN} on
    board 1's render, PlaybackDone with fewer frames, the new exchange answered). Board 2's stream goes on
    untouched through all of it: its chunks keep coming in sequence on the same capture id and session, nothing
    is cancelled or ended on it, and no session's conformance report lists a violation."""
    a, b = fleet.boards[:2]
    fleet.start_core(brain=steps.ToneBrain([REPLY_MS, 600]))
    for x in (a, b):
        x.provision("ik")
    fleet.boot([a, b])
    m0 = fleet.tl.mark()
    fleet.core.call(fleet.core.server.write_setting(b.device_id, "capture_mode",
                                                    surface_pb2.SettingValue(string_value="ambient")))
    amb = fleet.expect(b, SAT_TO_CORE, "capture_open", after=m0, what="the ambient CaptureOpen")
    fleet.expect(b, SAT_TO_CORE, "stream_chunk", id_=amb.id, after=m0, pred=lambda e: e.seq >= 10,
                 what="board 2 streaming (chunk 10 of its ambient capture)")
    wav = steps.utterance_wav(a.workdir / "utterance.wav", speech_ms=500, silence_ms=200)
    m = fleet.tl.mark()
    a.target.set_mic(wav)
    a.target.press()
    co1 = fleet.expect(a, SAT_TO_CORE, "capture_open", after=m, what="the push-to-talk CaptureOpen")
    time.sleep(0.8)
    a.target.release()
    ro = fleet.expect(a, CORE_TO_SAT, "media_render_open", after=m, timeout=15)
    fleet.expect(a, CORE_TO_SAT, "stream_chunk", id_=ro.id, after=m, pred=lambda e: e.seq >= BARGE_AFTER_CHUNKS,
                 timeout=10, what="the reply well under way")
    m2 = fleet.tl.mark()
    fleet.note("bench: board 1's button pressed over its reply (barge-in) while board 2 streams")
    a.target.set_mic(wav)
    a.target.press()
    co2 = fleet.expect(a, SAT_TO_CORE, "capture_open", after=m2, what="the barge-in CaptureOpen")
    assert co2.id % 2 == 1 and co2.id > co1.id, "barge-in capture id %d after %d" % (co2.id, co1.id)
    cancel = fleet.expect(a, CORE_TO_SAT, "stream_cancel", id_=ro.id, after=m2)
    assert cancel.env.stream_cancel.reason == ops.BARGE_IN, cancel.summary
    done = fleet.expect(a, SAT_TO_CORE, "playback_done", id_=ro.id, after=m2, timeout=5)
    frames = done.env.playback_done.frames
    assert 0 < frames < 16 * REPLY_MS, "PlaybackDone after barge-in reports %d of %d frames" % (frames, 16 * REPLY_MS)
    a.measure("cancel_silence_ms", 1000 * a.target.silence_after(cancel.t, done))
    time.sleep(0.6)
    a.target.release()
    fleet.expect(a, SAT_TO_CORE, "stream_end", id_=co2.id, after=m2, what="PTT_RELEASE on the barge-in capture")
    ro2 = fleet.expect(a, CORE_TO_SAT, "media_render_open", after=fleet.tl.index_of(done), timeout=30)
    fleet.expect(a, SAT_TO_CORE, "playback_done", id_=ro2.id, after=m2, timeout=30)
    resp = fleet.expect(a, CORE_TO_SAT, "response", id_=co2.id, after=m2, timeout=30)
    # board 2, all along: one capture, chunks in sequence, still coming after board 1's exchange ended
    tail = fleet.expect(b, SAT_TO_CORE, "stream_chunk", id_=amb.id, after=fleet.tl.index_of(resp),
                        what="board 2 still streaming after board 1's exchange")
    seqs = _stream_seqs(fleet, b, amb.id, m0)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), \
        "board 2's ambient capture lost or reordered chunks while board 1 barged in: %s" % seqs[:40]
    assert tail.seq > seqs[0] + 10
    ended = [e for e in fleet.tl.find(None, None, amb.id, m0, fleet.mine(b))
             if e.op in ("stream_cancel", "stream_end", "error")]
    assert not ended, "board 2's capture was touched by board 1's barge-in: %s" % ended
    assert len(fleet.sessions(b)) == 1 and len(fleet.sessions(a)) == 1, "a board reconnected during the scenario"
    fleet.assert_conformant()


@pytest.mark.spec("§7.3", "R7.3-b", "R7.3-e", "R7.3-k")
def test_fleet_two_boards_pair_at_once(fleet):
    """Two boards, each given its own pairing token, start at the same moment against one core: both connect
    with Noise XX and their token, both get Accepted + Paired under distinct device ids, each pins the core key;
    after a cut both come back with IK, admitted paired; the core's registry lists both as paired."""
    a, b = fleet.boards[:2]
    fleet.start_core()
    for x in (a, b):
        x.provision("token")
    dids = fleet.boot([a, b], timeout=PAIR_TIMEOUT_S)
    assert len(set(dids)) == 2, "two boards, one device id: %s" % dids
    for x in (a, b):
        fleet.expect(x, CORE_TO_SAT, "paired", timeout=PAIR_TIMEOUT_S, what="Paired after its token")
        first = [r for r in fleet.core.reports() if r.get("device_id") == x.device_id][0]
        assert (first["noise_pattern"], first["admission"]) == ("XX", "token"), "%s: %s" % (x.label, first)
        if hasattr(x.target, "pinned_core_key"):
            deadline = time.monotonic() + PAIR_TIMEOUT_S
            while x.target.pinned_core_key() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert x.target.pinned_core_key() == fleet.core.public_key, "%s: Paired did not pin the key" % x.label
    trust = dict(fleet.boards[0].registry(lambda r: [(d.device_id, d.trust) for d in r.devices()]))
    assert all(trust.get(d) == "paired" for d in dids), "the registry after pairing: %s" % trust
    fleet.core.cut()
    deadline = time.monotonic() + PAIR_TIMEOUT_S
    again = {}
    while len(again) < 2 and time.monotonic() < deadline:
        for x in (a, b):
            later = [r for r in fleet.core.reports() if r.get("device_id") == x.device_id][1:]
            # the report has its pattern at the handshake and its admission only at Hello: wait for both
            if later and later[-1].get("noise_pattern") and later[-1].get("admission"):
                again[x.label] = (later[-1]["noise_pattern"], later[-1]["admission"])
        time.sleep(0.1)
    assert again == {a.label: ("IK", "known_paired"), b.label: ("IK", "known_paired")}, \
        "after the cut the boards came back as %s" % again
    fleet.assert_conformant()
