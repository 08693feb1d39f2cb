"""The conformance checker's output: every rule a satellite broke on one session, machine-readable.

Responsible for recording violations (loudly, in the log) and serialising the per-session report the
HIL bench asserts on (format documented in docs/core.md). The checks themselves live in the session,
which sees every frame; this module never inspects frames.
"""
import json
import logging
import time

log = logging.getLogger("alabama.core.conformance")

#: Report format version (bump when a field changes meaning).
REPORT_FORMAT = 1
#: A misbehaving peer cannot grow the report without bound: later violations are only counted.
MAX_VIOLATIONS = 256


class Violation:
    __slots__ = ("rule", "check", "detail", "frame", "id", "op", "t")

    def __init__(self, rule, check, detail, frame, id_, op, t):
        self.rule, self.check, self.detail = rule, check, detail
        self.frame, self.id, self.op, self.t = frame, id_, op, t

    def as_dict(self):
        return {"rule": self.rule, "check": self.check, "detail": self.detail, "frame": self.frame,
                "id": self.id, "op": self.op, "t": round(self.t, 6)}


class Report:
    """Per-session conformance report. ``clean`` is True when no rule was broken."""

    def __init__(self, session_id="", peer=""):
        self.session_id = session_id
        self.peer = peer
        self.device_id = None
        self.display_name = ""
        self.pattern = None
        self.admission = None
        self.started = time.time()
        self.ended = None
        self.close_reason = None
        self.frames_in = 0
        self.frames_out = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.errors_sent = {}       # ErrorCode name -> count
        self.violations = []
        self.dropped = 0
        self.deferred = []          # one dict per DEFERRED recording completed here (pipeline._spoken_at)
        self.connection_lost = None  # why the link ended under the session (a cut mid-message), not a violation

    @property
    def clean(self):
        return not self.violations and not self.dropped

    def add(self, rule, check, detail, frame=None, id_=None, op=None):
        if len(self.violations) >= MAX_VIOLATIONS:
            self.dropped += 1
            return
        v = Violation(rule, check, detail, frame if frame is not None else self.frames_in, id_, op,
                      time.time() - self.started)
        self.violations.append(v)
        log.warning("CONFORMANCE %s %s [%s id=%s op=%s frame=%s]: %s", self.device_id or self.peer,
                    rule, check, id_, op, v.frame, detail)

    def rules(self):
        """The set of requirement IDs broken (handy in tests)."""
        return {v.rule for v in self.violations}

    def checks(self):
        return {v.check for v in self.violations}

    def as_dict(self):
        return {
            "format": REPORT_FORMAT,
            "session": self.session_id,
            "peer": self.peer,
            "device_id": self.device_id,
            "display_name": self.display_name,
            "noise_pattern": self.pattern,
            "admission": self.admission,
            "started": self.started,
            "ended": self.ended,
            "close_reason": self.close_reason,
            "frames_in": self.frames_in,
            "frames_out": self.frames_out,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "errors_sent": dict(self.errors_sent),
            "clean": self.clean,
            "violations": [v.as_dict() for v in self.violations],
            "violations_dropped": self.dropped,
            "deferred": list(self.deferred),
            "connection_lost": self.connection_lost,
        }

    def to_json(self):
        return json.dumps(self.as_dict(), indent=1, sort_keys=True)
