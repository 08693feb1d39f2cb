"""tools/bench/bench_core.py's send-time stamp in the audio's lowest bits reads back exactly (its reader runs in
the core's process per frame, so it is a bytes.translate, not numpy; a wrong bit order would make every delay
garbage, not fail loudly)."""
import importlib.util
import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_lsb_stamp_reads_back_what_was_written():
    spec = importlib.util.spec_from_file_location("bench_core", ROOT / "tools" / "bench" / "bench_core.py")
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    rng = np.random.default_rng(40)
    for ns in [0, 1, 2 ** 63 - 1, 1 << 40] + [int(x) for x in rng.integers(0, 2 ** 63, 50)]:
        piece = rng.integers(-32768, 32767, 320).astype("<i2").tobytes()
        stamped = b.lsb_stamp(piece, ns)
        assert b.lsb_read(stamped) == ns
        assert b.lsb_read(memoryview(stamped)) == ns


def test_the_simulators_stamper_writes_what_lsb_stamp_writes():
    """The simulators stamp every frame with LsbStamper (no numpy per frame): byte for byte lsb_stamp's output."""
    spec = importlib.util.spec_from_file_location("bench_core", ROOT / "tools" / "bench" / "bench_core.py")
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    rng = np.random.default_rng(41)
    for ns in [0, 1, 2 ** 63 - 1, 1 << 40] + [int(x) for x in rng.integers(0, 2 ** 63, 200)]:
        piece = rng.integers(-32768, 32767, 320).astype("<i2").tobytes()
        stamped = b.LsbStamper(piece).stamp(ns)
        assert stamped == b.lsb_stamp(piece, ns) and b.lsb_read(stamped) == ns
