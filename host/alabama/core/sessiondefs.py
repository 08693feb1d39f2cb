"""The names every part of the core session shares: its phases, its limits, the admission answer.

Responsible for the constants of one core connection (phases, timeouts, bounds, the ops only the core sends),
the ``Admission`` record the admission callable returns, and the session's two loggers; kept below
session.py, inbound.py, outbound.py and outqueue.py so that none of them imports another for a name. Not
for: behaviour (``session.CoreSession`` and its parts act; drivers read these names as ``session.X``).
"""
import logging

from alabama.v1 import operations_pb2 as ops
from alabama.wire import frame as wire

#: The session's logger and its per-frame logger (``-vv``); log readers match these names.
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

#: The wire's error codes (``Error.code``).
E = ops.ErrorCode
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


def error_name(code):
    """The name of an ``ErrorCode`` (``ERROR_<n>`` for a code this schema does not know)."""
    try:
        return ops.ErrorCode.Name(code)
    except ValueError:
        return "ERROR_%d" % code
