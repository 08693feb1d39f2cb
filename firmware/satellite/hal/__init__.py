# Hardware abstraction: board I/O (I2S, pins, codec chips) behind objects the runtime is handed; protocol code never imports this package.
from micropython import const

# Gestures a HAL reports: hal.gesture() -> one of these, 0 when none. The one owner of these codes.
PRESS = const(1)
RELEASE = const(2)
LONG = const(3)
