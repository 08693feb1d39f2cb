# The satellite runtime: the asyncio driver around the sans-IO Session, Noise and framer. It moves bytes
# between the socket, NoiseConnection, FrameReader and the codec, serves the session (capture, render,
# tools, settings, pairing, liveness, reconnect) and drives the HAL it is handed. Protocol rules stay in
# session.py; hardware stays in hal/; this module never imports machine or network.
#
# Structure
#   Link       one connection's framing (sans socket): receive = on_plaintext -> FrameReader -> decode_into
#              a reused Envelope -> callback; send = ONE frame buffer (conn.tx_plain: prefix | Envelope |
#              tail) encrypted in place and written as one Noise message (frame-granular, R10.1-a), never
#              over the core's max_frame_bytes (R6.1-b) or our tx capacity.
#   Satellite  the device behaviour on one accepted session (a plain object: tests drive it directly).
#   Runtime    connect / handshake (IK when a core key is known, else XX; never XX after an IK failure) /
#              Hello / serve / liveness / reconnect with exponential backoff and jitter (cap <= 60 s).
#
# Steady state allocates nothing: sockets are non-blocking and polled with asyncio.sleep_ms (asyncio's
# IOQueue allocates ~100 bytes per wait on MicroPython, so it is used for nothing here), audio buffers
# and the receive Envelope are preallocated, and the hot paths avoid tuples, kwargs, closures and slices.
import gc
import json
import os
import sys

import asyncio
from micropython import const
from time import ticks_ms, ticks_us, ticks_diff, ticks_add
import time

from satellite import session as S
from satellite import audio
from satellite.wire import alabama_v1 as pb
from satellite.wire import pb as codec
from satellite.wire import frame as F
from satellite.noise.transport import NoiseConnection
from satellite.noise.state import NoiseError
from satellite.provision import record as R
from satellite import keystore as K

from satellite import VERSION
# FRAME_MS (one capture chunk / one playout step), TX_CAPACITY (largest frame we send: Hello, tool results,
# one Noise message) and RX_CHUNK (bytes asked of the socket per read) live beside the buffers they size.
from satellite.buffers import FRAME_MS, TX_CAPACITY, RX_CHUNK, Buffers
POLL_MS = const(5)                 # socket poll period while connected (latency bound of the receive path)
HANDSHAKE_TIMEOUT_MS = const(10000)
MAX_CAPTURE_MS = const(30000)      # a capture nobody ends is ended by the device (StreamEnd TIMEOUT)
LONG_PRESS_MS = const(1500)
CLOCK_EPOCH_US = 1 << 40           # now_us() at boot (see now_us)
MAX_PENDING = const(65536)         # unsent bytes kept while the socket is full; past it the link is dead

# Gestures a HAL reports (hal.gesture() -> one of these, 0 when none).
PRESS = const(1)
RELEASE = const(2)
LONG = const(3)

_PHASES = ("IDLE", "LISTENING", "PROCESSING", "SPEAKING", "ERROR")
_REASONS = ("UNSPECIFIED", "COMPLETE", "END_DETECTED", "PTT_RELEASE", "BARGE_IN", "STOPPED", "SUPERSEDED",
            "TIMEOUT", "FAILED")

# Why a connection ended (Runtime decides what to do next).
END_LOST = const(0)        # EOF, reset, silence, timeout: reconnect with backoff
END_IK_MISMATCH = const(1)  # the core did not prove the pinned key: never XX; retry IK at the backoff cap
END_CLOSED = const(2)      # REJECTED_CLOSED: no automatic retry, wait for re-provisioning
END_VERSION = const(3)     # VersionMismatch: no retry loop, wait for a firmware update
END_STOP = const(4)        # asked to stop (tests, reset)
END_PROVISION = const(5)   # the user asked for listening mode (button gesture): sound provisioning

SETTINGS_DEFAULT = {"volume": 60, "mic_gain": 0, "led_brightness": 50, "capture_mode": "ptt"}


def reason_name(r):
    return _REASONS[r] if 0 <= r < len(_REASONS) else str(r)


def candidates(core_host):
    """The record's core_host may list several candidate addresses, comma-separated (R7.3-g)."""
    return [h.strip() for h in core_host.split(",") if h.strip()]


def hexs(b):
    return "".join("%02x" % x for x in b)


class LinkError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------------------------------ Link

class Link:
    """Framing and encryption of one established connection; `write(buf, n)` moves bytes out."""

    def __init__(self, conn, max_frame_bytes, on_frame, write, frame_buf=None):
        self.conn = conn
        conn.on_plaintext = self._on_plain
        self.reader = F.FrameReader(max_frame_bytes, buf=frame_buf)
        self.writer = F.FrameWriter()
        self.env = pb.Envelope()               # reused receive Envelope
        self.on_frame = on_frame               # on_frame(env, buf, tail_start, tail_end)
        self.on_oversize = None                # on_oversize(env_or_None, total_len)
        self._write = write
        self.tx = conn.tx_plain
        self.cap = conn.tx_capacity
        self.frames_in = 0
        self.frames_out = 0

    def negotiated(self, our_max, peer_max):
        self.reader.set_limit(our_max)
        self.writer.set_peer_limit(peer_max)

    # -- receive --------------------------------------------------------------------------------------
    def feed(self, buf, start, end):
        self.conn.receive_into(buf, start, end)

    def _on_plain(self, buf, start, end):
        r = self.reader
        while start < end:
            start += r.feed(buf, start, end)
            while True:
                kind = r.next()
                if kind == F.NEED_MORE:
                    break
                env = self.env
                try:
                    codec.decode_into(env, r._buf, r.header_start, r.header_end)
                except ValueError as e:
                    if kind == F.OVERSIZE:
                        env = None
                    else:
                        # The frame boundary is intact but its header is not an Envelope: say so and close.
                        raise LinkError("DECODE", "undecodable frame header from the core: %s" % e)
                self.frames_in += 1
                if kind == F.OVERSIZE:
                    if self.on_oversize is not None:
                        self.on_oversize(env, r.total_len)
                    continue
                self.on_frame(env, r._buf, r.tail_start, r.tail_end)

    # -- send -----------------------------------------------------------------------------------------
    def begin(self, env, tail_len):
        """Write prefix + Envelope into the frame buffer; return where the tail goes (the caller fills
        tail_len bytes there, then calls seal(pos + tail_len)). Raises FrameError over a limit."""
        hl = codec.size(env)
        if F.frame_size(hl, tail_len) > self.cap:
            raise F.FrameError(F.FRAME_TOO_LARGE, "frame of %d bytes over the %d-byte send buffer"
                               % (F.frame_size(hl, tail_len), self.cap))
        pos = self.writer.prefix(self.tx, 0, hl, tail_len)
        return codec.encode_into(env, self.tx, pos)

    def seal(self, n):
        total = self.conn.encrypt_buffer(n)
        self.frames_out += 1
        self._write(self.conn.tx_buf, total)

    def send(self, env):
        self.seal(self.begin(env, 0))

    def header_room(self, env):
        """Largest tail that still fits the core's limit and our buffer for this Envelope."""
        hl = codec.size(env)
        lim = self.writer.peer_max if self.writer.peer_max > 0 else F.DEFAULT_MAX_FRAME_BYTES
        lim = lim + F.varint_size(lim)                 # the limit bounds total_len, not the whole frame
        if self.cap < lim:
            lim = self.cap
        return lim - 10 - hl


# -------------------------------------------------------------------------------------------- Satellite

class Satellite:
    """What the device does on one accepted session. The Runtime feeds it frames and gestures; it
    answers through link.send and drives hal (mic, speaker, LED). `log(line)` is the serial log."""

    def __init__(self, rt, sess, link):
        self.rt = rt
        self.hal = rt.hal
        self.log = rt.log
        self.s = sess
        self.link = link
        self.settings = rt.settings
        self.mic_rate = rt.mic_rate
        self.spk_rate = rt.spk_rate
        self.half = rt.duplex == "half"
        self.nframes = self.mic_rate * FRAME_MS // 1000            # samples per capture chunk
        self.pframes = self.spk_rate * FRAME_MS // 1000            # samples per playout step
        self.play_buf = rt.play_buf
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
        self.tasks = []

    # -- helpers --------------------------------------------------------------------------------------
    def send(self, env):
        self.link.send(env)
        self.rt.note_tx(env)

    def drain(self):
        o = self.s.outgoing()
        while o is not None:
            self.send(o)
            o = self.s.outgoing()

    def busy(self):
        return self.capture_id or self.pending or self.render_id

    async def clock_round(self, wait_ms):
        """The device's own four-timestamp Ping round: this boot's clock offset (core - device, us) from its
        ClockSync, or None when none came within wait_ms (satellite.deferred anchors recordings with it)."""
        self.offset_us = 0
        self.send(self.s.ping(self.rt.now_us()))
        t0 = ticks_ms()
        while not self.offset_us and not self.closed and ticks_diff(ticks_ms(), t0) < wait_ms:
            await asyncio.sleep_ms(5)
        return self.offset_us or None

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
        if not self.rt.has_mic:
            raise S.SessionError("UNAVAILABLE", "this board's microphone is unsupported with its image: %s"
                                 % getattr(self.hal, "mic_error", ""))
        if request_id:
            env = self.s.accept_request(request_id, format=self.rt.mic_format())
        else:
            env = self.s.open_capture(trigger=trigger, format=self.rt.mic_format())
        self.send(env)
        cid = env.id
        self.capture_id = cid
        self.capture_ptt = ptt
        self.capture_ambient = ambient
        self.capture_t0 = ticks_ms()
        if request_id:
            self.requested_id = cid
        self.log("capture %d opened (%s%s)" % (cid, "ambient" if ambient else ("button" if ptt else "requested"),
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

    def end_capture(self, reason):
        cid = self.capture_id
        if not cid:
            return
        self.capture_id = 0
        self._mic_off()
        try:
            self.send(self.s.end_capture(cid, reason))
        except S.SessionError:
            return
        self.pending.append(cid)
        self.log("capture %d ended by us (%s)" % (cid, reason_name(reason)))

    def cancel_capture(self, reason):
        cid = self.capture_id
        if not cid:
            return
        self.capture_id = 0
        self._mic_off()
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
                await asyncio.sleep_ms(FRAME_MS)
                continue
            d = hal.mic_wait_ms()
            if d > 0:
                await asyncio.sleep_ms(d)
                continue
            if self.rt.pending_bytes():
                hal.mic_skip()            # the socket is backed up: this LOSSY_OK frame is not sent
            else:
                self.send_chunk(cid, n)
            if not self.capture_ambient and ticks_diff(ticks_ms(), self.capture_t0) > MAX_CAPTURE_MS:
                self.log("capture %d ran %d ms: ending it" % (cid, MAX_CAPTURE_MS))
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
        self.rt.note_chunk_tx(cid, env.stream_chunk.seq, 2 * n)
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
                    await asyncio.sleep_ms(FRAME_MS // 2)
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
            await asyncio.sleep_ms(FRAME_MS // 2)      # underrun: wait for the core's next chunk

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
            self.offset_us = ev.offset_us
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
        if self.rt.health.tool(self, ev):      # device.info, firmware.update (satellite.health)
            return
        if ev.name == "device.set_volume":
            try:
                args = json.loads(ev.arguments or "{}")
                v = args["volume"]
                if type(v) is not int or not 0 <= v <= 100:
                    raise ValueError("volume must be an integer 0..100")
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
            return
        self.send(self.s.error(ev.id, pb.ErrorCode.CAPABILITY_MISSING, "no tool %s" % ev.name))

    # -- settings -------------------------------------------------------------------------------------
    def setting_value(self, key):
        v = self.settings[key]
        if key == "capture_mode":
            return pb.SettingValue(string_value=v)
        return pb.SettingValue(int_value=v)

    def apply_setting(self, key, v):
        old = self.settings.get(key)
        self.settings[key] = v
        self.rt.apply_settings()
        self.rt.save_settings()
        self.log("setting %s = %s" % (key, v))
        if key == "capture_mode" and v != old:
            if v == "ambient":
                if not self.capture_id:
                    self.open_ambient()
            elif self.capture_id and self.capture_ambient:
                self.cancel_capture(pb.StreamReason.STOPPED)

    def report_setting(self, key):
        self.send(self.s.setting_state(0, key, self.setting_value(key)))

    def _on_setting_write(self, ev):
        v = self.rt.check_setting(ev.key, ev.value)
        if v is None:
            self.send(self.s.error(ev.id, pb.ErrorCode.INVALID_REQUEST, "bad value for %s" % ev.key))
            return
        self.apply_setting(ev.key, v)
        self.send(self.s.setting_state(ev.id, ev.key, self.setting_value(ev.key)))

    def knob(self, key, v):
        """A setting changed on the device itself: apply, persist, spontaneous SettingState (id 0)."""
        self.apply_setting(key, v)
        self.report_setting(key)

    # -- button ---------------------------------------------------------------------------------------
    def gesture(self, g):
        ptt = self.settings["capture_mode"] != "ambient"
        if g == PRESS:
            self.press_t = ticks_ms()
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
        elif g == LONG:
            self.press_long = True
            self.log("button long")
            if self.press_opened:
                return                       # a long push-to-talk utterance, not a gesture
            self.do_stop()
            self._event("button.long_press")
        elif g == RELEASE:
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


# --------------------------------------------------------------------------------------------- Runtime

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
        self.backoff_base_ms = self.opt.get("backoff_base_ms", 500)
        self.backoff_cap_ms = min(self.opt.get("backoff_cap_ms", 60000), 60000)
        self.settings = dict(SETTINGS_DEFAULT)
        self.load_settings()
        self.apply_settings()
        self.sat = None
        self.state = "starting"
        self.pattern = None
        self.stopped = False
        self._gesture = None
        self._device_key = None
        self.attempts = 0
        self.connections = 0
        self.core_key_in_use = None
        self.sock = None
        self._pend = None
        # The big buffers live as long as the runtime: reconnecting allocates none of them again (a fresh
        # block after hours of uptime is exactly what a fragmented heap cannot give). All follow the board
        # file (satellite.buffers): the Noise receive buffer holds one message of our advertised
        # max_frame_bytes (4 KiB on a no-PSRAM board, not 64 KiB). app.main allocates them before the big
        # imports and passes them in; tests let the runtime make its own.
        b = buffers if buffers is not None else Buffers(board)
        self.buffers = b
        self.rxbuf = b.rx
        self.noise_rx = b.noise_rx
        self.frame_buf = b.frame
        self.ring = audio.JitterRing(b.ring_bytes, b.ring)
        self.play_buf = b.play
        self.conn = None
        self.last_rx = 0
        self.t_boot = ticks_ms()
        self.conn_t0 = 0
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
        return self.sat is None and (st == "disconnected" or st == "connecting" or st == "starting")

    # -- settings ---------------------------------------------------------------------------------------
    def load_settings(self):
        try:
            raw = self.ks.read(K.SETTINGS)
            if raw:
                d = json.loads(raw)
                for k in SETTINGS_DEFAULT:
                    if k in d and self.check_setting_raw(k, d[k]) is not None:
                        self.settings[k] = d[k]
        except (ValueError, K.KeyStoreError) as e:
            self._log("sat: settings file unreadable (%s): defaults used" % e)

    def save_settings(self):
        self.ks.write(K.SETTINGS, json.dumps(self.settings).encode())

    def apply_settings(self):
        st = self.settings
        self.hal.set_volume(audio.volume_q14(st["volume"]))
        self.hal.set_mic_gain(audio.mic_gain_q8(st["mic_gain"]))
        self.hal.set_led_brightness(st["led_brightness"])

    def check_setting_raw(self, key, v):
        if key == "capture_mode":
            return v if v in ("ptt", "ambient") else None
        hi = {"volume": 100, "mic_gain": audio.MAX_GAIN_DB, "led_brightness": 100}.get(key)
        if hi is None or type(v) is not int or not 0 <= v <= hi:
            return None
        return v

    def check_setting(self, key, value):
        """SettingValue -> the value to apply, or None when out of range / of the wrong kind."""
        if value is None:
            return None
        if key == "capture_mode":
            return self.check_setting_raw(key, value.string_value)
        return self.check_setting_raw(key, value.int_value)

    def descriptors(self):
        st = self.settings
        I = pb.SettingType.SETTING_INT
        return [
            pb.SettingDescriptor(key="volume", label="Volume", type=I, min=0, max=100,
                                 value=pb.SettingValue(int_value=st["volume"])),
            pb.SettingDescriptor(key="mic_gain", label="Microphone gain (dB)", type=I, min=0, max=audio.MAX_GAIN_DB,
                                 value=pb.SettingValue(int_value=st["mic_gain"])),
            pb.SettingDescriptor(key="led_brightness", label="LED brightness", type=I, min=0, max=100,
                                 value=pb.SettingValue(int_value=st["led_brightness"])),
            pb.SettingDescriptor(key="capture_mode", label="Capture mode", type=pb.SettingType.SETTING_ENUM,
                                 options=["ptt", "ambient"], value=pb.SettingValue(string_value=st["capture_mode"])),
        ]

    # -- surface ----------------------------------------------------------------------------------------
    def mic_format(self):
        return pb.AudioFormat(encoding=pb.Encoding.PCM_S16LE, sample_rate=self.mic_rate, channels=1, sample_bits=16)

    def surface(self, token):
        caps = [
            pb.CapabilityDescriptor(kind=pb.CapabilityKind.CAPABILITY_MIC, mic=pb.MicParams(format=self.mic_format())),
        ] if self.has_mic else []
        caps += [
            pb.CapabilityDescriptor(kind=pb.CapabilityKind.CAPABILITY_SPEAKER, speaker=pb.SpeakerParams(
                format=pb.AudioFormat(encoding=pb.Encoding.PCM_S16LE, sample_rate=self.spk_rate, channels=1,
                                      sample_bits=16), buffer_ms=self.buffer_ms)),
        ]
        if self.display is not None:
            caps += self.display.capabilities()
        from satellite import health
        tools = health.tools(bool(self.frozen_digest())) + [
            pb.ToolDescriptor(name="device.set_volume", description="Set the speaker volume (0-100)",
                              input_schema='{"type":"object","properties":{"volume":{"type":"integer",'
                                           '"minimum":0,"maximum":100}},"required":["volume"]}'),
        ]
        events = [
            pb.EventDescriptor(id="button.press", description="Short press of the button while the assistant is busy, or in ambient mode"),
            pb.EventDescriptor(id="button.long_press", description="Long press of the button (also stops the turn)"),
        ] + health.events()
        return S.Surface(capabilities=caps, tools=tools, events=events, settings=self.descriptors(),
                         max_frame_bytes=self.max_frame_bytes, max_concurrent_streams=self.max_streams,
                         display_name=(self.board.get("id") or "satellite")[:64],
                         software=("alabama-satellite/%s %s %s" % (VERSION, sys.implementation.name,
                                                                   self.board.get("id", "")))[:64],
                         pairing_token=token)

    def info(self):
        return {"board": self.board.get("id"), "firmware": VERSION, "duplex": self.duplex,
                "heap_free": gc.mem_free() if hasattr(gc, "mem_free") else 0,
                "uptime_ms": ticks_diff(ticks_ms(), self.t_boot), "pattern": self.pattern}

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

    # -- the serial log's frame trace -----------------------------------------------------------------
    def note_tx(self, env):
        if self.trace:
            self.log("tx %s id %d" % (env.op, env.id))

    def note_rx(self, env, n):
        if self.trace and env.op != "stream_chunk":
            self.log("rx %s id %d" % (env.op, env.id))

    def note_chunk_tx(self, cid, seq, n):
        pass

    # -- socket helpers (non-blocking, polled) -------------------------------------------------------------
    def pending_bytes(self):
        return len(self._pend) if self._pend else 0

    def _write(self, buf, n):
        if self._pend:
            if len(self._pend) + n > MAX_PENDING:
                raise LinkError("BACKLOG", "the core has not read %d bytes: connection considered dead" % MAX_PENDING)
            self._pend += memoryview(buf)[:n]
            return
        try:
            k = self.sock.write(buf, n)
        except OSError as e:
            raise LinkError("WRITE", "socket write failed: %s" % e)
        if k is None:
            k = 0
        if k < n:
            self._pend = bytearray(memoryview(buf)[k:n])

    def _flush(self):
        p = self._pend
        if not p:
            return
        try:
            k = self.sock.write(p)
        except OSError as e:
            raise LinkError("WRITE", "socket write failed: %s" % e)
        if k:
            self._pend = p[k:] if k < len(p) else None

    async def _read_some(self, timeout_ms):
        t0 = ticks_ms()
        while True:
            self._flush()
            try:
                n = self.sock.readinto(self.rxbuf)
            except OSError as e:
                if e.args and e.args[0] == 11:
                    n = None
                else:
                    raise LinkError("READ", "socket read failed: %s" % e)
            if n is not None:
                if n == 0:
                    raise LinkError("EOF", "the core closed the connection")
                self.last_rx = ticks_ms()
                return n
            if timeout_ms and ticks_diff(ticks_ms(), t0) > timeout_ms:
                raise LinkError("TIMEOUT", "no answer from the core within %d ms" % timeout_ms)
            await asyncio.sleep_ms(POLL_MS)

    async def _connect(self, host, port):
        import socket
        ai = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0]
        s = socket.socket(ai[0], socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(ai[-1])
        except OSError as e:
            if not e.args or e.args[0] not in (115, 119, 11):   # EINPROGRESS (linux 115, lwIP 119), EAGAIN
                s.close()
                raise LinkError("CONNECT", "cannot connect to %s:%d: %s" % (host, port, e))
        import select
        p = select.poll()
        p.register(s, select.POLLOUT | select.POLLERR | select.POLLHUP)
        t0 = ticks_ms()
        while True:
            ev = p.poll(0)
            if ev:
                flags = ev[0][1]
                if flags & (select.POLLERR | select.POLLHUP):
                    s.close()
                    raise LinkError("CONNECT", "cannot connect to %s:%d (refused)" % (host, port))
                break
            if ticks_diff(ticks_ms(), t0) > HANDSHAKE_TIMEOUT_MS:
                s.close()
                raise LinkError("CONNECT", "connect to %s:%d timed out" % (host, port))
            await asyncio.sleep_ms(POLL_MS)
        return s

    def _close_sock(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self._pend = None

    # -- one connection -------------------------------------------------------------------------------------
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
        self._close_sock()
        self.sock = await self._connect(host, port)
        self.conn = None
        gc.collect()
        conn = NoiseConnection(True, priv, pattern=pattern, remote_static=core_key, rng=self.rng,
                               tx_capacity=TX_CAPACITY, rx_buf=self.noise_rx, static_public=pub,
                               tx_buf=self.buffers.noise_tx)
        self.conn = conn
        try:
            out = conn.start()
            self._write(out, len(out))
            while not conn.handshake_done:
                n = await self._read_some(HANDSHAKE_TIMEOUT_MS)
                conn.receive_into(self.rxbuf, 0, n)
                out = conn.data_to_send()
                if out:
                    self._write(out, len(out))
        except NoiseError as e:
            if e.code == "IK_KEY_MISMATCH":
                self.log("IK FAILED at %s: %s" % (host, e))
                return None
            raise LinkError("HANDSHAKE", "Noise handshake failed (%s): %s" % (e.code, e))
        except LinkError as e:
            if pattern == "IK" and e.code in ("EOF", "READ"):
                self.log("IK FAILED at %s: the core closed the connection during the IK handshake: its static key "
                         "is not the pinned one (or it is not an Alabama core); not falling back to XX" % host)
                return None
            raise
        return conn

    async def connect_once(self):
        """Connect, handshake, Hello, serve until the connection ends; return an END_* code."""
        rec = self.load_record()
        self.record = rec
        if rec is None:
            self.log("no provisioning record: provision this board (alabama provision) and reset it")
            return END_CLOSED
        core_key = rec.core_key or self.ks.pinned_core_key()
        pattern = "IK" if core_key else "XX"
        if self._device_key is None:
            self._quiet_mic()
            # computed once: deriving the public key is an X25519 (~50 ms on the S3) per connection otherwise
            self._device_key = self.ks.device_key()
        priv, pub = self._device_key
        self.pattern = pattern
        self.state = "connecting"
        hosts = candidates(rec.core_host)
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
            except (OSError, LinkError) as e:
                if host is hosts[-1]:
                    raise
                self.log("candidate %s unreachable (%s): trying the next" % (host, e))
                continue
            if conn is not None:
                break
        if conn is None:
            return END_IK_MISMATCH
        self.core_key_in_use = conn.remote_static
        self.log("handshake done (%s), core key %s" % (pattern, hexs(conn.remote_static[:8])))
        sess = S.Session(self.surface(self.token(rec)))
        link = Link(conn, self.max_frame_bytes, None, self._write, self.frame_buf)
        sat = Satellite(self, sess, link)
        self.sat = sat
        end = [None]

        def on_frame(env, buf, ts, te):
            self.note_rx(env, te - ts)
            op = env.op
            now = self.now_us() if op == "ping" or op == "ping_response" or op == "hello_response" else 0
            ev = sess.receive(env, now)
            o = sess.outgoing()
            while o is not None:
                link.send(o)
                self.note_tx(o)
                o = sess.outgoing()
            if ev is None:
                return
            t = type(ev)
            if t is S.Accepted:
                link.negotiated(self.max_frame_bytes, ev.max_frame_bytes)
                self.state = "connected"
                self.attempts = 0
                self.connections += 1
                self.log("accepted: core max_frame_bytes %d max_concurrent_streams %d heap_free=%d" % (
                    ev.max_frame_bytes, ev.max_concurrent_streams, gc.mem_free()))
                sat.started(ev.max_frame_bytes)
                self.health.on_session(sat)
                if self.deferred is not None:
                    sat.spawn(self.deferred.upload(sat))
            elif t is S.Rejected:
                self.log("REJECTED by the core (reason %d, %s): it is in closed mode and does not know this "
                         "device; not retrying - re-provision or have the admin register it" % (ev.reason, ev.message))
                end[0] = END_CLOSED
            elif t is S.VersionMismatch:
                self.log("VERSION MISMATCH: the core (wire version %d) needs at least wire version %d, this "
                         "firmware speaks %d: update the firmware (%s); not retrying" % (
                             ev.server_version, ev.min_wire_version, S.WIRE_VERSION, ev.message))
                end[0] = END_VERSION
            else:
                sat.on_event(ev, buf, ts, te)

        def on_oversize(env, total):
            self.log("frame of %d bytes over our max_frame_bytes %d" % (total, self.max_frame_bytes))
            if env is not None and env.id and not (env.id & 1):
                link.send(sess.error(env.id, pb.ErrorCode.FRAME_TOO_LARGE, "frame of %d bytes over %d"
                                     % (total, self.max_frame_bytes)))

        link.on_frame = on_frame
        link.on_oversize = on_oversize
        hello = sess.hello()
        link.send(hello)
        self.note_tx(hello)
        self.conn_t0 = ticks_ms()
        self.last_rx = ticks_ms()
        self.state = "hello"
        try:
            return await self._serve(sess, link, end)
        finally:
            sat.close()
            self.sat = None

    async def _serve(self, sess, link, end):
        sock = self.sock
        buf = self.rxbuf
        last_ping = ticks_ms()
        allowance = 1000 + self.max_frame_bytes // 12        # one max frame at ~100 kbit/s
        dead_ms = 3 * self.ping_ms + allowance                 # R10.1-b: bounded half-open detection
        while True:
            if end[0] is not None:
                return end[0]
            if self.stopped:
                return END_STOP
            self._flush()
            try:
                n = sock.readinto(buf)
            except OSError as e:
                if e.args and e.args[0] == 11:
                    n = None
                else:
                    raise LinkError("READ", "socket read failed: %s" % e)
            now = ticks_ms()
            if n is not None:
                if n == 0:
                    raise LinkError("EOF", "the core closed the connection")
                self.last_rx = now
                link.feed(buf, 0, n)
            if sess.state == S.HELLO_SENT and ticks_diff(now, self.conn_t0) > HANDSHAKE_TIMEOUT_MS:
                raise LinkError("TIMEOUT", "no HelloResponse within %d ms" % HANDSHAKE_TIMEOUT_MS)
            if sess.state == S.ACTIVE:
                if ticks_diff(now, self.last_rx) > dead_ms:
                    raise LinkError("SILENT", "nothing from the core for %d ms (3 ping intervals + %d ms): "
                                    "connection presumed dead" % (ticks_diff(now, self.last_rx), allowance))
                if ticks_diff(now, last_ping) >= self.ping_ms:
                    last_ping = now
                    p = sess.ping(self.now_us())
                    link.send(p)
            g = self.hal.gesture()
            while g:
                if self.deferred is not None and self.deferred.take_gesture(g):
                    pass                                 # ends the offline recording still going
                elif self.sat is not None and sess.state == S.ACTIVE:
                    self.sat.gesture(g)
                if g == PRESS and self._provision_gesture(now):
                    self.log("provision: button gesture: leaving the core for listening mode")
                    return END_PROVISION
                g = self.hal.gesture()
            await asyncio.sleep_ms(POLL_MS if n is None else 0)

    def now_us(self):
        """A monotonic microsecond clock that does not wrap (ticks_us wraps on the board)."""
        t = ticks_us()
        if not hasattr(self, "_us_last"):
            self._us_last = t
            self._us_acc = 0
        self._us_acc += ticks_diff(t, self._us_last)
        self._us_last = t
        # From 2**40 us (12.7 days), not 0: a DEFERRED recording of an earlier boot, rebased onto this boot's
        # clock (satellite.deferred), lands before this boot and must still be a positive capture_ts.
        return self._us_acc + CLOCK_EPOCH_US

    # -- the forever loop ---------------------------------------------------------------------------------
    def backoff_ms(self):
        d = self.backoff_base_ms << min(self.attempts, 16)
        if d > self.backoff_cap_ms:
            d = self.backoff_cap_ms
        r = self.rng(2)
        j = (r[0] << 8 | r[1]) * (d // 2) // 65536
        return d // 2 + j                                       # jitter: uniform in [d/2, d)

    async def run(self):
        await self.hal.network_up(self)
        if self.display is not None:
            asyncio.create_task(self.display.run())
        if self.deferred is not None:
            asyncio.create_task(self.deferred.run())
        while not self.stopped:
            while self.deferred is not None and self.deferred.recording is not None and not self.stopped:
                await asyncio.sleep_ms(20)               # no X25519 while the mic records (see _quiet_mic)
            end = END_LOST
            try:
                end = await self.connect_once()
            except LinkError as e:
                self.log("connection lost (%s): %s" % (e.code, e))
            except (OSError, NoiseError, F.FrameError, ValueError) as e:
                self.log("connection failed (%s): %s" % (type(e).__name__, e))
            except Exception as e:  # a bug must not end the device: log it loudly, reconnect
                self.log("INTERNAL ERROR (%s): %s - reconnecting" % (type(e).__name__, e))
                if hasattr(sys, "print_exception"):
                    sys.print_exception(e)
            finally:
                self._close_sock()
                self.conn = None
                self.state = "disconnected"
                gc.collect()
            if end == END_STOP or self.stopped:
                break
            if end in (END_CLOSED, END_VERSION, END_PROVISION):
                if end != END_PROVISION:
                    self.state = "halted"
                    self.log("halted: waiting for re-provisioning (no automatic retry)")
                await self._wait_reprovision()
                self.attempts = 0
                continue
            if end == END_IK_MISMATCH:
                self.attempts = 16                     # never XX; try the pinned key again at the cap only
            d = self.backoff_ms()
            self.attempts += 1
            self.log("reconnecting in %d ms (attempt %d)" % (d, self.attempts))
            await self._sleep(d)

    async def _sleep(self, ms):
        t0 = ticks_ms()
        while ticks_diff(ticks_ms(), t0) < ms and not self.stopped:
            await asyncio.sleep_ms(min(50, ms))

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
        old = self.ks.read(K.RECORD)
        calls = [0]

        def stop():
            calls[0] += 1
            if self.stopped:
                return True
            return calls[0] % 25 == 0 and self.ks.read(K.RECORD) != old

        from satellite.provision import listen
        if self.state != "halted":          # a halted board listens too, but stays "halted" (no retry)
            self.state = "listening"
        try:
            if not self.has_mic:
                raise listen.ListenError("NO_MIC", "no usable microphone: provision this board by QR code or serial")
            self.ring.clear()                  # no render now: its buffer holds the receiver's ring
            rec = await listen.run(self.hal, self.ks, rate=self.mic_rate, log=self.log, stop=stop,
                                   ring=self.buffers.ring)
        except listen.ListenError as e:
            self.log("provision: %s" % e)
            rec = None
            while not self.stopped and self.ks.read(K.RECORD) == old:
                await asyncio.sleep_ms(500)
        if rec is not None or self.ks.read(K.RECORD) != old:
            self.log("new provisioning record: connecting again")
