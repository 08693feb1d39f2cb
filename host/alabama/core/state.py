"""Lifecycle of every id on a connection, as one transition table (spec §6.3, §10.3, §10.8).

Rules for this module: it holds states, events and the table only — no protobuf, no I/O, no error
frames. ``step(kind, state, who, event)`` returns the next state or raises ``KeyError`` when the
table has no entry; the session decides what a missing entry costs (an Error frame, a silent
discard, a report entry). Drivers never set a state by hand.
"""

# Who acts.
SAT = "sat"
CORE = "core"

# What happens on an id.
CHUNK = "chunk"          # StreamChunk
END = "end"              # StreamEnd
CANCEL = "cancel"        # StreamCancel (its own terminal, spec §10.3)
TERMINAL = "terminal"    # Response / Error / PlaybackDone / ToolResult / SettingState / the echoing CaptureOpen
ACK = "ack"              # CaptureAck (core, DEFERRED captures)

# States.
OPEN = "OPEN"            # stream open: chunks flow, counts against max_concurrent_streams
ENDED = "ENDED"          # stream ended, the id still awaits its terminal (spec §6.3: "the stream is a phase of the id")
CANCELLED = "CANCELLED"  # render cancelled by the core; its PlaybackDone may still come (spec §4.3)
PENDING = "PENDING"      # a request without a stream, awaiting its terminal
DONE = "DONE"            # retired

# Kinds of id, by the operation that minted it.
CAPTURE = "CaptureOpen"              # satellite → core; terminal Response/Error from the core
UPLOAD = "UploadOpen"                # satellite → core; no positive terminal, ends at StreamEnd
TEXT_INPUT = "TextInput"             # satellite → core; terminal Response/Error from the core
MEDIA_RENDER = "MediaRenderOpen"     # core → satellite; terminal PlaybackDone/Error from the satellite
TEXT_RENDER = "TextRenderOpen"       # core → satellite; fire-and-forward, ends at StreamEnd
IMAGE_RENDER = "ImageRenderOpen"     # core → satellite; fire-and-forward, ends at StreamEnd
INVOKE = "Invoke"                    # core → satellite; terminal ToolResult/Error
SETTINGS_WRITE = "SettingsWrite"     # core → satellite; terminal SettingState/Error
REQUEST_CAPTURE = "RequestCapture"   # core → satellite; terminal echoing CaptureOpen/Response/Error
PING = "Ping"                        # core → satellite; terminal PingResponse

#: The stream kinds and the side that opens them (who counts them against whose limit, spec §10.3).
STREAM_OPENER = {CAPTURE: SAT, UPLOAD: SAT, MEDIA_RENDER: CORE, TEXT_RENDER: CORE, IMAGE_RENDER: CORE}

#: The first state of each kind.
INITIAL = {CAPTURE: OPEN, UPLOAD: OPEN, TEXT_INPUT: PENDING, MEDIA_RENDER: OPEN, TEXT_RENDER: OPEN,
           IMAGE_RENDER: OPEN, INVOKE: PENDING, SETTINGS_WRITE: PENDING, REQUEST_CAPTURE: PENDING, PING: PENDING}

_CORE_REQUEST = {PENDING: {(SAT, TERMINAL): DONE}}

#: {kind: {state: {(who, event): next_state}}}. A missing entry is a protocol violation.
TABLE = {
    CAPTURE: {
        OPEN: {(SAT, CHUNK): OPEN, (SAT, END): ENDED, (CORE, END): ENDED, (CORE, ACK): OPEN,
               (SAT, CANCEL): DONE, (CORE, CANCEL): DONE, (CORE, TERMINAL): DONE},
        # (SAT, END) after the core's END_DETECTED: the satellite confirming the mic closed; harmless.
        ENDED: {(CORE, ACK): ENDED, (CORE, TERMINAL): DONE, (SAT, CANCEL): DONE, (CORE, CANCEL): DONE,
                (SAT, END): ENDED},
    },
    UPLOAD: {
        OPEN: {(SAT, CHUNK): OPEN, (SAT, END): DONE, (SAT, CANCEL): DONE, (CORE, CANCEL): DONE,
               (CORE, TERMINAL): DONE},
    },
    TEXT_INPUT: {PENDING: {(CORE, TERMINAL): DONE}},
    MEDIA_RENDER: {
        OPEN: {(CORE, CHUNK): OPEN, (CORE, END): ENDED, (CORE, CANCEL): CANCELLED, (SAT, CANCEL): CANCELLED,
               (SAT, TERMINAL): DONE},
        ENDED: {(SAT, TERMINAL): DONE, (CORE, CANCEL): CANCELLED, (SAT, CANCEL): CANCELLED},
        CANCELLED: {(SAT, TERMINAL): DONE},
    },
    TEXT_RENDER: {
        OPEN: {(CORE, CHUNK): OPEN, (CORE, END): DONE, (CORE, CANCEL): DONE, (SAT, CANCEL): DONE,
               (SAT, TERMINAL): DONE},
    },
    IMAGE_RENDER: {
        OPEN: {(CORE, CHUNK): OPEN, (CORE, END): DONE, (CORE, CANCEL): DONE, (SAT, CANCEL): DONE,
               (SAT, TERMINAL): DONE},
    },
    INVOKE: _CORE_REQUEST,
    SETTINGS_WRITE: _CORE_REQUEST,
    REQUEST_CAPTURE: _CORE_REQUEST,
    PING: _CORE_REQUEST,
}


def step(kind, state, who, event):
    """The next state, or KeyError when the table forbids (who, event) in this state."""
    return TABLE[kind][state][(who, event)]


def counts(kind, state):
    """Does an id of this kind in this state count against its opener's peer's stream limit?"""
    return kind in STREAM_OPENER and state == OPEN


class Slot:
    """The book-keeping of one live id: its kind, state and the facts the rules need."""

    __slots__ = ("id", "kind", "state", "next_seq", "ended_by", "ended_at", "cancelled_by", "cancelled_at",
                 "opened_at", "reliable", "meta", "late_frames", "errored")

    def __init__(self, id_, kind, now, reliable=True, meta=None):
        self.id = id_
        self.kind = kind
        self.state = INITIAL[kind]
        self.next_seq = 0
        self.ended_by = None
        self.ended_at = None
        self.cancelled_by = None
        self.cancelled_at = None
        self.opened_at = now
        self.reliable = reliable
        self.meta = meta if meta is not None else {}
        self.late_frames = 0
        self.errored = False

    def apply(self, who, event, now):
        """Move along the table (raises KeyError when forbidden) and remember who ended/cancelled."""
        nxt = step(self.kind, self.state, who, event)
        if event == END and self.ended_by is None:
            self.ended_by, self.ended_at = who, now
        if event == CANCEL and self.cancelled_by is None:
            self.cancelled_by, self.cancelled_at = who, now
        self.state = nxt
        return nxt
