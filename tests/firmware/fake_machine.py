# A fake of the esp32 port's `machine` module (I2S, Pin, I2C, freq) and of its clock, for the ESP32 HAL
# tests (test_hal_esp32.py, test_hal_contract.py). It is injected into
# satellite.hal.esp32.Esp32Hal(board, machine=FakeMachine()), never imported as `machine`: nothing it
# defines can shadow the unix port's own machine module for other tests.
#
# It enforces what the port really does, as read in micropython/micropython v1.27.0 (the pinned image;
# v1.28.0 is identical for these files) ports/esp32/machine_i2s.c and extmod/machine_i2s.c:
#   * I2S(id, *, sck, ws, sd, mode, bits, format, rate, ibuf): every argument after the id is keyword-only
#     and required; `mck` exists only when MICROPY_PY_MACHINE_I2S_MCK is set, which only the mimxrt port
#     does, so on the esp32 image it is an unexpected keyword (TypeError). FakeMachine(mck=True) stands
#     for a custom image that adds it (docs/boards.md).
#   * one object per controller (MP_STATE_PORT(machine_i2s_obj)[id], mp_machine_i2s_make_new_instance):
#     constructing I2S(id) again deinits the existing object of that id and returns the same object.
#   * DMA: dma_desc_num = max(ibuf // (256 * frame bytes), 2) buffers of DMA_BUF_LEN_IN_I2S_FRAMES = 256
#     frames (get_dma_buf_count). RX frames are always 32-bit stereo, 8 bytes (get_dma_bits,
#     get_dma_format, I2S_RX_FRAME_SIZE_IN_BYTES); TX frames are bits/8 x (1 mono | 2 stereo) bytes.
#     Bytes of ibuf past a whole DMA buffer buy nothing (`ibuf_waste`).
#   * the bit clock: ESP-IDF standard (Philips) mode always has 2 slots of the DMA bit width
#     (esp-idf driver/i2s_std.h "Fixed to 2 slots", slot_bit_width AUTO): BCLK = 2 * dma_bits * rate, so
#     64*fs whenever RX is open, 2*bits*fs for TX.
#   * irq(handler) puts the object in non-blocking mode and creates a FreeRTOS task and a depth-1 queue
#     (mp_machine_i2s_irq_update); calling it again without a deinit creates another task and queue and
#     leaks the first: a Violation here. readinto/write in that mode queue the buffer with
#     xQueueSend(.., 0): one in flight plus one queued, a third is dropped silently (Violation here).
#   * readinto: EPERM on a TX object, EINVAL unless len is a whole number of app samples; on a deinit
#     object the channel handle is NULL and the IDF call fails (OSError). RX DMA that is full when new
#     frames arrive drops the oldest (ESP-IDF on_recv_q_ovf is NULL in the port): counted in lost_frames.
#   * TX: auto_clear is set, so an empty DMA plays zeros (underrun_frames); deinit drops what the DMA
#     still held (cut_frames).
# Time only moves when a test calls advance_us(): the data moves and the callbacks run there, so a
# readinto()/write() call from the HAL does no work of its own (and allocates nothing) as on the board.

_DMA_BUF_FRAMES = 256
_RX_FRAME_BYTES = 8
_NUM_CONTROLLERS = 2        # SOC_I2S_NUM on the ESP32-S3
_EPERM = 1
_EINVAL = 22

RX = 1                       # I2S_DIR_RX (MICROPY_PY_MACHINE_I2S_CONSTANT_RX)
TX = 2                       # I2S_DIR_TX
MONO = 0
STEREO = 1


class Violation(Exception):
    """Something the real port would get silently wrong (a leaked task, a dropped request)."""


def _default_source(i):
    # DMA frame i: left and right 32-bit samples; the top 16 bits carry a recognisable ramp.
    return ((i & 0x7FFF) << 16) | 0x1234, ((-(i & 0x7FFF)) << 16) & 0xFFFFFFFF


class Pin:
    IN = 1
    OUT = 3
    PULL_UP = 1
    PULL_DOWN = 2

    def __init__(self, pin_id, mode=-1, pull=-1, value=None):
        self.id = pin_id
        self.mode = mode
        self.pull = pull
        self._v = 1 if pull == Pin.PULL_UP else 0
        if value is not None:
            self._v = 1 if value else 0

    def value(self, v=None):
        if v is None:
            return self._v
        self._v = 1 if v else 0
        return None

    __call__ = value                 # Pin()([x]): the port's shorthand for value()


class FakeSPI:
    """machine.SPI(id, baudrate=, polarity=, phase=, sck=, mosi=, miso=): counts what is written (the
    panel driver's wire is checked byte by byte in test_hal_ili9342.py)."""

    def __init__(self, spi_id, **kw):
        self.id = spi_id
        self.kw = kw
        self.written = 0

    def write(self, buf):
        self.written += len(buf)


class FakePWM:
    def __init__(self, pin, freq=0, duty_u16=0):
        self.pin = pin
        self.freq = freq
        self.duty = duty_u16

    def duty_u16(self, d=None):
        if d is None:
            return self.duty
        self.duty = d
        return None


class FakeI2C:
    """Register file per address; log of (addr, reg, value) for every byte written."""

    def __init__(self, bus_id, sda=None, scl=None, freq=400000):
        if not isinstance(sda, Pin) or not isinstance(scl, Pin):
            raise TypeError("I2C sda/scl must be Pin objects")
        self.id = bus_id
        self.freq = freq
        self.regs = {}
        self.log = []

    def writeto_mem(self, addr, reg, buf):
        for i in range(len(buf)):
            self.regs[(addr, reg + i)] = buf[i]
            self.log.append((addr, reg + i, buf[i]))

    def readfrom_mem(self, addr, reg, n):
        return bytes([self.regs.get((addr, reg + i), 0) for i in range(n)])

    def writes(self, addr):
        return [(r, v) for (a, r, v) in self.log if a == addr]


class _Clock:
    """ticks_us/ticks_ms/ticks_diff of the fake machine: time moves only with FakeMachine.advance_us."""

    def __init__(self, m):
        self._m = m

    def ticks_us(self):
        return self._m.now_us

    def ticks_ms(self):
        return self._m.now_us // 1000

    def ticks_diff(self, a, b):
        return a - b

    def ticks_add(self, a, b):
        return a + b


class _Controller:
    """The port's machine_i2s_obj_t for one controller id: re-initialised in place by I2S(id, ...)."""

    def __init__(self, m, cid):
        self._m = m
        self.id = cid
        self.is_deinit = True
        self.nb = False
        self.handler = None
        self.mode = 0
        self.q_buf = [None, None]
        self.q_pos = [0, 0]
        self.q_n = 0

    # -- the port's init helper -------------------------------------------------------------------
    def _init(self, kw):
        m = self._m
        for k in ("sck", "ws", "sd"):
            if not isinstance(kw[k], Pin):
                raise TypeError("I2S %s must be a Pin" % k)
        mode = kw["mode"]
        if mode != RX and mode != TX:
            raise ValueError("invalid mode")
        bits = kw["bits"]
        if bits != 16 and bits != 32:
            raise ValueError("invalid bits")
        fmt = kw["format"]
        if fmt != MONO and fmt != STEREO:
            raise ValueError("invalid format")
        self.mode = mode
        self.bits = bits
        self.format = fmt
        self.rate = kw["rate"]
        self.ibuf = kw["ibuf"]
        self.pins = (kw["sck"].id, kw["ws"].id, kw["sd"].id)
        self.mck = kw["mck"].id if kw.get("mck") is not None else None
        if mode == RX:
            self.frame_bytes = _RX_FRAME_BYTES
            self.dma_bits = 32
        else:
            self.frame_bytes = (bits // 8) * (2 if fmt == STEREO else 1)
            self.dma_bits = bits
        unit = _DMA_BUF_FRAMES * self.frame_bytes
        bufs = self.ibuf // unit
        if bufs < 2:
            bufs = 2                                  # "ESP-IDF requires at least two DMA buffers"
        self.dma_bufs = bufs
        self.dma_frames = bufs * _DMA_BUF_FRAMES
        self.dma_bytes = bufs * unit
        self.ibuf_waste = self.ibuf % unit if self.ibuf >= 2 * unit else 0
        self.bclk = 2 * self.dma_bits * self.rate
        self.sample_bytes = (bits // 8) * (2 if fmt == STEREO else 1)
        self.nb = False
        self.handler = None
        # requests in two fixed slots (slot 0 in flight, slot 1 queued): queuing one allocates nothing,
        # as the port's xQueueSend of a descriptor does not
        self.q_buf = [None, None]
        self.q_pos = [0, 0]
        self.q_n = 0
        self.dma_fill = 0            # frames in the DMA ring
        self.next_frame = 0          # RX: index of the next frame the codec produces
        self.lost_frames = 0
        self.underrun_frames = 0
        self.cut_frames = 0
        self.played = bytearray()    # TX: bytes that left the DMA, in order
        self._acc = 0
        self.is_deinit = False
        m.allocs.append((self.id, "rx" if mode == RX else "tx", self.dma_bytes))
        m.dma_in_use += self.dma_bytes
        m.events.append(("init", self.id, "rx" if mode == RX else "tx", self.rate, bits, fmt))

    def deinit(self):
        if self.is_deinit:
            return None
        m = self._m
        if self.mode == TX:
            self.cut_frames += self.dma_fill
        m.dma_in_use -= self.dma_bytes
        m.events.append(("deinit", self.id))
        self.is_deinit = True
        self.nb = False
        self.handler = None
        self.q_buf[0] = self.q_buf[1] = None
        self.q_n = 0
        self.dma_fill = 0
        return None

    def irq(self, handler):
        if handler is not None and not callable(handler):
            raise ValueError("invalid callback")
        if handler is not None and self.nb:
            raise Violation("I2S(%d).irq() again without deinit: the port creates a second FreeRTOS task and "
                            "queue and leaks the first (mp_machine_i2s_irq_update)" % self.id)
        self.nb = handler is not None
        self.handler = handler
        return None

    def _queue(self, buf):
        n = self.q_n
        if n >= 2:
            raise Violation("I2S(%d): a third buffer while one is in flight and one queued is dropped by "
                            "xQueueSend(queue, .., 0)" % self.id)
        self.q_buf[n] = buf
        self.q_pos[n] = 0
        self.q_n = n + 1

    def _pop(self):
        self.q_buf[0] = self.q_buf[1]
        self.q_pos[0] = self.q_pos[1]
        self.q_buf[1] = None
        self.q_n -= 1

    def readinto(self, buf):
        if self.is_deinit:
            raise OSError(_EINVAL)    # NULL channel handle: i2s_channel_read fails
        if self.mode != RX:
            raise OSError(_EPERM)
        if len(buf) % self.sample_bytes:
            raise OSError(_EINVAL)
        if len(buf) == 0:
            return 0
        if self.nb:
            self._queue(buf)
            return len(buf)
        self._queue(buf)             # blocking: the caller waits until the DMA filled it
        while self.q_n:
            self._m.advance_us(1000)
        return len(buf)

    def write(self, buf):
        if self.is_deinit:
            raise OSError(_EINVAL)
        if self.mode != TX:
            raise OSError(_EPERM)
        if len(buf) == 0:
            return 0
        self._queue(buf)
        if not self.nb:
            while self.q_n:
                self._m.advance_us(1000)
        return len(buf)

    # -- time -----------------------------------------------------------------------------------------
    def _tick(self, us, done):
        self._acc += self.rate * us
        n = self._acc // 1000000
        self._acc -= n * 1000000
        if self.mode == RX:
            self._rx(n, done)
        else:
            self._tx(n, done)

    def _rx(self, n, done):
        # the codec produces n frames into the DMA ring; the port's task moves them into the app buffer
        room = self.dma_frames - self.dma_fill
        if n > room:
            self.lost_frames += n - room              # the oldest are overwritten
            self.dma_fill = self.dma_frames
        else:
            self.dma_fill += n
        self.next_frame += n
        while self.q_n and self.dma_fill:
            buf = self.q_buf[0]
            pos = self.q_pos[0]
            sb = self.sample_bytes
            want = (len(buf) - pos) // sb
            k = want if want < self.dma_fill else self.dma_fill
            first = self.next_frame - self.dma_fill
            src = self._m.source
            for j in range(k):
                left, right = src(first + j)
                self._put(buf, pos + j * sb, left, right)
            self.q_pos[0] = pos + k * sb
            self.dma_fill -= k
            if self.q_pos[0] >= len(buf):
                self._pop()
                done.append(self)

    def _put(self, buf, o, left, right):
        # the port's frame map (ports/esp32/machine_i2s.c i2s_frame_map): 16-bit takes the top half
        if self.bits == 16:
            buf[o] = (left >> 16) & 0xFF
            buf[o + 1] = (left >> 24) & 0xFF
            if self.format == STEREO:
                buf[o + 2] = (right >> 16) & 0xFF
                buf[o + 3] = (right >> 24) & 0xFF
        else:
            for b in range(4):
                buf[o + b] = (left >> (8 * b)) & 0xFF
            if self.format == STEREO:
                for b in range(4):
                    buf[o + 4 + b] = (right >> (8 * b)) & 0xFF

    def _tx(self, n, done):
        # the DMA plays n frames (zeros when empty: auto_clear), then the task tops it up from the queue
        fb = self.frame_bytes
        played = n if n < self.dma_fill else self.dma_fill
        self.underrun_frames += n - played
        self.dma_fill -= played
        self._out_frames(played)
        while self.q_n and self.dma_fill < self.dma_frames:
            buf = self.q_buf[0]
            pos = self.q_pos[0]
            left = (len(buf) - pos) // fb
            room = self.dma_frames - self.dma_fill
            k = left if left < room else room
            self._pending.extend(bytes(buf[pos:pos + k * fb]))
            self.q_pos[0] = pos + k * fb
            self.dma_fill += k
            if self.q_pos[0] >= len(buf):
                self._pop()
                done.append(self)

    def _out_frames(self, k):
        n = k * self.frame_bytes
        self.played.extend(self._pending[:n])
        self._pending = self._pending[n:]


class _I2SClass:
    """What `machine.I2S` is on the port: a type with constants, called as I2S(id, **kw)."""

    RX = RX
    TX = TX
    MONO = MONO
    STEREO = STEREO

    def __init__(self, m):
        self._m = m

    def __call__(self, *args, **kw):
        if len(args) != 1:
            raise TypeError("I2S() takes the id positionally and every other argument by keyword")
        allowed = ("sck", "ws", "sd", "mode", "bits", "format", "rate", "ibuf")
        for k in kw:
            if k not in allowed and not (k == "mck" and self._m.mck):
                raise TypeError("unexpected keyword argument '%s'" % k)
        for k in allowed:
            if k not in kw:
                raise TypeError("'%s' argument required" % k)
        cid = args[0]
        if cid < 0 or cid >= _NUM_CONTROLLERS:
            raise ValueError("invalid id")
        m = self._m
        c = m.controllers[cid]
        if c is None:
            c = _Controller(m, cid)
            m.controllers[cid] = c
        else:
            c.deinit()                                # the port reuses the object of that id
        c._pending = bytearray()
        c._init(kw)
        return c


class NeoPixel:
    """neopixel.NeoPixel(pin, n) (the `neopixel` module is passed to Esp32Hal as neopixel=FakeNeoPixelModule):
    the pixels as set, write() a no-op."""

    def __init__(self, pin, n):
        self.pin = pin
        self.px = [(0, 0, 0)] * n
        self.writes = 0

    def __setitem__(self, i, v):
        self.px[i] = v

    def write(self):
        self.writes += 1


class FakeNeoPixelModule:
    NeoPixel = NeoPixel


class FakeMachine:
    """The fake `machine` module and the board's clock: pass it (and .clock) to Esp32Hal."""

    def __init__(self, mck=False, source=None):
        self.mck = mck
        self.now_us = 1000000
        self.controllers = [None] * _NUM_CONTROLLERS
        self.allocs = []             # one (id, direction, DMA bytes) per i2s_new_channel
        self.events = []
        self.dma_in_use = 0
        self.cpu_hz = 0
        self.source = source or _default_source
        self.I2S = _I2SClass(self)
        self.Pin = Pin
        self.i2c = None
        self.spi = None
        self.pwms = []               # every machine.PWM made (the panel's backlight; never an MCLK stand-in)
        self.clock = _Clock(self)

    def SPI(self, spi_id, **kw):
        self.spi = FakeSPI(spi_id, **kw)
        return self.spi

    def PWM(self, pin, freq=0, duty_u16=0):
        p = FakePWM(pin, freq, duty_u16)
        self.pwms.append(p)
        return p

    def I2C(self, bus_id, sda=None, scl=None, freq=400000):
        self.i2c = FakeI2C(bus_id, sda=sda, scl=scl, freq=freq)
        return self.i2c

    def freq(self, hz=None):
        if hz is None:
            return self.cpu_hz
        self.cpu_hz = hz
        return None

    def live(self, cid):
        """The controller object of `cid` when it is initialised, else None."""
        c = self.controllers[cid]
        return c if c is not None and not c.is_deinit else None

    def advance_us(self, us, step_us=1000):
        """Let `us` of audio time pass in steps; the scheduled I2S callbacks run after each step."""
        while us > 0:
            d = step_us if us > step_us else us
            us -= d
            self.now_us += d
            done = []
            for c in self.controllers:
                if c is not None and not c.is_deinit:
                    c._tick(d, done)
            for c in done:
                if c.nb and c.handler is not None:
                    c.handler(c)              # mp_sched_schedule(callback, self)
