# PI4IOE5V6408 8-bit I2C I/O expander, driven only as far as an amplifier enable needs: a few register writes
# over an injected machine.I2C (the bus the codec already uses); it never creates pins or buses.
#
# Register map (Diodes PI4IOE5V6408 datasheet; the same addresses are named in esphome
# esphome/components/pi4ioe5v6408/pi4ioe5v6408.cpp): 0x01 device ID/control, 0x03 I/O direction (1 = output),
# 0x05 output state, 0x07 output high-impedance (1 = high-Z), 0x0B pull enable, 0x0D pull select (1 = up).
# The Atomic Echo Base gates its NS4150B speaker amplifier from this expander at 0x43; the board file says
# which output bits (amp_enable.mask, boards/atoms3r-echobase.json and its sources).
from micropython import const

REG_DIR = const(0x03)
REG_OUT = const(0x05)
REG_HIGH_Z = const(0x07)
REG_PULL_SEL = const(0x0D)


class PI4IOE:
    def __init__(self, i2c, address, mask):
        self._i2c = i2c
        self._addr = address
        self._mask = mask & 0xFF
        self._b = bytearray(1)             # one register byte, reused: enabling the amp allocates nothing

    def _w(self, reg, val):
        self._b[0] = val
        self._i2c.writeto_mem(self._addr, reg, self._b)

    def init(self):
        """Outputs driven (not high-Z), the input pins pulled up, the mask bits made outputs, all low (amp off)."""
        self._w(REG_HIGH_Z, 0x00)
        self._w(REG_PULL_SEL, 0xFF)
        self._w(REG_OUT, 0x00)             # low before the direction flips, so the amp never glitches on
        self._w(REG_DIR, self._mask)

    def enable(self, on):
        self._w(REG_OUT, self._mask if on else 0x00)
