# Runs first on every (soft) reset: nothing but a collection, so main.py starts with a clean heap.
import gc

gc.collect()
