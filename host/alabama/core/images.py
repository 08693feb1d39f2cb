"""Fit an image to an IMAGE_DISPLAY (spec §10.5, R10.5-a): pure byte-in, byte-out image work with Pillow.

Responsible for making any picture the core wants to show viewable on the declared panel: keep it
when it already fits, else scale it to the panel, convert it to a MIME type the device accepts, and
recompress / downscale until its encoded size is within a byte budget (the inline Render capacity
or the device's ``max_image_bytes``), and for the budget itself: what a session can carry now, inline in a
one-shot Render or streamed over ImageRenderOpen (``image_budget``, ``image_path``), and sending a fitted image
by that path (``push_image``, through the session's public API). ``CoreServer.show_image`` puts both together.
Must not decide what to show, nor touch a socket.
"""
import io
import math

from alabama.v1 import content_pb2, envelope_pb2, surface_pb2
from alabama.wire import frame as wire
from alabama.wire.frame import UINT32_MAX

from .errors import LocalProtocolError

#: MIME types the core can write, with Pillow's format name. Order = preference when converting.
WRITABLE = {"image/jpeg": "JPEG", "image/png": "PNG", "image/webp": "WEBP", "image/gif": "GIF", "image/bmp": "BMP"}
#: Lossy formats: tried at these qualities (best first) before the picture is made smaller.
QUALITIES = (85, 70, 55, 40, 25)
LOSSY = frozenset({"image/jpeg", "image/webp"})
#: Each downscale step keeps at least this fraction of the width/height, at most the second one.
SCALE_MIN, SCALE_MAX = 0.5, 0.9
#: Pictures above this many pixels are refused before decoding (a decompression bomb, not a photo).
MAX_PIXELS = 64_000_000


class ImageError(LocalProtocolError):
    """The image cannot be shown: undecodable, a format the device cannot take, or no budget at all."""


class FittedImage:
    """The bytes to send: ``data`` in ``mime``, ``size`` (w, h) in pixels; ``changed`` when they differ
    from the input; ``original_size``; ``quality`` (lossy encodes) and ``steps`` (encodes tried)."""

    __slots__ = ("data", "mime", "size", "original_size", "changed", "quality", "steps")

    def __init__(self, data, mime, size, original_size, changed, quality=None, steps=0):
        self.data, self.mime, self.size, self.original_size = data, mime, size, original_size
        self.changed, self.quality, self.steps = changed, quality, steps

    def __repr__(self):
        return "FittedImage(%s, %d bytes, %dx%d from %s%s)" % (
            self.mime, len(self.data), self.size[0], self.size[1],
            "%dx%d" % self.original_size if self.original_size else "?", ", changed" if self.changed else "")


def _pil():
    try:
        from PIL import Image
    except ImportError:   # pragma: no cover - pillow is a dependency of the core
        raise ImageError("showing images needs Pillow: pip install pillow", "UNSUPPORTED") from None
    return Image


def _open(data):
    Image = _pil()
    try:
        im = Image.open(io.BytesIO(data))
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        return None, e
    if im.width * im.height > MAX_PIXELS:
        return None, ValueError("%dx%d is over %d pixels" % (im.width, im.height, MAX_PIXELS))
    return im, None


def _target_mime(mime, accepts):
    """The MIME to encode to: the input's when the device takes it and Pillow writes it, else the first
    accepted one Pillow writes; with no ``accepts`` declared, the input's (or JPEG)."""
    if (not accepts or mime in accepts) and mime in WRITABLE:
        return mime
    for a in accepts:
        if a in WRITABLE:
            return a
    if not accepts:
        return "image/jpeg"
    raise ImageError("the display accepts only %s; the core can write %s" % (", ".join(accepts), ", ".join(WRITABLE)),
                     "UNSUPPORTED")


def _prepare(im, mime):
    """A loaded, single-frame image in a mode the target format can hold."""
    Image = _pil()
    try:
        im.seek(0)                         # an animation: its first frame
    except EOFError:
        pass
    if mime == "image/jpeg" or (mime == "image/bmp" and im.mode not in ("RGB", "L", "1", "P")):
        if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
            rgba = im.convert("RGBA")
            bg = Image.new("RGB", rgba.size, (255, 255, 255))   # transparency onto white, as a browser shows it
            bg.paste(rgba, mask=rgba.getchannel("A"))
            return bg
        return im.convert("L" if im.mode in ("L", "1", "I", "I;16", "F") else "RGB")
    if im.mode not in ("RGB", "RGBA", "L", "LA", "P", "1"):
        return im.convert("RGBA" if "A" in im.mode else "RGB")
    im.load()
    return im


def _encode(im, mime, quality):
    buf = io.BytesIO()
    fmt = WRITABLE[mime]
    if mime in LOSSY:
        im.save(buf, fmt, quality=quality)
    elif mime == "image/png":
        im.save(buf, fmt, optimize=True)
    else:
        im.save(buf, fmt)
    return buf.getvalue()


def fit_image(data, mime, budget, accepts=(), width=0, height=0):
    """``data`` (encoded, ``mime``) made to fit: at most ``budget`` bytes, within ``width`` x ``height``
    pixels (0 = no panel size declared), in a MIME type of ``accepts`` (empty = any). Returns a
    FittedImage. The input is returned unchanged when it already fits all three. Otherwise the picture
    is scaled to the panel (aspect kept), converted if needed, and encoded at decreasing quality (JPEG,
    WebP; PNG is optimized and, if still too big, reduced to 256 colours), then downscaled step by step
    (to ~sqrt(budget/size) of its width, between 50 % and 90 % per step) until it fits. Raises
    ImageError (code UNSUPPORTED / INVALID_REQUEST / FRAME_TOO_LARGE) when it cannot."""
    mime = (mime or "").strip().lower()
    accepts = [a.strip().lower() for a in accepts if a]
    if budget <= 0:
        raise ImageError("the display has no room for an image (budget %d bytes)" % budget, "FRAME_TOO_LARGE")
    im, err = _open(data)
    panel = (width, height) if width and height else None
    mime_ok = not accepts or mime in accepts
    if im is None:
        if mime_ok and len(data) <= budget:
            return FittedImage(bytes(data), mime, (0, 0), None, False)   # fits as is; the core need not parse it
        raise ImageError("cannot decode the image to shrink it: %s" % err, "INVALID_REQUEST")
    orig = im.size
    over_panel = panel is not None and (im.width > width or im.height > height)
    honest = mime not in WRITABLE or im.format == WRITABLE[mime]     # the bytes are what the MIME says
    if mime_ok and len(data) <= budget and not over_panel and honest:
        return FittedImage(bytes(data), mime, orig, orig, False)
    out_mime = _target_mime(mime, accepts)
    Image = _pil()
    if over_panel and im.format == "JPEG":
        im.draft("RGB", (width, height))          # let the JPEG decoder scale by 1/2..1/8 on the way in
    im = _prepare(im, out_mime)
    if over_panel:
        im = im.copy()
        im.thumbnail((width, height), Image.LANCZOS)
    steps = 0
    quantized = False
    while True:
        quality = None
        for q in (QUALITIES if out_mime in LOSSY else (None,)):
            out = _encode(im, out_mime, q)
            steps += 1
            quality = q
            if len(out) <= budget:
                return FittedImage(out, out_mime, im.size, orig, True, quality, steps)
            if len(out) > 4 * budget:
                break                              # far off: lower quality alone will not do it
        if out_mime == "image/png" and not quantized and im.mode in ("RGB", "RGBA"):
            im = im.quantize(256)                  # PNG: a palette first, it often halves the size
            quantized = True
            continue
        w, h = im.size
        if w <= 1 and h <= 1:
            raise ImageError("even a 1x1 %s is %d bytes, over the %d-byte budget" % (out_mime, len(out), budget),
                             "FRAME_TOO_LARGE")
        f = min(SCALE_MAX, max(SCALE_MIN, math.sqrt(budget / len(out)) * 0.95))
        nw, nh = max(1, int(w * f)), max(1, int(h * f))
        if (nw, nh) == (w, h):
            nw, nh = max(1, w - 1), max(1, h - 1)
        im = im.resize((nw, nh), Image.LANCZOS)


# ------------------------------------------------------------------------------------ the budget (R10.5-a)
def inline_image_capacity(session, mime, to="", lane=""):
    """Largest encoded image (bytes) a one-shot Render can carry inline in one frame under the device's
    max_frame_bytes, for this mime/to/lane (0 when not even an empty one fits)."""
    env = envelope_pb2.Envelope(id=UINT32_MAX)          # the longest id varint: any minted id fits
    env.render.target = surface_pb2.CAPABILITY_IMAGE_DISPLAY
    env.render.to, env.render.lane = to, lane
    blk = env.render.content.add().media
    blk.mime = mime
    limit = session.surface.max_frame_bytes
    n = limit - wire.frame_total_len(env.ByteSize(), 0)
    while n > 0:                                          # the nested length prefixes grow with n
        blk.data = bytes(n)
        if wire.frame_total_len(env.ByteSize(), 0) <= limit:
            return n
        n -= 1
    return 0


def image_budget(session, mime=None, to="", lane=""):
    """(inline_max, stream_max): the largest encoded image that rides inline in a Render, and the largest an
    ImageRenderOpen may carry now (the device's ImageDisplayParams.max_image_bytes; 0 when it declared none, or
    when all its core stream slots are taken). ``mime`` None sizes the inline capacity for the longest allowed
    MIME string (64 bytes)."""
    session.require_open()
    session.require_cap(surface_pb2.CAPABILITY_IMAGE_DISPLAY, "an image")
    inline = inline_image_capacity(session, "x" * 64 if mime is None else mime, to, lane)
    p = session.surface.image_display_params()
    stream = p.max_image_bytes if p is not None else 0
    if (session.core_streams_open() >= session.surface.max_concurrent_streams
            or session.chunk_capacity(UINT32_MAX) <= 0):
        stream = 0
    return inline, stream


def image_path(session, size, mime, to="", lane=""):
    """How an encoded image of ``size`` bytes reaches the display (spec §10.5): "inline" when it fits a one-shot
    Render, else "stream" when it fits the device's reassembly buffer; None when neither (``fit_image`` first)."""
    inline, stream = image_budget(session, mime, to, lane)
    if size <= inline:
        return "inline"
    if size <= stream:
        return "stream"
    return None


def push_image(session, data, mime, to="", lane=""):
    """Send an encoded image as it is, by the path ``image_path`` picks: a Render with the bytes inline, or
    ImageRenderOpen{mime, total_bytes} + chunks (each under max_frame_bytes) + StreamEnd, all queued at once (the
    server paces the chunks instead). Returns (id, path). Raises FRAME_TOO_LARGE when it fits neither path."""
    path = image_path(session, len(data), mime, to, lane)
    if path == "inline":
        block = content_pb2.ContentBlock()
        block.media.mime, block.media.data = mime, bytes(data)
        return session.render(surface_pb2.CAPABILITY_IMAGE_DISPLAY, [block], to, lane), path
    if path == "stream":
        id_ = session.open_image_render(mime, len(data), to, lane)
        session.send_stream_data(id_, data)
        session.end_stream(id_)
        return id_, path
    inline, stream = image_budget(session, mime, to, lane)
    raise LocalProtocolError("a %d-byte image fits neither inline (%d) nor the device's image buffer (%d): fit it "
                             "first (alabama.core.images.fit_image)" % (len(data), inline, stream), "FRAME_TOO_LARGE")
