"""Coverage-guided pass (atheris/libFuzzer, CPython) over the firmware frame reader, codec and session.

libFuzzer's bytes are the same RECORDS as tools/fuzz/fwfuzz.py's (first byte picks the target, the rest is
the record), so anything it finds replays with fwfuzz.run(). A Crash or any other exception is a finding:
atheris stops and writes the input as crash-<sha1> in the working directory.
usage: python atheris_fw.py -runs=N [libFuzzer flags]   (tools/fuzz/run.py --target atheris)
"""
import atexit
import json
import pathlib
import sys

import atheris

HERE = pathlib.Path(__file__).resolve().parent
for p in (HERE.parent.parent / "firmware", HERE.parent.parent / "host", HERE):
    sys.path.insert(0, str(p))
from alabama import mpcompat  # noqa: E402
mpcompat.install()  # CPython stand-ins for micropython.const, time.ticks_*, asyncio.sleep_ms

with atheris.instrument_imports():
    import satellite.wire.frame  # noqa: F401
    import satellite.wire.pb  # noqa: F401
    import satellite.session  # noqa: F401
    import fwfuzz

_TARGETS = ("fw_frame", "fw_session")
_outcomes = {}


def one_input(data):
    # libFuzzer ends a -runs=N pass with a C exit(): Python's atexit never runs there, so the counts
    # are written every 1000 runs and on the last one (every call counts, as libFuzzer counts them).
    _n[0] += 1
    if len(data) >= 2:
        t = _TARGETS[data[0] % len(_TARGETS)]
        o = t + " " + fwfuzz.run(t, bytearray(data[1:]))   # raises Crash on a finding
        _outcomes[o] = _outcomes.get(o, 0) + 1
    if _n[0] % 1000 == 0 or _n[0] >= _runs[0]:
        _report()


_n = [0]
_runs = [1 << 62]


@atexit.register
def _report():
    (pathlib.Path.cwd() / "atheris_outcomes.json").write_text(json.dumps({"outcomes": _outcomes, "runs": _n[0]}))


if __name__ == "__main__":
    corpus = [a for a in sys.argv[1:] if not a.startswith("-")]
    for d in corpus:   # seed an empty corpus directory with structure-aware records
        d = pathlib.Path(d)
        d.mkdir(parents=True, exist_ok=True)
        if not any(d.iterdir()):
            for i in range(300):
                t = i % len(_TARGETS)
                (d / ("seed-%d" % i)).write_bytes(bytes((t,)) + bytes(fwfuzz.gen(_TARGETS[t], 1, i)))
    for a in sys.argv[1:]:
        if a.startswith("-runs="):
            _runs[0] = int(a[6:])
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
