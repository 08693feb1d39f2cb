# The button gesture that enters listening mode (sound provisioning). Kept apart from listen.py so that the
# runtime, which feeds it every press, does not import the ggwave receiver and its tables: those load only
# when listening mode starts (docs/memory.md). Sans-IO; no machine, no audio.
from time import ticks_diff


class Gesture:
    """`presses` short presses within `window_ms`. Sans-IO: feed(gesture, now_ms) with the runtime's
    PRESS / RELEASE / LONG codes; True when complete."""

    def __init__(self, presses=5, window_ms=3000, press=1):
        self.presses = presses
        self.window_ms = window_ms
        self._press = press
        self._n = 0
        self._t0 = 0

    def feed(self, g, now_ms):
        if g != self._press:
            return False
        if self._n == 0 or ticks_diff(now_ms, self._t0) > self.window_ms:
            self._n = 0
            self._t0 = now_ms
        self._n += 1
        if self._n >= self.presses:
            self._n = 0
            return True
        return False
