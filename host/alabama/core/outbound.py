"""What a core session sends of its own accord: the core's API to the pipeline, the server and test benches.

Responsible for the core's requests and streams (spec §4, §6.3, §10.3-§10.9): minting even ids (R6.3-a),
opening, feeding, ending and cancelling core streams under the satellite's limits, the terminal on a
satellite's request (exactly once, R10.8-a), Invoke, SettingsWrite, RequestCapture, Render, MediaControl,
Ping, PipelineState and Paired, each checked against the declared surface (R8.2-b, R10.10-e) before it is
queued; a send the wire forbids raises ``LocalProtocolError``. Not for: frames the satellite sends
(inbound.py) or how frames leave (outqueue.py). ``Outbound`` is one part of ``session.CoreSession``: methods
only, on the state its ``__init__`` sets up.
"""
import collections

from alabama.v1 import envelope_pb2, operations_pb2 as ops, surface_pb2
from alabama.wire import frame as wire

from . import state as S
from .errors import LocalProtocolError
from .sessiondefs import PHASE_OPEN, UINT32_MAX
from .surface import cap_name


class Outbound:
    """The core's sends (see the module docstring)."""

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
            raise LocalProtocolError("the device declared no setting %r (it declares: %s)"
                                     % (key, ", ".join(self.surface.settings) or "none"), "CAPABILITY_MISSING")
        if not isinstance(value, surface_pb2.SettingValue):     # what a person typed (the CLI, the control port)
            try:
                value = self.surface.setting_value(key, value)
            except ValueError as e:
                raise LocalProtocolError(str(e), "INVALID_REQUEST") from None
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
