"""QR provisioning: the provisioning URI (see ``uri``) as a QR code, in the terminal and as a PNG (segno).

Responsible for the symbol's parameters (byte mode, error correction M or better, never Micro QR) and
for writing it out. It does not build the record or the URI and never decodes an image.
"""
import os

from ..errors import AlabamaError

ERROR_LEVEL = "m"        # 15 % of the symbol may be damaged (a phone photographing a screen); segno
                         # raises it to Q/H when that costs no larger symbol (boost_error)
PNG_SCALE = 8            # pixels per module: a 57-module version-10 symbol is 520 px with its border
BORDER = 4               # the quiet zone the standard asks for


class QrError(AlabamaError):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def make(text):
    """The QR symbol for `text` (a provisioning URI)."""
    try:
        import segno
    except ImportError:
        raise QrError("NO_SEGNO", "the segno package is not installed: `pip install segno` (or `make install`), "
                      "or provision by sound or serial instead") from None
    return segno.make(text, error=ERROR_LEVEL, micro=False, boost_error=True)


def terminal(symbol, out, compact=True):
    """Draw the symbol on a terminal: compact = Unicode half blocks (half the height, fits 80 columns
    up to version 17), else ANSI colour blocks (two columns per module)."""
    symbol.terminal(out=out, border=BORDER, compact=compact)


def save_png(symbol, path, scale=PNG_SCALE):
    path = os.fspath(path)
    try:
        symbol.save(path, kind="png", scale=scale, border=BORDER)
    except OSError as e:
        raise QrError("WRITE", "cannot write %s: %s" % (path, e.strerror or e)) from None
    return path


def matrix(symbol):
    """The modules as rows of 0/1 (dark = 1), without the quiet zone."""
    return tuple(tuple(1 if m else 0 for m in row) for row in symbol.matrix)
