# Listening mode of sound provisioning: mic blocks -> ggwave receiver -> record check -> key store, with
# the LED state to show. The Listener is sans-IO (samples in, record out, LED state reported through a
# callback); `run` is the thin driver over a HAL it is handed. No protocol, no networking, no machine.
#
# Storing a record is a user-initiated re-provisioning (the user played the sound to this board), so it
# may replace the pinned core key (spec 7.3, R7.3-h): a record that carries core_key pins it with
# replace=True; a record without one removes the old pin (the board pairs again over XX + token; keeping
# a pin for another core would make every IK attempt fail for ever). Order: pin first, then the record;
# the record file is the commit point (its appearance is what makes the runtime connect), so a power cut
# between the two leaves the old record and the user, who saw no success LED, plays the sound again.
# A record over ggwave's 140 bytes comes as numbered parts (parts.py reassembles them); while some are in and
# others missing, the LED shows LED_PARTS: the user plays the sound again and the missing ones fill in.
from micropython import const

from satellite import keystore as K
from satellite.provision import ggwave_rx as G
from satellite.provision import parts as P
from satellite.provision import record as R

# LED states reported to on_led(state, progress).
LED_LISTENING = const(0)   # waiting for a transmission (slow breathing)
LED_RECEIVING = const(1)   # a transmission is coming in: progress 0..99 (fill / blink rate)
LED_STORED = const(2)      # record stored: the board connects now (solid, then normal LED)
LED_REJECTED = const(3)    # a transmission decoded but is no record for us (CRC, version, field): error flash
LED_LOST = const(4)        # the transmission was lost (noise, too far, too quiet): error flash, listening again
LED_PARTS = const(5)       # some parts of a long record are in, others missing: play the sound again
                           # (progress = the share of parts held)
LED_NAMES = ("listening", "receiving", "stored", "rejected", "lost", "part missing")

_PROGRESS_STEP = const(10)  # on_led is told of progress in 10 % steps (LED refresh, log lines)

# Receiver state -> LED state (a table, not code): idle and done both mean "listening".
_LED_OF_RX = {G.STATE_IDLE: LED_LISTENING, G.STATE_RECEIVING: LED_RECEIVING, G.STATE_DONE: LED_LISTENING,
              G.STATE_FAILED: LED_LOST}


class ListenError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class Listener:
    """Feed s16 mono PCM at 16 kHz; `feed` returns the stored ProvisioningRecord once one arrives.

    ks: a keystore.KeyStore. on_led(state, progress): told of every LED state change (and of progress
    in 10 % steps while receiving). log(line): one line per event (optional). The last rejection is in
    `reject_code` (the RecordError / KeyStoreError code) and `reject_msg`."""

    def __init__(self, ks, on_led=None, log=None, receiver=None):
        self.ks = ks
        self.rx = receiver if receiver is not None else G.GgwaveReceiver()
        self.parts = P.Assembler()
        self._on_led = on_led
        self._log = log
        self.record = None
        self.raw = None
        self.reject_code = None
        self.reject_msg = None
        self.led = -1
        self.progress = 0
        self._rx_state = -1
        self._step = -1
        self.received = 0       # transmissions decoded (good or rejected)
        self.lost = 0           # transmissions lost
        self._show(LED_LISTENING, 0)

    def _say(self, line):
        if self._log is not None:
            self._log("provision: " + line)

    def _show(self, state, progress):
        if state == self.led and (state != LED_RECEIVING or progress // _PROGRESS_STEP == self._step):
            return
        self.led = state
        self.progress = progress
        self._step = progress // _PROGRESS_STEP
        if self._on_led is not None:
            self._on_led(state, progress)

    def feed(self, samples, n):
        """n samples (array('h') or s16 little-endian bytes). Returns the record when one was stored by
        this call (the caller leaves listening mode), else None. Allocates nothing while listening."""
        if self.record is not None:
            return None
        payload = self.rx.feed(samples, n)
        if payload is not None:
            self.received += 1
            if P.is_part(payload):
                return self._part(payload)
            return self._store(payload)
        st = self.rx.state
        if st != self._rx_state:
            self._rx_state = st
            if st == G.STATE_RECEIVING:
                self._say("transmission heard (clock ratio %d ppm)" % int((self.rx.ratio - 1.0) * 1e6))
            elif st == G.STATE_FAILED:
                self.lost += 1
                self._say("transmission lost (code %d): listening again" % self.rx.fail_code)
            if st != G.STATE_RECEIVING and self.parts.count:
                self._ask_parts()           # a set is begun: the LED asks for what is missing
            else:
                self._show(_LED_OF_RX[st], self.rx.progress)
        elif st == G.STATE_RECEIVING:
            self._show(LED_RECEIVING, self.rx.progress)
        return None

    def _ask_parts(self):
        a = self.parts
        self._say("part %s of %d missing: play the sound again" % (",".join([str(i) for i in a.missing()]), a.count))
        self._show(LED_PARTS, (a.held() * 100) // a.count)

    def _part(self, payload):
        a = self.parts
        try:
            r = a.add(payload)
        except P.PartError as e:
            self._reject(e.code, str(e))
            if a.count:
                self._ask_parts()
            return None
        self._rx_state = self.rx.state
        if r == P.COMPLETE:
            data = bytes(a.record())
            a.reset()
            self._say("all %d parts in" % (payload[1] & 15))
            return self._store(data)
        self._say("part %d of %d %s" % ((payload[1] >> 4) + 1, a.count,
                                        "again: already held, ignored" if r == P.REPEAT else "received"))
        self._show(LED_PARTS, (a.held() * 100) // a.count)
        return None

    def _reject(self, code, msg):
        self.reject_code = code
        self.reject_msg = msg
        self._rx_state = self.rx.state
        self._say("record rejected (%s): %s; listening again" % (code, msg))
        self._show(LED_REJECTED, 0)
        return None

    def _store(self, payload):
        try:
            rec = R.decode(payload)
        except R.RecordError as e:
            return self._reject(e.code, str(e))
        try:
            store(self.ks, payload, rec)
        except (K.KeyStoreError, OSError) as e:
            return self._reject(getattr(e, "code", "STORE"), "cannot store the record: %s" % e)
        self.record = rec
        self.raw = bytes(payload)
        self._say("record stored: core %s:%d, %s, %s" % (
            rec.core_host, rec.core_port, "core key pinned (IK)" if rec.core_key else "no core key (XX)",
            "pairing token" if rec.pairing_token else "no token"))
        self._show(LED_STORED, 100)
        return rec


def store(ks, data, rec):
    """Store a checked record as a user-initiated re-provisioning: pin (or unpin) its core key, then
    write the record atomically (the commit point)."""
    if rec.core_key:
        ks.pin_core_key(rec.core_key, replace=True)
    else:
        ks.remove(K.CORE_KEY)
    ks.write(K.RECORD, bytes(data))


async def run(hal, ks, rate=G.RATE, block=320, log=None, on_led=None, stop=None, ring=None):
    """Listening mode over a HAL (mic_open, mic_wait_ms, mic_take, mic_close): returns the
    stored record, or None when stop() turns true. The LED goes through on_led, else hal.led(phase, level).
    ring: a spare buffer of >= ggwave_rx.RING_BYTES for the receiver (the runtime's idle jitter ring)."""
    if rate != G.RATE:
        raise ListenError("RATE", "sound provisioning needs the microphone at %d Hz (board mic rate %d): "
                          "provision this board by QR code or serial" % (G.RATE, rate))
    if on_led is None:
        on_led = hal_led(hal)
    li = Listener(ks, on_led=on_led, log=log, receiver=G.GgwaveReceiver(ring=ring))
    buf = bytearray(2 * block)
    hal.mic_open(rate, block)
    if log is not None:
        log("provision: listening mode: play `alabama provision sound` near the microphone")
    import asyncio
    sleep_ms = asyncio.sleep_ms
    wait_ms = hal.mic_wait_ms                       # HAL: ms until the next block (hal/__init__.py)
    try:
        while stop is None or not stop():
            d = wait_ms()
            if d > 0:
                await sleep_ms(d)
                continue
            hal.mic_take(buf, 0, block)
            rec = li.feed(buf, block)
            if rec is not None:
                return rec
            await sleep_ms(0)
    finally:
        hal.mic_close()
    return None


# The runtime's LED phases (device._PHASES) that stand for each provisioning state on a HAL that only
# knows those: listening = LISTENING dim, receiving = PROCESSING with brightness rising with progress,
# stored = IDLE, rejected / lost = ERROR, part missing = LISTENING brightening with the parts held.
_PHASE_OF_LED = (1, 2, 0, 4, 4, 1)


def hal_led(hal):
    """on_led for a HAL: hal.provision_led(state, progress) when it has one, else hal.led(phase, level)."""
    f = getattr(hal, "provision_led", None)
    if f is not None:
        return f

    def show(state, progress):
        if state == LED_RECEIVING or state == LED_PARTS:
            level = 20 + (progress * 80) // 100
        else:
            level = 20 if state == LED_LISTENING else 100
        hal.led(_PHASE_OF_LED[state], level)
    return show


# The gesture lives in its own module (the runtime imports it without the receiver); kept here by name.
from satellite.provision.gesture import Gesture  # noqa: E402,F401
