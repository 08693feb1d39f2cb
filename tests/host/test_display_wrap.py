"""The panel's word wrap as a property (issue 31; CPython only: hypothesis). For random word sequences -- rows
that end exactly at the last column, words longer than a row, several spaces, tabs, '\\n', control bytes,
non-ASCII characters -- streamed in random chunks (split mid-word and mid-character, KARAOKE or not) into
satellite.display's pure twin, every cell of the text area shows exactly what `layout` below says: the
glyph of the character laid out there (each character always the same glyph, a non-ASCII one the box) in
the colour it must have, and no ink anywhere else.

`layout` is the wrap docs/display.md promises, written here independently of the firmware's streaming
code: greedy by word; a word that does not fit the rest of its row starts the next one (a row holding
only spaces is left behind); a word longer than a row breaks at the row's last column; spaces are drawn
except those past a full row (a space at a break is not drawn); '\\n' starts a row, but right after a full
row starts no empty one; the area shows the last ROWS rows, a row scrolled in only when something is
written on it or a '\\n' moves past it. For single spaces and words no longer than a row it is exactly
Python's textwrap (test_layout_is_textwrap_for_plain_text), as the BOX-3 end-to-end test lays it out.
The firmware's own deterministic cases and its 0-bytes-per-chunk proof are tests/firmware/test_display.py
(both micropython builds).
"""
import textwrap

from hypothesis import HealthCheck, given, settings, strategies as st

from satellite import display as D
from satellite import font8x16 as F

W, HT = 320, 240
COLS = W // F.W
ROWS = (HT - D.BAR) // F.H
BOARD = {"display": {"width": W, "height": HT, "max_image_bytes": 1024}}
BOX = "\u25a1"                        # the model's name for the box glyph


class Panel:
    width, height = W, HT

    def __init__(self):
        self.fb = bytearray(W * HT * 2)
        self.phase = 255

    def flush(self, y0=0, y1=-1):
        pass


def cells(text):
    """What the firmware draws from `text`, character by character: (char, its UTF-8 byte offset); a tab is a
    space, a non-ASCII character the box, other control characters nothing."""
    out = []
    off = 0
    for ch in text:
        o = ord(ch)
        if ch == "\t":
            out.append((" ", off))
        elif ch == "\n" or 32 <= o <= 126:
            out.append((ch, off))
        elif o >= 128:
            out.append((BOX, off))
        off += len(ch.encode())
    return out


def layout(text, cols=COLS):
    """The promised layout: a list of rows, each a list of (char, byte offset); the last one is the cursor's."""
    rows = []
    para = []
    paras = []
    for c in cells(text):
        if c[0] == "\n":
            paras.append(para)
            para = []
        else:
            para.append(c)
    paras.append(para)
    for para in paras:
        first = len(rows)
        line = []
        i = 0
        while i < len(para):
            j = i
            if para[i][0] == " ":
                while j < len(para) and para[j][0] == " ":
                    j += 1
                for c in para[i:j]:
                    if len(line) == cols:          # a break: this space and the rest of the run are not drawn
                        rows.append(line)
                        line = []
                        break
                    line.append(c)
            else:
                while j < len(para) and para[j][0] != " ":
                    j += 1
                word = para[i:j]
                if line and len(line) + len(word) > cols:
                    rows.append(line)
                    line = []
                while len(word) > cols:
                    rows.append(word[:cols])
                    word = word[cols:]
                line += word
            i = j
        if line or len(rows) == first:
            rows.append(line)
    return rows


def visible(rows, nrows=ROWS):
    """The rows on the panel: the cursor's row only once something is on it (the area scrolls lazily)."""
    if rows and not rows[-1]:
        rows = rows[:-1]
    return rows[-nrows:]


_GLYPH = {}


def glyph_rows(ch, fg):
    """The 16 pixel rows (16 bytes each, big-endian RGB565) of a cell showing ch in fg on black."""
    key = (ch, fg)
    if key not in _GLYPH:
        gi = F.BOX if ch == BOX else ord(ch) - F.FIRST
        rows = []
        for r in range(F.H):
            bits = F.GLYPHS[gi * F.H + r]
            b = bytearray()
            for c in range(F.W):
                v = fg if bits & (0x80 >> c) else D.BLACK
                b += bytes((v >> 8, v & 0xFF))
            rows.append(bytes(b))
        _GLYPH[key] = rows
    return _GLYPH[key]


def check_panel(fb, text, chunks, karaoke):
    """Every cell of the text area against the layout: glyph and colour (KARAOKE: the newest chunk yellow)."""
    last = sum(len(c) for c in chunks[:-1])        # byte offset where the newest chunk starts
    want = visible(layout(text))
    blank = glyph_rows(" ", D.BLACK)
    for r in range(ROWS):
        line = want[r] if r < len(want) else []
        for c in range(COLS):
            if c < len(line):
                ch, off = line[c]
                fg = D.YELLOW if karaoke and off >= last else D.WHITE
                exp = glyph_rows(ch, fg)
            else:
                ch, exp = " ", blank
            for y in range(F.H):
                o = 2 * ((D.BAR + r * F.H + y) * W + c * F.W)
                assert bytes(fb[o:o + 2 * F.W]) == exp[y], (
                    "cell (row %d, col %d) is not %r%s; want rows %r" % (
                        r, c, ch, " in %04x" % fg if ch != " " else "", ["".join(x[0] for x in l) for l in want]))


WORD_CHARS = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789.,;:!?-'()\u00e9\u00df\u00f1\u4e2d\U0001f600\x01")


@st.composite
def streams(draw):
    """(text, chunks as bytes): words and separators, biased so that rows often end exactly at the edge."""
    text = ""
    for _ in range(draw(st.integers(1, 24))):
        kind = draw(st.sampled_from(("word", "word", "word", "edge", "edge", "long", "sep", "nl")))
        if kind in ("word", "edge", "long"):
            if kind == "edge":                      # a word ending exactly at the last column
                cur = layout(text)[-1]
                n = COLS - len(cur) if len(cur) < COLS else COLS
            elif kind == "long":
                n = draw(st.integers(COLS + 1, 2 * COLS + 5))
            else:
                n = draw(st.integers(1, 12))
            text += "".join(draw(st.lists(WORD_CHARS, min_size=n, max_size=n)))
        if kind == "nl":
            text += draw(st.sampled_from(("\n", "\n\n", " \n", "\n ")))
        else:
            text += draw(st.sampled_from((" ", " ", " ", "  ", "\t", "   ")))
        if draw(st.booleans()) and kind != "nl":
            text = text.rstrip(" \t")               # sometimes the next word follows a separator-less end
            if text and not text.endswith("\n"):
                text += " "
    if draw(st.booleans()):
        text = text.rstrip(" \t")
    data = text.encode()
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(data) - 1)), max_size=30)))
    chunks = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)]) if b > a]
    return text, chunks or [b""]


def test_layout_is_textwrap_for_plain_text():
    """The model above is textwrap's layout where textwrap applies (single spaces, no word over a row)."""
    import random
    rnd = random.Random(31)
    for _ in range(300):
        words = ["x" * rnd.randint(1, COLS) for _ in range(rnd.randint(1, 30))]
        text = " ".join(words)
        got = ["".join(c[0] for c in row).rstrip() for row in visible(layout(text), 10 ** 6)]   # a space: no ink
        assert got == textwrap.wrap(text, COLS, break_on_hyphens=False), text


_DISPLAY = []


def display():
    if not _DISPLAY:
        _DISPLAY.append(D.Display(BOARD, Panel(), pure=True))
    return _DISPLAY[0]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams(), st.booleans())
def test_streamed_text_is_drawn_as_the_documented_word_wrap(stream, karaoke):
    text, chunks = stream
    d = display()
    d.text_open(2, D.KARAOKE if karaoke else 2)
    for c in chunks:
        d.chunk(2, c, 0, len(c))
    check_panel(d.fb, text, chunks, karaoke)


def test_issue_31_word_ending_at_the_last_column():
    """The issue's sentence: "brown" ends at column 40; the space after it must not glue "the" to it."""
    text = "over jump fox five dog while quick brown the jumps"
    d = display()
    for chunks in ([w.encode() + b" " for w in text.split(" ")], [text.encode()]):
        d.text_open(2, 2)
        for c in chunks:
            d.chunk(2, c, 0, len(c))
        check_panel(d.fb, text + (" " if len(chunks) > 1 else ""), chunks, False)
        assert [bytes(d.grid[r * COLS:(r + 1) * COLS]).rstrip(b"\0") for r in range(2)] == [
            bytes(ord(ch) - F.FIRST for ch in line) for line in ("over jump fox five dog while quick brown", "the jumps")]
