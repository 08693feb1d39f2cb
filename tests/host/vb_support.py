"""Support for the virtual-board end-to-end tests: the reference core on its own asyncio thread, WAV
helpers, and a board factory. Real MicroPython, real Noise, 127.0.0.1 only."""
import asyncio
import math
import pathlib
import struct
import threading

from alabama import audio
from alabama.board import sim
from alabama.core.server import CoreServer


class CoreThread:
    """A CoreServer running on a private event loop thread; call(coro) runs a coroutine there."""

    def __init__(self, data_dir, port=0, **kw):
        self.data_dir = pathlib.Path(data_dir)
        self.port = port
        self.kw = kw
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.core = None
        self.old_reports = []

    def call(self, coro, timeout=30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def run(self, fn, *args, timeout=10.0):
        async def _f():
            return fn(*args)
        return self.call(_f(), timeout)

    def start(self):
        self.core = CoreServer(self.data_dir, port=self.port, **self.kw)
        self.call(self.core.start())
        self.port = self.core.port
        return self

    def stop(self):
        if self.core is not None:
            self.call(self.core.stop())
            self.old_reports += list(self.core.reports)
            self.core = None

    def close(self):
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    @property
    def key(self):
        return self.core.public_key

    def reports(self):
        return self.old_reports + (list(self.core.reports) if self.core else [])

    def violations(self):
        out = []
        for r in self.reports():
            out += [v.as_dict() for v in r.violations]
        return out


def write_wav(path, samples, rate=16000):
    return audio.write(path, struct.pack("<%dh" % len(samples), *samples), rate)


def tone(seconds, rate=16000, freq=440.0, amp=9000):
    return [int(amp * math.sin(2 * math.pi * freq * i / rate)) for i in range(int(seconds * rate))]


def wav_frames(path):
    h = audio.info(path)
    assert h.nchannels == 1 and h.sampwidth == 2
    return h.nframes


def board(tmp, core, key=None, token="", duplex=None, env=None, board_name="sim"):
    flash = pathlib.Path(tmp) / "flash"
    sim.provision(flash, "127.0.0.1", core.port, key, token, 0)
    e = {"ALABAMA_SIM_BACKOFF_BASE_MS": "300", "ALABAMA_SIM_BACKOFF_CAP_MS": "2000"}
    e.update(env or {})
    return sim.VirtualBoard(flash, board=board_name, speaker=pathlib.Path(tmp) / "speaker.wav", duplex=duplex, env=e)


def device_id(vb):
    from alabama.core.registry import fingerprint
    return fingerprint(sim.device_public_key(vb.flash))
