# The ESP32-S3 HAL: machine.I2S mic and speaker, the button, the status LED, Wi-Fi and the codec chips,
# all from the board file. Thin: it converts samples with satellite.audio and paces by I2S interrupts; it
# holds no protocol logic and is never imported on the unix port (app.make_hal picks the simulated HAL).
# The `machine` module, neopixel and the clock are passed in (tests hand it tests/firmware/fake_machine);
# on the board they default to the real ones, imported when the HAL is built, never at import.
#
# Read against MicroPython v1.27.0 (the pinned image; v1.28.0 is the same for these files):
#   docs/library/machine.I2S.rst: I2S(id, *, sck, ws, sd, mode, bits, format, rate, ibuf); irq(handler)
#     makes readinto()/write() non-blocking, the handler runs (scheduled) when the buffer was filled /
#     emptied; deinit() releases the peripheral.
#   ports/esp32/machine_i2s.c:
#     - RX DMA frames are always 32-bit stereo, 8 bytes (get_dma_bits/get_dma_format,
#       I2S_RX_FRAME_SIZE_IN_BYTES): ibuf buys ibuf / 8 frames of microphone buffering whatever bits and
#       format the object was given; TX frames are bits/8 x channels bytes.
#     - dma_desc_num = max(ibuf // (256 * frame bytes), 2) (get_dma_buf_count, DMA_BUF_LEN_IN_I2S_FRAMES):
#       the HAL asks for whole 256-frame DMA buffers, sized in ms by the board file (audio.*.dma_ms).
#     - the channel and its DMA buffers are created by every I2S(...) and freed by deinit()
#       (i2s_new_channel / i2s_del_channel): the speaker object is kept across renders where the board
#       lets it (its own controller), so the DMA memory is not reallocated per reply.
#     - one object per controller (MP_STATE_PORT(machine_i2s_obj)[id]): I2S(id) again deinits the object
#       of that id, so on a half-duplex board the mic and the speaker are never open at once.
#     - irq() creates a FreeRTOS task each call (mp_machine_i2s_irq_update): called once per object init.
#     - gpio_cfg.mclk = I2S_GPIO_UNUSED and no `mck` argument (extmod/machine_i2s.c has it only with
#       MICROPY_PY_MACHINE_I2S_MCK, set by mimxrt alone): no MCLK output. ES8311 boards clock the codec
#       from BCLK; the ES7210 needs a real MCLK, so its microphone is unsupported on the official image
#       (audio.mic.mck_output "none") and usable only on a custom image that drives MCLK (docs/boards.md).
#     - the port reports no RX overflow (on_recv_q_ovf is NULL): the HAL infers overruns from the clock.
#   esp-idf driver/i2s_std.h: standard mode has 2 slots of the DMA bit width, so BCLK = 64*fs while RX is
#     open and 2*bits*fs for TX; a codec clocked from BCLK is re-planned on every open (per direction).
# Half duplex (board "duplex": "half", mic and speaker on one bus): the runtime closes the mic before it
# opens the speaker and re-opens it after; this module obeys, and closes the other side itself if asked
# to open one while the other holds the shared controller.
from micropython import const

from satellite import audio
from satellite.hal import LONG, PRESS, RELEASE

_LONG_MS = const(1500)        # a hold past this is a long press (LONG): the one owner of this time
_DEBOUNCE_MS = const(30)
# LED colours per PipelineState phase (IDLE, LISTENING, PROCESSING, SPEAKING, ERROR), then the device-local
# "recording queued" (satellite.deferred.LED_QUEUED = 5: DEFERRED recordings wait for the core).
_COLOURS = ((0, 0, 0), (0, 0, 255), (255, 160, 0), (0, 255, 0), (255, 0, 0), (160, 0, 255))

_DMA_BUF_FRAMES = const(256)  # DMA_BUF_LEN_IN_I2S_FRAMES (ports/esp32/machine_i2s.c)
_RX_FRAME_BYTES = const(8)    # I2S_RX_FRAME_SIZE_IN_BYTES: RX DMA is 32-bit stereo for every format
_RX_SLOT_BITS = const(32)     # so BCLK = 2 * 32 * fs whenever the mic is open
_MIN_DMA_BUFS = const(2)      # "ESP-IDF requires at least two DMA buffers"
_MIC_DMA_MS_MIN = const(200)  # an X25519, a GC pass or a flash write must not drop microphone audio
_MIC_DMA_MS = const(240)      # when the board file does not say (audio.mic.dma_ms)
_SPK_DMA_MS = const(64)       # audio.speaker.dma_ms default: stop latency is a deinit, not this depth


# The watchdog's park feeder (wdt_park, and boot.py after a soft reset): hardware timer 0, fed every quarter of
# the timeout. machine.Timer(id) of an id already made returns that object (ports/esp32/machine_timer.c v1.27.0,
# machine_timer_make_new), so wdt_start stops a park boot.py began; a soft reset deinits every timer
# (main.c soft_reset_exit: machine_timer_deinit_all) but not the watchdog.
PARK_TIMER = const(0)

_RESET_CAUSES = ("PWRON_RESET", "HARD_RESET", "WDT_RESET", "DEEPSLEEP_RESET", "SOFT_RESET")


class HalError(Exception):
    """Hardware this board file describes but the flashed image cannot drive; says what to do."""


def dma_plan(rx, rate, bits, channels, ms):
    """(ibuf bytes, DMA frames) for at least `ms` of audio at `rate`, in whole 256-frame DMA buffers:
    RX frames are 8 bytes whatever bits/channels; TX frames bits/8 x channels."""
    fb = _RX_FRAME_BYTES if rx else (bits // 8) * channels
    frames = (rate * ms + 999) // 1000
    bufs = (frames + _DMA_BUF_FRAMES - 1) // _DMA_BUF_FRAMES
    if bufs < _MIN_DMA_BUFS:
        bufs = _MIN_DMA_BUFS
    return bufs * _DMA_BUF_FRAMES * fb, bufs * _DMA_BUF_FRAMES


def mic_problem(board):
    """Why this board's microphone cannot be read with its image, or None: an ES7210 needs MCLK, which
    the official esp32 machine.I2S does not output (audio.mic.mck_output "custom_image": the image does)."""
    m = (board.get("audio") or {}).get("mic") or {}
    for c in board.get("codecs") or ():
        if c.get("chip") == "es7210" and c.get("mclk") == "mck_pin" and m.get("mck_output") != "custom_image":
            return ("the ES7210 microphone ADC needs MCLK on GPIO%s, and MicroPython's esp32 machine.I2S "
                    "has no mck output (ports/esp32/machine_i2s.c v1.27.0): flash a custom image with MCLK "
                    "(docs/boards.md) and set audio.mic.mck_output \"custom_image\"" % m.get("mck"))
    return None


class Esp32Hal:
    def __init__(self, board, machine=None, neopixel=None, clock=None, esp32=None):
        if machine is None:
            import machine
        if clock is None:
            import time as clock
        self._machine = machine
        self._esp32 = esp32               # the esp32 module (heap_largest_free); imported when first asked
        self._neopixel = neopixel
        self._ticks_ms = clock.ticks_ms
        self._ticks_us = clock.ticks_us
        self._ticks_diff = clock.ticks_diff
        # The generic ESP32-S3 image may boot at 160 MHz; the crypto and audio budgets assume 240 MHz.
        machine.freq(240000000)
        self._I2S = machine.I2S
        self._Pin = machine.Pin
        self.board = board
        self.duplex = board.get("duplex", "full")
        self.options = {"duplex": self.duplex}
        au = board["audio"]
        self._mic_cfg = au.get("mic") or {}
        self._spk_cfg = au.get("speaker") or {}
        self.mic_error = mic_problem(board)
        self.mic_supported = self.mic_error is None
        self.muted = False
        self.vol = 16384
        self.gain = 256
        self.brightness = 50
        self._mic = None
        self._spk = None
        self._mic_full = False
        self._spk_free = True
        self._mic_cb = self._on_mic            # bound once: no allocation per interrupt
        self._spk_cb = self._on_spk
        m = self._mic_cfg
        sel = audio.select_code(m.get("slot", "left"))
        self._mic_fmt = audio.fmt_code(m.get("bits", 16), m.get("channels", 1), sel, audio.MIC_SHIFT)
        s = self._spk_cfg
        self._spk_fmt = audio.fmt_code(s.get("bits", 16), s.get("channels", 1), 0, audio.VOL_SHIFT)
        self._mic_bpf = (m.get("bits", 16) // 8) * m.get("channels", 1)
        self._spk_bpf = (s.get("bits", 16) // 8) * s.get("channels", 1)
        self._shared = (self.duplex == "half" or m.get("i2s_id", 0) == s.get("i2s_id", 1))
        self._mic_raw = None
        self._spk_out = None
        self._spk_view = None
        self._spk_short = None                 # a view for the last, short chunk of a render
        self._spk_short_n = 0
        self._spk_frames = 0
        self._spk_rate = 0
        self._spk_dma_ms = 0
        self._t_spk_free = 0
        # mic overrun accounting (microseconds of audio waiting in the DMA ring)
        self.mic_overruns = 0
        self.mic_lost_us = 0
        self._rate = 16000
        self._fill_us = 0
        self._t_last = 0
        self._cap_us = 0
        self._chunk_us = 0
        self._chunk_rem = 0
        self._frac = 0
        self.mic_dma_frames = 0
        self._wdt = None                       # machine.WDT once the runtime armed it (wdt_start)
        self._wdt_ms = 0
        amp = board.get("amp_enable")
        self._amp = self._Pin(amp["pin"], self._Pin.OUT) if amp and "pin" in amp else None
        self._amp_on = amp.get("active_level", 1) if amp else 1
        if self._amp is not None:
            self._amp.value(1 - self._amp_on)
        Pin = self._Pin
        self._buttons = [(Pin(b["pin"], Pin.IN, Pin.PULL_UP if b.get("active_level", 0) == 0 else Pin.PULL_DOWN),
                          b.get("active_level", 0)) for b in board.get("buttons", [])[:1]]
        self._down = False
        self._t_edge = 0
        self._long_sent = False
        self._gest = []
        led = board.get("led") or {}
        self._np = None
        if led.get("kind") == "ws2812":
            np = neopixel
            if np is None:
                import neopixel as np
            self._np = np.NeoPixel(Pin(led["pin"], Pin.OUT), 1)
        self._dac_plan = None                  # (rate, slot bits) the ES8311 clock tree is set for
        self._adc_rate = 0
        self._codecs(board)
        if self.mic_error:
            self.log("hal: microphone unsupported: " + self.mic_error)

    def _codecs(self, board):
        i2c_cfg = board.get("i2c")
        self._dac = None
        self._dac_role = None
        self._dac_bclk = True
        self._adc = None
        self._adc_cfg = None
        self._ioe = None                       # an amp enable on an I2C expander (Atomic Echo Base PI4IOE)
        if not i2c_cfg or not board.get("codecs"):
            return
        Pin = self._Pin
        i2c = self._machine.I2C(0, sda=Pin(i2c_cfg["sda"]), scl=Pin(i2c_cfg["scl"]), freq=i2c_cfg.get("freq", 100000))
        amp = board.get("amp_enable")
        if amp and amp.get("expander") == "pi4ioe5v6408":
            from satellite.hal.pi4ioe import PI4IOE
            self._ioe = PI4IOE(i2c, amp["address"], amp["mask"])
            self._ioe.init()                   # amp off until the speaker opens, as a GPIO enable
        for c in board["codecs"]:
            if c["chip"] == "es8311":
                from satellite.hal.es8311 import ES8311
                self._dac = ES8311(i2c, c["address"])
                self._dac_role = c.get("role", "speaker")
                self._dac_bclk = c.get("mclk") == "bclk"
                # Brought up for the speaker's slots; every mic_open / spk_open re-plans the clock tree for
                # the BCLK that direction really runs (64*fs with RX open, 2*bits*fs for TX).
                rate = self._spk_cfg["rates"][0]
                bits = self._spk_cfg.get("bits", 16)
                self._dac.init(rate, bits, mclk_from_bclk=self._dac_bclk)
                self._dac_plan = (rate, bits)
            elif c["chip"] == "es7210":
                from satellite.hal.es7210 import ES7210
                self._adc = ES7210(i2c, c["address"])
                self._adc_cfg = tuple(c.get("mics", (1, 2)))
                if self.mic_error is None:
                    self._adc_init(self._mic_cfg["rates"][0])

    def _adc_init(self, rate):
        # MCLK is 256*fs from the I2S peripheral (custom image): the ES7210 dividers are ratio-locked, but a
        # new rate is still written so the codec state always matches the bus.
        self._adc.init(rate, self._mic_cfg.get("bits", 16), mics=self._adc_cfg, mclk_hz=256 * rate)
        self._adc_rate = rate

    def _dac_clock(self, rate, slot_bits):
        """Re-plan the ES8311 clock tree when the bus BCLK changes (direction or rate)."""
        if self._dac is None or self._dac_plan == (rate, slot_bits):
            return
        self._dac.set_rate(rate, slot_bits, mclk_from_bclk=self._dac_bclk)
        self._dac_plan = (rate, slot_bits)

    def log(self, line):
        print(line)

    # -- Wi-Fi ---------------------------------------------------------------------------------------
    async def network_up(self, rt):
        import asyncio
        import network
        rec = rt.load_record()
        wlan = network.WLAN(network.STA_IF)
        wlan.active(True)
        if wlan.isconnected():
            return
        if rec is None or not rec.wifi_ssid:
            rt.log("no Wi-Fi network in the provisioning record: provision one (alabama provision)")
            return
        wlan.connect(rec.wifi_ssid, rec.wifi_passphrase)
        t0 = self._ticks_ms()
        while not wlan.isconnected():
            if self._ticks_diff(self._ticks_ms(), t0) > 20000:
                rt.log("Wi-Fi %s: not connected after 20 s (status %s); the runtime keeps retrying the core"
                       % (rec.wifi_ssid, wlan.status()))
                return
            await asyncio.sleep_ms(200)
        rt.log("Wi-Fi %s up: %s" % (rec.wifi_ssid, wlan.ifconfig()[0]))

    # -- health (satellite.health) ---------------------------------------------------------------------
    def rssi(self):
        """dBm of the access point we are associated with: WLAN.status('rssi') (docs/library/network.WLAN.rst:
        STA interface, connected only); None when not connected."""
        import network
        w = network.WLAN(network.STA_IF)
        return w.status("rssi") if w.isconnected() else None

    def reset_cause(self):
        """machine.reset_cause() by its constant's name (docs/library/machine.rst: PWRON_RESET, HARD_RESET,
        WDT_RESET, DEEPSLEEP_RESET, SOFT_RESET; ports/esp32/modmachine.c maps software resets to SOFT_RESET and
        answers 0 for a cause it does not map, reported here as "reset_cause 0")."""
        c = self._machine.reset_cause()
        for name in _RESET_CAUSES:
            if getattr(self._machine, name, None) == c:
                return name
        return "reset_cause %d" % c

    # -- watchdog (the runtime's rule: runtime.py, "The watchdog"; docs/reliability.md) --------------------
    def wdt_start(self, ms):
        """machine.WDT(timeout=ms): the ESP32 task watchdog with a user that nothing removes (not even a soft
        reset); constructing it again only reconfigures the timeout (ports/esp32/machine_wdt.c v1.27.0)."""
        m = self._machine
        m.Timer(PARK_TIMER).deinit()           # a park feeder (ours or boot.py's) ends: the runtime feeds now
        self._wdt = m.WDT(timeout=ms)
        self._wdt_ms = ms

    def wdt_feed(self):
        w = self._wdt
        if w is not None:
            w.feed()

    def wdt_park(self):
        w = self._wdt
        if w is None:
            return

        def feed(t):
            w.feed()
        self._machine.Timer(PARK_TIMER).init(period=max(self._wdt_ms // 4, 1), callback=feed)

    def heap_largest_free(self):
        """The largest free block of the IDF data heap, in bytes: max of the "largest free block" column of
        esp32.idf_heap_info(esp32.HEAP_DATA) (docs/library/esp32.rst: per region total, free, largest free block,
        minimum free). It is the room the MicroPython heap grows into in one piece and what Wi-Fi and TLS buffers
        come from: a fragmented IDF heap shows here while gc.mem_free() still looks ample."""
        e = self._esp32
        if e is None:
            import esp32 as e
            self._esp32 = e
        return max([r[2] for r in e.idf_heap_info(e.HEAP_DATA)] or [0])

    def flash_free(self):
        """Free bytes of the filesystem (os.statvfs: f_bsize * f_bavail)."""
        import os
        st = os.statvfs("/")
        return st[0] * st[4]

    # -- knobs -----------------------------------------------------------------------------------------
    def set_volume(self, q14):
        self.vol = q14

    def set_mic_gain(self, q8):
        self.gain = q8

    def set_led_brightness(self, b):
        self.brightness = b

    def led(self, phase, brightness):
        if self._np is None:
            return
        r, g, b = _COLOURS[phase] if 0 <= phase < len(_COLOURS) else _COLOURS[4]
        self._np[0] = (r * brightness // 100, g * brightness // 100, b * brightness // 100)
        self._np.write()

    # -- panel (docs/display.md) ------------------------------------------------------------------------
    _panel = None

    def panel(self):
        """The board's panel (hal/ili9342.py, imported only for a board file with a "display" section),
        initialised and lit, or None."""
        d = self.board.get("display")
        if not d:
            return None
        if self._panel is None:
            from satellite.hal.ili9342 import Ili9342
            import time
            sleep_ms = getattr(time, "sleep_ms", None) or (lambda ms: time.sleep(ms / 1000))   # CPython tests
            self._panel = Ili9342(d, self._machine, sleep_ms)
            self._panel.backlight(100)
        return self._panel

    # -- button ------------------------------------------------------------------------------------------
    def gesture(self):
        if self._buttons:
            pin, active = self._buttons[0]
            down = pin.value() == active
            now = self._ticks_ms()
            if down != self._down and self._ticks_diff(now, self._t_edge) > _DEBOUNCE_MS:
                self._down = down
                self._t_edge = now
                self._long_sent = False
                self._gest.append(PRESS if down else RELEASE)
            elif down and not self._long_sent and self._ticks_diff(now, self._t_edge) > _LONG_MS:
                self._long_sent = True
                self._gest.append(LONG)
        if self._gest:
            return self._gest.pop(0)
        return 0

    def _i2s(self, cfg, default_id, mode, rate, ibuf):
        Pin = self._Pin
        I2S = self._I2S
        fmt = I2S.STEREO if cfg.get("channels", 1) == 2 else I2S.MONO
        if cfg.get("mck_output") == "custom_image" and cfg.get("mck") is not None:
            # custom image only (docs/boards.md): the official esp32 port refuses `mck` (TypeError)
            return I2S(cfg.get("i2s_id", default_id), sck=Pin(cfg["sck"]), ws=Pin(cfg["ws"]), sd=Pin(cfg["sd"]),
                       mck=Pin(cfg["mck"]), mode=mode, bits=cfg.get("bits", 16), format=fmt, rate=rate, ibuf=ibuf)
        return I2S(cfg.get("i2s_id", default_id), sck=Pin(cfg["sck"]), ws=Pin(cfg["ws"]), sd=Pin(cfg["sd"]),
                   mode=mode, bits=cfg.get("bits", 16), format=fmt, rate=rate, ibuf=ibuf)

    # -- microphone ---------------------------------------------------------------------------------------
    def _on_mic(self, i2s):
        self._mic_full = True

    def mic_busy(self):
        return self._mic is not None

    def mic_open(self, rate, nframes):
        if self.mic_error:
            raise HalError("microphone unsupported on this board: " + self.mic_error)
        m = self._mic_cfg
        if self._spk is not None and self._shared:
            self.log("hal: speaker still open on the shared I2S bus: closing it before the mic")
            self._spk_release()
        if self._mic is not None:
            self.mic_close()
        if self._dac is not None and self._dac_role in ("both", "mic"):
            self._dac_clock(rate, _RX_SLOT_BITS)
        if self._adc is not None and self._adc_rate != rate:
            self._adc_init(rate)
        n = nframes * self._mic_bpf
        if self._mic_raw is None or len(self._mic_raw) != n:
            self._mic_raw = bytearray(n)
        ms = m.get("dma_ms", _MIC_DMA_MS)
        if ms < _MIC_DMA_MS_MIN:
            ms = _MIC_DMA_MS_MIN
        ibuf, frames = dma_plan(True, rate, 32, 2, ms)
        self._mic = self._i2s(m, 0, self._I2S.RX, rate, ibuf)
        self.mic_dma_frames = frames
        self._rate = rate
        self._cap_us = frames * 1000 // rate * 1000 + (frames * 1000 % rate) * 1000 // rate
        self._chunk_us = nframes * 1000000 // rate
        self._chunk_rem = nframes * 1000000 % rate
        self._frac = 0
        self._fill_us = 0
        self._t_last = self._ticks_us()
        self._mic.irq(self._mic_cb)
        self._mic_full = False
        self._mic.readinto(self._mic_raw)      # non-blocking: the irq says when it is full

    def mic_close(self):
        if self._mic is not None:
            self._mic.deinit()
            self._mic = None
            self._mic_full = False
            if self.mic_overruns:
                self.log("hal: mic overruns %d, %d ms of audio lost so far" % (self.mic_overruns,
                                                                                self.mic_lost_us // 1000))

    def mic_wait_ms(self):
        return 0 if self._mic_full else 2

    def mic_take(self, dst, pos, nframes):
        audio.mic_to_s16(dst, pos, self._mic_raw, nframes, self._mic_fmt, self.gain)
        self.mic_skip()

    def mic_skip(self):
        self._mic_full = False
        if self._mic is not None:
            self._account()
            self._mic.readinto(self._mic_raw)

    def _account(self):
        # One chunk leaves; the clock says how much audio arrived since the last one. What is still
        # waiting past the DMA ring's capacity was overwritten by the port (it reports no overflow).
        now = self._ticks_us()
        f = self._fill_us + self._ticks_diff(now, self._t_last) - self._chunk_us
        self._t_last = now
        self._frac += self._chunk_rem
        if self._frac >= self._rate:
            self._frac -= self._rate
            f -= 1
        if f > self._cap_us:
            self.mic_overruns += 1
            self.mic_lost_us += f - self._cap_us
            f = self._cap_us
        elif f < 0:
            f = 0
        self._fill_us = f

    def mic_lost_frames(self):
        return self.mic_lost_us * (self._rate // 1000) // 1000

    # -- speaker --------------------------------------------------------------------------------------------
    def _on_spk(self, i2s):
        self._spk_free = True
        self._t_spk_free = self._ticks_ms()

    def spk_open(self, rate, nframes):
        s = self._spk_cfg
        if self._mic is not None and self._shared:
            self.log("hal: mic still open on the shared I2S bus: closing it before the speaker")
            self.mic_close()
        if self._dac is not None and self._dac_role in ("both", "speaker"):
            self._dac_clock(rate, s.get("bits", 16))
        n = nframes * self._spk_bpf
        if self._spk_out is None or len(self._spk_out) != n:
            self._spk_out = bytearray(n)
            self._spk_view = memoryview(self._spk_out)
            self._spk_short = None
            self._spk_short_n = 0
        self._spk_frames = nframes
        if self._spk is None or self._spk_rate != rate:
            if self._spk is not None:
                self._spk_release()
            ms = s.get("dma_ms", _SPK_DMA_MS)
            ibuf, frames = dma_plan(False, rate, s.get("bits", 16), s.get("channels", 1), ms)
            self._spk = self._i2s(s, 1, self._I2S.TX, rate, ibuf)
            self._spk.irq(self._spk_cb)
            self._spk_rate = rate
            self._spk_dma_ms = (frames * 1000 + rate - 1) // rate
        self._spk_free = True
        self._t_spk_free = self._ticks_ms()
        if self._amp is not None:
            self._amp.value(self._amp_on)
        if self._ioe is not None:
            self._ioe.enable(True)

    def spk_wait_ms(self):
        return 0 if self._spk_free else 2

    def spk_write(self, buf, pos, nframes):
        if self._spk is None:
            return 0
        if nframes > self._spk_frames:
            nframes = self._spk_frames
        audio.s16_to_spk(self._spk_out, buf, pos, nframes, self._spk_fmt, self.vol)
        n = nframes * self._spk_bpf
        if n == len(self._spk_out):
            out = self._spk_out
        else:
            # the last chunk of a render: only its frames go out, not the stale tail of the buffer (one
            # small view per distinct short length, reused)
            if self._spk_short_n != n:
                self._spk_short = self._spk_view[:n]
                self._spk_short_n = n
            out = self._spk_short
        self._spk_free = False
        self._spk.write(out)                   # non-blocking; the irq frees the buffer
        return nframes

    def spk_drain_ms(self):
        # the last buffer left our hands when the irq fired; the DMA ring still plays up to dma_ms after it
        if not self._spk_free:
            return 5
        d = self._spk_dma_ms - self._ticks_diff(self._ticks_ms(), self._t_spk_free)
        return d if d > 0 else 0

    def _spk_release(self):
        if self._spk is not None:
            self._spk.deinit()
            self._spk = None
            self._spk_rate = 0
        self._spk_free = True

    def spk_stop(self):
        # Silence within one frame: drop the DMA ring by releasing the peripheral now (barge-in; rare).
        self._spk_release()

    def spk_close(self):
        # The render ended and drained. On its own controller the TX object stays open (its DMA ring plays
        # zeros: auto_clear) so the next render reuses it; a shared bus is handed back to the mic.
        if self._shared:
            self._spk_release()
        if self._amp is not None:
            self._amp.value(1 - self._amp_on)
        if self._ioe is not None:
            self._ioe.enable(False)
