"""Deliberately broken firmware builds: proof that each scenario fails when the behaviour it guards breaks.

Responsible for the catalogue of mutants — each one exact text edit(s) to a copy of ``firmware/`` that
removes one guarded behaviour — and for building a mutant tree in a directory. A mutant whose anchor
text no longer occurs exactly once is *stale* (the firmware changed under it): building it raises
``StaleMutant`` so the test says to update the mutant rather than passing vacuously.
``tests/host/test_hil_mutants.py`` runs each mutant's scenario(s) with ``alabama hil --firmware`` and
asserts they FAIL. Run one by hand: ``python -m alabama.hil.mutants NAME DIR`` then
``alabama hil --board sim --firmware DIR -k SCENARIO``.
"""
import pathlib
import shutil
import sys


class StaleMutant(Exception):
    pass


class Mutant:
    def __init__(self, name, scenario, breaks, edits, needs=()):
        self.name = name
        self.needs = needs                # host tools the guarding scenario needs ("speech": pocketsphinx, espeak-ng, sox)
        self.scenario = scenario          # pytest -k expression selecting the guarding scenario(s)
        self.breaks = breaks              # the behaviour removed, in words
        self.edits = edits                # [(path under firmware/, old text, new text)]

    def __repr__(self):
        return "Mutant(%s)" % self.name


MUTANTS = [
    Mutant("even_capture_ids", "test_4_1_voice_exchange",
           "the satellite mints even ids (core parity) instead of odd ones (R6.3-a)",
           [("satellite/session.py", "        self._next_id = 1\n", "        self._next_id = 2\n")]),
    Mutant("seq_steps_by_two", "test_4_1_voice_exchange",
           "capture chunks count seq by 2 (gaps in a stream that should have none, R10.10-c)",
           [("satellite/session.py", "        env.stream_chunk.seq = st.seq\n        st.seq += 1\n",
             "        env.stream_chunk.seq = st.seq\n        st.seq += 2\n")]),
    Mutant("no_playback_done_on_cancel", "test_4_3_barge_in",
           "a cancelled render stops but is never reported with PlaybackDone (§4.3, R10.8-a)",
           [("satellite/device.py",
             "        self.log(\"render %d cancelled (%s) after %d frames\" % (ev.id, reason_name(ev.reason), "
             "self.frames_played))\n        self._render_done(ev.id)\n",
             "        self.log(\"render %d cancelled (%s) after %d frames\" % (ev.id, reason_name(ev.reason), "
             "self.frames_played))\n        self.render_id = 0\n")]),
    Mutant("no_stop", "test_4_4_tap_to_stop",
           "a long press no longer sends Stop (§4.4)",
           [("satellite/device.py", "        self.send(self.s.stop())\n", "        pass\n")]),
    Mutant("pin_on_xx", "test_r7_3_a_guest_xx",
           "the core key is pinned on XX alone, before any Paired (R7.3-d)",
           [("satellite/runtime.py", "        self.state = _CONNECTED\n",
             "        self.state = _CONNECTED\n        self.ks.pin_core_key(self.conn.remote_static)\n")]),
    Mutant("xx_fallback", "test_r7_3_c_ik_key_mismatch_no_xx",
           "after a failed IK handshake the satellite retries with XX (R7.3-f)",
           [("satellite/runtime.py", "        core_key = rec.core_key or self.ks.pinned_core_key()\n",
             "        core_key = (rec.core_key or self.ks.pinned_core_key()) if not self.attempts else None\n")]),
    Mutant("retry_after_closed", "test_r7_3_j_closed_mode_no_retry",
           "REJECTED_CLOSED is retried automatically with backoff (R7.3-j)",
           [("satellite/runtime.py", "            if end in (_END_CLOSED, _END_VERSION",
             "            if end in (_END_VERSION")]),
    Mutant("unknown_arm_drops", "test_r2_2_b_unknown_envelope_arm",
           "an unknown Envelope arm ends the session (R2.2-b)",
           [("satellite/session.py",
             "            if op is None:\n                return Ignored(id, getattr(env, \"unknown_op\", 0), "
             "\"unknown operation\")\n",
             "            if op is None:\n                raise ProtocolViolation(\"UNKNOWN_OP\", \"unknown operation\")\n")]),
    Mutant("no_liveness_timeout", "test_r10_1_b_core_goes_silent",
           "a silent core is never detected (R10.1-b)",
           [("satellite/runtime.py", "        dead_ms = 3 * self.ping_ms + allowance",
             "        dead_ms = 3600000 + 0 * allowance")]),
    Mutant("no_backoff", "test_reconnect_backoff_no_storm",
           "reconnects at once, forever, with no backoff (a reconnect storm against a core that is down)",
           [("satellite/runtime.py", "        return d // 2 + j ", "        return 0 * (d // 2 + j) ")]),
    Mutant("ping_wrong_t1", "test_r2_2_a_unknown_fields or test_r10_2_a_ping_both_ways",
           "PingResponse does not echo the Ping's t1 (R10.2-a)",
           [("satellite/session.py", "pb.PingResponse(t1=m.t1, t2=now_us, t3=now_us)",
             "pb.PingResponse(t1=m.t1 + 1, t2=now_us, t3=now_us)")]),
    # HAL mutants: the virtual board's microphone path (hal/sim.py) broken the way a real I2S path breaks.
    # Samples still arrive and are not silent; only the intelligibility check can tell.
    Mutant("mic_drops_a_byte", "test_intelligible_push_to_talk",
           "one byte lost from the microphone after every 20 ms frame (a DMA/FIFO off by one: every other "
           "frame's samples straddle two bytes)",
           [("satellite/hal/sim.py", "            n = f.readinto(raw) or 0\n",
             "            n = f.readinto(raw) or 0\n            f.read(1)\n")], needs=("speech",)),
    Mutant("mic_swaps_bytes", "test_intelligible_push_to_talk",
           "the bytes of every microphone sample swapped (wrong I2S slot/endianness)",
           [("satellite/hal/sim.py", "        audio.mic_to_s16(dst, pos, self._mic_raw, nframes, self._mic_fmt, self.gain)\n",
             "        raw = self._mic_raw\n        for j in range(0, len(raw) - 1, 2):\n"
             "            raw[j], raw[j + 1] = raw[j + 1], raw[j]\n"
             "        audio.mic_to_s16(dst, pos, self._mic_raw, nframes, self._mic_fmt, self.gain)\n")],
           needs=("speech",)),
    Mutant("mic_shift8", "test_intelligible_push_to_talk",
           "microphone samples taken 8 bits too low from the I2S slot (bits 23..8 of a 32-bit word instead of "
           "31..16): each sample is shifted left by 8 and wraps, its high byte lost",
           [("satellite/hal/sim.py", "        audio.mic_to_s16(dst, pos, self._mic_raw, nframes, self._mic_fmt, self.gain)\n",
             "        raw = self._mic_raw\n        for j in range(0, len(raw) - 1, 2):\n"
             "            raw[j + 1] = raw[j]\n            raw[j] = 0\n"
             "        audio.mic_to_s16(dst, pos, self._mic_raw, nframes, self._mic_fmt, self.gain)\n")],
           needs=("speech",)),
    Mutant("wake_pre_roll", "test_the_board_wakes_on_its_wake_word_and_the_core_answers_the_question",
           "a wake detection opens its capture with the detector's state but streams from a second earlier: the "
           "wake word's audio goes up with the command (the pre-roll docs/core.md says is none)",
           [("satellite/device.py", "            self.open_capture(pb.Trigger.WAKEWORD)\n",
             "            self.hal._mic.seek(-32000, 1) if getattr(self.hal, \"_mic\", None) else None\n"
             "            self.open_capture(pb.Trigger.WAKEWORD)\n")], needs=("speech",)),
    Mutant("wake_deaf_while_playing", "test_a_full_duplex_board_barges_in_by_voice_while_the_reply_plays",
           "a full-duplex board stops listening for its wake word while the reply plays (no barge-in by voice)",
           [("satellite/device.py", "            return self.wake_barge and not self.render_muted\n",
             "            return False\n")], needs=("speech",)),
]

BY_NAME = {m.name: m for m in MUTANTS}


def apply(mutant, src, dst):
    """Copy firmware tree ``src`` to ``dst`` and apply ``mutant``'s edits; returns ``dst``."""
    src, dst = pathlib.Path(src), pathlib.Path(dst)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.mpy"))
    for rel, old, new in mutant.edits:
        p = dst / rel
        text = p.read_text()
        n = text.count(old)
        if n != 1:
            raise StaleMutant("mutant %s: %r occurs %d times in %s (expected once): update the mutant to the "
                              "current firmware" % (mutant.name, old[:60], n, rel))
        p.write_text(text.replace(old, new))
    return dst


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in BY_NAME:
        print("usage: python -m alabama.hil.mutants NAME DIR\nmutants:")
        for m in MUTANTS:
            print("  %-28s -k %-40s %s" % (m.name, m.scenario, m.breaks))
        return 2
    from .targets import default_firmware
    out = apply(BY_NAME[argv[0]], default_firmware(), argv[1])
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
