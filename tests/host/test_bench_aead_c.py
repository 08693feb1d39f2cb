"""The "c" line of tools/bench/bench_crypto_aead.py (issue 12, AEAD target): its counting logic finds the
loops of an Xtensa disassembly and prices a frame's blocks right; with gcc-xtensa-lx106 installed, the real
aead.c counts have the shape the model assumes. Asserts nothing about speed."""
import pathlib
import shutil
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "bench"))

import bench_crypto_aead as B  # noqa: E402

DIS = """
x.o:     file format elf32-xtensa-le

Disassembly of section .text:

00000000 <.literal>:
   0:	000000        	ill

00000004 <f>:
   4:	0d0c      	movi.n	a13, 0
   6:	ee6a      	add.n	a14, a14, a6
   8:	404010        	ssai	16
   b:	819990        	src	a9, a9, a9
   e:	f3a256        	bnez	a2, 6 <f+0x2>
  11:	013677        	bltu	a6, a7, 16 <f+0x12>
  14:	0d8d      	mov.n	a8, a13
  16:	f00d      	ret.n

00000018 <g>:
  18:	f00d      	ret.n
"""


def test_the_disassembly_parser_finds_functions_and_only_backward_branches_as_loops():
    funcs = B.xtensa_functions(DIS)
    assert sorted(funcs) == ["f", "g"]  # .literal is data
    assert [x[1] for x in funcs["f"]] == ["movi.n", "add.n", "ssai", "src", "bnez", "bltu", "mov.n", "ret.n"]
    loops = B.xtensa_loops(funcs["f"])
    assert len(loops) == 1  # the forward bltu is no loop
    assert [x[0] for x in loops[0]] == [6, 8, 11, 14]
    assert B.xtensa_loops(funcs["g"]) == []


def test_a_frame_is_priced_block_by_block():
    xt = {"chacha_block": 1000, "xor64_a4": 10, "xor_loop": 1, "tail_byte": 2, "poly_block_a4": 100,
          "poly_call_a4": 7, "fixed": 500}
    # 650 B, no AD: key block + 10 full + 1 partial ChaCha blocks, 41 data + 1 length Poly1305 blocks,
    # poly_blocks called for the full blocks, the partial one and the lengths
    want = 12 * 1000 + 10 * (10 + 1) + 10 * 2 + 42 * 100 + 3 * 7 + 500
    assert B.c_message_native(xt, 650, 0, 4) == want
    # 32 B of AD add two Poly1305 blocks and a call; an empty message is the key block and the lengths
    assert B.c_message_native(xt, 650, 32, 4) == want + 2 * 100 + 7
    assert B.c_message_native(xt, 0, 0, 4) == 1000 + 100 + 7 + 500


@pytest.mark.skipif(not shutil.which("xtensa-lx106-elf-gcc") or not shutil.which("xtensa-lx106-elf-objdump"),
                    reason="gcc-xtensa-lx106 not installed (the bench says so and skips the c line)")
def test_aead_c_compiles_for_xtensa_and_its_counts_have_the_modelled_shape():
    xt = B.c_xtensa_static(str(ROOT))
    # a double round is 32 adds, 32 xors and 32 rotates (SSAI + SRC): at least 128 instructions
    assert xt["double_round"] >= 128
    assert xt["chacha_block"] >= 10 * xt["double_round"]
    # a Poly1305 block has 25 products of 2 instructions each, and no __muldi3 call left in it
    assert xt["poly_block_a4"] >= 50
    assert xt["xor64_a4"] >= 16 * 4 and xt["xor64_a2"] > xt["xor64_a4"]
