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
import logging
import math
import shutil
import subprocess
import time
import typing

import numpy as np

from alabama.v1 import operations_pb2 as ops, surface_pb2, content_pb2

from ..errors import AlabamaError
from . import session as cs
from . import state as S
from .deferred import DeferredStore

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


# ---------------------------------------------------------------------------------- audio helpers
def resample(pcm, src_rate, src_channels, dst_rate, dst_channels):
    """s16le PCM converted exactly to (dst_rate, dst_channels): linear interpolation, channel mix/dup."""
    x = np.frombuffer(pcm, dtype="<i2")
    if src_channels > 1:
        x = x[: len(x) - len(x) % src_channels].reshape(-1, src_channels).astype(np.float64).mean(axis=1)
    else:
        x = x.astype(np.float64)
    n_in = len(x)
    if n_in and src_rate != dst_rate:
        n_out = int(round(n_in * dst_rate / src_rate))
        pos = np.arange(n_out) * (src_rate / dst_rate)
        x = np.interp(pos, np.arange(n_in), x)
    y = np.clip(np.round(x), -32768, 32767).astype("<i2")
    if dst_channels > 1:
        y = np.repeat(y, dst_channels)
    return y.tobytes()


def rms(pcm):
    """RMS of s16le samples: one exact float64 dot product (runs per chunk: no temporaries beyond one)."""
    n = len(pcm) // 2
    if not n:
        return 0.0
    x = np.frombuffer(pcm, dtype="<i2", count=n).astype(np.float64)
    return math.sqrt(x.dot(x) / n)


class EnergyEndpointer:
    """Ends an utterance after ``silence_ms`` of quiet following speech, or at ``max_ms``, or after
    ``no_speech_ms`` without any speech. Speech = frame RMS above max(floor, ratio x noise estimate)."""

    def __init__(self, rate, channels=1, floor=400.0, ratio=3.0, silence_ms=600, max_ms=12000, no_speech_ms=5000):
        self.bytes_per_ms = rate * channels * 2 / 1000.0
        self.floor, self.ratio = floor, ratio
        self.silence_ms, self.max_ms, self.no_speech_ms = silence_ms, max_ms, no_speech_ms
        self.noise = None
        self.heard_ms = 0.0
        self.quiet_ms = 0.0
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
            self.speech = True
            self.quiet_ms = 0.0
        else:
            self.noise = 0.9 * self.noise + 0.1 * e
            self.quiet_ms += ms
        if self.speech and self.quiet_ms >= self.silence_ms:
            return True
        if not self.speech and self.heard_ms >= self.no_speech_ms:
            return True
        return self.heard_ms >= self.max_ms


# ---------------------------------------------------------------------------------- brains
class Turn:
    """What the brain gets: the captured audio (s16le) with its format, or a text input."""

    def __init__(self, id_, audio=b"", rate=16000, channels=1, text="", device_id=None, trigger=0):
        self.id, self.audio, self.rate, self.channels = id_, audio, rate, channels
        self.text, self.device_id, self.trigger = text, device_id, trigger


class Reply:
    """The brain's answer: audio (s16le at rate/channels) and/or text."""

    def __init__(self, audio=b"", rate=16000, channels=1, text=""):
        self.audio, self.rate, self.channels, self.text = audio, rate, channels, text


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
        rate, channels, data = _parse_wav(wav)
        return Reply(audio=data, rate=rate, channels=channels, text=text)


def _parse_wav(wav):
    """(rate, channels, s16le data) of a PCM WAV (espeak writes a streaming header: sizes may be 0)."""
    if wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
        raise ValueError("not a WAV")
    pos, rate, channels = 12, 22050, 1
    while pos + 8 <= len(wav):
        cid, size = wav[pos:pos + 4], int.from_bytes(wav[pos + 4:pos + 8], "little")
        if cid == b"fmt ":
            channels = int.from_bytes(wav[pos + 10:pos + 12], "little")
            rate = int.from_bytes(wav[pos + 12:pos + 16], "little")
        if cid == b"data":
            end = len(wav) if size in (0, 0xFFFFFFFF) else pos + 8 + size
            return rate, channels, wav[pos + 8:end]
        pos += 8 + size
    raise ValueError("WAV without data")


def make_brain(name):
    if name in (None, "echo"):
        return EchoBrain()
    if name in ("espeak", "tts"):
        return EspeakBrain()
    raise ValueError("unknown brain %r (echo, espeak)" % name)


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

    def __init__(self, conn, brain, deferred_store):
        self.conn = conn                   # the Port
        self.brain = brain
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
                          cs.CloseConnection: self._on_close}

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
               "held": False,
               "ambient": co.trigger == ops.TRIGGER_UNSPECIFIED}
        fmt = co.format
        rate = fmt.sample_rate or 16000
        if not cap["ambient"] and co.mode == ops.LIVE and co.trigger != ops.BUTTON:
            cap["ep"] = EnergyEndpointer(rate, fmt.channels or 1)
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
            return        # ambient audio: no server-side wakeword in the reference core
        cap["audio"] += ev.data
        ep = cap["ep"]
        if ep is not None and ep.feed(ev.data):
            cap["ep"] = None
            self.s.end_capture(ev.id)
            self._start_turn(ev.id)

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
        if self.turn_id != ev.id and not cap["ambient"]:
            self._start_turn(ev.id)       # the turn releases the DEFERRED entry once it is done with it
        else:
            self._release(cap)

    def _on_stream_cancelled(self, ev):
        if ev.id in self.captures:
            self._release(self.captures.pop(ev.id))
            if self.turn_id == ev.id and self.turn_task is not None:
                self.turn_task.cancel()
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
            turn = Turn(cid, audio, co.format.sample_rate or 16000, co.format.channels or 1,
                        device_id=self.conn.device_id, trigger=co.trigger)
            reply = await self.brain.reply(turn)
            await self._speak(reply)
            if self.s.pending_terminal(cid):
                content = [content_pb2.ContentBlock(text=reply.text)] if reply.text and not self._can_speak() else []
                self.s.respond(cid, content)
                if spoken is not None:
                    self.s.report.deferred.append(spoken)     # answered: delivered once
            if cap["key"]:
                self.deferred.complete(cap["key"])
            self.s.pipeline_state(PS.IDLE)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 — a failing brain ends the exchange with an Error, loudly
            log.exception("turn %d failed", cid)
            if self.s.phase == cs.PHASE_OPEN and self.s.pending_terminal(cid):
                self.s.fail(cid, ops.INTERNAL_ERROR, "the core failed: %s" % e)
                self.s.pipeline_state(PS.ERROR, ops.INTERNAL_ERROR)
                self.s.pipeline_state(PS.IDLE)
        finally:
            if cap is not None:
                self._release(cap)
            self.captures.pop(cid, None)
            if self.turn_id == cid:
                self.turn_id = None
            self.conn.flush()

    async def _text_turn(self, tid, text):
        reply = await self.brain.reply(Turn(tid, text=text or " ", device_id=self.conn.device_id))
        if self.s.phase == cs.PHASE_OPEN and self.s.pending_terminal(tid):
            self.s.respond(tid, [content_pb2.ContentBlock(text=reply.text)])
            self.conn.flush()

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
