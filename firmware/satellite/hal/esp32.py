# The ESP32-S3 HAL: machine.I2S mic and speaker, the button, the status LED, Wi-Fi and the codec chips,
# all from the board file. Thin: it converts samples with satellite.audio and paces by I2S interrupts; it
# holds no protocol logic and is never imported on the unix port (app.make_hal picks the simulated HAL).
#
# Checked against the MicroPython docs (library/machine.I2S.rst, esp32 quickref, network.WLAN):
#   I2S(id, sck=Pin, ws=Pin, sd=Pin, mode=I2S.RX|I2S.TX, bits=16|32, format=I2S.MONO|I2S.STEREO,
#       rate=Hz, ibuf=bytes); irq(handler) switches readinto()/write() to non-blocking mode, the
#       handler runs (scheduled) when the buffer was filled / emptied; deinit() releases the peripheral.
#   No MCLK output on the esp32 port and no PDM RX (HARDWARE.md): board files say how they cope.
# Half duplex (board "duplex": "half", mic and speaker on one bus): the runtime closes the mic
# (deinit) before it opens the speaker and re-opens it after; this module just obeys.
import network
import time
from machine import I2S, Pin

from satellite import audio

_LONG_MS = 1500          # a hold past this is a long press (runtime.LONG)
_DEBOUNCE_MS = 30
_PRESS = 1
_RELEASE = 2
_LONG = 3
# LED colours per PipelineState phase (IDLE, LISTENING, PROCESSING, SPEAKING, ERROR).
_COLOURS = ((0, 0, 0), (0, 0, 255), (255, 160, 0), (0, 255, 0), (255, 0, 0))


def _fmt(channels):
    return I2S.STEREO if channels == 2 else I2S.MONO


class Esp32Hal:
    def __init__(self, board):
        # The generic ESP32-S3 image may boot at 160 MHz; the crypto and audio budgets assume 240 MHz.
        import machine
        machine.freq(240000000)
        self.board = board
        self.duplex = board.get("duplex", "full")
        self.options = {"duplex": self.duplex}
        au = board["audio"]
        self._mic_cfg = au.get("mic")
        self._spk_cfg = au.get("speaker")
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
        m = self._mic_cfg or {}
        sel = audio.select_code(m.get("slot", "left"))
        self._mic_fmt = audio.fmt_code(m.get("bits", 16), m.get("channels", 1), sel, audio.MIC_SHIFT)
        s = self._spk_cfg or {}
        self._spk_fmt = audio.fmt_code(s.get("bits", 16), s.get("channels", 1), 0, audio.VOL_SHIFT)
        self._mic_raw = None
        self._spk_out = None
        amp = board.get("amp_enable")
        self._amp = Pin(amp["pin"], Pin.OUT) if amp else None
        self._amp_on = amp["active_level"] if amp else 1
        if self._amp is not None:
            self._amp.value(1 - self._amp_on)
        self._buttons = [(Pin(b["pin"], Pin.IN, Pin.PULL_UP if b.get("active_level", 0) == 0 else Pin.PULL_DOWN),
                          b.get("active_level", 0)) for b in board.get("buttons", [])[:1]]
        self._down = False
        self._t_edge = 0
        self._long_sent = False
        self._gest = []
        led = board.get("led") or {}
        self._np = None
        if led.get("kind") == "ws2812":
            import neopixel
            self._np = neopixel.NeoPixel(Pin(led["pin"], Pin.OUT), 1)
        self._codecs(board)

    def _codecs(self, board):
        i2c_cfg = board.get("i2c")
        self._dac = None
        self._adc = None
        if not i2c_cfg or not board.get("codecs"):
            return
        from machine import I2C
        i2c = I2C(0, sda=Pin(i2c_cfg["sda"]), scl=Pin(i2c_cfg["scl"]), freq=i2c_cfg.get("freq", 100000))
        for c in board["codecs"]:
            if c["chip"] == "es8311":
                from satellite.hal.es8311 import ES8311
                self._dac = ES8311(i2c, c["address"])
                self._dac.init(self._spk_cfg["rates"][0], self._spk_cfg.get("bits", 16),
                               mclk_from_bclk=c.get("mclk") == "bclk")
            elif c["chip"] == "es7210":
                from satellite.hal.es7210 import ES7210
                self._adc = ES7210(i2c, c["address"])
                self._adc.init(self._mic_cfg["rates"][0], self._mic_cfg.get("bits", 16), mics=tuple(c.get("mics", (1, 2))))

    def log(self, line):
        print(line)

    # -- Wi-Fi ---------------------------------------------------------------------------------------
    async def network_up(self, rt):
        import asyncio
        rec = rt.load_record()
        wlan = network.WLAN(network.STA_IF)
        wlan.active(True)
        if wlan.isconnected():
            return
        if rec is None or not rec.wifi_ssid:
            rt.log("no Wi-Fi network in the provisioning record: provision one (alabama provision)")
            return
        wlan.connect(rec.wifi_ssid, rec.wifi_passphrase)
        t0 = time.ticks_ms()
        while not wlan.isconnected():
            if time.ticks_diff(time.ticks_ms(), t0) > 20000:
                rt.log("Wi-Fi %s: not connected after 20 s (status %s); the runtime keeps retrying the core"
                       % (rec.wifi_ssid, wlan.status()))
                return
            await asyncio.sleep_ms(200)
        rt.log("Wi-Fi %s up: %s" % (rec.wifi_ssid, wlan.ifconfig()[0]))

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

    # -- button ------------------------------------------------------------------------------------------
    def gesture(self):
        if self._buttons:
            pin, active = self._buttons[0]
            down = pin.value() == active
            now = time.ticks_ms()
            if down != self._down and time.ticks_diff(now, self._t_edge) > _DEBOUNCE_MS:
                self._down = down
                self._t_edge = now
                self._long_sent = False
                self._gest.append(_PRESS if down else _RELEASE)
            elif down and not self._long_sent and time.ticks_diff(now, self._t_edge) > _LONG_MS:
                self._long_sent = True
                self._gest.append(_LONG)
        if self._gest:
            return self._gest.pop(0)
        return 0

    # -- microphone ---------------------------------------------------------------------------------------
    def _on_mic(self, i2s):
        self._mic_full = True

    def mic_open(self, rate, nframes):
        m = self._mic_cfg
        bpf = (m.get("bits", 16) // 8) * m.get("channels", 1)
        if self._mic_raw is None or len(self._mic_raw) != nframes * bpf:
            self._mic_raw = bytearray(nframes * bpf)
        self._mic = I2S(m.get("i2s_id", 0), sck=Pin(m["sck"]), ws=Pin(m["ws"]), sd=Pin(m["sd"]), mode=I2S.RX,
                        bits=m.get("bits", 16), format=_fmt(m.get("channels", 1)), rate=rate,
                        ibuf=4 * len(self._mic_raw))
        self._mic.irq(self._mic_cb)
        self._mic_full = False
        self._mic.readinto(self._mic_raw)      # non-blocking: the irq says when it is full

    def mic_close(self):
        if self._mic is not None:
            self._mic.deinit()
            self._mic = None

    def mic_wait_ms(self):
        return 0 if self._mic_full else 2

    def mic_take(self, dst, pos, nframes):
        audio.mic_to_s16(dst, pos, self._mic_raw, nframes, self._mic_fmt, self.gain)
        self.mic_skip()

    def mic_skip(self):
        self._mic_full = False
        if self._mic is not None:
            self._mic.readinto(self._mic_raw)

    # -- speaker --------------------------------------------------------------------------------------------
    def _on_spk(self, i2s):
        self._spk_free = True

    def spk_open(self, rate, nframes):
        s = self._spk_cfg
        bpf = (s.get("bits", 16) // 8) * s.get("channels", 1)
        if self._spk_out is None or len(self._spk_out) != nframes * bpf:
            self._spk_out = bytearray(nframes * bpf)
        self._spk = I2S(s.get("i2s_id", 1), sck=Pin(s["sck"]), ws=Pin(s["ws"]), sd=Pin(s["sd"]), mode=I2S.TX,
                        bits=s.get("bits", 16), format=_fmt(s.get("channels", 1)), rate=rate,
                        ibuf=4 * len(self._spk_out))
        self._spk.irq(self._spk_cb)
        self._spk_free = True
        if self._amp is not None:
            self._amp.value(self._amp_on)

    def spk_wait_ms(self):
        return 0 if self._spk_free else 2

    def spk_write(self, buf, pos, nframes):
        if self._spk is None:
            return 0
        audio.s16_to_spk(self._spk_out, buf, pos, nframes, self._spk_fmt, self.vol)
        self._spk_free = False
        self._spk.write(self._spk_out)         # non-blocking; the irq frees the buffer
        return nframes

    def spk_drain_ms(self):
        return 0 if self._spk_free else 5

    def spk_stop(self):
        # Silence within one frame: drop the DMA buffer by releasing the peripheral now.
        if self._spk is not None:
            self._spk.deinit()
            self._spk = None
        self._spk_free = True

    def spk_close(self):
        self.spk_stop()
        if self._amp is not None:
            self._amp.value(1 - self._amp_on)
