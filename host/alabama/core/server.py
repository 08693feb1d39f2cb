"""The reference core's asyncio server: Noise over TCP in front of one CoreSession per connection.

Responsible for I/O only: accept, run the Noise responder, feed plaintext to the session, write its
frames one Noise message each (frame-granular, control first), admission against the SQLite
registry, the voice pipeline's tasks, periodic Pings, registry polling (tokens/approvals without a
restart) and a small loopback control endpoint for the CLI. Protocol rules live in ``session``.

Python API (also documented in docs/core.md)::

    srv = CoreServer(data_dir, host="127.0.0.1", port=0, closed=False, min_wire_version=1, brain=None)
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
import secrets
import weakref

from alabama.v1 import surface_pb2

from ..noise import aio as noise_aio
from ..noise.state import NoiseError, public_key
from . import registry as reg
from . import session as cs
from . import images
from .errors import CoreError, LocalProtocolError, NotConnected, RequestFailed
from .deferred import DEFERRED_MAX_BYTES, DEFERRED_TTL_S, DeferredStore
from .pipeline import VoicePipeline, make_brain

log = logging.getLogger("alabama.core.server")

DEFAULT_PORT = 7355
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
#: Kernel/transport buffering kept small so a queued Ping waits behind at most a frame or two (R10.1-a).
WRITE_HIGH_WATER = 64 * 1024
#: The kernel send buffer is kept small for the same reason (spec §10.1: writes stay frame-granular so
#: the kernel cannot queue bulk bytes ahead of a waiting Ping).
SEND_BUFFER_BYTES = 64 * 1024
READ_CHUNK = 65536
READ_LIMIT = 1 << 17
#: An image stream keeps at most this many chunk frames queued ahead of the writer (RELIABLE: it waits,
#: never drops; control frames still overtake them, and the slow-reader count stays meaningful).
IMAGE_WINDOW_FRAMES = 64
#: Liveness (R10.1-b): a satellite that sends nothing for LIVENESS_PINGS ping intervals plus one
#: max-size frame each way at LIVENESS_RATE_BPS (+ 1 s) is presumed gone (only while pinging).
LIVENESS_PINGS = 3
LIVENESS_RATE_BPS = 100_000
CONTROL_FILE = "control.json"
HEALTH_EVENT = "device.health"      # the satellite's health report (firmware/satellite/health.py, docs/ota.md)
#: A connection handed to another worker waits at most this long for its handshake reply to leave.
HANDOFF_FLUSH_S = 2.0
REPORTS_DIR = "reports"


def liveness_timeout(ping_interval, sat_max_frame_bytes, core_max_frame_bytes):
    """Seconds of total silence after which the core drops a satellite it pings (R10.1-b): LIVENESS_PINGS
    intervals, plus the time one max-size frame takes each way at LIVENESS_RATE_BPS (a Ping may queue
    behind one of the core's frames, its answer behind one of the satellite's: §10.1), plus 1 s."""
    frames = (sat_max_frame_bytes + core_max_frame_bytes) * 8.0 / LIVENESS_RATE_BPS
    return LIVENESS_PINGS * ping_interval + frames + 1.0


class Connection:
    """One accepted TCP connection: Noise, then a CoreSession, its pipeline and its writer."""

    def __init__(self, server, reader, writer, number):
        self.server = server
        self.reader, self.writer = reader, writer
        self.peer = "%s:%s" % (writer.get_extra_info("peername") or ("?", "?"))[:2]
        self.session_id = "%ss%d" % (server.session_prefix, number)
        self.stream = None
        self.session = None
        self.device_id = None
        self.pubkey = None
        self.pipeline = None
        self.tasks = set()
        self.waiters = {}          # id -> Future of TerminalReceived
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()     # set by the writer each time its queue runs dry
        self._closing = False
        self.ping_rounds = []
        self.hello_done = asyncio.Event()
        self.ended = False           # set when _teardown has released everything (state_accounting)
        self.health_event = None     # metadata of the last device.health Event (a dict), for device_health()
        self.adopted = False         # handed over by another worker with its Noise handshake done

    # ---------------------------------------------------------------------- lifecycle
    async def run(self):
        srv = self.server
        try:
            try:
                sock = self.writer.get_extra_info("socket")
                if sock is not None:
                    import socket
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
                self.writer.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
                if self.stream is None:
                    self.stream = await asyncio.wait_for(noise_aio.accept(self.reader, self.writer,
                                                                          srv.static_private), srv.handshake_timeout)
            except (NoiseError, asyncio.TimeoutError, ConnectionError, OSError) as e:
                log.info("%s: Noise handshake failed: %s", self.peer, e)
                srv.handshake_failures += 1
                return
            self.pubkey = self.stream.remote_static
            self.device_id = reg.fingerprint(self.pubkey)
            w = srv.worker
            if w is not None and not self.adopted and w.owner(self.device_id) != w.index:
                await self._hand_off(w)
                return
            self.session = cs.CoreSession(self._admit, session_id=self.session_id, peer=self.peer,
                                          device_id=self.device_id, min_wire_version=srv.min_wire_version,
                                          max_frame_bytes=srv.max_frame_bytes,
                                          max_concurrent_streams=srv.max_concurrent_streams)
            self.session.report.pattern = self.stream.pattern
            srv.live_reports[self.session_id] = self.session.report
            self.pipeline = VoicePipeline(self, srv.brain, srv.deferred)
            self.writer_task = asyncio.ensure_future(self._write_loop())
            await self._read_loop()
        except asyncio.CancelledError:
            if self.session is not None:
                self.session.close("server shutting down")
        except Exception:  # noqa: BLE001 — one connection's bug must not take the server down
            log.exception("%s: connection failed", self.peer)
            if self.session is not None:
                self.session.report.add("INTERNAL", "core_exception", "the core raised while serving this session")
                self.session.close("core exception")
        finally:
            await self._teardown()

    async def _hand_off(self, w):
        """Another worker owns this device (docs/core.md, workers): give it the TCP socket, the Noise
        transport state and every byte read past the handshake, then let go of this socket's fd
        (the connection lives on in the owner: closing one descriptor of it neither shuts it down nor
        resets it). Nothing is left here: no session, report or registry entry was made."""
        srv = self.server
        transport = self.writer.transport
        transport.pause_reading()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HANDOFF_FLUSH_S
        while transport.get_write_buffer_size() and loop.time() < deadline and not transport.is_closing():
            await asyncio.sleep(0.001)     # the handshake's last message leaves from here, first
        buf = getattr(self.reader, "_buffer", None)
        if transport.is_closing() or transport.get_write_buffer_size() or self.reader.at_eof() or buf is None:
            log.info("%s: not handed to worker %d (closing, unsent or unread state): dropped", self.peer,
                     w.owner(self.device_id))
            srv.handoff_failures += 1
            return
        raw = bytes(buf)
        buf.clear()
        try:
            w.hand_off(w.owner(self.device_id), {"noise": self.stream.conn.export_established(), "raw": raw.hex(),
                                                 "peer": self.peer}, self.writer.get_extra_info("socket").fileno())
        except (OSError, NoiseError, ValueError) as e:
            log.warning("%s: hand-off to worker %d failed: %s (the satellite reconnects)", self.peer,
                        w.owner(self.device_id), e)
            srv.handoff_failures += 1
            return
        srv.handed_off += 1

    async def _read_loop(self):
        """Feed the session until the connection ends. After the handshake the transport's bytes go
        straight from ``data_received`` through Noise, the session and the pipeline (``_FastRead``):
        no StreamReader buffer and no task wake-up per read. Falls back to the StreamReader loop if
        this Python's StreamReader does not look as expected."""
        reader, transport = self.reader, self.writer.transport
        inner = transport.get_protocol() if transport is not None else None
        if (not isinstance(getattr(reader, "_buffer", None), bytearray) or not hasattr(transport, "set_protocol")
                or not isinstance(inner, asyncio.StreamReaderProtocol)):
            return await self._read_loop_streams()
        srv = self.server
        self._read_done = done = asyncio.get_running_loop().create_future()
        # What the handshake read past its last message: decrypted already, or still in the reader.
        leftover = bytes(reader._buffer)
        reader._buffer.clear()
        eof = reader.at_eof() or getattr(reader, "_eof", False)
        transport.set_protocol(_FastRead(self, inner))
        if getattr(reader, "_paused", False):
            reader._paused = False
            transport.resume_reading()
        try:
            data = self.stream.conn.read_plaintext()
        except NoiseError as e:
            self._noise_failed(e)
            data = b""
        if data:
            self._on_plaintext(data)
        if leftover:
            self._on_bytes(leftover)
        if eof:
            self._on_eof()
        if self.session.phase == cs.PHASE_HELLO and not done.done():
            try:
                await asyncio.wait_for(asyncio.shield(done), srv.hello_timeout)
            except asyncio.TimeoutError:
                if self.session.phase == cs.PHASE_HELLO and not done.done():
                    self.session.report.add("R6.1-a", "hello_timeout",
                                            "no Hello within %.0fs of the handshake" % srv.hello_timeout)
                    self.session.close("no Hello")
                    self._finish_read()
        await done

    # -- the protocol-driven read path (called from _FastRead) ------------------------------------
    def _finish_read(self, exc=None):
        done = self._read_done
        if not done.done():
            if exc is None:
                done.set_result(None)
            else:
                done.set_exception(exc)

    def _noise_failed(self, e):
        self.session.report.add("R5-a", "decrypt", "a Noise transport message failed: %s" % e)
        self.session.close("Noise error %s" % e.code)
        self._finish_read()

    def _on_bytes(self, raw):
        if self._read_done.done():
            return
        try:
            data = self.stream.conn.decrypt_stream(raw)
        except NoiseError as e:
            self._noise_failed(e)
            return
        except Exception as e:  # noqa: BLE001 — surfaces in run(): reported, this connection only
            self._finish_read(e)
            return
        if data:
            self._on_plaintext(data)

    def _on_plaintext(self, data):
        if self._closing:
            self._finish_read()
            return
        try:
            s = self.session
            events = s.receive_data(data)
            if self.server.frame_observer is not None:
                self.server.frame_observer(self, data)
            for ev in events:
                if type(ev) is cs.ChunkReceived:
                    self.pipeline._on_ChunkReceived(ev)
                else:
                    self._dispatch(ev)
            if s.has_output() or self._closing:
                self.flush()
        except Exception as e:  # noqa: BLE001
            self._finish_read(e)
            return
        if self._closing:
            self._finish_read()

    def _on_eof(self):
        if self._read_done.done():
            return
        try:
            self.stream.conn.receive_eof()
        except NoiseError as e:
            self._noise_failed(e)
            return
        self.session.close("peer closed")
        self._finish_read()

    def _on_lost(self, exc):
        if self._read_done.done():
            return
        if exc is None:
            self._on_eof()
        else:
            self.session.close("connection reset")
            self._finish_read()

    async def _read_loop_streams(self):
        srv = self.server
        conn, reader = self.stream.conn, self.reader   # the Noise binding, driven directly (one hop less per frame)
        while not self._closing:
            timeout = None if self.session.phase != cs.PHASE_HELLO else srv.hello_timeout
            try:
                data = conn.read_plaintext()
                if not data:
                    raw = await (asyncio.wait_for(reader.read(READ_CHUNK), timeout) if timeout else reader.read(READ_CHUNK))
                    if not raw:
                        conn.receive_eof()
                        self.session.close("peer closed")
                        break
                    conn.receive(raw)
                    data = conn.read_plaintext()
                    if not data:
                        continue
            except asyncio.TimeoutError:
                self.session.report.add("R6.1-a", "hello_timeout", "no Hello within %.0fs of the handshake" % timeout)
                self.session.close("no Hello")
                break
            except NoiseError as e:
                self.session.report.add("R5-a", "decrypt", "a Noise transport message failed: %s" % e)
                self.session.close("Noise error %s" % e.code)
                break
            except (ConnectionError, OSError):
                self.session.close("connection reset")
                break
            if not data:
                self.session.close("peer closed")
                break
            events = self.session.receive_data(data)
            if srv.frame_observer is not None:
                srv.frame_observer(self, data)
            for ev in events:
                self._dispatch(ev)
            if self.session.has_output() or self._closing:
                self.flush()

    def _dispatch(self, ev):
        t = type(ev)
        if t is cs.ChunkReceived:
            self.pipeline.on_event(ev)
            return
        if t is cs.HelloAccepted:
            self._on_hello(ev)
        elif t is cs.TerminalReceived:
            fut = self.waiters.pop(ev.id, None)
            if fut is not None and not fut.done():
                fut.set_result(ev)
        elif t is cs.PingRound:
            self.ping_rounds.append((ev.offset_us, ev.rtt_us))
        elif t is cs.CloseConnection:
            self._closing = True
        elif t is cs.SettingReported or t is cs.EventReceived or t is cs.PresenceReceived:
            log.info("%s: %r", self.device_id, ev)
            if t is cs.EventReceived and ev.msg.id == HEALTH_EVENT:
                try:
                    self.health_event = json.loads(ev.msg.metadata)   # validated against its schema (R8.2-e)
                except ValueError:
                    pass
        self.pipeline.on_event(ev)

    def _on_hello(self, ev):
        srv = self.server
        s = ev.surface
        srv.registry.touch(self.device_id, s.display_name, s.software)
        old = srv.connections.get(self.device_id)
        if old is not None and old is not self:
            log.info("%s reconnected: closing its previous session %s", self.device_id, old.session_id)
            old.session.close("replaced by a new connection of the same device")
            old._closing = True
            old._wake.set()
            old.writer.close()
        srv.connections[self.device_id] = self
        self.hello_done.set()
        log.info("%s admitted (%s, %s) from %s: %s", self.device_id, ev.admission.trust, ev.admission.path,
                 self.peer, s.summary())
        if srv.ping_interval:
            t = asyncio.ensure_future(self._ping_loop())
            self.tasks.add(t)

    def _admit(self, surface):
        """Admission (spec §7.3) against the registry: pin unknown devices as guests, honour tokens,
        closed mode. Never trusts Hello.multi_speaker or any `from` (R11-a)."""
        srv = self.server
        r = srv.registry
        dev = r.lookup(self.device_id)
        token_ok = False
        if surface.pairing_token and (dev is None or dev.trust != reg.PAIRED):
            token_ok = r.consume_token(surface.pairing_token, self.device_id)
        if dev is None:
            if srv.closed and not token_ok:
                return cs.Admission(cs.Admission.REJECT_CLOSED, path="closed_unknown")
            dev = r.pin(self.device_id, self.pubkey, surface.display_name, surface.software)
            path = "new_guest"
        else:
            path = "known_" + dev.trust
        if token_ok:
            r.set_trust(self.device_id, reg.PAIRED)
            return cs.Admission(cs.Admission.ACCEPT, trust=reg.PAIRED, send_paired=True, path="token")
        if surface.pairing_token and dev.trust != reg.PAIRED:
            path += "+bad_token"
        if dev.trust == reg.PAIRED and self.stream is not None and self.stream.pattern == "XX":
            # A paired device that comes back over XX has not pinned our key: its Paired was lost (the
            # connection dropped before it arrived, or it was approved while offline). Send it again on
            # this authenticated session (spec §7.3, §10.2): otherwise the device stays a TOFU guest
            # forever, since its single-use token is already spent.
            return cs.Admission(cs.Admission.ACCEPT, trust=dev.trust, send_paired=True, path=path + "+repaired")
        return cs.Admission(cs.Admission.ACCEPT, trust=dev.trust, path=path)

    async def _ping_loop(self):
        """Ping every ping_interval (R10.2-a) and close a satellite that has gone silent: nothing at all
        (not one Noise message) received for ``liveness_timeout`` — three ping intervals plus one
        max-size frame each way of queueing (R10.1-b)."""
        srv, s = self.server, self.session
        loop = asyncio.get_running_loop()
        dead_s = liveness_timeout(srv.ping_interval, s.surface.max_frame_bytes, srv.max_frame_bytes)
        seen, last = self._rx_progress(), loop.time()
        while not self._closing:
            await asyncio.sleep(srv.ping_interval)
            if s.phase != cs.PHASE_OPEN:
                return
            now, got = loop.time(), self._rx_progress()
            if got != seen:
                seen, last = got, now
            elif now - last > dead_s:
                self._close_now("liveness: nothing received for %.1f s (limit %.1f s: %d ping intervals + one "
                                "max-size frame each way)" % (now - last, dead_s, LIVENESS_PINGS))
                return
            s.ping()
            for ev in s.tick():
                self._dispatch(ev)
            self.flush()

    def _rx_progress(self):
        """Changes whenever anything arrives: Noise transport messages decrypted (a frame still being
        reassembled counts too), frames decoded. Read off existing counters: nothing on the read path."""
        return self.stream.conn.received_messages, self.session.report.frames_in

    def _close_now(self, reason):
        """Close the session and drop the connection without waiting for the peer to read."""
        s = self.session
        log.info("%s: %s", self.device_id, reason)
        s.close(reason)
        for ev in s.take_events():
            self._dispatch(ev)
        self._closing = True
        self._wake.set()
        try:
            self.writer.transport.abort()
        except Exception:  # noqa: BLE001
            pass

    def flush(self):
        """Wake the writer: queued frames leave in control-first order. A peer that lets more than
        max_queued_frames pile up unread is a slow reader and is disconnected (others are unaffected)."""
        s = self.session
        if s is not None and s.shed_if_backlog(self.server.max_queued_frames):
            self._closing = True
            try:
                self.writer.transport.abort()
            except Exception:  # noqa: BLE001
                pass
        self._wake.set()

    async def _write_loop(self):
        s = self.session
        stream = self.stream
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while True:
                    if s.shed_if_backlog(self.server.max_queued_frames):
                        self._closing = True
                        break
                    f = s.next_frame()
                    if f is None:
                        self._drained.set()
                        break
                    self.writer.write(stream.conn.encrypt(f))
                    if self.writer.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                        await asyncio.wait_for(self.writer.drain(), self.server.write_timeout)
                        self._drained.set()
                if s.phase == cs.PHASE_CLOSED or self._closing:
                    # Everything queued before the close (e.g. HelloResponse{rejected}) has been written.
                    self._closing = True
                    try:
                        await asyncio.wait_for(self.writer.drain(), 2.0)
                    except (asyncio.TimeoutError, ConnectionError, OSError):
                        pass
                    self.writer.close()
                    return
        except asyncio.TimeoutError:
            s.report.add("R10.1-b", "slow_reader", "a write waited %.0fs for the peer to read" % self.server.write_timeout)
            s.close("slow reader (write timeout)")
        except (ConnectionError, OSError):
            s.close("write failed")
        finally:
            self._closing = True
            self.writer.close()

    async def wait_bulk_below(self, n):
        """Until fewer than ``n`` bulk frames wait for the writer (or the connection is closing)."""
        while self.session.bulk_pending() >= n and not self._closing and self.session.phase == cs.PHASE_OPEN:
            self._drained.clear()
            await asyncio.wait_for(self._drained.wait(), self.server.write_timeout)

    def wait_terminal(self, id_):
        fut = asyncio.get_running_loop().create_future()
        self.waiters[id_] = fut
        return fut

    async def _teardown(self):
        srv = self.server
        self._closing = True
        self._wake.set()
        wt = getattr(self, "writer_task", None)
        if wt is not None:
            try:   # let the writer flush what was queued before the close (a Rejected, a last Error)
                await asyncio.wait_for(asyncio.shield(wt), 2.0)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001
                wt.cancel()
        for t in list(self.tasks):
            t.cancel()
        for t in list(self.tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self.pipeline is not None:
            self.pipeline.release_all()     # its DEFERRED entries may now age out (kept for a resume until then)
        for fut in self.waiters.values():
            if not fut.done():
                fut.set_exception(NotConnected("the device disconnected before answering", "DISCONNECTED"))
                fut.exception()     # retrieved here: a waiter nobody awaits any more (a cancelled turn) is not an error
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001
            pass
        if self.session is not None:
            rep = self.session.report
            if self.session.phase != cs.PHASE_CLOSED:
                self.session.close("connection ended")
            import time as _t
            rep.ended = _t.time()
            srv.live_reports.pop(self.session_id, None)
            srv.finished_reports.append(rep)
            srv._save_report(rep)
            if srv.connections.get(self.device_id) is self:
                del srv.connections[self.device_id]
            log.info("%s session %s ended: %s (%d violations)", self.device_id, self.session_id,
                     rep.close_reason, len(rep.violations))
            # The session is dead: nothing it held may outlive it (streams, unconsumed uploads, queued
            # frames; an upload never outlives its connection, §10.4). DEFERRED entries stay in the
            # server's store for a resume (released above), by design.
            self.session.release()
        if self.pipeline is not None:
            self.pipeline.captures.clear()
            self.pipeline.turn_task = None
        self.waiters.clear()
        self.ended = True

    def held_state(self):
        """What this connection holds right now, by kind (counts; all 0 once it has ended)."""
        s, p = self.session, self.pipeline
        srv = self.server
        held = s.held() if s is not None else {"streams": 0, "uploads": 0, "queued_frames": 0}
        return dict(held, **{
            "waiters": sum(1 for f in self.waiters.values() if not f.done()),
            "tasks": sum(1 for t in self.tasks if not t.done()),
            "captures": len(p.captures) if p is not None else 0,
            "deferred_holds": sum(1 for c in p.captures.values() if c.get("held")) if p is not None else 0,
            "registered": int(self.device_id is not None and srv.connections.get(self.device_id) is self),
            "live_report": int(self.session_id in srv.live_reports),
        })


class _FastRead(asyncio.Protocol):
    """The transport's protocol once the Noise handshake is done: received bytes go straight to the
    Connection; flow control and connection loss are forwarded to the original StreamReaderProtocol,
    so the StreamWriter (write, drain, close, wait_closed) works exactly as before."""

    def __init__(self, conn, inner):
        self.conn, self.inner = conn, inner

    def data_received(self, data):
        self.conn._on_bytes(data)

    def eof_received(self):
        self.conn._on_eof()
        return self.inner.eof_received()

    def connection_lost(self, exc):
        self.conn._on_lost(exc)
        self.inner.connection_lost(exc)

    def pause_writing(self):
        self.inner.pause_writing()

    def resume_writing(self):
        self.inner.resume_writing()


class CoreServer:
    """The reference core (see the module docstring for the API)."""

    def __init__(self, data_dir, host="127.0.0.1", port=DEFAULT_PORT, closed=False, min_wire_version=1, brain=None,
                 max_frame_bytes=65516, max_concurrent_streams=8, ping_interval=PING_INTERVAL_S,
                 handshake_timeout=HANDSHAKE_TIMEOUT_S, hello_timeout=HELLO_TIMEOUT_S,
                 max_queued_frames=MAX_QUEUED_FRAMES, write_timeout=WRITE_TIMEOUT_S, control=True,
                 frame_observer=None, save_reports=True, deferred_ttl=DEFERRED_TTL_S,
                 deferred_max_bytes=DEFERRED_MAX_BYTES, worker=None):
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
        self.brain = brain if brain is not None and not isinstance(brain, str) else make_brain(brain)
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
        self._server = await asyncio.start_server(self._accept, self.host, self.port, limit=READ_LIMIT,
                                                  reuse_port=self.worker is not None)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.worker is not None:
            asyncio.get_running_loop().add_reader(self.worker.inbox.fileno(), self._on_inbox)
        self._last_version = self.registry.data_version()
        self._poll_task = asyncio.ensure_future(self._poll_registry())
        if self.control_enabled:
            await self._start_control()
        log.info("core listening on %s:%d, key %s", self.host, self.port, self.public_key_hex)
        return self

    async def stop(self):
        if self._server is not None:
            self._server.close()
        if self.worker is not None:
            asyncio.get_running_loop().remove_reader(self.worker.inbox.fileno())
        if self._control is not None:
            self._control.close()
            try:
                os.unlink(self.data_dir / self.control_file)
            except OSError:
                pass
        if self._poll_task is not None:
            self._poll_task.cancel()
        for t in list(self._conn_tasks):
            t.cancel()
        await asyncio.gather(*self._conn_tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if self.registry is not None:
            self.registry.close()

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
        try:
            reader, writer = await asyncio.open_connection(sock=sock, limit=READ_LIMIT)
        except OSError as e:
            log.info("a handed-over connection is gone already: %s", e)
            sock.close()
            return
        if raw:
            reader.feed_data(raw)      # read by the first worker past the handshake: first in line here
        await self._accept(reader, writer, noise_aio.NoiseStream(nc, reader, writer))

    async def _accept(self, reader, writer, stream=None):
        self._count += 1
        conn = Connection(self, reader, writer, self._count)
        if stream is not None:
            conn.stream, conn.adopted = stream, True
        self._all_conns[conn.session_id] = conn
        task = asyncio.current_task()
        self._conn_tasks.add(task)
        try:
            await conn.run()
        finally:
            self._conn_tasks.discard(task)

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

    def _save_report(self, rep):
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
                self._elevate(conn)

    def _elevate(self, conn):
        s = conn.session
        s.surface.guest = False
        if s.phase == cs.PHASE_OPEN:
            s.send_paired()
            conn.flush()
            log.info("%s approved: Paired sent on session %s", conn.device_id, conn.session_id)

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
            self._elevate(conn)

    def mint_token(self, ttl):
        return self.registry.mint_token(ttl)

    async def _request(self, device_id, send, timeout):
        conn = self._conn(device_id)
        id_ = send(conn.session)
        fut = conn.wait_terminal(id_)
        conn.flush()
        ev = await asyncio.wait_for(fut, timeout)
        if ev.error is not None:
            from alabama.v1 import operations_pb2 as ops
            raise RequestFailed("the device answered %s with Error %s: %s" % (ev.kind, ops.ErrorCode.Name(ev.error.code),
                                                                           ev.error.message),
                                ops.ErrorCode.Name(ev.error.code), ev.error.message)
        return ev.msg

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
        inline, stream = s.image_budget(None, to, lane)
        fitted = await asyncio.to_thread(images.fit_image, bytes(data), mime, max(inline, stream), list(p.accepts),
                                         p.width, p.height)
        if self._conn(device_id) is not conn:
            raise NotConnected("device %s reconnected while its image was prepared: show it again" % device_id)
        path = s.image_path(len(fitted.data), fitted.mime, to, lane)
        if path == "stream":
            id_ = await self._stream_image(conn, fitted, to, lane)
        else:   # inline; or None (a stream slot was taken meanwhile): push_image says why
            id_, path = s.push_image(fitted.data, fitted.mime, to, lane)
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
        self._conn(device_id).pipeline.stop_turn()

    # ---------------------------------------------------------------------- control endpoint
    async def _start_control(self):
        self._secret = secrets.token_hex(16)
        self._control = await asyncio.start_server(self._control_client, "127.0.0.1", 0)
        port = self._control.sockets[0].getsockname()[1]
        path = self.data_dir / self.control_file
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"port": port, "secret": self._secret, "pid": os.getpid()}, f)

    async def _control_client(self, reader, writer):
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            req = json.loads(line)
            if not secrets.compare_digest(str(req.get("secret", "")), self._secret):
                raise CoreError("bad control secret", "DENIED")
            result = await self._control_op(req)
            resp = {"ok": True, "result": result}
        except (CoreError, asyncio.TimeoutError, ValueError, KeyError, OSError) as e:
            resp = {"ok": False, "error": str(e) or type(e).__name__, "code": getattr(e, "code", type(e).__name__)}
        except Exception as e:  # noqa: BLE001
            log.exception("control request failed")
            resp = {"ok": False, "error": str(e), "code": "INTERNAL"}
        writer.write((json.dumps(resp) + "\n").encode())
        try:
            await writer.drain()
        finally:
            writer.close()

    async def _control_op(self, req):
        from google.protobuf import json_format
        op = req["op"]
        did = req.get("device")
        if did:
            did = self.registry.find(did).device_id
        if op == "invoke":
            msg = await self.invoke(did, req["name"], req.get("arguments") or "{}", req.get("timeout", 10.0))
        elif op == "setting":
            v = surface_pb2.SettingValue()
            json_format.ParseDict(req["value"], v)
            msg = await self.write_setting(did, req["key"], v)
        elif op == "request_capture":
            msg = await self.request_capture(did, req["ref"], req.get("image_source", 0))
        elif op == "render_text":
            return {"id": await self.render_text(did, req["text"])}
        elif op == "show_image":
            shown = await self.show_image(did, pathlib.Path(req["path"]).read_bytes(), req["mime"])
            im = shown.image
            return {"id": shown.id, "path": shown.path, "mime": im.mime, "bytes": len(im.data), "size": list(im.size),
                    "original_size": list(im.original_size) if im.original_size else None, "changed": im.changed}
        elif op == "health":
            out = {}
            for d in list(self.connections):
                try:
                    out[d] = await self.device_health(d, req.get("timeout", 5.0))
                except CoreError:
                    pass
            return out
        elif op == "status":
            out = {"connections": {d: c.session.report.as_dict() for d, c in self.connections.items()}}
            if self.worker is not None:
                out["worker"] = {"index": self.worker.index, "handed_off": self.handed_off,
                                 "handoff_failures": self.handoff_failures, "adopted": self.adopted}
            return out
        else:
            raise CoreError("unknown control op %r" % op, "BAD_OP")
        return json_format.MessageToDict(msg)


class ImageShown:
    """What ``CoreServer.show_image`` sent: ``id`` (the Render or ImageRenderOpen id), ``path`` ("inline" or
    "stream") and ``image`` (the images.FittedImage: data, mime, size, original_size, changed)."""

    def __init__(self, id_, path, image):
        self.id, self.path, self.image = id_, path, image

    def __repr__(self):
        return "ImageShown(id=%d, %s, %r)" % (self.id, self.path, self.image)


async def control_call(data_dir, req, timeout=30.0):
    """Send one request to a running server's control endpoint (used by the CLI). A core of several
    workers (workers.py) lists one control file per worker: a device request goes to each in turn and
    the answer of the one serving the device counts; ``status`` merges every worker's connections."""
    path = pathlib.Path(data_dir) / CONTROL_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        raise NotConnected("no running core for %s: start it with `alabama core serve --data %s`" % (data_dir, data_dir))
    if "workers" not in info:
        return await _control_one(data_dir, info, req, timeout)
    infos = []
    for name in info["workers"]:
        try:
            infos.append(json.loads((pathlib.Path(data_dir) / name).read_text()))
        except (OSError, ValueError):
            raise NotConnected("the core for %s lost worker file %s: restart `alabama core serve`" % (data_dir, name))
    if req.get("op") == "status":
        merged, ws = {}, []
        for i in infos:
            r = await _control_one(data_dir, i, req, timeout)
            merged.update(r["connections"])
            ws.append(r.get("worker"))
        return {"connections": merged, "workers": ws}
    if req.get("op") == "health":          # every worker's connected devices
        merged = {}
        for i in infos:
            merged.update(await _control_one(data_dir, i, req, timeout))
        return merged
    last = None
    for i in infos:
        try:
            return await _control_one(data_dir, i, req, timeout)
        except CoreError as e:
            if e.code != NotConnected.code:
                raise
            last = e
    raise last


async def _control_one(data_dir, info, req, timeout):
    req = dict(req, secret=info["secret"])
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", info["port"])
    except OSError:
        raise NotConnected("the core for %s is not running (stale %s): start it with `alabama core serve`"
                           % (data_dir, CONTROL_FILE))
    writer.write((json.dumps(req) + "\n").encode())
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), timeout)
    writer.close()
    resp = json.loads(line)
    if not resp["ok"]:
        if resp.get("code") == NotConnected.code:
            raise NotConnected(resp["error"])
        raise CoreError(resp["error"], resp.get("code"))
    return resp["result"]
