"""The "c" rows of tools/bench/bench_wake.py and bench_wake_frontend.py (issue 37, the wake word's CPU budget): an
inference is priced op by op from the kernels' per-element, per-group and per-row counts; with gcc-xtensa-lx106
installed, wake.c and wake_fe.c compile to the loop shapes the counters assume (they raise, never guess, when the
compiler's output has another shape). Asserts nothing about speed."""
import pathlib
import shutil
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools" / "bench"), str(ROOT / "tools" / "wake"), str(ROOT / "firmware")]

import bench_crypto_aead as A  # noqa: E402
import bench_wake as W  # noqa: E402

_CROSS = shutil.which("xtensa-lx106-elf-gcc") and shutil.which("xtensa-lx106-elf-objdump")


def test_an_inference_is_priced_op_by_op():
    xt = {"mac4": 20, "mac_k": 3, "mac_group": 100, "mac_row": 30, "xs": 6, "xs_k": 2, "dw4": 40, "dw1": 11,
          "dw_group": 90, "dw_chan": 25, "dw_row": 15, "copy_quad": 11, "copy_word": 5, "copy_byte": 9,
          "copy_row": 20, "lut": 8, "quant_in": 9}
    # params: inp, in_rows, in_cols, out, out_rows, out_cols, kh, ...
    conv = ["CONV_2D", 0, 5, 8, 0, 2, 6, 3] + [0] * 10          # 2 x 6 outputs (2 groups of 4), 3 rows of 8 inputs
    dw = ["DEPTHWISE_CONV_2D", 0, 5, 6, 0, 1, 6, 2] + [0] * 10  # 1 x 6 outputs (a group and 2 tail channels), kh 2
    down = ["CONCATENATION", 40, 0, 2, 37, 40, 40]              # target below: 2 x (2 blocks of 16, a word, a byte)
    smear = ["SPLIT_V", 0, 1, 1, 5, 5, 5]                       # an overlap above its source: 5 bytes, one by one
    lut = ["LOGISTIC", 0, 0, 11, 0]                             # 11 elements
    header = {"ops": [conv, dw, down, smear, lut], "stride": 3, "features": 40}
    want = (2 * 2 * (3 * (8 * 20 + 3) + 100) + 2 * (3 * (8 * 6 + 2) + 30)    # conv: groups, then the inputs' sums
            + (2 * 40 + 90) + 2 * (2 * 11 + 25) + 15                       # depthwise: the group, 2 tail channels
            + (4 * 11 + 2 * 5 + 2 * 9 + 2 * 20) + (5 * 9 + 20)             # the copies
            + 11 * 8 + 3 * 40 * 9)                                         # the table; 3 input frames of 40
    assert W._c_native(header, xt) == want
    assert W._macs(header) == 2 * 6 * 3 * 8 + 6 * 2


@pytest.mark.skipif(not _CROSS, reason="gcc-xtensa-lx106 / binutils-xtensa-lx106 not installed")
def test_wake_c_kernels_have_the_loop_shape_the_count_assumes():
    xt = W.c_xtensa_static(str(ROOT), A)
    assert set(xt) == {"mac4", "mac_k", "mac_group", "mac_row", "xs", "xs_k", "dw4", "dw1", "dw_group", "dw_chan",
                       "dw_row", "copy_quad", "copy_word", "copy_byte", "copy_row", "lut", "quant_in"}
    # four MACs per weight word: a handful of instructions a MAC in C (the viper loop is ~55), the point of the module
    assert 0 < xt["mac4"] < 4 * 6 and 0 < xt["dw4"] < 4 * 12 and 0 < xt["dw1"] < 20
    assert xt["mac_group"] > xt["mac4"] and xt["dw_group"] > xt["dw4"]   # four requantizations per group
    assert 0 < xt["copy_quad"] < 4 * xt["copy_word"]                      # a 16-byte trip beats four word trips


@pytest.mark.skipif(not _CROSS, reason="gcc-xtensa-lx106 / binutils-xtensa-lx106 not installed")
def test_wake_fe_c_stages_have_the_loop_shape_the_count_assumes():
    from alabama import mpcompat
    mpcompat.install()
    import bench_wake_frontend as F
    xt = F.c_xtensa_stages()
    assert set(xt) == {"push", "window", "fft", "energy", "filterbank", "post", "step"}
    # every stage runs its loops: at least one instruction per trip of its outermost loop
    assert xt["push"] >= 160 and xt["window"] >= 800 and xt["fft"] >= 256 and xt["post"] >= 40
    assert 15 <= xt["step"] < 500                  # the whole step's own code: calls and the shift loop, no stage
