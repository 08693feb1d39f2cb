"""The one error hierarchy of the host tools: every error says what failed and what to do next."""


class AlabamaError(Exception):
    """Base class. ``str(e)`` is one line a person can act on; the CLI prints it and exits 1."""

    exit_code = 1


class UsageError(AlabamaError):
    """The command line or a file the user gave is wrong."""

    exit_code = 2
