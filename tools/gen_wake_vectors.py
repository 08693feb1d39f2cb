#!/usr/bin/env python3
"""Writes tests/firmware/data/wake_synth.bin (a small synthetic board wake model) and wake_synth.json (a seeded
feature stream and the probabilities and detections it must give), for the firmware interpreter's dual tests.

The model is not a trained one (the shipped models never enter the repository, and the dual tests cannot compile
one on micropython): it is built here directly in the board format (host/alabama/wake/compile.py writes the same
format from a .tflite) with seeded random int8 weights, and exercises every op the board implements: READ_VARIABLE,
CONCATENATION (time and channels), STRIDED_SLICE, ASSIGN_VARIABLE, CONV_2D (ReLU), DEPTHWISE_CONV_2D (dilated),
SPLIT_V, FULLY_CONNECTED, LOGISTIC, QUANTIZE, and the input table's clamp. The expected outputs come from the numpy
evaluation below, written from TFLite's op definitions independently of the firmware's kernels; the real models are
checked against TFLite itself in tests/host/test_wake_compile.py. tests/host/test_wake_compile.py regenerates both
files and fails when they drift. Run: .venv/bin/python tools/gen_wake_vectors.py"""
import json
import pathlib
import struct
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))

from alabama.wake.compile import (IN_TABLE, MAGIC, arrange_dw, arrange_mac, cutoff_sum, input_table,  # noqa: E402
                                  logistic_table, quantize_multiplier, requantize_table)
from alabama.wake.quant import multiply_by_quantized_multiplier as mbqm  # noqa: E402

OUT = ROOT / "tests" / "firmware" / "data"
F = 40
FRAMES = 72          # 24 inferences


class _Build:
    def __init__(self, rng):
        self.rng = rng
        self.arena = 0
        self.b8 = bytearray()
        self.b32 = []
        self.ops = []

    def t(self, n):
        off = self.arena
        self.arena += n
        return off

    def w8(self, data, align=1):
        self.b8 += bytes(-len(self.b8) % align)
        off = len(self.b8)
        self.b8 += bytes(int(v) & 255 for v in data)
        return off

    def w32(self, values):
        off = len(self.b32)
        self.b32 += [int(v) for v in values]
        return off


def _requant(acc, mult, shift, zp, lo, hi, ups=0):
    """ups: the leading channels that round halves upward (the rest away from zero)."""
    return np.array([min(hi, max(lo, mbqm(int(a), m, s, c < ups) + zp))
                     for c, (a, m, s) in enumerate(zip(acc, mult, shift))])


def build():
    rng = np.random.default_rng(37)
    b = _Build(rng)
    in_zp, in_scale = -128, 0.10196079
    tin = b.t(3 * F)
    init = rng.integers(-128, 128, 2 * F)
    state = b.t(2 * F)
    state_init = b.w8(init)
    r0 = b.t(2 * F)
    c0 = b.t(5 * F)
    s0 = b.t(2 * F)
    b.ops += [["READ_VARIABLE", state, r0, 1, 2 * F, 2 * F, 2 * F],
              ["CONCATENATION", r0, c0, 1, 2 * F, 2 * F, 2 * F],
              ["CONCATENATION", tin, c0 + 2 * F, 1, 3 * F, 3 * F, 3 * F],
              ["STRIDED_SLICE", c0 + 3 * F, s0, 2, F, F, F],
              ["ASSIGN_VARIABLE", s0, state, 1, 2 * F, 2 * F, 2 * F]]
    # CONV_2D: 5x40 -> 3x8, kh 3, ReLU (act_min = out_zp)
    oc, kh = 8, 3
    w1 = rng.integers(-127, 128, (oc, kh, F))
    bias1 = rng.integers(-3000, 3000, oc)
    m1 = [quantize_multiplier(s) for s in rng.uniform(0.0004, 0.003, oc)]
    z1 = -20
    v1 = b.t(3 * oc)
    folded1 = bias1 - in_zp * w1.reshape(oc, -1).sum(axis=1)
    b.ops.append(["CONV_2D", c0, 5, F, v1, 3, oc, kh, 1, 1, b.w8(arrange_mac(w1.reshape(oc, -1)), 4), b.w32(folded1),
                  b.w32([m for m, _ in m1]), b.w32([s for _, s in m1]), z1, z1, 127, 0])
    # DEPTHWISE_CONV_2D: 3x8 -> 1x8, kh 2, dilation 2; channels 0-1 round halves upward, 2-7 away from zero
    w2 = rng.integers(-127, 128, (2, oc))
    bias2 = rng.integers(-500, 500, oc)
    m2 = [quantize_multiplier(s) for s in rng.uniform(0.002, 0.02, oc)]
    # every channel scales by exactly 1/4 with small weights: half the results are ties, where the rounding shows
    w2 = rng.integers(-2, 3, (2, oc))
    bias2 = rng.integers(-50, 50, oc)
    m2 = [quantize_multiplier(0.25)] * oc
    z2 = 5
    v2 = b.t(oc)
    folded2 = bias2 - z1 * w2.sum(axis=0)
    b.ops.append(["DEPTHWISE_CONV_2D", v1, 3, oc, v2, 1, oc, 2, 1, 2, b.w8(arrange_dw(w2), 4), b.w32(folded2),
                  b.w32([m for m, _ in m2]), b.w32([s for _, s in m2]), z2, -128, 127, 2])
    # SPLIT_V along channels, then CONCATENATION the other way round
    va, vb, v4 = b.t(4), b.t(4), b.t(oc)
    b.ops += [["SPLIT_V", v2, va, 1, 4, oc, 4], ["SPLIT_V", v2 + 4, vb, 1, 4, oc, 4],
              ["CONCATENATION", vb, v4, 1, 4, 4, oc], ["CONCATENATION", va, v4 + 4, 1, 4, 4, oc]]
    # FULLY_CONNECTED 8 -> 1
    w3 = rng.choice([-1, 1], (1, oc))                      # scaled by exactly 1/4: ties, rounded upward
    bias3 = rng.integers(-20, 20, 1)
    m3 = quantize_multiplier(0.25)
    z3 = 10
    v5 = b.t(1)
    folded3 = bias3 - z2 * w3.sum(axis=1)
    b.ops.append(["FULLY_CONNECTED", v4, 1, oc, v5, 1, 1, 1, 1, 1, b.w8(arrange_mac(w3), 4), b.w32(folded3),
                  b.w32([m3[0]]), b.w32([m3[1]]), z3, -128, 127, 1])
    v6, out = b.t(1), b.t(1)
    lg = logistic_table(0.2, z3, 1 / 256, -128)
    qt = requantize_table(1 / 256, -128, 1 / 256, 0, 0)
    b.ops += [["LOGISTIC", v5, v6, 1, b.w8(lg)], ["QUANTIZE", v6, out, 1, b.w8(qt)]]
    table = input_table(in_scale, in_zp)
    window, cutoff = 3, 0.7
    header = {"name": "synthetic", "wake_word": "synthetic", "stride": 3, "features": F, "step_ms": 10,
              "window": window, "cutoff": cutoff, "cutoff_sum": cutoff_sum(cutoff, window), "rounding": "tflite",
              "arena": b.arena,
              "input": tin, "output": out, "out_xor": 0, "in_q": b.w8(np.frombuffer(table, np.int8)),
              "in_n": IN_TABLE, "state": [[state, 2 * F, state_init]], "n8": len(b.b8), "n32": len(b.b32),
              "ops": b.ops}
    hb = json.dumps(header, separators=(",", ":")).encode()
    blob = bytes(b.b8) + b"\0" * (-len(b.b8) % 4) + struct.pack("<%di" % len(b.b32), *b.b32)
    model = MAGIC + struct.pack("<II", len(hb), len(blob)) + hb + blob

    # the expected outputs, evaluated with numpy from the op definitions
    feats = rng.integers(0, 700, (FRAMES, F))
    feats[5, :3] = [2047, 2048, 65535]          # the table's last entry and the clamp above it
    feats[40:43] = 0
    qtab = np.frombuffer(table, np.int8).astype(np.int64)
    st = init.astype(np.int64).reshape(2, F)
    probs, hits, recent = [], [], []
    for k in range(0, FRAMES, 3):
        x = qtab[np.minimum(feats[k:k + 3], IN_TABLE - 1)]
        c = np.concatenate([st, x])                                 # 5 x 40
        st = c[3:5].copy()
        acc = np.array([[int((c[t:t + kh] - in_zp).ravel() @ w1[o].ravel()) + bias1[o] for o in range(oc)]
                        for t in range(3)])
        y1 = np.array([_requant(acc[t], *zip(*m1), z1, z1, 127) for t in range(3)])
        acc2 = np.array([int((y1[0, o] - z1) * w2[0, o] + (y1[2, o] - z1) * w2[1, o]) + bias2[o] for o in range(oc)])
        y2 = _requant(acc2, *zip(*m2), z2, -128, 127, ups=2)
        y4 = np.concatenate([y2[4:], y2[:4]])
        acc3 = int((y4 - z2) @ w3[0]) + int(bias3[0])
        y5 = min(127, max(-128, mbqm(acc3, *m3, True) + z3))
        y6 = lg[y5 & 255]
        p = qt[y6 & 255]
        probs.append(int(p))
        recent = (recent + [int(p)])[-window:]
        hits.append(len(recent) == window and sum(recent) >= header["cutoff_sum"])
    vectors = {"source": "generated by tools/gen_wake_vectors.py (numpy evaluation of the synthetic model)",
               "features": feats.tolist(), "probs": probs, "detected": hits}
    return model, json.dumps(vectors, separators=(",", ":")) + "\n"


def main():
    model, vectors = build()
    (OUT / "wake_synth.bin").write_bytes(model)
    (OUT / "wake_synth.json").write_text(vectors)
    print("wrote %s (%d bytes) and wake_synth.json" % (OUT / "wake_synth.bin", len(model)))


if __name__ == "__main__":
    main()
