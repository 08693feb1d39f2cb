# Glue of the satellite: load the board file, open the key store, pick the HAL, start the runtime. It
# holds no protocol or audio logic. Paths are relative to the working directory: "/" on a board (so
# board.json is /board.json and the store is /data), the flash directory on the virtual board.
import json
import os
import sys

BOARD_FILE = "board.json"
DATA_DIR = "data"
DEFERRED_DIR = DATA_DIR + "/deferred"


def load_board(path=BOARD_FILE):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        raise SystemExit("no %s on this board: deploy one (alabama deploy / make flash)" % path)


def make_hal(board):
    if board.get("chip") == "unix" or sys.platform in ("linux", "darwin"):
        from satellite.hal.sim import SimHal
        return SimHal(board)
    from satellite.hal.esp32 import Esp32Hal
    return Esp32Hal(board)


def boot(board, hal=None, new_hal=make_hal):
    """Everything main does before the event loop, in its order: buffers, imports, HAL (hal, or new_hal(board)),
    key store, Runtime, DEFERRED store. tests/host/test_memory_fit.py boots through it."""
    # The runtime's big buffers first, while the heap is one free block (satellite.buffers): after the
    # imports below (~150 KB on a 32-bit board) a 17 KB block may no longer be contiguous anywhere.
    from satellite.buffers import Buffers
    bufs = Buffers(board)
    import asyncio  # noqa: F401 - the runtime needs it; imported right after the buffers, as always
    from satellite import keystore
    from satellite.noise import x25519
    from satellite.runtime import Runtime
    if hal is None:
        hal = new_hal(board)
    ks = keystore.KeyStore(DATA_DIR, os.urandom, x25519.public_key)
    ks.recover()
    rt = Runtime(board, hal, ks, options=getattr(hal, "options", None), buffers=bufs)
    kb = (getattr(hal, "options", None) or {}).get("deferred_kb") or (board.get("limits") or {}).get("deferred_kb", 0)
    if kb:
        rt.deferred = open_deferred(rt, DEFERRED_DIR, kb * 1024)
    return rt


def main(board=None, hal=None):
    if board is None:
        board = load_board()
    rt = boot(board, hal)
    import asyncio
    rt.hal.log("sat: alabama satellite on %s (%s)" % (board.get("id"), sys.implementation.name))
    try:
        asyncio.run(rt.run())
    except KeyboardInterrupt:
        rt.park_watchdog()     # Ctrl-C: the REPL gets the board; the armed watchdog must not reset it under the user
        raise
    return rt


# ------------------------------------------------------------------------------ the DEFERRED store, lazily
# satellite.deferred and its Deferred (~16 KB of heap on a 32-bit board from .mpy, ~8 KB frozen: its module,
# the 5 KB recording batch, the upload's record buffer) are loaded only when the store holds something at
# boot or when an offline press starts a recording. Until then IdleDeferred stands in for it with what a
# Deferred does on an empty store: the LED shows no queue, each session's Ping round learns this boot's clock
# offset (the anchor of a recording made later in this boot), nothing is uploaded.

def store_is_empty(path):
    """True when the DEFERRED store at path needs nothing from Store.load at boot: no store yet, or one
    whose well-formed index names no recording and which holds no other file (a recording, an orphan, an
    idx.tmp of a cut rename). Anything else loads it at boot: a recording to close after a reset or to
    upload, a file to remove, an unreadable index to report (satellite.deferred, its layout comment)."""
    try:
        names = os.listdir(path)
    except OSError:
        return True
    if not names:
        return True
    if names != ["idx"]:
        return False
    try:
        with open(path + "/idx") as f:
            lines = f.read().split("\n")
        head = lines[0].split()
        if len(head) != 5 or head[0] != "v1":
            return False
        int(head[2]), int(head[3]), int(head[4])
    except (OSError, ValueError):
        return False
    for ln in lines[1:]:
        if len(ln.split()) >= 8:
            return False
    return True


def open_deferred(rt, path, capacity):
    """rt.deferred for a board with a DEFERRED store: the real one when the store holds something, else
    the stand-in that imports it at the first offline press."""
    if store_is_empty(path):
        return IdleDeferred(rt, path, capacity)
    return load_deferred(rt, path, capacity)


def load_deferred(rt, path, capacity):
    from satellite import deferred
    return deferred.Deferred(rt, deferred.Store(path, capacity, rt.log).load())


class IdleDeferred:
    """rt.deferred while the store is empty: the runtime calls it where it calls a Deferred."""
    recording = None

    def __init__(self, rt, path, capacity):
        self.rt = rt
        self.path = path
        self.capacity = capacity
        self.offset_us = None            # this boot's clock offset from a session's Ping round

    def show_queue(self):
        sat = self.rt.sat
        if sat is None or not sat.phase:
            self.rt.hal.led(0, self.rt.settings["led_brightness"])     # nothing queued

    def on_ack(self, ev):
        pass

    def on_done(self, ev):
        return False

    def take_gesture(self, g):
        """An offline press (the runtime reads the button) loads the store and records: the Deferred takes over."""
        from satellite.hal import PRESS
        rt = self.rt
        if rt.deferred is self and g == PRESS and rt.offline() and rt.has_mic:
            try:
                d = load_deferred(rt, self.path, self.capacity)
            except Exception as e:  # noqa: BLE001 - no store (flash, no room): the press is not recorded
                rt.log("deferred: cannot record (store: %s: %s)" % (type(e).__name__, e))
                return False
            d.offset_us = self.offset_us
            rt.deferred = d
            rt.log("deferred: store loaded for a recording")
            d.take_gesture(g)
        return False

    async def upload(self, sat):
        self.show_queue()
        if self.offset_us is None:
            await sat.clock_round(3000, self)        # sets self.offset_us round by round (best rtt)
