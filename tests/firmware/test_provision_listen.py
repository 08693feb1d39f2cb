# dual: cpython micropython
# Listening mode (satellite.provision.listen): real ggwave audio of a real record -> the receiver -> the
# record checked and stored atomically with its core key pinned (replacing an old pin: a user-initiated
# re-provisioning), LED states in order, bad records rejected without storing, nothing allocated while
# listening, the driver over a HAL, and the button gesture that enters listening mode.
import os
from array import array

from fakehal import MicHal
from mpsupport import IS_MICROPYTHON, mem_alloc_delta, raises, scratch

from satellite import keystore as K
from satellite.provision import ggwave_rx as G
from satellite.provision import listen as L
from satellite.provision import record as R
from satellite.wire import alabama_v1 as pb

_HERE = __file__.rpartition("/")[0] or "."
# tests/host/test_provision_sound.py makes this file (and checks it): ggwave.encode(record, protocolId=8)
# at 48 kHz, low-passed and decimated to 16 kHz, 20 dB white noise, s16 little-endian.
AUDIO = _HERE + "/data/provision_record_16k.raw"
# The record in AUDIO, byte for byte (host encoder); its fields are checked below.
RECORD_HEX = ("010a0831302e302e302e3210bb391a2007a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c"
              "22166b334a392d7051327658376d5a7230614c77356559742880f2d6ca06ad7b68e4")
CORE_KEY_HEX = "07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c"

_n = [0]


def fresh():
    _n[0] += 1
    root = scratch("listen")
    try:
        for f in os.listdir(root):
            os.remove(root + "/" + f)
        os.rmdir(root)
    except OSError:
        pass
    return K.KeyStore(root, lambda n: b"\x11" * n, lambda k: bytes(reversed(k)))


def read_audio():
    with open(AUDIO, "rb") as f:
        return f.read()


def feed_all(li, data, block):
    """Feed s16 bytes in blocks of `block` samples through one reused buffer; the stored record or None."""
    buf = bytearray(2 * block)
    i = 0
    n = len(data)
    while i + 2 * block <= n:
        buf[:] = data[i:i + 2 * block]
        rec = li.feed(buf, block)
        if rec is not None:
            return rec, i // 2
        i += 2 * block
    return None, n // 2


class LedLog:
    def __init__(self):
        self.seen = []

    def __call__(self, state, progress):
        self.seen.append((state, progress))

    def states(self):
        out = []
        for s, _ in self.seen:
            if not out or out[-1] != s:
                out.append(s)
        return out


def test_real_ggwave_record_is_stored_exactly_and_its_key_pinned():
    ks = fresh()
    leds = LedLog()
    lines = []
    li = L.Listener(ks, on_led=leds, log=lines.append)
    rec, at = feed_all(li, read_audio(), 320)
    want = bytes.fromhex(RECORD_HEX)
    assert rec is not None, (lines, li.rx.fail_code)
    assert ks.read(K.RECORD) == want and li.raw == want
    assert ks.pinned_core_key() == bytes.fromhex(CORE_KEY_HEX)
    assert rec.core_host == "10.0.0.2" and rec.core_port == 7355 and rec.core_key == bytes.fromhex(CORE_KEY_HEX)
    assert rec.pairing_token == "k3J9-pQ2vX7mZr0aLw5eYt" and rec.token_expires == 1767225600
    # the record arrives at the end of the transmission (0.3 s lead + ggwave's 8.2 s), not before
    assert 120000 < at < 138731, at
    assert leds.states() == [L.LED_LISTENING, L.LED_RECEIVING, L.LED_STORED]
    prog = [p for s, p in leds.seen if s == L.LED_RECEIVING]
    assert prog[0] < 10 and len(prog) >= 9 and prog == sorted(prog)       # 10 % steps, rising
    assert leds.seen[-1] == (L.LED_STORED, 100)
    assert lines[-1] == "provision: record stored: core 10.0.0.2:7355, core key pinned (IK), pairing token"
    assert li.feed(bytearray(640), 320) is None             # done: no more listening
    for name in os.listdir(ks.root):
        assert not name.endswith(".tmp"), name               # atomic write left nothing behind


def test_r7_3_h_reprovisioning_replaces_a_pinned_key():
    ks = fresh()
    ks.pin_core_key(b"\x05" * 32)
    ks.write(K.RECORD, R.encode(pb.ProvisioningRecord(core_host="old", core_port=1)))
    li = L.Listener(ks)
    rec, _ = feed_all(li, read_audio(), 1024)
    assert rec is not None
    assert ks.pinned_core_key() == bytes.fromhex(CORE_KEY_HEX)
    assert ks.read(K.RECORD) == bytes.fromhex(RECORD_HEX)


class FakeRx:
    """A receiver that hands out scripted (state, progress, payload) steps, one per feed."""

    def __init__(self, steps):
        self.steps = steps
        self.i = 0
        self.state = G.STATE_IDLE
        self.progress = 0
        self.fail_code = 0
        self.ratio = 1.0

    def feed(self, samples, n):
        if self.i >= len(self.steps):
            return None
        st, pr, payload = self.steps[self.i]
        self.i += 1
        self.state = st
        self.progress = pr
        if st == G.STATE_FAILED:
            self.fail_code = G.FAIL_SIGNAL
        return payload


def _rec_bytes(**kw):
    return R.encode(pb.ProvisioningRecord(**kw))


def test_record_without_key_removes_the_old_pin():
    ks = fresh()
    ks.pin_core_key(b"\x05" * 32)
    good = _rec_bytes(core_host="core.local", core_port=7355, pairing_token="tok")
    li = L.Listener(ks, receiver=FakeRx([(G.STATE_DONE, 100, good)]))
    rec = li.feed(bytearray(2), 1)
    assert rec is not None and rec.core_host == "core.local" and not rec.core_key
    assert ks.pinned_core_key() is None
    assert ks.read(K.RECORD) == good


def test_bad_records_are_rejected_and_never_stored():
    good = _rec_bytes(core_host="h", core_port=1, core_key=b"\x07" * 32)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    bad_version = bytearray(good)
    bad_version[0] = 2
    no_host = _rec_bytes(core_port=5)
    cases = ((bytes(bad_crc), "CRC"), (bytes(bad_version), "VERSION"), (b"\x01\x02", "LENGTH"),
             (no_host, "FIELD"), (b"\x01\xff\xff\xff\xff\xff\xff" + b"\x00" * 4, "CRC"))
    for payload, code in cases:
        ks = fresh()
        ks.pin_core_key(b"\x05" * 32)
        leds = LedLog()
        li = L.Listener(ks, on_led=leds, receiver=FakeRx([(G.STATE_RECEIVING, 50, None), (G.STATE_DONE, 100, payload),
                                                          (G.STATE_IDLE, 0, None), (G.STATE_DONE, 100, good)]))
        assert li.feed(bytearray(2), 1) is None
        assert li.feed(bytearray(2), 1) is None
        assert li.reject_code == code, (code, li.reject_code, li.reject_msg)
        assert ks.read(K.RECORD) is None and ks.pinned_core_key() == b"\x05" * 32
        assert leds.states() == [L.LED_LISTENING, L.LED_RECEIVING, L.LED_REJECTED]
        # still listening: the next good transmission is stored
        assert li.feed(bytearray(2), 1) is None
        assert leds.states()[-1] == L.LED_LISTENING
        rec = li.feed(bytearray(2), 1)
        assert rec is not None and ks.read(K.RECORD) == good and ks.pinned_core_key() == b"\x07" * 32


def test_lost_transmission_shows_lost_then_listening():
    ks = fresh()
    leds = LedLog()
    lines = []
    li = L.Listener(ks, on_led=leds, log=lines.append,
                    receiver=FakeRx([(G.STATE_RECEIVING, 5, None), (G.STATE_RECEIVING, 37, None),
                                     (G.STATE_FAILED, 37, None), (G.STATE_FAILED, 37, None),
                                     (G.STATE_RECEIVING, 0, None)]))
    for _ in range(5):
        assert li.feed(bytearray(2), 1) is None
    assert leds.seen == [(L.LED_LISTENING, 0), (L.LED_RECEIVING, 5), (L.LED_RECEIVING, 37), (L.LED_LOST, 37),
                         (L.LED_RECEIVING, 0)]
    assert li.lost == 1 and ks.read(K.RECORD) is None
    assert lines[1] == "provision: transmission lost (code %d): listening again" % G.FAIL_SIGNAL


class BrokenStore:
    """A key store whose flash write fails (full / worn)."""

    def __init__(self, ks):
        self.ks = ks

    def pin_core_key(self, key, replace=False):
        return self.ks.pin_core_key(key, replace)

    def remove(self, name):
        self.ks.remove(name)

    def write(self, name, data):
        raise OSError(28)


def test_store_failure_is_a_rejection_not_a_crash():
    ks = fresh()
    good = _rec_bytes(core_host="h", core_port=1)
    li = L.Listener(BrokenStore(ks), receiver=FakeRx([(G.STATE_DONE, 100, good)]))
    assert li.feed(bytearray(2), 1) is None
    assert li.reject_code == "STORE" and li.led == L.LED_REJECTED and li.record is None


def test_noise_never_yields_a_record_and_listening_allocates_nothing():
    ks = fresh()
    li = L.Listener(ks)
    buf = array("h", [0] * 320)
    s = 12345
    for k in range(200):                                   # 4 s of loud noise
        for j in range(320):
            s = (s * 1103515245 + 12345) & 0x7FFFFFFF
            buf[j] = ((s >> 15) & 0xFFFF) - 32768
        assert li.feed(buf, 320) is None
    assert ks.read(K.RECORD) is None and li.record is None
    for j in range(320):
        buf[j] = 0
    li.feed(buf, 320)
    d = mem_alloc_delta(li.feed, buf, 320)
    if IS_MICROPYTHON:
        assert d == 0, d


def test_run_drives_the_hal_until_the_record_is_stored():
    import asyncio
    ks = fresh()
    hal = MicHal(read_audio())
    lines = []
    rec = asyncio.run(L.run(hal, ks, log=lines.append))
    assert rec is not None and ks.read(K.RECORD) == bytes.fromhex(RECORD_HEX)
    assert hal.opened == (16000, 320) and hal.closed
    assert hal.leds[0] == (1, 20) and hal.leds[-1] == (0, 100)             # listening dim ... stored
    assert (2, 20) in hal.leds and (2, 92) in hal.leds                       # receiving, brighter with progress
    assert lines[0].startswith("provision: listening mode")
    # stop() ends listening mode without a record; a 44.1 kHz microphone is refused with what to do
    hal2 = MicHal(bytes(64000))
    calls = [0]

    def stop():
        calls[0] += 1
        return calls[0] > 20

    assert asyncio.run(L.run(hal2, fresh(), stop=stop)) is None and hal2.closed
    e = raises(L.ListenError, asyncio.run, L.run(hal2, fresh(), rate=44100))
    assert e.code == "RATE" and "QR code or serial" in str(e)


def test_gesture_five_presses_within_three_seconds():
    g = L.Gesture()
    t = 1000
    for i in range(4):
        assert not g.feed(1, t + 500 * i)
        assert not g.feed(2, t + 500 * i + 100)            # releases do not count
    assert g.feed(1, t + 2000)
    assert not g.feed(1, t + 2100)                          # counting starts again
    g2 = L.Gesture()
    for i in range(5):
        assert not g2.feed(1, 1000 * i)                     # too slow: 4 s for 5 presses
    assert not g2.feed(3, 5000)
