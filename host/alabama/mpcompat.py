"""The CPython stand-ins for the MicroPython names the firmware imports plainly: the one place they live.

Firmware modules write `from micropython import const`, `from time import ticks_ms, ticks_diff, ...`,
`import asyncio` and `await asyncio.sleep_ms(n)`, as on the board, with no fallback of their own (a fallback
on the board is code the board never runs: docs/memory.md, "The compat preamble"). Whatever imports firmware
modules into CPython (tests/conftest.py, the fuzz and bench tools, tools/provision) calls install() first.
Not responsible for: emulating MicroPython (viper, native code, its heap); on MicroPython install() does nothing.
"""
import asyncio
import sys
import time
import types


def _const(x):
    return x


def _module_getattr(name):
    # `@micropython.viper` (native, asm_*) raises ImportError as soon as the decorator is looked up, before
    # the annotations (ptr8, uint) are: a viper module fails to import on CPython exactly as it did when
    # `import micropython` itself raised ImportError, and every user takes the pure twin.
    if name in ("viper", "native", "asm_thumb", "asm_xtensa"):
        raise ImportError("micropython.%s: native code runs on MicroPython only" % name)
    raise AttributeError("module 'micropython' (alabama.mpcompat stand-in) has no attribute %r" % name)


def _ticks_ms():
    return int(time.monotonic() * 1000)


def _ticks_us():
    return int(time.monotonic() * 1000000)


def _ticks_diff(a, b):
    return a - b           # CPython's ticks never wrap: a plain difference


def _ticks_add(a, b):
    return a + b


def _sleep_ms(ms):
    return asyncio.sleep(ms / 1000)


def install():
    """Put a `micropython` module (const; its viper/native decorators raise ImportError) into sys.modules and add
    time.ticks_ms/ticks_us/ticks_diff/ticks_add and asyncio.sleep_ms. Idempotent; a no-op on MicroPython."""
    if sys.implementation.name == "micropython":
        return
    if "micropython" not in sys.modules:
        m = types.ModuleType("micropython", "CPython stand-in for MicroPython's micropython module (alabama.mpcompat)")
        m.const = _const
        m.__getattr__ = _module_getattr
        sys.modules["micropython"] = m
    for name, f in (("ticks_ms", _ticks_ms), ("ticks_us", _ticks_us), ("ticks_diff", _ticks_diff),
                    ("ticks_add", _ticks_add)):
        if not hasattr(time, name):
            setattr(time, name, f)
    if not hasattr(asyncio, "sleep_ms"):
        asyncio.sleep_ms = _sleep_ms
