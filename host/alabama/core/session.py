"""One core-side connection, sans-IO: plaintext bytes (or decoded frames) in, frames and events out.

Responsible for every per-connection rule of spec §6, §7.3 (the Hello answer), §8.2, §10.2–§10.10:
id minting (even, from 2, by 2, wrapping, never 0), one terminal per request, stream state and
counting per direction, frame sizing under the satellite's max_frame_bytes, capability gating, Ping
timestamps, and the conformance checks on every satellite frame (into ``self.report``).
It never touches a socket, a clock or a database: time comes from the ``clock``/``wall_us``
callables, admission from the ``admit`` callable, and the driver moves the bytes
(``receive_data`` in, ``next_frame`` out) and reacts to the events ``receive_*`` return.
"""
import collections
import logging
import time

from google.protobuf.message import DecodeError

from alabama.v1 import envelope_pb2, operations_pb2 as ops, surface_pb2
from alabama.wire import frame as wire

from . import state as S
from .conformance import Report
from .errors import LocalProtocolError
from .events import (  # noqa: F401 (re-exported: drivers read them as session.X)
    HelloAccepted, HelloRefused, CaptureOpened, ChunkReceived, StreamEnded, StreamCancelled,
    UploadCompleted, TerminalReceived, PlaybackDone, TextInputReceived, EventReceived, SettingReported,
    StopReceived, PresenceReceived, PingRound, CloseConnection)
from .surface import Surface, cap_name

log = logging.getLogger("alabama.core.session")
flog = logging.getLogger("alabama.core.frames")

#: The session's phases (``CoreSession.phase``): HELLO until the Hello is answered, OPEN once accepted,
#: CLOSED for good (refused, failed or ended). Drivers and the pipeline compare against these names.
PHASE_HELLO = "HELLO"
PHASE_OPEN = "OPEN"
PHASE_CLOSED = "CLOSED"

#: The core's own wire version (Accepted.wire_version, VersionMismatch.server_version).
SERVER_WIRE_VERSION = 1
UINT32_MAX = wire.UINT32_MAX
#: Satellite chunks that arrive within this many seconds after the core's StreamEnd/StreamCancel
#: were in flight when it was sent: discarded silently, not reported (spec §10.3 race).
LATE_GRACE_S = 1.0
#: A core request unanswered this long is reported as a missing terminal (R10.8-a).
TERMINAL_TIMEOUT_S = 15.0
#: Retired ids remembered, so a late frame on one draws STREAM_CLOSED / a silent discard rather
#: than UNKNOWN_STREAM. Bounded: a flood of opens cannot grow it.
RETIRED_MEMORY = 512
#: Error frames sent for stray frames on one id before the core stops answering them (it still counts).
MAX_ERRORS_PER_ID = 1
#: Stray frames (on unknown/closed/cancelled ids) tolerated before the connection is closed (§10.3 MAY).
MAX_STRAY_FRAMES = 256
#: Largest UploadOpen the core will buffer (RESOURCE_EXHAUSTED above it).
MAX_UPLOAD_BYTES = 8 * 1024 * 1024

_E = ops.ErrorCode
#: Ops only the core sends; received from a satellite they are in the wrong direction.
CORE_ONLY_OPS = frozenset({"hello_response", "paired", "media_render_open", "pipeline_state", "capture_ack",
                           "request_capture", "text_render_open", "image_render_open", "render",
                           "media_control", "invoke", "settings_write"})


class Admission:
    """The answer of the admission callable for one Hello (spec §7.3)."""

    ACCEPT = "accept"
    REJECT_CLOSED = "reject_closed"

    def __init__(self, outcome, trust="guest", send_paired=False, path=None):
        self.outcome = outcome
        self.trust = trust
        self.send_paired = send_paired
        self.path = path or outcome


def _wall_us():
    return time.time_ns() // 1000


class CoreSession:
    """The core's side of one connection (see the module docstring)."""

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
                self._error(env.id, _E.INVALID_REQUEST, "%s is a core-to-satellite operation" % op)
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

    # ---------------------------------------------------------------------------- Tier 0
    def _on_hello(self, env, hello, tail):
        if self.phase != PHASE_HELLO:
            self._violate("R6.1-a", "hello_twice", "a second Hello on the session", env.id, "hello")
            self._error(env.id, _E.INVALID_REQUEST, "the session already has a Hello")
            return
        if env.id == 0 or env.id % 2 == 0:
            self._violate("R6.3-a", "id_parity", "the Hello's id %d is not an odd satellite id" % env.id,
                          env.id, "hello")
        else:
            self._last_sat_id = env.id
        surface = Surface(hello)
        self.surface = surface
        self.report.display_name = hello.display_name
        for p in surface.problems:
            self._violate(p.rule, p.check, p.detail, env.id, "hello")
        resp = envelope_pb2.Envelope(id=env.id)
        if hello.wire_version < self.min_wire_version:
            vm = resp.hello_response.version_mismatch
            vm.server_version = SERVER_WIRE_VERSION
            vm.min_wire_version = self.min_wire_version
            vm.message = ("wire_version %d is below this core's floor %d: update the satellite firmware"
                          % (hello.wire_version, self.min_wire_version))
            self.report.admission = "version_mismatch"
            self._queue(resp, control=True)
            self._emit(HelloRefused(why="version", surface=surface))
            self.close("version mismatch (wire_version %d < %d)" % (hello.wire_version, self.min_wire_version))
            return
        adm = self.admit(surface)
        self.admission = adm
        self.report.admission = adm.path
        if adm.outcome == Admission.REJECT_CLOSED:
            rj = resp.hello_response.rejected
            rj.reason = ops.REJECTED_CLOSED
            rj.message = "this core runs in closed mode and does not know this device; provision it explicitly"
            self._queue(resp, control=True)
            self._emit(HelloRefused(why="closed", surface=surface))
            self.close("closed mode: unknown device rejected")
            return
        surface.guest = adm.trust != "paired"
        acc = resp.hello_response.accepted
        acc.max_frame_bytes = self.max_frame_bytes
        acc.max_concurrent_streams = self.max_concurrent_streams
        acc.wire_version = SERVER_WIRE_VERSION
        self._queue(resp, control=True)
        self.phase = PHASE_OPEN
        self.decoder.set_limit(self.max_frame_bytes)
        if adm.send_paired:
            self.send_paired()
        self._emit(HelloAccepted(surface=surface, admission=adm))

    def _on_error(self, env, err, tail):
        slot = self.slots.get(env.id)
        if env.id == 0:
            log.warning("%s sent a notification Error %s: %s", self.device_id, _ename(err.code), err.message)
            return
        if slot is not None and slot.kind in (S.MEDIA_RENDER, S.TEXT_RENDER, S.IMAGE_RENDER, S.INVOKE,
                                              S.SETTINGS_WRITE, S.REQUEST_CAPTURE, S.PING):
            self._terminal(slot, "error", err, error=err)
            return
        if self.retired.get(env.id) == "oneshot":
            self.retired[env.id] = "done"
            self._emit(TerminalReceived(id=env.id, kind="Render", op="error", msg=err, error=err))
            return
        if slot is not None and slot.kind in (S.CAPTURE, S.UPLOAD) and slot.state == S.OPEN:
            # The satellite aborting its own input: treat as a cancel of the stream.
            self._violate("R10.8-a", "error_on_own_request", "an Error on the satellite's own %s id %d; a "
                          "satellite aborts its stream with StreamCancel" % (slot.kind, env.id), env.id, "error")
            return
        why = self.retired.get(env.id)
        self._violate("R10.8-a" if why else "R10.10-a", "error_unmatched",
                      "Error %s on id %d, which %s" % (_ename(err.code), env.id,
                                                       "was already answered" if why else "no request of the core holds"),
                      env.id, "error")

    def _on_ping(self, env, ping, tail):
        t2 = self.wall_us()
        if env.id == 0:
            self._violate("R10.2-a", "ping_without_id", "a Ping with id 0 cannot be answered", 0, "ping")
            return
        self._check_sat_id(env.id, "ping")
        resp = envelope_pb2.Envelope(id=env.id)
        pr = resp.ping_response
        pr.t1 = ping.t1
        pr.t2 = t2
        pr.t3 = self.wall_us()
        self._queue(resp, control=True)

    def _on_ping_response(self, env, pr, tail):
        t4 = self.wall_us()
        slot = self.slots.get(env.id)
        if slot is None or slot.kind != S.PING:
            self._unmatched_terminal(env.id, "ping_response")
            return
        if pr.t1 != slot.meta["t1"]:
            self._violate("R10.2-a", "ping_t1_echo", "PingResponse t1 %d does not echo the Ping's %d"
                          % (pr.t1, slot.meta["t1"]), env.id, "ping_response")
        if pr.t3 < pr.t2:
            self._violate("R10.2-a", "ping_t2_t3", "PingResponse t3 %d is before t2 %d" % (pr.t3, pr.t2),
                          env.id, "ping_response")
        t1 = slot.meta["t1"]
        offset = ((pr.t2 - t1) + (pr.t3 - t4)) // 2
        rtt = (t4 - t1) - (pr.t3 - pr.t2)
        self.clock_offset_us, self.rtt_us = offset, rtt
        self._terminal(slot, "ping_response", pr)
        self._emit(PingRound(id=env.id, offset_us=offset, rtt_us=rtt))

    # ---------------------------------------------------------------------------- Tier 1
    def _on_stream_chunk(self, env, chunk, tail):
        self._chunk(env.id, chunk.seq, chunk.capture_ts, tail)

    def _chunk(self, id_, seq, capture_ts, tail):
        slot = self.slots.get(id_)
        if slot is None or S.STREAM_OPENER.get(slot.kind) != S.SAT:
            if slot is not None:   # a chunk on one of the core's streams
                self._stray_frame(id_, "stream_chunk", "a chunk on the core's %s id %d" % (slot.kind, id_),
                                  "R6.3-b", _E.UNKNOWN_STREAM)
                return
            self._stray_on_retired_or_unknown(id_, "stream_chunk")
            return
        if slot.state == S.OPEN:
            if seq != slot.next_seq:
                if seq < slot.next_seq or slot.reliable:
                    self._violate("R10.10-c", "seq", "chunk seq %d on id %d, expected %d (%s stream)"
                                  % (seq, id_, slot.next_seq, "RELIABLE" if slot.reliable else "LOSSY_OK"),
                                  id_, "stream_chunk")
            slot.next_seq = seq + 1 if seq >= slot.next_seq else slot.next_seq
            if slot.kind == S.UPLOAD:
                buf = slot.meta["buf"]
                if len(buf) + len(tail) > slot.meta["total"]:
                    self._error(id_, _E.INVALID_REQUEST, "upload runs past its declared total_bytes")
                    self._violate("R10.10-d", "upload_overrun", "upload id %d runs past total_bytes %d"
                                  % (id_, slot.meta["total"]), id_, "stream_chunk")
                    self._retire(slot, "voided")
                    return
                buf += tail
            self._events.append(ChunkReceived(id_, seq, tail, capture_ts, slot.kind))
            return
        # ENDED: the stream ended but the id lives on until its terminal.
        now = self.clock()
        if slot.ended_by == S.CORE and now - slot.ended_at <= self.late_grace:
            return   # in flight when the core's END_DETECTED left
        slot.late_frames += 1
        if slot.late_frames == 1:
            self._violate("R10.10-d", "chunk_after_end", "chunk seq %d on id %d after its StreamEnd (%s)"
                          % (seq, id_, "sent by the satellite" if slot.ended_by == S.SAT
                             else "END_DETECTED sent by the core %.2fs earlier" % (now - slot.ended_at)),
                          id_, "stream_chunk")
        self._stray += 1
        if self._err_count[id_] < MAX_ERRORS_PER_ID:
            self._err_count[id_] += 1
            self._error(id_, _E.STREAM_CLOSED, "stream %d already ended; no chunks after StreamEnd" % id_,
                        )
        self._check_stray()

    def _on_stream_end(self, env, end, tail):
        slot = self.slots.get(env.id)
        if slot is None:
            self._stray_on_retired_or_unknown(env.id, "stream_end", answer=False)
            return
        if slot.state == S.ENDED and slot.ended_by == S.SAT:
            self._violate("R10.10-d", "end_twice", "a second StreamEnd on id %d" % env.id, env.id, "stream_end")
            return
        try:
            slot.apply(S.SAT, S.END, self.clock())
        except KeyError:
            self._violate("R6.3-b", "end_not_allowed", "StreamEnd on %s id %d in state %s is not the satellite's "
                          "to send" % (slot.kind, env.id, slot.state), env.id, "stream_end")
            return
        if slot.kind == S.UPLOAD:
            mime, total, buf = slot.meta["mime"], slot.meta["total"], slot.meta["buf"]
            self._retire(slot, "done")
            if len(buf) != total:
                self._violate("R10.10-d", "upload_short", "upload id %d ended at %d of %d bytes" % (env.id, len(buf), total),
                              env.id, "stream_end")
                self._error(env.id, _E.INVALID_REQUEST, "upload ended at %d of its %d declared bytes" % (len(buf), total))
                return
            self._uploads[env.id] = (mime, bytes(buf))
            self._emit(UploadCompleted(id=env.id, mime=mime, data=bytes(buf)))
            return
        self._emit(StreamEnded(id=env.id, reason=end.reason, kind=slot.kind))

    def _on_stream_cancel(self, env, cancel, tail):
        slot = self.slots.get(env.id)
        if slot is None:
            self._stray_on_retired_or_unknown(env.id, "stream_cancel", answer=False)
            return
        try:
            nxt = slot.apply(S.SAT, S.CANCEL, self.clock())
        except KeyError:
            self._violate("R10.3-a", "cancel_not_allowed", "StreamCancel on %s id %d in state %s"
                          % (slot.kind, env.id, slot.state), env.id, "stream_cancel")
            return
        if nxt == S.DONE:
            self._retire(slot, "cancelled:sat")
        self._emit(StreamCancelled(id=env.id, reason=cancel.reason, kind=slot.kind, by=S.SAT))

    # ---------------------------------------------------------------------------- Tier 2 input
    def _open_sat_stream(self, env, op, kind, reliable, meta):
        """Common checks of a satellite-opened stream; returns the Slot or None when refused."""
        if not self._check_sat_id(env.id, op):
            self._error(env.id, _E.INVALID_REQUEST, "%s needs a fresh odd id" % op)
            return None
        open_now = sum(1 for s in self.slots.values()
                       if S.STREAM_OPENER.get(s.kind) == S.SAT and S.counts(s.kind, s.state))
        if open_now >= self.max_concurrent_streams:
            self._violate("R10.3-c", "too_many_streams", "%s id %d would be stream %d; Accepted.max_concurrent_streams "
                          "is %d" % (op, env.id, open_now + 1, self.max_concurrent_streams), env.id, op)
            self._error(env.id, _E.TOO_MANY_STREAMS, "at most %d open streams toward the core"
                        % self.max_concurrent_streams)
            self._remember(env.id, "refused")
            return None
        slot = S.Slot(env.id, kind, self.clock(), reliable=reliable, meta=meta)
        self.slots[env.id] = slot
        return slot

    def _on_capture_open(self, env, co, tail):
        request = None
        if co.correlation_ref:
            for s in self.slots.values():
                if s.kind == S.REQUEST_CAPTURE and s.meta.get("ref") == co.correlation_ref:
                    request = s
                    break
            if request is None and co.mode == ops.LIVE:
                self._violate("R10.4-e", "live_correlation_ref", "a LIVE CaptureOpen carries correlation_ref %r that "
                              "answers no RequestCapture" % co.correlation_ref, env.id, "capture_open")
        slot = self._open_sat_stream(env, "capture_open", S.CAPTURE, co.mode == ops.DEFERRED, {"open": co})
        if request is not None:
            self._terminal(request, "capture_open", co)
        if slot is None:
            return
        self._emit(CaptureOpened(id=env.id, open=co, request_id=request.id if request else None))

    def _on_upload_open(self, env, uo, tail):
        if uo.total_bytes > MAX_UPLOAD_BYTES:
            if self._check_sat_id(env.id, "upload_open"):
                self._error(env.id, _E.RESOURCE_EXHAUSTED, "upload of %d bytes is over this core's %d-byte budget"
                            % (uo.total_bytes, MAX_UPLOAD_BYTES))
                self._remember(env.id, "refused")
            return
        self._open_sat_stream(env, "upload_open", S.UPLOAD, True,
                              {"mime": uo.mime, "total": uo.total_bytes, "buf": bytearray()})

    def _on_text_input(self, env, ti, tail):
        if env.id:
            if not self._check_sat_id(env.id, "text_input"):
                return
            self.slots[env.id] = S.Slot(env.id, S.TEXT_INPUT, self.clock())
        if not self._resolve_media(env.id, ti.media, "text_input"):
            return
        self._emit(TextInputReceived(id=env.id, msg=ti))

    def _on_event(self, env, ev, tail):
        if env.id:
            self._check_sat_id(env.id, "event")
        bad = self.surface.check_event(ev)
        if bad is not None:
            code, detail = bad
            self._violate("R8.2-c" if code == "CAPABILITY_MISSING" else "R8.2-e",
                          "event_undeclared" if code == "CAPABILITY_MISSING" else "event_metadata", detail, env.id, "event")
            if env.id:
                self._error(env.id, getattr(_E, code), detail)
            return
        self._emit(EventReceived(id=env.id, msg=ev))

    def _on_stop(self, env, stop, tail):
        self._emit(StopReceived(id=env.id))

    def _on_presence(self, env, p, tail):
        self._emit(PresenceReceived(msg=p))

    # ---------------------------------------------------------------------------- terminals from the satellite
    def _on_playback_done(self, env, pd, tail):
        slot = self.slots.get(env.id)
        if slot is None or slot.kind != S.MEDIA_RENDER:
            self._unmatched_terminal(env.id, "playback_done")
            return
        self._terminal(slot, "playback_done", pd)
        self._emit(PlaybackDone(id=env.id, frames=pd.frames))

    def _on_tool_result(self, env, tr, tail):
        slot = self.slots.get(env.id)
        if slot is None or slot.kind != S.INVOKE:
            if tr.observe and env.id == 0:
                return
            self._unmatched_terminal(env.id, "tool_result")
            return
        if not self._resolve_media(env.id, [c.media for c in tr.content if c.WhichOneof("block") == "media"],
                                   "tool_result", answer=False):
            pass
        self._terminal(slot, "tool_result", tr)

    def _on_response(self, env, resp, tail):
        slot = self.slots.get(env.id)
        if slot is None or slot.kind != S.REQUEST_CAPTURE or not slot.meta.get("image"):
            self._unmatched_terminal(env.id, "response")
            return
        self._resolve_media(env.id, [c.media for c in resp.content if c.WhichOneof("block") == "media"],
                            "response", answer=False)
        self._terminal(slot, "response", resp)

    def _on_setting_state(self, env, st, tail):
        if st.key not in self.surface.settings:
            self._violate("R8.2-f", "setting_undeclared", "SettingState for undeclared key %r" % st.key, env.id,
                          "setting_state")
            if env.id and env.id % 2 == 1:
                self._error(env.id, _E.CAPABILITY_MISSING, "setting %r was not declared in the Hello" % st.key)
            if env.id == 0:
                return
        if env.id == 0:
            self._emit(SettingReported(key=st.key, value=st.value))
            return
        slot = self.slots.get(env.id)
        if slot is None or slot.kind != S.SETTINGS_WRITE:
            self._unmatched_terminal(env.id, "setting_state")
            return
        if st.key != slot.meta["key"]:
            self._violate("R8.2-f", "setting_key_mismatch", "SettingState key %r answers a SettingsWrite of %r"
                          % (st.key, slot.meta["key"]), env.id, "setting_state")
        self._terminal(slot, "setting_state", st)

    # ================================================================ helpers (input side)
    def _check_sat_id(self, id_, op):
        """A satellite-minted request id: odd, non-zero, not live, counting upward (R6.3-a)."""
        if id_ == 0 or id_ % 2 == 0:
            self._violate("R6.3-a", "id_parity", "%s minted id %d; a satellite mints odd non-zero ids" % (op, id_), id_, op)
            return False
        if id_ in self.slots:
            self._violate("R6.3-a", "id_reuse", "%s reuses id %d, which is still live" % (op, id_), id_, op)
            return False
        last = self._last_sat_id
        if last is not None and not (0 < ((id_ - last) & UINT32_MAX) < 0x80000000):
            self._violate("R6.3-a", "id_monotonic", "%s id %d does not count upward from the previous %d"
                          % (op, id_, last), id_, op)
        self._last_sat_id = id_
        return True

    def _resolve_media(self, id_, media, op, answer=True):
        for m in media:
            if m.upload:
                got = self._uploads.pop(m.upload, None)
                if got is None:
                    self._violate("R10.4-c", "upload_reference", "%s references upload %d, which is unknown, incomplete "
                                  "or already used" % (op, m.upload), id_, op)
                    if answer and id_:
                        self._error(id_, _E.INVALID_REQUEST, "MediaBlock.upload %d is not a completed upload" % m.upload)
                    return False
                m.data = got[1]
                m.upload = 0
        return True

    def _terminal(self, slot, op, msg, error=None):
        try:
            slot.apply(S.SAT, S.TERMINAL, self.clock())
        except KeyError:
            self._violate("R10.8-a", "terminal_not_allowed", "%s on %s id %d in state %s" % (op, slot.kind, slot.id,
                                                                                          slot.state), slot.id, op)
            return
        self._retire(slot, "done")
        self._emit(TerminalReceived(id=slot.id, kind=slot.kind, op=op, msg=msg, error=error))

    def _unmatched_terminal(self, id_, op):
        why = self.retired.get(id_)
        if why in ("done",):
            self._violate("R10.8-a", "terminal_twice", "%s on id %d, which already had its terminal" % (op, id_), id_, op)
        elif id_ == 0:
            self._violate("R10.10-a", "terminal_without_id", "%s with id 0 answers nothing" % op, id_, op)
        else:
            self._violate("R10.10-a", "terminal_unmatched", "%s on id %d, which no request of the core holds"
                          % (op, id_), id_, op)

    def _stray_on_retired_or_unknown(self, id_, op, answer=True):
        why = self.retired.get(id_)
        self._stray += 1
        if why is not None and why.startswith("cancelled"):
            # Silently discarded (R10.3-b); reported when the satellite cancelled it itself or keeps going.
            if why == "cancelled:sat":
                self._violate("R10.10-d", "frame_after_cancel", "%s on id %d after the satellite's own StreamCancel"
                              % (op, id_), id_, op)
            else:
                slot_t = self._retired_at.get(id_, 0)
                if self.clock() - slot_t > self.late_grace:
                    self._violate("R10.10-d", "frame_after_cancel", "%s on id %d, cancelled by the core %.2fs ago"
                                  % (op, id_, self.clock() - slot_t), id_, op)
        elif why == "refused":
            pass   # the refusal already reported it
        elif why is not None:
            self._violate("R10.10-d", "frame_after_close", "%s on id %d after its stream closed" % (op, id_), id_, op)
            if answer and self._err_count[id_] < MAX_ERRORS_PER_ID:
                self._err_count[id_] += 1
                self._error(id_, _E.STREAM_CLOSED, "stream %d is closed" % id_)
        else:
            self._violate("R10.10-d", "unknown_stream", "%s on id %d, which was never opened" % (op, id_), id_, op)
            if answer and id_ and self._err_count[id_] < MAX_ERRORS_PER_ID:
                self._err_count[id_] += 1
                self._error(id_, _E.UNKNOWN_STREAM, "no stream %d was opened" % id_)
        self._check_stray()

    def _stray_frame(self, id_, op, detail, rule, code):
        self._stray += 1
        self._violate(rule, "stray_frame", detail, id_, op)
        if self._err_count[id_] < MAX_ERRORS_PER_ID:
            self._err_count[id_] += 1
            self._error(id_, code, detail)
        self._check_stray()

    def _check_stray(self):
        if self._stray > MAX_STRAY_FRAMES:
            self.close("%d frames on dead or unknown ids" % self._stray)

    def _oversize(self, ev):
        env = envelope_pb2.Envelope()
        try:
            env.ParseFromString(ev.header)
        except DecodeError:
            self._violate("R6.1-b", "frame_too_large", "a %d-byte frame over the %d limit with an undecodable header"
                          % (ev.total_len, self.max_frame_bytes))
            self.close("oversize frame with an undecodable header")
            return
        op = env.WhichOneof("op")
        self.report.frames_in += 1
        self._violate("R6.1-b", "frame_too_large", "%s frame of total_len %d over Accepted.max_frame_bytes %d"
                      % (op, ev.total_len, self.max_frame_bytes), env.id, op)
        if env.id:
            self._error(env.id, _E.FRAME_TOO_LARGE, "frame of %d bytes over this core's max_frame_bytes %d"
                        % (ev.total_len, self.max_frame_bytes))

    # ================================================================ output (the core's API)
    def mint_id(self):
        """Next even id: from 2, stepping by 2, wrapping, never 0, skipping ids still live (R6.3-a).
        Public for test benches that build their own frames on a core id; the id is consumed."""
        while True:
            i = self._next_id
            self._next_id = (i + 2) & UINT32_MAX
            if self._next_id == 0:
                self._next_id = 2
            if i not in self.slots:
                return i

    def require_open(self):
        if self.phase != PHASE_OPEN:
            raise LocalProtocolError("the session is not open (phase %s)" % self.phase, "NOT_OPEN")

    def require_cap(self, kind, what):
        if not self.surface.declared(kind):
            raise LocalProtocolError("%s needs %s, which the device did not declare" % (what, cap_name(kind)),
                                     "CAPABILITY_MISSING")
        if not self.surface.usable(kind):
            raise LocalProtocolError("%s needs %s, which a guest device never gets (pair it first: `alabama core "
                                     "approve`)" % (what, cap_name(kind)), "GUEST")

    def core_streams_open(self):
        return sum(1 for s in self.slots.values() if S.STREAM_OPENER.get(s.kind) == S.CORE and S.counts(s.kind, s.state))

    def _open_core_stream(self, kind, env):
        if self.core_streams_open() >= self.surface.max_concurrent_streams:
            raise LocalProtocolError("the device holds at most %d core streams (Hello.max_concurrent_streams)"
                                     % self.surface.max_concurrent_streams, "TOO_MANY_STREAMS")
        env.id = self.mint_id()
        self.slots[env.id] = S.Slot(env.id, kind, self.clock())
        self._queue(env, control=True)
        return env.id

    def open_media_render(self, fmt, target=surface_pb2.CAPABILITY_SPEAKER, to="", lane="", mime=""):
        """MediaRenderOpen on a fresh even id; ``fmt`` is an AudioFormat exactly as declared."""
        self.require_open()
        self.require_cap(target, "MediaRenderOpen")
        env = envelope_pb2.Envelope()
        m = env.media_render_open
        m.target = target
        m.format.CopyFrom(fmt)
        m.mime, m.to, m.lane = mime, to, lane
        return self._open_core_stream(S.MEDIA_RENDER, env)

    def open_text_render(self, role=surface_pb2.ASSISTANT, to="", lane=""):
        self.require_open()
        self.require_cap(surface_pb2.CAPABILITY_TEXT_DISPLAY, "TextRenderOpen")
        env = envelope_pb2.Envelope()
        env.text_render_open.role = role
        env.text_render_open.to, env.text_render_open.lane = to, lane
        return self._open_core_stream(S.TEXT_RENDER, env)

    def open_image_render(self, mime, total_bytes, to="", lane=""):
        self.require_open()
        self.require_cap(surface_pb2.CAPABILITY_IMAGE_DISPLAY, "ImageRenderOpen")
        env = envelope_pb2.Envelope()
        m = env.image_render_open
        m.mime, m.total_bytes, m.to, m.lane = mime, total_bytes, to, lane
        return self._open_core_stream(S.IMAGE_RENDER, env)

    def chunk_capacity(self, id_, seq=0):
        """Largest tail a StreamChunk on ``id_`` can carry under the satellite's max_frame_bytes."""
        hdr = envelope_pb2.Envelope(id=id_)
        hdr.stream_chunk.seq = max(seq, 1 << 21)   # size for a 4-byte seq so every chunk fits
        hl = hdr.ByteSize()
        limit = self.surface.max_frame_bytes
        room = limit - len(wire.varint(hl)) - hl
        return room

    def send_stream_data(self, id_, data):
        """Queue ``data`` on the core stream ``id_`` as StreamChunks, each under the satellite's frame limit
        (R6.1-b). Bulk frames: control frames queued later still go out first (R10.1-a). Returns the count."""
        slot = self.slots.get(id_)
        if slot is None or S.STREAM_OPENER.get(slot.kind) != S.CORE or slot.state != S.OPEN:
            raise LocalProtocolError("id %d is not an open core stream" % id_, "STREAM_CLOSED")
        room = self.chunk_capacity(id_)
        if room <= 0:
            raise LocalProtocolError("the device's max_frame_bytes leaves no room for a chunk tail", "FRAME_TOO_LARGE")
        mv = memoryview(bytes(data))
        n = 0
        for pos in range(0, max(len(mv), 1), room):
            env = envelope_pb2.Envelope(id=id_)
            env.stream_chunk.seq = slot.next_seq
            slot.next_seq += 1
            self._queue(env, bytes(mv[pos:pos + room]), control=False)
            n += 1
        return n

    def end_stream(self, id_, reason=ops.COMPLETE):
        slot = self._core_slot(id_, S.END)
        env = envelope_pb2.Envelope(id=id_)
        env.stream_end.reason = reason
        self._queue(env, control=False)   # after the stream's last chunk
        slot.apply(S.CORE, S.END, self.clock())
        if slot.state == S.DONE:
            # A fire-and-forward render (text, image) ended: an Error the device sends later on its id
            # (it could not display the surface) is still its answer, matched like a Render's (§10.5).
            self._retire(slot, "oneshot")

    def cancel_stream(self, id_, reason):
        """StreamCancel on any live stream (ours or the satellite's): the id is dead at once (R10.3-a).
        Queued chunks of it that have not left yet are dropped."""
        slot = self._core_slot(id_, S.CANCEL)
        self._bulk = collections.deque(f for f in self._bulk if f[0] != id_)
        env = envelope_pb2.Envelope(id=id_)
        env.stream_cancel.reason = reason
        self._queue(env, control=True)
        nxt = slot.apply(S.CORE, S.CANCEL, self.clock())
        if nxt == S.DONE:
            self._retire(slot, "cancelled:core")

    def end_capture(self, id_):
        """StreamEnd{END_DETECTED} on the satellite's capture: the endpoint detector closed the mic (§4.1)."""
        slot = self._core_slot(id_, S.END)
        env = envelope_pb2.Envelope(id=id_)
        env.stream_end.reason = ops.END_DETECTED
        self._queue(env, control=True)
        slot.apply(S.CORE, S.END, self.clock())

    def capture_ack(self, id_, stored):
        slot = self._core_slot(id_, S.ACK)
        env = envelope_pb2.Envelope(id=id_)
        env.capture_ack.stored = stored
        self._queue(env, control=True)
        slot.apply(S.CORE, S.ACK, self.clock())

    def respond(self, id_, content=()):
        """The success terminal on a satellite request (CaptureOpen, TextInput): exactly once (R10.8-a)."""
        slot = self._core_slot(id_, S.TERMINAL)
        env = envelope_pb2.Envelope(id=id_)
        env.response.SetInParent()
        for c in content:
            env.response.content.add().CopyFrom(c)
        self._queue(env, control=True)
        slot.apply(S.CORE, S.TERMINAL, self.clock())
        self._retire(slot, "done")

    def fail(self, id_, code, message=""):
        """The failure terminal (Error) on a satellite request: exactly once (R10.8-a)."""
        slot = self._core_slot(id_, S.TERMINAL)
        self._error(id_, code, message)
        slot.apply(S.CORE, S.TERMINAL, self.clock())
        self._retire(slot, "done")

    def pending_terminal(self, id_):
        slot = self.slots.get(id_)
        return slot is not None and slot.kind in (S.CAPTURE, S.TEXT_INPUT)

    def _core_slot(self, id_, event):
        self.require_open()
        slot = self.slots.get(id_)
        if slot is None:
            raise LocalProtocolError("id %d is not live (already answered, cancelled or never opened)" % id_,
                                     "UNKNOWN_STREAM")
        try:
            S.step(slot.kind, slot.state, S.CORE, event)
        except KeyError:
            raise LocalProtocolError("the core may not send %s on %s id %d in state %s"
                                     % (event, slot.kind, id_, slot.state), "STATE") from None
        return slot

    def invoke(self, name, arguments="{}", observe=False, *, unchecked=False):
        """Invoke a device tool; returns the id (0 for an observe copy). ``unchecked=True`` (test benches:
        §4.5 asks for a tool the device cannot serve) skips the declared-tool and guest checks; the id is
        tracked like any Invoke."""
        self.require_open()
        if observe:
            self.require_cap(surface_pb2.CAPABILITY_TOOL_ACTIVITY, "an observe Invoke")
        elif unchecked:
            pass
        elif name not in self.surface.tools:
            raise LocalProtocolError("the device declared no tool %r (it has: %s)" % (name, ", ".join(self.surface.tools)
                                                                                   or "none"), "CAPABILITY_MISSING")
        elif self.surface.guest:
            raise LocalProtocolError("device tools are not offered for a guest; pair it first (`alabama core approve`)",
                                     "GUEST")
        env = envelope_pb2.Envelope()
        env.invoke.name, env.invoke.arguments, env.invoke.observe = name, arguments, observe
        if observe:
            self._queue(env, control=True)   # id 0: an informational copy, never answered
            return 0
        env.id = self.mint_id()
        self.slots[env.id] = S.Slot(env.id, S.INVOKE, self.clock(), meta={"name": name})
        self._queue(env, control=True)
        return env.id

    def settings_write(self, key, value):
        self.require_open()
        if key not in self.surface.settings:
            raise LocalProtocolError("the device declared no setting %r" % key, "CAPABILITY_MISSING")
        bad = self.surface.check_setting_value(key, value)
        if bad:
            raise LocalProtocolError("value out of the descriptor: %s" % bad, "INVALID_REQUEST")
        env = envelope_pb2.Envelope(id=self.mint_id())
        env.settings_write.key = key
        env.settings_write.value.CopyFrom(value)
        self.slots[env.id] = S.Slot(env.id, S.SETTINGS_WRITE, self.clock(), meta={"key": key})
        self._queue(env, control=True)
        return env.id

    def request_capture(self, correlation_ref, image_source=0, mode=ops.LIVE):
        self.require_open()
        self.require_cap(surface_pb2.CAPABILITY_IMAGE_CAPTURE if image_source else surface_pb2.CAPABILITY_MIC,
                          "RequestCapture")
        env = envelope_pb2.Envelope(id=self.mint_id())
        rc = env.request_capture
        rc.correlation_ref, rc.image_source, rc.mode = correlation_ref, image_source, mode
        self.slots[env.id] = S.Slot(env.id, S.REQUEST_CAPTURE, self.clock(),
                                    meta={"ref": correlation_ref, "image": bool(image_source)})
        self._queue(env, control=True)
        return env.id

    def render(self, target, content, to="", lane=""):
        """One-shot Render; fire-and-forward (an Error on its id is still matched, §10.8)."""
        self.require_open()
        if target not in (surface_pb2.CAPABILITY_TEXT_DISPLAY, surface_pb2.CAPABILITY_IMAGE_DISPLAY,
                          surface_pb2.CAPABILITY_HTML_DISPLAY):
            raise LocalProtocolError("Render targets a display capability, not %s" % cap_name(target), "INVALID_REQUEST")
        self.require_cap(target, "Render")
        env = envelope_pb2.Envelope(id=self.mint_id())
        env.render.target = target
        env.render.to, env.render.lane = to, lane
        for c in content:
            env.render.content.add().CopyFrom(c)
        self._queue(env, control=True)
        self._remember(env.id, "oneshot")
        return env.id

    def media_control(self, id_, action, volume=0):
        slot = self.slots.get(id_)
        self.require_cap(surface_pb2.CAPABILITY_MEDIA_SINK, "MediaControl")
        if slot is None or slot.kind != S.MEDIA_RENDER:
            raise LocalProtocolError("MediaControl needs a live MEDIA_SINK stream id", "UNKNOWN_STREAM")
        env = envelope_pb2.Envelope(id=id_)
        env.media_control.action, env.media_control.volume = action, volume
        self._queue(env, control=True)

    def ping(self):
        """Ping on a fresh id; the PingRound event brings the four-timestamp offset (R10.2-a)."""
        self.require_open()
        env = envelope_pb2.Envelope(id=self.mint_id())
        t1 = self.wall_us()
        env.ping.t1 = t1
        self.slots[env.id] = S.Slot(env.id, S.PING, self.clock(), meta={"t1": t1})
        self._queue(env, control=True)
        return env.id

    def pipeline_state(self, phase, error_code=0):
        """PipelineState notification (id 0) when the phase changes (§10.4.1)."""
        if self.phase != PHASE_OPEN or (phase, error_code) == self._pipeline_phase:
            return
        self._pipeline_phase = (phase, error_code)
        env = envelope_pb2.Envelope()
        env.pipeline_state.phase = phase
        if phase == ops.PipelineState.ERROR:
            env.pipeline_state.error_code = error_code
        self._queue(env, control=True)

    def send_paired(self):
        env = envelope_pb2.Envelope()
        env.paired.SetInParent()
        self._queue(env, control=True)

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

    # ---------------------------------------------------------------------------- queue
    def _queue(self, env, tail=b"", control=True):
        op = env.WhichOneof("op")
        if op in _MEDIA_OPS:
            _no_upload(env, op)
        header = env.SerializeToString()
        total = wire.frame_total_len(len(header), len(tail))
        if self.phase == PHASE_HELLO or self.surface is None or op == "hello_response":
            wire.check_handshake(total)
        else:
            try:
                wire.check_limit(total, self.surface.max_frame_bytes)
            except wire.FrameError as e:
                raise LocalProtocolError("%s: shrink the content or stream it" % e, "FRAME_TOO_LARGE") from None
        frame = wire.encode_frame(header, tail)
        if flog.isEnabledFor(logging.DEBUG):
            flog.debug("%s OUT %-16s id=%d header=%d tail=%d", self.device_id or self.report.peer,
                       op, env.id, len(header), len(tail), extra={"envelope": env})
        (self._control if control else self._bulk).append((env.id, frame))
        if op == "error":
            name = _ename(env.error.code)
            self.report.errors_sent[name] = self.report.errors_sent.get(name, 0) + 1

    def send_raw(self, frames, control=True):
        """Queue ``frames`` exactly as given, for test benches (docs/core.md, "Hooks for test benches"):
        one or more complete frames (``wire.encode_frame(header, tail)``, joined), written as ONE Noise
        message, control lane by default (ahead of queued bulk). Nothing is checked or tracked: no frame
        limit, no handshake ceiling, no R10.4-c, no id state, no errors_sent count. It still counts in
        frames_out/bytes_out and passes the on_frame_out observers like any frame."""
        (self._control if control else self._bulk).append((0, bytes(frames)))

    def next_frame(self):
        """The next frame to write, control before bulk (R10.1-a), or None."""
        if self._control:
            f = self._control.popleft()[1]
        elif self._bulk:
            f = self._bulk.popleft()[1]
        else:
            return None
        self.report.frames_out += 1
        self.report.bytes_out += len(f)
        if self.on_frame_out:
            for fn in self.on_frame_out:
                fn(f)
        return f

    def data_to_send(self):
        """Everything queued, in send order, as one bytes object (tests and simple drivers)."""
        out = []
        while True:
            f = self.next_frame()
            if f is None:
                return b"".join(out)
            out.append(f)

    def has_output(self):
        """True while frames wait for the writer."""
        return bool(self._control or self._bulk)

    def queued(self):
        """Frames waiting for the writer, control and bulk."""
        return len(self._control) + len(self._bulk)

    def bulk_pending(self):
        """Bulk frames (stream chunks, stream ends) waiting for the writer."""
        return len(self._bulk)

    def shed_if_backlog(self, max_frames):
        """The slow-reader rule (R10.1-b): a peer that leaves more than ``max_frames`` frames unread is
        disconnected, others unaffected. Over the limit (and not closed already) the queue is dropped,
        the report says so and the session closes; returns True, and the driver drops the connection."""
        n = len(self._control) + len(self._bulk)
        if n <= max_frames or self.phase == PHASE_CLOSED:
            return False
        self.report.add("R10.1-b", "slow_reader", "%d frames queued unread: disconnecting" % n)
        self._control.clear()
        self._bulk.clear()
        self.close("slow reader")
        return True

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

    # ---------------------------------------------------------------------------- misc
    def _error(self, id_, code, message):
        env = envelope_pb2.Envelope(id=id_)
        env.error.code = code
        env.error.message = message[:256]
        try:
            self._queue(env, control=True)
        except LocalProtocolError as e:
            if e.code != "FRAME_TOO_LARGE":
                raise
            # Even the Error does not fit the satellite's max_frame_bytes: it may not be sent (R6.1-b) and the
            # frame may not go unanswered, so the session closes (every caller: dispatch, oversize, decode).
            self._violate("R6.1-b", "max_frame_bytes_too_small", "the Error %s on id %d does not fit the "
                          "satellite's max_frame_bytes %d" % (_E.Name(code), id_, self.surface.max_frame_bytes),
                          id_, "error")
            self.close("the satellite's max_frame_bytes %d is too small for the core's answers"
                       % self.surface.max_frame_bytes)

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


#: Outgoing ops that can carry a MediaBlock, or are an upload: checked by ``_no_upload`` (R10.4-c).
_MEDIA_OPS = frozenset({"upload_open", "render", "response", "tool_result", "text_input"})


def _no_upload(env, op):
    """The send-path guard of R10.4-c: the core never sends UploadOpen nor sets MediaBlock.upload (core→
    satellite media goes inline or over ImageRenderOpen / MediaRenderOpen). Raises LocalProtocolError."""
    if op == "upload_open":
        raise LocalProtocolError("the core never sends UploadOpen (spec §10.4): stream core media over "
                                 "ImageRenderOpen / MediaRenderOpen", "UPLOAD")
    msg = getattr(env, op)
    blocks = msg.media if op == "text_input" else [c.media for c in msg.content if c.WhichOneof("block") == "media"]
    for m in blocks:
        if m.upload:
            raise LocalProtocolError("the core never references MediaBlock.upload (upload %d) (spec §10.4): send "
                                     "the bytes inline or over ImageRenderOpen" % m.upload, "UPLOAD")


_OPEN, _CAPTURE = S.OPEN, S.CAPTURE


def _ename(code):
    try:
        return ops.ErrorCode.Name(code)
    except ValueError:
        return "ERROR_%d" % code
