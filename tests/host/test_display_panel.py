"""End to end, issue 15: a BOX-3-declared virtual board (the unmodified firmware under the real micropython,
boards/esp32-s3-box-3.json, the simulated HAL's panel) receives a text stream and an image larger than its
max_frame_bytes from the reference core, and its framebuffer (panel.fb, read by alabama.board.panel) is
compared pixel for pixel with a picture computed here independently with Pillow: the text drawn from the
source font (DejaVu Sans Mono, tools/gen_font.render_cell) at the documented cell positions, the image
decoded by Pillow from the bytes the core's fitting path produced (core/images.py, R10.5-a), both turned
into RGB565 here. The 0-bytes-per-text-chunk proof is tests/firmware/test_display.py (both builds)."""
import asyncio
import os
import pathlib
import random
import sys
import textwrap
import time
import io

import pytest
from PIL import Image, ImageDraw

from alabama.board import logwords as lw
from alabama.board import panel as P
from alabama.v1 import surface_pb2

from vb_support import board, device_id

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import gen_font  # noqa: E402

pytestmark = [
    pytest.mark.needs_micropython,
    pytest.mark.skipif(not os.path.exists(gen_font.FONT_PATH), reason="DejaVu Sans Mono not installed"),
]

# The documented look (docs/display.md): status bar of 16 rows in the phase colour, phase name in white
# from x=4; content below; text cells of 8x16, 40 columns; images centred in the 320x224 content area.
W, H, BAR = 320, 240, 16
PHASE_RGB565 = (0x4208, 0x041F, 0xFC00, 0x0600, 0xF800)
PHASE_NAMES = ("IDLE", "LISTENING", "PROCESSING", "SPEAKING", "ERROR")
COLS = W // 8


def rgb565_be(im):
    """RGB image -> big-endian RGB565 bytes (truncating each channel, as a 16-bit panel holds it)."""
    import numpy as np
    a = np.asarray(im.convert("RGB"), dtype=np.uint16)
    v = ((a[..., 0] & 0xF8) << 8) | ((a[..., 1] & 0xFC) << 3) | (a[..., 2] >> 3)
    return v.astype(">u2").tobytes()


def rgb(c565):
    return ((c565 >> 11) << 3, ((c565 >> 5) & 63) << 2, (c565 & 31) << 3)


def expected(phase, text=None, image=None):
    """The whole panel as it must look, made with Pillow from the font and the image bytes."""
    f = gen_font.font()
    im = Image.new("RGB", (W, H), (0, 0, 0))
    d = ImageDraw.Draw(im)
    d.rectangle((0, 0, W - 1, BAR - 1), fill=rgb(PHASE_RGB565[phase]))
    mask = Image.new("1", (W, H), 0)
    md = ImageDraw.Draw(mask)
    md.fontmode = "1"
    for i, ch in enumerate(PHASE_NAMES[phase]):
        gen_font.render_cell(md, 4 + 8 * i, 0, ch, f)
    if text is not None:
        # word-wrapped as the firmware does it, laid out here by the standard library's textwrap (a break
        # at a space only, the space dropped, a word longer than the row broken at its end)
        lines = textwrap.wrap(text, COLS, break_on_hyphens=False, replace_whitespace=False)
        for row, line in enumerate(lines):
            for col, ch in enumerate(line):
                gen_font.render_cell(md, 8 * col, BAR + 16 * row, ch, f)
    im.paste((255, 255, 255), mask=mask)
    if image is not None:
        pic = Image.open(io.BytesIO(image)).convert("RGB")
        im.paste(pic, ((W - pic.width) // 2, BAR + (H - BAR - pic.height) // 2))
    return im


def wait_panel(path, want, timeout=30.0):
    """The panel once it shows `want` (bytes); on timeout the last one, for the assertion's message."""
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        try:
            last = P.read(path)
        except P.PanelError:
            last = None                  # cannot happen with the atomic rename; retried all the same
        if last is not None and last.rgb565 == want:
            return last
        time.sleep(0.1)
    return last


def diff_note(got, want_im):
    import numpy as np
    a = np.frombuffer(got.rgb565, dtype=">u2").reshape(H, W)
    b = np.frombuffer(rgb565_be(want_im), dtype=">u2").reshape(H, W)
    ys, xs = np.nonzero(a != b)
    return "%d pixels differ, first at %s" % (len(ys), (int(xs[0]), int(ys[0])) if len(ys) else None)


async def _stream_words(core, dev, words):
    conn = core._conn(dev)
    s = conn.session
    id_ = s.open_text_render(surface_pb2.ASSISTANT)
    for w in words:                   # one chunk per word, paced like a token stream
        s.send_stream_data(id_, w.encode("utf-8"))
        conn.flush()
        await asyncio.sleep(0.005)
    s.end_stream(id_)
    conn.flush()
    return id_


def test_r10_5_a_box3_virtual_board_shows_a_text_stream_and_an_image_over_its_frame_limit(core, tmp_path):
    token, _ = core.run(core.core.mint_token, 600)
    with board(tmp_path, core, token=token, board_name="esp32-s3-box-3") as vb:
        vb.wait_log(lw.PAIRED, 30)
        dev = device_id(vb)
        path = vb.flash / "panel.fb"
        conn = core.core._conn(dev)
        surf = conn.session.surface
        assert surf.declared(surface_pb2.CAPABILITY_TEXT_DISPLAY) and surf.declared(surface_pb2.CAPABILITY_IMAGE_DISPLAY)
        p = surf.image_display_params()
        assert (p.width, p.height) == (W, H - BAR) and list(p.accepts) == ["image/png", "image/bmp"]
        max_frame = vb.board.data["limits"]["max_frame_bytes"]
        assert p.max_image_bytes > max_frame

        # -- a text stream, word by word
        text = ("The BOX-3 panel shows this text as the core streams it, one chunk per word, wrapping at "
                "the fortieth column: a word that does not fit its row starts the next.")
        words = [w + " " for w in text.split(" ")]
        words[-1] = words[-1].rstrip()
        core.call(_stream_words(core.core, dev, words))
        snap = P.read(path)
        phase = snap.phase or 0
        want = expected(phase, text=text)
        got = wait_panel(path, rgb565_be(want))
        got.image().save(str(tmp_path / "panel-text.png"))
        assert got.rgb565 == rgb565_be(want), diff_note(got, want)
        assert snap.size == (W, H)

        # -- an image larger than max_frame_bytes: the core fits it to the panel (R10.5-a) and streams it
        rnd = random.Random(15)
        src = Image.new("RGB", (640, 480))
        src.putdata([(rnd.randrange(256), (x * 255) // 640, (y * 255) // 480)
                     for y in range(480) for x in range(640)])
        buf = io.BytesIO()
        src.save(buf, "JPEG", quality=95)
        shown = core.call(core.core.show_image(dev, buf.getvalue(), "image/jpeg"), timeout=60)
        fitted = shown.image
        assert fitted.mime == "image/png" and fitted.changed          # the board does not decode JPEG
        assert fitted.size[0] <= W and fitted.size[1] <= H - BAR and fitted.size[1] == H - BAR
        assert len(fitted.data) > max_frame and shown.path == "stream"   # ImageRenderOpen, not inline
        want = expected(phase, image=fitted.data)
        got = wait_panel(path, rgb565_be(want), timeout=60)
        got.image().save(str(tmp_path / "panel-image.png"))
        assert got.rgb565 == rgb565_be(want), diff_note(got, want)
        vb.wait_log(lw.image_painted(shown.id, fitted.size[0], fitted.size[1]), 5)
    assert core.violations() == []
