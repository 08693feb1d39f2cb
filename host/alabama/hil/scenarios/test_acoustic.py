"""Audio through the air, for a real board with an acoustic loopback (its speaker facing its microphone,
docs/hil.md): what the board plays must come back through its microphone. The virtual board has no air
between its speaker and its microphone, so these scenarios skip there."""
import asyncio

import pytest

from alabama.core.pipeline import Reply
from alabama.hil import steps
from alabama.hil.timeline import CORE_TO_SAT, SAT_TO_CORE

PROBE_HZ = 1000.0


class ProbeBrain:
    """First turn: answer with a 2 s 1 kHz probe. Later turns: keep what was heard, answer briefly."""

    def __init__(self):
        self.heard = []

    async def reply(self, turn):
        self.heard.append(turn.audio)
        ms = 2000 if len(self.heard) == 1 else 300
        await asyncio.sleep(0)
        return Reply(audio=steps.tone(ms, PROBE_HZ, amp=12000), rate=16000, channels=1)


@pytest.mark.spec("§4.1", "§8.2")
@pytest.mark.needs("loopback", "mic", "speaker")
def test_loopback_board_hears_what_it_plays(hil):
    """While the board plays a 2 s 1 kHz probe, the core asks for a capture: the captured audio must be
    dominated by the probe (speaker, amplifier, air, microphone and the capture path all work, at the
    declared rates). A half-duplex board cannot listen while it plays and declines: the scenario skips."""
    brain = ProbeBrain()
    hil.start_core(brain=brain)
    hil.provision("ik")
    did = hil.boot()
    m = hil.tl.mark()
    hil.core.call(hil.core.server.request_capture(did, "probe-1"), timeout=15)
    ro = hil.expect(CORE_TO_SAT, "media_render_open", after=m, timeout=20)
    hil.expect(CORE_TO_SAT, "stream_chunk", ro.id, after=m, pred=lambda e: e.seq >= 10)
    m2 = hil.tl.mark()
    from alabama.core.errors import RequestFailed
    try:
        hil.core.call(hil.core.server.request_capture(did, "probe-2"), timeout=15)
    except RequestFailed as e:
        pytest.skip("the board declined to capture while playing (%s): half duplex" % e)
    co = hil.expect(SAT_TO_CORE, "capture_open", after=m2)
    hil.expect(CORE_TO_SAT, "response", co.id, after=m2, timeout=30)
    assert len(brain.heard) >= 2
    ratio = steps.band_ratio(brain.heard[1], f=PROBE_HZ)
    hil.note("1 kHz share of what the microphone heard: %.2f" % ratio)
    assert ratio > 0.3, "the microphone did not hear the 1 kHz probe (share %.2f): check the loopback" % ratio
