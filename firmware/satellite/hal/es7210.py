# ES7210 four-channel microphone ADC register driver over an injected I2C bus; no pins, no buses created here.
#
# References:
#   [DS]  Everest Semiconductor, "ES7210 4-Channel Audio ADC" datasheet / product brief
#         (http://www.everest-semi.com/pdf/ES7210%20PB.pdf): I2C address 0x40-0x43 set by AD1/AD0,
#         256/384*fs and 12.288 MHz MCLK clocking, I2S/LJ/DSP/TDM serial port.
#   [UG]  Everest Semiconductor, "ES7210 User Guide": register map REG00 reset, REG01 clock off,
#         REG02 main clock (ADC divider, doubler, DLL), REG04/05 LRCK divider, REG06 power down,
#         REG07 OSR, REG08 mode (master/slave), REG09/0A state-machine timing, REG11/12 serial port,
#         REG14/15 digital mute, REG20-23 high-pass filters, REG40 analog, REG41/42 mic bias,
#         REG43-46 mic PGA gain, REG47-4A mic power, REG4B/4C mic-pair power.
#   Espressif esp_codec_dev `device/es7210/es7210.c` was read to learn the bring-up order and the
#   clock-divider table; this module is our own code.
#
# Always an I2S slave, Philips format, MIC1 on the left slot and MIC2 on the right of SDOUT1
# (two microphones or fewer: no TDM, which machine.I2S cannot receive). The ES7210 needs a real MCLK
# (it has no BCLK-as-MCLK mode in this driver), 256*fs and locked to BCLK. MicroPython's esp32 machine.I2S
# outputs none (v1.27.0 ports/esp32/machine_i2s.c: gpio_cfg.mclk = I2S_GPIO_UNUSED, no `mck` argument), and
# a PWM pin runs from another clock and drifts against BCLK: hal/esp32.py marks this mic unsupported
# unless the board file says the image drives mck (audio.mic.mck_output "custom_image", docs/boards.md).
from micropython import const

ADDR_MIN = const(0x40)
ADDR_MAX = const(0x43)

_REG_RESET = const(0x00)
_REG_CLK_OFF = const(0x01)
_REG_MAINCLK = const(0x02)
_REG_LRCK_H = const(0x04)
_REG_LRCK_L = const(0x05)
_REG_POWER_DOWN = const(0x06)
_REG_OSR = const(0x07)
_REG_MODE = const(0x08)
_REG_TIME0 = const(0x09)
_REG_TIME1 = const(0x0A)
_REG_SDP1 = const(0x11)
_REG_SDP2 = const(0x12)
_REG_MUTE12 = const(0x14)
_REG_MUTE34 = const(0x15)
_REG_HPF34_2 = const(0x20)
_REG_HPF34_1 = const(0x21)
_REG_HPF12_1 = const(0x22)
_REG_HPF12_2 = const(0x23)
_REG_ANALOG = const(0x40)
_REG_BIAS12 = const(0x41)
_REG_BIAS34 = const(0x42)
_REG_GAIN1 = const(0x43)   # MIC1..MIC4 gain at 0x43..0x46
_REG_POWER1 = const(0x47)  # MIC1..MIC4 power at 0x47..0x4A
_REG_PAIR12 = const(0x4B)
_REG_PAIR34 = const(0x4C)

# REG11 [UG serial port 1]: bits 7:5 word length (0b011 = 16-bit, 0b100 = 32-bit), bits 1:0 format
# (0 = I2S Philips).
_SDP_BITS_MASK = const(0xE0)
_SDP_FMT_MASK = const(0x03)
_SDP_16 = const(0x60)
_SDP_32 = const(0x80)

_GAIN_ENABLE = const(0x10)  # REG43-46 bit 4: PGA on
_GAIN_MASK = const(0x0F)

# PGA gain codes [UG REG43-46]: code -> dB. 0..10 are 3 dB steps, then 33, 34.5, 36, 37.5 dB.
_GAIN_DB_X10 = (0, 30, 60, 90, 120, 150, 180, 210, 240, 270, 300, 330, 345, 360, 375)

# Clock table [UG clock section / divider table]: (mclk_hz or 0 for "256*fs", rate or 0 for "any",
# adc_div, doubler, dll, osr, lrck_div). REG02 = adc_div | doubler << 6 | dll << 7.
_CLOCKS = (
    (0, 0, 1, 1, 1, 0x20, 256),              # MCLK = 256*fs: the same dividers at every rate
    (12288000, 8000, 3, 0, 1, 0x20, 1536),
    (12288000, 16000, 3, 1, 1, 0x20, 768),
    (12288000, 24000, 1, 0, 1, 0x20, 512),
    (12288000, 32000, 3, 0, 0, 0x20, 384),
    (12288000, 48000, 1, 1, 1, 0x20, 256),
)
_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)

ERR_BAD_ARG = const(1)
ERR_NO_CHIP = const(2)


class CodecError(Exception):
    """A codec call that cannot be honoured; ``code`` is ERR_BAD_ARG or ERR_NO_CHIP."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def clock_plan(rate, mclk_hz=0):
    """(REG07, REG02, REG04, REG05) values for `rate` with MCLK `mclk_hz` (0 means 256*rate)."""
    if rate not in _RATES:
        raise CodecError(ERR_BAD_ARG, "es7210: unsupported sample rate %d" % rate)
    if mclk_hz == 256 * rate:
        mclk_hz = 0
    for row in _CLOCKS:
        if row[0] == mclk_hz and (row[1] == 0 or row[1] == rate):
            lrck = row[6]
            return ((_REG_OSR, row[5]), (_REG_MAINCLK, row[2] | (row[3] << 6) | (row[4] << 7)),
                    (_REG_LRCK_H, lrck >> 8), (_REG_LRCK_L, lrck & 0xFF))
    raise CodecError(ERR_BAD_ARG, "es7210: no divider for %d Hz from a %d Hz MCLK" % (rate, mclk_hz))


def gain_code(db):
    """Largest PGA step not above `db` (0..37.5 dB)."""
    if db < 0 or db > 37.5:
        raise CodecError(ERR_BAD_ARG, "es7210: mic gain %r dB outside 0..37.5" % (db,))
    want = int(db * 10 + 0.5)
    code = 0
    for i in range(len(_GAIN_DB_X10)):
        if _GAIN_DB_X10[i] <= want:
            code = i
    return code


class ES7210:
    """One ES7210 on an I2C bus object with ``writeto_mem(addr, reg, buf)``/``readfrom_mem(addr, reg, n)``."""

    def __init__(self, i2c, addr=ADDR_MIN):
        if addr < ADDR_MIN or addr > ADDR_MAX:
            raise CodecError(ERR_BAD_ARG, "es7210: address 0x%02x outside 0x40..0x43" % addr)
        self._i2c = i2c
        self._addr = addr
        self._b = bytearray(1)
        self._mics = (1, 2)

    def _w(self, reg, value):
        self._b[0] = value
        self._i2c.writeto_mem(self._addr, reg, self._b)

    def _r(self, reg):
        return self._i2c.readfrom_mem(self._addr, reg, 1)[0]

    def _update(self, reg, mask, value):
        """Read-modify-write of the bits in `mask` (registers whose other bits we do not own)."""
        self._w(reg, (self._r(reg) & ~mask & 0xFF) | (value & mask))

    def _write_all(self, pairs):
        for reg, value in pairs:
            self._w(reg, value)

    def init(self, rate, bits=16, mics=(1, 2), gain_db=30, mclk_hz=0):
        """Bring the ADC up as an I2S-Philips slave: `mics` (at most two of 1..4) on SDOUT1 L/R."""
        if bits not in (16, 32):
            raise CodecError(ERR_BAD_ARG, "es7210: bits must be 16 or 32, not %d" % bits)
        if not mics or len(mics) > 2:
            raise CodecError(ERR_BAD_ARG, "es7210: select one or two microphones (more needs TDM)")
        for m in mics:
            if m < 1 or m > 4:
                raise CodecError(ERR_BAD_ARG, "es7210: microphone %r is not 1..4" % (m,))
        plan = clock_plan(rate, mclk_hz)
        gcode = gain_code(gain_db)
        self._mics = tuple(mics)
        # 1. [UG REG00] full reset, then release with the state machine held in its start state.
        self._w(_REG_RESET, 0xFF)
        self._w(_REG_RESET, 0x41)
        # 2. [UG REG01] every internal clock off while configuring.
        self._w(_REG_CLK_OFF, 0x3F)
        # 3. [UG REG09/0A] chip and power-on state-cycle timing.
        self._write_all(((_REG_TIME0, 0x30), (_REG_TIME1, 0x30)))
        # 4. [UG REG20-23] high-pass filters on for both ADC pairs.
        self._write_all(((_REG_HPF12_2, 0x2A), (_REG_HPF12_1, 0x0A), (_REG_HPF34_2, 0x0A),
                         (_REG_HPF34_1, 0x2A)))
        # 5. [UG REG08 bit 0] serial port slave.
        self._update(_REG_MODE, 0x01, 0x00)
        # 6. [UG REG40-42] analog: VDDA 3.3 V, VMID start; mic bias 2.87 V for both pairs.
        self._write_all(((_REG_ANALOG, 0x43), (_REG_BIAS12, 0x70), (_REG_BIAS34, 0x70)))
        # 7. [UG REG07/02/04/05] oversampling and dividers for the rate.
        self._write_all(plan)
        # 8. [UG REG11/12] word length and Philips format; REG12 = 0: plain I2S, not TDM.
        self._update(_REG_SDP1, _SDP_BITS_MASK | _SDP_FMT_MASK, _SDP_16 if bits == 16 else _SDP_32)
        self._w(_REG_SDP2, 0x00)
        # 9. Microphones: all pairs off, then each selected mic's clock, pair power and PGA on.
        self._select_mics(gcode)
        # 10. [UG REG06/47-4A] leave power-down; per-mic power on for the selected ones.
        self._w(_REG_POWER_DOWN, 0x00)
        for m in range(1, 5):
            self._w(_REG_POWER1 + m - 1, 0x08 if m in self._mics else 0xFF)
        # 11. [UG REG00] restart the state machine with the new configuration.
        self._w(_REG_RESET, 0x71)
        self._w(_REG_RESET, 0x41)

    def _select_mics(self, gcode):
        for m in range(1, 5):
            self._update(_REG_GAIN1 + m - 1, _GAIN_ENABLE, 0x00)
        self._w(_REG_PAIR12, 0xFF)
        self._w(_REG_PAIR34, 0xFF)
        clk_off = 0x3F
        for m in self._mics:
            if m <= 2:
                clk_off &= ~0x0B          # REG01: ADC1/2 clocks on
                self._w(_REG_PAIR12, 0x00)
            else:
                clk_off &= ~0x15          # REG01: ADC3/4 clocks on
                self._w(_REG_PAIR34, 0x00)
            self._w(_REG_GAIN1 + m - 1, _GAIN_ENABLE | gcode)
        self._w(_REG_CLK_OFF, clk_off)

    def set_gain(self, db):
        """PGA gain for every selected microphone, on the codec's grid (0..37.5 dB)."""
        code = gain_code(db)
        for m in self._mics:
            self._w(_REG_GAIN1 + m - 1, _GAIN_ENABLE | code)

    def mute(self, on=True):
        """Digital mute of all four ADC channels [UG REG14/15 bits 1:0]."""
        v = 0x03 if on else 0x00
        self._update(_REG_MUTE12, 0x03, v)
        self._update(_REG_MUTE34, 0x03, v)

    def power_down(self):
        """Microphones, analog and clocks off [UG REG47-4C, REG40, REG01, REG06]."""
        for m in range(4):
            self._w(_REG_POWER1 + m, 0xFF)
        self._write_all(((_REG_PAIR12, 0xFF), (_REG_PAIR34, 0xFF), (_REG_ANALOG, 0xC0),
                         (_REG_CLK_OFF, 0x7F), (_REG_POWER_DOWN, 0x07)))
