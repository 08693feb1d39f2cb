# ES8311 mono codec (DAC + ADC) register driver over an injected I2C bus; it never creates pins or buses.
#
# References (register meanings and the power-up order):
#   [UG]  Everest Semiconductor, "ES8311 User Guide" Rev 1.11 (2018): register map REG00-REG45,
#         "Clock Manager" (REG01-REG08), "Serial Digital Port" (REG09/REG0A), "System" (REG0B-REG14),
#         "ADC" (REG15-REG1C), "DAC" (REG31-REG37), "GPIO" (REG44/REG45), chip ID (REGFD/REGFE).
#   [DS]  Everest Semiconductor, "ES8311 Low Power Mono Audio Codec" datasheet: I2C address 0x18/0x19
#         (CE pin), slave-mode clocking (MCLK = 256*fs, or SCLK used as MCLK).
#   Espressif esp_codec_dev `device/es8311/es8311.c` was read to learn the order in which the
#   registers are brought up; this module is our own table-driven code, not a port of it.
#
# The codec is always an I2S *slave* here: the ESP32-S3 (machine.I2S, controller mode) drives BCLK/WS.
# MicroPython's esp32 machine.I2S has no `mck` output (ports/esp32/machine_i2s.c sets mclk unused),
# so the default clock source is BCLK ("SCLK as MCLK", REG01 bit 7) with the pre-multiplier bringing
# the internal clock to 256*fs; a board that feeds a real MCLK of 256*fs passes mclk_from_bclk=False.
from micropython import const

ADDR_CE_LOW = const(0x18)
ADDR_CE_HIGH = const(0x19)

_CHIP_ID1 = const(0x83)  # REGFD [UG chip ID]
_CHIP_ID2 = const(0x11)  # REGFE

# Register addresses [UG register map].
_REG_RESET = const(0x00)
_REG_CLK1 = const(0x01)
_REG_CLK2 = const(0x02)
_REG_CLK3 = const(0x03)
_REG_CLK4 = const(0x04)
_REG_CLK5 = const(0x05)
_REG_CLK6 = const(0x06)
_REG_CLK7 = const(0x07)
_REG_CLK8 = const(0x08)
_REG_SDP_IN = const(0x09)   # DAC serial data port (data coming from the ESP32)
_REG_SDP_OUT = const(0x0A)  # ADC serial data port (data going to the ESP32)
_REG_SYS0B = const(0x0B)
_REG_SYS0C = const(0x0C)
_REG_SYS0D = const(0x0D)
_REG_SYS0E = const(0x0E)
_REG_SYS10 = const(0x10)
_REG_SYS11 = const(0x11)
_REG_SYS12 = const(0x12)
_REG_SYS13 = const(0x13)
_REG_SYS14 = const(0x14)
_REG_ADC15 = const(0x15)
_REG_ADC16 = const(0x16)
_REG_ADC17 = const(0x17)
_REG_ADC1B = const(0x1B)
_REG_ADC1C = const(0x1C)
_REG_DAC31 = const(0x31)
_REG_DAC32 = const(0x32)
_REG_DAC37 = const(0x37)
_REG_GPIO44 = const(0x44)
_REG_GP45 = const(0x45)
_REG_ID1 = const(0xFD)

# REG09/REG0A [UG Serial Digital Port]: bits 4:2 word length (3 = 16-bit, 4 = 32-bit),
# bits 1:0 format (0 = I2S Philips); bit 6 set would tri-state/mute the port.
_SDP_I2S_16 = const(0x0C)
_SDP_I2S_32 = const(0x10)

# REG01 [UG Clock Manager]: bit 7 MCLK source (1 = SCLK/BCLK pin), bits 5:0 clock enables.
_CLK1_ALL_ON = const(0x3F)
_CLK1_FROM_BCLK = const(0x80)

# REG31 [UG DAC]: bits 6:5 DAC mute.
_DAC_MUTE = const(0x60)

# REG32 [UG DAC]: 0x00 = -95.5 dB ... 0xBF = 0 dB ... 0xFF = +32 dB, 0.5 dB a step.
_VOL_0DB = const(0xBF)
# Volume percent p (1..100) maps to -49.5 .. 0 dB: register = _VOL_BASE + p. 0 % is full silence.
_VOL_BASE = const(0x5B)

# Clock coefficients for an internal MCLK of 256*fs [UG Clock Manager; the divider table of the
# user guide]: pre_div 1, pre_mult x1, adc_div 1, dac_div 1, single speed, LRCK divider 256
# (REG07/REG08 = 0x00FF, i.e. divider - 1), BCLK divider 4 (master mode only), ADC OSR 0x10,
# DAC OSR 0x20 up to 16 kHz and 0x10 above. One row per supported rate: (rate, adc_osr, dac_osr).
_RATES = (
    (8000, 0x10, 0x20),
    (11025, 0x10, 0x20),
    (12000, 0x10, 0x20),
    (16000, 0x10, 0x20),
    (22050, 0x10, 0x10),
    (24000, 0x10, 0x10),
    (32000, 0x10, 0x10),
    (44100, 0x10, 0x10),
    (48000, 0x10, 0x10),
)

# Microphone PGA gain REG16 [UG ADC]: 0..7 -> 0..42 dB in 6 dB steps.
_MIC_GAIN_MAX_DB = const(42)

ERR_BAD_ARG = const(1)
ERR_NO_CHIP = const(2)


class CodecError(Exception):
    """A codec call that cannot be honoured; ``code`` is ERR_BAD_ARG or ERR_NO_CHIP."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def _rate_row(rate):
    for row in _RATES:
        if row[0] == rate:
            return row
    raise CodecError(ERR_BAD_ARG, "es8311: unsupported sample rate %d" % rate)


def clock_plan(rate, bits=16, mclk_from_bclk=True):
    """The clock-manager register values (REG01..REG08) for one rate, as a tuple of (reg, value)."""
    if bits not in (16, 32):
        raise CodecError(ERR_BAD_ARG, "es8311: bits must be 16 or 32, not %d" % bits)
    row = _rate_row(rate)
    if mclk_from_bclk:
        # BCLK of a stereo Philips frame is 2*bits*fs; the pre-multiplier restores 256*fs.
        mult = 256 // (2 * bits)          # 8 for 16-bit slots, 4 for 32-bit slots
        clk1 = _CLK1_ALL_ON | _CLK1_FROM_BCLK
    else:
        mult = 1
        clk1 = _CLK1_ALL_ON
    mult_code = (1, 2, 4, 8).index(mult)
    pre_div = 1
    clk2 = ((pre_div - 1) << 5) | (mult_code << 3)
    return (
        (_REG_CLK1, clk1),
        (_REG_CLK2, clk2),
        (_REG_CLK3, row[1]),          # bit 6 fs_mode 0 (single speed), ADC OSR
        (_REG_CLK4, row[2]),          # DAC OSR
        (_REG_CLK5, 0x00),            # adc_div 1, dac_div 1 (stored as divider - 1)
        (_REG_CLK6, 0x03),            # BCLK divider 4 (divider - 1); BCLK not inverted
        (_REG_CLK7, 0x00),            # LRCK divider high bits
        (_REG_CLK8, 0xFF),            # LRCK divider low bits: 256 - 1
    )


def volume_register(percent):
    """REG32 value for a 0..100 volume: 0 is silence, 1..100 is -49.5 dB .. 0 dB in 0.5 dB steps."""
    if percent < 0 or percent > 100:
        raise CodecError(ERR_BAD_ARG, "es8311: volume %r outside 0..100" % (percent,))
    p = int(percent)
    return 0 if p == 0 else _VOL_BASE + p


class ES8311:
    """One ES8311 on an I2C bus object with ``writeto_mem(addr, reg, buf)``/``readfrom_mem(addr, reg, n)``."""

    def __init__(self, i2c, addr=ADDR_CE_LOW):
        if addr not in (ADDR_CE_LOW, ADDR_CE_HIGH):
            raise CodecError(ERR_BAD_ARG, "es8311: address 0x%02x is not 0x18/0x19" % addr)
        self._i2c = i2c
        self._addr = addr
        self._b = bytearray(1)
        self._volume = 70

    def _w(self, reg, value):
        self._b[0] = value
        self._i2c.writeto_mem(self._addr, reg, self._b)

    def _write_all(self, pairs):
        for reg, value in pairs:
            self._w(reg, value)

    def chip_id(self):
        """(REGFD, REGFE); (0x83, 0x11) for an ES8311."""
        d = self._i2c.readfrom_mem(self._addr, _REG_ID1, 2)
        return d[0], d[1]

    def probe(self):
        if self.chip_id() != (_CHIP_ID1, _CHIP_ID2):
            raise CodecError(ERR_NO_CHIP, "es8311: no ES8311 at 0x%02x" % self._addr)

    def init(self, rate, bits=16, mclk_from_bclk=True, volume=None):
        """Bring the codec up as an I2S-Philips slave at `rate` Hz with `bits`-bit slots, DAC unmuted."""
        plan = clock_plan(rate, bits, mclk_from_bclk)
        sdp = _SDP_I2S_16 if bits == 16 else _SDP_I2S_32
        if volume is not None:
            self._volume = volume
        vol = volume_register(self._volume)
        # 1. [UG GPIO REG44] I2C noise filter on; written twice because the very first write after
        #    power-up can be lost (observed by Espressif; harmless to repeat).
        self._w(_REG_GPIO44, 0x08)
        self._w(_REG_GPIO44, 0x08)
        # 2. [UG Clock Manager] park the clock tree in safe defaults before the state machine starts.
        self._write_all((
            (_REG_CLK1, 0x30), (_REG_CLK2, 0x00), (_REG_CLK3, 0x10), (_REG_ADC16, 0x24),
            (_REG_CLK4, 0x10), (_REG_CLK5, 0x00),
        ))
        # 3. [UG System REG0B/0C/10/11] power-up timing and reference settings.
        self._write_all(((_REG_SYS0B, 0x00), (_REG_SYS0C, 0x00), (_REG_SYS10, 0x1F), (_REG_SYS11, 0x7F)))
        # 4. [UG Reset REG00] chip state machine on (bit 7), slave mode (bit 6 = 0).
        self._w(_REG_RESET, 0x80)
        # 5. Clocks for the rate, then the serial ports [UG Serial Digital Port].
        self._write_all(plan)
        self._w(_REG_SDP_IN, sdp)
        self._w(_REG_SDP_OUT, sdp)
        # 6. [UG System REG13] output to the HP driver; [UG ADC REG1B/1C] ADC HPF, EQ bypassed.
        self._write_all(((_REG_SYS13, 0x10), (_REG_ADC1B, 0x0A), (_REG_ADC1C, 0x6A)))
        # 7. [UG GPIO REG44] ADC data on both I2S slots (no DAC loop-back reference), filter on.
        self._w(_REG_GPIO44, 0x08)
        # 8. Power up [UG ADC REG17 volume 0 dB; System REG0E PGA+modulator, REG12 DAC, REG14 analog
        #    mic input MIC1P/N with PGA, REG0D analog power; ADC REG15 ramp; DAC REG37 ramp, EQ bypass].
        self._write_all((
            (_REG_ADC17, 0xBF), (_REG_SYS0E, 0x02), (_REG_SYS12, 0x00), (_REG_SYS14, 0x1A),
            (_REG_SYS0D, 0x01), (_REG_ADC15, 0x40), (_REG_DAC37, 0x08), (_REG_GP45, 0x00),
        ))
        # 9. Volume, then unmute.
        self._w(_REG_DAC32, vol)
        self._w(_REG_DAC31, 0x00)

    def set_rate(self, rate, bits=16, mclk_from_bclk=True):
        """Re-clock for another rate without a full re-init (the codec keeps its power state)."""
        self._write_all(clock_plan(rate, bits, mclk_from_bclk))

    def set_volume(self, percent):
        self._w(_REG_DAC32, volume_register(percent))
        self._volume = int(percent)

    def mute(self, on=True):
        self._w(_REG_DAC31, _DAC_MUTE if on else 0x00)

    def set_mic_gain(self, db):
        """Microphone PGA gain in dB, rounded down to the 6 dB grid 0..42 [UG ADC REG16]."""
        if db < 0 or db > _MIC_GAIN_MAX_DB:
            raise CodecError(ERR_BAD_ARG, "es8311: mic gain %r dB outside 0..42" % (db,))
        self._w(_REG_ADC16, int(db) // 6)

    def power_down(self):
        """Mute, then power the DAC, ADC and analog blocks down [UG System REG0D/0E/12/14]."""
        self._write_all((
            (_REG_DAC31, _DAC_MUTE), (_REG_DAC32, 0x00), (_REG_ADC17, 0x00), (_REG_SYS0E, 0xFF),
            (_REG_SYS12, 0x02), (_REG_SYS14, 0x00), (_REG_SYS0D, 0xFA), (_REG_ADC15, 0x00),
        ))
