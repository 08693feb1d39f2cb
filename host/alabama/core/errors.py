"""Typed errors of the reference core: what we did wrong (local) versus what the satellite did (remote).

A ``LocalProtocolError`` means the caller of the core (the pipeline, a test, the CLI) asked for something
the wire forbids — e.g. a render to a surface the device never declared. It is raised, never sent.
What the satellite does wrong is never an exception: the session turns it into an Error frame and/or a
conformance report entry (``conformance.Report``, keyed by requirement ID), and the connection goes on.
"""
from ..errors import AlabamaError


class CoreError(AlabamaError):
    """Base of the core's errors. ``code`` names the failure for callers that match on it."""

    code = "CORE"

    def __init__(self, msg, code=None):
        super().__init__(msg)
        if code is not None:
            self.code = code


class LocalProtocolError(CoreError):
    """The core was asked to send something the protocol forbids (a bug in the caller)."""

    code = "LOCAL_PROTOCOL"


class RequestFailed(CoreError):
    """A core-initiated request (Invoke, SettingsWrite, RequestCapture) ended in the satellite's Error."""

    def __init__(self, msg, code, error_message=""):
        super().__init__(msg, code)
        self.error_message = error_message


class NotConnected(CoreError):
    """The device has no live session (start the satellite, or check `alabama core devices`)."""

    code = "NOT_CONNECTED"
