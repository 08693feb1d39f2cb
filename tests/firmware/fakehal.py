# The test HALs: whole HALs (the contract in firmware/satellite/hal/__init__.py) with no clock and no
# hardware, checked by tests/firmware/test_hal_contract.py like the real ones. FakeHal serves the runtime
# harness (rt_harness.make, the runtime, deferred and display tests, tools/bench); MicHal plays a byte string
# into the microphone (listening mode, test_provision_listen.py).
from satellite import audio


class FakeHal:
    """A HAL with no clock: a mic frame is always ready (a ramp), the speaker always takes a frame."""

    def __init__(self):
        self.muted = False
        self.vol = 16384
        self.gain = 256
        self.played = 0
        self.mic_frames = 0
        self.lines = []
        self.raw = None
        self.out = None

    def log(self, line):
        self.lines.append(line)

    async def network_up(self, rt):
        pass

    def set_volume(self, q):
        self.vol = q

    def set_mic_gain(self, q):
        self.gain = q

    def set_led_brightness(self, b):
        pass

    def led(self, phase, b):
        pass

    def gesture(self):
        return 0

    def mic_open(self, rate, n):
        self.raw = bytearray(2 * n)
        i = 0
        while i < n:
            self.raw[2 * i] = i & 0xFF
            i += 1

    def mic_close(self):
        pass

    def mic_wait_ms(self):
        return 0

    def mic_take(self, dst, pos, n):
        audio.mic_to_s16(dst, pos, self.raw, n, 2 | (8 << 8), self.gain)
        self.mic_frames += 1

    def mic_skip(self):
        pass

    def spk_open(self, rate, n):
        self.out = bytearray(2 * n)

    def spk_wait_ms(self):
        return 0

    def spk_write(self, buf, pos, n):
        if self.out is None:
            return 0                      # never opened: nothing plays (the contract; esp32 and sim agree)
        audio.s16_to_spk(self.out, buf, pos, n, 2 | (14 << 8), self.vol)
        self.played += n
        return n

    def spk_drain_ms(self):
        return 0

    def spk_stop(self):
        pass

    def spk_close(self):
        pass


class MicHal(FakeHal):
    """A FakeHal whose microphone plays `data` (s16 bytes; silence after its end): now and then a chunk is
    not due yet (mic_wait_ms 1 every 4th call). Records mic_open's (rate, nframes), mic_close, and the LED
    as (phase, level) changes."""

    def __init__(self, data):
        FakeHal.__init__(self)
        self.data = data
        self.pos = 0
        self.opened = None
        self.closed = False
        self.leds = []
        self.waits = 0

    def mic_open(self, rate, n):
        self.opened = (rate, n)
        self.raw = bytearray(2 * n)

    def mic_wait_ms(self):
        self.waits += 1
        return 1 if self.waits % 4 == 0 else 0             # now and then: not yet due

    def mic_take(self, dst, pos, n):
        # byte by byte into the chunk buffer (a slice of data would allocate, and mic_take must not), then
        # the gain as every HAL applies it
        data = self.data
        raw = self.raw
        a = self.pos
        end = len(data)
        i = 0
        while i < 2 * n:
            raw[i] = data[a + i] if a + i < end else 0
            i += 1
        self.pos = a + 2 * n
        FakeHal.mic_take(self, dst, pos, n)

    def mic_close(self):
        self.closed = True

    def led(self, phase, level):
        if not self.leds or self.leds[-1] != (phase, level):
            self.leds.append((phase, level))
