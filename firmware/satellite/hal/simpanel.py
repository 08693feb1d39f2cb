# The virtual board's panel (issue 15): the framebuffer in RAM, exported to a file the host reads
# (the web virtual board, tests). Imported only when the board file has a "display" section.
#
# File format (docs/display.md, /tmp/lead/display-contract.md): a 16-byte header, little-endian:
#   b"AFB1" | u16 width | u16 height | u32 seq (1 for the first write, +1 per write) | u8 phase | 3 x 0
# then width*height RGB565 pixels, row-major from the top-left, each big-endian (the byte order the
# ILI9342C receives over SPI). Written to PATH.tmp and renamed over PATH: a reader sees whole pictures.
import os

MAGIC = b"AFB1"
HEADER = 16
PHASE_NONE = 255


class SimPanel:
    """The framebuffer the display module draws into (`fb`, big-endian RGB565) and `flush()` to export
    it. `phase` is recorded in the header (the last PipelineState the display received)."""

    def __init__(self, width, height, path):
        self.width = width
        self.height = height
        self.fb = bytearray(width * height * 2)
        self.path = path
        self._tmp = path + ".tmp"
        self._head = bytearray(HEADER)
        self._head[0:4] = MAGIC
        self._head[4] = width & 0xFF
        self._head[5] = width >> 8
        self._head[6] = height & 0xFF
        self._head[7] = height >> 8
        self._head[12] = PHASE_NONE
        self.seq = 0
        self.phase = PHASE_NONE

    def flush(self, y0=0, y1=-1):
        """The panel shows the framebuffer (rows y0..y1 changed; the file always gets all of them)."""
        self.seq += 1
        h = self._head
        s = self.seq
        h[8] = s & 0xFF
        h[9] = (s >> 8) & 0xFF
        h[10] = (s >> 16) & 0xFF
        h[11] = (s >> 24) & 0xFF
        h[12] = self.phase & 0xFF
        with open(self._tmp, "wb") as f:
            f.write(h)
            f.write(self.fb)
        os.rename(self._tmp, self.path)

    def backlight(self, percent):
        pass

    def info(self):
        return {"w": self.width, "h": self.height, "seq": self.seq, "path": self.path}
