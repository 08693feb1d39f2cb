"""What a core session reports to its driver: one class per event (``CoreSession.take_events``/``receive_*``).

Responsible for the event types and nothing else: plain attribute bags the session fills and the connection,
the pipeline and the tests read. Kept apart from session.py so that readers of events need not load the session.
"""


def shown(value):
    """VALUE as one line of a log: a protobuf message in text format on one line (its own repr is text_format's
    multi-line form: a wall at INFO), anything else as repr."""
    from google.protobuf import message, text_format
    if isinstance(value, message.Message):
        return "%s{%s}" % (type(value).__name__, text_format.MessageToString(value, as_one_line=True))
    return repr(value)


class Event:
    """Something the pipeline/registry should know about. Attributes depend on the class."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%s" % (k, shown(v)) for k, v in
                                                         sorted(self.__dict__.items()) if k != "data"))


class HelloAccepted(Event): pass          # surface, admission
class HelloRefused(Event): pass           # why: "version" | "closed"
class CaptureOpened(Event): pass          # id, open (CaptureOpen), request_id (RequestCapture R or None)
class ChunkReceived(Event):               # id, seq, data, capture_ts, kind
    def __init__(self, id, seq, data, capture_ts, kind):   # noqa: A002 — the per-frame event: no **kw
        self.id, self.seq, self.data, self.capture_ts, self.kind = id, seq, data, capture_ts, kind
class StreamEnded(Event): pass            # id, reason, kind
class StreamCancelled(Event): pass        # id, reason, kind, by
class UploadCompleted(Event): pass        # id, mime, data
class TerminalReceived(Event): pass       # id, kind, op ("tool_result"...), msg, error (Error msg or None)
class PlaybackDone(Event): pass           # id, frames
class TextInputReceived(Event): pass      # id, msg
class EventReceived(Event): pass          # id, msg
class SettingReported(Event): pass        # key, value (spontaneous SettingState)
class StopReceived(Event): pass
class PresenceReceived(Event): pass       # msg
class PingRound(Event): pass              # id, offset_us, rtt_us
class CloseConnection(Event): pass        # reason
