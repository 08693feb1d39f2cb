"""One accepted connection of the reference core: the transport's bytes in, a CoreSession's frames out.

Responsible for one connection's I/O: the Noise responder handshake, then every received byte through
``NoiseConnection.decrypt_stream`` into the session and the voice pipeline (ONE read path, driven by
the transport's ``data_received``: no StreamReader buffer, no task wake-up per read), the writer (one
Noise message per frame, control first), Pings and liveness, and the hand-off of a connection to the
worker that owns its device. The frame rules are the session's (the slow-reader backlog too,
``CoreSession.shed_if_backlog``); admission and the registry are ``admission``'s. It applies the three rules that
need a clock, each a timer here: the core's Ping every interval (R10.2-a), the silence after which a satellite is
dropped (R10.1-b, ``liveness_timeout``: one max-size frame of queueing allowed each way) and the write that waits
too long for the peer to read (R10.1-b, ``slow_reader``).
"""
import asyncio
import json
import logging
import time

from ..noise import aio as noise_aio
from ..noise.state import NoiseError
from ..noise.transport import NoiseConnection
from . import admission
from . import registry as reg
from . import session as cs
from .errors import NotConnected
from .pipeline import VoicePipeline

#: The connection's log lines keep the name they had when this was part of server.py (log readers match it).
log = logging.getLogger("alabama.core.server")

#: Liveness (R10.1-b): a satellite that sends nothing for LIVENESS_PINGS ping intervals plus one
#: max-size frame each way at LIVENESS_RATE_BPS (+ 1 s) is presumed gone (only while pinging).
LIVENESS_PINGS = 3
LIVENESS_RATE_BPS = 100_000
#: Kernel/transport buffering kept small so a queued Ping waits behind at most a frame or two (R10.1-a).
WRITE_HIGH_WATER = 64 * 1024
#: The kernel send buffer is kept small for the same reason (spec §10.1: writes stay frame-granular so
#: the kernel cannot queue bulk bytes ahead of a waiting Ping).
SEND_BUFFER_BYTES = 64 * 1024
#: The StreamWriter's reader side is never fed (bytes go to the Connection); its limit is nominal.
READ_LIMIT = 1 << 17
HEALTH_EVENT = "device.health"      # the satellite's health report (firmware/satellite/health.py, docs/ota.md)
#: A connection handed to another worker waits at most this long for its handshake reply to leave.
HANDOFF_FLUSH_S = 2.0


def liveness_timeout(ping_interval, sat_max_frame_bytes, core_max_frame_bytes):
    """Seconds of total silence after which the core drops a satellite it pings (R10.1-b): LIVENESS_PINGS
    intervals, plus the time one max-size frame takes each way at LIVENESS_RATE_BPS (a Ping may queue
    behind one of the core's frames, its answer behind one of the satellite's: §10.1), plus 1 s."""
    frames = (sat_max_frame_bytes + core_max_frame_bytes) * 8.0 / LIVENESS_RATE_BPS
    return LIVENESS_PINGS * ping_interval + frames + 1.0


class Connection:
    """One accepted TCP connection: Noise, then a CoreSession, its pipeline and its writer."""

    def __init__(self, server, number, stream=None, unread=b""):
        self.server = server
        self.writer = None           # an asyncio.StreamWriter over the transport (attach)
        self.peer = "?:?"
        self.session_id = "%ss%d" % (server.session_prefix, number)
        self.stream = stream         # the established NoiseStream (given: adopted from another worker)
        self.adopted = stream is not None
        self._noise = None           # the NoiseConnection while the handshake runs
        self._handshake = None       # Future: the handshake's outcome
        self._read_done = None       # Future: set once reading ends (the session reads from then on)
        self._early = bytearray(unread)   # bytes received after the handshake, before the session reads
        self._early_end = None       # (exc,) when the peer closed or reset before the session read
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

    def attach(self, transport, writer):
        """The transport is up (``Wire.connection_made``): a responder's handshake starts."""
        self.writer = writer
        self.peer = "%s:%s" % (writer.get_extra_info("peername") or ("?", "?"))[:2]
        self._handshake = asyncio.get_running_loop().create_future()
        if self.stream is None:
            self._noise = NoiseConnection(False, self.server.static_private)
        else:
            self.stream.writer = writer
            self._handshake.set_result(None)

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
                await asyncio.wait_for(self._handshake, srv.handshake_timeout)
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
            self.pipeline = VoicePipeline(self, srv.brain, srv.deferred, srv.wake)
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

    def _admit(self, surface):
        return admission.admit(self, surface)

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
        if transport.is_closing() or transport.get_write_buffer_size() or self._early_end is not None:
            log.info("%s: not handed to worker %d (closing, unsent or unread state): dropped", self.peer,
                     w.owner(self.device_id))
            srv.handoff_failures += 1
            return
        raw = bytes(self._early)
        self._early.clear()
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
        """Feed the session until the connection ends: the transport's bytes go straight from
        ``data_received`` (``Wire``) through Noise, the session and the pipeline; this task only waits
        for the end (and for the Hello, within hello_timeout)."""
        srv = self.server
        self._read_done = done = asyncio.get_running_loop().create_future()
        # What arrived with the handshake's last message (decrypted already), then what came after it.
        try:
            data = self.stream.conn.read_plaintext()
        except NoiseError as e:
            self._noise_failed(e)
            data = b""
        if data:
            self._on_plaintext(data)
        early, self._early = bytes(self._early), bytearray()
        if early:
            self._on_bytes(early)
        if self._early_end is not None:
            self._on_lost(self._early_end[0])
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

    # -- the protocol-driven read path (called from Wire) ----------------------------------------
    def _on_handshake_bytes(self, raw):
        """The Noise responder handshake (spec §5.1), fed by ``data_received``; bytes past its last
        message stay in the NoiseConnection (decrypted) for the session."""
        hs, nc = self._handshake, self._noise
        if hs.done():
            return
        try:
            nc.receive(raw)
            out = nc.data_to_send()
        except NoiseError as e:
            hs.set_exception(e)
            return
        if out:
            self.writer.write(out)
        if nc.handshake_done:
            self.stream = noise_aio.NoiseStream(nc, None, self.writer)
            self._noise = None
            hs.set_result(None)

    def _handshake_ended(self, exc):
        """The peer closed (``exc`` None) or reset the connection during the handshake."""
        hs, nc = self._handshake, self._noise
        if hs is None or hs.done():
            return
        if exc is not None:
            hs.set_exception(exc if isinstance(exc, OSError) else ConnectionError(str(exc)))
            return
        try:
            nc.receive_eof()
        except NoiseError as e:
            hs.set_exception(e)
            return
        hs.set_exception(NoiseError("EOF", "the peer closed the connection during the Noise handshake"))

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
        done = self._read_done
        if done is None:
            if self.stream is None:
                self._on_handshake_bytes(raw)
            else:
                self._early += raw          # the session does not read yet (or the connection is handed off)
            return
        if done.done():
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
            on_chunk = self.pipeline.on_chunk
            for ev in events:
                if type(ev) is cs.ChunkReceived:
                    on_chunk(ev)            # the per-frame path: straight to the pipeline
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
        done = self._read_done
        if done is None:
            if self.stream is None:
                self._handshake_ended(None)
            elif self._early_end is None:
                self._early_end = (None,)
            return
        if done.done():
            return
        try:
            self.stream.conn.receive_eof()
        except NoiseError as e:
            if e.code != "EOF":
                self._noise_failed(e)
                return
            # The link was cut inside a Noise message: a transport event, not a decrypt failure (R5-a is for a
            # tag that fails to verify). Counted in the report and on the server, not a conformance flag.
            self.session.report.connection_lost = "EOF in the middle of a Noise message"
            self.server.links_cut += 1
            self.session.close("connection lost in the middle of a Noise message")
            self._finish_read()
            return
        self.session.close("peer closed")
        self._finish_read()

    def _on_lost(self, exc):
        done = self._read_done
        if done is None:
            if self.stream is None:
                self._handshake_ended(exc)
            elif self._early_end is None or exc is not None:
                self._early_end = (exc,)
            return
        if done.done():
            return
        if exc is None:
            self._on_eof()
        else:
            self.session.close("connection reset")
            self._finish_read()

    def _dispatch(self, ev):
        """One session event: the connection's own handling (table below), then the pipeline's."""
        h = _HANDLERS.get(type(ev))
        if h is not None:
            h(self, ev)
        self.pipeline.on_event(ev)

    def _on_hello_accepted(self, ev):
        admission.on_admitted(self, ev)
        if self.server.ping_interval:
            self.tasks.add(asyncio.ensure_future(self._ping_loop()))

    def _on_terminal(self, ev):
        fut = self.waiters.pop(ev.id, None)
        if fut is not None and not fut.done():
            fut.set_result(ev)

    def _on_ping_round(self, ev):
        self.ping_rounds.append((ev.offset_us, ev.rtt_us))

    def _on_close(self, ev):
        self._closing = True

    def _on_report(self, ev):
        log.info("%s: %r", self.device_id, ev)
        if type(ev) is cs.EventReceived and ev.msg.id == HEALTH_EVENT:
            try:
                self.health_event = json.loads(ev.msg.metadata)   # validated against its schema (R8.2-e)
            except ValueError:
                pass

    def replaced(self):
        """A newer connection of the same device was admitted: this session closes, its socket goes."""
        self.session.close("replaced by a new connection of the same device")
        self._closing = True
        self._wake.set()
        self.writer.close()

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
        """A Future resolved with the TerminalReceived on ``id_`` (NotConnected if the connection ends first)."""
        fut = asyncio.get_running_loop().create_future()
        self.waiters[id_] = fut
        return fut

    def spawn(self, coro):
        """Run ``coro`` as this connection's task: cancelled and awaited when the connection ends."""
        t = asyncio.ensure_future(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

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
            rep.ended = time.time()
            srv.live_reports.pop(self.session_id, None)
            srv.finished_reports.append(rep)
            srv.save_report(rep)
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


#: Connection._dispatch: what the connection itself does with a session event (the pipeline gets every one).
_HANDLERS = {cs.HelloAccepted: Connection._on_hello_accepted, cs.TerminalReceived: Connection._on_terminal,
             cs.PingRound: Connection._on_ping_round, cs.CloseConnection: Connection._on_close,
             cs.SettingReported: Connection._on_report, cs.EventReceived: Connection._on_report,
             cs.PresenceReceived: Connection._on_report}


class Wire(asyncio.Protocol):
    """The transport's protocol from accept to close: received bytes go straight to the Connection
    (handshake, then decrypt -> session -> pipeline, synchronously). Flow control and connection loss
    are forwarded to a StreamReaderProtocol as well, so the Connection's StreamWriter (write, drain,
    close, wait_closed) works as usual; its StreamReader is never fed."""

    def __init__(self, conn, on_made):
        self.conn, self.on_made = conn, on_made
        self.reader = asyncio.StreamReader(limit=READ_LIMIT)     # never fed: see the class docstring
        self.inner = asyncio.StreamReaderProtocol(self.reader)

    def connection_made(self, transport):
        self.inner.connection_made(transport)
        self.conn.attach(transport, asyncio.StreamWriter(transport, self.inner, self.reader,
                                                         asyncio.get_running_loop()))
        self.on_made(self.conn)

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
