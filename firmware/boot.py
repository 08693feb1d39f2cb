# Runs first on every (soft) reset: the over-the-air update step (otaboot: swap a staged firmware set in,
# count a trial's boots, roll back), then a collection, so main.py starts with a clean heap. otaboot leaves
# sys.modules too (5 KB of heap on a 32-bit board from .mpy): satellite.health imports it again at the first
# session, main.py when it records a crash (docs/memory.md).
import gc
import sys

try:
    import otaboot
    otaboot.boot()
    del otaboot
    sys.modules.pop("otaboot", None)
except ImportError:       # a board deployed before otaboot existed: no update step
    pass
gc.collect()
