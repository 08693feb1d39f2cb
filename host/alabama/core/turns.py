"""What a brain is handed and what it answers: ``Turn`` and ``Reply`` (the pipeline's brain interface).

Responsible for the two plain records every brain shares, kept below the pipeline and the brains
(core/pipeline.py, core/hearing.py, the HIL steps) so none of them imports another for them. Not for: any
behaviour (the pipeline runs turns, the brains answer them).
"""

#: Longest Response text block carrying the transcript (a Response must fit the board's max_frame_bytes).
MAX_TRANSCRIPT_CHARS = 400


class Turn:
    """What the brain gets: the captured audio (s16le) with its format, or a text input; ``heard``: the
    Transcript of a recogniser the pipeline fed while the capture streamed (a hearing brain's), else None;
    ``tools``/``tool_schemas``: the device tools offered to the assistant (none for a guest) and their
    input_schema; ``invoke(name, arguments_json)``: an awaitable Invoke on this device (-> ToolResult, raises
    CoreError/TimeoutError); ``later(delay_s, text)``: say ``text`` on this device after ``delay_s``."""

    def __init__(self, id_, audio=b"", rate=16000, channels=1, text="", device_id=None, trigger=0, heard=None,
                 tools=(), tool_schemas=None, invoke=None, later=None):
        self.id, self.audio, self.rate, self.channels = id_, audio, rate, channels
        self.text, self.device_id, self.trigger = text, device_id, trigger
        self.heard, self.tools, self.tool_schemas = heard, tuple(tools), tool_schemas or {}
        self.invoke, self.later = invoke, later


class Reply:
    """The brain's answer: audio (s16le at rate/channels) and/or text; a hearing brain adds what it
    understood: ``transcript`` (str), ``intent`` (speech.intents.Intent, None when not understood) and its
    ``confidence``; the pipeline logs them and puts them in the Response."""

    def __init__(self, audio=b"", rate=16000, channels=1, text="", transcript=None, intent=None, confidence=None):
        self.audio, self.rate, self.channels, self.text = audio, rate, channels, text
        self.transcript, self.intent, self.confidence = transcript, intent, confidence
