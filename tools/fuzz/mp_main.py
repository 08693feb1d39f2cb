# micropython entry of the fuzz runner: one batch of one firmware target, generated and run in this process.
# usage: micropython mp_main.py batch TARGET SEED START COUNT   -> "RESULT <json>" on the last line
#        micropython mp_main.py dump TARGET SEED INDEX          -> "RECORD <hex>" (regenerate one input)
# MICROPYPATH must hold firmware/ and tools/fuzz (tools/fuzz/run.py sets it).
import sys
import gc
import json
import time

import fwfuzz


def main(argv):
    cmd, target, seed = argv[1], argv[2], int(argv[3])
    if cmd == "dump":
        i = int(argv[4])
        print("RECORD " + fwfuzz.gen(target, seed, i).hex())
        return
    start, count = int(argv[4]), int(argv[5])
    peak = [0, 0]

    def mem(i):
        a = gc.mem_alloc()
        if a > peak[0]:
            peak[0] = a
        if (i & 255) == 0:
            gc.collect()
            b = gc.mem_alloc()
            if b > peak[1]:
                peak[1] = b

    def on_crash(i, rec, c):
        print("CRASH %d %s %s" % (i, rec.hex(), c.kind))

    gc.collect()
    t0 = time.ticks_ms()
    outcomes, crashes = fwfuzz.batch(target, seed, start, count, on_crash, mem)
    dt = time.ticks_diff(time.ticks_ms(), t0)
    gc.collect()
    print("RESULT " + json.dumps({"target": target, "start": start, "count": count, "ms": dt,
                                  "outcomes": outcomes, "crashes": [[c[0], c[1], c[2][:300]] for c in crashes],
                                  "peak_alloc": peak[0], "peak_live": peak[1],
                                  "heap": gc.mem_alloc() + gc.mem_free()}))


main(sys.argv)
