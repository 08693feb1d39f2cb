# The wake-word detector: mic chunks in (s16 LE, 16 kHz, any length), "the word was said" out. Responsible for
# cutting chunks into the frontend's 10 ms steps, handing each feature frame to the model (which infers every
# `stride` frames and keeps the sliding window), the refractory time after a detection, and loading a deployed
# model file (satellite.wake: where they are). Not for the frontend's maths (frontend.py), the inference (model.py), the
# mic or what a detection does (satellite.device).
#
# Steady state allocates nothing: the feature frame and the carry of a chunk that is not a whole number of steps
# are preallocated here, the frontend and the model preallocate their own.
from micropython import const
from array import array

from satellite.wake import MODEL_DIR, SUFFIX, deployed, frozen
from satellite.wake import frontend as F

RATE = const(16000)                # the only mic rate the models were trained at
REFRACTORY_MS = const(2000)        # after a detection, no other for this long: one utterance wakes once


class WakeUnavailable(Exception):
    """The wake engine cannot run on this board: str() says why (no model deployed, too large for the heap...)."""


def load(name, rate=RATE, d=MODEL_DIR):
    """A Detector over the model `name`: frozen into the image (read in place, model.load_frozen), else the deployed
    file (read into RAM); WakeUnavailable saying why when it cannot run here."""
    if rate != RATE:
        raise WakeUnavailable("the mic runs at %d Hz, wake models need %d Hz" % (rate, RATE))
    from satellite.wake import model as M
    buf = frozen(name)
    f = None
    if buf is None:
        try:
            f = open(d + "/" + name + SUFFIX, "rb")
        except OSError:
            raise WakeUnavailable("no wake model %s deployed (have: %s)" % (name, ", ".join(deployed(d)) or "none"))
    try:
        m = M.load(f) if f is not None else M.load_frozen(buf)
        fe = F.Frontend()
    except M.ModelError as e:
        raise WakeUnavailable(("frozen model %s: " % name if f is None else "") + str(e))
    except MemoryError:
        raise WakeUnavailable("wake model %s does not fit the free heap" % name)
    finally:
        if f is not None:
            f.close()
    return Detector(m, fe)


class Detector:
    """feed() mic chunks; True from the call whose audio completed a detection. `word` is the model's wake word."""

    def __init__(self, model, frontend, refractory_ms=REFRACTORY_MS):
        self.model = model
        self.fe = frontend
        self.name = model.name
        self.word = model.wake_word
        self._feat = array("H", bytes(2 * F.CHANNELS))
        self._carry = bytearray(F.STEP_BYTES)      # a partial step between two chunks
        self._fill = 0
        self._refractory = refractory_ms // 10      # in 10 ms steps
        self._hold = 0
        self.detections = 0

    def reset(self):
        """A new stretch of audio (the mic was away: a capture took it, or the core was thinking): empty frontend
        window, model state and sliding window, and no refractory time left (it counts audio heard, and the
        utterance that woke the board went to the capture: a barge-in by voice during the reply must be heard)."""
        self.fe.reset()
        self.model.reset()
        self._fill = 0
        self._hold = 0

    def feed(self, buf, pos, nframes):
        """Run the 16-bit samples buf[pos:pos + 2 * nframes] through the engine; True when the wake word fired."""
        hit = False
        p = pos
        end = pos + 2 * nframes
        while p < end:
            if self._fill == 0 and end - p >= F.STEP_BYTES:
                if self._step(buf, p):
                    hit = True
                p += F.STEP_BYTES
                continue
            c = self._carry
            f = self._fill
            while f < F.STEP_BYTES and p < end:
                c[f] = buf[p]
                f += 1
                p += 1
            if f == F.STEP_BYTES:
                f = 0
                if self._step(c, 0):
                    hit = True
            self._fill = f
        return hit

    def _step(self, src, pos):
        if self._hold:
            self._hold -= 1
        if not self.fe.step(src, pos, self._feat):
            return False
        m = self.model
        if m.step(self._feat) < 0 or not m.detected:
            return False
        if self._hold:
            return False
        self._hold = self._refractory
        self.detections += 1
        m.reset()          # a fresh window: the same probabilities cannot fire again once the refractory time is over
        return True
