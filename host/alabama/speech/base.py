"""What every speech engine shares: the one error they raise, the text limit, and the board's audio format.

Responsible for ``EngineError``, ``MAX_TEXT``/``check_text``, ``Utterance`` (a recogniser's bounded buffer) and
bringing any engine's PCM to the board's format
(16 kHz s16le mono, by the wyoming package's converter). It sits below engines.py (the flag -> engine factory and
the embedded engines) and wyoming_io.py (the Wyoming clients), which both import it, so the arrows run one way.
Must not choose or open an engine.
"""
from ..errors import AlabamaError
from . import CHANNELS, SAMPLE_RATE, SAMPLE_WIDTH

MAX_TEXT = 2000          # characters one synthesize() speaks: a reply, not a book (longer text is refused)


class EngineError(AlabamaError):
    """A speech engine failed: a remote server is unreachable, went away mid-turn, timed out or answered
    something that is not Wyoming, or the embedded engine's program is missing. ``str()`` is one line
    naming the engine (the server's URI) and what to do; the turn ends, the core keeps serving.

    ``what`` is what failed and ``hint`` (may be "") what to do, kept apart so that a caller with advice of its own
    (the core at start) says ``what`` with it, instead of cutting the hint off the text."""

    def __init__(self, what, hint=""):
        super().__init__("%s: %s" % (what, hint) if hint else what)
        self.what, self.hint = what, hint

    def __reduce__(self):                   # pickled whole (a worker process's error), both parts kept
        return self.__class__, (self.what, self.hint)


class Utterance:
    """One utterance's PCM as it streams in (16 kHz s16le mono, chunks of any length): whole samples only (an odd
    byte waits for its pair), at most ``max_bytes`` kept; past it nothing more is kept and ``truncated`` is set."""

    def __init__(self, max_bytes):
        self.max_bytes = int(max_bytes) & ~1
        self.clear()

    def clear(self):
        self.pcm = bytearray()
        self._carry = b""
        self.truncated = False

    def add(self, data):
        data = self._carry + bytes(data)
        even = len(data) & ~1
        self._carry = data[even:]
        room = self.max_bytes - len(self.pcm)
        if even > room:
            self.truncated = True
            even = max(room, 0)
        if even:
            self.pcm += data[:even]


def to_board_pcm(audio, rate, width, channels, converter=None):
    """PCM in any rate/width/channels -> 16 kHz s16le mono, by the wyoming package's converter (audioop's
    ratecv). Pass the same ``converter`` for consecutive pieces of one stream (the resampler keeps state)."""
    conv = converter or board_converter()
    from wyoming.audio import AudioChunk
    return conv.convert(AudioChunk(rate=rate, width=width, channels=channels, audio=bytes(audio))).audio


def board_converter():
    """The wyoming package's converter to the board's format. wyoming is imported here, not at module level: the
    core imports this module with the echo brain too, where [speech] may not be installed (alabama.extras)."""
    from .. import extras
    extras.need("wyoming", "the speech layer (converting audio to the board's format)")
    from wyoming.audio import AudioChunkConverter
    return AudioChunkConverter(rate=SAMPLE_RATE, width=SAMPLE_WIDTH, channels=CHANNELS)


def check_text(text, engine):
    if len(text) > MAX_TEXT:
        raise EngineError("%s: %d characters to speak, the limit is %d; shorten the reply"
                          % (engine, len(text), MAX_TEXT))
    return text
