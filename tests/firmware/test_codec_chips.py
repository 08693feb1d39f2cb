# dual: cpython micropython
# ES8311 / ES7210 register drivers against a fake I2C bus that records every write: exact sequences.
from mpsupport import raises
from satellite.hal import es7210, es8311


class FakeI2C:
    """Register file per address; records ('w', addr, reg, value) for every byte written."""

    def __init__(self, defaults=None):
        self.regs = {}
        self.log = []
        if defaults:
            for addr in defaults:
                for reg in defaults[addr]:
                    self.regs[(addr, reg)] = defaults[addr][reg]

    def writeto_mem(self, addr, reg, buf):
        for i in range(len(buf)):
            self.regs[(addr, reg + i)] = buf[i]
            self.log.append((addr, reg + i, buf[i]))

    def readfrom_mem(self, addr, reg, n):
        return bytes([self.regs.get((addr, reg + i), 0) for i in range(n)])

    def writes(self, addr):
        return [(r, v) for (a, r, v) in self.log if a == addr]


# The ES8311 bring-up, common part (before the clock plan) and tail (after it), for 16-bit slots.
_ES8311_HEAD = [
    (0x44, 0x08), (0x44, 0x08),
    (0x01, 0x30), (0x02, 0x00), (0x03, 0x10), (0x16, 0x24), (0x04, 0x10), (0x05, 0x00),
    (0x0B, 0x00), (0x0C, 0x00), (0x10, 0x1F), (0x11, 0x7F),
    (0x00, 0x80),
]
_ES8311_TAIL = [
    (0x09, 0x0C), (0x0A, 0x0C),
    (0x13, 0x10), (0x1B, 0x0A), (0x1C, 0x6A),
    (0x44, 0x08),
    (0x17, 0xBF), (0x0E, 0x02), (0x12, 0x00), (0x14, 0x1A), (0x0D, 0x01), (0x15, 0x40),
    (0x37, 0x08), (0x45, 0x00),
]


def _es8311_clock(clk1, clk2, dac_osr):
    return [(0x01, clk1), (0x02, clk2), (0x03, 0x10), (0x04, dac_osr), (0x05, 0x00), (0x06, 0x03),
            (0x07, 0x00), (0x08, 0xFF)]


def test_es8311_init_16k_mclk_from_bclk_exact_writes():
    bus = FakeI2C()
    es8311.ES8311(bus, 0x18).init(16000, bits=16, mclk_from_bclk=True, volume=70)
    # BCLK = 32*fs -> pre-multiplier x8 (REG02 bits 4:3 = 3); REG01 bit 7 = BCLK source.
    want = _ES8311_HEAD + _es8311_clock(0xBF, 0x18, 0x20) + _ES8311_TAIL + [(0x32, 0x5B + 70), (0x31, 0x00)]
    assert bus.writes(0x18) == want


def test_es8311_init_24k_mclk_from_bclk_exact_writes():
    bus = FakeI2C()
    es8311.ES8311(bus, 0x18).init(24000, bits=16, mclk_from_bclk=True, volume=70)
    # Above 16 kHz the DAC oversampling drops to 0x10; everything else equal at 256*fs.
    want = _ES8311_HEAD + _es8311_clock(0xBF, 0x18, 0x10) + _ES8311_TAIL + [(0x32, 0x5B + 70), (0x31, 0x00)]
    assert bus.writes(0x18) == want


def test_es8311_init_with_real_mclk_and_32bit_slots():
    bus = FakeI2C()
    es8311.ES8311(bus, 0x19).init(16000, bits=32, mclk_from_bclk=False, volume=100)
    w = bus.writes(0x19)
    assert w[13:21] == _es8311_clock(0x3F, 0x00, 0x20)      # MCLK pin, multiplier x1
    assert (0x09, 0x10) in w and (0x0A, 0x10) in w          # 32-bit word length
    assert w[-2:] == [(0x32, 0xBF), (0x31, 0x00)]          # 100 % = 0 dB
    bus2 = FakeI2C()
    es8311.ES8311(bus2).init(16000, bits=32, mclk_from_bclk=True)
    assert bus2.writes(0x18)[14] == (0x02, 0x10)             # BCLK = 64*fs -> x4


def test_es8311_volume_mute_and_gain_registers():
    bus = FakeI2C()
    c = es8311.ES8311(bus)
    c.set_volume(0)
    c.set_volume(1)
    c.set_volume(100)
    c.mute(True)
    c.mute(False)
    c.set_mic_gain(24)
    c.set_mic_gain(41)
    assert bus.writes(0x18) == [(0x32, 0x00), (0x32, 0x5C), (0x32, 0xBF), (0x31, 0x60), (0x31, 0x00),
                                (0x16, 4), (0x16, 6)]


def test_es8311_rejects_bad_arguments_with_codes():
    bus = FakeI2C()
    e = raises(es8311.CodecError, es8311.ES8311, bus, 0x20)
    assert e.code == es8311.ERR_BAD_ARG
    c = es8311.ES8311(bus)
    assert raises(es8311.CodecError, c.init, 15999).code == es8311.ERR_BAD_ARG
    assert raises(es8311.CodecError, c.init, 16000, 24).code == es8311.ERR_BAD_ARG
    assert raises(es8311.CodecError, c.set_volume, 101).code == es8311.ERR_BAD_ARG
    assert raises(es8311.CodecError, c.set_mic_gain, 43).code == es8311.ERR_BAD_ARG
    assert bus.log == []                                    # nothing written on a refused call


def test_es8311_probe_reads_chip_id():
    bus = FakeI2C({0x18: {0xFD: 0x83, 0xFE: 0x11}})
    es8311.ES8311(bus).probe()
    e = raises(es8311.CodecError, es8311.ES8311(FakeI2C()).probe)
    assert e.code == es8311.ERR_NO_CHIP


# ES7210: register defaults the fake starts from, so read-modify-write results are checkable.
_ES7210_DEFAULTS = {0x40: {0x08: 0x10, 0x11: 0x00, 0x43: 0x00, 0x44: 0x00, 0x45: 0x00, 0x46: 0x00}}


def _es7210_expected(clock, gcode=10):
    return [
        (0x00, 0xFF), (0x00, 0x41), (0x01, 0x3F), (0x09, 0x30), (0x0A, 0x30),
        (0x23, 0x2A), (0x22, 0x0A), (0x20, 0x0A), (0x21, 0x2A),
        (0x08, 0x10),                                        # slave: bit 0 cleared, bit 4 kept
        (0x40, 0x43), (0x41, 0x70), (0x42, 0x70),
    ] + clock + [
        (0x11, 0x60), (0x12, 0x00),                          # 16-bit Philips, no TDM
        (0x43, 0x00), (0x44, 0x00), (0x45, 0x00), (0x46, 0x00), (0x4B, 0xFF), (0x4C, 0xFF),
        (0x4B, 0x00), (0x43, 0x10 | gcode), (0x4B, 0x00), (0x44, 0x10 | gcode), (0x01, 0x34),
        (0x06, 0x00), (0x47, 0x08), (0x48, 0x08), (0x49, 0xFF), (0x4A, 0xFF),
        (0x00, 0x71), (0x00, 0x41),
    ]


def test_es7210_init_16k_and_24k_with_256fs_mclk_exact_writes():
    for rate in (16000, 24000):
        bus = FakeI2C(_ES7210_DEFAULTS)
        es7210.ES7210(bus, 0x40).init(rate, bits=16, mics=(1, 2), gain_db=30, mclk_hz=256 * rate)
        clock = [(0x07, 0x20), (0x02, 0xC1), (0x04, 0x01), (0x05, 0x00)]   # ratio-locked: same dividers
        assert bus.writes(0x40) == _es7210_expected(clock)


def test_es7210_init_16k_and_24k_from_12m288_mclk_differ():
    bus = FakeI2C(_ES7210_DEFAULTS)
    es7210.ES7210(bus).init(16000, mclk_hz=12288000)
    assert bus.writes(0x40) == _es7210_expected([(0x07, 0x20), (0x02, 0xC3), (0x04, 0x03), (0x05, 0x00)])
    bus = FakeI2C(_ES7210_DEFAULTS)
    es7210.ES7210(bus).init(24000, mclk_hz=12288000)
    assert bus.writes(0x40) == _es7210_expected([(0x07, 0x20), (0x02, 0x81), (0x04, 0x02), (0x05, 0x00)])


def test_es7210_gain_grid_and_mute():
    assert es7210.gain_code(0) == 0
    assert es7210.gain_code(2.9) == 0
    assert es7210.gain_code(3) == 1
    assert es7210.gain_code(30) == 10
    assert es7210.gain_code(34.5) == 12
    assert es7210.gain_code(37.5) == 14
    bus = FakeI2C({0x41: {0x14: 0xF0, 0x15: 0x0C}})
    c = es7210.ES7210(bus, 0x41)
    c.set_gain(24)
    c.mute(True)
    c.mute(False)
    assert bus.writes(0x41) == [(0x43, 0x18), (0x44, 0x18), (0x14, 0xF3), (0x15, 0x0F), (0x14, 0xF0), (0x15, 0x0C)]


def test_es7210_rejects_tdm_and_bad_rates():
    bus = FakeI2C()
    assert raises(es7210.CodecError, es7210.ES7210, bus, 0x44).code == es7210.ERR_BAD_ARG
    c = es7210.ES7210(bus)
    assert raises(es7210.CodecError, c.init, 16000, 16, (1, 2, 3)).code == es7210.ERR_BAD_ARG
    assert raises(es7210.CodecError, c.init, 16000, 24).code == es7210.ERR_BAD_ARG
    assert raises(es7210.CodecError, c.init, 17000).code == es7210.ERR_BAD_ARG
    assert raises(es7210.CodecError, c.init, 44100, 16, (1, 2), 30, 12288000).code == es7210.ERR_BAD_ARG
    assert raises(es7210.CodecError, c.set_gain, 38).code == es7210.ERR_BAD_ARG
    assert bus.log == []
