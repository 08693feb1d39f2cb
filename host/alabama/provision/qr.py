"""QR provisioning: the provisioning URI (see ``uri``) as a QR code, in the terminal and as a PNG (segno).

Responsible for the symbol's parameters (byte mode, error correction M or better, never Micro QR) and
for writing it out: the terminal drawing in explicit black and white (it reads on light and dark themes
alike) and the PNG with its caption (Pillow). It does not build the record or the URI and never decodes
an image.
"""
import io
import os

from ..errors import AlabamaError, UsageError

ERROR_LEVEL = "m"        # 15 % of the symbol may be damaged (a phone photographing a screen); segno
                         # raises it to Q/H when that costs no larger symbol (boost_error)
PNG_SCALE = 8            # pixels per module: a 57-module version-10 symbol is 520 px with its border
BORDER = 4               # the quiet zone the standard asks for


class QrError(AlabamaError):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


class QrUsageError(QrError, UsageError):
    """A --png path that cannot be written: the command line's mistake (exit status 2, as --wav's)."""


#: The caption's last line: who reads the code (docs/provisioning.md, "Which satellite reads which carrier").
READERS = "scan with an Alabama satellite app or a camera board"
CAPTION_PX = 18          # caption font size; the caption goes under the symbol, on the same white
#: ANSI SGR colours the terminal drawing sets for every cell (never the theme's default fore/background):
#: 30/40 black, 97/107 bright white.
_FG = {1: "30", 0: "97"}
_BG = {1: "40", 0: "107"}
_UPPER_HALF = "\u2580"


def segno():
    """The segno module, or a QrError saying how to get it (checked before a token is minted)."""
    try:
        import segno as mod
    except ImportError:
        from ..extras import package_hint
        raise QrError("NO_SEGNO", "the segno package is not installed: %s, or provision by sound or serial instead"
                      % package_hint("segno")) from None
    return mod


def make(text):
    """The QR symbol for `text` (a provisioning URI)."""
    return segno().make(text, error=ERROR_LEVEL, micro=False, boost_error=True)


def terminal(symbol, out, compact=True, plain=False):
    """Draw the symbol on a terminal with its quiet zone. Every cell sets both its colours (black modules,
    bright white light ones), so the code reads on a light theme as on a dark one. compact: one character
    per module and two rows per line (Unicode upper half block: foreground = the upper module, background
    = the lower), fits 80 columns up to version 17; else two spaces per module, background colour only.
    plain: segno's own uncoloured half blocks, for a terminal without colours (reads on dark themes only)."""
    if plain:
        symbol.terminal(out=out, border=BORDER, compact=True)
        return
    rows = [[1 if m else 0 for m in row] for row in symbol.matrix_iter(border=BORDER)]
    if compact:
        if len(rows) % 2:
            rows.append([0] * len(rows[0]))
        lines = [[(_FG[t] + ";" + _BG[b], _UPPER_HALF) for t, b in zip(top, bottom)]
                 for top, bottom in zip(rows[::2], rows[1::2])]
    else:
        lines = [[(_BG[m], "  ") for m in row] for row in rows]
    for cells in lines:
        text, last = [], None
        for sgr, ch in cells:
            if sgr != last:                       # a colour code only where the colours change
                text.append("\x1b[%sm" % sgr)
                last = sgr
            text.append(ch)
        out.write("".join(text) + "\x1b[0m\n")


def check_writable(path):
    """Refuse a PNG path that cannot be written (its folder missing, or a folder itself) before anything is
    made: a refused file must not cost a pairing token."""
    from ..outfile import problem
    why = problem(path)
    if why:
        raise QrUsageError("WRITE", "cannot write %s: %s: give --png a file in a folder you can write" % (
            os.fspath(path), why))


def caption(rec, when):
    """The PNG's caption lines for a record: which core, until when, who reads it. when(ts) -> text."""
    key = " (key %s...)" % rec.core_key[:4].hex() if rec.core_key else ""
    lines = ["Alabama core %s:%d%s" % (rec.core_host, rec.core_port, key)]
    if rec.pairing_token and rec.token_expires:
        lines.append("pairing token expires %s" % when(rec.token_expires))
    elif not rec.pairing_token:
        lines.append("no pairing token")
    if rec.wifi_ssid:
        lines.append("Wi-Fi %s" % rec.wifi_ssid)
    lines.append(READERS)
    return lines


def png_image(symbol, lines=(), scale=PNG_SCALE):
    """A Pillow image of the symbol (quiet zone included) with `lines` of caption under it, black on white;
    the caption is also in the PNG's Description text."""
    from PIL import Image, ImageDraw, ImageFont
    buf = io.BytesIO()
    symbol.save(buf, kind="png", scale=scale, border=BORDER)
    code = Image.open(io.BytesIO(buf.getvalue())).convert("L")
    if not lines:
        return code
    font = ImageFont.load_default(size=CAPTION_PX)
    draw = ImageDraw.Draw(code)        # the caption starts below the whole quiet zone
    line_h = CAPTION_PX + 6
    width = max([code.width] + [int(draw.textlength(t, font=font)) + 2 * scale * 2 for t in lines])
    img = Image.new("L", (width, code.height + line_h * len(lines) + scale * 2), 255)
    img.paste(code, ((width - code.width) // 2, 0))
    draw = ImageDraw.Draw(img)
    for i, t in enumerate(lines):
        tw = draw.textlength(t, font=font)
        draw.text(((width - tw) / 2, code.height + i * line_h), t, fill=0, font=font)
    return img


def save_png(symbol, path, scale=PNG_SCALE, caption=()):
    """Write the PNG (with its caption lines, if any); returns the path."""
    from PIL import PngImagePlugin
    path = os.fspath(path)
    img = png_image(symbol, caption, scale)
    info = PngImagePlugin.PngInfo()
    if caption:
        info.add_text("Description", " / ".join(caption))
    try:
        img.save(path, format="PNG", pnginfo=info)
    except OSError as e:
        raise QrError("WRITE", "cannot write %s: %s" % (path, e.strerror or e)) from None
    return path


def matrix(symbol):
    """The modules as rows of 0/1 (dark = 1), without the quiet zone."""
    return tuple(tuple(1 if m else 0 for m in row) for row in symbol.matrix)
