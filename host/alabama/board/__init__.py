"""Board tools: board definition files (boards/*.json), the pinned MicroPython images, and `alabama flash`.

Nothing here talks to a board at import time; serial ports and esptool are reached only from flash.py.
"""
