"""The reference core's asyncio server: accepts Noise-over-TCP connections, one CoreSession each.

Responsible for the server as a whole: accept (each connection is a ``connection.Connection``), the
hand-off of connections between worker processes (workers.py), registry polling (tokens/approvals
without a restart, ``admission.elevate``), reports, and the public Python API below; the loopback
control endpoint for the CLI is ``control``'s. ``DEFAULT_PORT`` here is ``alabama.CORE_PORT`` (its one owner).
Protocol rules live in ``session``; one connection's I/O in ``connection``; admission in ``admission``.

Python API (also documented in docs/core.md)::

    srv = CoreServer(data_dir, host="127.0.0.1", port=0, closed=False, min_wire_version=1, brain=None,
                     stt="embedded", tts="embedded", wake_phrase=None, wake_threshold=None)   # brain: echo|espeak|speech
    await srv.start(); srv.port; srv.public_key_hex
    await srv.wait_device(device_id)                 # a live, admitted session
    await srv.invoke(device_id, "tool", "{}")        # -> ToolResult (raises RequestFailed on Error)
    await srv.write_setting(device_id, "volume", SettingValue(int_value=3))   # -> SettingState
    await srv.request_capture(device_id, "ref")      # -> the echoing CaptureOpen (the turn then runs)
    srv.render(device_id, CAPABILITY_TEXT_DISPLAY, [ContentBlock(text="hi")]); await srv.render_text(...)
    await srv.ping(device_id)                        # -> (offset_us, rtt_us)
    srv.approve(device_id); srv.mint_token(ttl)
    srv.reports                                      # every session's conformance Report (live + ended)
    await srv.stop()
"""
import asyncio
import json
import logging
import os
import gc
import pathlib
import weakref

from alabama.v1 import surface_pb2

from .. import CORE_PORT
from ..errors import listen_error
from ..noise import aio as noise_aio
from ..noise.state import NoiseError, public_key
from . import admission
from . import registry as reg
from . import session as cs
from . import images
from .connection import Connection, Wire, liveness_timeout  # noqa: F401 — liveness_timeout: re-exported
from .control import CONTROL_FILE, ControlEndpoint, control_call  # noqa: F401 — control_call: the CLI's import
from .errors import CoreError, NotConnected, RequestFailed
from .deferred import DEFERRED_MAX_BYTES, DEFERRED_TTL_S, DeferredStore
from .pipeline import call, make_brain

log = logging.getLogger("alabama.core.server")

DEFAULT_PORT = CORE_PORT         # the one value lives in alabama/__init__.py (the CLIs read it without importing the core)
#: The Noise handshake and the Hello must each arrive within this many seconds of connecting.
HANDSHAKE_TIMEOUT_S = 10.0
HELLO_TIMEOUT_S = 10.0
PING_INTERVAL_S = 15.0
#: The registry file is polled this often for new tokens and approvals (no restart needed).
POLL_INTERVAL_S = 0.25
#: A peer that leaves this many frames unread is a slow reader: it is disconnected (others unaffected).
MAX_QUEUED_FRAMES = 4096
#: A single write may wait this long for the peer to read before the connection is dropped.
WRITE_TIMEOUT_S = 20.0
#: An image stream keeps at most this many chunk frames queued ahead of the writer (RELIABLE: it waits,
#: never drops; control frames still overtake them, and the slow-reader count stays meaningful).
IMAGE_WINDOW_FRAMES = 64
REPORTS_DIR = "reports"


class CoreServer:
    """The reference core (see the module docstring for the API)."""

    def __init__(self, data_dir, host="127.0.0.1", port=DEFAULT_PORT, closed=False, min_wire_version=1, brain=None,
                 max_frame_bytes=65516, max_concurrent_streams=8, ping_interval=PING_INTERVAL_S,
                 handshake_timeout=HANDSHAKE_TIMEOUT_S, hello_timeout=HELLO_TIMEOUT_S,
                 max_queued_frames=MAX_QUEUED_FRAMES, write_timeout=WRITE_TIMEOUT_S, control=True,
                 frame_observer=None, save_reports=True, deferred_ttl=DEFERRED_TTL_S,
                 deferred_max_bytes=DEFERRED_MAX_BYTES, worker=None, stt="embedded", tts="embedded",
                 wake_phrase=None, wake_threshold=None, wake_min_ms=None, wake_word=None):
        self.data_dir = pathlib.Path(data_dir)
        # One of several worker processes behind one port (workers.py): connections of devices another
        # worker owns are handed to it after the handshake, so each device's state lives in one place.
        self.worker = worker
        self.session_prefix = "" if worker is None else "w%d-" % worker.index
        self.control_file = CONTROL_FILE if worker is None else worker.control_file
        self.handed_off = self.handoff_failures = self.adopted = 0
        self.host, self.port = host, port
        self.closed = closed
        self.min_wire_version = min_wire_version
        self.brain = brain if brain is not None and not isinstance(brain, str) else make_brain(brain, stt, tts)
        # Server-side wake word on ambient captures (docs/core.md): off unless a word or a phrase is given.
        self.wake = wake_phrase if wake_word is None and not isinstance(wake_phrase, str) else \
            _make_wake(wake_phrase, wake_threshold, wake_min_ms, wake_word)
        self._own_wake = wake_word is not None or isinstance(wake_phrase, str)
        self.max_frame_bytes = max_frame_bytes
        self.max_concurrent_streams = max_concurrent_streams
        self.ping_interval = ping_interval
        self.handshake_timeout = handshake_timeout
        self.hello_timeout = hello_timeout
        self.max_queued_frames = max_queued_frames
        self.write_timeout = write_timeout
        self.control_enabled = control
        self.frame_observer = frame_observer
        self.save_reports = save_reports
        self.connections = {}        # device_id -> Connection (admitted)
        self.live_reports = {}
        self.finished_reports = []
        self.deferred = DeferredStore(deferred_ttl, deferred_max_bytes)   # partial DEFERRED captures (R10.4-d)
        self.handshake_failures = 0
        self.links_cut = 0           # sessions whose link ended inside a Noise message (a transport event)
        self._conn_tasks = set()
        self._all_conns = weakref.WeakValueDictionary()   # session_id -> Connection, until collected
        self._count = 0
        self._server = None
        self._control = None
        self._poll_task = None
        self.registry = None

    # ---------------------------------------------------------------------- start / stop
    async def start(self):
        self.static_private = reg.load_or_create_key(self.data_dir)
        self.public_key = public_key(self.static_private)
        self.public_key_hex = self.public_key.hex()
        self.registry = reg.Registry(self.data_dir)
        try:
            self._server = await asyncio.get_running_loop().create_server(self._new_wire, self.host, self.port,
                                                                          reuse_port=self.worker is not None)
        except OSError as e:          # in use, not this machine's address, a privileged port, a name that won't resolve
            self.registry.close()
            raise listen_error(e, self.host, self.port) from None
        self.port = self._server.sockets[0].getsockname()[1]
        if self.worker is not None:
            asyncio.get_running_loop().add_reader(self.worker.inbox.fileno(), self._on_inbox)
        self._last_version = self.registry.data_version()
        self._poll_task = asyncio.ensure_future(self._poll_registry())
        if self.control_enabled:
            self._control = await ControlEndpoint(self, self.data_dir / self.control_file).start()
        log.info("core listening on %s:%d, key %s", self.host, self.port, self.public_key_hex)
        if self.wake is not None and self._own_wake:     # said once listening: a refused start stays one line
            cfg = self.wake.config
            engine = {"micro": "microWakeWord model ", "open": "openWakeWord model "}.get(cfg["engine"],
                                                                                    "keyphrase spotter")
            log.info("%s %r on ambient captures: %s%s", self.wake.kind(cfg), cfg["label"], engine,
                     cfg.get("model", ""))
        return self

    async def stop(self):
        if self._server is not None:
            self._server.close()
        if self.worker is not None:
            asyncio.get_running_loop().remove_reader(self.worker.inbox.fileno())
        if self._control is not None:
            self._control.close()
        if self._poll_task is not None:
            self._poll_task.cancel()
        for t in list(self._conn_tasks):
            t.cancel()
        await asyncio.gather(*self._conn_tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if self.registry is not None:
            self.registry.close()
        if self._own_wake and self.wake is not None:
            await self.wake.close()            # its spotting processes

    @property
    def listening(self):
        """True from start() until stop() begins: the core accepts connections on ``port``."""
        return self._server is not None and self._server.is_serving()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.stop()

    def _on_inbox(self):
        """A connection handed over by another worker: its socket, Noise state and unread bytes."""
        import socket
        try:
            msg, fds, _, _ = socket.recv_fds(self.worker.inbox, self.worker.MAX_MESSAGE, 1)
        except (BlockingIOError, InterruptedError):
            return
        if not fds:
            return
        sock = socket.socket(fileno=fds[0])
        for fd in fds[1:]:
            os.close(fd)
        try:
            hdr = json.loads(msg)
            from ..noise.transport import NoiseConnection
            nc = NoiseConnection.restore_established(self.static_private, hdr["noise"])
            raw = bytes.fromhex(hdr["raw"])
        except (ValueError, KeyError, TypeError, NoiseError) as e:
            log.warning("a connection handed over by another worker is unreadable (%s): closed", e)
            sock.close()
            return
        self.adopted += 1
        asyncio.ensure_future(self._adopt(sock, nc, raw))

    async def _adopt(self, sock, nc, raw):
        sock.setblocking(False)
        # raw: read by the first worker past the handshake, first in line here
        conn = self._new_conn(noise_aio.NoiseStream(nc, None, None), raw)
        try:
            await asyncio.get_running_loop().create_connection(lambda: Wire(conn, self._serve), sock=sock)
        except OSError as e:
            log.info("a handed-over connection is gone already: %s", e)
            sock.close()

    def _new_conn(self, stream=None, unread=b""):
        self._count += 1
        conn = Connection(self, self._count, stream, unread)
        self._all_conns[conn.session_id] = conn
        return conn

    def _new_wire(self):
        return Wire(self._new_conn(), self._serve)

    def _serve(self, conn):
        """The connection's transport is up: serve it in its own task until it ends."""
        task = asyncio.ensure_future(conn.run())
        self._conn_tasks.add(task)
        task.add_done_callback(self._conn_tasks.discard)

    # ---------------------------------------------------------------------- accounting
    def state_accounting(self, collect=True):
        """Read-only accounting of per-session state, for fault benches (docs/reliability.md).

        ``live``: session_id -> ``Connection.held_state()`` of each connection still being served;
        ``dead``: the same for every connection whose session has ended but that is still held
        somewhere (after a ``gc.collect()`` when ``collect``): each one is retained state, and each
        non-zero count in it is state the dead session failed to release; ``registry``: device_id ->
        session_id of ``connections`` (only live sessions may appear); ``conn_tasks``: connection tasks
        running; ``live_reports``; ``deferred``: the DEFERRED store (``entries`` kept across reconnects for
        a resume *by design*, R10.4-d, and ``held``: entries pinned by an open capture, which only a live
        session may do). Call on the server's loop thread."""
        if collect:
            gc.collect()
        live, dead = {}, {}
        for sid, c in list(self._all_conns.items()):
            (dead if c.ended else live)[sid] = c.held_state()
        d = self.deferred
        return {"live": live, "dead": dead,
                "registry": {did: c.session_id for did, c in self.connections.items()},
                "conn_tasks": len(self._conn_tasks), "live_reports": sorted(self.live_reports),
                "deferred": {"entries": len(d), "held": sum(1 for k in d.keys() if d.held(k)), "bytes": d.bytes}}

    # ---------------------------------------------------------------------- reports
    @property
    def reports(self):
        return self.finished_reports + list(self.live_reports.values())

    def reports_for(self, device_id):
        return [r for r in self.reports if r.device_id == device_id]

    def save_report(self, rep):
        """Write an ended session's conformance report to <data>/reports (unless save_reports is off)."""
        if not self.save_reports:
            return
        d = self.data_dir / REPORTS_DIR
        d.mkdir(exist_ok=True)
        (d / ("%s-%s.json" % (rep.device_id or "unknown", rep.session_id))).write_text(rep.to_json())

    # ---------------------------------------------------------------------- registry polling
    async def _poll_registry(self):
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            try:
                self.deferred.sweep()      # idle partial DEFERRED captures age out (at most every SWEEP_EVERY_S)
                v = self.registry.data_version()
                if v != self._last_version:
                    self._last_version = v
                    self._apply_registry()
            except Exception:  # noqa: BLE001
                log.exception("registry poll failed")

    def _apply_registry(self):
        """Approvals made by another process (`alabama core approve`): send Paired on live guests."""
        for did, conn in list(self.connections.items()):
            s = conn.session
            if s.surface is None or not s.surface.guest:
                continue
            dev = self.registry.lookup(did)
            if dev is not None and dev.trust == reg.PAIRED:
                admission.elevate(conn)

    # ---------------------------------------------------------------------- API
    def _conn(self, device_id):
        conn = self.connections.get(device_id)
        if conn is None or conn.session.phase != cs.PHASE_OPEN:
            raise NotConnected("device %s has no live session: start it, or check `alabama core devices`" % device_id)
        return conn

    async def wait_device(self, device_id, timeout=5.0):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            conn = self.connections.get(device_id)
            if conn is not None and conn.session.phase == cs.PHASE_OPEN:
                return conn
            if loop.time() > deadline:
                raise NotConnected("device %s did not connect within %.1fs" % (device_id, timeout))
            await asyncio.sleep(0.01)

    def approve(self, device_id):
        """Manual in-band path: trust the device and send Paired on its live session (if any)."""
        self.registry.set_trust(device_id, reg.PAIRED)
        self._last_version = self.registry.data_version()
        conn = self.connections.get(device_id)
        if conn is not None and conn.session.surface is not None and conn.session.surface.guest:
            admission.elevate(conn)

    def mint_token(self, ttl):
        return self.registry.mint_token(ttl)

    async def _request(self, device_id, send, timeout):
        return await call(self._conn(device_id), send, timeout)

    async def invoke(self, device_id, name, arguments="{}", timeout=10.0):
        return await self._request(device_id, lambda s: s.invoke(name, arguments), timeout)

    async def device_health(self, device_id, timeout=5.0):
        """The device's health: its device.info answer ({"source": "device.info", ...}), else the metadata of its
        last device.health Event ({"source": "event", ...}), else None (docs/ota.md)."""
        conn = self._conn(device_id)
        if conn.session.surface is not None and any(t.name == "device.info" for t in conn.session.surface.hello.tools):
            try:
                res = await self.invoke(device_id, "device.info", "{}", timeout)
                return dict(json.loads(res.content[0].text), source="device.info")
            except (CoreError, asyncio.TimeoutError, ValueError, IndexError):
                pass
        return dict(conn.health_event, source="event") if conn.health_event else None

    async def write_setting(self, device_id, key, value, timeout=10.0):
        return await self._request(device_id, lambda s: s.settings_write(key, value), timeout)

    async def request_capture(self, device_id, correlation_ref, image_source=0, mode=0, timeout=10.0):
        return await self._request(device_id, lambda s: s.request_capture(correlation_ref, image_source, mode), timeout)

    async def ping(self, device_id, timeout=5.0):
        conn = self._conn(device_id)
        await self._request(device_id, lambda s: s.ping(), timeout)
        return conn.session.clock_offset_us, conn.session.rtt_us

    def render(self, device_id, target, content):
        conn = self._conn(device_id)
        id_ = conn.session.render(target, content)
        conn.flush()
        return id_

    async def render_text(self, device_id, text, role=surface_pb2.ASSISTANT):
        conn = self._conn(device_id)
        s = conn.session
        id_ = s.open_text_render(role)
        s.send_stream_data(id_, text.encode("utf-8"))
        s.end_stream(id_)
        conn.flush()
        return id_

    async def show_image(self, device_id, data, mime, to="", lane=""):
        """Put an image on the device's IMAGE_DISPLAY, never leaving it blank (spec §10.5, R10.5-a).

        The image is fitted first (``images.fit_image``, in a worker thread): kept as is when it already
        fits, else scaled to the panel, converted to a MIME type the device accepts and recompressed /
        downscaled until it fits the larger of the inline Render capacity and the device's
        ``max_image_bytes``. Then it goes inline in one Render when it fits one frame, else over
        ImageRenderOpen{mime, total_bytes} with chunks under the device's max_frame_bytes (at most
        IMAGE_WINDOW_FRAMES queued at a time: control frames interleave) and StreamEnd. Returns an
        ImageShown. Raises LocalProtocolError (CAPABILITY_MISSING without IMAGE_DISPLAY; ImageError when
        the image cannot be decoded or converted), RequestFailed when the device answers the stream
        with an Error, NotConnected when the device leaves."""
        conn = self._conn(device_id)
        s = conn.session
        p = s.surface.image_display_params() if s.surface.declared(surface_pb2.CAPABILITY_IMAGE_DISPLAY) else None
        inline, stream = images.image_budget(s, None, to, lane)
        fitted = await asyncio.to_thread(images.fit_image, bytes(data), mime, max(inline, stream), list(p.accepts),
                                         p.width, p.height)
        if self._conn(device_id) is not conn:
            raise NotConnected("device %s reconnected while its image was prepared: show it again" % device_id)
        path = images.image_path(s, len(fitted.data), fitted.mime, to, lane)
        if path == "stream":
            id_ = await self._stream_image(conn, fitted, to, lane)
        else:   # inline; or None (a stream slot was taken meanwhile): push_image says why
            id_, path = images.push_image(s, fitted.data, fitted.mime, to, lane)
            conn.flush()
        return ImageShown(id_, path, fitted)

    async def _stream_image(self, conn, fitted, to, lane):
        s = conn.session
        data = fitted.data
        id_ = s.open_image_render(fitted.mime, len(data), to, lane)
        answer = conn.wait_terminal(id_)          # an Error on the id is the device's only answer (§10.5)
        conn.flush()
        step = s.chunk_capacity(id_) * (IMAGE_WINDOW_FRAMES // 2)
        done = False
        try:
            for pos in range(0, len(data), step):
                await conn.wait_bulk_below(IMAGE_WINDOW_FRAMES // 2)
                if answer.done() or id_ not in s.slots or s.phase != cs.PHASE_OPEN:
                    break
                s.send_stream_data(id_, data[pos:pos + step])
                conn.flush()
            else:
                if not answer.done() and id_ in s.slots and s.phase == cs.PHASE_OPEN:
                    s.end_stream(id_)
                    conn.flush()
                    done = True
        finally:
            conn.waiters.pop(id_, None)
        if done:
            return id_
        if answer.done():
            if answer.exception() is not None:
                raise answer.exception()
            err = answer.result().error
            if err is not None:
                from alabama.v1 import operations_pb2 as ops
                raise RequestFailed("the device answered image stream %d with Error %s: %s"
                                    % (id_, ops.ErrorCode.Name(err.code), err.message), ops.ErrorCode.Name(err.code),
                                    err.message)
        if s.phase != cs.PHASE_OPEN:
            raise NotConnected("the connection ended while image stream %d was sent" % id_)
        raise RequestFailed("the device cancelled image stream %d" % id_, "CANCELLED")

    def stop_turn(self, device_id):
        conn = self._conn(device_id)
        conn.pipeline.stop_turn()
        conn.flush()

def _make_wake(phrase, threshold, min_ms=None, word=None):
    """hearing.Wake for a wake word (a model engine, speech/wakeword.py) or a keyphrase ("" or None: off).
    A missing or damaged model file raises WakeError (one line, at start); an engine package that is not
    installed logs one line saying how to install it and the keyphrase spotter runs instead (``phrase``, else
    its default); without pocketsphinx for that, one line and no spotting. (``alabama core serve`` decides
    this once, ``core/cli.py``, and gives every worker the outcome: the line is said once.)"""
    from ..speech import SpeechUnavailable, wakeword
    from .hearing import Wake
    if word:
        try:
            cfg = wakeword.choose(word)
        except wakeword.WakeUnavailable as e:
            phrase = wake_fallback(e, phrase)
        else:
            return Wake(config=cfg)
    if not phrase:
        return None
    try:
        return Wake(phrase, threshold, min_ms=min_ms)
    except SpeechUnavailable as e:
        wake_off(e)
        return None


def wake_fallback(e, phrase=None):
    """Say in one line that the wake word's engine package is absent (``e``: its WakeUnavailable, with the install
    command) and that the keyphrase spotter listens for ``phrase`` (None: its default) instead; -> that phrase."""
    from ..speech import wakeword
    phrase = phrase or wakeword.spotter_default()
    log.warning("%s; the keyphrase spotter listens for %r instead", e, phrase)
    return phrase


def wake_off(e):
    """Say in one line that the keyphrase spotter cannot run (``e``: SpeechUnavailable): no wake phrase."""
    log.warning("the wake phrase %s", str(e).replace("falling back to the echo brain", "is off"))


class ImageShown:
    """What ``CoreServer.show_image`` sent: ``id`` (the Render or ImageRenderOpen id), ``path`` ("inline" or
    "stream") and ``image`` (the images.FittedImage: data, mime, size, original_size, changed)."""

    def __init__(self, id_, path, image):
        self.id, self.path, self.image = id_, path, image

    def __repr__(self):
        return "ImageShown(id=%d, %s, %r)" % (self.id, self.path, self.image)
