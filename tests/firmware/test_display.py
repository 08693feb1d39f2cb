# dual: cpython micropython
# The panel (issue 15, spec §10.5): TEXT_DISPLAY / IMAGE_DISPLAY streams through the session and the
# runtime into satellite.display, PipelineState on the status bar, the bounds checked before anything is
# sized, and 0 bytes allocated per text chunk on the whole receive path (Noise message -> frame ->
# Session -> Satellite -> Display). The pictures themselves are compared with Pillow-made ones in
# tests/host/test_display_panel.py (a BOX-3-declared virtual board, the core's fitting path).
from mpsupport import IS_MICROPYTHON, mem_alloc_delta

import rt_harness as H
from satellite import display as D
from satellite import font8x16 as F
from satellite import session as S
from satellite.wire import alabama_v1 as pb

CK = pb.CapabilityKind
EC = pb.ErrorCode
W, HT = 320, 240
MAX_IMAGE = 65536
BOARD = {"id": "box3-test", "duplex": "full", "audio": {"mic": {"rates": [16000]}, "speaker": {"rates": [16000]}},
         "limits": {"max_frame_bytes": 4096, "max_concurrent_streams": 4, "buffer_ms": 300},
         "display": {"driver": "ili9342c", "width": W, "height": HT, "max_image_bytes": MAX_IMAGE}}


class Panel:
    def __init__(self, w=W, h=HT):
        self.width = w
        self.height = h
        self.fb = bytearray(w * h * 2)
        self.phase = 255
        self.flushes = 0

    def flush(self, y0=0, y1=-1):
        self.flushes += 1


class PanelHal(H.FakeHal):
    def __init__(self):
        H.FakeHal.__init__(self)
        self._panel = Panel()

    def panel(self):
        return self._panel


def make():
    hal = PanelHal()
    rt, sat, core, sink, hal = H.make(board=BOARD, hal=hal, record_output=True)
    H.sent(core)                                    # the Hello
    return rt, sat, core, sink, hal


def errors(core):
    return [(e.id, e.error.code) for e, _ in H.sent(core) if e.op == "error"]


def px(fb, x, y):
    o = 2 * (y * W + x)
    return (fb[o] << 8) | fb[o + 1]


def cell_pixels(fb, col, row, glyph, fg, bg=0):
    """True when cell (col, row) of the text area shows font glyph `glyph` in fg on bg."""
    x0 = col * F.W
    y0 = D.BAR + row * F.H
    for r in range(F.H):
        bits = F.GLYPHS[glyph * F.H + r]
        for c in range(F.W):
            want = fg if bits & (0x80 >> c) else bg
            if px(fb, x0 + c, y0 + r) != want:
                return False
    return True


def bmp(w, h, colour):
    """A 24-bit BI_RGB BMP of one colour (rgb tuple), bottom-up."""
    rowlen = (3 * w + 3) & ~3
    size = 54 + rowlen * h
    b = bytearray(size)
    b[0:2] = b"BM"
    for o, v, n in ((2, size, 4), (10, 54, 4), (14, 40, 4), (18, w, 4), (22, h, 4), (26, 1, 2), (28, 24, 2)):
        for i in range(n):
            b[o + i] = (v >> (8 * i)) & 0xFF
    for y in range(h):
        for x in range(w):
            o = 54 + y * rowlen + 3 * x
            b[o] = colour[2]
            b[o + 1] = colour[1]
            b[o + 2] = colour[0]
    return bytes(b)


def test_board_with_a_panel_declares_text_and_image_display():
    rt, sat, core, sink, hal = make()
    caps = {c.kind: c for c in rt.surface("").capabilities}
    t = caps[CK.CAPABILITY_TEXT_DISPLAY].text_display
    i = caps[CK.CAPABILITY_IMAGE_DISPLAY].image_display
    assert (t.columns, t.rows) == (W // 8, (HT - D.BAR) // 16)
    assert (i.width, i.height, i.max_image_bytes) == (W, HT - D.BAR, MAX_IMAGE)
    assert "image/bmp" in i.accepts and "image/jpeg" not in i.accepts   # only what imgdec decodes
    assert rt.max_streams == 3                      # a speaker render, a text and an image stream
    # a board without a panel declares neither and never imports satellite.display's work
    rt2, _, _, _, _ = H.make()
    assert rt2.display is None
    kinds = [c.kind for c in rt2.surface("").capabilities]
    assert CK.CAPABILITY_TEXT_DISPLAY not in kinds and CK.CAPABILITY_IMAGE_DISPLAY not in kinds


def _text_chunks(link, msgs, lens, n):
    i = 0
    while i < n:
        link.feed(msgs[i], 0, lens[i])
        i += 1


def test_text_stream_drawn_and_chunks_allocate_nothing():
    rt, sat, core, sink, hal = make()
    H.feed(sat.link, core, pb.Envelope(id=2, text_render_open=pb.TextRenderOpen(role=pb.TextRole.ASSISTANT)))
    assert rt.display.text_id == 2
    words = [b"Hello ", b"panel, ", b"caf\xc3\xa9 ", b"ok\n"]
    msgs = []
    lens = []
    seq = 0
    while seq < 60:
        m = H.core_message(core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=seq)), words[seq % 4])
        msgs.append(m)
        lens.append(len(m))
        seq += 1
    _text_chunks(sat.link, msgs, lens, 4)
    fb = rt.display.fb
    # "Hello panel, caf" + one box for the two-byte e-acute + " ok", then a new line
    text = b"Hello panel, caf"
    for c in range(len(text)):
        assert cell_pixels(fb, c, 0, text[c] - F.FIRST, D.WHITE), c
    assert cell_pixels(fb, len(text), 0, F.BOX, D.WHITE)
    assert rt.display.cur == rt.display.cols     # '\n' moved to the next row
    if IS_MICROPYTHON:
        d = mem_alloc_delta(_text_chunks, sat.link, msgs[4:], lens[4:], 56)   # scrolls included
        assert d == 0, d
    else:
        _text_chunks(sat.link, msgs[4:], lens[4:], 56)
    assert rt.display.cur <= rt.display.cells
    H.feed(sat.link, core, pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))
    assert rt.display.text_id == 0


def _rows(d):
    """The text grid as one str per row (a blank cell is a space)."""
    out = []
    for r in range(d.rows):
        out.append("".join(chr(d.grid[r * d.cols + c] + F.FIRST) for c in range(d.cols)).rstrip())
    return out


def _end(core, link, id):
    H.feed(link, core, pb.Envelope(id=id, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))


def _stream(core, link, id, chunks):
    for seq in range(len(chunks)):
        H.feed(link, core, pb.Envelope(id=id, stream_chunk=pb.StreamChunk(seq=seq)), chunks[seq])


def test_text_wraps_at_words_as_it_streams():
    """A word still being written when its row fills moves to the next row, also when it spans chunks; the
    space at a break is not drawn; a word as long as the row breaks at its last column; a '\n' right after a
    full row starts no empty row. Checked in the grid and in the pixels."""
    rt, sat, core, sink, hal = make()
    d = rt.display
    assert d.cols == 40
    H.feed(sat.link, core, pb.Envelope(id=2, text_render_open=pb.TextRenderOpen(role=pb.TextRole.ASSISTANT)))
    text = ("The BOX-3 panel shows this text as the core streams it, one chunk per word, wrapping at the "
            "fortieth column.")
    words = [w + " " for w in text.split(" ")]
    words[-1] = words[-1].rstrip()
    _stream(core, sat.link, 2, [w.encode() for w in words])
    assert _rows(d)[:4] == ["The BOX-3 panel shows this text as the", "core streams it, one chunk per word,",
                            "wrapping at the fortieth column.", ""], _rows(d)
    assert cell_pixels(d.fb, 39, 0, 0, D.WHITE)                     # the moved "c" of "core" is blank there
    assert cell_pixels(d.fb, 0, 1, ord("c") - F.FIRST, D.WHITE)
    # a word split over chunks ("st" + "re" + "ams") moves whole, and so does a whole word that does not fit
    # the rest of its row; a word longer than a row breaks at its end; a '\n' after a full row adds no row
    H.feed(sat.link, core, pb.Envelope(id=4, text_render_open=pb.TextRenderOpen()))
    _stream(core, sat.link, 4, [b"A" * 36 + b" st", b"re", b"ams " + b"B" * 36, b" C\n", b"x" * 45, b"\n" + b"y" * 40,
                                b"\nz\n" + b"D" * 40 + b" E"])
    assert _rows(d)[:6] == ["A" * 36, "streams", "B" * 36 + " C", "x" * 40, "xxxxx", "y" * 40], _rows(d)
    assert _rows(d)[6:10] == ["z", "D" * 40, "E", ""], _rows(d)                  # "E", not " E"
    assert d.grid[8 * d.cols] == ord("E") - F.FIRST


def test_a_word_ending_at_the_last_column_keeps_the_next_word_apart():
    """Issue 31: "brown" ends exactly at column 40; the space after it is the break (not drawn) and "the"
    starts the next row, not glued to "brown" moved down ("brownthe"); streamed a word per chunk, in one
    chunk, and KARAOKE (the moved nothing: colours as streamed). And a blank line at the bottom of a full
    area is kept: the area scrolls when a row below the last is needed, for a '\n' as for a glyph."""
    rt, sat, core, sink, hal = make()
    d = rt.display
    text = b"over jump fox five dog while quick brown the jumps"
    want = ["over jump fox five dog while quick brown", "the jumps", ""]
    words = text.split(b" ")
    H.feed(sat.link, core, pb.Envelope(id=2, text_render_open=pb.TextRenderOpen()))
    _stream(core, sat.link, 2, [w + b" " for w in words])
    assert _rows(d)[:3] == want, _rows(d)
    assert cell_pixels(d.fb, 0, 1, ord("t") - F.FIRST, D.WHITE) and cell_pixels(d.fb, 39, 0, ord("n") - F.FIRST, D.WHITE)
    _end(core, sat.link, 2)
    H.feed(sat.link, core, pb.Envelope(id=4, text_render_open=pb.TextRenderOpen()))
    _stream(core, sat.link, 4, [text])
    _end(core, sat.link, 4)
    assert _rows(d)[:3] == want, _rows(d)
    H.feed(sat.link, core, pb.Envelope(id=6, text_render_open=pb.TextRenderOpen(role=pb.TextRole.KARAOKE)))
    _stream(core, sat.link, 6, [w + b" " for w in words])
    assert _rows(d)[:3] == want, _rows(d)
    assert cell_pixels(d.fb, 35, 0, ord("b") - F.FIRST, D.WHITE) and cell_pixels(d.fb, 6, 1, ord("m") - F.FIRST, D.YELLOW)
    _end(core, sat.link, 6)
    # the area full, then "abc\n\nz": abc, a blank row, z (the blank row was lost at the bottom before)
    H.feed(sat.link, core, pb.Envelope(id=8, text_render_open=pb.TextRenderOpen()))
    _stream(core, sat.link, 8, [b"row\n" * (d.rows - 1), b"abc\n", b"\n", b"z"])
    assert _rows(d)[-3:] == ["abc", "", "z"], _rows(d)
    _stream(core, sat.link, 8, [b"\n" + b"x" * d.cols, b"\n\n", b"y"])   # a full row, '\n' (no row), '\n'
    assert _rows(d)[-3:] == ["x" * d.cols, "", "y"], _rows(d)


def test_karaoke_word_moved_by_the_wrap_keeps_its_colours():
    rt, sat, core, sink, hal = make()
    d = rt.display
    H.feed(sat.link, core, pb.Envelope(id=2, text_render_open=pb.TextRenderOpen(role=pb.TextRole.KARAOKE)))
    _stream(core, sat.link, 2, [b"a" * 37 + b" ", b"cd", b"ef"])     # "cd" fills row 0, "ef" moves it to row 1
    assert _rows(d)[:2] == ["a" * 37, "cdef"], _rows(d)
    assert cell_pixels(d.fb, 38, 0, 0, D.WHITE)
    assert cell_pixels(d.fb, 0, 1, ord("c") - F.FIRST, D.WHITE)     # spoken
    assert cell_pixels(d.fb, 2, 1, ord("e") - F.FIRST, D.YELLOW)    # being spoken
    assert d.hl == d.cols + 2
    H.feed(sat.link, core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=3)), b"g")
    assert cell_pixels(d.fb, 2, 1, ord("e") - F.FIRST, D.WHITE) and cell_pixels(d.fb, 4, 1, ord("g") - F.FIRST, D.YELLOW)


def test_word_wrap_and_scroll_allocate_nothing():
    """Chunks whose words cross row ends (a word moved each row) and fill the area (a scroll each row, some
    inside the move itself) allocate nothing on the whole receive path."""
    rt, sat, core, sink, hal = make()
    H.feed(sat.link, core, pb.Envelope(id=2, text_render_open=pb.TextRenderOpen(role=pb.TextRole.KARAOKE)))
    words = [b"wrapping ", b"streams ", b"at ", b"column. ", b"fortieth "]
    msgs = []
    lens = []
    for seq in range(120):
        m = H.core_message(core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=seq)), words[seq % 5])
        msgs.append(m)
        lens.append(len(m))
    _text_chunks(sat.link, msgs, lens, 40)                          # the area full: every row now scrolls
    before = _rows(rt.display)
    if IS_MICROPYTHON:
        d = mem_alloc_delta(_text_chunks, sat.link, msgs[40:], lens[40:], 80)
        assert d == 0, d
    else:
        _text_chunks(sat.link, msgs[40:], lens[40:], 80)
    rows = _rows(rt.display)
    assert rows != before and all(r and r[0] != " " and len(r) <= 40 for r in rows[:-1]), rows
    assert all(not r.endswith(("wrappi", "strea", "colu", "forti")) for r in rows), rows   # no word cut


def _edge_chunks(core, n):
    """A word per chunk, rows ending exactly at the last column (the issue 31 sentence: 40 + 10 + 1 cells)."""
    words = [b"over ", b"jump ", b"fox ", b"five ", b"dog ", b"while ", b"quick ", b"brown ", b"the ", b"jumps\n\n"]
    msgs = []
    lens = []
    for seq in range(n):
        m = H.core_message(core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=seq)), words[seq % len(words)])
        msgs.append(m)
        lens.append(len(m))
    return msgs, lens


def test_word_ending_at_the_edge_and_blank_lines_allocate_nothing():
    """A break at a space after a row-ending word and a blank line at the bottom (both issue 31) allocate
    nothing either."""
    rt, sat, core, sink, hal = make()
    H.feed(sat.link, core, pb.Envelope(id=2, text_render_open=pb.TextRenderOpen(role=pb.TextRole.KARAOKE)))
    msgs, lens = _edge_chunks(core, 100)
    _text_chunks(sat.link, msgs, lens, 50)                          # 5 x 3 rows: the area full, scrolling
    if IS_MICROPYTHON:
        d = mem_alloc_delta(_text_chunks, sat.link, msgs[50:], lens[50:], 50)
        assert d == 0, d
    else:
        _text_chunks(sat.link, msgs[50:], lens[50:], 50)
    assert _rows(rt.display)[-3:] == ["over jump fox five dog while quick brown", "the jumps", ""], _rows(rt.display)


def test_r10_10_d_chunk_after_a_display_stream_end_draws_stream_closed():
    rt, sat, core, sink, hal = make()
    H.feed(sat.link, core, pb.Envelope(id=2, text_render_open=pb.TextRenderOpen()))
    H.feed(sat.link, core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=0)), b"a")
    H.feed(sat.link, core, pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))
    H.sent(core)
    H.feed(sat.link, core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=1)), b"b")
    assert errors(core) == [(2, EC.STREAM_CLOSED)]
    # the text stream has no terminal: nothing but that Error went out (fire-and-forward, §10.8)
    H.feed(sat.link, core, pb.Envelope(id=4, stream_chunk=pb.StreamChunk(seq=0)), b"c")
    assert errors(core) == [(4, EC.UNKNOWN_STREAM)]


def test_karaoke_highlights_the_newest_chunk_only():
    rt, sat, core, sink, hal = make()
    H.feed(sat.link, core, pb.Envelope(id=2, text_render_open=pb.TextRenderOpen(role=pb.TextRole.KARAOKE)))
    H.feed(sat.link, core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=0)), b"AB")
    fb = rt.display.fb
    assert cell_pixels(fb, 0, 0, ord("A") - F.FIRST, D.YELLOW)
    H.feed(sat.link, core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=1)), b"CD")
    assert cell_pixels(fb, 0, 0, ord("A") - F.FIRST, D.WHITE)     # spoken: back to the normal colour
    assert cell_pixels(fb, 1, 0, ord("B") - F.FIRST, D.WHITE)
    assert cell_pixels(fb, 2, 0, ord("C") - F.FIRST, D.YELLOW)    # being spoken
    H.feed(sat.link, core, pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))
    assert cell_pixels(fb, 3, 0, ord("D") - F.FIRST, D.WHITE)


def test_pipeline_state_colours_the_status_bar():
    rt, sat, core, sink, hal = make()
    fb = rt.display.fb
    assert px(fb, W - 1, 0) == D.PHASE_COLOURS[0]
    for phase in (1, 3, 4, 0):
        H.feed(sat.link, core, pb.Envelope(id=0, pipeline_state=pb.PipelineState(phase=phase)))
        assert px(fb, W - 1, 0) == D.PHASE_COLOURS[phase] and px(fb, W - 1, D.BAR - 1) == D.PHASE_COLOURS[phase]
        assert hal._panel.phase == phase
        name = D.PHASE_NAMES[phase]
        assert cell_pixels_bar(fb, name, D.PHASE_COLOURS[phase])


def cell_pixels_bar(fb, name, bg):
    for k in range(len(name)):
        g = name[k] - F.FIRST
        for r in range(F.H):
            bits = F.GLYPHS[g * F.H + r]
            for c in range(F.W):
                want = D.WHITE if bits & (0x80 >> c) else bg
                if px(fb, 4 + k * F.W + c, r) != want:
                    return False
    return True


def test_image_stream_reassembled_and_painted_centred():
    rt, sat, core, sink, hal = make()
    img = bmp(40, 30, (255, 0, 0))
    H.feed(sat.link, core, pb.Envelope(id=2, image_render_open=pb.ImageRenderOpen(mime="image/bmp",
                                                                                  total_bytes=len(img))))
    step = 1000
    seq = 0
    for pos in range(0, len(img), step):
        H.feed(sat.link, core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=seq)), img[pos:pos + step])
        seq += 1
    assert rt.display.painted == 0                  # painted at StreamEnd, not before
    H.feed(sat.link, core, pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))
    assert errors(core) == []
    assert rt.display.job is not None and rt.display.painted == 0   # decoded a row per loop turn
    assert rt.display.step_job(3) and rt.display.painted == 0
    rt.display.finish()
    assert rt.display.painted == 1 and rt.display.job is None
    fb = rt.display.fb
    x0 = (W - 40) // 2
    y0 = D.BAR + (HT - D.BAR - 30) // 2
    assert px(fb, x0, y0) == 0xF800 and px(fb, x0 + 39, y0 + 29) == 0xF800
    assert px(fb, x0 - 1, y0) == 0 and px(fb, x0, y0 - 1) == 0 and px(fb, x0 + 40, y0 + 29) == 0


def test_inline_render_image_and_text():
    rt, sat, core, sink, hal = make()
    img = bmp(8, 4, (0, 0, 255))
    H.feed(sat.link, core, pb.Envelope(id=2, render=pb.Render(target=CK.CAPABILITY_IMAGE_DISPLAY, content=[
        pb.ContentBlock(media=pb.MediaBlock(mime="image/bmp", data=img))])))
    rt.display.finish()
    assert errors(core) == [] and rt.display.painted == 1
    assert px(rt.display.fb, W // 2, D.BAR + (HT - D.BAR) // 2) == 0x001F
    H.feed(sat.link, core, pb.Envelope(id=4, render=pb.Render(target=CK.CAPABILITY_TEXT_DISPLAY, content=[
        pb.ContentBlock(text="Hi")])))
    assert errors(core) == []
    assert cell_pixels(rt.display.fb, 0, 0, ord("H") - F.FIRST, D.WHITE)
    # a mime it does not decode, and bytes that are no image: an Error on the Render's id, never a crash
    H.feed(sat.link, core, pb.Envelope(id=6, render=pb.Render(target=CK.CAPABILITY_IMAGE_DISPLAY, content=[
        pb.ContentBlock(media=pb.MediaBlock(mime="image/jpeg", data=b"\xff\xd8"))])))
    H.feed(sat.link, core, pb.Envelope(id=8, render=pb.Render(target=CK.CAPABILITY_IMAGE_DISPLAY, content=[
        pb.ContentBlock(media=pb.MediaBlock(mime="image/bmp", data=b"BM" + bytes(60)))])))
    rt.display.finish()
    assert errors(core) == [(6, EC.INVALID_REQUEST), (8, EC.INVALID_REQUEST)]


def test_image_over_the_buffer_draws_resource_exhausted_before_any_allocation():
    rt, sat, core, sink, hal = make()
    H.feed(sat.link, core, pb.Envelope(id=2, image_render_open=pb.ImageRenderOpen(mime="image/bmp",
                                                                                  total_bytes=MAX_IMAGE + 1)))
    assert errors(core) == [(2, EC.RESOURCE_EXHAUSTED)]
    assert rt.display.img is None                   # nothing was sized from the hostile total_bytes
    # its chunks already in flight are discarded silently (the Error voided the id)
    H.feed(sat.link, core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=0)), bytes(100))
    assert errors(core) == []
    # an undeclared mime and a zero size are refused on the open too
    H.feed(sat.link, core, pb.Envelope(id=4, image_render_open=pb.ImageRenderOpen(mime="image/jpeg", total_bytes=10)))
    H.feed(sat.link, core, pb.Envelope(id=6, image_render_open=pb.ImageRenderOpen(mime="image/bmp", total_bytes=0)))
    assert errors(core) == [(4, EC.INVALID_REQUEST), (6, EC.INVALID_REQUEST)]


def test_image_stream_short_or_long_of_total_bytes_draws_an_error_at_its_end():
    rt, sat, core, sink, hal = make()
    img = bmp(4, 4, (1, 2, 3))
    for id_, tail in ((2, img[:-1]), (4, img + b"x")):
        H.feed(sat.link, core, pb.Envelope(id=id_, image_render_open=pb.ImageRenderOpen(mime="image/bmp",
                                                                                        total_bytes=len(img))))
        H.feed(sat.link, core, pb.Envelope(id=id_, stream_chunk=pb.StreamChunk(seq=0)), tail)
        H.feed(sat.link, core, pb.Envelope(id=id_, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))
    assert errors(core) == [(2, EC.INVALID_REQUEST), (4, EC.INVALID_REQUEST)]
    assert rt.display.painted == 0


def test_r10_3_c_display_streams_count_against_our_stream_limit():
    rt, sat, core, sink, hal = make()
    assert rt.max_streams == 3
    H.feed(sat.link, core, pb.Envelope(id=2, text_render_open=pb.TextRenderOpen()))
    H.feed(sat.link, core, pb.Envelope(id=4, image_render_open=pb.ImageRenderOpen(mime="image/bmp", total_bytes=100)))
    H.feed(sat.link, core, pb.Envelope(id=6, media_render_open=pb.MediaRenderOpen(
        target=CK.CAPABILITY_SPEAKER, format=rt.mic_format())))
    H.feed(sat.link, core, pb.Envelope(id=8, text_render_open=pb.TextRenderOpen()))
    assert errors(core) == [(8, EC.TOO_MANY_STREAMS)]


def test_pure_and_framebuf_drawing_agree():
    # MicroPython draws glyphs and scrolls with the C framebuf module; the pure twin (CPython, or no
    # framebuf) must produce the same bytes.
    board = {"display": {"width": 64, "height": 48, "max_image_bytes": 1024}}
    a = D.Display(board, Panel(64, 48))
    b = D.Display(board, Panel(64, 48), pure=True)
    assert b._fbo is None
    if IS_MICROPYTHON:
        assert a._fbo is not None
    text = b"The quick brown fox jumps\nover the lazy dog \xe2\x82\xac 0123456789 ~!"
    for d in (a, b):
        d.set_phase(2)
        d.text_open(2, pb.TextRole.KARAOKE)
        for i in range(0, len(text), 5):
            d.text_chunk(text, i, min(i + 5, len(text)))
    assert a.fb == b.fb
    assert a.grid == b.grid and a.cur == b.cur


# A 6x5 RGB PNG made by hand (tests/host/test_display_panel.py checks Pillow-written ones): one row per
# filter type 0..4 (None, Sub, Up, Average, Paeth), its zlib stream split over two IDAT chunks; PX is its
# raw pixel data (Pillow decodes PNG to exactly PX).
PX = (b"\xa5M\xca\x18%0\xbb\x1dm\x13,\xde\xd6#{.\xd9\x1e?r\x1f\xcb\x19q\x17D\x94\xd6I<\x9d\\4`\xbe1 \x1ei\xfe"
      b"\xda\xa0\xee\xe8\xb9\x99\x7f\\|)\x99\xfd\xaf\xe5\x93%<\xd6T\xafM\xfa\xd7\x14'\xa0\xae\xb3\xfe\xe9#/\x8a"
      b"\xf2!\x1f\x9e\xe4\x91\xc5\xb1\x0b\xec\xb5V;\xfc\x1eo\x93")
PNG = (b'\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x06\x00\x00\x00\x05\x08\x02\x00\x00\x00\xe9:\n\xb1\x00'
       b'\x00\x00\x14IDATx\x9c\x01_\x00\xa0\xff\x00\xa5M\xca\x18%0\xbb\x1dm\x13,\xde\xf9E\xda\xfe\x00\x00\x00VIDAT'
       b'\xd6#{.\xd9\x1e\x01?r\x1f\x8c\xa7RL+#\xbf\x05\xa8\xc7\x13\xf8\xc3b\xfd\x02\xe1\xacJ3\xc1/\xd7\xa4%\xc36 '
       b'\xdf\xcde\x9d\xf1\xb4\x03\x83\x16\x08\x0e\xd5Ak\\#\xa1k\x07f\x8bb\x14r>\x04\xf7\xcd\xe5I\xac5r\xcb\xcd'
       b'\xbe\xc5\x15\xa8O\xfepLdk )\xe7\x0c\x935\xa5\x00\x00\x00\x00IEND\xaeB`\x82')


def test_png_decoder_all_filters_split_idat_centred_and_clipped():
    from satellite import imgdec
    assert "image/png" in D.mimes()                 # both micropython builds have the deflate module
    fb = bytearray(10 * 9 * 2)
    assert imgdec.paint("image/png", PNG, fb, 10, 1, 10, 8) == (6, 5)
    for y in range(5):
        for x in range(6):
            i = 3 * (y * 6 + x)
            r, g, b = PX[i], PX[i + 1], PX[i + 2]
            want = ((r & 0xF8) << 8) | ((g & 0xFC) << 3) | (b >> 3)
            o = 2 * ((1 + 1 + y) * 10 + 2 + x)      # area from row 1, centred: 1 row and 2 columns in
            assert (fb[o] << 8) | fb[o + 1] == want, (x, y)
    # an area smaller than the image: the centre is shown, nothing written outside the area
    fb = bytearray(4 * 3 * 2)
    imgdec.paint("image/png", PNG, fb, 4, 0, 4, 3)
    i = 3 * (1 * 6 + 1)
    assert (fb[0] << 8) | fb[1] == ((PX[i] & 0xF8) << 8) | ((PX[i + 1] & 0xFC) << 3) | (PX[i + 2] >> 3)
    # truncated, corrupt or oversized inputs are ImageErrors, never another exception
    bad = [PNG[:40], PNG[:8] + b"\x00\x00\x00\x0dIHDR" + bytes(17), PNG[:16] + b"\x00\x01\x00\x00" + PNG[20:]]
    for data in bad:
        try:
            imgdec.paint("image/png", data, bytearray(200), 10, 0, 10, 10)
        except imgdec.ImageError:
            continue
        raise AssertionError("accepted a bad PNG")


def test_a_streamed_image_that_does_not_decode_draws_an_error_after_its_end():
    rt, sat, core, sink, hal = make()
    bad = b"BM" + bytes(60)                         # a BMP header with nothing valid in it
    H.feed(sat.link, core, pb.Envelope(id=2, image_render_open=pb.ImageRenderOpen(mime="image/bmp",
                                                                                  total_bytes=len(bad))))
    H.feed(sat.link, core, pb.Envelope(id=2, stream_chunk=pb.StreamChunk(seq=0)), bad)
    H.feed(sat.link, core, pb.Envelope(id=2, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))
    assert errors(core) == []                       # not yet: the decode runs after the StreamEnd
    rt.display.finish()
    assert errors(core) == [(2, EC.INVALID_REQUEST)] and rt.display.painted == 0
    # a text stream opened while an image decodes wins: the decode is dropped
    img = bmp(8, 8, (0, 255, 0))
    H.feed(sat.link, core, pb.Envelope(id=4, image_render_open=pb.ImageRenderOpen(mime="image/bmp",
                                                                                  total_bytes=len(img))))
    H.feed(sat.link, core, pb.Envelope(id=4, stream_chunk=pb.StreamChunk(seq=0)), img)
    H.feed(sat.link, core, pb.Envelope(id=4, stream_end=pb.StreamEnd(reason=pb.StreamReason.COMPLETE)))
    H.feed(sat.link, core, pb.Envelope(id=6, text_render_open=pb.TextRenderOpen()))
    assert rt.display.job is None
    rt.display.finish()
    assert rt.display.painted == 0 and errors(core) == []
