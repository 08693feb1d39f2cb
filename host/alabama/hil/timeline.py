"""The frame timeline of one scenario: every frame both ways, as the spec's §4 listings show them.

Responsible for turning plaintext frames (Envelope header + raw tail) into timeline rows
(time, direction, op, id, seq, header/tail sizes, a one-line summary of the operation's fields) and
for notes (connect, silence, button presses) between them. It decodes with the host pb2 classes and
never touches a socket; the core driver feeds it (``hil.corehost``).
"""
import threading
import time

from google.protobuf.message import DecodeError

from alabama.v1 import envelope_pb2
from alabama.wire import frame as wire

SAT_TO_CORE = "sat->core"
CORE_TO_SAT = "core->sat"
NOTE = "note"

#: The spec's operation names (§4 listings use the message names, not the snake_case arm names).
OP_TITLES = {f.name: f.message_type.name for f in envelope_pb2.Envelope.DESCRIPTOR.oneofs_by_name["op"].fields}
#: Known arm numbers: a frame whose arm is none of these carries an unknown (newer) operation.
KNOWN_ARMS = {f.number for f in envelope_pb2.Envelope.DESCRIPTOR.oneofs_by_name["op"].fields}
#: Summaries never grow past this many characters (a Hello declares a lot).
MAX_SUMMARY = 160


class FrameEvent:
    """One row: a frame (``op`` set) or a note (``dir == NOTE``). ``t`` is seconds since the scenario began."""

    __slots__ = ("t", "dir", "op", "id", "seq", "header", "tail", "summary", "session", "env", "data")

    def __init__(self, t, dir_, op, id_=0, seq=None, header=0, tail=0, summary="", session="", env=None, data=None):
        self.t, self.dir, self.op, self.id, self.seq = t, dir_, op, id_, seq
        self.header, self.tail, self.summary, self.session = header, tail, summary, session
        self.env, self.data = env, data

    @property
    def title(self):
        return OP_TITLES.get(self.op, self.op)

    def as_dict(self):
        return {"t": round(self.t, 6), "dir": self.dir, "op": self.op, "title": self.title, "id": self.id,
                "seq": self.seq, "header": self.header, "tail": self.tail, "summary": self.summary,
                "session": self.session}

    def __repr__(self):
        return "<%.3f %s %s id=%s seq=%s %s>" % (self.t, self.dir, self.op, self.id, self.seq, self.summary)


def _enum_name(field, value):
    ev = field.enum_type.values_by_number.get(value)
    return ev.name if ev is not None else str(value)


def summarize(msg, depth=0):
    """A compact one-line rendering of a message's set fields: enums by name, bytes by size."""
    parts = []
    for field, value in msg.ListFields():
        if field.is_repeated:
            if field.message_type is not None:
                items = [summarize(v, depth + 1) if depth < 1 else "{...}" for v in value]
            elif field.enum_type is not None:
                items = [_enum_name(field, v) for v in value]
            else:
                items = [repr(v) for v in value]
            parts.append("%s [%s]" % (field.name, ", ".join(items)))
        elif field.message_type is not None:
            parts.append("%s {%s}" % (field.name, summarize(value, depth + 1) if depth < 2 else "..."))
        elif field.enum_type is not None:
            parts.append(_enum_name(field, value))
        elif field.type == field.TYPE_BYTES:
            parts.append("%s [%d B]" % (field.name, len(value)))
        elif field.type == field.TYPE_STRING:
            s = value if len(value) <= 40 else value[:37] + "..."
            parts.append("%s %r" % (field.name, s))
        else:
            parts.append("%s %s" % (field.name, value))
    if depth == 0:
        # proto3 drops a zero enum: name it when zero means something (IDLE, LIVE), as the spec's listings do
        listed = {f.name for f, _ in msg.ListFields()}
        for field in msg.DESCRIPTOR.fields:
            if (field.enum_type is not None and not field.is_repeated and field.name not in listed
                    and field.containing_oneof is None):
                zero = field.enum_type.values_by_number.get(0)
                if zero is not None and not zero.name.endswith("UNSPECIFIED"):
                    parts.append(zero.name)
    out = ", ".join(parts)
    return out if len(out) <= MAX_SUMMARY else out[:MAX_SUMMARY - 3] + "..."


def unknown_arm(header):
    """The field number of the first top-level field the schema does not know, or None."""
    pos, n = 0, len(header)
    try:
        while pos < n:
            key, pos = _varint(header, pos)
            num, wt = key >> 3, key & 7
            if num != 1 and num not in KNOWN_ARMS:
                return num
            if wt == 0:
                _, pos = _varint(header, pos)
            elif wt == 1:
                pos += 8
            elif wt == 2:
                ln, pos = _varint(header, pos)
                pos += ln
            elif wt == 5:
                pos += 4
            else:
                return None
    except IndexError:
        return None
    return None


def _varint(buf, pos):
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _has_unknown(msg):
    try:
        from google.protobuf import unknown_fields
        return len(unknown_fields.UnknownFieldSet(msg)) > 0
    except (ImportError, TypeError):
        return False


def describe(header, tail_len, keep_env=False):
    """(op, id, seq, summary, env) of one Envelope header."""
    env = envelope_pb2.Envelope()
    try:
        env.ParseFromString(bytes(header))
    except DecodeError as e:
        return "undecodable", 0, None, "Envelope does not decode: %s" % e, None
    op = env.WhichOneof("op")
    if op is None:
        arm = unknown_arm(bytes(header))
        return ("unknown_arm", env.id, None, "unknown Envelope arm %s" % arm if arm else "no operation",
                env if keep_env else None)
    msg = getattr(env, op)
    seq = msg.seq if op == "stream_chunk" else None
    summary = summarize(msg)
    if op == "stream_chunk":
        summary = ("seq %d" % msg.seq) + (" +%d B" % tail_len if tail_len else "")
    if _has_unknown(env) or _has_unknown(msg):
        summary += " (+unknown fields)"
    return op, env.id, seq, summary, env if keep_env else None


class Timeline:
    """The rows of one scenario, appended from the core's thread and read from the test's (thread-safe)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.t0 = clock()
        self.events = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        #: fn(event) called for every row as it is added, on the adding thread (frames: the core's loop
        #: thread, before a core -> sat frame is encrypted and written); keep them short, never raise.
        self.listeners = []

    def now(self):
        return self.clock() - self.t0

    def add(self, ev):
        with self._cond:
            self.events.append(ev)
            self._cond.notify_all()
        for fn in list(self.listeners):
            fn(ev)
        return ev

    def note(self, text, session=""):
        return self.add(FrameEvent(self.now(), NOTE, "note", summary=text, session=session))

    def frame(self, dir_, header, tail=b"", session="", t=None):
        op, id_, seq, summary, env = describe(header, len(tail), keep_env=True)
        data = bytes(tail) if (op == "stream_chunk" and tail) else None
        return self.add(FrameEvent(self.now() if t is None else t, dir_, op, id_, seq, len(header), len(tail),
                                   summary, session, env, data))

    # ------------------------------------------------------------------ queries (test thread)
    def snapshot(self):
        with self._lock:
            return list(self.events)

    def mark(self):
        """An index to search from (frames before it are ignored by ``wait(..., after=mark)``)."""
        with self._lock:
            return len(self.events)

    def find(self, dir_=None, op=None, id_=None, after=0, pred=None):
        with self._lock:
            evs = self.events[after:]
        return [e for e in evs if (dir_ is None or e.dir == dir_) and (op is None or e.op == op)
                and (id_ is None or e.id == id_) and (pred is None or pred(e))]

    def first(self, dir_=None, op=None, id_=None, after=0, pred=None):
        found = self.find(dir_, op, id_, after, pred)
        return found[0] if found else None

    def wait(self, dir_=None, op=None, id_=None, after=0, pred=None, timeout=10.0):
        """The first matching row at or after index ``after``; None when none came within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        pos = after
        with self._cond:
            while True:
                while pos < len(self.events):
                    e = self.events[pos]
                    pos += 1
                    if ((dir_ is None or e.dir == dir_) and (op is None or e.op == op)
                            and (id_ is None or e.id == id_) and (pred is None or pred(e))):
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def index_of(self, ev):
        with self._lock:
            for i, e in enumerate(self.events):
                if e is ev:
                    return i
        return -1

    def rows(self):
        return [e.as_dict() for e in self.snapshot()]


class StreamRecorder:
    """Re-frames one direction's plaintext (any split) into timeline rows; oversize frames are rows too."""

    def __init__(self, timeline, dir_, session):
        self.timeline, self.dir, self.session = timeline, dir_, session
        self.decoder = wire.FrameDecoder(1 << 24)
        self.decoder.set_limit(1 << 24)     # a recorder sees everything; the peers enforce the limits
        self.broken = False

    def feed(self, data):
        if self.broken:
            return
        try:
            self.decoder.feed(data)
            for ev in self.decoder:
                if isinstance(ev, wire.Oversize):
                    self.timeline.add(FrameEvent(self.timeline.now(), self.dir, "oversize", 0, None,
                                                 len(ev.header), ev.total_len, "frame of total_len %d" % ev.total_len,
                                                 self.session))
                else:
                    self.timeline.frame(self.dir, ev.header, ev.tail, self.session)
        except wire.FrameError as e:
            self.broken = True
            self.timeline.note("unparseable %s stream: %s" % (self.dir, e), self.session)


LIVENESS_OPS = ("ping", "ping_response")


def collapse(rows, keep=2):
    """Rows for display: runs of StreamChunks on one id in one direction shortened to their first
    ``keep`` chunks, a ``⋯`` row (count, seq range, bytes, duration) and the last chunk; long runs of
    Ping/PingResponse (liveness chatter) shortened the same way."""
    out = []
    i, n = 0, len(rows)
    while i < n:
        r = rows[i]
        if r["op"] in LIVENESS_OPS:
            j = i
            while j < n and rows[j]["op"] in LIVENESS_OPS:
                j += 1
            if j - i > 2 * keep:
                run = rows[i:j]
                out.extend(run[:keep])
                out.append({"t": run[keep]["t"], "dir": "note", "op": "...", "title": "\u22ef", "id": 0, "seq": None,
                            "header": 0, "tail": 0, "session": r.get("session", ""),
                            "summary": "%d Ping/PingResponse frames over %.1f s" % (j - i - 2 * keep,
                                                                                  run[-keep - 1]["t"] - run[keep]["t"])})
                out.extend(run[-keep:])
            else:
                out.extend(rows[i:j])
            i = j
            continue
        if r["op"] != "stream_chunk":
            out.append(r)
            i += 1
            continue
        j = i
        while j < n and rows[j]["op"] == "stream_chunk" and rows[j]["dir"] == r["dir"] and rows[j]["id"] == r["id"]:
            j += 1
        run = rows[i:j]
        if len(run) <= keep + 2:
            out.extend(run)
        else:
            out.extend(run[:keep])
            mid = run[keep:-1]
            out.append({"t": mid[0]["t"], "dir": r["dir"], "op": "...", "title": "\u22ef", "id": r["id"],
                        "seq": None, "header": sum(m["header"] for m in mid), "tail": sum(m["tail"] for m in mid),
                        "summary": "%d more chunks, seq %s-%s, %d B over %.0f ms"
                                   % (len(mid), mid[0]["seq"], mid[-1]["seq"], sum(m["tail"] for m in mid),
                                      1000 * (mid[-1]["t"] - mid[0]["t"])),
                        "session": r.get("session", "")})
            out.append(run[-1])
        i = j
    return out
