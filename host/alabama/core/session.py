"""One core-side connection, sans-IO: plaintext bytes (or decoded frames) in, frames and events out.

Responsible for every per-connection rule of spec §6, §7.3 (the Hello answer), §8.2, §10.2–§10.10:
id minting (even, from 2, by 2, wrapping, never 0), one terminal per request, stream state and
counting per direction, frame sizing under the satellite's max_frame_bytes, capability gating, Ping
timestamps, and the conformance checks on every satellite frame (into ``self.report``).
It never touches a socket, a clock or a database: time comes from the ``clock``/``wall_us``
callables, admission from the ``admit`` callable, and the driver moves the bytes
(``receive_data`` in, ``next_frame`` out) and reacts to the events ``receive_*`` return.

This module holds ``CoreSession``'s state, the cutting of incoming bytes into frames (the fast path and the
``FrameDecoder``), the dispatch of each Envelope (``_OPS``), the terminal timer, id retirement and the report
entries; not the rules of each op, which live in its parts: ``inbound.Inbound`` (what a satellite frame does),
``outbound.Outbound`` (what the core sends), ``outqueue.OutQueue`` (the frames waiting for the writer); the
names they share are in ``sessiondefs``.
"""
import collections
import logging
import time

from google.protobuf.message import DecodeError

from alabama.v1 import envelope_pb2
from alabama.wire import frame as wire

from . import state as S
from .conformance import Report
from .errors import LocalProtocolError
from .events import (  # noqa: F401 (re-exported: drivers read them as session.X)
    HelloAccepted, HelloRefused, CaptureOpened, ChunkReceived, StreamEnded, StreamCancelled,
    UploadCompleted, TerminalReceived, PlaybackDone, TextInputReceived, EventReceived, SettingReported,
    StopReceived, PresenceReceived, PingRound, CloseConnection)
from .inbound import Inbound
from .outbound import Outbound
from .outqueue import OutQueue
from .sessiondefs import (
    PHASE_HELLO, PHASE_OPEN, PHASE_CLOSED, LATE_GRACE_S, TERMINAL_TIMEOUT_S, RETIRED_MEMORY, CORE_ONLY_OPS, E, log,
    flog)
from .sessiondefs import (  # noqa: F401 (re-exported: drivers, admission and tests read them as session.X)
    SERVER_WIRE_VERSION, UINT32_MAX, MAX_ERRORS_PER_ID, MAX_STRAY_FRAMES, MAX_UPLOAD_BYTES, Admission)


def _wall_us():
    return time.time_ns() // 1000


class CoreSession(Inbound, Outbound, OutQueue):
    """The core's side of one connection (see the module docstring). Its parts: ``Inbound`` (the handlers of
    satellite frames), ``Outbound`` (the core's sends), ``OutQueue`` (the frames waiting for the writer)."""

    def __init__(self, admit, *, session_id="", peer="", device_id=None, clock=time.monotonic, wall_us=_wall_us,
                 min_wire_version=1, max_frame_bytes=wire.DEFAULT_MAX_FRAME_BYTES, max_concurrent_streams=8,
                 late_grace=LATE_GRACE_S, terminal_timeout=TERMINAL_TIMEOUT_S):
        self.admit = admit
        self.clock = clock
        self.wall_us = wall_us
        self.min_wire_version = min_wire_version
        self.max_frame_bytes = max_frame_bytes           # what we advertise in Accepted
        self.max_concurrent_streams = max_concurrent_streams
        self.late_grace = late_grace
        self.terminal_timeout = terminal_timeout
        self.report = Report(session_id, peer)
        self.report.device_id = device_id
        self.device_id = device_id
        self.decoder = wire.FrameDecoder(max(max_frame_bytes, wire.DEFAULT_MAX_FRAME_BYTES))
        self.surface = None
        self.admission = None
        self.phase = PHASE_HELLO         # PHASE_HELLO -> PHASE_OPEN -> PHASE_CLOSED
        self.close_reason = None
        self.slots = {}                 # id -> state.Slot (live ids)
        self.retired = collections.OrderedDict()  # id -> why ("done", "cancelled:sat", "refused", ...)
        self._retired_at = {}
        self._next_id = 2
        self._last_sat_id = None
        self._control = collections.deque()
        self._bulk = collections.deque()
        self._events = []
        self._stray = 0
        self._err_count = collections.Counter()
        self._uploads = {}              # id -> (mime, bytes) completed, unconsumed
        self._pipeline_phase = None
        self._frame_index = 0
        self._slow_framing = False      # True once the decoder saw an oversize frame (fast path off)
        self.clock_offset_us = None     # satellite clock - core clock, from the last Ping round
        self.rtt_us = None
        # Hooks for test benches (docs/core.md): callables taking bytes, called in order.
        self.on_frame_in = []           # fn(plaintext): every chunk given to receive_data, before it is processed
        self.on_frame_out = []          # fn(frame): every queue entry as next_frame hands it to the writer

    # ================================================================ input
    def receive_data(self, data):
        """Plaintext bytes of the Noise stream (any split). Returns the events they caused."""
        if self.on_frame_in:
            for fn in self.on_frame_in:
                fn(data)
        if self.phase == PHASE_CLOSED:
            return self.take_events()
        if self.phase == PHASE_OPEN and not self._slow_framing and not self.decoder.buffered() \
                and not flog.isEnabledFor(logging.DEBUG):
            data = self._fast_frames(data if type(data) is bytes else bytes(data))
            if data is None or self.phase == PHASE_CLOSED:
                return self.take_events()
        try:
            self.decoder.feed(data)
            for ev in self.decoder:
                if isinstance(ev, wire.Oversize):
                    self._slow_framing = True     # the decoder may now be discarding a remainder
                    self._oversize(ev)
                else:
                    self._frame(ev.header, ev.tail)
                if self.phase == PHASE_CLOSED:
                    break
        except wire.FrameError as e:
            if e.code == wire.FRAME_TOO_LARGE:
                self._violate("R6.1-a", "handshake_ceiling", "a frame before the Hello answer exceeds the %d-byte "
                              "handshake ceiling: %s" % (wire.HANDSHAKE_CEILING, e.message))
            elif e.code == wire.HEADER_TOO_LARGE:
                self._violate("R6.1-b", "frame_too_large", e.message)
            else:
                self._violate("R6-a", "framing", "%s: %s" % (e.code, e.message))
            self.close("framing error %s" % e.code)
        return self.take_events()

    def _fast_frames(self, data):
        """The per-frame fast path (performance only; behaviour identical to the decoder + pb2 path).

        Consumes the complete, well-formed frames within the limit at the front of ``data``
        (``wire.split_frame``); a canonical StreamChunk Envelope (``id``, ``stream_chunk{seq,
        capture_ts}``, nothing else: ``wire.parse_chunk_header``) is read without pb2, any other
        Envelope goes through ``_frame``. Returns the unconsumed rest (a memoryview) for the frame
        decoder, which handles partial frames, bad varints, oversize frames and errors exactly as
        before; None when everything was consumed."""
        n = len(data)
        pos = 0
        limit = self.decoder.limit
        report = self.report
        slots = self.slots
        split, parse = wire.split_frame, wire.parse_chunk_header
        while pos < n:
            f = split(data, pos, n, limit)
            if f is None:
                break
            hstart, hend, pos = f
            header = data[hstart:hend]
            tail = data[hend:pos]
            c = parse(header)
            if c is None:
                self._frame(header, tail)
            else:
                report.frames_in += 1
                report.bytes_in += hend - hstart + len(tail)
                self._frame_index += 1
                id_, seq, ts = c
                slot = slots.get(id_)
                # The steady state of a capture (open, the next seq): what _chunk does for it, inline.
                if slot is not None and slot.next_seq == seq and slot.state == _OPEN and slot.kind == _CAPTURE:
                    slot.next_seq = seq + 1
                    self._events.append(ChunkReceived(id_, seq, tail, ts, _CAPTURE))
                    continue
                self._chunk(id_, seq, ts, tail)
            if self.phase == PHASE_CLOSED:
                return None
        if pos >= n:
            return None
        return memoryview(data)[pos:] if pos else data

    def receive_frame(self, header, tail=b""):
        """One decoded frame (Envelope bytes + raw tail). Returns the events it caused."""
        self._frame(header, tail)
        return self.take_events()

    def _frame(self, header, tail):
        self.report.frames_in += 1
        self.report.bytes_in += len(header) + len(tail)
        self._frame_index += 1
        env = envelope_pb2.Envelope()
        try:
            env.ParseFromString(header)
        except DecodeError as e:
            self._violate("R6-a", "envelope_decode", "the Envelope header does not decode: %s" % e)
            self.close("undecodable Envelope")
            return
        self._envelope(env, tail)

    def receive_envelope(self, env, tail=b""):
        """One decoded Envelope (+ tail). Returns the events it caused."""
        self._envelope(env, tail)
        return self.take_events()

    def _envelope(self, env, tail):
        if self.phase == PHASE_CLOSED:
            return
        op = env.WhichOneof("op")
        if flog.isEnabledFor(logging.DEBUG):
            flog.debug("%s IN  %-16s id=%d header=%d tail=%d", self.device_id or self.report.peer, op,
                       env.id, env.ByteSize(), len(tail), extra={"envelope": env})
        if op is None:
            # An arm this version does not know (or none): ignored, never a reason to drop (R2.2-b).
            return
        if tail and op != "stream_chunk":
            self._violate("R6-a", "tail_on_non_chunk", "a %s frame carries a %d-byte raw tail; only StreamChunk "
                          "frames do" % (op, len(tail)), env.id, op)
        if self.phase == PHASE_HELLO and op != "hello":
            self._violate("R6.1-a", "hello_first", "%s before the Hello; the Hello is the first frame" % op, env.id, op)
            return
        try:
            if op in CORE_ONLY_OPS:
                self._violate("R10.10-e", "wrong_direction", "%s is sent by the core, never by a satellite" % op,
                              env.id, op)
                self._error(env.id, E.INVALID_REQUEST, "%s is a core-to-satellite operation" % op)
            else:
                handler = _OPS.get(op)
                if handler is None:
                    # an arm of this schema with no handler here (tests/host/core/test_session.py checks there is
                    # none): tolerated like an unknown arm (R2.2-b), said in the log, never a KeyError
                    log.warning("no handler for %s (id %d): ignored", op, env.id)
                    return
                handler(self, env, getattr(env, op), tail)
        except LocalProtocolError as e:
            if e.code != "FRAME_TOO_LARGE":
                raise
            # The answer this frame needs does not fit the max_frame_bytes the satellite advertised:
            # the core may not send it (R6.1-b) and cannot leave the request unanswered, so it closes.
            self._violate("R6.1-b", "max_frame_bytes_too_small", "the answer to %s on id %d does not fit the "
                          "satellite's max_frame_bytes %d" % (op, env.id, self.surface.max_frame_bytes), env.id, op)
            self.close("the satellite's max_frame_bytes %d is too small for the core's answers"
                       % self.surface.max_frame_bytes)

    def close(self, reason):
        if self.phase == PHASE_CLOSED:
            return
        self.phase = PHASE_CLOSED
        self.close_reason = reason
        self.report.close_reason = reason
        self._emit(CloseConnection(reason=reason))

    # ---------------------------------------------------------------------------- timers
    def tick(self):
        """Report core requests left without a terminal past terminal_timeout (R10.8-a)."""
        now = self.clock()
        for slot in list(self.slots.values()):
            if slot.meta.get("overdue"):
                continue
            awaiting = (slot.kind in (S.INVOKE, S.SETTINGS_WRITE, S.REQUEST_CAPTURE, S.PING)
                        or (slot.kind == S.MEDIA_RENDER and slot.state in (S.ENDED, S.CANCELLED)))
            since = slot.ended_at or slot.cancelled_at or slot.opened_at
            if awaiting and now - since > self.terminal_timeout:
                slot.meta["overdue"] = True
                self._violate("R10.8-a", "no_terminal", "%s id %d has had no terminal for %.1fs"
                              % (slot.kind, slot.id, now - since), slot.id, slot.kind)
        return self.take_events()

    def held(self):
        """What the session holds right now, by kind (counts): live ids, unconsumed uploads, queued frames."""
        return {"streams": len(self.slots), "uploads": len(self._uploads),
                "queued_frames": len(self._control) + len(self._bulk)}

    def release(self):
        """The connection is gone: drop everything the session holds (streams, unconsumed uploads, queued
        frames; an upload never outlives its connection, §10.4). Events still pending stay readable."""
        self.slots.clear()
        self._uploads.clear()
        self._control.clear()
        self._bulk.clear()

    def _retire(self, slot, why):
        self.slots.pop(slot.id, None)
        self._remember(slot.id, why)

    def _remember(self, id_, why):
        self.retired[id_] = why
        self._retired_at[id_] = self.clock()
        self.retired.move_to_end(id_)
        while len(self.retired) > RETIRED_MEMORY:
            old, _ = self.retired.popitem(last=False)
            self._retired_at.pop(old, None)

    def _violate(self, rule, check, detail, id_=None, op=None):
        self.report.add(rule, check, detail, self._frame_index, id_, op)

    def _emit(self, ev):
        self._events.append(ev)

    def take_events(self):
        """The events caused since the last call (``receive_*`` and ``tick`` return them already; a driver
        that acts on the session otherwise, e.g. ``close``, collects them here)."""
        out, self._events = self._events, []
        return out


#: CoreSession._envelope: the handler of each op a satellite may send, by Envelope oneof name (every other arm
#: is in CORE_ONLY_OPS). One table, like state.py's and the firmware session's _HANDLERS.
_OPS = {op: getattr(CoreSession, "_on_" + op) for op in (
    "hello", "error", "ping", "ping_response", "stream_chunk", "stream_end", "stream_cancel", "capture_open",
    "upload_open", "text_input", "event", "stop", "presence", "playback_done", "tool_result", "response",
    "setting_state")}

#: The steady state of a capture, as _fast_frames tests it inline.
_OPEN, _CAPTURE = S.OPEN, S.CAPTURE

