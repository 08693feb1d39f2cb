# Glue of the satellite: load the board file, open the key store, pick the HAL, start the runtime. It
# holds no protocol or audio logic. Paths are relative to the working directory: "/" on a board (so
# board.json is /board.json and the store is /data), the flash directory on the virtual board.
import json
import os
import sys

BOARD_FILE = "board.json"
DATA_DIR = "data"


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


def main(board=None, hal=None):
    if board is None:
        board = load_board()
    # The runtime's big buffers first, while the heap is one free block (satellite.buffers): after the
    # imports below (~150 KB on a 32-bit board) a 17 KB block may no longer be contiguous anywhere.
    from satellite.buffers import Buffers
    bufs = Buffers(board)
    import asyncio
    from satellite import keystore
    from satellite.noise import x25519
    from satellite.runtime import Runtime
    if hal is None:
        hal = make_hal(board)
    ks = keystore.KeyStore(DATA_DIR, os.urandom, x25519.public_key)
    ks.recover()
    rt = Runtime(board, hal, ks, options=getattr(hal, "options", None), buffers=bufs)
    kb = (getattr(hal, "options", None) or {}).get("deferred_kb") or (board.get("limits") or {}).get("deferred_kb", 0)
    if kb:
        from satellite import deferred
        rt.deferred = deferred.Deferred(rt, deferred.Store(DATA_DIR + "/deferred", kb * 1024, rt.log).load())
    hal.log("sat: alabama satellite on %s (%s)" % (board.get("id"), sys.implementation.name))
    asyncio.run(rt.run())
    return rt
