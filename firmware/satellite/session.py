# The satellite's side of one Alabama session, sans-IO: decoded Envelopes in, events and Envelopes out.
# It owns ids, stream states, terminals and limits (spec §6.3, §10); it never touches a socket, the
# codec, the audio HAL or a clock (times are passed in, in microseconds).
#
# Driver contract (satellite.runtime makes the session and sends the Hello and Pings; satellite.device feeds
# it every frame in Satellite.on_frame and drives captures and renders; and tests):
#   s = Session(surface)              surface: a Surface (below) built from the board file
#   send(s.hello())                   first frame; then feed every received Envelope:
#   ev = s.receive(env, now_us)       -> None or an event (classes below); the session may also have
#                                        queued replies: pop them with s.outgoing() until it returns None
#   s.open_capture(...), s.chunk(id), s.end_capture(...), s.playback_done(...), ... return an Envelope
#                                        the driver encodes and sends (StreamChunk: plus the audio tail).
# Returned events and the StreamChunk Envelope are REUSED objects on the hot paths (a render chunk event,
# the capture chunk header): read them before the next call, copy what you keep.
from micropython import const

from satellite.wire import alabama_v1 as pb

WIRE_VERSION = const(1)
DEFAULT_MAX_FRAME_BYTES = const(65516)   # spec §6.1: 0 on the wire means this
DEFAULT_MAX_STREAMS = const(8)           # spec §10.3: 0 on the wire means this
_ID_MAX = const(0xFFFFFFFF)
_RECENT_CANCELLED = const(8)             # cancelled ids remembered to discard their stragglers silently

# Session states.
HELLO_SENT = const(0)
ACTIVE = const(1)
CLOSED = const(2)

# Stream kinds and states (an id is a capture we opened or a render the core opened).
_CAPTURE = const(0)
_RENDER = const(1)
_DISPLAY = const(2)  # a TextRenderOpen / ImageRenderOpen stream: fire-and-forward, ends at its StreamEnd
_OPEN = const(0)     # chunks may flow
_ENDED = const(1)    # StreamEnd seen/sent: no chunks; the id waits for its terminal
_DONE = const(2)     # retired (terminal sent/received, or cancelled)

# Incoming operations that move a stream, as small ints (table keys).
_IN_END = const(1)
_IN_CANCEL = const(2)
_IN_RESPONSE = const(3)
_IN_ERROR = const(4)
_OUT_END = const(5)
_OUT_CANCEL = const(6)
_OUT_DONE = const(7)


def _key(kind, state, op):
    return (kind << 8) | (state << 4) | op


# The stream transition table: (kind, state, operation) -> next state. A missing entry is a protocol
# violation by whoever sent the operation; the handlers turn it into an Error or a local exception.
_T = {
    # A capture: the core closes the mic with StreamEnd{END_DETECTED} (or we end it on PTT release);
    # the id lives on until its terminal, Response or Error (spec §10.4.1, §10.8).
    _key(_CAPTURE, _OPEN, _IN_END): _ENDED,
    _key(_CAPTURE, _OPEN, _OUT_END): _ENDED,
    _key(_CAPTURE, _OPEN, _IN_CANCEL): _DONE,
    _key(_CAPTURE, _OPEN, _OUT_CANCEL): _DONE,
    _key(_CAPTURE, _OPEN, _IN_RESPONSE): _DONE,
    _key(_CAPTURE, _OPEN, _IN_ERROR): _DONE,
    _key(_CAPTURE, _ENDED, _IN_END): _ENDED,
    _key(_CAPTURE, _ENDED, _IN_CANCEL): _DONE,
    _key(_CAPTURE, _ENDED, _OUT_CANCEL): _DONE,
    _key(_CAPTURE, _ENDED, _IN_RESPONSE): _DONE,
    _key(_CAPTURE, _ENDED, _IN_ERROR): _DONE,
    # A render: chunks until StreamEnd, then our PlaybackDone is its terminal; a StreamCancel retires it
    # at once and we still report what was played (spec §4.3).
    _key(_RENDER, _OPEN, _IN_END): _ENDED,
    _key(_RENDER, _OPEN, _IN_CANCEL): _DONE,
    _key(_RENDER, _OPEN, _OUT_DONE): _DONE,
    _key(_RENDER, _ENDED, _IN_CANCEL): _DONE,
    _key(_RENDER, _ENDED, _OUT_DONE): _DONE,
    # A display stream (TextRenderOpen, ImageRenderOpen) has no terminal: its StreamEnd retires it (§10.8).
    _key(_DISPLAY, _OPEN, _IN_END): _DONE,
    _key(_DISPLAY, _OPEN, _IN_CANCEL): _DONE,
}


# The params arm each capability kind must carry (spec §8.2); TOOL_ACTIVITY carries none.
_PARAMS = {
    pb.CapabilityKind.CAPABILITY_MIC: "mic",
    pb.CapabilityKind.CAPABILITY_SPEAKER: "speaker",
    pb.CapabilityKind.CAPABILITY_TEXT_DISPLAY: "text_display",
    pb.CapabilityKind.CAPABILITY_IMAGE_DISPLAY: "image_display",
    pb.CapabilityKind.CAPABILITY_HTML_DISPLAY: "html_display",
    pb.CapabilityKind.CAPABILITY_MEDIA_SINK: "media_sink",
    pb.CapabilityKind.CAPABILITY_IMAGE_CAPTURE: "image_capture",
    pb.CapabilityKind.CAPABILITY_TOOL_ACTIVITY: None,
}


class SessionError(Exception):
    """A local misuse of the session (the driver asked for something the protocol forbids)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class ProtocolViolation(Exception):
    """The core broke the protocol in a way that ends the session (the driver closes the connection)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class Surface:
    """What the satellite declares (spec §8), plus its own receive limits."""

    def __init__(self, capabilities=(), tools=(), events=(), settings=(), max_frame_bytes=0,
                 max_concurrent_streams=0, display_name="", software="", pairing_token=""):
        self.capabilities = list(capabilities)
        self.tools = list(tools)
        self.events = list(events)
        self.settings = list(settings)
        self.max_frame_bytes = max_frame_bytes
        self.max_concurrent_streams = max_concurrent_streams
        self.display_name = display_name
        self.software = software
        self.pairing_token = pairing_token
        names = [t.name for t in self.tools]
        for i, n in enumerate(names):  # R8.2-d: tool names unique within the Hello
            if n in names[i + 1:]:
                raise SessionError("DUPLICATE_TOOL", "tool %r declared twice: rename one" % n)
        for c in self.capabilities:
            want = _PARAMS.get(c.kind)
            if c.params != want:   # R8.2-a: params is the variant matching kind (TOOL_ACTIVITY: none)
                raise SessionError("BAD_PARAMS", "capability %d carries params %r, not %r" % (c.kind, c.params, want))
            if c.kind == pb.CapabilityKind.CAPABILITY_HTML_DISPLAY:
                # R10.5-b: markup must be rendered isolated; this firmware has no sandboxed renderer.
                raise SessionError("NO_HTML_SANDBOX", "this firmware cannot render HTML isolated: do not declare HTML_DISPLAY")
        self.kinds = [c.kind for c in self.capabilities]

    def has(self, kind):
        return kind in self.kinds

    def capability(self, kind):
        for c in self.capabilities:
            if c.kind == kind:
                return c
        return None

    def tool(self, name):
        for t in self.tools:
            if t.name == name:
                return t
        return None

    def setting(self, key):
        for s in self.settings:
            if s.key == key:
                return s
        return None


# ---- events returned by Session.receive -------------------------------------------------------

class Accepted:
    def __init__(self, max_frame_bytes, max_concurrent_streams, wire_version):
        self.max_frame_bytes = max_frame_bytes
        self.max_concurrent_streams = max_concurrent_streams
        self.wire_version = wire_version


class VersionMismatch:
    def __init__(self, server_version, min_wire_version, message):
        self.server_version = server_version
        self.min_wire_version = min_wire_version
        self.message = message


class Rejected:
    def __init__(self, reason, message):
        self.reason = reason
        self.message = message


class Paired:
    """The core paired us: pin the key the transport authenticated; use IK from now on (R7.3-e)."""


class CaptureEnded:
    """The core closed the mic of capture `id` (StreamEnd); the id still waits for its terminal."""

    def __init__(self, id, reason):
        self.id = id
        self.reason = reason


class CaptureDone:
    """Capture `id` reached its terminal: Response (ok), Error, or StreamCancel. Return to idle (R10.4.1-b)."""

    def __init__(self, id, ok, code=0, message="", cancelled=False):
        self.id = id
        self.ok = ok
        self.code = code
        self.message = message
        self.cancelled = cancelled


class RenderOpen:
    """The core opened render `id` on the speaker; chunks follow. Accept by playing, or decline()."""

    def __init__(self, id, target, format):
        self.id = id
        self.target = target
        self.format = format


class RenderChunk:
    """A chunk of render `id` (REUSED object): the tail is buf[start:end] of the frame buffer."""

    def __init__(self):
        self.id = 0
        self.seq = 0
        self.gap = 0     # chunks missing before this one (LOSSY_OK: tolerated, counted)


class RenderEnded:
    """The core finished sending render `id`: play out the buffer, then call playback_done()."""

    def __init__(self, id):
        self.id = id


class RenderCancelled:
    """Render `id` was cancelled: stop sound now, then call playback_done(id, frames_played)."""

    def __init__(self, id, reason):
        self.id = id
        self.reason = reason


class TextOpen:
    """The core opened text stream `id` into the TEXT_DISPLAY (role: TextRole); chunks carry UTF-8."""

    def __init__(self, id, role):
        self.id = id
        self.role = role


class ImageOpen:
    """The core opened image stream `id` (mime in our accepts, total_bytes within max_image_bytes)."""

    def __init__(self, id, mime, total_bytes):
        self.id = id
        self.mime = mime
        self.total_bytes = total_bytes


class Show:
    """A one-shot Render on `id` to a declared display surface `target`: its ContentBlocks."""

    def __init__(self, id, target, content):
        self.id = id
        self.target = target
        self.content = content


class DisplayEnded:
    """Display stream `id` ended (StreamEnd: paint it) or was cancelled (cancelled: drop it)."""

    def __init__(self, id, cancelled):
        self.id = id
        self.cancelled = cancelled


class CaptureRequested:
    """The core asks for a capture on id R; answer with accept_request() or decline() (R10.4-a)."""

    def __init__(self, id, correlation_ref, mode, image_source):
        self.id = id
        self.correlation_ref = correlation_ref
        self.mode = mode
        self.image_source = image_source


class ToolCall:
    """Invoke of a declared tool; answer with tool_result() or error() on the same id."""

    def __init__(self, id, name, arguments):
        self.id = id
        self.name = name
        self.arguments = arguments


class SettingWrite:
    """SettingsWrite of a declared key; apply it, then answer with setting_state(id, ...)."""

    def __init__(self, id, key, value):
        self.id = id
        self.key = key
        self.value = value


class Phase:
    """PipelineState, for display only: never drives the microphone (R10.4.1-a)."""

    def __init__(self, phase, error_code):
        self.phase = phase
        self.error_code = error_code


class ClockSync:
    """A Ping round finished: offset (core clock − ours) and round trip, microseconds (spec §10.2)."""

    def __init__(self, offset_us, rtt_us):
        self.offset_us = offset_us
        self.rtt_us = rtt_us


class CaptureAcked:
    def __init__(self, id, stored):
        self.id = id
        self.stored = stored


class Ignored:
    """A frame the session did not act on (unknown arm, notification, straggler); for logs and tests."""

    def __init__(self, id, op, why):
        self.id = id
        self.op = op
        self.why = why


class _Stream:
    def __init__(self, kind, state):
        self.kind = kind
        self.state = state
        self.seq = 0          # next seq to send (capture) or expected (render)
        self.correlation_ref = ""


class Session:
    def __init__(self, surface, wire_version=WIRE_VERSION):
        self.surface = surface
        self.wire_version = wire_version
        self.state = HELLO_SENT
        self._next_id = 1
        self._streams = {}
        self._cancelled = [0] * _RECENT_CANCELLED
        self._cancelled_i = 0
        self._closed = [0] * _RECENT_CANCELLED   # display streams retired by their StreamEnd
        self._closed_i = 0
        self._out = []
        self._pings = {}
        self._requests = {}          # RequestCapture ids not yet answered -> correlation_ref
        # Limits the core advertises (Accepted): what we may send it.
        self.peer_max_frame_bytes = DEFAULT_MAX_FRAME_BYTES
        self.peer_max_streams = DEFAULT_MAX_STREAMS
        self.hello_id = 0
        self.last_rx_us = 0
        # Reused hot-path objects.
        self._chunk_env = pb.Envelope(id=1, stream_chunk=pb.StreamChunk())
        self._render_chunk = RenderChunk()

    # ---- ids -------------------------------------------------------------------------------------

    def _mint(self):
        """The next odd id: from 1, step 2, wrapping past 2**32 − 1 back to 1; never 0 (R6.3-a)."""
        i = self._next_id
        n = i + 2
        self._next_id = 1 if n > _ID_MAX else n
        return i

    # ---- frames we originate -----------------------------------------------------------------------

    def hello(self):
        s = self.surface
        self.hello_id = self._mint()
        return pb.Envelope(id=self.hello_id, hello=pb.Hello(
            wire_version=self.wire_version, capabilities=s.capabilities, tools=s.tools, events=s.events,
            settings=s.settings, max_frame_bytes=s.max_frame_bytes,
            max_concurrent_streams=s.max_concurrent_streams, pairing_token=s.pairing_token,
            display_name=s.display_name, software=s.software))

    def _active(self):
        if self.state != ACTIVE:
            raise SessionError("NOT_ACTIVE", "the session is not active (no Accepted yet, or closed)")

    def open_streams(self, kind):
        n = 0
        for st in self._streams.values():
            if st.kind == kind and st.state == _OPEN:
                n += 1
        return n

    def open_capture(self, trigger=0, mode=0, format=None, correlation_ref="", from_="", lane=""):
        """A CaptureOpen on a fresh odd id. Raises SessionError TOO_MANY_STREAMS at the core's limit
        (R10.3-c: the opener waits for a stream to end before minting another)."""
        self._active()
        if self.open_streams(_CAPTURE) >= self.peer_max_streams:
            raise SessionError("TOO_MANY_STREAMS", "the core holds at most %d of our streams" % self.peer_max_streams)
        if mode == pb.CaptureMode.LIVE and correlation_ref and trigger != pb.Trigger.REQUESTED:
            # R10.4-e: a LIVE capture carries no correlation_ref unless it answers a RequestCapture.
            raise SessionError("INVALID", "a LIVE capture carries no correlation_ref")
        i = self._mint()
        st = _Stream(_CAPTURE, _OPEN)
        st.correlation_ref = correlation_ref
        self._streams[i] = st
        return pb.Envelope(id=i, capture_open=pb.CaptureOpen(
            kind=pb.MediaKind.AUDIO, trigger=trigger, mode=mode, format=format,
            correlation_ref=correlation_ref, from_=from_, lane=lane))

    def accept_request(self, request_id, format=None, mode=0):
        """Answer RequestCapture R with a CaptureOpen echoing its correlation_ref (R10.4-a)."""
        ref = self._requests.pop(request_id, None)
        if ref is None:
            raise SessionError("UNKNOWN_REQUEST", "no RequestCapture %d is waiting for an answer" % request_id)
        try:
            return self.open_capture(trigger=pb.Trigger.REQUESTED, mode=mode, format=format, correlation_ref=ref)
        except SessionError:
            self._requests[request_id] = ref
            raise

    def chunk(self, id):
        """The header of the next StreamChunk of capture `id` (REUSED Envelope), or None when the stream
        no longer takes chunks (the core ended or cancelled it) — never a chunk after end (R10.10-d)."""
        st = self._streams.get(id)
        if st is None or st.kind != _CAPTURE or st.state != _OPEN:
            return None
        env = self._chunk_env
        env.id = id
        env.stream_chunk.seq = st.seq
        st.seq += 1
        return env

    def _move(self, id, st, op):
        nxt = _T.get(_key(st.kind, st.state, op))
        if nxt is None:
            return False
        st.state = nxt
        if nxt == _DONE:
            self._retire(id)
        return True

    def _retire(self, id):
        self._streams.pop(id, None)
        self._cancelled[self._cancelled_i] = id
        self._cancelled_i = (self._cancelled_i + 1) % _RECENT_CANCELLED

    def end_capture(self, id, reason):
        """StreamEnd on our capture (PTT_RELEASE, COMPLETE); the id then waits for Response/Error."""
        st = self._streams.get(id)
        if st is None or st.kind != _CAPTURE or not self._move(id, st, _OUT_END):
            raise SessionError("NOT_OPEN", "capture %d is not streaming" % id)
        return pb.Envelope(id=id, stream_end=pb.StreamEnd(reason=reason))

    def cancel_capture(self, id, reason):
        """StreamCancel on our capture: the id is dead for both sides at once (R10.3-a)."""
        st = self._streams.get(id)
        if st is None or st.kind != _CAPTURE or not self._move(id, st, _OUT_CANCEL):
            raise SessionError("NOT_OPEN", "capture %d is not open" % id)
        return pb.Envelope(id=id, stream_cancel=pb.StreamCancel(reason=reason))

    def stop(self):
        """Stop: the stateless turn abort, with no id (spec §4.4)."""
        self._active()
        return pb.Envelope(id=0, stop=pb.Stop())

    def playback_done(self, id, frames):
        """PlaybackDone, the render's terminal (after its StreamEnd was played out, or after a cancel)."""
        st = self._streams.get(id)
        if st is not None:
            if st.kind != _RENDER or not self._move(id, st, _OUT_DONE):
                raise SessionError("NOT_ENDED", "render %d has not ended yet" % id)
        elif not self._recently_cancelled(id):
            raise SessionError("UNKNOWN_RENDER", "no render %d" % id)
        return pb.Envelope(id=id, playback_done=pb.PlaybackDone(frames=frames))

    def tool_result(self, id, content=(), is_error=False):
        return pb.Envelope(id=id, tool_result=pb.ToolResult(content=list(content), is_error=is_error))

    def setting_state(self, id, key, value):
        """SettingState: the answer on a SettingsWrite id, or with id 0 a spontaneous report (R8.2-f)."""
        if self.surface.setting(key) is None:
            raise SessionError("UNKNOWN_SETTING", "setting %r is not declared" % key)
        return pb.Envelope(id=id, setting_state=pb.SettingState(key=key, value=value))

    def event(self, event_id, metadata=""):
        """An Event notification (id 0) for a declared EventDescriptor."""
        self._active()
        found = False
        for e in self.surface.events:
            if e.id == event_id:
                found = True
        if not found:
            raise SessionError("UNKNOWN_EVENT", "event %r is not declared" % event_id)
        return pb.Envelope(id=0, event=pb.Event(id=event_id, metadata=metadata))

    def error(self, id, code, message=""):
        return pb.Envelope(id=id, error=pb.Error(code=code, message=message))

    def decline(self, id, code=1, message="busy"):
        """Error on a core request id; default UNAVAILABLE (a RequestCapture decline, R10.4-a)."""
        self._requests.pop(id, None)
        st = self._streams.get(id)
        if st is not None and st.kind != _CAPTURE:
            self._retire(id)   # a render or display stream we refuse: its stragglers are discarded
        return self.error(id, code, message)

    def ping(self, now_us):
        i = self._mint()
        self._pings[i] = now_us
        return pb.Envelope(id=i, ping=pb.Ping(t1=now_us))

    # ---- frames we receive -------------------------------------------------------------------------

    def outgoing(self):
        """The next reply the session queued while receiving (Error, PingResponse, ...), or None."""
        if self._out:
            return self._out.pop(0)
        return None

    def _reply_error(self, id, code, message):
        if id:  # R10.10-b: a frame with id 0 is a notification and is never answered
            self._out.append(pb.Envelope(id=id, error=pb.Error(code=code, message=message)))

    def _recently_cancelled(self, id):
        return id in self._cancelled

    def receive(self, env, now_us=0):
        """Handle one decoded Envelope from the core. Returns an event or None; replies are queued."""
        self.last_rx_us = now_us
        op = env.op
        id = env.id
        if op == "stream_chunk":   # the hot path first: no allocation
            return self._on_chunk(id, env.stream_chunk)
        if self.state == HELLO_SENT:
            if op == "hello_response":
                return self._on_hello_response(id, env.hello_response)
            if op == "ping":
                return self._on_ping(id, env.ping, now_us)
            raise ProtocolViolation("BEFORE_HELLO_RESPONSE", "core sent %s before its HelloResponse" % op)
        if self.state == CLOSED:
            return Ignored(id, op, "session closed")
        h = _HANDLERS.get(op)
        if h is None:
            # R2.2-b: an unknown arm (or one a core never sends) is not acted on; the session carries on.
            if op is None:
                return Ignored(id, getattr(env, "unknown_op", 0), "unknown operation")
            if id and (id & 1) == 0:
                self._reply_error(id, pb.ErrorCode.INVALID_REQUEST, "%s is not sent by a core" % op)
            return Ignored(id, op, "not a core operation")
        return h(self, id, getattr(env, op), now_us)

    def _on_hello_response(self, id, m):
        if m.result == "accepted":
            a = m.accepted
            self.state = ACTIVE
            self.peer_max_frame_bytes = a.max_frame_bytes or DEFAULT_MAX_FRAME_BYTES
            self.peer_max_streams = a.max_concurrent_streams or DEFAULT_MAX_STREAMS
            return Accepted(self.peer_max_frame_bytes, self.peer_max_streams, a.wire_version)
        self.state = CLOSED
        if m.result == "version_mismatch":
            v = m.version_mismatch
            return VersionMismatch(v.server_version, v.min_wire_version, v.message)
        if m.result == "rejected":
            return Rejected(m.rejected.reason, m.rejected.message)
        raise ProtocolViolation("BAD_HELLO_RESPONSE", "HelloResponse carries no known result")

    def _check_core_id(self, id, op):
        """Core-minted ids are even and non-zero (R6.3-a); otherwise answer INVALID_REQUEST."""
        if id == 0 or id & 1:
            self._reply_error(id, pb.ErrorCode.INVALID_REQUEST, "%s on id %d: core ids are even" % (op, id))
            return False
        return True

    def _on_chunk(self, id, m):
        st = self._streams.get(id)
        if st is None:
            if id in self._closed:
                self._reply_error(id, pb.ErrorCode.STREAM_CLOSED, "stream %d has ended" % id)
                return None
            if self._recently_cancelled(id):
                return None   # R10.3-b: stragglers on a cancelled id are discarded silently
            self._reply_error(id, pb.ErrorCode.UNKNOWN_STREAM, "no stream %d" % id)
            return None
        if st.kind == _CAPTURE:
            self._reply_error(id, pb.ErrorCode.INVALID_REQUEST, "stream %d is ours" % id)
            return None
        if st.state != _OPEN:
            self._reply_error(id, pb.ErrorCode.STREAM_CLOSED, "stream %d has ended" % id)
            return None
        ev = self._render_chunk
        seq = m.seq
        ev.gap = seq - st.seq if seq > st.seq else 0   # LOSSY_OK: gaps are tolerated (R10.10-c)
        st.seq = seq + 1
        ev.id = id
        ev.seq = seq
        return ev

    def _stream_op(self, id, op_code, name):
        st = self._streams.get(id)
        if st is None:
            if not self._recently_cancelled(id):
                if name != "stream_cancel":
                    self._reply_error(id, pb.ErrorCode.UNKNOWN_STREAM, "no stream %d" % id)
            return None, None
        if not self._move(id, st, op_code):
            return st, False
        return st, True

    def _on_stream_end(self, id, m, now_us):
        st, ok = self._stream_op(id, _IN_END, "stream_end")
        if st is None:
            return Ignored(id, "stream_end", "unknown or cancelled stream")
        if not ok:
            return Ignored(id, "stream_end", "stream already ended")
        if st.kind == _CAPTURE:
            return CaptureEnded(id, m.reason)   # the mic stops; the id waits for its terminal
        if st.kind == _DISPLAY:
            self._closed[self._closed_i] = id   # later chunks: STREAM_CLOSED (R10.10-d)
            self._closed_i = (self._closed_i + 1) % _RECENT_CANCELLED
            return DisplayEnded(id, False)
        return RenderEnded(id)

    def _on_stream_cancel(self, id, m, now_us):
        st, ok = self._stream_op(id, _IN_CANCEL, "stream_cancel")
        if st is None:
            return Ignored(id, "stream_cancel", "unknown or cancelled stream")
        if st.kind == _CAPTURE:
            return CaptureDone(id, False, cancelled=True, code=m.reason)
        if st.kind == _DISPLAY:
            return DisplayEnded(id, True)
        return RenderCancelled(id, m.reason)

    def _on_response(self, id, m, now_us):
        st = self._streams.get(id)
        if st is None or st.kind != _CAPTURE:
            return Ignored(id, "response", "no capture %d waiting" % id)
        self._move(id, st, _IN_RESPONSE)
        return CaptureDone(id, True)

    def _on_error(self, id, m, now_us):
        if id in self._pings:
            self._pings.pop(id)
            return Ignored(id, "error", "ping refused")
        st = self._streams.get(id)
        if st is not None and st.kind == _CAPTURE:
            self._move(id, st, _IN_ERROR)
            return CaptureDone(id, False, m.code, m.message)
        if st is not None and st.kind == _RENDER:
            self._retire(id)
            return RenderCancelled(id, pb.StreamReason.FAILED)
        if st is not None and st.kind == _DISPLAY:
            self._retire(id)
            return DisplayEnded(id, True)
        return Ignored(id, "error", "code %d on no open request: %s" % (m.code, m.message))

    def _on_ping(self, id, m, now_us):
        if id == 0:
            return Ignored(0, "ping", "notification")   # R10.10-b
        # R10.2-a: answer on the Ping's id; t2 on receipt and t3 on send — the same instant here, since
        # the reply is queued in the same call (the driver sends it right away).
        self._out.append(pb.Envelope(id=id, ping_response=pb.PingResponse(t1=m.t1, t2=now_us, t3=now_us)))
        return None

    def _on_ping_response(self, id, m, now_us):
        t1 = self._pings.pop(id, None)
        if t1 is None:
            return Ignored(id, "ping_response", "no such ping")
        t4 = now_us
        offset = ((m.t2 - t1) + (m.t3 - t4)) // 2
        rtt = (t4 - t1) - (m.t3 - m.t2)
        return ClockSync(offset, rtt)

    def _on_paired(self, id, m, now_us):
        return Paired()

    def _on_media_render_open(self, id, m, now_us):
        if not self._check_core_id(id, "media_render_open"):
            return None
        target = m.target or pb.CapabilityKind.CAPABILITY_SPEAKER
        cap = self.surface.capability(target)
        if cap is None:
            self._reply_error(id, pb.ErrorCode.CAPABILITY_MISSING, "no capability %d declared" % target)
            return None
        if id in self._streams:
            self._reply_error(id, pb.ErrorCode.INVALID_REQUEST, "id %d is already open" % id)
            return None
        limit = self.surface.max_concurrent_streams or DEFAULT_MAX_STREAMS
        if self.open_streams(_RENDER) + self.open_streams(_DISPLAY) >= limit:   # R10.3-c, on the new id
            self._reply_error(id, pb.ErrorCode.TOO_MANY_STREAMS, "at most %d render streams" % limit)
            return None
        declared = cap.speaker.format if cap.params == "speaker" else None
        f = m.format
        if declared is not None and f is not None and (
                f.encoding != declared.encoding or f.sample_rate != declared.sample_rate
                or f.channels != declared.channels):
            # Declared formats are exact (spec §8.2): a render in another format cannot be played.
            self._reply_error(id, pb.ErrorCode.INVALID_REQUEST, "render format differs from the declared one")
            return None
        self._streams[id] = _Stream(_RENDER, _OPEN)
        return RenderOpen(id, target, f or declared)

    def _on_request_capture(self, id, m, now_us):
        if not self._check_core_id(id, "request_capture"):
            return None
        need = pb.CapabilityKind.CAPABILITY_IMAGE_CAPTURE if m.image_source else pb.CapabilityKind.CAPABILITY_MIC
        if not self.surface.has(need):
            self._reply_error(id, pb.ErrorCode.CAPABILITY_MISSING, "capability %d not declared" % need)
            return None
        self._requests[id] = m.correlation_ref
        return CaptureRequested(id, m.correlation_ref, m.mode, m.image_source)

    def _on_invoke(self, id, m, now_us):
        if m.observe:
            # An observe copy is informational and never answered (spec §12); only with TOOL_ACTIVITY.
            return Ignored(id, "invoke", "observe copy")
        if not self._check_core_id(id, "invoke"):
            return None
        if self.surface.tool(m.name) is None:
            self._reply_error(id, pb.ErrorCode.CAPABILITY_MISSING, "no tool %r on this device" % m.name)
            return None
        return ToolCall(id, m.name, m.arguments)

    def _on_settings_write(self, id, m, now_us):
        if not self._check_core_id(id, "settings_write"):
            return None
        if self.surface.setting(m.key) is None:   # R8.2-f
            self._reply_error(id, pb.ErrorCode.CAPABILITY_MISSING, "no setting %r on this device" % m.key)
            return None
        return SettingWrite(id, m.key, m.value)

    def _on_pipeline_state(self, id, m, now_us):
        return Phase(m.phase, m.error_code)   # display only; the mic is untouched (R10.4.1-a)

    def _on_capture_ack(self, id, m, now_us):
        return CaptureAcked(id, m.stored)

    def _open_display(self, id, kind, op):
        """Checks common to TextRenderOpen and ImageRenderOpen; the declared capability or None (replied)."""
        if not self._check_core_id(id, op):
            return None
        cap = self.surface.capability(kind)
        if cap is None:
            self._reply_error(id, pb.ErrorCode.CAPABILITY_MISSING, "no capability %d declared" % kind)
            return None
        if id in self._streams:
            self._reply_error(id, pb.ErrorCode.INVALID_REQUEST, "id %d is already open" % id)
            return None
        limit = self.surface.max_concurrent_streams or DEFAULT_MAX_STREAMS
        if self.open_streams(_RENDER) + self.open_streams(_DISPLAY) >= limit:   # R10.3-c, on the new id
            self._reply_error(id, pb.ErrorCode.TOO_MANY_STREAMS, "at most %d render streams" % limit)
            return None
        return cap

    def _on_text_render_open(self, id, m, now_us):
        if self._open_display(id, pb.CapabilityKind.CAPABILITY_TEXT_DISPLAY, "text_render_open") is None:
            return None
        self._streams[id] = _Stream(_DISPLAY, _OPEN)
        return TextOpen(id, m.role)

    def _on_image_render_open(self, id, m, now_us):
        cap = self._open_display(id, pb.CapabilityKind.CAPABILITY_IMAGE_DISPLAY, "image_render_open")
        if cap is None:
            return None
        p = cap.image_display
        refuse = None
        if m.mime not in p.accepts:
            refuse = (pb.ErrorCode.INVALID_REQUEST, "image %s is not in accepts" % m.mime)
        elif not m.total_bytes:
            refuse = (pb.ErrorCode.INVALID_REQUEST, "total_bytes is 0")
        elif m.total_bytes > p.max_image_bytes:
            # Checked before any buffer is sized from it (spec §10.5: an Error if it cannot be allocated).
            refuse = (pb.ErrorCode.RESOURCE_EXHAUSTED, "image of %d bytes is over max_image_bytes %d"
                      % (m.total_bytes, p.max_image_bytes))
        if refuse is not None:
            self._reply_error(id, refuse[0], refuse[1])
            self._retire(id)          # the chunks already in flight are discarded silently
            return None
        self._streams[id] = _Stream(_DISPLAY, _OPEN)
        return ImageOpen(id, m.mime, m.total_bytes)

    def _on_render(self, id, m, now_us):
        if not self._check_core_id(id, "render"):
            return None
        if m.target not in _SHOWN or self.surface.capability(m.target) is None:
            self._reply_error(id, pb.ErrorCode.CAPABILITY_MISSING, "no display %d declared" % m.target)
            return None
        return Show(id, m.target, m.content)

    def _on_undeclared_render(self, id, m, now_us):
        # MediaControl: our boards declare no media sink. A core must not send it (R10.10-e); if one
        # does, say so on its id.
        self._reply_error(id, pb.ErrorCode.CAPABILITY_MISSING, "no media sink declared")
        return None


# The surfaces a Render may target that this firmware can declare (HTML_DISPLAY never: R10.5-b).
_SHOWN = (pb.CapabilityKind.CAPABILITY_TEXT_DISPLAY, pb.CapabilityKind.CAPABILITY_IMAGE_DISPLAY)

_HANDLERS = {
    "error": Session._on_error,
    "ping": Session._on_ping,
    "ping_response": Session._on_ping_response,
    "paired": Session._on_paired,
    "stream_end": Session._on_stream_end,
    "stream_cancel": Session._on_stream_cancel,
    "media_render_open": Session._on_media_render_open,
    "request_capture": Session._on_request_capture,
    "invoke": Session._on_invoke,
    "settings_write": Session._on_settings_write,
    "pipeline_state": Session._on_pipeline_state,
    "capture_ack": Session._on_capture_ack,
    "response": Session._on_response,
    "text_render_open": Session._on_text_render_open,
    "image_render_open": Session._on_image_render_open,
    "render": Session._on_render,
    "media_control": Session._on_undeclared_render,
}
