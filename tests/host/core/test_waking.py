"""The ambient-wake state table (core/waking.py) without sockets or speech models: the audio after a hit
reaches the requested capture in both supersede orders, the phrase's tail is cut up to the first quiet frame
(at most TAIL_MAX_S), a decline runs the turn on the ambient capture only while it exists, the kept audio is
bounded, and the wake turn's endpointer does not end on a leftover tail before the command."""
import struct

import pytest

from alabama.core import waking as W
from alabama.core.pipeline import EnergyEndpointer

BPS = 32000                      # 16 kHz s16le mono
FRAME = 640


def loud(ms, level=3000):
    return struct.pack("<hh", level, -level) * (ms * 8)


def quiet(ms):
    return bytes(ms * 32)


def test_the_table_forbids_what_it_does_not_list():
    with pytest.raises(KeyError):
        W.step(W.SPOTTING, W.OPENED)
    with pytest.raises(KeyError):
        W.step(W.WAITING, W.AMBIENT_CHUNK)
    assert W.step(W.WOKEN, W.AMBIENT_GONE) == W.WAITING


@pytest.mark.parametrize("order", ["cancel-open", "open-cancel"])
def test_audio_after_the_hit_moves_to_the_requested_capture_in_either_order(order):
    w = W.Waking()
    w.hit(3, BPS, quiet(40))                  # the phrase already over: nothing to cut
    w.asked(6)
    w.ambient_chunk(3, b"\x01\x00" * 320)
    w.ambient_chunk(5, b"\x09\x00" * 320)     # another ambient capture: not this wake's
    if order == "cancel-open":
        assert w.ambient_gone(3) and w.state is W.WAITING
        pcm = w.opened(6, 7)
    else:
        pcm = w.opened(6, 7)
        assert w.ambient_gone(3) and w.state is W.TURN
    assert pcm == quiet(40) + b"\x01\x00" * 320
    assert w.state is W.TURN and w.turn_id == 7
    assert not w.turn_done(3) and w.turn_done(7) and w.state is W.SPOTTING and w.ambient_id is None


def test_a_capture_answering_another_request_takes_nothing():
    w = W.Waking()
    w.hit(3, BPS, quiet(20))
    w.asked(6)
    assert w.opened(8, 9) is None and w.opened(None, 9) is None and w.state is W.WOKEN


def test_the_tail_is_cut_to_the_first_quiet_frame_across_the_hand_over():
    w = W.Waking()
    w.hit(3, BPS, loud(60))                   # 60 ms of "...bama" in the hit's batch
    w.asked(6)
    w.ambient_chunk(3, loud(20))              # ... and 20 more on the ambient capture
    assert w.opened(6, 7) == b"" and w.tail > 0
    assert w.trim(loud(20)) == b""            # ... and 20 on the requested one
    rest = quiet(20) + loud(20)
    assert w.trim(rest) == rest and w.tail == 0    # the gap: from here on, everything is the command
    assert w.trim(loud(20)) == loud(20)


def test_a_run_on_command_loses_at_most_tail_max():
    w = W.Waking()
    w.hit(3, BPS, loud(1000))                 # never quiet: the cut stops at TAIL_MAX_S
    w.asked(6)
    assert len(w.opened(6, 7)) == 1000 * 32 - int(W.TAIL_MAX_S * BPS)


def test_kept_audio_is_bounded():
    w = W.Waking()
    w.hit(3, BPS, quiet(20))
    for _ in range(int(W.AFTER_WAKE_S / 0.02) + 50):
        w.ambient_chunk(3, quiet(20))
    assert len(w.after) == int(W.AFTER_WAKE_S * BPS)


def test_declined_runs_on_the_ambient_capture_only_while_it_exists():
    w = W.Waking()
    w.hit(3, BPS, quiet(20))
    w.asked(6)
    assert w.declined(6) == 3 and w.state is W.TURN and w.turn_id == 3
    assert w.kept() == quiet(20)
    assert w.turn_done(3) and w.state is W.SPOTTING

    w.hit(3, BPS, quiet(20))
    w.asked(6)
    w.ambient_gone(3)
    assert w.declined(6) is None and w.state is W.SPOTTING     # nothing left to run the turn on


def test_the_wake_endpointer_does_not_end_on_a_leftover_tail():
    """80 ms of tail, a 0.7 s pause, then the command: the wake turn's endpointer waits for the command."""
    def ends(ep, pcm):
        for i in range(0, len(pcm), FRAME):
            if ep.feed(pcm[i:i + FRAME]):
                return i // 32
        return None
    pcm = loud(80) + quiet(700) + loud(600) + quiet(700)
    assert ends(EnergyEndpointer(16000), pcm) == 680 - 20            # today's rule: over before the command
    wake = EnergyEndpointer(16000, no_speech_ms=W.FIRST_SPEECH_MS, min_speech_ms=W.MIN_SPEECH_MS)
    assert ends(wake, pcm) == 80 + 700 + 600 + 600 - 20
