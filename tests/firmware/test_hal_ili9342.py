# dual: cpython micropython
# The BOX-3's panel driver (hal/ili9342.py) against a fake machine.SPI / Pin / PWM that records the wire:
# the BSP's init sequence in order with DC low for the register byte and high for its parameters, reset
# active high, MISO unused, and a flush that sends exactly the changed rows of the framebuffer in one
# window. Nothing here proves the panel lights up (no board attached): it proves the driver sends what
# espressif/esp-bsp's esp-box-3.c sends.
from satellite.hal import ili9342 as L

CFG = {"driver": "ili9342c", "width": 320, "height": 240, "spi_id": 2, "sck": 7, "mosi": 6, "cs": 5, "dc": 4,
       "rst": 48, "rst_active_level": 1, "backlight": 47, "baudrate": 40000000, "madctl": 200,
       "max_image_bytes": 262144}


class Wire:
    def __init__(self):
        self.log = []           # ("cmd", reg) | ("data", bytes) | ("pin", id, level) | ("sleep", ms)
        self.levels = {}


class FakePin:
    OUT = 3

    def __init__(self, wire, pid, mode=-1, value=None):
        self.wire = wire
        self.id = pid
        if value is not None:
            self(value)

    def __call__(self, v=None):
        if v is None:
            return self.wire.levels.get(self.id, 0)
        self.wire.levels[self.id] = v
        self.wire.log.append(("pin", self.id, v))


class FakeSPI:
    def __init__(self, wire, sid, baudrate=0, polarity=0, phase=0, sck=None, mosi=None, miso=0):
        self.wire = wire
        self.args = (sid, baudrate, polarity, phase, sck.id, mosi.id, miso)

    def write(self, buf):
        w = self.wire
        assert w.levels.get(5) == 0, "CS must be low during a write"
        kind = "data" if w.levels.get(4) else "cmd"
        w.log.append((kind, bytes(buf)))


class FakePWM:
    def __init__(self, pin, freq=0, duty_u16=0):
        self.pin = pin
        self.freq = freq
        self.duty = duty_u16

    def duty_u16(self, d):
        self.duty = d


class FakeMachine:
    def __init__(self):
        self.wire = Wire()
        wire = self.wire
        self.spis = []
        self.pwms = []

        class BoundPin(FakePin):
            def __init__(self, pid, mode=-1, value=None):
                FakePin.__init__(self, wire, pid, mode, value)
        self.Pin = BoundPin

    def SPI(self, sid, **kw):
        s = FakeSPI(self.wire, sid, **kw)
        self.spis.append(s)
        return s

    def PWM(self, pin, freq=0, duty_u16=0):
        p = FakePWM(pin, freq, duty_u16)
        self.pwms.append(p)
        return p


def make():
    m = FakeMachine()
    sleeps = []

    def sleep_ms(ms):
        sleeps.append(ms)
        m.wire.log.append(("sleep", ms))
    p = L.Ili9342(CFG, m, sleep_ms)
    return p, m


def commands(log):
    """[(register, parameters)] from the wire log."""
    out = []
    for e in log:
        if e[0] == "cmd":
            out.append([e[1][0], b""])
        elif e[0] == "data":
            out[-1][1] += e[1]
    return [tuple(c) for c in out]


def test_spi_pins_and_reset_from_the_board_file():
    p, m = make()
    assert m.spis[0].args == (2, 40000000, 0, 0, 7, 6, None)     # miso None: no pin (not the default)
    log = m.wire.log
    rst = [e for e in log if e[0] == "pin" and e[1] == 48]
    assert [e[2] for e in rst] == [0, 1, 0]        # idle low, pulse HIGH (active high), released
    i = log.index(("pin", 48, 1))
    assert log[i + 1] == ("sleep", 10) and log[i + 3] == ("sleep", 120)
    assert m.pwms[0].pin.id == 47 and m.pwms[0].freq == 5000


def test_init_sequence_is_the_bsp_one_then_madctl_sleep_out_display_on():
    p, m = make()
    cmds = commands(m.wire.log)
    want = [(r, d) for r, d in L.INIT] + [(0x36, b"\xc8"), (0x11, b""), (0x29, b"")]
    assert cmds == want
    assert cmds[0] == (0xC8, b"\xff\x93\x42") and (0x3A, b"\x55") in cmds     # SETEXTC first; 16-bit colour
    log = m.wire.log
    j = max(i for i, e in enumerate(log) if e == ("cmd", b"\x11"))
    assert ("sleep", 120) in log[j:j + 4]         # 120 ms after SLPOUT


def test_flush_sends_the_changed_rows_in_one_window():
    p, m = make()
    for i in range(len(p.fb)):
        p.fb[i] = (i * 7) & 0xFF
    m.wire.log = []
    p.flush(16, 32)
    cmds = commands(m.wire.log)
    assert cmds[0] == (0x2A, bytes([0, 0, 319 >> 8, 319 & 0xFF]))
    assert cmds[1] == (0x2B, bytes([0, 16, 0, 31]))
    assert cmds[2][0] == 0x2C and cmds[2][1] == bytes(p.fb[16 * 640:32 * 640])
    assert len(cmds) == 3
    m.wire.log = []
    p.flush()
    cmds = commands(m.wire.log)
    assert cmds[1] == (0x2B, bytes([0, 0, 0, 239])) and len(cmds[2][1]) == 320 * 240 * 2
    m.wire.log = []
    p.flush(50, 50)                               # nothing changed: nothing sent
    assert m.wire.log == []
    p.backlight(50)
    assert m.pwms[0].duty == 65535 * 50 // 100
