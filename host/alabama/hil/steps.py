"""Building blocks the scenarios share: test audio, scripted core brains, and the common exchanges.

Responsible for the moves several scenarios make (a voice exchange asked by the core, a push-to-talk
exchange, reading PlaybackDone against what was sent) so each scenario module reads like the spec's
listing it guards. Brains run on the core's thread; steps run on the test's thread. Nothing here
decides pass or fail beyond the expectations it waits for.
"""
import asyncio

import numpy as np

from alabama import audio
from alabama.core.pipeline import Reply

from .timeline import CORE_TO_SAT, SAT_TO_CORE

RATE = 16000


# ------------------------------------------------------------------------------------------ audio
def write_wav(path, samples, rate=RATE):
    audio.write(path, np.asarray(samples), rate)
    return str(path)


def speechlike(ms, rate=RATE, seed=1, amp=9000):
    """A voiced, syllable-rate modulated signal (not a pure tone) that any energy endpointer calls speech."""
    n = int(rate * ms / 1000)
    t = np.arange(n) / rate
    rng = np.random.default_rng(seed)
    f0 = 140 + 20 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
    env = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t) ** 2
    x = amp * 0.6 * voiced * env + 300 * rng.standard_normal(n)
    return x.astype(np.float64)


def utterance_wav(path, speech_ms=700, silence_ms=1500, lead_ms=100):
    """Silence, speech, then enough silence for the core's endpointer (600 ms quiet) to close the mic."""
    x = np.concatenate([np.zeros(int(RATE * lead_ms / 1000)), speechlike(speech_ms),
                        np.zeros(int(RATE * silence_ms / 1000))])
    return write_wav(path, x)


def tone(ms, freq=440.0, amp=8000, rate=RATE):
    n = int(rate * ms / 1000)
    return (amp * np.sin(2 * np.pi * freq * np.arange(n) / rate)).astype("<i2").tobytes()


def band_ratio(pcm, rate=RATE, f=1000.0):
    """Share of the energy between 200 Hz and 4 kHz that lies within +-50 Hz of ``f`` (s16le mono)."""
    x = np.frombuffer(bytes(pcm[: len(pcm) - len(pcm) % 2]), dtype="<i2").astype(np.float64)
    if len(x) < rate // 4:
        return 0.0
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x)))) ** 2
    freqs = np.fft.rfftfreq(len(x), 1.0 / rate)
    band = spec[(freqs > f - 50) & (freqs < f + 50)].sum()
    total = spec[(freqs > 200) & (freqs < 4000)].sum()
    return float(band / total) if total else 0.0


# ------------------------------------------------------------------------------------------ brains
class ToneBrain:
    """Answers every turn with ``ms`` of a tone (a reply of known length, independent of what was heard)."""

    name = "tone"

    def __init__(self, ms=1500, freq=660.0, delay_s=0.0):
        self.ms = list(ms) if isinstance(ms, (list, tuple)) else [ms]   # per turn; the last one repeats
        self.freq, self.delay_s = freq, delay_s
        self.turns = []

    async def reply(self, turn):
        self.turns.append(turn)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        ms = self.ms[min(len(self.turns), len(self.ms)) - 1]
        return Reply(audio=tone(ms, self.freq), rate=RATE, channels=1, text="tone %d ms" % ms)


class ToolBrain(ToneBrain):
    """Mid-exchange, invokes ``tool`` on the device before answering (spec §4.2 / §4.5); keeps the outcome."""

    name = "tool"

    def __init__(self, tool, arguments="{}", ms=600):
        super().__init__(ms)
        self.tool, self.arguments = tool, arguments
        self.server = None
        self.results = []

    async def reply(self, turn):
        from alabama.core.errors import RequestFailed
        from alabama.core.errors import LocalProtocolError
        try:
            msg = await self.server.invoke(turn.device_id, self.tool, self.arguments, timeout=10)
            self.results.append(("ok", msg))
        except RequestFailed as e:
            self.results.append(("error", e))
        except LocalProtocolError as e:
            self.results.append(("local", e))
        return await super().reply(turn)


def bare_invoke(session, name, arguments="{}"):
    """Invoke ``name`` even if the device never declared it (what §4.5 needs: the core asks for a tool the
    device cannot serve); the core session tracks the id like any Invoke. Returns the id."""
    return session.invoke(name, arguments, unchecked=True)


# ------------------------------------------------------------------------------------------ exchanges
def requested_exchange(hil, ref="hil", timeout=30.0):
    """The core asks for a capture (RequestCapture), the board streams its mic, the core's endpointer
    closes it (StreamEnd END_DETECTED), the reply plays, PlaybackDone, Response. Returns the rows."""
    m = hil.tl.mark()
    did = hil.device_id
    hil.core.call(hil.core.server.request_capture(did, ref), timeout=15)
    co = hil.expect(SAT_TO_CORE, "capture_open", after=m, pred=lambda e: e.env.capture_open.correlation_ref == ref,
                    what="the CaptureOpen answering RequestCapture %r" % ref)
    return finish_exchange(hil, co, m, timeout)


def finish_exchange(hil, co, m, timeout=30.0, ptt=False):
    """The rest of an exchange on capture ``co``: its StreamEnd, the render and its PlaybackDone, the Response.
    An Error on the capture's id ends the exchange (the capture's failure terminal, R10.8-a): the scenario fails
    at once, quoting it, instead of waiting out ``timeout`` for frames that cannot come."""
    end = _expect_or_error(hil, SAT_TO_CORE if ptt else CORE_TO_SAT, "stream_end", co.id, m, timeout,
                           "the StreamEnd closing capture %d" % co.id)
    ro = hil.expect(CORE_TO_SAT, "media_render_open", after=hil.tl.index_of(end), timeout=timeout)
    done = hil.expect(SAT_TO_CORE, "playback_done", id_=ro.id, after=m, timeout=timeout,
                      what="PlaybackDone on render %d" % ro.id)
    resp = _expect_or_error(hil, CORE_TO_SAT, "response", co.id, m, timeout, "the Response on capture %d" % co.id)
    return {"mark": m, "co": co, "end": end, "ro": ro, "done": done, "resp": resp}


def _expect_or_error(hil, dir_, op, id_, after, timeout, what):
    """``hil.expect(dir_, op, id_)``, failing as soon as an Error on ``id_`` comes first (either way)."""
    ev = hil.expect(None, None, id_=id_, after=after, timeout=timeout, what=what,
                    pred=lambda e: (e.dir == dir_ and e.op == op) or e.op == "error")
    if ev.op == "error":
        hil.fail("expected %s, but %s sent Error on id %d first: %s" % (
            what, "the core" if ev.dir == CORE_TO_SAT else "the board", id_, ev.summary))
    return ev


def go_ambient(hil):
    """The core writes the board's setting capture_mode = ambient; returns the ambient CaptureOpen it opens
    (no trigger: spec §10.4, "an absent trigger makes it ambient")."""
    from alabama.v1 import surface_pb2
    m = hil.tl.mark()
    hil.core.call(hil.core.server.write_setting(hil.device_id, "capture_mode",
                                                surface_pb2.SettingValue(string_value="ambient")))
    amb = hil.expect(SAT_TO_CORE, "capture_open", after=m, what="the ambient CaptureOpen")
    assert amb.env.capture_open.trigger == 0, "an ambient capture carries no trigger: %s" % amb.summary
    return amb


def ptt_exchange(hil, wav, hold_s=None, timeout=30.0):
    """Push-to-talk: press, the mic hears ``wav``, release after ``hold_s`` (default: the WAV's length)."""
    m = hil.tl.mark()
    hil.target.set_mic(wav)
    hil.note("bench: button pressed")
    hil.target.press()
    co = hil.expect(SAT_TO_CORE, "capture_open", after=m, timeout=5, what="the CaptureOpen of a button press")
    if hold_s is None:
        h = audio.info(wav)
        hold_s = h.nframes / h.framerate
    import time
    time.sleep(hold_s)
    hil.note("bench: button released")
    hil.target.release()
    return finish_exchange(hil, co, m, timeout, ptt=True)


def sent_render_bytes(hil, rid):
    return sum(e.tail for e in hil.tl.find(CORE_TO_SAT, "stream_chunk", rid))


def seqs(hil, dir_, id_, after=0):
    return [e.seq for e in hil.tl.find(dir_, "stream_chunk", id_, after)]
