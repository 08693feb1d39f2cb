"""A scriptable host-side test satellite (pb2 + the host Noise initiator over asyncio).

Responsible for driving the reference core in tests and in the bench: build any frame (conformant or
deliberately not: wrong parity, seq gaps, chunks after end, undeclared ops, oversize frames,
floods), send it, and collect what the core sends back. It holds no satellite logic of its own
beyond answering Pings and (optionally) render streams, so a test says exactly what happens.

Frame builders (``env``, ``frame``, ``hello``, ``speaker_cap``...) are plain functions usable without
a network; ``TestSatellite`` is the asyncio client.
"""
import asyncio
import os
import time

from alabama.v1 import envelope_pb2, operations_pb2 as ops, surface_pb2, content_pb2
from alabama.wire import frame as wire

from ..noise import aio as noise_aio
from ..noise.state import public_key
from ..noise.transport import NoiseConnection

PCM16 = content_pb2.PCM_S16LE


# ------------------------------------------------------------------------------------ builders
def env(id_, arm, **fields):
    """An Envelope with ``arm`` set; nested message fields given as dicts or messages."""
    e = envelope_pb2.Envelope(id=id_)
    msg = getattr(e, arm)
    msg.SetInParent()
    for k, v in fields.items():
        _set(msg, k, v)
    return e


def _set(msg, k, v):
    field = msg.DESCRIPTOR.fields_by_name[k]
    if field.is_repeated:
        target = getattr(msg, k)
        for item in v:
            if field.message_type is not None:
                sub = target.add()
                if isinstance(item, dict):
                    for kk, vv in item.items():
                        _set(sub, kk, vv)
                else:
                    sub.CopyFrom(item)
            else:
                target.append(item)
    elif field.message_type is not None:
        sub = getattr(msg, k)
        sub.SetInParent()
        if isinstance(v, dict):
            for kk, vv in v.items():
                _set(sub, kk, vv)
        else:
            sub.CopyFrom(v)
    else:
        setattr(msg, k, v)


def frame(e, tail=b""):
    return wire.encode_frame(e.SerializeToString(), tail)


def audio_format(rate=16000, channels=1, bits=16, encoding=PCM16):
    return content_pb2.AudioFormat(encoding=encoding, sample_rate=rate, channels=channels, sample_bits=bits)


def speaker_cap(rate=16000, channels=1, buffer_ms=200):
    return surface_pb2.CapabilityDescriptor(kind=surface_pb2.CAPABILITY_SPEAKER, speaker=surface_pb2.SpeakerParams(
        format=audio_format(rate, channels), buffer_ms=buffer_ms))


def mic_cap(rate=16000):
    return surface_pb2.CapabilityDescriptor(kind=surface_pb2.CAPABILITY_MIC,
                                            mic=surface_pb2.MicParams(format=audio_format(rate)))


def text_cap():
    return surface_pb2.CapabilityDescriptor(kind=surface_pb2.CAPABILITY_TEXT_DISPLAY,
                                            text_display=surface_pb2.TextDisplayParams(columns=20, rows=4))


def html_cap():
    return surface_pb2.CapabilityDescriptor(kind=surface_pb2.CAPABILITY_HTML_DISPLAY,
                                            html_display=surface_pb2.HtmlDisplayParams(viewport_width=320,
                                                                                       viewport_height=240))


def image_cap(width=320, height=240, accepts=("image/jpeg", "image/png"), max_image_bytes=0):
    return surface_pb2.CapabilityDescriptor(kind=surface_pb2.CAPABILITY_IMAGE_DISPLAY,
                                            image_display=surface_pb2.ImageDisplayParams(
                                                width=width, height=height, accepts=list(accepts),
                                                max_image_bytes=max_image_bytes))


def tool(name, schema='{"type": "object"}', description="a tool"):
    return surface_pb2.ToolDescriptor(name=name, description=description, input_schema=schema)


def event_desc(id_, schema=""):
    return surface_pb2.EventDescriptor(id=id_, description="an event", metadata_schema=schema)


def setting_int(key, lo=0, hi=100, value=50):
    return surface_pb2.SettingDescriptor(key=key, label=key, type=surface_pb2.SETTING_INT, min=lo, max=hi,
                                         value=surface_pb2.SettingValue(int_value=value))


def hello(id_=1, wire_version=1, caps=None, tools=(), events=(), settings=(), max_frame_bytes=0,
          max_concurrent_streams=0, pairing_token="", display_name="test-sat"):
    """A Hello with a voice surface by default (MIC + SPEAKER 16 kHz mono)."""
    if caps is None:
        caps = [mic_cap(), speaker_cap()]
    e = envelope_pb2.Envelope(id=id_)
    h = e.hello
    h.wire_version = wire_version
    for c in caps:
        h.capabilities.add().CopyFrom(c)
    for t in tools:
        h.tools.add().CopyFrom(t)
    for ev in events:
        h.events.add().CopyFrom(ev)
    for s in settings:
        h.settings.add().CopyFrom(s)
    h.max_frame_bytes = max_frame_bytes
    h.max_concurrent_streams = max_concurrent_streams
    h.pairing_token = pairing_token
    h.display_name = display_name
    h.software = "alabama-testsat/1"
    return e


def capture_open(id_, trigger=ops.WAKEWORD, mode=ops.LIVE, rate=16000, correlation_ref=""):
    return env(id_, "capture_open", kind=ops.AUDIO, trigger=trigger, mode=mode, format=audio_format(rate),
               correlation_ref=correlation_ref)


def decode_frames(data):
    """All complete frames in ``data`` as [(Envelope, tail)] (no limits: test side)."""
    dec = wire.FrameDecoder(buffer_size=1 << 24)
    dec.set_limit((1 << 24) - 16)
    dec.feed(data)
    out = []
    for f in dec:
        e = envelope_pb2.Envelope()
        e.ParseFromString(f.header)
        out.append((e, f.tail))
    return out


def tone(ms, rate=16000, freq=440.0, amp=8000):
    """``ms`` of a sine tone as s16le mono bytes."""
    import numpy as np
    n = int(rate * ms / 1000)
    t = np.arange(n) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype("<i2").tobytes()


def silence(ms, rate=16000):
    return bytes(2 * int(rate * ms / 1000))


# ------------------------------------------------------------------------------------ client
class Received:
    """One frame the core sent: envelope, tail, arrival time (monotonic)."""

    __slots__ = ("env", "tail", "t")

    def __init__(self, env_, tail, t):
        self.env, self.tail, self.t = env_, tail, t

    @property
    def op(self):
        return self.env.WhichOneof("op")

    @property
    def id(self):
        return self.env.id

    def __repr__(self):
        return "<%s id=%d tail=%d>" % (self.op, self.env.id, len(self.tail))


class ImageReceived:
    """An image the core put on the display: ``path`` "inline" (Render) or "stream" (ImageRenderOpen,
    reassembled at StreamEnd; ``total_bytes`` as the open declared it)."""

    __slots__ = ("path", "id", "mime", "data", "total_bytes", "chunks")

    def __init__(self, path, id_, mime, data, total_bytes=None, chunks=0):
        self.path, self.id, self.mime, self.data, self.total_bytes, self.chunks = path, id_, mime, data, total_bytes, chunks

    def __repr__(self):
        return "<image %s id=%d %s %d bytes>" % (self.path, self.id, self.mime, len(self.data))


class TestSatellite:
    """An asyncio Alabama satellite for tests: ``await sat.connect()``, ``await sat.send(env)``,
    ``await sat.expect("hello_response")``; everything received is kept in ``sat.received``.

    ``auto_ping``: answer the core's Pings. ``auto_playback``: answer a finished (or cancelled)
    MediaRenderOpen with PlaybackDone, counting the frames it carried."""

    __test__ = False   # not a pytest class

    def __init__(self, host, port, static_private=None, server_key=None, pattern=None, auto_ping=True,
                 auto_playback=True, bytes_per_frame=2):
        self.host, self.port = host, port
        self.static_private = static_private or os.urandom(32)
        self.public_key = public_key(self.static_private)
        self.server_key = server_key
        self.pattern = pattern or ("IK" if server_key else "XX")
        self.auto_ping = auto_ping
        self.auto_playback = auto_playback
        self.bytes_per_frame = bytes_per_frame
        self.stream = None
        self.received = []
        self.closed = asyncio.Event() if _has_loop() else None
        self._new = None
        self._decoder = wire.FrameDecoder(buffer_size=1 << 20)
        self._decoder.set_limit((1 << 20) - 16)
        self._reader_task = None
        self._next_id = 1
        self._renders = {}   # id -> bytes received
        self._image_rx = {}  # id -> [mime, total_bytes, bytearray, chunks]
        self.images = []     # ImageReceived, in arrival order
        self.write_lock = None

    @property
    def device_id(self):
        from .registry import fingerprint
        return fingerprint(self.public_key)

    def mint(self):
        i = self._next_id
        self._next_id += 2
        return i

    async def connect(self, read=True, rcvbuf=None):
        """Noise handshake then (``read``) a background reader. ``rcvbuf`` shrinks SO_RCVBUF (slow-reader tests)."""
        self.closed = asyncio.Event()
        self._new = asyncio.Condition()
        self.write_lock = asyncio.Lock()
        if rcvbuf is None:
            self.stream = await noise_aio.open_connection(self.host, self.port, self.static_private, self.pattern,
                                                          remote_static=self.server_key)
        else:
            import socket
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, (self.host, self.port))
            reader, writer = await asyncio.open_connection(sock=sock)
            conn = NoiseConnection(True, self.static_private, pattern=self.pattern, remote_static=self.server_key)
            writer.write(conn.start())
            while not conn.handshake_done:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("the core closed during the handshake")
                conn.receive(data)
                writer.write(conn.data_to_send())
            self.stream = noise_aio.NoiseStream(conn, reader, writer)
        import socket
        sock = self.stream.writer.get_extra_info("socket")
        if sock is not None:   # frames are small and latency-bound: no Nagle delay
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if read:
            self._reader_task = asyncio.ensure_future(self._read_loop())
        return self

    async def _read_loop(self):
        try:
            while True:
                data = await self.stream.recv()
                if not data:
                    break
                self._decoder.feed(data)
                now = time.monotonic()
                for f in self._decoder:
                    e = envelope_pb2.Envelope()
                    e.ParseFromString(f.header)
                    r = Received(e, f.tail, now)
                    self.received.append(r)
                    await self._auto(r)
                async with self._new:
                    self._new.notify_all()
        except (ConnectionError, OSError, EOFError, Exception):  # noqa: BLE001 — the test reads .closed
            pass
        finally:
            self.closed.set()
            async with self._new:
                self._new.notify_all()

    async def _auto(self, r):
        op = r.op
        if op == "ping" and self.auto_ping:
            t2 = time.time_ns() // 1000
            await self.send(env(r.id, "ping_response", t1=r.env.ping.t1, t2=t2, t3=time.time_ns() // 1000))
        elif op == "media_render_open":
            self._renders[r.id] = 0
        elif op == "image_render_open":
            self._image_rx[r.id] = [r.env.image_render_open.mime, r.env.image_render_open.total_bytes, bytearray(), 0]
        elif op == "stream_chunk" and r.id in self._image_rx:
            self._image_rx[r.id][2] += r.tail
            self._image_rx[r.id][3] += 1
        elif op == "stream_end" and r.id in self._image_rx:
            mime, total, buf, n = self._image_rx.pop(r.id)
            self.images.append(ImageReceived("stream", r.id, mime, bytes(buf), total, n))
        elif op == "render" and r.env.render.target == surface_pb2.CAPABILITY_IMAGE_DISPLAY:
            for c in r.env.render.content:
                if c.WhichOneof("block") == "media":
                    self.images.append(ImageReceived("inline", r.id, c.media.mime, bytes(c.media.data)))
        elif op == "stream_chunk" and r.id in self._renders:
            self._renders[r.id] += len(r.tail)
        elif op in ("stream_end", "stream_cancel") and r.id in self._renders and self.auto_playback:
            n = self._renders.pop(r.id)
            await self.send(env(r.id, "playback_done", frames=n // self.bytes_per_frame))

    async def send(self, e, tail=b""):
        await self.send_raw(frame(e, tail))

    async def send_raw(self, data):
        async with self.write_lock:
            await self.stream.send(data)

    async def hello(self, **kw):
        """Send a Hello and wait for the HelloResponse."""
        h = hello(id_=self.mint(), **kw)
        await self.send(h)
        return await self.expect("hello_response")

    async def expect(self, op, id_=None, timeout=5.0, start=0, pred=None):
        """Wait for the first received frame (from index ``start``) with this op (and id)."""
        deadline = time.monotonic() + timeout
        async with self._new:
            while True:
                for r in self.received[start:]:
                    if r.op == op and (id_ is None or r.id == id_) and (pred is None or pred(r)):
                        return r
                left = deadline - time.monotonic()
                if left <= 0 or self.closed.is_set():
                    raise AssertionError("no %s%s within %.1fs; received %r" % (
                        op, "" if id_ is None else " on id %d" % id_, timeout, self.received[-20:]))
                try:
                    await asyncio.wait_for(self._new.wait(), left)
                except asyncio.TimeoutError:
                    pass

    async def wait_closed(self, timeout=5.0):
        await asyncio.wait_for(self.closed.wait(), timeout)

    def ops(self, start=0):
        return [(r.op, r.id) for r in self.received[start:]]

    async def stream_audio(self, id_, pcm, chunk_ms=20, rate=16000, realtime=False, seq0=0):
        """Send ``pcm`` on capture ``id_`` in chunks of ``chunk_ms``; returns the next seq."""
        step = 2 * rate * chunk_ms // 1000
        seq = seq0
        t0 = time.monotonic()
        for pos in range(0, len(pcm), step):
            await self.send(env(id_, "stream_chunk", seq=seq), pcm[pos:pos + step])
            seq += 1
            if realtime:
                delay = t0 + seq * chunk_ms / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        return seq

    async def close(self):
        if self.stream is not None:
            self.stream.close()
            await self.stream.wait_closed()
        if self._reader_task is not None:
            try:
                await asyncio.wait_for(self._reader_task, 2)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._reader_task.cancel()


def _has_loop():
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False
