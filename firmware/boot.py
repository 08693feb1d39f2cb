# Runs first on every (soft) reset: the over-the-air update step (otaboot: swap a staged firmware set in,
# count a trial's boots, roll back), then a collection, so main.py starts with a clean heap.
import gc

try:
    import otaboot
    otaboot.boot()
    del otaboot
except ImportError:       # a board deployed before otaboot existed: no update step
    pass
gc.collect()
