"""The bench's core side: a reference core on its own asyncio thread behind a controllable TCP relay.

Responsible for bringing up ``alabama.core.server.CoreServer`` (fresh data dir per scenario), recording
every plaintext frame both ways into the scenario's ``Timeline``, and the relay the board connects to:
it forwards bytes untouched (the wire stays end-to-end Noise) but can go *silent* (keep the TCP
connection open and swallow everything: a hung or half-open core), *cut* connections, and survive a
core restart so the board's address never changes. It also lets a scenario put raw frames on the
wire (an unknown Envelope arm, unknown fields, an oversize frame) the core's API would never send.
It never knows what board is on the other end.
"""
import asyncio
import logging
import threading
import time
import weakref

from alabama.core.server import CoreServer

from .timeline import CORE_TO_SAT, SAT_TO_CORE, StreamRecorder

log = logging.getLogger("alabama.hil.core")

#: Bytes the relay reads per call.
RELAY_CHUNK = 1 << 16


class BenchError(Exception):
    """Something on the bench (not the board under test) failed: the scenario errors, not fails."""


class Relay:
    """TCP relay board -> core, with silence/cut controls and connect/close notes on the timeline."""

    def __init__(self, host, port, target, timeline_fn, on_event=None):
        self.host, self.port = host, port
        self.target = target            # () -> (host, port) of the live core, or None while it is down
        self.timeline_fn = timeline_fn
        self.on_event = on_event or (lambda *a: None)
        self.links = []
        self.server = None
        self.count = 0
        self.pending = []                # Rules armed on the next link that opens (arm_next)
        self.refuse = False              # accept and close at once (a core host that is down)
        self.fired = []                  # (t_monotonic, link n, rule, chunk offset)

    async def start(self):
        self.server = await asyncio.start_server(self._client, self.host, self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self):
        if self.server is not None:
            self.server.close()
        for link in list(self.links):
            link.close()
        if self.server is not None:
            await self.server.wait_closed()

    async def _client(self, reader, writer):
        self.count += 1
        n = self.count
        tl = self.timeline_fn()
        peer = writer.get_extra_info("peername")
        tl.note("board connects (TCP #%d from %s:%s)" % (n, peer[0], peer[1]) if peer else "board connects")
        self.on_event("connect", n, time.monotonic())
        tgt = None if self.refuse else self.target()
        if tgt is None:
            tl.note("core is down: connection #%d refused" % n)
            self.on_event("refused", n, time.monotonic())
            writer.close()
            return
        try:
            ur, uw = await asyncio.open_connection(*tgt)
        except OSError as e:
            tl.note("core unreachable (%s): connection #%d closed" % (e, n))
            self.on_event("refused", n, time.monotonic())
            writer.close()
            return
        link = _Link(n, reader, writer, ur, uw, self)
        for rule in self.pending:
            link.arm(rule)
        self.pending = []
        self.links.append(link)
        try:
            await link.run()
        finally:
            self.links.remove(link)
            self.on_event("closed", n, time.monotonic(), link.closed_by)
            self.timeline_fn().note("TCP #%d closed by the %s" % (n, link.closed_by or "bench"))

    def silence(self):
        """Every live connection goes silent: nothing reaches either side any more, nothing is closed."""
        for link in self.links:
            link.silent = True
        return len(self.links)

    def cut(self):
        """Close every live connection at once (both directions)."""
        k = len(self.links)
        for link in list(self.links):
            if link.closed_by is None:
                link.closed_by = "bench (cut)"
            link.close()
        return k

    # -- fault injection (alabama.hil.faults); call on the relay's loop -----------------------------
    def arm(self, rule):
        """Arm ``rule`` on every live link (a message-relative rule without ``msg``: the next message)."""
        for link in self.links:
            link.arm(rule if len(self.links) == 1 else Rule(rule.kind, rule.dir, rule.byte, rule.msg, rule.frac,
                                                            rule.on_fire))
        return len(self.links)

    def arm_next(self, rule):
        """Arm ``rule`` on the next link that opens (e.g. a cut inside the next Noise handshake)."""
        self.pending.append(rule)

    def delay(self, up_s=0.0, down_s=0.0):
        """Hold every chunk this long before forwarding it, per direction, on the live links (0: none)."""
        for link in self.links:
            link.delay_s[UP], link.delay_s[DOWN] = up_s, down_s
        return len(self.links)

    def _fired(self, link, rule, off):
        self.fired.append((time.monotonic(), link.n, rule, off))
        self.timeline_fn().note("bench: %s fired on TCP #%d (%s byte %d)" % (rule.kind, link.n, rule.dir, rule.byte))
        if rule.on_fire is not None:
            rule.on_fire(link, rule)


#: Directions of a relayed byte stream.
UP, DOWN = "up", "down"           # board -> core, core -> board
#: Noise-over-TCP message prefix (spec §5.1.2): 2-byte big-endian length.
NOISE_PREFIX = 2


class Rule:
    """One armed fault on a link's byte stream in direction ``dir_`` (UP: board -> core, DOWN: core -> board).

    ``kind``: "cut" (close both directions), "stall" (stop forwarding both ways, keep TCP open) or
    "flip" (xor one byte with 0x01 and keep going). Where: at absolute byte offset ``byte`` of the
    direction, or in Noise message ``msg`` (0-based index in that direction; ``msg=None`` with no
    ``byte``: the next message that starts after arming) at ``frac`` of it: a cut or stall lands at
    ``start + floor(frac * (2 + len))`` (the length prefix included), a flip at ``start + 2 +
    floor(frac * len)`` (always inside the ciphertext, so the receiver's AEAD must fail: R5-a)."""

    def __init__(self, kind, dir_, byte=None, msg=None, frac=0.0, on_fire=None):
        if kind not in ("cut", "stall", "flip") or dir_ not in (UP, DOWN):
            raise BenchError("bad relay rule %s/%s" % (kind, dir_))
        self.kind, self.dir, self.byte, self.msg, self.frac = kind, dir_, byte, msg, frac
        self.on_fire = on_fire
        self.armed_at = None        # the direction's message count when armed (msg=None rules)
        self.fired = False

    def __repr__(self):
        where = "byte %d" % self.byte if self.byte is not None else "msg %s at %.2f" % (
            "next" if self.msg is None else self.msg, self.frac)
        return "Rule(%s %s %s)" % (self.kind, self.dir, where)


class _Tracker:
    """Where the Noise messages of one direction start (the relay sees only ciphertext, but the 2-byte
    length prefixes of spec §5.1.2 are in the clear)."""

    def __init__(self):
        self.pos = 0                # bytes seen
        self.count = 0              # messages whose prefix has been seen
        self._skip = 0              # body bytes of the current message still to come
        self._pfx = b""
        self._start = 0

    def feed(self, data):
        """Consume ``data``; returns [(index, start, body_len)] for each message whose prefix completes in it."""
        out = []
        i, end = 0, len(data)
        while i < end:
            if self._skip:
                k = min(self._skip, end - i)
                self._skip -= k
                i += k
                continue
            if not self._pfx:
                self._start = self.pos + i
            take = bytes(data[i:i + NOISE_PREFIX - len(self._pfx)])
            self._pfx += take
            i += len(take)
            if len(self._pfx) == NOISE_PREFIX:
                n = int.from_bytes(self._pfx, "big")
                out.append((self.count, self._start, n))
                self.count += 1
                self._pfx = b""
                self._skip = n
        self.pos += end
        return out


class _Link:
    def __init__(self, n, dr, dw, ur, uw, relay):
        self.n = n
        self.dr, self.dw, self.ur, self.uw = dr, dw, ur, uw
        self.relay = relay
        self.silent = False
        self.closed_by = None
        self.rules = []             # armed Rule objects (relay.arm / relay.arm_next)
        self.delay_s = {UP: 0.0, DOWN: 0.0}
        self.track = {UP: _Tracker(), DOWN: _Tracker()}
        self.sent = {UP: 0, DOWN: 0}         # bytes forwarded per direction
        self.t_open = time.monotonic()

    def arm(self, rule):
        rule.armed_at = self.track[rule.dir].count
        self.rules.append(rule)
        return rule

    def _resolve(self, rule, msgs):
        """Give a message-relative rule its absolute offset once its message's prefix has been seen."""
        for idx, start, n in msgs:
            if (rule.msg is not None and idx == rule.msg) or (rule.msg is None and idx >= rule.armed_at):
                if rule.kind == "flip":
                    rule.byte = start + NOISE_PREFIX + min(n - 1, int(rule.frac * n)) if n else None
                else:
                    rule.byte = start + min(NOISE_PREFIX + n - 1, int(rule.frac * (NOISE_PREFIX + n)))
                return

    def _apply(self, dir_, data):
        """The bytes of ``data`` to forward now and the rule that stops forwarding after them (or None)."""
        tr = self.track[dir_]
        base = tr.pos
        msgs = tr.feed(data)
        stop = None
        buf = None
        for rule in self.rules:
            if rule.dir != dir_ or rule.fired:
                continue
            if rule.byte is None:
                self._resolve(rule, msgs)
            if rule.byte is None or not base <= rule.byte < base + len(data):
                continue
            off = rule.byte - base
            rule.fired = True
            if rule.kind == "flip":
                buf = bytearray(data) if buf is None else buf
                buf[off] ^= 0x01
            elif stop is None or off < stop[0]:
                stop = (off, rule)
            self.relay._fired(self, rule, off)
        out = buf if buf is not None else data
        if stop is not None:
            return out[:stop[0]], stop[1]
        return out, None

    async def _pump(self, src, dst, who, dir_):
        try:
            while True:
                data = await src.read(RELAY_CHUNK)
                if not data:
                    if self.closed_by is None:
                        self.closed_by = who
                    return
                if self.silent:
                    continue
                if self.rules:
                    data, stop = self._apply(dir_, data)
                else:
                    self.track[dir_].feed(data)
                    stop = None
                if self.delay_s[dir_]:
                    await asyncio.sleep(self.delay_s[dir_])
                if data and not self.silent:
                    dst.write(data)
                    self.sent[dir_] += len(data)
                    await dst.drain()
                if stop is not None:
                    if stop.kind == "cut":
                        self.closed_by = "bench (cut at %s byte %d)" % (dir_, stop.byte)
                        self.close()
                        return
                    self.silent = True
        except (ConnectionError, OSError, asyncio.CancelledError):
            if self.closed_by is None:
                self.closed_by = who + " (reset)"

    async def run(self):
        a = asyncio.ensure_future(self._pump(self.dr, self.uw, "board", UP))
        b = asyncio.ensure_future(self._pump(self.ur, self.dw, "core", DOWN))
        self._tasks = (a, b)
        await asyncio.wait((a, b), return_when=asyncio.FIRST_COMPLETED)
        self.close()
        await asyncio.gather(a, b, return_exceptions=True)

    def close(self):
        for t in getattr(self, "_tasks", ()):
            t.cancel()
        for w in (self.dw, self.uw):
            try:
                w.close()
            except Exception:  # noqa: BLE001
                pass


class CoreHost:
    """A reference core + relay on a private event-loop thread; every method is called from the test thread."""

    def __init__(self, data_dir, timeline, bind="127.0.0.1", relay_port=0, **core_kwargs):
        self.data_dir = data_dir
        self.timeline = timeline
        self.bind = bind
        self.relay_port = relay_port
        self.core_kwargs = dict(core_kwargs)
        self.core_kwargs.setdefault("control", False)
        self.server = None
        self.relay = None
        self.loop = None
        self.thread = None
        self.link_events = []            # (kind, n, t_monotonic, ...)
        self.recorders = weakref.WeakKeyDictionary()   # Connection -> recorders (never keeps one alive)
        self.old_reports = []            # reports of cores stopped by restart()

    # ------------------------------------------------------------------ thread plumbing
    def _run_loop(self, ready):
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        ready.set()
        self.loop.run_forever()
        self.loop.close()

    def call(self, coro, timeout=30.0):
        """Run a coroutine on the core's loop and return its result (exceptions propagate)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise

    def call_soon(self, fn, *args):
        """Run a plain function on the loop thread and return its result."""
        async def _f():
            return fn(*args)
        return self.call(_f())

    # ------------------------------------------------------------------ lifecycle
    def start(self):
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run_loop, args=(ready,), name="hil-core", daemon=True)
        self.thread.start()
        ready.wait(10)
        self.call(self._start_core())
        self.relay = Relay(self.bind, self.relay_port, self._target, lambda: self.timeline, self._link_event)
        self.call(self.relay.start())
        return self

    async def _start_core(self):
        self.server = CoreServer(self.data_dir, host="127.0.0.1", port=0, frame_observer=self._observe,
                                 **self.core_kwargs)
        await self.server.start()

    def _target(self):
        if self.server is None or not self.server.listening:
            return None
        return ("127.0.0.1", self.server.port)

    def _link_event(self, kind, n, t, *rest):
        self.link_events.append((kind, n, t) + rest)

    @property
    def address(self):
        """(host, port) the board must connect to: the relay."""
        return self.bind, self.relay.port

    @property
    def public_key_hex(self):
        return self.server.public_key_hex

    @property
    def public_key(self):
        return self.server.public_key

    def restart(self, down_s=0.0, **changes):
        """Stop the core (sessions end, board connections drop) and start a new one on the same data dir
        (same key, same registry) after ``down_s`` seconds; ``changes`` override core options."""
        self.timeline.note("core stops")
        self.old_reports.extend(r.as_dict() for r in self.server.reports)
        self.call(self.server.stop())
        self.server = None
        if down_s:
            time.sleep(down_s)
        self.core_kwargs.update(changes)
        self.call(self._start_core())
        self.timeline.note("core starts again")

    def stop(self):
        if self.loop is None:
            return
        try:
            if self.relay is not None:
                self.call(self.relay.stop(), 10)
            if self.server is not None:
                self.call(self.server.stop(), 15)
        except Exception as e:  # noqa: BLE001 — teardown must go on
            log.warning("core teardown: %s", e)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop = None

    # ------------------------------------------------------------------ recording
    def _observe(self, conn, data):
        """CoreServer.frame_observer: incoming plaintext; on a connection's first call, observe its output
        too (CoreSession.on_frame_out: every frame as it goes to the writer)."""
        rec = self.recorders.get(conn)
        if rec is None:
            sid = conn.session_id
            rec = self.recorders[conn] = (StreamRecorder(self.timeline, SAT_TO_CORE, sid),
                                          StreamRecorder(self.timeline, CORE_TO_SAT, sid), [0])
            count = rec[2]

            def out(frame):
                count[0] += 1
            conn.session.on_frame_out.append(out)     # before the recorder: a listener sees its own frame counted
            conn.session.on_frame_out.append(rec[1].feed)
        rec[0].feed(data)

    def frames_out(self, conn):
        """Frames the core has handed to ``conn``'s writer so far (one Noise transport message each: the core
        writes frame by frame), counting the one being written when called from a Timeline listener."""
        rec = self.recorders.get(conn)
        return rec[2][0] if rec is not None else 0

    # ------------------------------------------------------------------ controls used by scenarios
    def silence(self):
        n = self.call_soon(self.relay.silence)
        self.timeline.note("bench: the core goes silent on %d connection(s) (TCP stays open)" % n)
        return n

    def cut(self):
        n = self.call_soon(self.relay.cut)
        self.timeline.note("bench: %d connection(s) cut" % n)
        return n

    # -- fault injection (alabama.hil.faults) ---------------------------------------------------------
    def arm(self, rule):
        """Arm a corehost.Rule on the live link(s); returns how many."""
        return self.call_soon(self.relay.arm, rule)

    def arm_next(self, rule):
        """Arm a corehost.Rule on the next link the board opens."""
        self.call_soon(self.relay.arm_next, rule)

    def delay(self, up_s=0.0, down_s=0.0):
        n = self.call_soon(self.relay.delay, up_s, down_s)
        self.timeline.note("bench: relay delay %.0f ms up, %.0f ms down on %d connection(s)"
                           % (1000 * up_s, 1000 * down_s, n))
        return n

    def accounting(self):
        """CoreServer.state_accounting() of the running core, read on its thread (None while it is down)."""
        if self.server is None:
            return None
        return self.call_soon(self.server.state_accounting)

    def inject(self, device_id, frame, note=None):
        """Put a raw, already-framed plaintext frame on the device's session (ahead of queued bulk)."""
        def _do():
            conn = self.server.connections.get(device_id)
            if conn is None:
                raise BenchError("device %s has no live session to inject into" % device_id)
            conn.session.send_raw(frame)
            conn.flush()
        if note:
            self.timeline.note(note)
        self.call_soon(_do)

    def session_call(self, device_id, fn):
        """Run fn(session) on the loop thread, then flush; returns its result (core API not in CoreServer)."""
        def _do():
            conn = self.server.connections.get(device_id)
            if conn is None:
                raise BenchError("device %s has no live session" % device_id)
            r = fn(conn.session)
            conn.flush()
            return r
        return self.call_soon(_do)

    def devices(self):
        return list(self.server.connections) if self.server else []

    def wait_device(self, device_id=None, timeout=20.0):
        """Block until a (the) device has an admitted session; returns its device_id or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.server is not None:
                for did, conn in list(self.server.connections.items()):
                    if (device_id is None or did == device_id) and conn.session is not None \
                            and conn.session.phase == "OPEN":
                        return did
            time.sleep(0.02)
        return None

    def reports(self):
        live = [r.as_dict() for r in self.server.reports] if self.server is not None else []
        return self.old_reports + live
