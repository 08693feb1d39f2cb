"""`alabama conformance core HOST:PORT`: a scripted satellite that scores any core, one row per requirement ID.

Responsible for driving a core over the real wire (Noise over TCP, as any satellite does) through every core-side
requirement of the spec that a peer can observe, and for the verdict of each: pass, fail (with the frames that show
it), or not observable (and why). Every step is bounded in time (STEP_S, CHECK_S), so a peer that is not Alabama
(HTTP, TLS, garbage), stalls or floods ends in a verdict, never a hang. It builds on the test satellite
(``core.testsat``: frame builders, the Noise initiator, the reader) and adds only the script and the judging.
Must not assume anything of the core beyond the spec: no registry, no brain, no control endpoint.
"""
import asyncio
import os
import time

from alabama.v1 import operations_pb2 as ops, surface_pb2
from alabama.wire import frame as wire

from ..core import testsat as ts
from ..noise.state import NoiseError
from . import probes as P, rows as R
from .probes import QUIET_S, STEP_S, CheckFailed

#: Seconds one whole check may take, whatever it waits for.
CHECK_S = 60.0
#: Seconds a voice exchange may take to end in its terminal (the core transcribes, decides and speaks).
EXCHANGE_S = 30.0
#: The receive limit the kit's exchange session advertises: under one 20 ms chunk of 16 kHz audio (640 B), so a core
#: must cut its render chunks to fit it and R6.1-b is tested by every one of them.
SMALL_FRAME = 512
#: Ops the core mints ids for (R6.3-a) and the capability each is gated by (R8.2-b); None: a tool/setting name.
GATED = {"media_render_open": None, "text_render_open": surface_pb2.CAPABILITY_TEXT_DISPLAY,
         "image_render_open": surface_pb2.CAPABILITY_IMAGE_DISPLAY, "render": None,
         "media_control": surface_pb2.CAPABILITY_MEDIA_SINK, "request_capture": None, "invoke": None,
         "settings_write": None}
CORE_MINTED = set(GATED) | {"ping"}
_E = ops.ErrorCode

#: Every core-side requirement of ../shared/REQUIREMENTS.md (who C or S C), in its order, with what is checked.
ROWS = [
    ("R2.2-a", "unknown fields are ignored"),
    ("R2.2-b", "an unknown Envelope arm is tolerated, the connection goes on"),
    ("R5-a", "a transport message that fails to decrypt ends the connection"),
    ("R5-b", "device_id = fingerprint(static key)"),
    ("R5.1.1-a", "Noise_XX and Noise_IK accepted, another suite refused at the handshake"),
    ("R5.1.2-a", "Noise messages as 2-byte big-endian length + body; frames re-cut from the plaintext"),
    ("R5.1.2-b", "a frame split over two Noise messages, two frames in one: both handled"),
    ("R6-a", "every frame is varint total_len, varint header_len, Envelope, tail"),
    ("R6.1-a", "a Hello larger than one Noise message is refused outright"),
    ("R6.1-b", "no frame over the satellite's max_frame_bytes"),
    ("R6.1-c", "an over-limit frame draws FRAME_TOO_LARGE or a close (MAY)"),
    ("R6.3-a", "core ids even, never 0, counting by 2"),
    ("R6.3-b", "a stream's frames carry its Open's id; the terminal answers on it"),
    ("R7.3-a", "an unknown key is admitted as a guest: Accepted"),
    ("R7.3-b", "a valid pairing token draws Paired on the session"),
    ("R7.3-i", "closed mode: Rejected{REJECTED_CLOSED}, then the connection closes"),
    ("R8.2-b", "never an operation the satellite did not declare a capability for"),
    ("R8.2-c", "an operation for an undeclared capability draws CAPABILITY_MISSING"),
    ("R8.2-f", "SettingsWrite only to a declared key; a spontaneous SettingState (id 0) is not answered"),
    ("R10.1-a", "Ping/PingResponse interleaved between the chunks of a bulk transfer"),
    ("R10.1-b", "liveness timeouts allow one max-size frame of queueing"),
    ("R10.1-c", "LOSSY_OK chunks may be elided, RELIABLE ones never"),
    ("R10.2-a", "Ping answered on its id, t2 stamped on receipt and t3 on send"),
    ("R10.3-a", "StreamCancel needs no answer: the id is dead for the core at once"),
    ("R10.3-b", "frames on a cancelled or never-opened id are discarded"),
    ("R10.3-c", "an Open past max_concurrent_streams draws TOO_MANY_STREAMS on the new id"),
    ("R10.4-c", "the core never sends UploadOpen nor references MediaBlock.upload"),
    ("R10.4-d", "a DEFERRED capture resumes by correlation_ref, CaptureAck cumulative"),
    ("R10.5-a", "a capable display is never left blank"),
    ("R10.5-c", "HTML_DISPLAY pushed only to paired devices (SHOULD)"),
    ("R10.8-a", "a CaptureOpen ends in exactly one Response or Error on its id"),
    ("R10.10-a", "answers on the originator's id, never a new one"),
    ("R10.10-b", "a notification (id 0) is never answered"),
    ("R10.10-c", "core stream chunks: seq from 0, step 1"),
    ("R10.10-d", "a chunk on an unknown stream: UNKNOWN_STREAM, on an ended one STREAM_CLOSED"),
    ("R10.10-e", "never a Tier 2 operation the satellite has not unlocked"),
    ("R11-a", "no permission derived from `from` or Hello.multi_speaker"),
    ("R13-a", "wire_version below the floor draws VersionMismatch carrying the server version"),
]
#: Rows no script of a satellite can observe, and why (they stay in the table so that nothing is silently left out).
UNOBSERVABLE = {
    "R5-b": "the fingerprint is internal to the core (its registry, settings, tool namespace)",
    "R10.1-a": "needs a core-side bulk transfer (an image stream) the kit cannot ask a core for",
    "R10.1-b": "a timeout of minutes; the kit's run is bounded to seconds per step",
    "R10.1-c": "a permission (MAY) about the core's own pacing",
    "R10.4-d": "not scripted in this version of the kit (the reference core's tests cover it)",
    "R10.5-a": "needs the core to decide to show an image",
    "R10.5-c": "needs an admin to pair the device",
    "R11-a": "permissions are internal to the core",
}


class NotObservable(Exception):
    """This core gives the kit no way to see the rule (e.g. closed mode, no token given)."""


_summary = P.summary
_why = P.why


class KitSat(ts.TestSatellite):
    """The test satellite, also keeping what it sent and the surface it declared (the rows' evidence)."""

    __test__ = False

    def __init__(self, kit, **kw):
        kw.setdefault("auto_playback", True)
        super().__init__(kit.host, kit.port, **kw)
        self.kit = kit
        self.sent = []
        self.declared = set()
        self.tools, self.settings = set(), set()
        self.max_frame = 0
        kit.sats.append(self)

    async def send(self, e, tail=b""):
        self.sent.append((time.monotonic(), e, len(tail)))
        await super().send(e, tail)

    async def hello(self, **kw):
        caps = kw.get("caps")
        caps = [ts.mic_cap(), ts.speaker_cap()] if caps is None else caps
        kw["caps"] = caps
        self.declared = {c.kind for c in caps}
        self.tools = {t.name for t in kw.get("tools", ())}
        self.settings = {s.key for s in kw.get("settings", ())}
        self.max_frame = kw.get("max_frame_bytes", 0)
        h = ts.hello(id_=self.mint(), **kw)
        await self.send(h)
        return await self.expect("hello_response", timeout=STEP_S)

    def timeline(self, t0=None, focus=None):
        return P.timeline(self, t0 if t0 is not None else self.kit.t0, "sat -> core", "core -> sat", focus)


class CoreKit:
    """The script: ``await CoreKit(host, port).run()`` -> [Row] in ROWS order."""

    def __init__(self, host, port, core_key=None, token=None, step_s=STEP_S, quiet_s=QUIET_S):
        self.host, self.port = host, port
        self.core_key, self.token = core_key, token
        self.step_s = step_s
        self.quiet_s = quiet_s       # silence that counts as "nothing was sent" (probes.QUIET_S)
        self.learned_key = None
        self.sats = []
        self.t0 = time.monotonic()
        self.results = {}            # rid -> Row
        self.gate = None             # why no session could be had (every later row is then not observable)
        self.accepted = None         # the first session's Accepted

    # -- helpers ----------------------------------------------------------------------------------
    async def session(self, pattern="XX", hello=True, **hello_kw):
        """A connected satellite (fresh static key) that sent its Hello; raises CheckFailed on no answer."""
        key = self.core_key or self.learned_key
        sat = KitSat(self, server_key=key if pattern == "IK" else None, pattern=pattern)
        try:
            await asyncio.wait_for(sat.connect(), self.step_s)
        except asyncio.TimeoutError:
            raise CheckFailed("no Noise handshake answer from %s:%d within %.0f s" % (self.host, self.port,
                                                                                     self.step_s)) from None
        except (NoiseError, ConnectionError, OSError, EOFError) as e:
            raise CheckFailed("the %s handshake with %s:%d failed: %s" % (pattern, self.host, self.port,
                                                                          _why(e))) from None
        if hello:
            try:
                sat.hello_response = await sat.hello(**hello_kw)
            except AssertionError:
                raise CheckFailed("no HelloResponse within %.0f s of the Hello%s" % (
                    self.step_s, " (the core closed the connection)" if sat.closed.is_set() else "")) from None
        return sat

    async def quiet(self, sat, pred):
        """The frames matching ``pred`` the core sent within ``quiet_s`` (the kit waits that long)."""
        return await P.quiet(sat, pred, self.quiet_s)

    async def ping(self, sat):
        """A Ping the core must answer (the connection is alive); raises CheckFailed otherwise."""
        return await P.ping(sat, self.step_s)

    def put(self, rid, verdict, detail="", sat=None, seconds=0.0, focus=None):
        title = dict(ROWS)[rid]
        self.results[rid] = R.Row(rid, title, verdict, detail, sat.timeline(focus=focus) if sat is not None else (),
                                  seconds)

    # -- the run ----------------------------------------------------------------------------------
    async def run(self):
        for rid, why in UNOBSERVABLE.items():
            self.put(rid, R.NOT_OBSERVABLE, why)
        checks = [self.c_gate, self.c_ik_and_other_suite, self.c_token, self.c_version, self.c_ping,
                  self.c_notification, self.c_unknown_fields, self.c_split_frames, self.c_big_hello,
                  self.c_too_large, self.c_unknown_stream, self.c_cancel, self.c_too_many, self.c_undeclared,
                  self.c_settings, self.c_exchange, self.c_bad_decrypt]
        for check in checks:
            if self.gate is not None and check is not self.c_gate:
                continue
            t = time.monotonic()
            try:
                await asyncio.wait_for(check(), CHECK_S)
            except asyncio.TimeoutError:
                self._fail_open(check, "the check did not end within %.0f s" % CHECK_S, time.monotonic() - t)
            except CheckFailed as e:
                self._fail_open(check, str(e), time.monotonic() - t)
            except (NoiseError, ConnectionError, OSError, EOFError) as e:
                self._fail_open(check, "the connection ended under the check: %s" % _why(e), time.monotonic() - t)
        self.observe_all()
        for s in self.sats:
            try:
                await asyncio.wait_for(s.close(), 2)
            except Exception:  # noqa: BLE001 - closing a connection the core may have dropped already
                pass
        for rid, _ in ROWS:
            if rid not in self.results:
                self.put(rid, R.NOT_OBSERVABLE, self.gate and "no session with the core: see R5.1.1-a"
                         or "this run gave no occasion to observe it")
        return [self.results[rid] for rid, _ in ROWS]

    def _fail_open(self, check, detail, seconds):
        for rid in check.rids:
            if rid not in self.results:
                self.put(rid, R.FAIL, detail, self.sats[-1] if self.sats else None, seconds)

    # -- the checks (each names the rows it decides in .rids) -------------------------------------
    async def c_gate(self):
        try:
            sat = await self.session("XX", max_frame_bytes=SMALL_FRAME)
        except CheckFailed as e:
            self.gate = str(e)
            self.put("R5.1.1-a", R.FAIL, "%s: is an Alabama core listening there?" % e,
                     self.sats[-1] if self.sats else None)
            return
        self.main = sat
        self.learned_key = sat.stream.remote_static
        if self.core_key is not None and self.core_key != self.learned_key:
            self.put("R5.1.1-a", R.FAIL, "the core presented static key %s, not the --core-key given"
                     % self.learned_key.hex()[:16], sat)
        hr = sat.hello_response.env.hello_response
        arm = hr.WhichOneof("result")
        self.put("R5.1.2-a", R.PASS, "the handshake and the Hello/HelloResponse round went through")
        if arm == "accepted":
            self.accepted = hr.accepted
            self.put("R7.3-a", R.PASS, "Accepted a key it had never seen", sat)
            self.put("R7.3-i", R.NOT_OBSERVABLE, "the core admits unknown devices (open mode)")
        elif arm == "rejected" and hr.rejected.reason == ops.REJECTED_CLOSED:
            self.put("R7.3-a", R.NOT_OBSERVABLE, "the core is in closed mode")
            try:
                await sat.wait_closed(self.step_s)
                self.put("R7.3-i", R.PASS, "REJECTED_CLOSED, then the core closed the connection", sat)
            except asyncio.TimeoutError:
                self.put("R7.3-i", R.FAIL, "REJECTED_CLOSED but the connection stayed open %.0f s" % self.step_s, sat)
            self.gate = "the core is in closed mode: give --token of a pairing token, or register the kit's key"
        else:
            self.put("R7.3-a", R.FAIL, "an unknown key got %s, not Accepted" % (arm or "an empty HelloResponse"), sat)
            self.gate = "no session was accepted"
    c_gate.rids = ("R5.1.1-a", "R7.3-a")

    async def c_ik_and_other_suite(self):
        if "R5.1.1-a" in self.results:
            return
        sat = await self.session("IK")
        if sat.hello_response.env.hello_response.WhichOneof("result") != "accepted":
            raise CheckFailed("Noise_IK with the core's key went through but the Hello was not Accepted")
        said = await self._other_suite()
        if said:
            raise CheckFailed(said)
        self.put("R5.1.1-a", R.PASS, "XX and IK sessions Accepted; a Noise_XX_25519_AESGCM_SHA256 offer was refused")
    c_ik_and_other_suite.rids = ("R5.1.1-a",)

    async def _other_suite(self):
        """None when the core refuses another suite's offer (closes or never answers), else what it did."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), self.step_s)
        except (OSError, asyncio.TimeoutError) as e:
            return "could not open a second connection to offer another suite: %s" % _why(e)
        name = b"Noise_XX_25519_AESGCM_SHA256"
        writer.write(len(name).to_bytes(2, "big") + name + (32).to_bytes(2, "big") + os.urandom(32))
        try:
            got = await asyncio.wait_for(reader.read(2), self.step_s)
        except asyncio.TimeoutError:
            got = b""
        except OSError:
            got = b""
        writer.close()
        if got:
            return "the core answered a Noise_XX_25519_AESGCM_SHA256 offer with a handshake message"
        return None

    async def c_token(self):
        if not self.token:
            self.put("R7.3-b", R.NOT_OBSERVABLE, "give --token (a pairing token the core minted) to check it")
            return
        sat = await self.session("XX", pairing_token=self.token)
        try:
            await sat.expect("paired", timeout=self.step_s)
        except AssertionError:
            raise CheckFailed("a Hello with the pairing token given drew no Paired within %.0f s (is the token "
                              "still valid? mint a fresh one)" % self.step_s) from None
        self.put("R7.3-b", R.PASS, "Paired on the session after a Hello with the token", sat)
    c_token.rids = ("R7.3-b",)

    async def c_version(self):
        sat = await self.session("XX", hello=False)
        h = ts.hello(id_=sat.mint(), wire_version=0)
        await sat.send(h)
        try:
            r = await sat.expect("hello_response", timeout=self.step_s)
        except AssertionError:
            raise CheckFailed("a Hello with wire_version 0 drew no HelloResponse") from None
        hr = r.env.hello_response
        arm = hr.WhichOneof("result")
        if arm == "accepted":
            self.put("R13-a", R.NOT_OBSERVABLE, "this core's floor admits wire_version 0")
        elif arm == "version_mismatch" and hr.version_mismatch.server_version >= 1:
            self.put("R13-a", R.PASS, "VersionMismatch{server_version %d} for wire_version 0"
                     % hr.version_mismatch.server_version, sat)
        else:
            raise CheckFailed("wire_version 0 drew %s without a server_version" % arm)
    c_version.rids = ("R13-a",)

    async def c_ping(self):
        sat = self.main
        before = time.time_ns() // 1000
        r = await self.ping(sat)
        pr = r.env.ping_response
        if not (pr.t2 and pr.t3 and pr.t2 <= pr.t3):
            raise CheckFailed("PingResponse t2 %d, t3 %d: both stamped, t2 <= t3" % (pr.t2, pr.t3))
        if pr.t1 < before:
            raise CheckFailed("PingResponse t1 %d is not the Ping's t1" % pr.t1)
        self.put("R10.2-a", R.PASS, "answered on the Ping's id, t1 echoed, t2 <= t3", sat)
        self.put("R10.10-a", R.PASS, "the PingResponse came on the Ping's id", sat)
    c_ping.rids = ("R10.2-a", "R10.10-a")

    async def c_notification(self):
        sat = await self.session("XX")
        self.put("R10.10-b", R.PASS, await P.notification(sat, self.step_s, self.quiet_s), sat)
    c_notification.rids = ("R10.10-b",)

    async def c_unknown_fields(self):
        sat = await self.session("XX")
        await P.unknown_fields(sat, self.step_s)
        self.put("R2.2-a", R.PASS, "a Ping with unknown fields was answered", sat)
        self.put("R2.2-b", R.PASS, await P.unknown_arm(sat, self.step_s), sat)
    c_unknown_fields.rids = ("R2.2-a", "R2.2-b")

    async def c_split_frames(self):
        sat = self.main
        self.put("R5.1.2-b", R.PASS, await P.split_frames(sat, self.step_s), sat)
    c_split_frames.rids = ("R5.1.2-b",)

    async def c_big_hello(self):
        sat = await self.session("XX", hello=False)
        tools = [ts.tool("tool.%03d" % n, description="x" * 900) for n in range(80)]
        h = ts.hello(id_=sat.mint(), tools=tools)
        size = len(ts.frame(h))
        if size <= 65519:
            raise CheckFailed("the kit's big Hello is only %d B" % size)
        await sat.send(h)                        # send() splits it over two Noise messages
        try:
            r = await sat.expect("hello_response", timeout=self.step_s)
        except AssertionError:
            self.put("R6.1-a", R.PASS, "a %d-byte Hello (two Noise messages) drew no session%s" % (
                size, ": the core closed" if sat.closed.is_set() else ""), sat)
            return
        if r.env.hello_response.WhichOneof("result") == "accepted":
            raise CheckFailed("a %d-byte Hello over two Noise messages was Accepted" % size)
        self.put("R6.1-a", R.PASS, "a %d-byte Hello was answered %s" % (
            size, r.env.hello_response.WhichOneof("result")), sat)
    c_big_hello.rids = ("R6.1-a",)

    def _limits(self):
        acc = self.accepted
        mfb = acc.max_frame_bytes if acc is not None and acc.max_frame_bytes else wire.DEFAULT_MAX_FRAME_BYTES
        mcs = acc.max_concurrent_streams if acc is not None and acc.max_concurrent_streams else 8
        return mfb, mcs

    async def c_too_large(self):
        sat = await self.session("XX")
        mfb, _ = self._limits()
        cid = sat.mint()
        await sat.send(ts.capture_open(cid, trigger=ops.TRIGGER_UNSPECIFIED))
        await sat.send(ts.env(cid, "stream_chunk", seq=0), bytes(mfb + 64))
        deadline = time.monotonic() + self.step_s
        while time.monotonic() < deadline and not sat.closed.is_set():
            errs = [r for r in sat.received if r.op == "error" and r.id == cid]
            if errs:
                code = errs[0].env.error.code
                if code != _E.FRAME_TOO_LARGE:
                    raise CheckFailed("an over-limit chunk drew Error %s, not FRAME_TOO_LARGE" % _E.Name(code))
                self.put("R6.1-c", R.PASS, "a %d-byte frame (limit %d) drew Error FRAME_TOO_LARGE on its id"
                         % (mfb + 64, mfb), sat)
                return
            await asyncio.sleep(0.05)
        if sat.closed.is_set():
            self.put("R6.1-c", R.PASS, "a %d-byte frame (limit %d) closed the connection" % (mfb + 64, mfb), sat)
            return
        await self.ping(sat)
        self.put("R6.1-c", R.PASS, "a %d-byte frame (limit %d) was taken; the core may (MAY) refuse it" % (
            mfb + 64, mfb), sat)
    c_too_large.rids = ("R6.1-c",)

    async def c_unknown_stream(self):
        sat = await self.session("XX")
        never = sat.mint()
        await sat.send(ts.env(never, "stream_chunk", seq=0), bytes(640))
        got = await self.quiet(sat, lambda r: r.id == never)
        bad = [r for r in got if not (r.op == "error" and r.env.error.code in (_E.UNKNOWN_STREAM, _E.STREAM_CLOSED))]
        if bad:
            raise CheckFailed("a chunk on never-opened id %d drew %s" % (never, _summary(bad[0].env)))
        first = "UNKNOWN_STREAM" if got else "silence (discarded, R10.3-b)"
        cid = sat.mint()
        await sat.send(ts.capture_open(cid, trigger=ops.TRIGGER_UNSPECIFIED))
        await sat.send(ts.env(cid, "stream_chunk", seq=0), bytes(640))
        await sat.send(ts.env(cid, "stream_end", reason=ops.COMPLETE))
        await asyncio.sleep(self.quiet_s + 0.2)          # past any grace for chunks in flight
        await sat.send(ts.env(cid, "stream_chunk", seq=1), bytes(640))
        got2 = await self.quiet(sat, lambda r: r.id == cid and r.op == "error")
        bad2 = [r for r in got2 if r.env.error.code not in (_E.STREAM_CLOSED, _E.UNKNOWN_STREAM)]
        if bad2:
            raise CheckFailed("a chunk after StreamEnd on id %d drew %s" % (cid, _summary(bad2[0].env)))
        await self.ping(sat)
        self.put("R10.10-d", R.PASS, "unknown id: %s; after StreamEnd: %s" % (
            first, _E.Name(got2[0].env.error.code) if got2 else "silence"), sat)
        self.put("R6.3-b", R.PASS, "the core's answers on streams came on their Open's id", sat)
    c_unknown_stream.rids = ("R10.10-d",)

    async def c_cancel(self):
        sat = await self.session("XX")
        cid = sat.mint()
        await sat.send(ts.capture_open(cid, trigger=ops.TRIGGER_UNSPECIFIED))
        await sat.send(ts.env(cid, "stream_chunk", seq=0), bytes(640))
        await sat.send(ts.env(cid, "stream_cancel", reason=ops.STOPPED))
        mark = len(sat.received)
        await sat.send(ts.env(cid, "stream_chunk", seq=1), bytes(640))
        await sat.send(ts.env(cid, "stream_end", reason=ops.COMPLETE))
        await asyncio.sleep(self.quiet_s)
        after = [r for r in sat.received[mark:] if r.id == cid]
        if after:
            raise CheckFailed("after the satellite's StreamCancel on id %d the core sent %s" % (
                cid, _summary(after[0].env)))
        await self.ping(sat)
        self.put("R10.3-a", R.PASS, "nothing came on id %d after the StreamCancel" % cid, sat)
        self.put("R10.3-b", R.PASS, "a chunk and a StreamEnd on the cancelled id drew nothing", sat)
    c_cancel.rids = ("R10.3-a", "R10.3-b")

    async def c_too_many(self):
        sat = await self.session("XX")
        _, mcs = self._limits()
        ids = []
        for _ in range(mcs):
            i = sat.mint()
            ids.append(i)
            await sat.send(ts.capture_open(i, trigger=ops.TRIGGER_UNSPECIFIED))
        extra = sat.mint()
        await sat.send(ts.capture_open(extra, trigger=ops.TRIGGER_UNSPECIFIED))
        try:
            r = await sat.expect("error", id_=extra, timeout=self.step_s)
        except AssertionError:
            raise CheckFailed("capture %d, one past max_concurrent_streams %d, drew no Error" % (mcs + 1, mcs)) \
                from None
        if r.env.error.code != _E.TOO_MANY_STREAMS:
            raise CheckFailed("capture %d past the limit drew Error %s" % (mcs + 1, _E.Name(r.env.error.code)))
        early = [x for x in sat.received if x.op == "error" and x.id in ids]
        if early:
            raise CheckFailed("an Open within the limit of %d drew %s" % (mcs, _summary(early[0].env)))
        for i in ids:
            await sat.send(ts.env(i, "stream_cancel", reason=ops.STOPPED))
        self.put("R10.3-c", R.PASS, "%d captures open, the next one drew TOO_MANY_STREAMS on its own id" % mcs, sat)
    c_too_many.rids = ("R10.3-c",)

    async def c_undeclared(self):
        sat = await self.session("XX", caps=[ts.speaker_cap()])
        i = sat.mint()
        await sat.send(ts.env(i, "event", id="kit.undeclared"))
        try:
            r = await sat.expect("error", id_=i, timeout=self.step_s)
        except AssertionError:
            raise CheckFailed("an Event with an undeclared id drew no Error within %.0f s" % self.step_s) from None
        if r.env.error.code != _E.CAPABILITY_MISSING:
            raise CheckFailed("an Event with an undeclared id drew Error %s" % _E.Name(r.env.error.code))
        self.put("R8.2-c", R.PASS, "an Event with an undeclared id drew CAPABILITY_MISSING on its id", sat)
    c_undeclared.rids = ("R8.2-c",)

    async def c_settings(self):
        sat = await self.session("XX", settings=[ts.setting_int("kit.level")])
        await sat.send(ts.env(0, "setting_state", key="kit.level", value={"int_value": 7}))
        got = await self.quiet(sat, lambda r: r.id == 0 and r.op in ("error", "setting_state", "settings_write"))
        if got:
            raise CheckFailed("a spontaneous SettingState (id 0) drew %s" % _summary(got[0].env))
        await self.ping(sat)
        self.put("R8.2-f", R.PASS, "a spontaneous SettingState was not answered (and every SettingsWrite seen "
                 "went to a declared key)", sat)
    c_settings.rids = ("R8.2-f",)

    async def c_exchange(self):
        sat = self.main
        cid = sat.mint()
        await sat.send(ts.capture_open(cid, trigger=ops.BUTTON))
        await sat.stream_audio(cid, ts.tone(1000), realtime=False)
        await sat.send(ts.env(cid, "stream_end", reason=ops.PTT_RELEASE))
        try:
            await _terminal(sat, cid, EXCHANGE_S)
        except AssertionError:
            raise CheckFailed("the push-to-talk capture on id %d drew no Response or Error within %.0f s"
                              % (cid, EXCHANGE_S)) from None
        await asyncio.sleep(self.quiet_s)
        terms = [r for r in sat.received if r.id == cid and r.op in ("response", "error")]
        if len(terms) != 1:
            raise CheckFailed("capture %d drew %d terminals (%s): exactly one" % (
                cid, len(terms), ", ".join(_summary(t.env) for t in terms)))
        self.put("R10.8-a", R.PASS, "the capture on id %d ended in one %s" % (cid, terms[0].op), sat)
    c_exchange.rids = ("R10.8-a",)

    async def c_bad_decrypt(self):
        sat = await self.session("XX")
        self.put("R5-a", R.PASS, await P.bad_decrypt(sat, self.step_s), sat)
    c_bad_decrypt.rids = ("R5-a",)

    # -- what every session saw ---------------------------------------------------------------------
    def observe_all(self):
        """The rows judged over every frame the core sent in the run: ids, gating, sizes, seq, uploads."""
        if self.gate is not None:
            return
        bad_ids, seen_ids, gated, oversize, uploads, seq_bad, chunks, setting_bad = [], 0, [], [], [], [], 0, []
        for s in self.sats:
            last = None
            seqs = {}
            for r in s.received:
                op = r.op
                if op in CORE_MINTED and r.id:
                    seen_ids += 1
                    if r.id % 2 or (last is not None and not 0 < ((r.id - last) & 0xFFFFFFFF) < 0x80000000):
                        bad_ids.append((s, r))
                    last = r.id
                elif op in CORE_MINTED and not r.id and op != "ping":
                    bad_ids.append((s, r))
                if op in GATED and not _unlocked(s, r):
                    gated.append((s, r))
                if op == "settings_write" and r.env.settings_write.key not in s.settings:
                    setting_bad.append((s, r))
                if s.max_frame and wire.frame_total_len(r.env.ByteSize(), len(r.tail)) > s.max_frame:
                    oversize.append((s, r))
                if op == "upload_open" or _references_upload(r.env):
                    uploads.append((s, r))
                if op == "stream_chunk" and r.id % 2 == 0:
                    chunks += 1
                    want = seqs.get(r.id, 0)
                    if r.env.stream_chunk.seq != want:
                        seq_bad.append((s, r))
                    seqs[r.id] = r.env.stream_chunk.seq + 1
        self._judge("R6.3-a", bad_ids, seen_ids, "%d core-minted ids, all even, non-zero, counting up" % seen_ids,
                    lambda s, r: "core-minted id %d on %s" % (r.id, r.op))
        frames = sum(len(s.received) for s in self.sats)
        self._judge("R8.2-b", gated, frames, "%d frames, none gated by an undeclared capability" % frames,
                    lambda s, r: "%s sent to a satellite that declared %s" % (_summary(r.env), _caps(s)))
        self._judge("R10.10-e", gated, frames, "%d frames, none the satellite had not unlocked" % frames,
                    lambda s, r: "%s not unlocked" % _summary(r.env))
        limited = sum(len(s.received) for s in self.sats if s.max_frame)
        self._judge("R6.1-b", oversize, limited, "%d frames to a %d-byte receive limit, none over" % (
            limited, SMALL_FRAME), lambda s, r: "a %d-byte frame (%s) to a satellite that receives %d" % (
            wire.frame_total_len(r.env.ByteSize(), len(r.tail)), _summary(r.env), s.max_frame))
        self._judge("R10.4-c", uploads, frames, "%d frames, no UploadOpen or MediaBlock.upload" % frames,
                    lambda s, r: "the core sent %s" % _summary(r.env))
        self._judge("R10.10-c", seq_bad, chunks, "%d core stream chunks, seq from 0 by 1" % chunks,
                    lambda s, r: "chunk on id %d has seq %d" % (r.id, r.env.stream_chunk.seq))
        if setting_bad:
            s, r = setting_bad[0]
            self.put("R8.2-f", R.FAIL, "SettingsWrite to undeclared key %r" % r.env.settings_write.key, s)
        self.put("R6-a", R.PASS, "%d frames from the core, every one cut and decoded" % frames)

    def _judge(self, rid, bad, seen, ok, say):
        if bad:
            s, r = bad[0]
            self.put(rid, R.FAIL, say(s, r), s, focus=r.t)     # the lines around the frame that broke it
        elif seen:
            if rid not in self.results:
                self.put(rid, R.PASS, ok)
        elif rid not in self.results:
            self.put(rid, R.NOT_OBSERVABLE, "the core sent nothing this rule applies to in this run")


async def _terminal(sat, cid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.id == cid and r.op in ("response", "error") for r in sat.received):
            return
        if sat.closed.is_set():
            break
        await asyncio.sleep(0.05)
    raise AssertionError("no terminal")


def _unlocked(s, r):
    op, m = r.op, getattr(r.env, r.op)
    if op == "media_render_open":
        return m.target in s.declared if m.target else bool(s.declared & {surface_pb2.CAPABILITY_SPEAKER,
                                                                          surface_pb2.CAPABILITY_MEDIA_SINK})
    if op == "render":
        return m.target in s.declared
    if op == "request_capture":
        need = surface_pb2.CAPABILITY_IMAGE_CAPTURE if m.image_source else surface_pb2.CAPABILITY_MIC
        return need in s.declared
    if op == "invoke":
        return m.name in s.tools
    if op == "settings_write":
        return m.key in s.settings
    return GATED[op] in s.declared


def _references_upload(e):
    op = e.WhichOneof("op")
    msg = getattr(e, op) if op else None
    blocks = list(getattr(msg, "content", ())) if msg is not None and hasattr(msg, "content") else []
    return any(b.WhichOneof("block") == "media" and b.media.upload for b in blocks)


def _caps(s):
    return ", ".join(surface_pb2.CapabilityKind.Name(k) for k in sorted(s.declared)) or "no capability"


def run(host, port, core_key=None, token=None, step_s=STEP_S, quiet_s=QUIET_S):
    """The whole run, blocking: [Row] in ROWS order. ``quiet_s``: the silence that counts as "nothing was sent"
    (a test bench on loopback may shorten it; the CLI keeps QUIET_S)."""
    return asyncio.run(CoreKit(host, port, core_key=core_key, token=token, step_s=step_s, quiet_s=quiet_s).run())
