"""The reference core's voice pipeline: endpointing, a pluggable brain, exact resampling, paced replies.

Responsible for the turn (spec §4.1–§4.4, §10.4.1): collect a capture's audio, close the mic with
StreamEnd{END_DETECTED} when the energy endpointer hears the end (or on the satellite's PTT
StreamEnd), ask the brain for a reply, resample it exactly to the declared SpeakerParams, stream it
over MediaRenderOpen paced within buffer_ms, await PlaybackDone, then close the capture id with its
Response; push PipelineState as the turn moves; barge-in, Stop and DEFERRED resume. It talks to the
wire only through the CoreSession API and a small ``Port`` (session, device_id, flush, wait_terminal,
spawn), never to a connection's internals. Events come in through ``on_event`` (``on_chunk`` is the
same for ChunkReceived, the per-frame entry); the driver flushes after handing events in, so only the
pipeline's own tasks (turns, the paced reply) flush.
"""
import asyncio
import hashlib
import json
import logging
import shutil
import subprocess
import time
import typing

from alabama.v1 import operations_pb2 as ops, surface_pb2, content_pb2

from .. import audio
from ..audio import resample, rms
from ..errors import AlabamaError
from . import BRAINS
from . import session as cs
from . import state as S
from .deferred import DeferredStore
from .errors import RequestFailed
from .turns import MAX_TRANSCRIPT_CHARS, Reply, Turn  # noqa: F401 — Reply/Turn: the brains' interface, here too
from . import waking as W

log = logging.getLogger("alabama.core.pipeline")
PS = ops.PipelineState

#: Reply audio goes out in pieces of this many milliseconds (each split further to fit max_frame_bytes).
RENDER_PIECE_MS = 20
#: Never run the render further ahead of real time than this fraction of the declared buffer_ms.
PACE_FRACTION = 0.5
#: Under backpressure (a slow reader), queued bulk frames above this make the core elide LOSSY_OK
#: render pieces rather than queue them (R10.1-c).
MAX_BULK_QUEUED = 64
#: Extra wait for PlaybackDone past the reply's own duration.
PLAYBACK_GRACE_S = 5.0
#: A DEFERRED capture is acknowledged every this many stored chunks (CaptureAck is cumulative).
ACK_EVERY = 25
#: A DEFERRED chunk whose capture_ts is more than this many chunk durations after the previous one's says
#: chunks are missing (a RELIABLE stream has no gaps, R10.10-c): the conformance report flags it.
GAP_CHUNKS = 1.5
#: How long the end of a DEFERRED recording waits for this connection's Ping round (the clock mapping).
CLOCK_WAIT_S = 3.0
#: A brain's Invoke of a device tool (a light) waits this long for the ToolResult.
INVOKE_TIMEOUT_S = 5.0
#: A device that declares this setting (a string or enum: a shipped model name, "okay_nabu", "open:alexa")
#: has its ambient streams spotted with that model instead of the core's (docs/core.md, "Ambient wake phrase").
WAKE_WORD_SETTING = "wake_word"
#: After a wake turn's terminal, an ambient device streams again (a new ambient CaptureOpen, or chunks on the
#: ambient capture it paused or kept) within this long, else R10.4-b ambient_not_resumed.
AMBIENT_RESUME_S = 5.0


# ---------------------------------------------------------------------------------- audio helpers
class EnergyEndpointer:
    """Ends an utterance after ``silence_ms`` of quiet following speech, or at ``max_ms``, or after
    ``no_speech_ms`` without any speech. Speech = frame RMS above max(floor, ratio x noise estimate), for at
    least ``min_speech_ms`` in a row before the quiet rule applies (0: one loud frame is speech)."""

    def __init__(self, rate, channels=1, floor=400.0, ratio=3.0, silence_ms=600, max_ms=12000, no_speech_ms=5000,
                 min_speech_ms=0):
        self.bytes_per_ms = rate * channels * 2 / 1000.0
        self.floor, self.ratio = floor, ratio
        self.silence_ms, self.max_ms, self.no_speech_ms = silence_ms, max_ms, no_speech_ms
        self.min_speech_ms = min_speech_ms
        self.noise = None
        self.heard_ms = 0.0
        self.quiet_ms = 0.0
        self.loud_ms = 0.0
        self.speech = False

    def feed(self, pcm):
        """Feed one chunk; True once the end of the utterance is detected."""
        ms = len(pcm) / self.bytes_per_ms
        e = rms(pcm)
        self.heard_ms += ms
        if self.noise is None:
            self.noise = min(e, self.floor)
        loud = e > max(self.floor, self.ratio * self.noise)
        if loud:
            self.loud_ms += ms
            if self.loud_ms >= self.min_speech_ms:
                self.speech = True
            self.quiet_ms = 0.0
        else:
            self.loud_ms = 0.0
            self.noise = 0.9 * self.noise + 0.1 * e
            self.quiet_ms += ms
        if self.speech and self.quiet_ms >= self.silence_ms:
            return True
        if not self.speech and self.heard_ms >= self.no_speech_ms:
            return True
        return self.heard_ms >= self.max_ms


# ---------------------------------------------------------------------------------- brains
class EchoBrain:
    """Speaks back what it heard (the default: proves the audio path end to end)."""

    name = "echo"

    async def reply(self, turn):
        if turn.text:
            return Reply(text="you said: " + turn.text)
        return Reply(audio=turn.audio, rate=turn.rate, channels=turn.channels,
                     text="echo of %.2f s" % (len(turn.audio) / (2 * turn.rate * turn.channels)))


class EspeakBrain:
    """Answers with speech from ``espeak-ng`` (installed separately); says how long it listened."""

    name = "espeak"

    def __init__(self, exe=None, voice="en"):
        self.exe = exe or shutil.which("espeak-ng") or shutil.which("espeak")
        if not self.exe:
            raise AlabamaError("espeak-ng is not installed: apt-get install espeak-ng, or use --brain echo")
        self.voice = voice

    async def reply(self, turn):
        text = turn.text or "I heard %.1f seconds of audio." % (len(turn.audio) / (2 * turn.rate * turn.channels))
        proc = await asyncio.create_subprocess_exec(self.exe, "-v", self.voice, "--stdout", text,
                                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        wav, _ = await proc.communicate()
        rate, channels, data = audio.parse(wav)
        return Reply(audio=data, rate=rate, channels=channels, text=text)


def make_brain(name, stt="embedded", tts="embedded"):
    """A brain by name. ``speech`` without pocketsphinx (or espeak-ng for its voice) logs one line saying how
    to install it and answers with the echo brain instead. ``stt``/``tts``: the speech brain's engines."""
    if name in (None, "echo"):
        return EchoBrain()
    if name in ("espeak", "tts"):
        return EspeakBrain()
    if name == "speech":
        from ..speech import SpeechUnavailable
        from .hearing import SpeechBrain
        try:
            return SpeechBrain(stt=stt, tts=tts)
        except SpeechUnavailable as e:
            log.warning("%s", e)
            return EchoBrain()
    raise ValueError("unknown brain %r (%s)" % (name, ", ".join(BRAINS)))


async def call(port, send, timeout):
    """One core request on a Port: ``send(session) -> id``, flush, await its terminal; -> the answer's
    message, RequestFailed(code) on an Error (the server's API and the brains' Invokes)."""
    id_ = send(port.session)
    fut = port.wait_terminal(id_)
    port.flush()
    ev = await asyncio.wait_for(fut, timeout)
    if ev.error is not None:
        raise RequestFailed("the device answered %s with Error %s: %s" % (ev.kind, ops.ErrorCode.Name(ev.error.code),
                                                                       ev.error.message),
                            ops.ErrorCode.Name(ev.error.code), ev.error.message)
    return ev.msg


# ---------------------------------------------------------------------------------- the pipeline
class Port(typing.Protocol):
    """What the pipeline needs of the connection it serves (``connection.Connection`` is one; tests
    bring their own): nothing else of it is touched."""

    #: The CoreSession: the pipeline reaches the wire only through its API.
    session: cs.CoreSession
    #: The device's id (DEFERRED keys, logs).
    device_id: str

    def flush(self) -> None:
        """Frames queued from the pipeline's own tasks may leave now (the driver flushes after events)."""

    def wait_terminal(self, id_: int) -> "asyncio.Future":
        """A Future resolved with the TerminalReceived on ``id_`` (NotConnected when the connection ends)."""

    def spawn(self, coro) -> "asyncio.Task":
        """Run ``coro`` as a task of the connection (cancelled when it ends)."""


class VoicePipeline:
    """One per connection. ``on_event`` takes the session's events; turns run as asyncio tasks.

    Dispatch is one table keyed by event class (``self._handlers``), the pattern of core/state.py and
    the firmware session's _HANDLERS: the handled events are listed in one place, a lookup is one dict
    probe (no name built per event), and a renamed event class fails at import, not silently."""

    def __init__(self, conn, brain, deferred_store, wake=None):
        self.conn = conn                   # the Port
        self.brain = brain
        self.wake = wake                   # hearing.Wake (server-side wake phrase on ambient captures) or None
        self.waking = W.Waking()           # the ambient-wake path's state (core/waking.py)
        self.ambient_activity = 0          # ambient opens + chunks (the R10.4-b resume check reads it)
        # (device_id, correlation_ref) -> {"count", "last_ts", "audio"}; bounded (deferred.py)
        self.deferred = deferred_store if deferred_store is not None else DeferredStore()
        self.captures = {}                 # capture id -> dict(open, audio, endpointer, task)
        self.turn_task = None
        self.turn_id = None
        self.render_id = None
        self.stats = {"elided_pieces": 0}
        self._said_mute = False            # the "replies are not spoken" reason was logged
        self._handlers = {cs.CaptureOpened: self._on_capture_opened, cs.ChunkReceived: self.on_chunk,
                          cs.StreamEnded: self._on_stream_ended, cs.StreamCancelled: self._on_stream_cancelled,
                          cs.StopReceived: self._on_stop, cs.TextInputReceived: self._on_text_input,
                          cs.TerminalReceived: self._on_terminal, cs.CloseConnection: self._on_close}

    @property
    def s(self):
        return self.conn.session

    def on_event(self, ev):
        """One event of the session; the caller flushes afterwards."""
        h = self._handlers.get(type(ev))
        if h is not None:
            h(ev)

    # -- input ---------------------------------------------------------------------------------
    def _on_capture_opened(self, ev):
        co = ev.open
        if co.trigger != ops.TRIGGER_UNSPECIFIED and self.render_id is not None:
            self._barge_in()
        cap = {"open": co, "audio": bytearray(), "ep": None, "deferred": co.mode == ops.DEFERRED, "key": None,
               "held": False, "hear": None, "spot": None, "trim": False,
               "ambient": co.trigger == ops.TRIGGER_UNSPECIFIED}
        fmt = co.format
        rate = fmt.sample_rate or 16000
        if not cap["ambient"] and co.mode == ops.LIVE and co.trigger != ops.BUTTON:
            cap["ep"] = EnergyEndpointer(rate, fmt.channels or 1)
        if cap["ambient"]:
            self.ambient_activity += 1
            if self.wake is not None and co.kind == ops.AUDIO and co.mode == ops.LIVE:
                cap["spot"] = self._spotting(ev.id, cap)
        elif co.kind == ops.AUDIO and not cap["deferred"]:
            self._listen(cap)
        if cap["deferred"] and not co.correlation_ref:
            # R10.4-d: without the handle the upload cannot resume: a drop would lose or duplicate it.
            self.s.report.add("R10.4-d", "deferred_no_correlation_ref", "DEFERRED CaptureOpen id %d carries no "
                              "correlation_ref: it cannot be resumed after a reconnect" % ev.id, id_=ev.id,
                              op="capture_open")
        if cap["deferred"] and co.correlation_ref:
            key = (self.conn.device_id, co.correlation_ref)
            cap["key"] = key
            self.deferred.sweep()
            st = self.deferred.get(key)
            if st is None:
                st = self.deferred.create(key)
            # The high-water mark on the new id, 0 for a recording we hold nothing of: the device sends from
            # there, and knows at once that it may start (R10.4-d: it skips what is stored).
            self.s.capture_ack(ev.id, st["count"])
            cap["replay"] = bool(st.get("done"))   # delivered already: its Response was lost on the way
            self.deferred.hold(key)            # never evicted while this capture is open (or its turn reads it)
            cap["held"] = True
            if self.s.clock_offset_us is None and self.s.phase == cs.PHASE_OPEN:
                self.s.ping()                  # capture_ts maps to wall clock through this connection's round
        self.captures[ev.id] = cap
        if not cap["ambient"]:
            self.s.pipeline_state(PS.LISTENING)
        taken = self.waking.opened(ev.request_id, ev.id) if ev.request_id else None
        if taken is not None:
            self._woken_capture(ev.id, cap, taken)

    def on_chunk(self, ev):
        """A ChunkReceived (what ``on_event`` does with one): the per-frame entry, called directly."""
        cap = self.captures.get(ev.id)
        if cap is None:
            return
        if cap["key"] is not None:
            st = self.deferred[cap["key"]]
            if st["last_ts"] is not None and ev.capture_ts and ev.capture_ts <= st["last_ts"]:
                self.s.report.add("R10.4-d", "deferred_duplicate", "DEFERRED chunk with capture_ts %d at or before the "
                                  "stored %d: a duplicate after resume" % (ev.capture_ts, st["last_ts"]), id_=ev.id,
                                  op="stream_chunk")
                return
            dur = self._chunk_us(cap, len(ev.data))
            if st["last_ts"] is not None and dur and ev.capture_ts - st["last_ts"] > GAP_CHUNKS * dur:
                self.s.report.add("R10.10-c", "deferred_gap", "DEFERRED chunk %d with capture_ts %d, %d us after the "
                                  "stored %d (one chunk is %d us): chunks are missing" % (
                                      st["count"], ev.capture_ts, ev.capture_ts - st["last_ts"], st["last_ts"], dur),
                                  id_=ev.id, op="stream_chunk")
            if st.get("first_ts") is None:
                st["first_ts"] = ev.capture_ts
            # Wall clock of chunk 0, through the Ping round of the connection this chunk came on: a device
            # that rebooted mid-upload sends the rest on another clock (chunks are contiguous, dur apart).
            off = self.s.clock_offset_us
            if st.get("first_wall") is None and off is not None and dur:
                st["first_wall"] = ev.capture_ts - off - st["count"] * dur
            cap["last"] = (st["count"], ev.capture_ts, dur)
            self.deferred.append(cap["key"], st, ev.data, ev.capture_ts)
            if st["count"] % ACK_EVERY == 0:
                self.s.capture_ack(ev.id, st["count"])
            return
        if cap["ambient"]:
            self.ambient_activity += 1
            if self.waking.state is not W.SPOTTING:
                self.waking.ambient_chunk(ev.id, ev.data)   # the start of the utterance, until its capture opens
            elif cap["spot"] is not None:
                cap["spot"].push(ev.data)     # the spotter runs in a worker process, in batches
            return
        data = ev.data
        if cap["trim"]:                       # a wake turn's capture: what is left of the phrase's tail goes
            data = self.waking.trim(data)
            cap["trim"] = self.waking.tail > 0
            if not data:
                return
        cap["audio"] += data
        if cap["hear"] is not None:
            cap["hear"].push(data)
        ep = cap["ep"]
        if ep is not None and ep.feed(data):
            cap["ep"] = None
            self.s.end_capture(ev.id)
            self._start_turn(ev.id)

    # -- hearing: a recogniser fed while the capture streams; the wake phrase on ambient streams -------
    @staticmethod
    def _bytes_per_s(cap):
        fmt = cap["open"].format
        return (fmt.sample_rate or 16000) * (fmt.channels or 1) * 2

    def _tools(self):
        """The device tools offered to the assistant (none for a guest: docs/core.md, the guest surface)."""
        sf = self.s.surface
        if sf is None or sf.guest:
            return (), {}
        return tuple(sf.tools), {n: t.input_schema for n, t in sf.tools.items()}

    def _listen(self, cap):
        """A hearing brain gets the capture's audio as it arrives (16 kHz mono here; other formats are heard
        whole at the end of the turn, resampled)."""
        fmt = cap["open"].format
        if getattr(self.brain, "hearing", None) is None or (fmt.sample_rate or 16000) != 16000 \
                or (fmt.channels or 1) != 1:
            return
        cap["hear"] = self.brain.hearing(self.conn.spawn, self._tools()[0])

    def _drop_hearing(self, cap):
        for k in ("hear", "spot"):
            f = cap.get(k)
            if f is not None:
                cap[k] = None
                f.drop()

    def _spotting(self, cid, cap):
        """A wake-phrase spotter on ambient capture ``cid`` (docs/core.md, "Ambient wake phrase")."""
        fmt = cap["open"].format
        if (fmt.sample_rate or 16000) != 16000 or (fmt.channels or 1) != 1:
            log.warning("%s: ambient capture %d is not 16 kHz mono: no wake phrase on it", self.conn.device_id, cid)
            return None
        cfg = self.wake.for_device(self._device_wake_word(), self.conn.device_id)
        return self.wake.feeder(self.conn.spawn, lambda r: self._on_wake(cid, r[0], r[1]), cfg)

    def _device_wake_word(self):
        """The device's own wake word: the value of its declared setting ``wake_word`` (WAKE_WORD_SETTING) in
        its Hello, "" when it declares none (the core's engine then spots its stream)."""
        sf = self.s.surface
        d = sf.settings.get(WAKE_WORD_SETTING) if sf is not None else None
        return d.value.string_value.strip() if d is not None else ""

    def _on_wake(self, cid, hit, rest):
        """The wake phrase was heard on ambient capture ``cid``: ask for a capture (RequestCapture); the turn
        runs on the capture that answers it, or on ``cid`` itself when the device declines (core/waking.py)."""
        cap = self.captures.get(cid)
        if cap is None or self.waking.state is not W.SPOTTING or self.s.phase != cs.PHASE_OPEN:
            return
        kind = self.wake.kind(self.wake.for_device(self._device_wake_word(), self.conn.device_id))
        if self.turn_id is not None or self.render_id is not None:
            log.info("%s: %s on ambient %d while a turn runs: ignored", self.conn.device_id, kind, cid)
            return
        log.info("%s: %s %r heard on ambient capture %d at %d ms", self.conn.device_id, kind, hit.phrase, cid,
                 hit.end_ms)
        spot = cap["spot"]
        if spot is not None:              # frames that came while the hit's batch was in the spotter follow it
            rest = bytes(rest) + bytes(spot.pending)
            spot.pending.clear()
        self.waking.hit(cid, self._bytes_per_s(cap), rest)
        self.s.pipeline_state(PS.LISTENING)
        try:
            rid = self.s.request_capture("wake-%d-%d" % (cid, hit.end_ms))
        except cs.LocalProtocolError as e:
            log.info("%s: no RequestCapture (%s): the turn runs on ambient capture %d", self.conn.device_id, e, cid)
            self._turn_on_ambient(self.waking.declined(None), cap)
        else:
            self.waking.asked(rid)
        self.conn.flush()

    def _on_terminal(self, ev):
        if ev.error is None or ev.id != self.waking.request_id:
            return                          # accepted: _on_capture_opened saw its request_id
        cid = self.waking.declined(ev.id)
        cap = self.captures.get(cid) if cid is not None else None
        if cap is None or not cap["ambient"]:
            if cid is not None and self.waking.turn_done(cid):
                self._wake_done()
            self.s.pipeline_state(PS.IDLE)
            return
        # Declined (UNAVAILABLE, §10.4): the core's fallback is the ambient stream it already has.
        log.info("%s: RequestCapture %d declined (%s): the turn runs on ambient capture %d", self.conn.device_id,
                 ev.id, ops.ErrorCode.Name(ev.error.code), cid)
        self._turn_on_ambient(cid, cap)

    def _wake_endpointer(self, cap):
        """A wake turn's endpointer: it waits for the command to start (FIRST_SPEECH_MS), then the quiet rule."""
        fmt = cap["open"].format
        return EnergyEndpointer(fmt.sample_rate or 16000, fmt.channels or 1, no_speech_ms=W.FIRST_SPEECH_MS,
                                min_speech_ms=W.MIN_SPEECH_MS)

    def _turn_on_ambient(self, cid, cap):
        """The wake turn on the ambient capture itself: from here it is a WAKEWORD capture (§4.1): endpointed,
        StreamEnd{END_DETECTED}, answered, Response; the device then opens a fresh ambient capture."""
        cap["ambient"] = False
        f, cap["spot"] = cap["spot"], None
        if f is not None:
            f.drop()
        cap["ep"] = self._wake_endpointer(cap)
        cap["trim"] = self.waking.tail > 0
        self._listen(cap)
        self._prime(cid, cap, self.waking.kept())

    def _woken_capture(self, cid, cap, pcm):
        """The capture answering a wake RequestCapture: it starts with the ambient audio after the phrase."""
        if cap["ep"] is not None:
            cap["ep"] = self._wake_endpointer(cap)
        cap["trim"] = self.waking.tail > 0
        self._prime(cid, cap, pcm)

    def _prime(self, cid, cap, pcm):
        """Start capture ``cid`` with the ambient audio heard after the wake phrase (its tail already cut):
        recogniser and endpointer hear it as the utterance's beginning."""
        if not pcm:
            return
        cap["audio"] += pcm
        if cap["hear"] is not None:
            cap["hear"].push(pcm)
        ep = cap["ep"]
        if ep is not None:
            step = int(self._bytes_per_s(cap) * 0.02) & ~1
            for i in range(0, len(pcm), step):
                if ep.feed(pcm[i:i + step]):
                    cap["ep"] = None
                    self.s.end_capture(cid)
                    self._start_turn(cid)
                    return

    def _wake_done(self):
        """A wake turn ended (its terminal is out; a kept ambient capture is spotted again): check that the
        device streams ambient again (R10.4-b: "resumes the ambient capture on the requested capture's close")."""
        if self.s.phase == cs.PHASE_OPEN:
            self.conn.spawn(self._check_resumed(self.ambient_activity))

    async def _check_resumed(self, mark):
        await asyncio.sleep(AMBIENT_RESUME_S)
        if self.s.phase == cs.PHASE_OPEN and self.ambient_activity == mark:
            self.s.report.add("R10.4-b", "ambient_not_resumed", "the wake turn ended %.1f s ago and the device has "
                              "not streamed ambient audio since (no new ambient CaptureOpen, no chunk on a kept "
                              "one)" % AMBIENT_RESUME_S, op="capture_open")

    async def _invoke(self, name, arguments):
        return await call(self.conn, lambda s: s.invoke(name, arguments), INVOKE_TIMEOUT_S)

    def _later(self, delay_s, text):
        self.conn.spawn(self._say_later(delay_s, text))

    async def _say_later(self, delay_s, text):
        """A timer: say ``text`` after ``delay_s`` (a render outside any capture; skipped while a turn runs)."""
        await asyncio.sleep(delay_s)
        if self.s.phase != cs.PHASE_OPEN or self.turn_id is not None or self.render_id is not None:
            log.info("%s: timer due while busy: %r not said", self.conn.device_id, text)
            return
        tts = getattr(self.brain, "tts", None)
        log.info("%s: timer: %s", self.conn.device_id, text)
        if tts is not None:
            pcm = await asyncio.to_thread(tts.synthesize, text)
            await self._speak(Reply(audio=pcm, text=text))
            self.s.pipeline_state(PS.IDLE)
            self.conn.flush()

    @staticmethod
    def _chunk_us(cap, nbytes):
        fmt = cap["open"].format
        per_s = (fmt.sample_rate or 16000) * (fmt.channels or 1) * 2
        return nbytes * 1000000 // per_s

    async def _spoken_at(self, cap):
        """The DEFERRED recording's first capture_ts mapped to the core's wall clock through this connection's
        Ping round (offset = satellite clock - core clock), recorded in the conformance report."""
        st = self.deferred.get(cap["key"])
        if st is None:
            return
        t0 = time.monotonic()
        while self.s.clock_offset_us is None and time.monotonic() - t0 < CLOCK_WAIT_S and self.s.phase == cs.PHASE_OPEN:
            await asyncio.sleep(0.01)
        off = self.s.clock_offset_us
        first = st.get("first_ts")
        spoken = st.get("first_wall")
        if spoken is None and off is not None and cap.get("last"):
            i, ts, dur = cap["last"]
            spoken = ts - off - i * dur          # this connection's chunks, this connection's round
        elif spoken is None and off is not None and first is not None:
            spoken = first - off
        rec = {"correlation_ref": cap["key"][1], "chunks": st["count"], "bytes": len(st["audio"]),
               "first_capture_ts": first, "last_capture_ts": st["last_ts"], "offset_us": off, "rtt_us": self.s.rtt_us,
               "spoken_at_us": spoken,
               "sha256": hashlib.sha256(st["audio"]).hexdigest()}
        if rec["spoken_at_us"] is not None:
            log.info("%s: DEFERRED %r: %d chunks spoken at %s (offset %d us, rtt %s us)", self.conn.device_id,
                     rec["correlation_ref"], rec["chunks"],
                     time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(rec["spoken_at_us"] / 1e6)) +
                     ".%03d UTC" % (rec["spoken_at_us"] // 1000 % 1000), off, self.s.rtt_us)
        return rec

    def _on_stream_ended(self, ev):
        cap = self.captures.get(ev.id)
        if cap is None or ev.kind != S.CAPTURE:
            return
        if cap["key"] is not None:
            self.s.capture_ack(ev.id, self.deferred[cap["key"]]["count"])
            if cap.get("replay"):
                # Exactly once: the recording was answered before; answer again, process nothing twice.
                log.info("%s: DEFERRED %r delivered before: Response again, no second turn", self.conn.device_id,
                         cap["key"][1])
                self.s.respond(ev.id)
                self.captures.pop(ev.id, None)
                self._release(cap)
                self.s.pipeline_state(PS.IDLE)
                return
        if cap["ambient"]:
            # The device ended its ambient stream (e.g. superseded by a requested capture, §10.4): the id's
            # terminal is an empty Response; the device opens a fresh ambient capture when it resumes. Audio
            # kept after a wake on it stays with the wake (core/waking.py) for the requested capture.
            self.waking.ambient_gone(ev.id)
            self._drop_hearing(cap)
            self.captures.pop(ev.id, None)
            if self.s.pending_terminal(ev.id):
                self.s.respond(ev.id)
            self._release(cap)
        elif self.turn_id != ev.id:
            self._start_turn(ev.id)       # the turn releases the DEFERRED entry once it is done with it
        else:
            self._release(cap)

    def _on_stream_cancelled(self, ev):
        if ev.id in self.captures:
            cap = self.captures.pop(ev.id)
            self._drop_hearing(cap)
            self._release(cap)
            if cap["ambient"] and self.waking.ambient_gone(ev.id):
                return                     # superseded by the wake turn's requested capture (§10.4): it goes on
            if self.turn_id == ev.id and self.turn_task is not None:
                self.turn_task.cancel()
            if self.waking.turn_done(ev.id):
                self._wake_done()
            self.s.pipeline_state(PS.IDLE)

    def _on_stop(self, ev):
        self.stop_turn(ops.STOPPED)

    def _on_text_input(self, ev):
        if ev.id:
            self.conn.spawn(self._text_turn(ev.id, ev.msg.text))

    def _on_close(self, ev):
        for t in (self.turn_task,):
            if t is not None:
                t.cancel()
        for cap in self.captures.values():
            self._drop_hearing(cap)
        self.release_all()

    def _release(self, cap):
        """The capture no longer needs its DEFERRED entry: it may be evicted once idle (once only)."""
        if cap.get("held"):
            cap["held"] = False
            self.deferred.release(cap["key"])

    def release_all(self):
        """The connection is gone: every DEFERRED entry its captures held may now age out."""
        for cap in self.captures.values():
            self._release(cap)

    # -- turn control ----------------------------------------------------------------------------
    def _barge_in(self):
        rid, self.render_id = self.render_id, None
        if rid in self.s.slots:
            self.s.cancel_stream(rid, ops.BARGE_IN)
        old = self.turn_id
        if self.turn_task is not None:
            self.turn_task.cancel()
        if old is not None and self.s.pending_terminal(old):
            self.s.respond(old)    # the interrupted exchange is over: exactly one terminal (R10.8-a)
        self.turn_id = None

    def stop_turn(self, reason=ops.STOPPED):
        """Stop (§4.4): cancel the in-flight activation; StreamCancel every open stream of the turn.
        The caller flushes (the driver after a StopReceived, ``CoreServer.stop_turn`` otherwise)."""
        if self.turn_task is not None:
            self.turn_task.cancel()
        if self.render_id is not None and self.render_id in self.s.slots:
            self.s.cancel_stream(self.render_id, reason)
        self.render_id = None
        for cid, cap in list(self.captures.items()):
            if cap["ambient"]:
                continue
            slot = self.s.slots.get(cid)
            if slot is None:
                continue
            if slot.state == S.OPEN:
                self.s.cancel_stream(cid, reason)   # the cancel is the id's terminal
            elif self.s.pending_terminal(cid):
                self.s.respond(cid)                 # mic already closed: the turn ends here
            self._release(self.captures.pop(cid))
            if self.waking.turn_done(cid):
                self._wake_done()
        self.turn_id = None
        self.s.pipeline_state(PS.IDLE)

    def _start_turn(self, cid):
        self.turn_id = cid
        self.s.pipeline_state(PS.PROCESSING)
        self.turn_task = self.conn.spawn(self._voice_turn(cid))

    async def _voice_turn(self, cid):
        cap = self.captures.get(cid)
        try:
            co = cap["open"]
            spoken = None
            if cap["key"]:
                spoken = await self._spoken_at(cap)      # the whole recording is in: when was it spoken?
            audio = bytes(self.deferred[cap["key"]]["audio"]) if cap["key"] else bytes(cap["audio"])
            heard = None
            if cap.get("hear") is not None:
                heard = await cap["hear"].finish()       # the recogniser was fed as the audio arrived
                cap["hear"] = None
            tools, schemas = self._tools()
            turn = Turn(cid, audio, co.format.sample_rate or 16000, co.format.channels or 1,
                        device_id=self.conn.device_id, trigger=co.trigger, heard=heard, tools=tools,
                        tool_schemas=schemas, invoke=self._invoke, later=self._later)
            reply = await self.brain.reply(turn)
            self._heard(reply)
            await self._speak(reply)
            if self.s.pending_terminal(cid):
                content = [content_pb2.ContentBlock(text=reply.text)] if reply.text and not self._can_speak() else []
                self.s.respond(cid, self._understood(reply) + content)
                if spoken is not None:
                    self.s.report.deferred.append(spoken)     # answered: delivered once
            if cap["key"]:
                self.deferred.complete(cap["key"])
            self.s.pipeline_state(PS.IDLE)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 — a failing brain ends the exchange with an Error, loudly
            if isinstance(e, AlabamaError):      # a speech server down, espeak-ng missing: its one line says it all
                log.warning("turn %d failed: %s", cid, e)
            else:                                # a bug: its traceback
                log.exception("turn %d failed", cid)
            if self.s.phase == cs.PHASE_OPEN and self.s.pending_terminal(cid):
                self.s.fail(cid, ops.INTERNAL_ERROR, "the core failed: %s" % e)
                self.s.pipeline_state(PS.ERROR, ops.INTERNAL_ERROR)
                self.s.pipeline_state(PS.IDLE)
        finally:
            if cap is not None:
                self._drop_hearing(cap)
                self._release(cap)
                if self.waking.turn_done(cid):
                    self._wake_done()
            self.captures.pop(cid, None)
            if self.turn_id == cid:
                self.turn_id = None
            self.conn.flush()

    async def _text_turn(self, tid, text):
        tools, schemas = self._tools()
        reply = await self.brain.reply(Turn(tid, text=text or " ", device_id=self.conn.device_id, tools=tools,
                                            tool_schemas=schemas, invoke=self._invoke, later=self._later))
        self._heard(reply)
        if self.s.phase == cs.PHASE_OPEN and self.s.pending_terminal(tid):
            self.s.respond(tid, self._understood(reply)[1:] + [content_pb2.ContentBlock(text=reply.text)])
            self.conn.flush()

    def _heard(self, reply):
        if reply.transcript is None:
            return
        intent = reply.intent
        log.info('%s: heard: "%s" intent %s %s (confidence %.2f)', self.conn.device_id, reply.transcript,
                 intent.name if intent else "none", json.dumps(intent.slots if intent else {}, sort_keys=True),
                 reply.confidence or 0.0)

    @staticmethod
    def _understood(reply):
        """What a hearing brain understood, as the Response's content (spec §10.8: Response.content is
        ContentBlocks; text may be JSON for structured content): the transcript as plain text, then
        {"transcript", "intent", "slots", "confidence", "reply"} as JSON. Empty for other brains."""
        if reply.transcript is None:
            return []
        text = reply.transcript[:MAX_TRANSCRIPT_CHARS]
        intent = reply.intent
        meta = {"transcript": text, "intent": intent.name if intent else None,
                "slots": intent.slots if intent else {}, "confidence": round(reply.confidence or 0.0, 3),
                "reply": reply.text}
        return [content_pb2.ContentBlock(text=text), content_pb2.ContentBlock(text=json.dumps(meta, sort_keys=True))]

    def _can_speak(self):
        why = self.s.surface.speaker_problem()
        if why and not self._said_mute:
            self._said_mute = True          # once per session: the reason does not change until a new Hello
            log.warning("%s: replies are not spoken: %s", self.conn.device_id, why)
        return why is None

    async def _speak(self, reply):
        """Stream the reply over MediaRenderOpen, paced within buffer_ms, and await PlaybackDone."""
        if not reply.audio or not self._can_speak():
            return
        sp = self.s.surface.speaker_params()
        fmt = sp.format
        pcm = resample(reply.audio, reply.rate, reply.channels, fmt.sample_rate, fmt.channels)
        rid = self.s.open_media_render(fmt)
        self.render_id = rid
        self.s.pipeline_state(PS.SPEAKING)
        self.conn.flush()
        done = self.conn.wait_terminal(rid)
        bytes_per_ms = fmt.sample_rate * fmt.channels * 2 / 1000.0
        piece = max(2 * fmt.channels, int(RENDER_PIECE_MS * bytes_per_ms) // (2 * fmt.channels) * (2 * fmt.channels))
        ahead_ms = max(40.0, (sp.buffer_ms or 200) * PACE_FRACTION)
        t0 = time.monotonic()
        sent_ms = 0.0
        try:
            for pos in range(0, len(pcm), piece):
                if self.render_id != rid:
                    break
                while sent_ms - (time.monotonic() - t0) * 1000.0 > ahead_ms:
                    await asyncio.sleep((sent_ms - ahead_ms) / 1000.0 - (time.monotonic() - t0) + 0.001)
                    if self.render_id != rid:
                        break
                if self.render_id != rid:
                    break
                data = pcm[pos:pos + piece]
                if self.s.bulk_pending() > MAX_BULK_QUEUED:
                    self.stats["elided_pieces"] += 1          # LOSSY_OK: elide under backpressure (R10.1-c)
                else:
                    self.s.send_stream_data(rid, data)
                    self.conn.flush()
                sent_ms += len(data) / bytes_per_ms
            if self.render_id == rid:
                self.s.end_stream(rid)
                self.conn.flush()
            await asyncio.wait_for(asyncio.shield(done), len(pcm) / bytes_per_ms / 1000.0 + PLAYBACK_GRACE_S)
        except asyncio.TimeoutError:
            log.warning("%s: no PlaybackDone for render %d", self.conn.device_id, rid)
        finally:
            if self.render_id == rid:
                self.render_id = None
