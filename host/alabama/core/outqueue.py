"""The frames a core session has queued for its writer: two lanes, and the checks on every frame queued.

Responsible for turning an Envelope (+ tail) into a frame under the right limit (the handshake ceiling before
the Hello answer, the satellite's max_frame_bytes after, R6.1-b), the send-path guard of R10.4-c, the control
lane ahead of the bulk lane (R10.1-a), the slow-reader shed (R10.1-b), the Error frame (``_error``) and the
frame counts of the report. Not for: deciding what to send (inbound.py, outbound.py) or writing it (the
driver calls ``next_frame``). ``OutQueue`` is one part of ``session.CoreSession``: methods only, on the state
its ``__init__`` sets up.
"""
import logging

from alabama.v1 import envelope_pb2
from alabama.wire import frame as wire

from .errors import LocalProtocolError
from .sessiondefs import E, PHASE_CLOSED, PHASE_HELLO, error_name, flog


class OutQueue:
    """The outgoing queue (see the module docstring)."""

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
            name = error_name(env.error.code)
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
                          "satellite's max_frame_bytes %d" % (E.Name(code), id_, self.surface.max_frame_bytes),
                          id_, "error")
            self.close("the satellite's max_frame_bytes %d is too small for the core's answers"
                       % self.surface.max_frame_bytes)


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

