# Runs first on every (soft) reset: the watchdog after a soft reset (below), the over-the-air update step
# (otaboot: swap a staged firmware set in, count a trial's boots, roll back), then a collection, so main.py
# starts with a clean heap. otaboot leaves sys.modules too (5 KB of heap on a 32-bit board from .mpy):
# satellite.health imports it again at the first session, main.py when it records a crash (docs/memory.md).
import gc
import sys

# A soft reset (Ctrl-D, mpremote's raw-REPL reset) stops every machine.Timer but leaves an armed watchdog armed
# (MicroPython v1.27.0 ports/esp32/main.c soft_reset_exit, machine_wdt.c): hand it to timer PARK_TIMER
# (hal/esp32.py), so a REPL session or an mpremote deploy is not reset under the user. When main.py runs, the
# runtime takes it back (Esp32Hal.wdt_start stops this timer). docs/reliability.md, "The watchdog".
try:
    import machine
    if machine.reset_cause() == machine.SOFT_RESET:
        _wdt = machine.WDT(timeout=60000)
        machine.Timer(0).init(period=15000, callback=lambda t: _wdt.feed())
    del machine
except (ImportError, AttributeError, OSError, ValueError):   # the unix port: the virtual board's supervisor
    pass                                                      # models this (docs/virtual-board.md)

try:
    import otaboot
    otaboot.boot()
    del otaboot
    sys.modules.pop("otaboot", None)
except ImportError:       # a board deployed before otaboot existed: no update step
    pass
gc.collect()

