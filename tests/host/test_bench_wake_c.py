"""The "c" rows of tools/bench/bench_wake.py and bench_wake_frontend.py (issue 37, the wake word's CPU budget): an
inference is priced op by op from the kernels' per-MAC, per-row and per-output counts; with gcc-xtensa-lx106
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
    xt = {"mac": 10, "mac_k": 3, "mac_out": 100, "dw": 7, "dw_out": 50, "copy_byte": 5, "copy_row": 20, "lut": 8,
          "quant_in": 9}
    # params: inp, in_rows, in_cols, out, out_rows, out_cols, kh, ...
    conv = ["CONV_2D", 0, 5, 8, 0, 2, 4, 3] + [0] * 10          # 2 x 4 outputs, 3 rows of 8 inputs each
    dw = ["DEPTHWISE_CONV_2D", 0, 5, 6, 0, 1, 6, 2] + [0] * 10  # 1 x 6 outputs, 2 rows each
    copy = ["CONCATENATION", 0, 0, 3, 7, 10, 10]                # 3 rows of 7 bytes
    lut = ["LOGISTIC", 0, 0, 11, 0]                             # 11 elements
    header = {"ops": [conv, dw, copy, lut], "stride": 3, "features": 40}
    want = (8 * 3 * 8 * 10 + 8 * 3 * 3 + 8 * 100 + 6 * 2 * 7 + 6 * 50 + 3 * (7 * 5 + 20) + 11 * 8
            + 3 * 40 * 9)                                       # the input: 3 frames of 40 through its table
    assert W._c_native(header, xt) == want
    assert W._macs(header) == 8 * 3 * 8 + 6 * 2


@pytest.mark.skipif(not _CROSS, reason="gcc-xtensa-lx106 / binutils-xtensa-lx106 not installed")
def test_wake_c_kernels_have_the_loop_shape_the_count_assumes():
    xt = W.c_xtensa_static(str(ROOT), A)
    assert set(xt) == {"mac", "mac_k", "mac_out", "dw", "dw_out", "copy_byte", "copy_row", "lut", "quant_in"}
    # a MAC is a handful of instructions in C (the viper loop is ~57): the point of the module
    assert 0 < xt["mac"] < 20 and 0 < xt["dw"] < 20
    assert xt["mac_out"] > xt["mac"] and xt["dw_out"] > xt["dw"]      # the requantization is per output


@pytest.mark.skipif(not _CROSS, reason="gcc-xtensa-lx106 / binutils-xtensa-lx106 not installed")
def test_wake_fe_c_stages_have_the_loop_shape_the_count_assumes():
    from alabama import mpcompat
    mpcompat.install()
    import bench_wake_frontend as F
    xt = F.c_xtensa_stages()
    assert set(xt) == {"push", "window", "fft", "energy", "filterbank", "post"}
    # every stage runs its loops: at least one instruction per trip of its outermost loop
    assert xt["push"] >= 160 and xt["window"] >= 800 and xt["fft"] >= 256 and xt["post"] >= 40
