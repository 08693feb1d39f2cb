# Runs under micropython, started by tools/deferred/run.py: the bytes one steady-state DEFERRED chunk
# allocates, over N chunks sent from a recording with a capture_ts past 2**40 us (a heap int on any build).
# The same path tests/firmware/test_deferred.py asserts allocates nothing; this prints the number instead:
# "ALLOC <bytes> <chunks>".  Usage: micropython mp_alloc.py STORE_DIR (an empty directory).
import sys

import rt_harness as H                      # the firmware tests' fake runtime (tests/firmware on MICROPYPATH)
from mpsupport import mem_alloc_delta
from satellite import deferred as D
from satellite.wire import alabama_v1 as pb

N = 200


def send_many(d, sat, cid, buf, rb, n):
    i = 0
    while i < n:
        d.send_record(sat, cid, buf, rb)
        i += 1


rt, sat, core, sink, hal = H.make()
d = D.Deferred(rt, D.Store(sys.argv[1] + "/data/deferred", 1 << 20, lambda s: None,
                           rng=lambda n: b"\xab" * n).load())
cid = sat.s.open_capture(pb.Trigger.BUTTON, pb.CaptureMode.DEFERRED, rt.mic_format(), "r-1").id
buf = d.rec_buf
t = (1 << 40) + 3600 * 1000000
D.put_ts(buf, 0, t // (1 << 28), t % (1 << 28))
send_many(d, sat, cid, buf, len(buf), 5)
print("ALLOC", mem_alloc_delta(send_many, d, sat, cid, buf, len(buf), N), N)
