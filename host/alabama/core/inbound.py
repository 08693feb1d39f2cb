"""What each frame a satellite sends does to a core session: the ``_on_<op>`` handlers and their checks.

Responsible for the satellite's side of spec §6.3, §7.3 (the Hello answer), §8.2 and §10.2-§10.10 as frames
arrive: the Hello and admission, Errors, Pings, chunks, stream ends and cancels, satellite-opened streams and
requests, the terminals answering the core's requests, stray frames and oversize frames; each broken rule goes
to the conformance report (``_violate``) and, where the spec says so, an Error on its id. Not for: cutting
bytes into frames or the dispatch table (session.py), what the core sends of its own accord (outbound.py),
the queue (outqueue.py). ``Inbound`` is one part of ``session.CoreSession``: methods only, on the state its
``__init__`` sets up.
"""
from google.protobuf.message import DecodeError

from alabama.v1 import envelope_pb2, operations_pb2 as ops

from . import state as S
from .events import (
    HelloAccepted, HelloRefused, CaptureOpened, ChunkReceived, StreamEnded, StreamCancelled, UploadCompleted,
    TerminalReceived, PlaybackDone, TextInputReceived, EventReceived, SettingReported, StopReceived,
    PresenceReceived, PingRound)
from .sessiondefs import (
    E, PHASE_HELLO, PHASE_OPEN, SERVER_WIRE_VERSION, UINT32_MAX, MAX_ERRORS_PER_ID, MAX_STRAY_FRAMES,
    MAX_UPLOAD_BYTES, Admission, error_name, log)
from .surface import Surface


class Inbound:
    """The handlers of the ops a satellite may send, and the input-side checks they share."""

    # ---------------------------------------------------------------------------- Tier 0
    def _on_hello(self, env, hello, tail):
        if self.phase != PHASE_HELLO:
            self._violate("R6.1-a", "hello_twice", "a second Hello on the session", env.id, "hello")
            self._error(env.id, E.INVALID_REQUEST, "the session already has a Hello")
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
            log.warning("%s sent a notification Error %s: %s", self.device_id, error_name(err.code), err.message)
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
                      "Error %s on id %d, which %s" % (error_name(err.code), env.id,
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
        slot = self._answered(env.id, S.PING, "ping_response")
        if slot is None:
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
                                  "R6.3-b", E.UNKNOWN_STREAM)
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
                    self._error(id_, E.INVALID_REQUEST, "upload runs past its declared total_bytes")
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
            self._error(id_, E.STREAM_CLOSED, "stream %d already ended; no chunks after StreamEnd" % id_,
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
                self._error(env.id, E.INVALID_REQUEST, "upload ended at %d of its %d declared bytes" % (len(buf), total))
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
            self._error(env.id, E.INVALID_REQUEST, "%s needs a fresh odd id" % op)
            return None
        open_now = sum(1 for s in self.slots.values()
                       if S.STREAM_OPENER.get(s.kind) == S.SAT and S.counts(s.kind, s.state))
        if open_now >= self.max_concurrent_streams:
            self._violate("R10.3-c", "too_many_streams", "%s id %d would be stream %d; Accepted.max_concurrent_streams "
                          "is %d" % (op, env.id, open_now + 1, self.max_concurrent_streams), env.id, op)
            self._error(env.id, E.TOO_MANY_STREAMS, "at most %d open streams toward the core"
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
                self._error(env.id, E.RESOURCE_EXHAUSTED, "upload of %d bytes is over this core's %d-byte budget"
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
                self._error(env.id, getattr(E, code), detail)
            return
        self._emit(EventReceived(id=env.id, msg=ev))

    def _on_stop(self, env, stop, tail):
        self._emit(StopReceived(id=env.id))

    def _on_presence(self, env, p, tail):
        self._emit(PresenceReceived(msg=p))

    # ---------------------------------------------------------------------------- terminals from the satellite
    def _on_playback_done(self, env, pd, tail):
        slot = self._answered(env.id, S.MEDIA_RENDER, "playback_done")
        if slot is None:
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
                self._error(env.id, E.CAPABILITY_MISSING, "setting %r was not declared in the Hello" % st.key)
            if env.id == 0:
                return
        if env.id == 0:
            self._emit(SettingReported(key=st.key, value=st.value))
            return
        slot = self._answered(env.id, S.SETTINGS_WRITE, "setting_state")
        if slot is None:
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
                        self._error(id_, E.INVALID_REQUEST, "MediaBlock.upload %d is not a completed upload" % m.upload)
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

    def _answered(self, id_, kind, op):
        """The open slot of ``kind`` a terminal ``op`` answers, else None (said by _unmatched_terminal)."""
        slot = self.slots.get(id_)
        if slot is None or slot.kind != kind:
            self._unmatched_terminal(id_, op)
            return None
        return slot

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
                self._error(id_, E.STREAM_CLOSED, "stream %d is closed" % id_)
        else:
            self._violate("R10.10-d", "unknown_stream", "%s on id %d, which was never opened" % (op, id_), id_, op)
            if answer and id_ and self._err_count[id_] < MAX_ERRORS_PER_ID:
                self._err_count[id_] += 1
                self._error(id_, E.UNKNOWN_STREAM, "no stream %d was opened" % id_)
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
            self._error(env.id, E.FRAME_TOO_LARGE, "frame of %d bytes over this core's max_frame_bytes %d"
                        % (ev.total_len, self.max_frame_bytes))

