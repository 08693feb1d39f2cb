"""The panel font (firmware/satellite/font8x16.py) is what tools/gen_font.py makes from DejaVu Sans Mono:
a hand edit or a changed generator fails here (regenerate: .venv/bin/python tools/gen_font.py)."""
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import gen_font  # noqa: E402


@pytest.mark.skipif(not os.path.exists(gen_font.FONT_PATH), reason="DejaVu Sans Mono not installed (fonts-dejavu-core)")
def test_font_module_is_generated():
    assert gen_font.main(["--check"]) == 0
    text = gen_font.generate()
    ns = {}
    exec(compile(text, "font8x16", "exec"), ns)
    assert len(ns["GLYPHS"]) == 16 * (ns["LAST"] - ns["FIRST"] + 2)
