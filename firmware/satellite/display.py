# The satellite's panel (issue 15, spec §10.5): what TEXT_DISPLAY, IMAGE_DISPLAY and PipelineState look
# like on it. Imported only on a board whose board file has a "display" section (runtime.Runtime), so a
# board without one pays nothing. It draws into the HAL panel's framebuffer (panel.fb: big-endian RGB565,
# panel.width x panel.height) and asks the panel to show it (panel.flush) at most every FLUSH_MS.
#
# Layout: a status bar (the top BAR rows) coloured by the PipelineState phase with its name; below it the
# content area, shared by the text stream (COLS x ROWS cells of the 8x16 font) and the image shown last.
#
# Text (TextRenderOpen, Render to TEXT_DISPLAY): UTF-8 bytes drawn as they arrive, word-wrapped: a word
# still being written when its row fills moves to the next row (unless it is the whole row: then it breaks
# at the last column), and a space at a break is not drawn (a word ending at the last column stays, the
# next one starts the next row); scrolled a row at a time when a row below the last is needed;
# '\n' starts a line; a non-ASCII character is one box glyph. KARAOKE: the newest chunk is highlighted, the earlier ones turn to the normal colour
# (the core streams each chunk as it is spoken). A text chunk allocates nothing (tests prove 0 bytes):
# it is drawn straight from the frame buffer's tail, the cell grid is a preallocated bytearray.
#
# Images (Render inline, ImageRenderOpen reassembled): decoded by satellite.imgdec (PNG through the
# firmware's `deflate` module, uncompressed BMP); only those mimes are declared in accepts. The
# reassembly buffer is one bytearray of max_image_bytes, allocated at the first ImageRenderOpen and kept;
# the session has already refused (RESOURCE_EXHAUSTED) a total_bytes over it before anything is sized.
from micropython import const
from time import ticks_ms, ticks_diff

from satellite import font8x16 as F
from satellite.wire import alabama_v1 as pb

try:
    import framebuf as _framebuf          # C fast path for glyphs and scrolling (MicroPython)
except ImportError:
    _framebuf = None

BAR = const(16)                   # status bar rows
FLUSH_MS = const(100)             # at most one panel update per this many ms (a text stream coalesces)

# Colours, RGB565.
BLACK = const(0x0000)
WHITE = const(0xFFFF)
GREY = const(0xC618)
YELLOW = const(0xFFE0)
PHASE_COLOURS = (0x4208, 0x041F, 0xFC00, 0x0600, 0xF800)     # IDLE LISTENING PROCESSING SPEAKING ERROR
PHASE_NAMES = (b"IDLE", b"LISTENING", b"PROCESSING", b"SPEAKING", b"ERROR")
# TextRole -> colour of its text (UNSPECIFIED, TRANSCRIPT, ASSISTANT, KARAOKE spoken so far).
ROLE_COLOURS = (WHITE, GREY, WHITE, WHITE)
KARAOKE = const(3)
_NEWLINE = const(10)


class DisplayError(Exception):
    """An image or text the panel cannot show: `code` is the spec's ErrorCode for the Error on its id."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def mimes():
    """The image MIME types satellite.imgdec decodes here (what IMAGE_DISPLAY declares in accepts): PNG
    only where the interpreter has a zlib inflater (MicroPython's `deflate` module, CPython's zlib).
    Answered without importing imgdec: that module loads when the first image is shown."""
    try:
        import deflate  # noqa: F401
    except ImportError:
        try:
            import zlib
            zlib.decompressobj
        except (ImportError, AttributeError):
            return ["image/bmp"]
    return ["image/png", "image/bmp"]


class Display:
    def __init__(self, board, panel, pure=False):
        d = board["display"]
        self.panel = panel
        self.w = panel.width
        self.h = panel.height
        self.fb = panel.fb
        self.max_image_bytes = d.get("max_image_bytes", 65536)
        self.cols = self.w // F.W
        self.rows = (self.h - BAR) // F.H
        self.cells = self.cols * self.rows
        self.grid = bytearray(self.cells)      # glyph index per cell (0 = space)
        self.cur = 0                           # next cell
        # 1: the last glyph filled its row (the cursor is at a soft break, the word may go on); 2: a space
        # came there (the word ended at the edge: the next glyph starts the next row, nothing moves)
        self.soft = 0
        self.hl = 0                            # karaoke: first cell of the newest chunk
        self.role = 0
        self.fg = WHITE
        self.text_id = 0
        self.image_id = 0
        self.img = None                        # reassembly buffer (bytearray(max_image_bytes)), kept
        self.img_mime = ""
        self.img_total = 0
        self.img_n = 0
        self.img_bad = False                   # ran past total_bytes: Error at StreamEnd, nothing shown
        self.phase = 0
        self.dirty = False
        self.y0 = 0
        self.y1 = 0
        self.t_flush = ticks_ms()
        self.log = None
        self.painted = 0                       # images painted (tests, state)
        self.job = None                        # a reassembled image being decoded, a row per turn: [id, steps]
        self.on_error = None                   # on_error(id, code, message): device.Satellite sends the Error
        self._g = bytearray(F.H)               # one glyph, copied out of the font for the C blitter
        self._fbo = self._gfb = self._pal = None
        if _framebuf is not None and not pure:
            mv = memoryview(self.fb)
            self._fbo = _framebuf.FrameBuffer(mv, self.w, self.h, _framebuf.RGB565)
            self._gfb = _framebuf.FrameBuffer(self._g, F.W, F.H, _framebuf.MONO_HLSB)
            self._pal = _framebuf.FrameBuffer(bytearray(4), 2, 1, _framebuf.RGB565)
        self.fill(0, 0, self.w, self.h, BLACK)
        self.draw_bar()

    # -- primitives -----------------------------------------------------------------------------------
    def _touch(self, y0, y1):
        if self.dirty:
            if y0 < self.y0:
                self.y0 = y0
            if y1 > self.y1:
                self.y1 = y1
        else:
            self.dirty = True
            self.y0 = y0
            self.y1 = y1

    def fill(self, x, y, w, h, c):
        if self._fbo is not None:
            self._fbo.fill_rect(x, y, w, h, ((c & 0xFF) << 8) | (c >> 8))   # framebuf stores native LE
        else:
            hi = c >> 8
            lo = c & 0xFF
            fb = self.fb
            stride = 2 * self.w
            for yy in range(y, y + h):
                i = yy * stride + 2 * x
                e = i + 2 * w
                while i < e:
                    fb[i] = hi
                    fb[i + 1] = lo
                    i += 2
        self._touch(y, y + h)

    def glyph(self, x, y, gi, fg, bg):
        """Glyph number gi of the font at (x, y), fg on bg."""
        glyphs = F.GLYPHS
        o = gi * F.H
        if self._fbo is not None:
            g = self._g
            for r in range(F.H):
                g[r] = glyphs[o + r]
            p = self._pal
            p.pixel(0, 0, ((bg & 0xFF) << 8) | (bg >> 8))
            p.pixel(1, 0, ((fg & 0xFF) << 8) | (fg >> 8))
            self._fbo.blit(self._gfb, x, y, -1, p)
        else:
            fb = self.fb
            stride = 2 * self.w
            fh = fg >> 8
            fl = fg & 0xFF
            bh = bg >> 8
            bl = bg & 0xFF
            for r in range(F.H):
                bits = glyphs[o + r]
                i = (y + r) * stride + 2 * x
                m = 0x80
                while m:
                    if bits & m:
                        fb[i] = fh
                        fb[i + 1] = fl
                    else:
                        fb[i] = bh
                        fb[i + 1] = bl
                    i += 2
                    m >>= 1
        self._touch(y, y + F.H)

    def draw_bar(self):
        c = PHASE_COLOURS[self.phase] if 0 <= self.phase < 5 else PHASE_COLOURS[4]
        self.fill(0, 0, self.w, BAR, c)
        name = PHASE_NAMES[self.phase] if 0 <= self.phase < 5 else b"?"
        x = 4
        for k in range(len(name)):             # an index loop: iterating bytes would allocate an iterator
            if x + F.W > self.w:
                break
            self.glyph(x, 0, name[k] - F.FIRST, WHITE, c)
            x += F.W

    # -- PipelineState --------------------------------------------------------------------------------
    def set_phase(self, phase):
        self.phase = phase
        self.panel.phase = phase
        self.draw_bar()

    # -- text -----------------------------------------------------------------------------------------
    def clear_content(self):
        self.fill(0, BAR, self.w, self.h - BAR, BLACK)
        g = self.grid
        for i in range(self.cells):
            g[i] = 0
        self.cur = 0
        self.soft = 0
        self.hl = 0

    def text_open(self, id, role):
        self.job = None                        # newer content wins over an image still being decoded
        self.text_id = id
        self.role = role if 0 <= role < 4 else 0
        self.fg = ROLE_COLOURS[self.role]
        self.clear_content()

    def text_end(self, id, cancelled):
        if id != self.text_id:
            return
        self.text_id = 0
        if self.role == KARAOKE:
            self._recolour(self.hl, self.cur, self.fg)    # nothing is "being spoken" any more
            self.hl = self.cur

    def _recolour(self, a, b, fg):
        g = self.grid
        cols = self.cols
        for i in range(a, b):
            self.glyph((i % cols) * F.W, BAR + (i // cols) * F.H, g[i], fg, BLACK)

    def _scroll(self):
        """Up one text row: the grid shifts, the framebuffer scrolls, the last row is cleared."""
        cols = self.cols
        g = self.grid
        n = self.cells - cols
        for i in range(n):
            g[i] = g[i + cols]
        for i in range(n, self.cells):
            g[i] = 0
        top = BAR * 2 * self.w
        row = F.H * 2 * self.w
        end = (BAR + self.rows * F.H) * 2 * self.w
        if self._fbo is not None:
            # framebuf.scroll moves the whole buffer: scroll, then repaint the bar it pulled up into
            self._fbo.scroll(0, -F.H)
        else:
            self.fb[top:end - row] = self.fb[top + row:end]
        self.fill(0, BAR + (self.rows - 1) * F.H, self.w, F.H, BLACK)
        self.draw_bar()
        self._touch(BAR, BAR + self.rows * F.H)
        self.cur -= cols
        self.hl = self.hl - cols if self.hl > cols else 0

    def _put(self, gi, fg):
        cols = self.cols
        if self.soft:
            if gi == 0:
                self.soft = 2                  # the space at a break: not drawn, and the word before it is over
                return
            if self.soft == 1:
                self._carry(fg)                # the row ended in the middle of a word: it moves down whole
        if self.cur >= self.cells:
            self._scroll()
        i = self.cur
        self.grid[i] = gi
        self.glyph((i % cols) * F.W, BAR + (i // cols) * F.H, gi, fg, BLACK)
        self.cur = i + 1
        self.soft = 1 if self.cur % cols == 0 else 0

    def _carry(self, fg):
        """The row just filled ends in a word that goes on: move that word to the next row (scrolling if there
        is none), blanking it where it was. A word as long as the row stays and breaks there."""
        cols = self.cols
        g = self.grid
        end = self.cur
        w = end
        while w > end - cols and g[w - 1] != 0:
            w -= 1
        if w == end or w == end - cols:
            return
        if end >= self.cells:
            self._scroll()                     # moves the grid, cur and hl up a row
            w -= cols
            end -= cols
        hl = self.hl
        n = end - w
        for j in range(w, end):
            c = g[j]
            d = j + n
            g[d] = c
            self.glyph((d % cols) * F.W, BAR + (d // cols) * F.H, c, fg if j >= hl else self.fg, BLACK)
            g[j] = 0
            self.glyph((j % cols) * F.W, BAR + (j // cols) * F.H, 0, BLACK, BLACK)
        if hl >= w:
            self.hl = hl + n                   # the newest chunk's cells moved with the word
        self.cur = end + n

    def _newline(self):
        if self.soft:                          # the row just filled: the cursor is already at the next one
            self.soft = 0
            return
        r = self.cur // self.cols + 1
        while r > self.rows:                   # the cursor may rest one row past the last (cur == cells):
            self._scroll()                     # the area scrolls when a row below that is needed, as for
            r -= 1                             # a glyph (_put), so a blank line at the bottom is kept
        self.cur = r * self.cols

    def text_chunk(self, buf, start, end):
        """Draw UTF-8 text buf[start:end] (a frame buffer's tail) at the cursor. Allocates nothing."""
        fg = self.fg
        if self.role == KARAOKE:
            self._recolour(self.hl, self.cur, fg)
            self.hl = self.cur
            fg = YELLOW
        self.text_bytes(buf, start, end, fg)

    def text_bytes(self, buf, start, end, fg):
        first = F.FIRST
        last = F.LAST
        box = F.BOX
        i = start
        while i < end:
            b = buf[i]
            i += 1
            if b < 0x80:
                if b == _NEWLINE:
                    self._newline()
                elif first <= b <= last:
                    self._put(b - first, fg)
                elif b == 9:
                    self._put(0, fg)
            elif b >= 0xC0:           # a multi-byte UTF-8 sequence's lead byte: one box for the character
                self._put(box, fg)
            # continuation bytes (0x80..0xBF) draw nothing

    def show_text(self, text):
        """A one-shot Render's text block: replaces the content area."""
        self.text_open(0, pb.TextRole.ASSISTANT)
        b = text.encode() if isinstance(text, str) else text
        self.text_bytes(b, 0, len(b), self.fg)

    # -- images ---------------------------------------------------------------------------------------
    def image_open(self, id, mime, total):
        """Size the reassembly for an ImageRenderOpen the session admitted (total <= max_image_bytes)."""
        if total > self.max_image_bytes:       # the session refuses these first; a second guard is cheap
            raise DisplayError(pb.ErrorCode.RESOURCE_EXHAUSTED, "image over max_image_bytes")
        if self.job is not None:
            self.finish()                      # the buffer is about to be refilled: decode the last one now
        if self.img is None:
            try:
                self.img = bytearray(self.max_image_bytes)
            except MemoryError:
                raise DisplayError(pb.ErrorCode.RESOURCE_EXHAUSTED,
                                   "no %d-byte image buffer free" % self.max_image_bytes)
        self.image_id = id
        self.img_mime = mime
        self.img_total = total
        self.img_n = 0
        self.img_bad = False

    def image_chunk(self, id, buf, start, end):
        if id != self.image_id:
            return
        n = end - start
        if self.img_n + n > self.img_total:
            self.img_bad = True                # runs past total_bytes: refused at StreamEnd
            return
        img = self.img
        j = self.img_n
        for i in range(start, end):
            img[j] = buf[i]
            j += 1
        self.img_n = j

    def image_end(self, id, cancelled):
        """StreamEnd or a cancel (drop). At the StreamEnd a wrong length is a DisplayError now; otherwise
        the decode becomes `job`, a row per event-loop turn (run(), or finish()): a 320x224 PNG takes
        about a second of bytecode on the unix port and longer on the chip, which must not stall the
        session's Pings or a playing render. A decode error then reaches on_error."""
        if id != self.image_id:
            return
        self.image_id = 0
        if cancelled:
            return
        if self.img_bad or self.img_n != self.img_total:
            raise DisplayError(pb.ErrorCode.INVALID_REQUEST, "image stream carried %s total_bytes %d" % (
                "more than" if self.img_bad else "%d bytes of" % self.img_n, self.img_total))
        self.job = [id, self._steps(self.img_mime, memoryview(self.img)[:self.img_total])]

    def _steps(self, mime, data):
        from satellite import imgdec
        self.fill(0, BAR, self.w, self.h - BAR, BLACK)
        self.text_id = 0
        wh = yield from imgdec.steps(mime, data, self.fb, self.w, BAR, self.w, self.h - BAR)
        self._touch(BAR, self.h)
        self.painted += 1
        return wh

    def step_job(self, rows):
        """Decode up to `rows` rows of the pending image; False once there is none left."""
        j = self.job
        if j is None:
            return False
        try:
            for _ in range(rows):
                next(j[1])
            return True
        except StopIteration as e:
            self.job = None
            wh = e.value
            self._log("display: image %d %dx%d painted" % (j[0], wh[0], wh[1]))
        except Exception as e:                 # ImageError (bad data) or MemoryError
            self.job = None
            code, msg = self._image_error(e)
            self._log("display: image %d error %d: %s" % (j[0], code, msg))
            if self.on_error is not None:
                self.on_error(j[0], code, msg)
        return False

    def finish(self):
        """Decode the pending image to its end (tests; a new image arriving while one decodes)."""
        while self.step_job(64):
            pass

    def _image_error(self, e):
        if isinstance(e, MemoryError):
            return pb.ErrorCode.RESOURCE_EXHAUSTED, "out of memory decoding the image"
        return pb.ErrorCode.INVALID_REQUEST, "cannot show the image: %s" % e

    def show(self, target, content, id=0):
        """A one-shot Render on `id`: the first block this surface can show (text now; an image in
        accepts becomes the decode job, like a reassembled one: its bytes live in the Envelope's block)."""
        for b in content:
            if target == pb.CapabilityKind.CAPABILITY_TEXT_DISPLAY and b.block == "text":
                self.show_text(b.text)
                return
            if target == pb.CapabilityKind.CAPABILITY_IMAGE_DISPLAY and b.block == "media":
                if b.media.mime not in mimes():
                    raise DisplayError(pb.ErrorCode.INVALID_REQUEST, "image %s is not in accepts" % b.media.mime)
                if self.job is not None:
                    self.finish()
                self.job = [id, self._steps(b.media.mime, b.media.data)]
                return
        raise DisplayError(pb.ErrorCode.INVALID_REQUEST, "nothing in the Render this surface shows")

    # -- from the device (device.Satellite) ------------------------------------------------------------
    def chunk(self, id, buf, start, end):
        """A StreamChunk tail on a display stream (device.Satellite's render-chunk path). Allocates nothing."""
        if id == self.text_id:
            self.text_chunk(buf, start, end)
        elif id == self.image_id:
            self.image_chunk(id, buf, start, end)

    def handle(self, ev):
        """A session display event (TextOpen, ImageOpen, Show, DisplayEnded). Returns None, or
        (ErrorCode, message) for the Error device.Satellite sends on ev.id (the surface could not display)."""
        from satellite import session as S
        t = type(ev)
        try:
            if t is S.TextOpen:
                self.text_open(ev.id, ev.role)
                self._log("display: text %d open role %d" % (ev.id, ev.role))
            elif t is S.ImageOpen:
                self.image_open(ev.id, ev.mime, ev.total_bytes)
                self._log("display: image %d open %s %d bytes" % (ev.id, ev.mime, ev.total_bytes))
            elif t is S.Show:
                self.show(ev.target, ev.content, ev.id)
                self._log("display: render %d to %d" % (ev.id, ev.target))
            elif ev.id == self.text_id:
                self.text_end(ev.id, ev.cancelled)
            elif ev.id == self.image_id:
                self.image_end(ev.id, ev.cancelled)
        except DisplayError as e:
            return e.code, str(e)
        except MemoryError:
            return pb.ErrorCode.RESOURCE_EXHAUSTED, "out of memory drawing %d" % ev.id
        return None

    def _log(self, line):
        if self.log is not None:
            self.log(line)

    # -- to the panel ---------------------------------------------------------------------------------
    def flush(self, force=False):
        """Push the changed rows to the panel, at most every FLUSH_MS (force: now). True when pushed."""
        if not self.dirty:
            return False
        now = ticks_ms()
        if not force and ticks_diff(now, self.t_flush) < FLUSH_MS:
            return False
        self.dirty = False
        self.t_flush = now
        self.panel.flush(self.y0, self.y1)
        return True

    async def run(self):
        """The flush loop (spawned by the runtime for the device's lifetime)."""
        import asyncio
        self.flush(True)
        while True:
            if self.step_job(4):
                await asyncio.sleep_ms(0)      # a few rows, then the session and the audio get their turn
                continue
            await asyncio.sleep_ms(FLUSH_MS // 2)
            self.flush()

    # -- the surface ----------------------------------------------------------------------------------
    def capabilities(self):
        """TEXT_DISPLAY and IMAGE_DISPLAY as this panel declares them (spec §8)."""
        return [
            pb.CapabilityDescriptor(kind=pb.CapabilityKind.CAPABILITY_TEXT_DISPLAY,
                                    text_display=pb.TextDisplayParams(columns=self.cols, rows=self.rows)),
            pb.CapabilityDescriptor(kind=pb.CapabilityKind.CAPABILITY_IMAGE_DISPLAY,
                                    image_display=pb.ImageDisplayParams(width=self.w, height=self.h - BAR,
                                                                        accepts=mimes(),
                                                                        max_image_bytes=self.max_image_bytes)),
        ]
