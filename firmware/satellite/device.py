# The device side of one session: what the satellite does with the frames a session delivers (capture,
# render, display, tools, settings, button), and the ONE settings table. It drives the HAL it is handed and
# answers through the Link; it never touches a socket, a handshake or a reconnect (satellite.runtime) and
# holds no protocol rule (satellite.session).
#
# Steady state allocates nothing: the capture loop writes mic samples straight into the Link's frame buffer,
# the play loop moves the jitter ring to a preallocated buffer, and the hot paths avoid tuples, kwargs,
# closures and slices.
# Module globals cost heap at rest (a dict slot each, and the dict grows in steps: 17 -> 23 -> 29 slots), so json
# and the gesture codes (satellite.hal) are imported in the functions that use them, and FRAME_MS is a private
# copy (tests/firmware/test_settings_table.py checks it and _MAX_GAIN_DB against their owners).
import asyncio
from micropython import const
import time                 # time.ticks_*: one global, not two

from satellite import session as S
from satellite import audio
from satellite.wire import alabama_v1 as pb

_FRAME_MS = const(20)               # satellite.buffers.FRAME_MS: one capture chunk / one playout step
_MAX_GAIN_DB = const(24)            # satellite.audio.MAX_GAIN_DB: the mic_gain setting's top

_MAX_CAPTURE_MS = const(30000)      # a capture nobody ends is ended by the device (StreamEnd TIMEOUT)

_PHASES = const(("IDLE", "LISTENING", "PROCESSING", "SPEAKING", "ERROR"))
_REASONS = const(("UNSPECIFIED", "COMPLETE", "END_DETECTED", "PTT_RELEASE", "BARGE_IN", "STOPPED", "SUPERSEDED",
            "TIMEOUT", "FAILED"))

# The settings, the one owner of each one's default, range, label and kind: (key, default, lo, hi, label);
# an int setting has bounds lo..hi, an enum one its options in lo (hi None). Descriptors, the check of a
# write or of the stored file, and the device.set_volume tool's schema (satellite.health) all read it. One
# const tuple: frozen, it lives in flash.
SETTINGS = const((
    ("volume", 60, 0, 100, "Volume"),
    ("mic_gain", 0, 0, _MAX_GAIN_DB, "Microphone gain (dB)"),
    ("led_brightness", 50, 0, 100, "LED brightness"),
    ("capture_mode", "ptt", ("ptt", "ambient", "wake"), None, "Capture mode"),
    ("wake_word", "", (), None, "Wake word"),       # options (): the deployed models, WAKE_WORDS
))

# The deployed wake models' names (satellite.wake.deployed), which Runtime fills at boot before the settings are
# loaded: the wake_word setting's options. Empty: no model on this board (no wake_word descriptor then).
WAKE_WORDS = []


def row(key):
    """The settings table's row of `key` (key, default, lo, hi, label), or None."""
    for r in SETTINGS:
        if r[0] == key:
            return r
    return None


def check_setting_raw(key, v):
    """v when it is a valid value of setting `key`, else None."""
    r = row(key)
    if r is None:
        return None
    if r[3] is None:
        return v if v in (r[2] or WAKE_WORDS) else None
    if type(v) is not int or not r[2] <= v <= r[3]:
        return None
    return v


def descriptors(settings):
    out = []
    for key, _, lo, hi, label in SETTINGS:
        if hi is None:
            if not (lo or WAKE_WORDS):
                continue             # wake_word on a board without a wake model
            d = pb.SettingDescriptor(key=key, label=label, type=pb.SettingType.SETTING_ENUM,
                                     options=list(lo or WAKE_WORDS), value=pb.SettingValue(string_value=settings[key]))
        else:
            d = pb.SettingDescriptor(key=key, label=label, type=pb.SettingType.SETTING_INT, min=lo, max=hi,
                                     value=pb.SettingValue(int_value=settings[key]))
        out.append(d)
    return out


def load_settings(ks, log, board=None):
    """Each setting's value: the table's default, over it the board file's "settings" (a board's own default,
    e.g. capture_mode ambient on a living-room board: boards/README.md), over that the stored one (a written
    setting beats the board file). A value out of range (or the file unreadable) falls through to the one
    below it."""
    import json
    from satellite import keystore as K         # loaded by the runtime already: no global here for two uses
    st = {}
    for r in SETTINGS:
        st[r[0]] = r[1]
    layers = [(board or {}).get("settings")]
    try:
        raw = ks.read(K.SETTINGS)
        if raw:
            layers.append(json.loads(raw))
    except (ValueError, K.KeyStoreError) as e:
        log("sat: settings file unreadable (%s): defaults used" % e)
    for d in layers:
        if isinstance(d, dict):
            for k in st:
                if k in d and check_setting_raw(k, d[k]) is not None:
                    st[k] = d[k]
    if not st["wake_word"] and WAKE_WORDS:
        st["wake_word"] = WAKE_WORDS[0]         # none chosen: the first deployed model
    return st


def apply_settings(hal, st):
    hal.set_volume(audio.volume_q14(st["volume"]))
    hal.set_mic_gain(audio.mic_gain_q8(st["mic_gain"]))
    hal.set_led_brightness(st["led_brightness"])


def audio_format(rate):
    """The one PCM format this device speaks both ways: 16-bit little-endian mono at `rate`."""
    return pb.AudioFormat(encoding=pb.Encoding.PCM_S16LE, sample_rate=rate, channels=1, sample_bits=16)


def reason_name(r):
    t = _REASONS                # one use of the constant: one tuple in the .mpy
    return t[r] if 0 <= r < len(t) else str(r)


class Satellite:
    """What the device does on one session. The Runtime hands it every frame (on_frame, the one dispatcher)
    and every gesture; it answers through link.send and drives hal (mic, speaker, LED). `log(line)` is the
    serial log. What it still asks the runtime for: deferred (swapped at run time), health, on_paired and
    frames_dropped; everything else is handed in here."""

    def __init__(self, rt, sess, link):
        self.rt = rt
        self.hal = rt.hal
        self.log = rt.log
        self.ks = rt.ks
        self.s = sess
        self.link = link
        self.settings = rt.settings
        self.now_us = rt.now_us
        self.trace = rt.trace
        self._runs = [0] * 12        # StreamChunk runs being counted for the trace: (id, 0 tx / 1 rx, count) x 4
        self.has_mic = rt.has_mic
        self.max_frame_bytes = rt.max_frame_bytes
        self.accepted = None         # accepted(ev): the runtime's side of a HelloResponse that accepted us
        self.end = None              # the Rejected / VersionMismatch that ended this session (Runtime._serve reads it)
        self.mic_rate = rt.mic_rate
        self.spk_rate = rt.spk_rate
        self.half = rt.duplex == "half"
        self.wake_barge = rt.wake_barge_in       # the wake word is heard while a reply plays (full duplex only)
        self.waking = False                      # the wake loop runs (capture_mode wake)
        self._wake_fed = None                    # the detector the mic has fed without a gap
        self.nframes = self.mic_rate * _FRAME_MS // 1000            # samples per capture chunk
        self.pframes = self.spk_rate * _FRAME_MS // 1000            # samples per playout step
        self.play_buf = rt.buffers.play
        self.display = rt.display
        if self.display is not None:
            self.display.on_error = self._display_error   # a decode that fails after its StreamEnd
        buffer_ms = rt.buffer_ms
        self.ring = rt.ring
        self.ring.clear()
        self.prefill = 2 * self.spk_rate * (buffer_ms // 2) // 1000
        # capture state
        self.capture_id = 0          # our mic stream that takes chunks (0: mic off)
        self.capture_ptt = False     # opened by the button (ends on release)
        self.capture_ambient = False
        self.capture_t0 = 0
        self.pending = []            # our capture ids whose mic ended, waiting for Response/Error
        self.mic_open = False
        self.mic_paused = False      # half duplex: released while the speaker plays
        self.superseded_ambient = False
        self.requested_id = 0
        # render state
        self.render_id = 0
        self.render_ended = False
        self.render_muted = False    # barge-in: the sound stopped locally, chunks are dropped
        self.frames_played = 0
        self.spk_open = False
        # button
        self.press_t = 0
        self.press_opened = False    # this press opened a PTT capture
        self.press_long = False
        self.phase = 0
        self.closed = False
        self.offset_us = 0
        self.rtt_us = 0
        self.rounds = 0              # Ping rounds the core answered in this session (a trial's proof, satellite.trial)
        self.tasks = []

    # -- helpers --------------------------------------------------------------------------------------
    def send(self, env):
        self.link.send(env)
        if self.trace:
            self._trace(0, env)

    # -- the serial log's frame trace -----------------------------------------------------------------
    # A StreamChunk is not a line each (one per audio frame would allocate on the audio path): a stream's first
    # is ("tx stream_chunk id 3 seq 0"), the rest are counted in _runs and their number logged before the
    # frame that ends the stream ("tx stream_chunk id 3 +157"); the web page's timeline collapses them (§4).
    def note_rx(self, env):
        if self.trace:
            self._trace(1, env)

    def _trace(self, d, env):
        op = env.op
        if op == "stream_chunk":
            self._chunk(d, env.id, env.stream_chunk.seq)
            return
        if op == "stream_end" or op == "stream_cancel" or op == "error" or op == "response" or op == "hello":
            self._runs_end(0 if op == "hello" else env.id)       # a Hello: a new connection, all runs over
        self.log("%s %s id %d" % (("tx", "rx")[d], op, env.id))

    def _chunk(self, d, id, seq):
        r = self._runs
        free = -1
        for i in range(0, 12, 3):
            if r[i] == id and r[i + 1] == d:
                r[i + 2] += 1
                return
            if r[i] == 0 and free < 0:
                free = i
        if free >= 0:
            r[free] = id
            r[free + 1] = d
            r[free + 2] = 0
        self.log("%s stream_chunk id %d seq %d" % (("tx", "rx")[d], id, seq))

    def _runs_end(self, id):
        r = self._runs
        for i in range(0, 12, 3):
            if r[i] != 0 and (id == 0 or r[i] == id):
                if r[i + 2]:
                    self.log("%s stream_chunk id %d +%d" % (("tx", "rx")[r[i + 1]], r[i], r[i + 2]))
                r[i] = 0

    # -- the frame dispatcher: Link -> Session -> here ------------------------------------------------
    def on_frame(self, env, buf, ts, te):
        op = env.op
        if self.trace:
            self._trace(1, env)
        now = self.now_us() if op == "ping" or op == "ping_response" or op == "hello_response" else 0
        s = self.s
        ev = s.receive(env, now)
        o = s.outgoing()
        while o is not None:
            self.send(o)
            o = s.outgoing()
        if ev is None:
            return
        t = type(ev)
        if t is S.Accepted:
            self.link.negotiated(self.max_frame_bytes, ev.max_frame_bytes)
            self.accepted(ev)
        elif t is S.Rejected:
            self.log("REJECTED by the core (reason %d, %s): it is in closed mode and does not know this "
                     "device; not retrying - re-provision or have the admin register it" % (ev.reason, ev.message))
            self.end = ev
        elif t is S.VersionMismatch:
            self.log("VERSION MISMATCH: the core (wire version %d) needs at least wire version %d, this "
                     "firmware speaks %d: update the firmware (%s); not retrying" % (
                         ev.server_version, ev.min_wire_version, S.WIRE_VERSION, ev.message))
            self.end = ev
        else:
            self.on_event(ev, buf, ts, te)

    def on_oversize(self, env, total):
        self.log("frame of %d bytes over our max_frame_bytes %d" % (total, self.max_frame_bytes))
        if env is not None and env.id and not (env.id & 1):
            self.link.send(self.s.error(env.id, pb.ErrorCode.FRAME_TOO_LARGE, "frame of %d bytes over %d"
                                        % (total, self.max_frame_bytes)))

    def busy(self):
        return self.capture_id or self.pending or self.render_id

    async def clock_round(self, wait_ms, into, rounds=4):
        """The device's own four-timestamp Ping rounds, one after another: this boot's clock offset (core -
        device, us) from the round with the lowest round trip (NTP-style: a round is off by at most half its
        rtt, and the first of a connection is often the slowest), or None when none came within wait_ms
        (satellite.deferred anchors recordings with it). Each better round goes to into.offset_us at once, so
        a link cut between rounds keeps what was learnt; offset_us / rtt_us are left at the best round's."""
        best = None
        rtt = 0
        t0 = time.ticks_ms()
        while rounds and not self.closed:
            self.offset_us = 0
            self.send(self.s.ping(self.now_us()))
            while not self.offset_us and not self.closed and time.ticks_diff(time.ticks_ms(), t0) < wait_ms:
                await asyncio.sleep_ms(5)
            if not self.offset_us:
                break
            if best is None or self.rtt_us < rtt:
                best = into.offset_us = self.offset_us
                rtt = self.rtt_us
            rounds -= 1
        self.offset_us, self.rtt_us = best or 0, rtt
        return best

    def spawn(self, coro):
        # Finished tasks are dropped here, not only at close(): a session lives for days and spawns a
        # capture and a play loop per exchange; each finished Task keeps its coroutine (~150 bytes on the
        # 32-bit port), which the soak saw as free heap falling ~290 bytes per exchange (docs/soak.md).
        ts = self.tasks
        i = len(ts)
        while i:
            i -= 1
            if ts[i].done():
                ts.pop(i)
        t = asyncio.create_task(coro)
        ts.append(t)
        return t

    # -- session start / end -------------------------------------------------------------------------
    def started(self, peer_max=0):
        # R6.1-b: never a frame over the core's max_frame_bytes: a capture chunk (header <= 24 bytes)
        # shrinks below 20 ms of audio when the core advertises a smaller limit than one frame needs.
        if peer_max:
            fit = (peer_max - 24) // 2
            if fit < self.nframes:
                self.nframes = fit if fit > 0 else 1
                self.log("core max_frame_bytes %d: capture chunks of %d samples" % (peer_max, self.nframes))
        if self.settings["capture_mode"] == "ambient":
            self.open_ambient()
        elif self.settings["capture_mode"] == "wake":
            self.wake_start()

    def close(self):
        self.closed = True
        self.capture_id = 0
        self.stop_sound()
        self._mic_off()
        for t in self.tasks:
            try:
                t.cancel()
            except (RuntimeError, AttributeError):
                pass
        self.tasks = []

    # -- capture --------------------------------------------------------------------------------------
    def open_capture(self, trigger, ptt=False, ambient=False, request_id=0):
        if not self.has_mic:
            raise S.SessionError("UNAVAILABLE", "this board's microphone is unsupported with its image: %s"
                                 % getattr(self.hal, "mic_error", ""))
        if request_id:
            env = self.s.accept_request(request_id, format=audio_format(self.mic_rate))
        else:
            env = self.s.open_capture(trigger=trigger, format=audio_format(self.mic_rate))
        self.send(env)
        cid = env.id
        self.capture_id = cid
        self.capture_ptt = ptt
        self.capture_ambient = ambient
        self.capture_t0 = time.ticks_ms()
        if request_id:
            self.requested_id = cid
        self.log("capture %d opened (%s%s)" % (cid, "ambient" if ambient else ("button" if ptt else (
            "wake word" if trigger == pb.Trigger.WAKEWORD else "requested")),
                                                ", answers request %d" % request_id if request_id else ""))
        if not (self.half and self.spk_open):
            self._mic_on()
        else:
            self.mic_paused = True
        self.spawn(self._capture_loop(cid))
        return cid

    def open_ambient(self):
        if self.capture_id or self.closed:
            return
        try:
            self.open_capture(0, ambient=True)
        except S.SessionError as e:
            self.log("ambient capture not opened: %s" % e)

    # -- the wake word (capture_mode wake) -------------------------------------------------------------
    # While idle the mic feeds the detector (satellite.wake.detector) 20 ms at a time; a detection opens a
    # WAKEWORD capture at once with the audio that follows it (no pre-roll: docs/core.md). A capture owns the mic
    # while it streams; while the core thinks the mic is off (as after a button capture); while a reply plays a
    # full-duplex board keeps listening, so the word then is a barge-in (spec 4.3), a half-duplex one cannot.
    def wake_start(self):
        if self.waking or self.closed or self.rt.wake_engine() is None:
            return                   # no engine: the runtime said why (device.info wake_error); the button captures
        self.waking = True
        self.spawn(self._wake_loop())

    def _wake_idle(self):
        """True while the detector may hear the mic."""
        if self.capture_id:
            return False
        if self.render_id:
            return self.wake_barge and not self.render_muted
        return not self.pending

    async def _wake_loop(self):
        buf = bytearray(2 * self.nframes)    # one per session; the detector keeps its own buffers for good
        try:
            while True:
                d = self.wake_tick(buf)
                if d < 0:
                    break
                await asyncio.sleep_ms(d)
        finally:
            self.waking = False
            if not self.capture_id:
                self._mic_off()

    def wake_tick(self, buf):
        """One pass of the wake loop: ms to wait before the next (0: at once), -1 when the loop is over (the
        session closed, capture_mode left wake, no engine). Allocates nothing when it hears a chunk."""
        if self.closed or self.settings["capture_mode"] != "wake":
            return -1
        det = self.rt.wake
        if det is None:
            return -1
        if not self._wake_idle():
            self._wake_fed = None
            if not self.capture_id and self.mic_open:
                self._mic_off()                  # thinking, or a reply this board cannot listen through
            return _FRAME_MS
        if not self.mic_open:
            self._mic_on()
        if self._wake_fed is not det:
            det.reset()                          # a gap in the audio: the window starts afresh
            self._wake_fed = det
        d = self.hal.mic_wait_ms()
        if d > 0:
            return d
        n = self.nframes
        self.hal.mic_take(buf, 0, n)
        if det.feed(buf, 0, n):
            self._woke(det)
        return 0

    def _woke(self, det):
        self.hal.led(1, self.settings["led_brightness"])     # LISTENING now, before the core's PipelineState
        self.log("wake word %s detected" % det.name)
        if self.render_id:
            self.stop_sound()                                 # barge-in: silence now, the core cancels its render
            self.log("barge-in over render %d (wake word)" % self.render_id)
        try:
            self.open_capture(pb.Trigger.WAKEWORD)
        except S.SessionError as e:
            self.log("capture not opened: %s" % e)

    def _mic_on(self):
        if not self.mic_open:
            self.hal.mic_open(self.mic_rate, self.nframes)
            self.mic_open = True
            self.log("mic on")
        self.mic_paused = False

    def _mic_off(self):
        if self.mic_open:
            self.hal.mic_close()
            self.mic_open = False
            self.log("mic off")

    def _drop_capture(self):
        """Our capture takes no more chunks and the mic goes off; its id, or 0 when none was open."""
        cid = self.capture_id
        if cid:
            self.capture_id = 0
            self._mic_off()
        return cid

    def end_capture(self, reason):
        cid = self._drop_capture()
        if not cid:
            return
        try:
            self.send(self.s.end_capture(cid, reason))
        except S.SessionError:
            return
        self.pending.append(cid)
        self.log("capture %d ended by us (%s)" % (cid, reason_name(reason)))

    def cancel_capture(self, reason):
        cid = self._drop_capture()
        if not cid:
            return
        try:
            self.send(self.s.cancel_capture(cid, reason))
        except S.SessionError:
            pass
        self.log("capture %d cancelled by us (%s)" % (cid, reason_name(reason)))

    async def _capture_loop(self, cid):
        # Per frame: no coroutine is created (an `await hal.x()` would allocate a generator each time);
        # the HAL says how long to wait and asyncio.sleep_ms (allocation-free) waits.
        hal = self.hal
        n = self.nframes
        while self.capture_id == cid and not self.closed:
            if self.mic_paused or not self.mic_open:
                await asyncio.sleep_ms(_FRAME_MS)
                continue
            d = hal.mic_wait_ms()
            if d > 0:
                await asyncio.sleep_ms(d)
                continue
            if self.link.pending_bytes():
                hal.mic_skip()            # the socket is backed up: this LOSSY_OK frame is not sent
            else:
                self.send_chunk(cid, n)
            if not self.capture_ambient and time.ticks_diff(time.ticks_ms(), self.capture_t0) > _MAX_CAPTURE_MS:
                self.log("capture %d ran %d ms: ending it" % (cid, _MAX_CAPTURE_MS))
                self.end_capture(pb.StreamReason.TIMEOUT)
            await asyncio.sleep_ms(0)

    def send_chunk(self, cid, n):
        """One capture frame: header into the frame buffer, mic samples straight into its tail."""
        env = self.s.chunk(cid)
        if env is None:
            return False
        link = self.link
        pos = link.begin(env, 2 * n)
        self.hal.mic_take(link.tx, pos, n)
        link.seal(pos + 2 * n)
        if self.trace:
            self._chunk(0, cid, env.stream_chunk.seq)
        return True

    # -- render ---------------------------------------------------------------------------------------
    def _on_render_open(self, ev):
        if self.hal.muted:
            self.send(self.s.decline(ev.id, pb.ErrorCode.UNAVAILABLE, "speaker muted"))
            self.log("render %d declined: speaker muted" % ev.id)
            return
        if self.render_id:
            # One speaker, one render at a time: a second one is momentarily unavailable (spec §10.10).
            self.send(self.s.decline(ev.id, pb.ErrorCode.UNAVAILABLE, "speaker busy with render %d" % self.render_id))
            self.log("render %d declined: speaker busy" % ev.id)
            return
        self.render_id = ev.id
        self.render_ended = False
        self.render_muted = False
        self.frames_played = 0
        self.ring.clear()
        self.rt.frames_dropped += self.ring.dropped     # device.info's count outlives the render
        self.ring.dropped = 0
        if self.half and self.mic_open:
            self._mic_off()            # half duplex: the mic I2S object is released while the speaker plays
            self.mic_paused = True
            self.log("half duplex: mic released for render %d" % ev.id)
        self.hal.spk_open(self.spk_rate, self.pframes)
        self.spk_open = True
        self.log("render %d opened" % ev.id)
        self.spawn(self._play_loop(ev.id))

    def _on_render_chunk(self, ev, buf, start, end):
        if ev.id == self.render_id and not self.render_muted:
            self.ring.write(buf, start, end - start)
        elif self.display is not None:
            self.display.chunk(ev.id, buf, start, end)       # a text or image stream (satellite.display)

    def _on_display(self, ev):
        d = self.display
        err = d.handle(ev) if d is not None else (pb.ErrorCode.CAPABILITY_MISSING, "no panel")
        if err is not None:
            self.send(self.s.decline(ev.id, err[0], err[1]))   # an Error on its id; the stream is void
            self.log("display: error %d on id %d: %s" % (err[0], ev.id, err[1]))

    def _display_error(self, id, code, message):
        if not self.closed:
            self.send(self.s.error(id, code, message))

    def _on_render_ended(self, ev):
        if ev.id == self.render_id:
            self.render_ended = True

    def _on_render_cancelled(self, ev):
        if ev.id != self.render_id:
            return
        self.stop_sound()
        self.log("render %d cancelled (%s) after %d frames" % (ev.id, reason_name(ev.reason), self.frames_played))
        self._render_done(ev.id)

    def stop_sound(self):
        """Silence now (within one audio frame): drop the ring and whatever the HAL has queued."""
        self.render_muted = True
        self.ring.clear()
        if self.spk_open:
            self.hal.spk_stop()

    def _render_done(self, rid):
        if rid != self.render_id:
            return
        self.render_id = 0
        if self.spk_open:
            self.hal.spk_close()
            self.spk_open = False
        try:
            self.send(self.s.playback_done(rid, self.frames_played))
        except S.SessionError as e:
            self.log("playback_done %d: %s" % (rid, e))
        self.log("playback done %d frames %d" % (rid, self.frames_played))
        if self.mic_paused and self.capture_id:
            self._mic_on()
            self.log("half duplex: mic back on for capture %d" % self.capture_id)

    async def _play_loop(self, rid):
        hal = self.hal
        ring = self.ring
        started = False
        while self.render_id == rid and not self.closed:
            if not started:
                if ring.available() >= self.prefill or self.render_ended or self.render_muted:
                    started = True
                else:
                    await asyncio.sleep_ms(_FRAME_MS // 2)
                    continue
            d = hal.spk_wait_ms()
            if d > 0:
                await asyncio.sleep_ms(d)
                continue
            if self.play_step():
                await asyncio.sleep_ms(0)
                continue
            if self.render_ended:
                d = hal.spk_drain_ms()
                if d > 0:
                    await asyncio.sleep_ms(d)
                self._render_done(rid)
                return
            await asyncio.sleep_ms(_FRAME_MS // 2)      # underrun: wait for the core's next chunk

    def play_step(self):
        """One playout step: a frame from the jitter ring to the speaker; False when the ring is empty."""
        n = self.ring.read(self.play_buf, 0, 2 * self.pframes)
        if not n:
            return False
        self.frames_played += self.hal.spk_write(self.play_buf, 0, n >> 1)   # frames that reached the speaker
        return True

    # -- events from the session ----------------------------------------------------------------------
    def on_event(self, ev, buf, start, end):
        t = type(ev)
        if t is S.RenderChunk:
            self._on_render_chunk(ev, buf, start, end)
        elif t is S.CaptureEnded:
            self.log("capture %d ended by core (%s)" % (ev.id, reason_name(ev.reason)))
            if ev.id == self.capture_id:
                self.capture_id = 0
                self._mic_off()
                self.pending.append(ev.id)
        elif t is S.CaptureDone:
            self._on_capture_done(ev)
        elif t is S.RenderOpen:
            self._on_render_open(ev)
        elif t is S.RenderEnded:
            self._on_render_ended(ev)
        elif t is S.RenderCancelled:
            self._on_render_cancelled(ev)
        elif t is S.TextOpen or t is S.ImageOpen or t is S.Show or t is S.DisplayEnded:
            self._on_display(ev)
        elif t is S.CaptureRequested:
            self._on_capture_requested(ev)
        elif t is S.ToolCall:
            self._on_tool(ev)
        elif t is S.SettingWrite:
            self._on_setting_write(ev)
        elif t is S.Phase:
            self.phase = ev.phase
            self.hal.led(ev.phase, self.settings["led_brightness"])
            if self.display is not None:
                self.display.set_phase(ev.phase)
            if not ev.phase and self.rt.deferred is not None:
                self.rt.deferred.show_queue()          # idle with recordings queued: say so
            self.log("led %s" % (_PHASES[ev.phase] if 0 <= ev.phase < 5 else ev.phase))
        elif t is S.Paired:
            self.rt.on_paired()
        elif t is S.ClockSync:
            self.rounds += 1
            self.offset_us = ev.offset_us
            self.rtt_us = ev.rtt_us
            self.log("clock offset %d us rtt %d us" % (ev.offset_us, ev.rtt_us))
        elif t is S.Ignored:
            self.log("ignored %s on id %d: %s" % (ev.op, ev.id, ev.why))
        elif t is S.CaptureAcked:
            if self.rt.deferred is not None:
                self.rt.deferred.on_ack(ev)            # DEFERRED upload's high-water mark (satellite.deferred)

    def _on_capture_done(self, ev):
        if self.rt.deferred is not None and self.rt.deferred.on_done(ev):
            return
        if ev.id == self.capture_id:
            self.capture_id = 0
            self._mic_off()
        if ev.id in self.pending:
            self.pending.remove(ev.id)
        if ev.cancelled:
            self.log("capture %d cancelled by core (%s)" % (ev.id, reason_name(ev.code)))
        elif ev.ok:
            self.log("capture %d done: Response" % ev.id)
        else:
            self.log("capture %d done: Error %d %s" % (ev.id, ev.code, ev.message))
        if ev.id == self.requested_id:
            self.requested_id = 0
        if not self.busy():
            self.log("idle")
        if self.settings["capture_mode"] == "ambient" and not self.capture_id:
            self.superseded_ambient = False
            self.open_ambient()          # cancel rotates the id; it does not revoke always-streaming

    def _on_capture_requested(self, ev):
        # R10.4-a: answer R with a correlated CaptureOpen or Error{UNAVAILABLE}, never leave it open.
        why = None
        if ev.image_source:
            why = "no camera"
        elif self.half and self.spk_open:
            why = "half-duplex board is playing"       # documented choice: decline, do not wait
        elif self.capture_id and not self.capture_ambient:
            why = "a capture is already streaming"
        if why is not None:
            self.send(self.s.decline(ev.id, pb.ErrorCode.UNAVAILABLE, why))
            self.log("request %d declined: %s" % (ev.id, why))
            return
        if self.capture_id and self.capture_ambient:
            # At capacity with an ambient stream: supersede it, serve the request, resume after (§10.4).
            self.cancel_capture(pb.StreamReason.SUPERSEDED)
            self.superseded_ambient = True
        try:
            self.open_capture(pb.Trigger.REQUESTED, request_id=ev.id)
        except S.SessionError as e:
            self.send(self.s.decline(ev.id, pb.ErrorCode.UNAVAILABLE, str(e)))
            self.log("request %d declined: %s" % (ev.id, e))

    # -- tools ----------------------------------------------------------------------------------------
    def _on_tool(self, ev):
        self.log("tool %s on id %d" % (ev.name, ev.id))
        if self.rt.health.tool(self, ev):      # every tool the device declares (satellite.health)
            return
        self.send(self.s.error(ev.id, pb.ErrorCode.CAPABILITY_MISSING, "no tool %s" % ev.name))

    def set_volume(self, ev):
        """The device.set_volume tool (declared and dispatched by satellite.health)."""
        import json
        try:
            args = json.loads(ev.arguments or "{}")
            v = args["volume"]
            if check_setting_raw("volume", v) is None:
                r = row("volume")
                raise ValueError("volume must be an integer %d..%d" % (r[2], r[3]))
        except (ValueError, KeyError, TypeError) as e:
            self.send(self.s.error(ev.id, pb.ErrorCode.INVALID_REQUEST, "bad arguments: %s" % e))
            return
        if self.hal.muted:
            # §4.5: advertised but momentarily out of reach -> Error UNAVAILABLE on its own id.
            self.send(self.s.error(ev.id, pb.ErrorCode.UNAVAILABLE, "speaker muted"))
            self.log("tool device.set_volume: UNAVAILABLE (speaker muted)")
            return
        self.apply_setting("volume", v)
        self.send(self.s.tool_result(ev.id, [pb.ContentBlock(text=json.dumps({"volume": v}))]))
        self.report_setting("volume")     # the knob moved on the device: tell the core

    # -- settings -------------------------------------------------------------------------------------
    def apply_setting(self, key, v):
        old = self.settings.get(key)
        self.settings[key] = v
        apply_settings(self.hal, self.settings)
        import json
        from satellite import keystore as K
        try:                      # persisted: only the written keys, so the board file still owns the other defaults
            d = json.loads(self.ks.read(K.SETTINGS) or b"{}")
        except (ValueError, K.KeyStoreError):
            d = None              # unreadable: replaced (load_settings said so at boot)
        if not isinstance(d, dict):
            d = {}
        d[key] = v
        self.ks.write(K.SETTINGS, json.dumps(d).encode())
        self.log("setting %s = %s" % (key, v))
        if key == "capture_mode" and v != old:
            if v == "ambient":
                if not self.capture_id:
                    self.open_ambient()
            elif self.capture_id and self.capture_ambient:
                self.cancel_capture(pb.StreamReason.STOPPED)
            if v == "wake":
                self.wake_start()
        elif key == "wake_word" and v != old and self.settings["capture_mode"] == "wake":
            self.rt.wake_engine()        # the new model, loaded now: a running loop picks it up
            self.wake_start()

    def report_setting(self, key, rid=0):
        """SettingState of `key`: id 0 when the device moved it, else the SettingWrite's id."""
        v = self.settings[key]
        v = pb.SettingValue(string_value=v) if row(key)[3] is None else pb.SettingValue(int_value=v)
        self.send(self.s.setting_state(rid, key, v))

    def _on_setting_write(self, ev):
        # SettingValue -> the value to apply; None when out of range / of the wrong kind
        key, v = ev.key, ev.value
        if v is not None:
            r = row(key)
            v = check_setting_raw(key, v.string_value if r is not None and r[3] is None else v.int_value)
        if v is None:
            self.send(self.s.error(ev.id, pb.ErrorCode.INVALID_REQUEST, "bad value for %s" % key))
            return
        self.apply_setting(key, v)
        self.report_setting(key, ev.id)

    def knob(self, key, v):
        """A setting changed on the device itself: apply, persist, spontaneous SettingState (id 0)."""
        self.apply_setting(key, v)
        self.report_setting(key)

    # -- button ---------------------------------------------------------------------------------------
    def gesture(self, g):
        from satellite import hal as H           # the gesture codes: H.PRESS, H.RELEASE, H.LONG
        ptt = self.settings["capture_mode"] != "ambient"
        if g == H.PRESS:
            self.press_t = time.ticks_ms()
            self.press_opened = False
            self.press_long = False
            self.log("button press")
            if not ptt:
                return
            if self.render_id:
                # Barge-in: silence now, then a new capture; the core cancels its render (§4.3).
                self.stop_sound()
                self.log("barge-in over render %d" % self.render_id)
            elif self.pending or self.capture_id:
                return                       # thinking: a press is not a new utterance (long = Stop)
            try:
                self.open_capture(pb.Trigger.BUTTON, ptt=True)
                self.press_opened = True
            except S.SessionError as e:
                self.log("capture not opened: %s" % e)
        elif g == H.LONG:
            self.press_long = True
            self.log("button long")
            if self.press_opened:
                return                       # a long push-to-talk utterance, not a gesture
            self.do_stop()
            self._event("button.long_press")
        elif g == H.RELEASE:
            self.log("button release")
            if self.press_opened:
                self.press_opened = False
                if self.capture_id and self.capture_ptt:
                    self.end_capture(pb.StreamReason.PTT_RELEASE)
            elif not self.press_long:
                self._event("button.press")

    def do_stop(self):
        """Stop (§4.4): the turn abort; a StreamCancel on each open stream of ours, silence locally."""
        if self.capture_id and not self.capture_ambient:
            self.cancel_capture(pb.StreamReason.STOPPED)
        self.send(self.s.stop())
        self.log("stop sent")
        if self.render_id:
            self.stop_sound()

    def _event(self, name):
        try:
            self.send(self.s.event(name))
            self.log("event %s" % name)
        except S.SessionError as e:
            self.log("event %s not sent: %s" % (name, e))

