"""tools/bench/bench_core.py's send-time stamp in the audio's lowest bits reads back exactly (its reader runs in
the core's process per frame, so it is a bytes.translate, not numpy; a wrong bit order would make every delay
garbage, not fail loudly), and the simulators' numpy-free stamper writes exactly what lsb_stamp writes."""
import importlib.util
import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _cases(seed, n):
    """(bench_core module, [(piece, ns)]): edge stamps and random ones, each on random audio."""
    spec = importlib.util.spec_from_file_location("bench_core", ROOT / "tools" / "bench" / "bench_core.py")
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    rng = np.random.default_rng(seed)
    stamps = [0, 1, 2 ** 63 - 1, 1 << 40] + [int(x) for x in rng.integers(0, 2 ** 63, n)]
    return b, [(rng.integers(-32768, 32767, 320).astype("<i2").tobytes(), ns) for ns in stamps]


def test_the_lsb_stamp_reads_back_what_was_written():
    b, cases = _cases(40, 50)
    for piece, ns in cases:
        stamped = b.lsb_stamp(piece, ns)
        assert b.lsb_read(stamped) == ns
        assert b.lsb_read(memoryview(stamped)) == ns


def test_the_simulators_stamper_writes_what_lsb_stamp_writes():
    """The simulators stamp every frame with LsbStamper (no numpy per frame): byte for byte lsb_stamp's output."""
    b, cases = _cases(41, 200)
    for piece, ns in cases:
        stamped = b.LsbStamper(piece).stamp(ns)
        assert stamped == b.lsb_stamp(piece, ns) and b.lsb_read(stamped) == ns
