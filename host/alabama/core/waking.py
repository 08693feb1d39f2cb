"""The ambient-wake path of one connection as one transition table (docs/core.md, "Ambient wake phrase").

Responsible for: where a wake is (spotting; woken: RequestCapture out, the ambient capture still streaming;
waiting: the ambient capture superseded before the requested one opened; its turn running), the audio heard
after the hit until a capture takes it (bounded), and cutting the wake phrase's tail off the front of that
audio. Everything that affects this state machine lives here (h11's rule; core/state.py does the same for
ids): the pipeline hands events in and does what the answers say. Not for: I/O, the session, the spotter,
the endpointer. ``step(state, event)`` raises KeyError where the table has no entry; ``Waking`` ignores
events that do not concern its wake (another capture's id, a stale request).
"""
from ..audio import rms

# States (one wake at a time per connection: a hit outside SPOTTING is ignored).
SPOTTING = "SPOTTING"    # ambient audio goes to the spotter
WOKEN = "WOKEN"          # hit: RequestCapture out; the ambient capture's audio after the hit is kept for the turn
WAITING = "WAITING"      # the ambient capture ended or was cancelled (supersede) first: its kept audio waits here
TURN = "TURN"            # the turn runs on a capture: the requested one, or the ambient one itself when declined

# Events.
HIT = "hit"                      # the spotter heard the phrase on an ambient capture
AMBIENT_CHUNK = "ambient_chunk"  # audio on the woken ambient capture
AMBIENT_GONE = "ambient_gone"    # the device's StreamCancel/StreamEnd of the woken ambient capture
OPENED = "opened"                # the CaptureOpen answering the RequestCapture (its correlation_ref)
DECLINED = "declined"            # Error on the RequestCapture (UNAVAILABLE), or no RequestCapture could be sent
TURN_DONE = "turn_done"          # the turn's terminal is out, or its capture went before its turn began

#: {state: {event: next state}}.
TABLE = {
    SPOTTING: {HIT: WOKEN},
    WOKEN: {AMBIENT_CHUNK: WOKEN, AMBIENT_GONE: WAITING, OPENED: TURN, DECLINED: TURN},
    WAITING: {OPENED: TURN, DECLINED: SPOTTING},
    TURN: {AMBIENT_CHUNK: TURN, AMBIENT_GONE: TURN, TURN_DONE: SPOTTING},
}

#: Ambient audio kept after a hit until the requested capture opens: the start of the utterance (s16le).
AFTER_WAKE_S = 3.0
#: The spotter fires up to ~150 ms before the phrase's last sound ends. From the hit on, audio is cut until
#: the first quiet 20 ms frame (a word gap or the pause after the phrase), at most this long: that tail
#: would read as speech to the endpointer (an early END_DETECTED) and as a word to the recogniser.
TAIL_MAX_S = 0.3
#: A frame quieter than this RMS ends the tail (the energy endpointer's speech floor).
QUIET_RMS = 400.0
#: A wake turn's capture waits this long for the command to start (then the endpointer's quiet rule).
FIRST_SPEECH_MS = 5000
#: ... and takes this much consecutive loud audio as the start of speech (a leftover click is not a word).
MIN_SPEECH_MS = 100


def step(state, event):
    """The next state, or KeyError when the table has no entry."""
    return TABLE[state][event]


class Waking:
    """One connection's wake: its state, ids and the audio kept after the hit (see the module docstring)."""

    def __init__(self):
        self.state = SPOTTING
        self._clear()

    def _clear(self):
        self.ambient_id = self.request_id = self.turn_id = None
        self.after = bytearray()
        self.limit = self.tail = self.frame = 0

    def _go(self, event):
        self.state = step(self.state, event)

    # -- events --------------------------------------------------------------------------------
    def hit(self, ambient_id, bytes_per_s, audio=b""):
        """The phrase was heard on ``ambient_id``; ``audio``: what that capture carried after the hit's frame."""
        self._go(HIT)
        self.ambient_id = ambient_id
        self.limit = int(AFTER_WAKE_S * bytes_per_s)
        self.tail = int(TAIL_MAX_S * bytes_per_s) & ~1
        self.frame = int(0.02 * bytes_per_s) & ~1
        self._keep(audio)

    def asked(self, request_id):
        """The RequestCapture for this wake went out on ``request_id``."""
        self.request_id = request_id

    def ambient_chunk(self, cid, data):
        """Audio on an ambient capture while woken: kept when it is the woken one (and room is left)."""
        if self.state is WOKEN and cid == self.ambient_id:
            self._go(AMBIENT_CHUNK)
            self._keep(data)

    def ambient_gone(self, cid):
        """The device ended/cancelled ambient capture ``cid``; True when it was this wake's (its kept audio
        stays here for the requested capture)."""
        if cid != self.ambient_id or self.state not in (WOKEN, TURN) or cid == self.turn_id:
            return False
        self._go(AMBIENT_GONE)
        return True

    def opened(self, request_id, cid):
        """Capture ``cid`` answers ``request_id``: -> the audio kept after the hit (tail cut) for it to start
        with, or None when it does not answer this wake's request."""
        if request_id is None or request_id != self.request_id or self.state not in (WOKEN, WAITING):
            return None
        self._go(OPENED)
        self.turn_id = cid
        pcm, self.after = bytes(self.after), bytearray()
        return pcm

    def declined(self, request_id):
        """The request was refused: -> the ambient capture the turn now runs on, or None (it is gone: the wake
        ends; or the request is not this wake's)."""
        if request_id != self.request_id or self.state not in (WOKEN, WAITING):
            return None
        was = self.state
        self._go(DECLINED)
        if was is WAITING:
            self._clear()
            return None
        self.turn_id = self.ambient_id
        return self.ambient_id

    def kept(self):
        """The audio kept after the hit, handed over (the turn on the ambient capture starts with it)."""
        pcm, self.after = bytes(self.after), bytearray()
        return pcm

    def turn_done(self, cid):
        """Capture ``cid`` is finished with (answered, cancelled, stopped): True when it was this wake's turn."""
        if self.state is not TURN or cid != self.turn_id:
            return False
        self._go(TURN_DONE)
        self._clear()
        return True

    # -- the phrase's tail ---------------------------------------------------------------------
    def trim(self, data):
        """``data`` less what is left of the phrase's tail (see TAIL_MAX_S); a no-op once it is cut."""
        if not self.tail:
            return data
        i, n = 0, len(data)
        while i < n and self.tail > 0:
            frame = data[i:i + self.frame]
            if rms(frame) < QUIET_RMS:
                self.tail = 0
                break
            i += len(frame)
            self.tail -= len(frame)
        self.tail = max(0, self.tail)
        return data[i:] if i else data

    def _keep(self, data):
        data = self.trim(data)
        room = self.limit - len(self.after)
        if room > 0 and data:
            self.after += data[:room]
