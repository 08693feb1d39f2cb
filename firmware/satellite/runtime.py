# The satellite runtime: connect, Noise handshake (IK when a core key is known, else XX; never XX after an IK
# failure), Hello, serve, liveness, reconnect with exponential backoff and jitter (cap <= 60 s), and listening
# mode for sound provisioning. It is the one reader of the button (hal.gesture): it hands each gesture to the
# session's device, the DEFERRED recorder or the provisioning gesture. Protocol rules stay in session.py, the
# socket and framing in link.py, what the device does with a session (and its settings) in device.py, hardware
# in hal/; this module never imports machine or network.
#
# Steady state allocates nothing: sockets are non-blocking and polled with asyncio.sleep_ms (asyncio's
# IOQueue allocates ~100 bytes per wait on MicroPython, so it is used for nothing here).
#
# The watchdog (hal.wdt_start/wdt_feed/wdt_park, optional; docs/reliability.md). run() arms it first thing with
# the board file's watchdog_ms (default _WDT_MS). It is fed (_feed, at most every watchdog_ms/4) only from this
# module's own loops, and only while they make progress against a bound, never from a task of its own (a task
# would keep feeding through a handler that loops or an await that never returns):
#   - serving: each pass of _serve while the core was heard within the liveness limit (3 pings + one max frame:
#     dead_ms, R10.1-b), or the Hello is within its timeout; past them _serve ends the connection anyway;
#   - connecting: each poll of connect (satellite.link.connect) and each handshake read (both end at
#     _HANDSHAKE_TIMEOUT_MS; the OTA updater's download task connects through connect too, so it may feed for
#     those 10 s at most);
#   - the backoff: each tick of _sleep (capped at 60 s);
#   - listening mode / halted: each pass of the ggwave receiver (its stop() callback) or of the record poll;
#   - a DEFERRED recording in progress: each wait of run(), for at most _RECORD_WAIT_MS.
# So a frame handler that never returns (it runs inside _serve), an await that never completes in the connect or
# serve path, or a stuck receiver stops the feeding and the board resets (WDT_RESET); a trial firmware set
# that does so on every boot is rolled back by otaboot after its BOOT_BUDGET boots (an image by the bootloader
# at the first such reset). A firmware on trial (satellite.trial) ticks its deadline in _feed and is confirmed
# only from the serve loop, after a session stayed healthy for its confirmation window (docs/ota.md). The
# longest unfed stretch by design is network_up (Wi-Fi: up to 20 s on esp32), hence the 25 s minimum on chips
# (boards.py).
import gc
import os
import sys

import asyncio
from micropython import const
import time                 # time.ticks_*: one global for the module, not one per function

from satellite import session as S
from satellite import audio
from satellite import device as D
from satellite.hal import PRESS
from satellite import link as L
from satellite.wire import alabama_v1 as pb
from satellite.wire import frame as F
from satellite.noise.transport import NoiseConnection
from satellite.noise.state import NoiseError
from satellite.provision import record as R
from satellite import keystore as K

from satellite import VERSION
_HANDSHAKE_TIMEOUT_MS = const(10000)
_CLOCK_EPOCH_US = const(1 << 40)          # now_us() at boot (see now_us)
_WDT_MS = const(30000)      # the board file's watchdog_ms when it has none (boards/README.md, docs/boards.md)
_RECORD_WAIT_MS = const(35000)  # run() waits out a DEFERRED recording: deferred.MAX_RECORD_MS (30 s) + 5 s

# Why a connection ended (Runtime decides what to do next).
_END_LOST = const(0)        # EOF, reset, silence, timeout: reconnect with backoff
_END_IK_MISMATCH = const(1)  # the core did not prove the pinned key: never XX; retry IK at the backoff cap
_END_CLOSED = const(2)      # REJECTED_CLOSED: no automatic retry, wait for re-provisioning
_END_VERSION = const(3)     # VersionMismatch: no retry loop, wait for a firmware update
_END_STOP = const(4)        # asked to stop (tests, reset)
_END_PROVISION = const(5)   # the user asked for listening mode (button gesture): sound provisioning
_END_DAMAGED = const(6)     # a key-store file is damaged: said once (damaged.py), no retry, wait for the fix

# Runtime.state: where the connection loop is (offline(), listening mode; the virtual board's `state` command
# reports it as is, so the values stay these words).
_STARTING = const("starting")
_CONNECTING = const("connecting")
_HELLO = const("hello")
_CONNECTED = const("connected")
_DISCONNECTED = const("disconnected")
_HALTED = const("halted")          # refused for good (REJECTED_CLOSED, VersionMismatch): no retry until re-provisioned
_LISTENING = const("listening")    # listening mode (sound provisioning)


def hexs(b):
    return "".join("%02x" % x for x in b)


class Runtime:
    """Connects, serves, and reconnects for ever (or until the core rejects us for good)."""

    def __init__(self, board, hal, keystore, log=None, rng=None, options=None, buffers=None):
        self.board = board
        self.hal = hal
        self.ks = keystore
        self.rng = rng or os.urandom
        self.opt = options or {}
        self._log = log or hal.log
        lim = board.get("limits") or {}
        self.max_frame_bytes = lim.get("max_frame_bytes", 4096)
        # Hello.max_concurrent_streams bounds the core's render streams toward us (spec §10.3): advertise what the
        # board can really hold at once, one per render surface (a speaker plays one render at a time), never more
        # than the board file's limit. Past it the core's Open draws TOO_MANY_STREAMS from the session; UNAVAILABLE
        # stays "declared but momentarily out of reach" (speaker muted, still draining the previous reply).
        # Never 0 on the wire: 0 would mean the protocol default of 8.
        au = board.get("audio") or {}
        slots = (1 if au.get("speaker") else 0) + (2 if board.get("display") else 0)   # + a text, an image
        self.max_streams = max(1, min(lim.get("max_concurrent_streams", 4), slots))
        self.buffer_ms = lim.get("buffer_ms", 300)
        self.mic_rate = (au.get("mic") or {}).get("rates", [16000])[0]
        self.spk_rate = (au.get("speaker") or {}).get("rates", [16000])[0]
        self.duplex = self.opt.get("duplex") or board.get("duplex", "full")
        # A board whose microphone the flashed image cannot drive (hal.mic_supported False: an ES7210 without
        # MCLK on the official esp32 image) declares no mic and opens no capture (docs/boards.md).
        self.has_mic = getattr(hal, "mic_supported", True)
        self.ping_ms = self.opt.get("ping_ms", 10000)
        self.wdt_ms = board.get("watchdog_ms", _WDT_MS)
        self._wdt = None             # hal.wdt_feed once run() armed the watchdog (module comment)
        self.watchdog = None         # its timeout in ms while the runtime feeds it (device.info watchdog_ms)
        self._fed = 0
        self.trial = None            # satellite.trial.Trial while the firmware must prove itself (run())
        self.record_wait_ms = _RECORD_WAIT_MS
        wk = board.get("wake") or {}
        if wk.get("models"):         # deploy put models on the flash (a board without any imports nothing here)
            from satellite import wake
            D.WAKE_WORDS[:] = wake.deployed()      # the wake_word setting's options: the models on the flash
        self.wake_barge_in = self.duplex == "full" and wk.get("barge_in", True)
        self.wake = None             # the wake detector once capture_mode wake needed it (wake_engine)
        self.wake_error = None       # why it cannot run (device.info): the board then captures by button
        self._wake_name = None
        self.settings = D.load_settings(keystore, self._log, board)
        D.apply_settings(hal, self.settings)
        self.sat = None
        self.link = None
        self.state = _STARTING
        self.pattern = None
        self.stopped = False
        self._gesture = None
        self._device_key = None
        self.attempts = 0
        self.connections = 0
        self.core_key_in_use = None
        # The big buffers live as long as the runtime: reconnecting allocates none of them again (a fresh
        # block after hours of uptime is exactly what a fragmented heap cannot give). All follow the board
        # file (satellite.buffers): the Noise receive buffer holds one message of our advertised
        # max_frame_bytes (4 KiB on a no-PSRAM board, not 64 KiB). app.main allocates them before the big
        # imports and passes them in; tests let the runtime make its own.
        b = buffers
        if b is None:
            from satellite.buffers import Buffers
            b = Buffers(board)
        self.buffers = b             # rx, noise_rx, frame, play: read through it (fewer instance attributes)
        self.ring = audio.JitterRing(b.ring_bytes, b.ring)
        self.conn = None
        self.last_rx = 0
        self.t_boot = time.ticks_ms()
        self.trace = self.opt.get("trace", True)
        self.record = None
        self.frames_dropped = 0
        self._health = None          # satellite.health, imported at the first session (the `health` property)
        self._frozen = None          # frozen_digest(), looked up once
        # The panel (a board file with "display"): satellite.display is imported only then (docs/display.md).
        p = hal.panel() if board.get("display") and hasattr(hal, "panel") else None
        self.display = None
        if p is not None:
            from satellite.display import Display
            self.display = Display(board, p)
            self.display.log = self.log
        # satellite.deferred.Deferred, or app.IdleDeferred while the store is empty (app.boot): record offline,
        # upload on connect
        self.deferred = None

    def log(self, line):
        self._log("sat: " + line)

    # -- the watchdog (module comment: when it is fed) ----------------------------------------------------
    def _arm(self):
        start = getattr(self.hal, "wdt_start", None)
        if start is None:
            return
        ms = self.wdt_ms
        if type(ms) is not int or ms < 1000:      # a board.json deployed without `alabama board validate`
            self.log("board.json watchdog_ms %r is not a whole number of ms >= 1000: using %d" % (ms, _WDT_MS))
            self.wdt_ms = _WDT_MS
        try:
            start(self.wdt_ms)
        except (OSError, ValueError) as e:
            self.log("watchdog NOT armed (%s: %s): a hang will need a reset by hand" % (type(e).__name__, e))
            return
        self._wdt = self.hal.wdt_feed
        self.watchdog = self.wdt_ms
        self._fed = time.ticks_ms()
        self.log("watchdog armed: %d ms" % self.wdt_ms)

    def _feed(self, now):
        """Feed the watchdog (at most every wdt_ms/4); only the loops the module comment names call it. 0 B
        (a trial's tick writes its running time every trial.SAVE_MS, only while a trial runs)."""
        tr = self.trial
        if tr is not None and tr.tick(now):
            self.trial = None
            tr.expire(now)                       # resets the board: the trial is rolled back
        f = self._wdt
        if f is not None and time.ticks_diff(now, self._fed) >= self.wdt_ms >> 2:
            self._fed = now
            f()

    def park_watchdog(self):
        """app.main, on Ctrl-C: the REPL has the board now; the HAL feeds the armed watchdog until a reset."""
        park = getattr(self.hal, "wdt_park", None)
        if self._wdt is not None and park is not None:
            self._wdt = self.watchdog = None
            park()
            self.log("watchdog parked: fed by the HAL while the REPL has the board (reset or Ctrl-D: the "
                     "runtime starts again and feeds it)")

    def _open_trial(self):
        """satellite.trial's Trial when the firmware must prove itself. Only a board that took an update has
        ota/state.json: any other keeps satellite.trial and otaboot unloaded (docs/memory.md)."""
        try:
            os.stat("ota/state.json")         # otaboot.STATE
        except OSError:
            return None
        from satellite import trial
        tr = trial.open_trial(self.board, time.ticks_ms(), self.log)
        if tr is None:
            self._drop_trial()
        else:
            self.log("firmware on trial: confirmed after a session healthy for %d ms, rolled back if not within "
                     "%d ms (%d ms spent)" % (tr.confirm_ms, tr.deadline_ms, tr.spent))
        return tr

    def _drop_trial(self):
        """No trial (any more): its module and otaboot leave the heap (satellite.health imports otaboot again)."""
        self.trial = None
        sys.modules.pop("satellite.trial", None)
        if self._health is None:
            sys.modules.pop("otaboot", None)

    def _confirm(self, sat, now):
        """The serve loop: the trial is proven (satellite.trial.Trial.proven); otaboot makes it the firmware."""
        tr = self.trial
        self._drop_trial()
        import otaboot
        if otaboot.confirm():
            sat.log("firmware %s confirmed: a session healthy for %d ms, %d Ping rounds answered" % (
                VERSION, time.ticks_diff(now, tr.t_session), sat.rounds))

    def frozen_digest(self):
        """The frozen image's firmware digest, "" when the firmware runs from files (health.image_digest)."""
        d = self._frozen
        if d is None:
            from satellite import health
            d = self._frozen = health.image_digest()
        return d

    @property
    def health(self):
        """The device.info / firmware.update tools and the device.health Event (satellite.health): needed
        from the first Hello on, so a board that has not reached a core yet (listening for its first
        provisioning, or offline) does not hold its 7 KB (32-bit, .mpy)."""
        h = self._health
        if h is None:
            from satellite import health
            h = self._health = health.Health(self)
        return h

    def offline(self):
        """No session, and none coming up: the DEFERRED recorder owns the button then (satellite.deferred)."""
        st = self.state
        return self.sat is None and (st == _DISCONNECTED or st == _CONNECTING or st == _STARTING)

    # -- surface ----------------------------------------------------------------------------------------
    def mic_format(self):
        return D.audio_format(self.mic_rate)

    def surface(self, token):
        caps = [
            pb.CapabilityDescriptor(kind=pb.CapabilityKind.CAPABILITY_MIC, mic=pb.MicParams(format=self.mic_format())),
        ] if self.has_mic else []
        caps += [
            pb.CapabilityDescriptor(kind=pb.CapabilityKind.CAPABILITY_SPEAKER, speaker=pb.SpeakerParams(
                format=D.audio_format(self.spk_rate), buffer_ms=self.buffer_ms)),
        ]
        if self.display is not None:
            caps += self.display.capabilities()
        from satellite import health
        tools = health.tools(bool(self.frozen_digest()), self.hal)
        events = [
            pb.EventDescriptor(id="button.press", description="Short press of the button while the assistant is busy, or in ambient mode"),
            pb.EventDescriptor(id="button.long_press", description="Long press of the button (also stops the turn)"),
        ] + health.events()
        return S.Surface(capabilities=caps, tools=tools, events=events, settings=D.descriptors(self.settings),
                         max_frame_bytes=self.max_frame_bytes, max_concurrent_streams=self.max_streams,
                         display_name=(self.board.get("id") or "satellite")[:64],
                         software=("alabama-satellite/%s %s %s" % (VERSION, sys.implementation.name,
                                                                   self.board.get("id", "")))[:64],
                         pairing_token=token)

    def info(self):
        return {"board": self.board.get("id"), "firmware": VERSION, "duplex": self.duplex,
                "heap_free": gc.mem_free() if hasattr(gc, "mem_free") else 0,
                "uptime_ms": time.ticks_diff(time.ticks_ms(), self.t_boot), "pattern": self.pattern,
                "wake": self._wake_name if self.wake is not None else None, "wake_error": self.wake_error}

    def wake_engine(self):
        """The wake detector of the wake_word setting, loaded once (and again when the setting changes); None when
        it cannot run here (no model, too large for the heap, a damaged file): wake_error says why, logged once,
        and the board goes on capturing by button. Never raises: a board that cannot wake must not crash-loop."""
        name = self.settings["wake_word"]
        if name == self._wake_name:
            return self.wake
        self.wake = None
        self._wake_name = name
        if not self.has_mic:
            self.wake_error = "no usable microphone: %s" % getattr(self.hal, "mic_error", "")
            self.log("wake: cannot run (%s): the button captures instead" % self.wake_error)
            return None
        gc.collect()
        try:
            from satellite.wake import detector
            self.wake = detector.load(name or "(none)", self.mic_rate)
            self.wake_error = None
            self.log("wake: model %s listening for %s" % (name, self.wake.word))
        except Exception as e:  # noqa: BLE001 - WakeUnavailable, and MemoryError while importing the engine
            self.wake_error = "%s: %s" % (type(e).__name__, e) if type(e).__name__ != "WakeUnavailable" else str(e)
            self.log("wake: cannot run (%s): the button captures instead" % self.wake_error)
            gc.collect()
        return self.wake

    # -- provisioning -----------------------------------------------------------------------------------
    def load_record(self):
        raw = self.ks.read(K.RECORD)
        if raw is None:
            return None
        return R.decode(raw)

    def token(self, rec):
        if not rec.pairing_token:
            return ""
        if rec.token_expires:
            now = time.time()
            if time.gmtime(0)[0] == 2000:
                now += 946684800             # bare-metal epoch 2000 -> Unix seconds
            if now > 1700000000 and now >= rec.token_expires:
                self.log("pairing token expired: not sent (provision a new one)")
                return ""
        return rec.pairing_token

    def on_paired(self):
        key = self.conn.remote_static
        try:
            self.ks.pin_core_key(key)
        except K.KeyStoreError as e:
            self.log("paired, but the key was not pinned: %s" % e)
            return
        rec = self.record
        if rec is not None and rec.pairing_token:
            rec.pairing_token = ""
            rec.token_expires = 0
            self.ks.write(K.RECORD, R.encode(rec))
        if self.sat is not None:
            self.sat.s.surface.pairing_token = ""
        self.log("paired: core key %s pinned, token dropped; next connection uses IK" % hexs(key[:8]))

    def _damaged(self, name, e):
        """A damaged key-store file: one line saying which, what happened and the command that fixes it; the
        board halts (no retry loop) and waits for a new record (damaged.py, loaded only now)."""
        from satellite import damaged
        self.log(damaged.line(self.ks, name, e))
        return _END_DAMAGED

    def _raw_record(self):
        """The record file's bytes for change detection (None: none; a damaged one compares as itself)."""
        try:
            return self.ks.read(K.RECORD)
        except K.KeyStoreError:
            return b"?"

    # -- one connection -------------------------------------------------------------------------------------
    def connect(self, host, port):
        """A socket to host:port (satellite.link.connect), bounded by the handshake timeout, feeding the watchdog
        while it waits. The session's connect and the OTA updater's downloads (health.py) both use it."""
        return L.connect(host, port, _HANDSHAKE_TIMEOUT_MS, self._feed)

    def _close_link(self):
        if self.link is not None:
            self.link.close()
        self.link = None

    def _quiet_mic(self):
        """Before any X25519: no microphone may be capturing. A scalar multiplication holds the CPU for tens
        of ms on the S3 (seconds with the pure fallback) and the esp32 port drops RX DMA frames silently
        when nobody reads them (hal/esp32.py). A connection's Satellite is closed before the next handshake,
        so this only catches a capture some other path left open: it is closed, and said."""
        busy = getattr(self.hal, "mic_busy", None)
        if busy is not None and busy():
            self.log("mic still open before a handshake: closing it (X25519 would overrun its DMA)")
            self.hal.mic_close()

    async def _handshake(self, host, port, pattern, core_key, priv, pub):
        """Connect and run the Noise handshake; the NoiseConnection, or None when the core did not prove
        the pinned key under IK (the caller tries the next candidate or gives up: never XX)."""
        self._quiet_mic()
        self._close_link()
        sock = await self.connect(host, port)
        self.conn = None
        gc.collect()
        # TX_CAPACITY (largest frame we send: Hello, tool results, one Noise message) lives beside the buffers
        # it sizes; imported here, once a connection, rather than held as a module global
        from satellite.buffers import TX_CAPACITY
        conn = NoiseConnection(True, priv, pattern=pattern, remote_static=core_key, rng=self.rng,
                               tx_capacity=TX_CAPACITY, rx_buf=self.buffers.noise_rx, static_public=pub,
                               tx_buf=self.buffers.noise_tx)
        self.conn = conn
        link = self.link = L.Link(sock, conn, self.max_frame_bytes, self.buffers.frame)
        try:
            out = conn.start()
            link.write(out, len(out))
            while not conn.handshake_done:
                self._feed(time.ticks_ms())
                n = await link.read(self.buffers.rx, _HANDSHAKE_TIMEOUT_MS)
                self.last_rx = time.ticks_ms()
                conn.receive_into(self.buffers.rx, 0, n)
                out = conn.data_to_send()
                if out:
                    link.write(out, len(out))
        except NoiseError as e:
            if e.code == "IK_KEY_MISMATCH":
                self.log("IK FAILED at %s: %s" % (host, e))
                return None
            raise L.LinkError("HANDSHAKE", "Noise handshake failed (%s): %s" % (e.code, e))
        except L.LinkError as e:
            if pattern == "IK" and e.code in ("EOF", "READ"):
                self.log("IK FAILED at %s: the core closed the connection during the IK handshake: its static key "
                         "is not the pinned one (or it is not an Alabama core); not falling back to XX" % host)
                return None
            raise
        return conn

    async def connect_once(self):
        """Connect, handshake, Hello, serve until the connection ends; return an END_* code."""
        try:
            rec = self.load_record()
        except (R.RecordError, K.KeyStoreError) as e:
            return self._damaged(K.RECORD, e)
        self.record = rec
        if rec is None:
            self.log("no provisioning record: provision this board (alabama provision) and reset it")
            return _END_CLOSED
        try:
            core_key = rec.core_key or self.ks.pinned_core_key()
            if self._device_key is None:
                self._quiet_mic()
                # computed once: deriving the public key is an X25519 (~50 ms on the S3) per connection otherwise
                self._device_key = self.ks.device_key()
        except K.KeyStoreError as e:
            return self._damaged(e.name or K.DEVICE_KEY, e)
        pattern = "IK" if core_key else "XX"
        priv, pub = self._device_key
        self.pattern = pattern
        self.state = _CONNECTING
        # the record's core_host may list several candidate addresses, comma-separated (R7.3-g)
        hosts = [h.strip() for h in rec.core_host.split(",") if h.strip()]
        if pattern == "XX":
            hosts = hosts[:1]           # trust on first use needs one address: XX never shops around
        conn = None
        for host in hosts:
            # R7.3-g: several candidates (a dev and a production core on one network) -> IK against each in
            # turn; the first whose key matches the pin wins. A mismatch is never answered with XX.
            self.log("connecting to %s:%d with Noise %s (device key %s)" % (host, rec.core_port, pattern,
                                                                            hexs(pub[:8])))
            try:
                conn = await self._handshake(host, rec.core_port, pattern, core_key, priv, pub)
            except (OSError, L.LinkError) as e:
                if host is hosts[-1]:
                    raise
                self.log("candidate %s unreachable (%s): trying the next" % (host, e))
                continue
            if conn is not None:
                break
        if conn is None:
            return _END_IK_MISMATCH
        self.core_key_in_use = conn.remote_static
        self.log("handshake done (%s), core key %s" % (pattern, hexs(conn.remote_static[:8])))
        sess = S.Session(self.surface(self.token(rec)))
        link = self.link
        sat = D.Satellite(self, sess, link)
        sat.accepted = self._accepted
        link.on_frame = sat.on_frame
        link.on_oversize = sat.on_oversize
        self.sat = sat
        sat.send(sess.hello())
        self.last_rx = time.ticks_ms()          # also when the Hello went out: _serve's HelloResponse timeout
        self.state = _HELLO
        try:
            return await self._serve(sess, link, sat)
        finally:
            sat.close()
            self.sat = None
            if self.trial is not None:
                self.trial.ended()

    def _accepted(self, ev):
        """The runtime's side of an accepted Hello (Satellite.on_frame calls it, in frame order)."""
        sat = self.sat
        self.state = _CONNECTED
        self.attempts = 0
        self.connections += 1
        self.log("accepted: core max_frame_bytes %d max_concurrent_streams %d heap_free=%d" % (
            ev.max_frame_bytes, ev.max_concurrent_streams, gc.mem_free()))
        sat.started(ev.max_frame_bytes)
        if self.trial is not None:
            self.trial.session(time.ticks_ms())  # its confirmation window starts (_serve confirms)
        self.health.on_session(sat)
        if self.deferred is not None:
            sat.spawn(self.deferred.upload(sat))

    async def _serve(self, sess, link, sat):
        buf = self.buffers.rx
        t_hello = self.last_rx                              # the Hello went out then (connect_once)
        last_ping = time.ticks_ms()
        allowance = 1000 + self.max_frame_bytes // 12        # one max frame at ~100 kbit/s
        dead_ms = 3 * self.ping_ms + allowance                 # R10.1-b: bounded half-open detection
        while True:
            if sat.end is not None:                      # the core refused us (Satellite.on_frame)
                return _END_CLOSED if type(sat.end) is S.Rejected else _END_VERSION
            if self.stopped:
                return _END_STOP
            n = link.poll(buf)
            now = time.ticks_ms()
            if n is not None:
                self.last_rx = now
                link.feed(buf, 0, n)
            if sess.state == S.HELLO_SENT and time.ticks_diff(now, t_hello) > _HANDSHAKE_TIMEOUT_MS:
                raise L.LinkError("TIMEOUT", "no HelloResponse within %d ms" % _HANDSHAKE_TIMEOUT_MS)
            if sess.state == S.ACTIVE:
                if time.ticks_diff(now, self.last_rx) > dead_ms:
                    raise L.LinkError("SILENT", "nothing from the core for %d ms (3 ping intervals + %d ms): "
                                    "connection presumed dead" % (time.ticks_diff(now, self.last_rx), allowance))
                if time.ticks_diff(now, last_ping) >= self.ping_ms:
                    last_ping = now
                    p = sess.ping(self.now_us())
                    link.send(p)
            if time.ticks_diff(now, self.last_rx) <= dead_ms or sess.state == S.HELLO_SENT:
                self._feed(now)                          # the liveness rule (module comment: the watchdog)
                tr = self.trial
                if tr is not None and tr.proven(now, sat.rounds):
                    self._confirm(sat, now)
            g = self.hal.gesture()
            while g:
                if self.deferred is not None and self.deferred.take_gesture(g):
                    pass                                 # ends the offline recording still going
                elif sess.state == S.ACTIVE:
                    sat.gesture(g)
                if g == PRESS and self._provision_gesture(now):
                    self.log("provision: button gesture: leaving the core for listening mode")
                    return _END_PROVISION
                g = self.hal.gesture()
            await asyncio.sleep_ms(L.POLL_MS if n is None else 0)

    def now_us(self):
        """A monotonic microsecond clock that does not wrap (ticks_us wraps on the board)."""
        t = time.ticks_us()
        if not hasattr(self, "_us_last"):
            self._us_last = t
            self._us_acc = 0
        self._us_acc += time.ticks_diff(t, self._us_last)
        self._us_last = t
        # From 2**40 us (12.7 days), not 0: a DEFERRED recording of an earlier boot, rebased onto this boot's
        # clock (satellite.deferred), lands before this boot and must still be a positive capture_ts.
        return self._us_acc + _CLOCK_EPOCH_US

    # -- the forever loop ---------------------------------------------------------------------------------
    def backoff_ms(self):
        o = self.opt                                            # the test knobs (hal.options())
        cap = min(o.get("backoff_cap_ms", 60000), 60000)
        d = o.get("backoff_base_ms", 500) << min(self.attempts, 16)
        if d > cap:
            d = cap
        r = self.rng(2)
        j = (r[0] << 8 | r[1]) * (d // 2) // 65536
        return d // 2 + j                                       # jitter: uniform in [d/2, d)

    async def run(self):
        self._arm()
        self.trial = self._open_trial()
        await self.hal.network_up(self)
        self._feed(time.ticks_ms())
        if self.display is not None:
            asyncio.create_task(self.display.run())
        if self.deferred is not None:
            asyncio.create_task(self._button_offline())
        while not self.stopped:
            await self._wait_recording()
            end = _END_LOST
            try:
                end = await self.connect_once()
            except L.LinkError as e:
                self.log("connection lost (%s): %s" % (e.code, e))
            except (OSError, NoiseError, F.FrameError, ValueError) as e:
                self.log("connection failed (%s): %s" % (type(e).__name__, e))
            except Exception as e:  # a bug must not end the device: log it loudly, reconnect
                self.log("INTERNAL ERROR (%s): %s - reconnecting" % (type(e).__name__, e))
                if hasattr(sys, "print_exception"):
                    sys.print_exception(e)
            finally:
                self._close_link()
                self.conn = None
                self.state = _DISCONNECTED
                gc.collect()
            if end == _END_STOP or self.stopped:
                break
            if end in (_END_CLOSED, _END_VERSION, _END_PROVISION, _END_DAMAGED):
                if end != _END_PROVISION:
                    self.state = _HALTED
                    self.log("halted: waiting for re-provisioning (no automatic retry)")
                await self._wait_reprovision()
                self.attempts = 0
                continue
            if end == _END_IK_MISMATCH:
                self.attempts = 16                     # never XX; try the pinned key again at the cap only
            d = self.backoff_ms()
            self.attempts += 1
            self.log("reconnecting in %d ms (attempt %d)" % (d, self.attempts))
            await self._sleep(d)

    async def _wait_recording(self):
        """No X25519 while the mic records (see _quiet_mic): wait out a DEFERRED recording. It is bounded
        (record_wait_ms), so the watchdog is fed only that long: a recording that never ends is a hang."""
        t0 = time.ticks_ms()
        while self.deferred is not None and self.deferred.recording is not None and not self.stopped:
            now = time.ticks_ms()
            if time.ticks_diff(now, t0) <= self.record_wait_ms:
                self._feed(now)
            await asyncio.sleep_ms(20)

    async def _button_offline(self):
        """The button while no session is served (the serve loop reads it then): one gesture per 10 ms to the
        DEFERRED recorder, which records offline (a press) until the release."""
        while not self.stopped:
            if self.deferred is not None and self.offline():
                g = self.hal.gesture()
                if g:
                    self.deferred.take_gesture(g)
            await asyncio.sleep_ms(10)

    async def _sleep(self, ms):
        t0 = time.ticks_ms()
        now = t0
        while time.ticks_diff(now, t0) < ms and not self.stopped:
            self._feed(now)                              # the backoff ticking (module comment: the watchdog)
            await asyncio.sleep_ms(min(50, ms))
            now = time.ticks_ms()

    def _provision_gesture(self, now):
        """Five short presses within 3 s enter listening mode (gesture.Gesture: a press imports only that
        small module; listen and the ggwave receiver are imported when listening mode starts)."""
        if self._gesture is None:
            from satellite.provision.gesture import Gesture
            self._gesture = Gesture()
        return self._gesture.feed(PRESS, now)

    async def _wait_reprovision(self):
        """Listening mode until a new record is stored: by sound (listen.run), or by serial/QR tools writing
        the record file, which the stop() check notices. A mic that cannot run at 16 kHz only polls."""
        old = self._raw_record()
        calls = [0]

        def stop():
            calls[0] += 1
            self._feed(time.ticks_ms())      # each pass of the receiver: listening mode makes progress
            if self.stopped:
                return True
            return calls[0] % 25 == 0 and self._raw_record() != old

        from satellite.provision import listen
        if self.state != _HALTED:            # a halted board listens too, but stays halted (no retry)
            self.state = _LISTENING
        try:
            if not self.has_mic:
                raise listen.ListenError("NO_MIC", "no usable microphone: provision this board by QR code or serial")
            self.ring.clear()                  # no render now: its buffer holds the receiver's ring
            rec = await listen.run(self.hal, self.ks, rate=self.mic_rate, log=self.log, stop=stop,
                                   ring=self.buffers.ring)
        except listen.ListenError as e:
            self.log("provision: %s" % e)
            rec = None
            while not self.stopped and self._raw_record() == old:
                self._feed(time.ticks_ms())
                await asyncio.sleep_ms(500)
        if rec is not None or self._raw_record() != old:
            self.log("new provisioning record: connecting again")
            await self.hal.network_up(self)      # its Wi-Fi may be another network (esp32: up to 20 s)
            self._feed(time.ticks_ms())
