"""The virtual board's panel as the host sees it: the framebuffer file the simulated HAL exports
(firmware/satellite/hal/simpanel.py; format in docs/display.md) turned into a Pillow image.

Responsible for parsing that file and nothing else: the web page (board/web.py) and the tests use it.
"""
import array
import struct
import sys

from ..errors import AlabamaError

MAGIC = b"AFB1"
HEADER = 16
PHASES = ("IDLE", "LISTENING", "PROCESSING", "SPEAKING", "ERROR")


class PanelError(AlabamaError):
    pass


class Panel:
    """One exported picture: ``size`` (w, h), ``seq`` (1 for the first write after boot), ``phase``
    (the PipelineState phase number, None before the first one), ``rgb565`` (big-endian pixel bytes)."""

    __slots__ = ("size", "seq", "phase", "rgb565")

    def __init__(self, size, seq, phase, rgb565):
        self.size, self.seq, self.phase, self.rgb565 = size, seq, phase, rgb565

    @property
    def phase_name(self):
        return PHASES[self.phase] if self.phase is not None and self.phase < len(PHASES) else None

    def image(self):
        """The picture as an RGB Pillow image (each 5/6-bit channel widened by bit replication)."""
        from PIL import Image
        a = array.array("H", self.rgb565)
        if a.itemsize != 2:  # pragma: no cover - every CPython has a 2-byte 'H'
            raise PanelError("array('H') is not 16-bit here")
        if sys.byteorder == "little":
            a.byteswap()                   # the file is big-endian
        out = bytearray(3 * len(a))
        for i, v in enumerate(a):
            r, g, b = v >> 11, (v >> 5) & 63, v & 31
            out[3 * i] = (r << 3) | (r >> 2)
            out[3 * i + 1] = (g << 2) | (g >> 4)
            out[3 * i + 2] = (b << 3) | (b >> 2)
        return Image.frombytes("RGB", self.size, bytes(out))


def parse(raw):
    """A Panel from the bytes of a framebuffer file; PanelError saying what is wrong otherwise."""
    if len(raw) < HEADER or raw[:4] != MAGIC:
        raise PanelError("not a panel framebuffer file (no AFB1 header)")
    w, h, seq, phase = struct.unpack_from("<HHIB", raw, 4)
    if len(raw) != HEADER + 2 * w * h:
        raise PanelError("panel file is %d bytes, a %dx%d picture needs %d" % (len(raw), w, h, HEADER + 2 * w * h))
    return Panel((w, h), seq, None if phase == 255 else phase, bytes(raw[HEADER:]))


def read(path):
    """The panel file at ``path`` (None when it does not exist yet: nothing painted)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    return parse(raw)
