# Image decoders for the panel (issue 15): what the satellite can decode in MicroPython, straight into
# the big-endian RGB565 framebuffer. Imported by satellite.display only when an image is shown.
#
#   PNG   8-bit greyscale, RGB, palette, greyscale+alpha, RGBA; not interlaced (PNG spec, W3C 2003, §§ 5,
#         9, 11). The zlib stream is inflated by MicroPython's `deflate` module (CPython: zlib), a row at
#         a time: RAM is two rows plus the inflater's 32 KiB window (the default wbits). Alpha is
#         composited on black; a palette's tRNS is ignored (opaque).
#   BMP   uncompressed 24- and 32-bit BI_RGB, bottom-up or top-down (Microsoft BITMAPINFOHEADER).
#
# JPEG is not decoded here: a baseline JPEG decoder (Huffman + IDCT) in MicroPython bytecode is too slow
# and too big for this firmware, so it is not declared in accepts and the core converts (core/images.py).
# paint() centres the image in the target area and clips what does not fit; every size is checked
# against the data length before it is read.
try:
    import deflate as _deflate
    import io as _io
except ImportError:
    _deflate = None
try:
    import zlib as _zlib
except ImportError:
    _zlib = None

PNG = "image/png"
BMP = "image/bmp"
MAX_SIDE = 4096                   # an image side past this is refused before any row is sized from it
_SIG = b"\x89PNG\r\n\x1a\n"
_BPP = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


class ImageError(Exception):
    pass


def _be32(b, o):
    return (b[o] << 24) | (b[o + 1] << 16) | (b[o + 2] << 8) | b[o + 3]


def _le32(b, o):
    return b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)


def _le16(b, o):
    return b[o] | (b[o + 1] << 8)


def steps(mime, data, fb, stride, y0, aw, ah):
    """A generator decoding `data` (bytes or memoryview) into fb (RGB565 big-endian, `stride` pixels a
    row), centred in the area of aw x ah pixels starting at row y0: it yields after each image row (the
    caller gives the event loop its turn between rows) and returns the image's (width, height)."""
    if mime == PNG:
        return _png(data, fb, stride, y0, aw, ah)
    if mime == BMP:
        return _bmp(data, fb, stride, y0, aw, ah)
    raise ImageError("%s is not decoded on this board" % mime)


def paint(mime, data, fb, stride, y0, aw, ah):
    """steps() run to the end at once; returns the image's (width, height)."""
    g = steps(mime, data, fb, stride, y0, aw, ah)
    try:
        while True:
            next(g)
    except StopIteration as e:
        return e.value


class _Place:
    """Where image pixels land: source columns sx0..sx0+n, destination offset per row."""

    def __init__(self, w, h, stride, y0, aw, ah):
        if not (0 < w <= MAX_SIDE and 0 < h <= MAX_SIDE):
            raise ImageError("%dx%d is not a picture this panel shows" % (w, h))
        self.sx0 = (w - aw) // 2 if w > aw else 0
        self.n = aw if w > aw else w
        self.sy0 = (h - ah) // 2 if h > ah else 0
        self.rows = ah if h > ah else h
        dx = (aw - w) // 2 if w < aw else 0
        dy = (ah - h) // 2 if h < ah else 0
        self.base = 2 * ((y0 + dy) * stride + dx)
        self.stride2 = 2 * stride

    def row_at(self, sy):
        """Byte offset in fb of image row sy, or -1 when that row is clipped."""
        r = sy - self.sy0
        if r < 0 or r >= self.rows:
            return -1
        return self.base + r * self.stride2


# -- PNG --------------------------------------------------------------------------------------------------
class _Idat:
    """The concatenated IDAT payloads as one byte stream."""

    def __init__(self, data, spans):
        self.data = data
        self.spans = spans
        self.k = 0
        self.o = 0

    def read_some(self, buf):
        while self.k < len(self.spans):
            a, n = self.spans[self.k]
            left = n - self.o
            if left > 0:
                m = len(buf) if len(buf) < left else left
                s = a + self.o
                buf[:m] = self.data[s:s + m]
                self.o += m
                return m
            self.k += 1
            self.o = 0
        return 0


if _deflate is not None:
    class _Stream(_io.IOBase):
        def __init__(self, idat):
            self.idat = idat

        def readinto(self, buf):
            return self.idat.read_some(buf)

    class _Inflater:
        def __init__(self, idat):
            self.d = _deflate.DeflateIO(_Stream(idat), _deflate.ZLIB)

        def fill(self, buf):
            n = 0
            mv = memoryview(buf)
            while n < len(buf):
                k = self.d.readinto(mv[n:])
                if not k:
                    break
                n += k
            return n
else:
    class _Inflater:
        def __init__(self, idat):
            if _zlib is None:
                raise ImageError("no inflater on this interpreter: PNG is not decoded")
            self.idat = idat
            self.z = _zlib.decompressobj()
            self.pend = b""
            self.chunk = bytearray(4096)

        def fill(self, buf):
            want = len(buf)
            while len(self.pend) < want:
                n = self.idat.read_some(self.chunk)
                if not n:
                    self.pend += self.z.flush()
                    break
                self.pend += self.z.decompress(bytes(self.chunk[:n]))
            n = min(want, len(self.pend))
            buf[:n] = self.pend[:n]
            self.pend = self.pend[n:]
            return n


def _png(data, fb, stride, y0, aw, ah):
    L = len(data)
    if L < 8 or bytes(data[0:8]) != _SIG:
        raise ImageError("not a PNG (bad signature)")
    pos = 8
    w = h = ctype = 0
    pal = None
    spans = []
    seen_ihdr = False
    while True:
        if pos + 12 > L:
            raise ImageError("truncated PNG (no IEND)")
        n = _be32(data, pos)
        kind = bytes(data[pos + 4:pos + 8])
        body = pos + 8
        if n > L - body - 4:
            raise ImageError("PNG chunk %s of %d bytes runs past the data" % (kind, n))
        if kind == b"IHDR":
            if n != 13:
                raise ImageError("bad IHDR")
            w = _be32(data, body)
            h = _be32(data, body + 4)
            depth, ctype, comp, filt, inter = data[body + 8], data[body + 9], data[body + 10], data[body + 11], data[body + 12]
            if depth != 8 or ctype not in _BPP or comp or filt:
                raise ImageError("PNG depth %d colour type %d is not decoded here (8-bit only)" % (depth, ctype))
            if inter:
                raise ImageError("interlaced PNG is not decoded here")
            seen_ihdr = True
        elif kind == b"PLTE":
            pal = (body, n)
        elif kind == b"IDAT":
            spans.append((body, n))
        elif kind == b"IEND":
            break
        pos = body + n + 4
    if not seen_ihdr or not spans:
        raise ImageError("PNG without IHDR or IDAT")
    if ctype == 3 and pal is None:
        raise ImageError("palette PNG without PLTE")
    place = _Place(w, h, stride, y0, aw, ah)
    bpp = _BPP[ctype]
    rowlen = w * bpp
    prev = bytearray(rowlen)
    cur = bytearray(rowlen)
    ft = bytearray(1)
    inf = _Inflater(_Idat(data, spans))
    last = place.sy0 + place.rows
    for y in range(last):
        if inf.fill(ft) != 1 or inf.fill(cur) != rowlen:
            raise ImageError("PNG image data ends early (row %d of %d)" % (y, h))
        _unfilter(ft[0], cur, prev, bpp, rowlen)
        o = place.row_at(y)
        if o >= 0:
            _png_row(cur, fb, o, place.sx0, place.n, ctype, data, pal)
        prev, cur = cur, prev
        yield
    return w, h


def _unfilter(f, cur, prev, bpp, n):
    if f == 0:
        return
    if f == 1:
        for i in range(bpp, n):
            cur[i] = (cur[i] + cur[i - bpp]) & 0xFF
    elif f == 2:
        for i in range(n):
            cur[i] = (cur[i] + prev[i]) & 0xFF
    elif f == 3:
        for i in range(bpp):
            cur[i] = (cur[i] + (prev[i] >> 1)) & 0xFF
        for i in range(bpp, n):
            cur[i] = (cur[i] + ((cur[i - bpp] + prev[i]) >> 1)) & 0xFF
    elif f == 4:
        for i in range(bpp):
            cur[i] = (cur[i] + prev[i]) & 0xFF
        for i in range(bpp, n):
            a = cur[i - bpp]
            b = prev[i]
            c = prev[i - bpp]
            p = a + b - c
            pa = p - a if p > a else a - p
            pb = p - b if p > b else b - p
            pc = p - c if p > c else c - p
            if pa <= pb and pa <= pc:
                pr = a
            elif pb <= pc:
                pr = b
            else:
                pr = c
            cur[i] = (cur[i] + pr) & 0xFF
    else:
        raise ImageError("PNG filter type %d" % f)


def _png_row(row, fb, o, sx0, n, ctype, data, pal):
    for x in range(sx0, sx0 + n):
        if ctype == 2:
            i = 3 * x
            r = row[i]
            g = row[i + 1]
            b = row[i + 2]
        elif ctype == 6:
            i = 4 * x
            a = row[i + 3]
            r = row[i] * a // 255
            g = row[i + 1] * a // 255
            b = row[i + 2] * a // 255
        elif ctype == 0:
            r = g = b = row[x]
        elif ctype == 4:
            i = 2 * x
            r = g = b = row[i] * row[i + 1] // 255
        else:
            k = row[x]
            if 3 * k + 3 > pal[1]:
                raise ImageError("palette index %d past PLTE" % k)
            j = pal[0] + 3 * k
            r = data[j]
            g = data[j + 1]
            b = data[j + 2]
        fb[o] = (r & 0xF8) | (g >> 5)
        fb[o + 1] = ((g & 0x1C) << 3) | (b >> 3)
        o += 2


# -- BMP --------------------------------------------------------------------------------------------------
def _bmp(data, fb, stride, y0, aw, ah):
    L = len(data)
    if L < 54 or data[0] != 0x42 or data[1] != 0x4D:
        raise ImageError("not a BMP (no BM header)")
    off = _le32(data, 10)
    hsize = _le32(data, 14)
    w = _le32(data, 18)
    h = _le32(data, 22)
    if h & 0x80000000:
        h = 0x100000000 - h
        top_down = True
    else:
        top_down = False
    bpp = _le16(data, 28)
    comp = _le32(data, 30)
    if hsize < 40 or bpp not in (24, 32) or comp != 0:
        raise ImageError("BMP %d-bit compression %d is not decoded here (24/32-bit BI_RGB only)" % (bpp, comp))
    place = _Place(w, h, stride, y0, aw, ah)
    step = bpp >> 3
    rowlen = (w * step + 3) & ~3
    if off < 54 or off + rowlen * h > L:
        raise ImageError("BMP pixel data (%d rows of %d bytes at %d) runs past its %d bytes" % (h, rowlen, off, L))
    for y in range(place.sy0, place.sy0 + place.rows):
        o = place.row_at(y)
        src = off + (y if top_down else h - 1 - y) * rowlen + step * place.sx0
        for x in range(place.n):
            b = data[src]
            g = data[src + 1]
            r = data[src + 2]
            fb[o] = (r & 0xF8) | (g >> 5)
            fb[o + 1] = ((g & 0x1C) << 3) | (b >> 3)
            o += 2
            src += step
        yield
    return w, h
