# The ESP32-S3-BOX-3's panel: an ILI9342C, 320x240 RGB565, written over SPI (issue 15). Imported only by
# Esp32Hal.panel() on a board file with a "display" section. Thin: it owns the framebuffer the display
# module draws into and pushes changed rows to the panel; it knows nothing of the protocol.
#
# Facts, from espressif/esp-bsp bsp/esp-box-3 (esp-box-3.c, include/bsp/esp-box-3.h, include/bsp/display.h):
#   pins      SCLK GPIO7, MOSI GPIO6 (BSP_LCD_PCLK / BSP_LCD_DATA0), CS GPIO5, DC GPIO4, RESET GPIO48
#             (active HIGH: reset_active_high = 1, shared with the touch controller), backlight GPIO47
#             (LEDC PWM, 5 kHz, duty = brightness); no MISO. 40 MHz pixel clock on SPI3, SPI mode 0.
#   pixels    RGB565, big-endian on the wire (BSP_LCD_BIGENDIAN), BGR element order; mirrored in x and y
#             (esp_lcd_panel_mirror(panel, true, true)): MADCTL = BGR | MX | MY = 0x08 | 0x40 | 0x80 = 0xC8
#             (board file display.madctl).
#   init      the BSP's vendor_specific_init table for the ILI9342C (register, parameters) below, then
#             SLPOUT and DISPON. Register names from the ILI9342C datasheet (ILITEK, V1.1 §8).
# MicroPython API: machine.SPI(id, baudrate, polarity, phase, sck, mosi, miso) with miso=None meaning "no
# pin" (ports/esp32/machine_hw_spi.c: MP_OBJ_NULL -> default pin, None -> -1), SPI.write(buf),
# machine.Pin(id, Pin.OUT, value=), machine.PWM(pin, freq=, duty_u16=) (docs/library/machine.*.rst).
from micropython import const

_CASET = const(0x2A)
_RASET = const(0x2B)
_RAMWR = const(0x2C)
_MADCTL = const(0x36)
_SLPOUT = const(0x11)
_DISPON = const(0x29)

# (register, parameters): esp-bsp esp-box-3.c vendor_specific_init (MADCTL is sent from the board file).
INIT = (
    (0xC8, b"\xFF\x93\x42"),      # SETEXTC: enable the extended command set
    (0xC0, b"\x0E\x0E"),          # power control 1 (VRH)
    (0xC5, b"\xD0"),              # VCOM control 1
    (0xC1, b"\x02"),              # power control 2
    (0xB4, b"\x02"),              # display inversion control
    (0xE0, b"\x00\x03\x08\x06\x13\x09\x39\x39\x48\x02\x0a\x08\x17\x17\x0F"),   # positive gamma
    (0xE1, b"\x00\x28\x29\x01\x0d\x03\x3f\x33\x52\x04\x0f\x0e\x37\x38\x0F"),   # negative gamma
    (0xB1, b"\x00\x1B"),          # frame rate control
    (0x3A, b"\x55"),              # COLMOD: 16 bits per pixel
    (0xB7, b"\x06"),              # entry mode set
)


class Ili9342:
    """`fb` (big-endian RGB565, width*height*2 bytes) is what the panel shows after flush(y0, y1)."""

    def __init__(self, cfg, machine, sleep_ms):
        self.width = cfg["width"]
        self.height = cfg["height"]
        self.fb = bytearray(self.width * self.height * 2)
        self.phase = 255
        Pin = machine.Pin
        self._sleep_ms = sleep_ms
        self._spi = machine.SPI(cfg.get("spi_id", 2), baudrate=cfg.get("baudrate", 40000000), polarity=0, phase=0,
                                sck=Pin(cfg["sck"]), mosi=Pin(cfg["mosi"]), miso=None)
        self._cs = Pin(cfg["cs"], Pin.OUT, value=1)
        self._dc = Pin(cfg["dc"], Pin.OUT, value=0)
        self._rst = Pin(cfg["rst"], Pin.OUT, value=1 - cfg.get("rst_active_level", 1)) if "rst" in cfg else None
        self._rst_on = cfg.get("rst_active_level", 1)
        self._bl = None
        if "backlight" in cfg:
            self._bl = machine.PWM(Pin(cfg["backlight"], Pin.OUT), freq=5000, duty_u16=0)
        self._one = bytearray(1)
        self._four = bytearray(4)
        self._madctl = bytearray((cfg.get("madctl", 0xC8),))
        self._mv = memoryview(self.fb)
        self.reset()
        self.init()

    def _command(self, reg, data=None):
        self._cs(0)
        self._dc(0)
        self._one[0] = reg
        self._spi.write(self._one)
        if data:
            self._dc(1)
            self._spi.write(data)
        self._cs(1)

    def reset(self):
        if self._rst is not None:
            self._rst(self._rst_on)
            self._sleep_ms(10)
            self._rst(1 - self._rst_on)
            self._sleep_ms(120)

    def init(self):
        for reg, data in INIT:
            self._command(reg, data)
        self._command(_MADCTL, self._madctl)
        self._command(_SLPOUT)
        self._sleep_ms(120)              # ILI9342C: 120 ms after SLPOUT before the display is driven
        self._command(_DISPON)
        self._sleep_ms(20)

    def _window(self, reg, a, b):
        w = self._four
        w[0] = a >> 8
        w[1] = a & 0xFF
        w[2] = b >> 8
        w[3] = b & 0xFF
        self._command(reg, w)

    def flush(self, y0=0, y1=-1):
        """Send rows y0..y1-1 of the framebuffer (all when y1 < 0): one window, one SPI write."""
        h = self.height
        if y1 < 0 or y1 > h:
            y1 = h
        if y0 < 0:
            y0 = 0
        if y0 >= y1:
            return
        self._window(_CASET, 0, self.width - 1)
        self._window(_RASET, y0, y1 - 1)
        self._cs(0)
        self._dc(0)
        self._one[0] = _RAMWR
        self._spi.write(self._one)
        self._dc(1)
        row = 2 * self.width
        self._spi.write(self._mv[y0 * row:y1 * row])
        self._cs(1)

    def backlight(self, percent):
        if self._bl is not None:
            self._bl.duty_u16(65535 * max(0, min(100, percent)) // 100)
