# Test support: the device's Satellite + the Link on an in-memory Noise pair (firmware initiator and
# responder, no socket, no asyncio), for allocation measurements and sans-socket runtime tests.
# Used by tests/firmware/test_runtime_*.py and tools/bench/bench_audio_alloc.py.
import os

from satellite import audio
from satellite.buffers import TX_CAPACITY
from satellite import device as D
from satellite import runtime as RT
from satellite.link import Link
from satellite import session as S
from satellite.noise.transport import NoiseConnection
from satellite.noise import x25519
from satellite.wire import alabama_v1 as pb
from satellite.wire import pb as codec
from satellite.wire import frame as F

BOARD = {"id": "sim", "duplex": "full", "audio": {"mic": {"rates": [16000]}, "speaker": {"rates": [16000]}},
         "limits": {"max_frame_bytes": 4096, "max_concurrent_streams": 4, "buffer_ms": 300}}


from fakehal import FakeHal  # noqa: E402 - the runtime's test HAL (H.FakeHal), kept under this name


class MemStore:
    def __init__(self):
        self.files = {}
        self.key = os.urandom(32)

    def read(self, name):
        return self.files.get(name)

    def write(self, name, data):
        self.files[name] = bytes(data)

    def device_key(self):
        return self.key, x25519.public_key(self.key)

    def pinned_core_key(self):
        return None


class Sink:
    """The socket: counts bytes; optionally hands them to the core-side Noise responder."""

    def __init__(self):
        self.n = 0
        self.frames = 0
        self.core = None

    def write(self, buf, n):
        self.n += n
        self.frames += 1
        if self.core is not None:
            self.core.receive_into(buf, 0, n)
        return n                       # a socket that takes every byte: the Link keeps no backlog


def _no_task(coro):
    coro.close()            # the loops are driven by hand here (play_step, send_chunk), not by asyncio


def make(accept=True, record_output=False, core_max=4096, board=None, hal=None, store=None):
    """(rt, sat, core_conn, sink, hal): an established session, handshake done in memory (XX)."""
    hal = hal or FakeHal()
    rt = RT.Runtime(board or BOARD, hal, store or MemStore(), log=hal.log, options={"duplex": "full"})
    core_priv = os.urandom(32)
    got = []
    core = NoiseConnection(False, core_priv, rng=os.urandom)
    sat_conn = NoiseConnection(True, rt.ks.key, pattern="XX", rng=os.urandom, tx_capacity=TX_CAPACITY,
                               rx_buf=rt.buffers.noise_rx)
    out = sat_conn.start()
    while not sat_conn.handshake_done:
        core.receive(out)
        back = core.data_to_send()
        sat_conn.receive(back)
        out = sat_conn.data_to_send()
    if out:
        core.receive(out)
    rt.conn = sat_conn
    sink = Sink()
    if record_output:
        sink.core = core
    sess = S.Session(rt.surface(""))
    link = rt.link = Link(sink, sat_conn, rt.max_frame_bytes, rt.buffers.frame)
    sat = D.Satellite(rt, sess, link)
    sat.spawn = _no_task
    sat.accepted = lambda ev: sat.started(ev.max_frame_bytes)    # the runtime's side, without health/deferred
    link.on_frame = sat.on_frame                                 # the one dispatcher, as Runtime.connect_once
    link.on_oversize = sat.on_oversize
    rt.sat = sat
    sat.send(sess.hello())
    if accept:
        feed(link, core, pb.Envelope(id=1, hello_response=pb.HelloResponse(accepted=pb.Accepted(
            max_frame_bytes=core_max, max_concurrent_streams=8, wire_version=1))))
    return rt, sat, core, sink, hal


def core_message(core, env, tail=b""):
    """One Noise transport message from the core carrying one frame (allocates: setup only)."""
    return core.encrypt(F.encode_frame(codec.encode(env), tail))


def feed(link, core, env, tail=b""):
    m = core_message(core, env, tail)
    link.feed(m, 0, len(m))


def capture_output(sink, core):
    """From now on, frames the satellite writes are decrypted by the core side; sent() decodes them."""
    sink.core = core


def sent(core):
    """Envelopes (with tails) the satellite sent since the last call (decoded with the firmware codec)."""
    data = core.read_plaintext()
    r = F.FrameReader(65516)
    out = []
    pos = 0
    while True:
        if pos < len(data):
            pos += r.feed(data, pos, len(data))
        k = r.next()
        if k == F.NEED_MORE:
            if pos >= len(data):
                return out
            continue
        env = codec.decode(pb.Envelope, r.buf, r.header_start, r.header_end)
        out.append((env, bytes(r.buf[r.tail_start:r.tail_end])))
