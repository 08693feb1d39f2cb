"""`alabama conformance satellite --listen HOST:PORT`: a scripted core that scores any satellite, one row per ID.

Responsible for listening as a core (Noise responder over TCP, the host Noise binding), admitting the satellite
that connects, driving it through every satellite-side requirement a core can observe over the wire (including
the ones that need the satellite to act: a button press, through a control hook or a prompt) and the verdict of
each: pass, fail (with the frames that show it), not observable (and why). Every wait is bounded (STEP_S, CONNECT_S,
WATCH_S), so a peer that is not Alabama, stalls or floods ends in a verdict row, never a hang. Frames are read and
written by the test peer of ``core.testsat`` (its reader, ``expect`` and builders) and judged here; the rows are
``rows.Row``. Not for: scoring a core (``corekit``) or running our firmware (the caller starts the satellite).
"""
import asyncio
import json
import os
import time

from alabama.v1 import envelope_pb2, operations_pb2 as ops, surface_pb2
from alabama.wire import frame as wire

from ..core import testsat as ts
from ..noise import aio as noise_aio
from ..noise.state import NoiseError, public_key
from ..noise.transport import MAX_OFFER, NoiseConnection, PROTOCOL_NAMES
from . import probes as P, rows as R
from .probes import QUIET_S, STEP_S, CheckFailed

_summary, _why = P.summary, P.why

#: Seconds the kit waits for the satellite's first connection (someone may have to power it on).
CONNECT_S = 120.0
#: Seconds the kit waits for a reconnection after it closed a session (a satellite's backoff is seconds).
RECONNECT_S = 30.0
#: Seconds the kit watches for a forbidden reconnection (XX after a failed IK).
WATCH_S = 8.0
#: Seconds one pressed-and-held button may take to open its capture (a person reading a prompt).
PRESS_S = 30.0
#: The receive limit the kit advertises in Accepted: a 20 ms chunk of 16 kHz audio (640 B) does not fit, so a
#: satellite must cut its capture chunks to it (R6.1-b is tested by every one of them).
SMALL_FRAME = 600
#: Captures the kit holds at once (Accepted.max_concurrent_streams).
KIT_STREAMS = 4
_E = ops.ErrorCode
#: Ops a satellite opens an exchange with: their ids are satellite-minted (odd, from 1, by 2: R6.3-a).
SAT_MINTED = {"hello", "capture_open", "ping", "event", "upload_open", "text_input"}

#: The satellite-side requirements of ../shared/REQUIREMENTS.md (who S or S C) a core can observe, in its order.
ROWS = [
    ("R2.2-a", "unknown fields are ignored (a Ping with unknown fields is answered)"),
    ("R2.2-b", "an unknown Envelope arm is tolerated, the connection goes on"),
    ("R5-a", "a transport message that fails to decrypt ends the connection"),
    ("R5.1.2-a", "Noise messages as 2-byte big-endian length + body; frames re-cut from the plaintext"),
    ("R5.1.2-b", "a frame split over two Noise messages, two frames in one: both handled"),
    ("R6-a", "every frame is varint total_len, varint header_len, Envelope, tail"),
    ("R6.1-a", "the Hello fits one Noise transport message (<= 65519 B)"),
    ("R6.1-b", "no frame over the core's max_frame_bytes"),
    ("R6.3-a", "satellite ids odd, from 1, counting by 2"),
    ("R6.3-b", "a stream's frames carry its Open's id"),
    ("R7.2-a", "XX while no key is pinned, IK once it is"),
    ("R7.3-c", "under IK, a core with another static key gets no session"),
    ("R7.3-d", "the core key is not pinned on XX alone (next connection XX again)"),
    ("R7.3-e", "after Paired: the key pinned, every later connection IK"),
    ("R7.3-f", "with a pinned key, never a fallback to XX when IK fails"),
    ("R7.3-j", "after REJECTED_CLOSED, no automatic retry"),
    ("R8.2-a", "each CapabilityDescriptor's params match its kind"),
    ("R8.2-d", "tool names unique in the Hello; input_schema a JSON Schema object"),
    ("R10.2-a", "Ping answered on its id, t1 echoed, t2 <= t3"),
    ("R10.3-a", "after the core's StreamCancel the satellite stops the stream at once"),
    ("R10.3-b", "frames on a never-opened id are discarded (no answer but UNKNOWN_STREAM)"),
    ("R10.4-a", "RequestCapture answered by one CaptureOpen echoing correlation_ref, or Error UNAVAILABLE"),
    ("R10.4.1-a", "PipelineState never drives the microphone"),
    ("R10.8-a", "a MediaRenderOpen ends in exactly one PlaybackDone (or Error) on its id"),
    ("R10.10-a", "answers on the originator's id"),
    ("R10.10-b", "a notification (id 0) is never answered"),
    ("R10.10-c", "capture chunks: seq from 0, step 1"),
    ("R10.10-d", "no chunk after its stream's StreamEnd or StreamCancel"),
]
#: The satellite-side requirements this kit does not script, and why: listed so the table names every one of them.
UNOBSERVABLE = {
    "R5-b": "the device identity is the satellite's static key: the core side derives the fingerprint",
    "R6.1-c": "a permission (MAY) about what the satellite does with an over-limit frame; the kit sends none",
    "R7.3-g": "needs several discovered core candidates (DNS-SD), which the kit does not offer",
    "R7.3-h": "needs a user's factory reset or re-provisioning, which the kit cannot trigger",
    "R7.3-k": "no trust level is on the wire by construction; a satellite that needs Paired over IK shows in R7.3-e",
    "R8.2-e": "needs an Event with a metadata_schema that the satellite chooses to send",
    "R8.2-f": "needs a declared setting the kit may write without changing the device (not every satellite has one)",
    "R10.1-a": "needs a bulk RELIABLE transfer from the satellite (a DEFERRED upload), which the kit cannot ask for",
    "R10.1-b": "a timeout of minutes; the kit's steps are bounded to seconds",
    "R10.3-c": "a satellite declines a render it cannot play with UNAVAILABLE before its stream limit is reached",
    "R10.3-d": "a permission (MAY): reopening an ambient capture after a cancel",
    "R10.4-b": "a SHOULD about a satellite at capacity; the kit's RequestCapture finds it free",
    "R10.4-d": "needs a DEFERRED recording made while disconnected",
    "R10.4-e": "needs a LIVE capture cut by a reconnect, judged across two connections",
    "R10.4.1-b": "needs a render that ends before its capture's terminal; not scripted in this version",
    "R10.5-b": "the isolation of HTML_DISPLAY content is inside the device",
    "R10.10-e": "the kit sends no Tier 2 operation toward the core side that the satellite would have to unlock",
}
#: Their titles in the table.
UNOBSERVABLE_TITLES = {
    'R5-b': 'the device identity is its static key',
    'R6.1-c': 'an over-limit frame: FRAME_TOO_LARGE or a close (MAY)',
    'R7.3-g': 'several core candidates: IK against each',
    'R7.3-h': "a pinned key replaced only by a user's reset",
    'R7.3-k': 'IK-admitted devices need no Paired',
    'R8.2-e': 'Event metadata validates against its schema',
    'R8.2-f': 'SettingsWrite answered by SettingState on its id',
    'R10.1-a': 'Pings interleaved with a bulk transfer',
    'R10.1-b': 'liveness timeouts allow one max-size frame',
    'R10.3-c': 'core streams <= Hello.max_concurrent_streams',
    'R10.3-d': 'a fresh ambient capture after a cancel (MAY)',
    'R10.4-b': 'at capacity: supersede the ambient capture',
    'R10.4-d': 'DEFERRED resume without duplicates',
    'R10.4-e': 'a LIVE capture dies with its connection',
    'R10.4.1-b': "idle only on the capture's terminal",
    'R10.5-b': 'HTML_DISPLAY content isolated',
    'R10.10-e': 'never a Tier 2 operation the core has not unlocked',
}
_TITLES = dict(ROWS)
_TITLES.update(UNOBSERVABLE_TITLES)


class Peer(ts.TestSatellite):
    """The satellite as the kit sees it: the test peer's reader and builders over a responder's Noise stream,
    keeping what the kit sent (the rows' evidence)."""

    __test__ = False

    def __init__(self, kit, pattern, stream):
        super().__init__(kit.host, 0, auto_ping=True, auto_playback=False)     # a core answers the satellite's Pings
        self.kit, self.pattern, self.sent = kit, pattern, []
        self._next_id = 2                     # the kit mints core ids: even (R6.3-a)
        self.closed = asyncio.Event()
        self._new = asyncio.Condition()
        self.write_lock = asyncio.Lock()
        self.stream = stream
        self._reader_task = asyncio.ensure_future(self._read_loop())

    async def send(self, e, tail=b""):
        self.sent.append((time.monotonic(), e, len(tail)))
        try:
            await asyncio.wait_for(super().send(e, tail), STEP_S)
        except (ConnectionError, OSError, asyncio.TimeoutError, NoiseError):
            pass                                # a satellite that left: its rows say so

    def timeline(self, focus=None):
        return P.timeline(self, self.kit.t0, "core -> sat", "sat -> core", focus)


class Attempt:
    """One TCP connection to the kit: the protocol offered, and the Peer once the handshake completed."""

    def __init__(self, t, offer=None, peer=None, error=None):
        self.t, self.offer, self.peer, self.error = t, offer, peer, error

    def __repr__(self):
        return "Attempt(%s %s%s)" % (self.offer, "ok" if self.peer else "failed",
                                     ": %s" % self.error if self.error else "")


class SatKit:
    """The script: ``await SatKit(host, port).run()`` -> [Row] in ROWS order. ``press``: a callable(down: bool)
    that pushes/releases the satellite's button (a control hook), or None (the press row is then prompted on
    ``prompt`` — a callable(text) — or not observable). The bounds (``step_s``, ``connect_s``, ``reconnect_s``,
    ``watch_s``, ``press_s``) default to the module's constants; a bench that drives a board itself may shorten
    them."""

    def __init__(self, host, port, press=None, prompt=None, step_s=STEP_S, connect_s=CONNECT_S,
                 reconnect_s=RECONNECT_S, watch_s=WATCH_S, static_private=None, say=None, press_s=PRESS_S):
        self.host, self.port = host, port
        self.press, self.prompt, self.say = press, prompt, say or (lambda text: None)
        self.step_s, self.connect_s, self.reconnect_s, self.watch_s = step_s, connect_s, reconnect_s, watch_s
        self.press_s = press_s
        self.key = static_private or os.urandom(32)
        self.public = public_key(self.key)
        self.other_key = os.urandom(32)          # the "other core" of R7.3-c/f
        self.serve_key = self.key
        self.reject_closed = False
        self.t0 = time.monotonic()
        self.results = {}
        self.attempts = []
        self.peers = []
        self._arrived = None
        self.server = None
        self.hellos = []

    # -- the listener ---------------------------------------------------------------------------
    async def start(self):
        self._arrived = asyncio.Condition()
        self.server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader, writer):
        a = Attempt(time.monotonic())
        try:    # the whole handshake is bounded too: a peer trickling bytes cannot hold the kit
            a.peer = await asyncio.wait_for(self._handshake(reader, writer, a), 2 * self.step_s)
            self.peers.append(a.peer)
        except (NoiseError, EOFError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            a.error = _why(e)
            writer.close()
        self.attempts.append(a)
        async with self._arrived:
            self._arrived.notify_all()

    async def _handshake(self, reader, writer, a):
        """The responder's side, the offer read first (so an XX offer is seen even when nothing completes)."""
        head = await reader.readexactly(2)
        n = int.from_bytes(head, "big")
        if n > MAX_OFFER:
            raise NoiseError("UNSUPPORTED_PROTOCOL", "the first message is %d bytes, not a Noise protocol name: is "
                                                     "this an Alabama satellite?" % n)
        name = await reader.readexactly(n)
        a.offer = PROTOCOL_NAMES.get(name, name.decode("ascii", "replace")[:40])
        conn = NoiseConnection(False, self.serve_key)
        conn.receive(head + name)
        out = conn.data_to_send()
        while not conn.handshake_done:
            if out:
                writer.write(out)
            data = await reader.read(65536)
            if not data:
                raise EOFError("the satellite closed the connection during the handshake")
            conn.receive(data)
            out = conn.data_to_send()
        if out:
            writer.write(out)
        return Peer(self, conn.pattern, noise_aio.NoiseStream(conn, reader, writer))

    async def next_attempt(self, timeout, since):
        """The first connection attempt after index ``since`` within ``timeout`` s, or None."""
        deadline = time.monotonic() + timeout
        async with self._arrived:
            while len(self.attempts) <= since:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except asyncio.TimeoutError:
                    return None
        return self.attempts[since]

    async def session(self, timeout, since=None):
        """The next satellite that completes the handshake and sends its Hello; the kit answers Accepted (or
        Rejected{REJECTED_CLOSED} when told to). Returns (attempt, hello frame) or raises CheckFailed."""
        since = len(self.attempts) if since is None else since
        deadline = time.monotonic() + timeout
        while True:
            a = await self.next_attempt(max(0.0, deadline - time.monotonic()), since)
            if a is None:
                raise CheckFailed("no satellite connected to %s:%d within %.0f s" % (self.host, self.port, timeout))
            since += 1
            if a.peer is None:
                raise CheckFailed("a %s connection failed its handshake: %s" % (a.offer or "TCP", a.error))
            try:
                h = await a.peer.expect("hello", timeout=self.step_s)
            except AssertionError:
                raise CheckFailed("no Hello within %.0f s of the handshake%s" % (
                    self.step_s, " (the satellite closed)" if a.peer.closed.is_set() else "")) from None
            self.hellos.append((a.peer, h))
            hr = envelope_pb2.Envelope(id=h.id)
            if self.reject_closed:
                hr.hello_response.rejected.reason = ops.REJECTED_CLOSED
                await a.peer.send(hr)
                await asyncio.sleep(0.2)
                a.peer.stream.close()
            else:
                acc = hr.hello_response.accepted
                acc.max_frame_bytes, acc.max_concurrent_streams, acc.wire_version = SMALL_FRAME, KIT_STREAMS, 1
                await a.peer.send(hr)
            return a, h

    async def stop(self):
        for p in self.peers:
            try:
                p.stream.close()
            except Exception:  # noqa: BLE001 - a connection the satellite may have dropped already
                pass
        if self.server is not None:
            self.server.close()
            try:
                await asyncio.wait_for(self.server.wait_closed(), 2)
            except asyncio.TimeoutError:
                pass

    # -- helpers ----------------------------------------------------------------------------------
    def put(self, rid, verdict, detail="", peer=None, seconds=0.0, focus=None):
        if rid in self.results and self.results[rid].verdict == R.FAIL:
            return                              # a failure stays the row's verdict
        self.results[rid] = R.Row(rid, _TITLES[rid], verdict, detail, peer.timeline(focus) if peer else (), seconds)

    async def ping(self, p, what="a Ping"):
        return await P.ping(p, self.step_s, what)

    async def quiet(self, p, pred, seconds=QUIET_S):
        return await P.quiet(p, pred, seconds)

    # -- the run ----------------------------------------------------------------------------------
    async def run(self):
        await self.start()
        try:
            await self._script()
        finally:
            await self.stop()
        self.observe_all()
        for rid, _ in ROWS:
            if rid not in self.results:
                self.put(rid, R.NOT_OBSERVABLE, "the run ended before it could be observed (see the failed rows)")
        for rid, why in UNOBSERVABLE.items():
            self.put(rid, R.NOT_OBSERVABLE, why)
        return [self.results[rid] for rid, _ in ROWS] + [self.results[rid] for rid in UNOBSERVABLE]

    async def _script(self):
        self.say("conformance kit listening on %s:%d as a core; its static key is %s. Provision the satellite with "
                 "this address and no core key (a pairing token in its Hello is ignored) and start it."
                 % (self.host, self.port, self.public.hex()))
        try:
            a, h = await self.session(self.connect_s, since=0)
        except CheckFailed as e:
            for rid in ("R5.1.2-a", "R6-a"):
                self.put(rid, R.FAIL, str(e), self.attempts[-1].peer if self.attempts else None)
            return
        p = a.peer
        self.first = a
        self.put("R5.1.2-a", R.PASS, "the %s handshake and the Hello/HelloResponse round went through" % a.offer)
        self.judge_hello(p, h)
        for check in (self.c_ping, self.c_notification, self.c_unknown, self.c_split, self.c_unknown_stream,
                      self.c_render, self.c_request, self.c_pipeline_state, self.c_press):
            t = time.monotonic()
            try:
                await asyncio.wait_for(check(p), 90)
            except asyncio.TimeoutError:
                self._fail_open(check, "the check did not end within 90 s", p, time.monotonic() - t)
            except CheckFailed as e:
                self._fail_open(check, str(e), p, time.monotonic() - t)
            if p.closed.is_set():
                break
        await self.c_bad_decrypt(p)
        await self.c_pinning(a)

    def _fail_open(self, check, detail, p, seconds):
        open_ = [rid for rid in check.rids if rid not in self.results]   # decided rows keep their verdict
        for rid in open_[:1]:                          # the row the check was deciding when it failed
            self.put(rid, R.FAIL, detail, p, seconds)
        for rid in open_[1:]:
            self.put(rid, R.NOT_OBSERVABLE, "its check stopped at %s (failed)" % open_[0])

    # -- the Hello ---------------------------------------------------------------------------------
    def judge_hello(self, p, h):
        size = wire.frame_total_len(h.env.ByteSize(), len(h.tail))
        if size > wire.HANDSHAKE_CEILING:
            self.put("R6.1-a", R.FAIL, "the Hello is %d bytes, over one Noise message (%d)" % (
                size, wire.HANDSHAKE_CEILING), p)
        else:
            self.put("R6.1-a", R.PASS, "the Hello is %d bytes" % size)
        hello = h.env.hello
        bad = [c for c in hello.capabilities if not _params_match(c)]
        if bad:
            self.put("R8.2-a", R.FAIL, "capability %s carries params %r" % (
                surface_pb2.CapabilityKind.Name(bad[0].kind) if bad[0].kind in surface_pb2.CapabilityKind.values()
                else bad[0].kind, bad[0].WhichOneof("params")), p)
        else:
            self.put("R8.2-a", R.PASS, "%d capabilities, each with the params of its kind" % len(hello.capabilities))
        names = [t.name for t in hello.tools]
        dup = sorted({n for n in names if names.count(n) > 1})
        schema_bad = [t.name for t in hello.tools if not _json_object(t.input_schema)]
        if dup:
            self.put("R8.2-d", R.FAIL, "tool name(s) declared twice: %s" % ", ".join(dup), p)
        elif schema_bad:
            self.put("R8.2-d", R.FAIL, "tool %r: input_schema is not a JSON object" % schema_bad[0], p)
        elif names:
            self.put("R8.2-d", R.PASS, "%d tools, names unique, every input_schema a JSON object" % len(names))
        else:
            self.put("R8.2-d", R.NOT_OBSERVABLE, "the Hello declares no tool")

    # -- the checks on the first session (each names the rows it decides in .rids) ------------------
    async def c_ping(self, p):
        r = await self.ping(p)
        self.put("R10.10-a", R.PASS, "the PingResponse came on the Ping's id", p)
        pr = r.env.ping_response
        sent = [e.ping.t1 for _, e, _ in p.sent if e.id == r.id and e.WhichOneof("op") == "ping"][-1]
        if pr.t1 != sent:
            raise CheckFailed("PingResponse t1 %d is not the Ping's t1 %d" % (pr.t1, sent))
        if pr.t2 > pr.t3:
            raise CheckFailed("PingResponse t2 %d > t3 %d" % (pr.t2, pr.t3))
        self.put("R10.2-a", R.PASS, "answered on the Ping's id, t1 echoed, t2 <= t3", p)
    c_ping.rids = ("R10.2-a", "R10.10-a")

    async def c_notification(self, p):
        self.put("R10.10-b", R.PASS, await P.notification(p, self.step_s), p)
    c_notification.rids = ("R10.10-b",)

    async def c_unknown(self, p):
        r = await P.unknown_fields(p, self.step_s)
        if r.env.ping_response.t1 != P.UNKNOWN_T1:
            self.put("R2.2-a", R.FAIL, "a Ping with unknown fields was answered with t1 %d, not %d" % (
                r.env.ping_response.t1, P.UNKNOWN_T1), p)
        else:
            self.put("R2.2-a", R.PASS, "a Ping with unknown fields was answered, t1 echoed", p)
        self.put("R2.2-b", R.PASS, await P.unknown_arm(p, self.step_s), p)
    c_unknown.rids = ("R2.2-a", "R2.2-b")

    async def c_split(self, p):
        self.put("R5.1.2-b", R.PASS, await P.split_frames(p, self.step_s), p)
    c_split.rids = ("R5.1.2-b",)

    async def c_unknown_stream(self, p):
        never = p.mint()
        await p.send(ts.env(never, "stream_chunk", seq=0), bytes(64))
        got = await self.quiet(p, lambda r: r.id == never)
        bad = [r for r in got if not (r.op == "error" and r.env.error.code in (_E.UNKNOWN_STREAM, _E.STREAM_CLOSED))]
        if bad:
            raise CheckFailed("a chunk on never-opened id %d drew %s" % (never, _summary(bad[0].env)))
        await self.ping(p)
        self.put("R10.3-b", R.PASS, "a chunk on never-opened id %d drew %s" % (
            never, "UNKNOWN_STREAM" if got else "nothing (discarded)"), p)
    c_unknown_stream.rids = ("R10.3-b",)

    async def c_render(self, p):
        spk = [c for c in self._hello(p).capabilities if c.kind == surface_pb2.CAPABILITY_SPEAKER]
        if not spk:
            self.put("R10.8-a", R.NOT_OBSERVABLE, "the satellite declares no SPEAKER")
            return
        fmt = spk[0].speaker.format
        i = p.mint()
        o = ts.env(i, "media_render_open", target=surface_pb2.CAPABILITY_SPEAKER)
        o.media_render_open.format.CopyFrom(fmt)
        await p.send(o)
        step = max(2, (SMALL_FRAME // 2) // 2 * 2)
        frames = 0
        for seq in range(10):
            await p.send(ts.env(i, "stream_chunk", seq=seq), bytes(step))
            frames += step
        await p.send(ts.env(i, "stream_end", reason=ops.COMPLETE))
        try:
            await _wait(p, lambda r: r.id == i and r.op in ("playback_done", "error"), 15.0)
        except AssertionError:
            raise CheckFailed("a %d-byte render on id %d drew no PlaybackDone or Error within 15 s" % (frames, i)) \
                from None
        await asyncio.sleep(QUIET_S)
        terms = [r for r in p.received if r.id == i and r.op in ("playback_done", "error")]
        if len(terms) != 1:
            raise CheckFailed("render %d drew %d terminals: exactly one" % (i, len(terms)))
        self.put("R10.8-a", R.PASS, "the render on id %d ended in one %s" % (i, terms[0].op), p)
    c_render.rids = ("R10.8-a",)

    async def c_request(self, p):
        if not any(c.kind == surface_pb2.CAPABILITY_MIC for c in self._hello(p).capabilities):
            self.put("R10.4-a", R.NOT_OBSERVABLE, "the satellite declares no MIC")
            return
        i = p.mint()
        ref = "kit-%d" % i
        mark = len(p.received)
        await p.send(ts.env(i, "request_capture", correlation_ref=ref, mode=ops.LIVE))
        try:
            r = await _wait(p, lambda r: (r.op == "error" and r.id == i) or r.op == "capture_open", self.step_s, mark)
        except AssertionError:
            raise CheckFailed("RequestCapture %d drew neither a CaptureOpen nor an Error within %.0f s" % (
                i, self.step_s)) from None
        if r.op == "error":
            if r.env.error.code != _E.UNAVAILABLE:
                raise CheckFailed("RequestCapture %d drew Error %s, not UNAVAILABLE" % (i, _code(r.env.error.code)))
            self.put("R10.4-a", R.PASS, "RequestCapture %d declined with UNAVAILABLE" % i, p)
            self.put("R10.3-a", R.NOT_OBSERVABLE, "the satellite declined the kit's RequestCapture")
            return
        cid = r.id
        if r.env.capture_open.correlation_ref != ref:
            raise CheckFailed("the CaptureOpen %d answering RequestCapture %d carries correlation_ref %r, not %r" % (
                cid, i, r.env.capture_open.correlation_ref, ref))
        try:
            await p.expect("stream_chunk", id_=cid, timeout=self.step_s)
        except AssertionError:
            raise CheckFailed("capture %d sent no chunk within %.0f s" % (cid, self.step_s)) from None
        await asyncio.sleep(0.5)
        others = [x for x in p.received[mark:] if x.id == i or (x.op == "capture_open" and x.id != cid)]
        if others:
            raise CheckFailed("RequestCapture %d drew a second answer: %s" % (i, _summary(others[0].env)))
        self.put("R10.4-a", R.PASS, "RequestCapture %d answered by CaptureOpen %d echoing %r" % (i, cid, ref), p)
        await p.send(ts.env(cid, "stream_cancel", reason=ops.STOPPED))
        t_cancel = time.monotonic()
        await asyncio.sleep(QUIET_S)
        # chunks already on the wire when the cancel left may still arrive: allow one round trip of them
        late = [x for x in p.received if x.id == cid and x.t > t_cancel + 0.3]
        if late:
            raise CheckFailed("capture %d sent %s %.2f s after the core's StreamCancel" % (
                cid, _summary(late[0].env), late[0].t - t_cancel))
        await self.ping(p, "a Ping after the StreamCancel")
        self.put("R10.3-a", R.PASS, "capture %d stopped within 0.3 s of the core's StreamCancel" % cid, p)
    c_request.rids = ("R10.4-a", "R10.3-a")

    async def c_pipeline_state(self, p):
        mark = len(p.received)
        for phase in (ops.PipelineState.LISTENING, ops.PipelineState.PROCESSING, ops.PipelineState.IDLE):
            await p.send(ts.env(0, "pipeline_state", phase=phase))
            await asyncio.sleep(0.2)
        got = await self.quiet(p, lambda r: r.op == "capture_open" and r.env.capture_open.HasField("trigger"))
        got += [r for r in p.received[mark:] if r.op == "capture_open" and r.env.capture_open.trigger]
        if got:
            raise CheckFailed("PipelineState LISTENING drew %s: the mic followed the core's phase" % _summary(
                got[0].env))
        self.put("R10.4.1-a", R.PASS, "PipelineState LISTENING / PROCESSING / IDLE opened no capture", p)
    c_pipeline_state.rids = ("R10.4.1-a",)

    async def c_press(self, p):
        """The button: a push-to-talk capture the satellite opens itself (R6.3-a, R10.10-c, R6.1-b judged over
        it); answered with an empty Response."""
        if self.press is None and self.prompt is None:
            return                                # the observe_all rows judge what the RequestCapture gave
        mark = len(p.received)
        if self.press is not None:
            if not await self._push(True):
                return
        else:
            self.prompt("press and hold the satellite's button (talk to it) until told to release it")
        try:
            r = await _wait(p, lambda r: r.op == "capture_open" and r.env.capture_open.trigger, self.press_s, mark)
        except AssertionError:      # no rule makes a button open a capture (a busy satellite may not): say so
            self.put("R10.10-d", R.NOT_OBSERVABLE, "the button press opened no capture within %g s" % self.press_s)
            if self.press is not None:
                await self._push(False)
            return
        cid = r.id
        await asyncio.sleep(1.0)
        if self.press is not None:
            await self._push(False)
        else:
            self.prompt("release the button")
        try:
            await _wait(p, lambda r: r.id == cid and r.op in ("stream_end", "stream_cancel"), 10.0, mark)
        except AssertionError:
            raise CheckFailed("capture %d sent no StreamEnd within 10 s of the release" % cid) from None
        await p.send(ts.env(cid, "response"))
        await asyncio.sleep(QUIET_S)
        ended = min(x.t for x in p.received[mark:] if x.id == cid and x.op in ("stream_end", "stream_cancel"))
        after = [x for x in p.received[mark:] if x.id == cid and x.op == "stream_chunk" and x.t > ended]
        if after:
            raise CheckFailed("capture %d sent a chunk after its StreamEnd" % cid)
        self.put("R10.10-d", R.PASS, "no chunk after the StreamEnd of capture %d" % cid, p)
    c_press.rids = ("R10.10-d",)

    async def _push(self, down):
        """Run the press hook; False (and the row not observable) when the hook itself failed."""
        try:
            await asyncio.wait_for(asyncio.to_thread(self.press, down), self.step_s * 3)
            return True
        except Exception as e:  # noqa: BLE001 - the operator's hook: whatever it raises is said in the row
            self.put("R10.10-d", R.NOT_OBSERVABLE, "the button hook failed: %s" % (str(e) or type(e).__name__))
            return False

    async def c_bad_decrypt(self, p):
        if p.closed.is_set():
            return
        try:
            self.put("R5-a", R.PASS, await P.bad_decrypt(p, self.step_s), p)
        except CheckFailed as e:
            self.put("R5-a", R.FAIL, str(e), p)
            p.stream.close()

    # -- pinning: reconnections ------------------------------------------------------------------
    async def c_pinning(self, first):
        """XX without Paired -> XX again (R7.3-d); Paired -> IK (R7.3-e, R7.2-a); the kit's key changed -> no
        session and no XX (R7.3-c/f); REJECTED_CLOSED -> no retry (R7.3-j)."""
        if first.offer != "XX":
            why = "the satellite came in with %s (a key was pinned already): provision it with the address only" % (
                first.offer)
            for rid in ("R7.2-a", "R7.3-d", "R7.3-e", "R7.3-c", "R7.3-f", "R7.3-j"):
                self.put(rid, R.NOT_OBSERVABLE, why)
            return
        first.peer.stream.close()
        try:
            a, _ = await self.session(self.reconnect_s)
        except CheckFailed as e:
            self.put("R7.3-d", R.FAIL, "after the kit closed the first (XX, not paired) session: %s" % e)
            return
        if a.offer != "XX":
            self.put("R7.3-d", R.FAIL, "after an XX session without Paired the satellite reconnected with %s: it "
                                       "pinned the key on XX alone" % a.offer, a.peer)
            return
        self.put("R7.3-d", R.PASS, "after an XX session without Paired the next connection was XX again", a.peer)
        await a.peer.send(ts.env(0, "paired"))
        try:        # a satellite handles its frames in order: the answer to a Ping sent after Paired says it has
            await self.ping(a.peer, "a Ping after Paired")      # handled Paired (pinned the key), not a fixed 1 s
        except CheckFailed:
            pass                                               # unanswered: the next connection judges R7.3-e
        a.peer.stream.close()
        try:
            b, _ = await self.session(self.reconnect_s)
        except CheckFailed as e:
            self.put("R7.3-e", R.FAIL, "after Paired: %s" % e)
            return
        if b.offer != "IK":
            self.put("R7.3-e", R.FAIL, "after Paired the satellite reconnected with %s, not IK" % b.offer, b.peer)
            self.put("R7.2-a", R.FAIL, "a pinned key (Paired) but a %s connection" % b.offer, b.peer)
            return
        self.put("R7.3-e", R.PASS, "after Paired the next connection was IK with the kit's key", b.peer)
        self.put("R7.2-a", R.PASS, "XX while nothing was pinned, IK after Paired", b.peer)
        # another core: the kit now answers with another static key
        self.serve_key = self.other_key
        since = len(self.attempts)
        b.peer.stream.close()
        deadline = time.monotonic() + self.reconnect_s
        ik_failed = None
        while time.monotonic() < deadline:
            x = await self.next_attempt(deadline - time.monotonic(), since)
            if x is None:
                break
            since += 1
            if x.offer == "XX":
                self.put("R7.3-f", R.FAIL, "after an IK failure the satellite offered XX (%.1f s later)" % (
                    x.t - ik_failed.t if ik_failed else 0.0), x.peer)
                if x.peer is not None:
                    self.put("R7.3-c", R.FAIL, "a session was established with a core holding another key", x.peer)
                break
            if x.peer is not None:
                self.put("R7.3-c", R.FAIL, "an IK session completed with a core holding another key", x.peer)
                break
            if ik_failed is None:
                ik_failed = x
                deadline = time.monotonic() + self.watch_s
        if ik_failed is None and "R7.3-c" not in self.results:
            self.put("R7.3-c", R.NOT_OBSERVABLE, "the satellite did not reconnect within %.0f s" % self.reconnect_s)
            self.put("R7.3-f", R.NOT_OBSERVABLE, "the satellite did not reconnect within %.0f s" % self.reconnect_s)
            return
        n = sum(1 for x in self.attempts[self.attempts.index(ik_failed):] if x.offer == "IK")
        self.put("R7.3-c", R.PASS, "IK against another key: no session (%s)" % ik_failed.error)
        self.put("R7.3-f", R.PASS, "%d IK attempt(s) against another key, no XX offer within %.0f s" % (
            n, self.watch_s))
        if "R7.3-f" in self.results and self.results["R7.3-f"].verdict == R.FAIL:
            return
        # closed mode: the right key again, answered Rejected{REJECTED_CLOSED}; no retry may follow
        self.serve_key = self.key
        self.reject_closed = True
        try:
            c, _ = await self.session(self.reconnect_s)
        except CheckFailed as e:
            self.put("R7.3-j", R.NOT_OBSERVABLE, "the satellite did not come back with IK to the kit's key: %s" % e)
            return
        since = len(self.attempts)
        more = await self.next_attempt(self.watch_s, since)
        if more is not None:
            self.put("R7.3-j", R.FAIL, "a new connection %.1f s after Rejected{REJECTED_CLOSED}" % (
                more.t - c.t), c.peer)
        else:
            self.put("R7.3-j", R.PASS, "no connection within %.0f s of Rejected{REJECTED_CLOSED}" % self.watch_s,
                     c.peer)

    # -- what every session saw ---------------------------------------------------------------------
    def _hello(self, p):
        for q, h in self.hellos:
            if q is p:
                return h.env.hello
        return envelope_pb2.Envelope().hello

    def observe_all(self):
        """Rows judged over every frame the satellite sent: ids, frame sizes, seq, stream ids."""
        frames = sum(len(p.received) for p in self.peers)
        if not frames:
            return
        ids, bad_ids, oversize, seq_bad, chunks, stray, late = 0, [], [], [], 0, [], []
        for p in self.peers:
            last = None
            accepted = any(x.WhichOneof("op") == "hello_response"
                           and x.hello_response.WhichOneof("result") == "accepted" for _, x, _ in p.sent)
            opened, seqs, ended = set(), {}, set()
            for r in p.received:
                op = r.op
                if op in SAT_MINTED and r.id:
                    ids += 1
                    if r.id % 2 == 0 or (last is None and r.id != 1) or (
                            last is not None and not 0 < (r.id - last) & 0xFFFFFFFF < 0x80000000):
                        bad_ids.append((p, r, last))
                    last = r.id
                elif op in ("hello", "capture_open", "upload_open"):    # an exchange, never a notification
                    bad_ids.append((p, r, last))
                if op == "capture_open":
                    opened.add(r.id)
                if accepted and op != "hello" and wire.frame_total_len(r.env.ByteSize(), len(r.tail)) > SMALL_FRAME:
                    oversize.append((p, r))
                if op == "stream_chunk":                  # a satellite streams only on captures it opened
                    chunks += 1
                    if r.id in ended:
                        late.append((p, r))
                    elif r.id not in opened:
                        stray.append((p, r))
                    want = seqs.get(r.id, 0)
                    if r.env.stream_chunk.seq != want:
                        seq_bad.append((p, r, want))
                    seqs[r.id] = r.env.stream_chunk.seq + 1
                if op in ("stream_end", "stream_cancel"):
                    ended.add(r.id)
        self._judge("R6.3-a", bad_ids, ids, "%d satellite-minted ids: odd, from 1, counting by 2" % ids,
                    lambda p, r, last: "id %d on %s%s" % (r.id, r.op, " after %d" % last if last else ""))
        limited = sum(1 for p in self.peers for r in p.received if r.op != "hello")
        self._judge("R6.1-b", oversize, limited, "%d frames after Accepted{max_frame_bytes %d}, none over" % (
            limited, SMALL_FRAME), lambda p, r: "a %d-byte %s to a core that receives %d" % (
            wire.frame_total_len(r.env.ByteSize(), len(r.tail)), _summary(r.env), SMALL_FRAME))
        self._judge("R10.10-c", seq_bad, chunks, "%d capture chunks, seq from 0 by 1" % chunks,
                    lambda p, r, want: "chunk on id %d has seq %d, not %d" % (r.id, r.env.stream_chunk.seq, want))
        self._judge("R6.3-b", stray, chunks, "%d capture chunks, each on an open capture's id" % chunks,
                    lambda p, r: "a chunk on id %d, which is not an open capture" % r.id)
        self._judge("R10.10-d", late, chunks,
                    "%d capture chunks, none after its stream ended" % chunks,
                    lambda p, r: "a chunk on id %d after its StreamEnd/StreamCancel" % r.id)
        if "R6-a" not in self.results:
            self.put("R6-a", R.PASS, "%d frames from the satellite, every one cut and decoded" % frames)

    def _judge(self, rid, bad, seen, ok, say):
        if bad:
            if rid in self.results and self.results[rid].verdict != R.FAIL:
                del self.results[rid]
            self.put(rid, R.FAIL, say(*bad[0]), bad[0][0], focus=bad[0][1].t)
        elif seen and rid not in self.results:
            self.put(rid, R.PASS, ok)
        elif rid not in self.results:
            self.put(rid, R.NOT_OBSERVABLE, "the satellite sent nothing this rule applies to in this run")


async def _wait(p, pred, timeout, start=0):
    deadline = time.monotonic() + timeout
    while True:
        for r in p.received[start:]:
            if pred(r):
                return r
        if time.monotonic() > deadline or p.closed.is_set():
            raise AssertionError("nothing matched")
        await asyncio.sleep(0.02)


def _params_match(c):
    want = {surface_pb2.CAPABILITY_MIC: "mic", surface_pb2.CAPABILITY_SPEAKER: "speaker",
            surface_pb2.CAPABILITY_TEXT_DISPLAY: "text_display", surface_pb2.CAPABILITY_IMAGE_DISPLAY: "image_display",
            surface_pb2.CAPABILITY_HTML_DISPLAY: "html_display", surface_pb2.CAPABILITY_MEDIA_SINK: "media_sink",
            surface_pb2.CAPABILITY_IMAGE_CAPTURE: "image_capture"}.get(c.kind)
    got = c.WhichOneof("params")
    return got == want or (want is None and got is None)


def _json_object(text):
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _code(c):
    return _E.Name(c) if c in _E.values() else str(c)


def run(host, port, **kw):
    """The whole run, blocking: [Row] in ROWS order."""
    return asyncio.run(SatKit(host, port, **kw).run())
