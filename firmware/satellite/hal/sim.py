# The simulated HAL of the virtual board (MicroPython unix port): mic from a WAV file (16 kHz mono s16,
# paced in real time) or silence, speaker to a WAV file (what was played; its sample count is the frames
# played), the button and device knobs over a loopback TCP line protocol, LED as a log line. It must not
# hold protocol logic: the runtime asks it for audio frames and gestures and tells it the LED phase.
#
# Control channel (127.0.0.1:<ALABAMA_SIM_CTL_PORT>; several clients at once, each served as it writes: the
# supervisor or web page keeps one open while `alabama board press` connects for one command), one command per
# line, one reply line per command ("ok ..." or "err ..."):
#   press | release | long            the button (long = held past the long-press time, then released)
#   mic PATH | mic silence            what the microphone hears next (a WAV restarts at its beginning)
#   mic live PATH                     a WAV another process is still writing (the web board's browser mic):
#                                     its end is not the end, the mic hears silence until more arrives
#   heap                              "ok free=<gc.mem_free()> alloc=<gc.mem_alloc()>"
#   state                             "ok {json}": connection, pattern, capture/render ids, settings, the
#                                     heap as device.info reports it (after gc.collect(): heap_free, heap_min)
#   knob KEY VALUE                    a setting changed on the device (spontaneous SettingState)
#   mute on|off                       the speaker's hardware mute (renders and set_volume: UNAVAILABLE)
#   rssi N                            the Wi-Fi signal device.info reports (dBm)
# A board file with a "display" section gets a panel (hal/simpanel.py): its framebuffer is exported to
# $ALABAMA_SIM_PANEL (default panel.fb in the flash dir); `state` reports it as "panel".
# Environment: ALABAMA_SIM_CTL_PORT, ALABAMA_SIM_MIC, ALABAMA_SIM_SPEAKER, ALABAMA_SIM_DUPLEX (full|half),
# ALABAMA_SIM_PING_MS, ALABAMA_SIM_BACKOFF_BASE_MS, ALABAMA_SIM_BACKOFF_CAP_MS (test knobs), ALABAMA_SIM_RSSI,
# ALABAMA_SIM_FLASH_FREE (health and OTA: the flash is the flash dir; this caps what it reports free).
# The watchdog (set by the supervisor, host/alabama/board/sim.py): ALABAMA_SIM_WDT names a heartbeat file;
# wdt_start writes the timeout in ms into it, every wdt_feed rewrites it (its mtime moves), wdt_park writes 0;
# the supervisor kills and reboots the interpreter when it stops moving for longer than the timeout, and tells
# the next boot why in ALABAMA_SIM_RESET_CAUSE (reset_cause(): WDT_RESET, HARD_RESET, ...). Unset: no watchdog.
import gc
import json
import os
import sys

import asyncio
from time import ticks_ms, ticks_us, ticks_diff, ticks_add

from satellite import audio
from satellite.hal import LONG, PRESS, RELEASE

_WAV_HEADER = 44


def _env(name, default=None):
    v = os.getenv(name)
    return v if v else default


def wav_header(rate, nsamples):
    n = 2 * nsamples
    h = bytearray(_WAV_HEADER)
    h[0:4] = b"RIFF"
    _le32(h, 4, 36 + n)
    h[8:16] = b"WAVEfmt "
    _le32(h, 16, 16)
    h[20] = 1
    h[22] = 1
    _le32(h, 24, rate)
    _le32(h, 28, 2 * rate)
    h[32] = 2
    h[34] = 16
    h[36:40] = b"data"
    _le32(h, 40, n)
    return h


def _le32(b, o, v):
    b[o] = v & 0xFF
    b[o + 1] = (v >> 8) & 0xFF
    b[o + 2] = (v >> 16) & 0xFF
    b[o + 3] = (v >> 24) & 0xFF


def _rd32(b, o):
    return b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)


def open_wav(path, rate):
    """Open a PCM WAV for reading, positioned at its data; checks 16-bit mono at `rate`."""
    f = open(path, "rb")
    head = f.read(12)
    if len(head) < 12 or head[0:4] != b"RIFF" or head[8:12] != b"WAVE":
        f.close()
        raise ValueError("%s is not a WAV file" % path)
    fmt_ok = False
    while True:
        ch = f.read(8)
        if len(ch) < 8:
            f.close()
            raise ValueError("%s has no data chunk" % path)
        size = _rd32(ch, 4)
        if ch[0:4] == b"fmt ":
            body = f.read(size)
            chans = body[2] | (body[3] << 8)
            r = _rd32(body, 4)
            bits = body[14] | (body[15] << 8)
            if body[0] != 1 or chans != 1 or bits != 16 or r != rate:
                f.close()
                raise ValueError("%s is %d Hz %d-ch %d-bit; the mic wants %d Hz mono 16-bit PCM"
                                 % (path, r, chans, bits, rate))
            fmt_ok = True
        elif ch[0:4] == b"data":
            if not fmt_ok:
                f.close()
                raise ValueError("%s: data before fmt" % path)
            return f
        else:
            f.read(size + (size & 1))


class SimHal:
    def __init__(self, board, out=None):
        self.board = board
        self._out = out or sys.stdout
        self.duplex = _env("ALABAMA_SIM_DUPLEX", board.get("duplex", "full"))
        self.mic_path = _env("ALABAMA_SIM_MIC")
        self.spk_path = _env("ALABAMA_SIM_SPEAKER", "speaker.wav")
        self.ctl_port = int(_env("ALABAMA_SIM_CTL_PORT", "0"))
        self.options = {"duplex": self.duplex}
        for k, e in (("ping_ms", "ALABAMA_SIM_PING_MS"), ("backoff_base_ms", "ALABAMA_SIM_BACKOFF_BASE_MS"),
                     ("backoff_cap_ms", "ALABAMA_SIM_BACKOFF_CAP_MS"), ("deferred_kb", "ALABAMA_SIM_DEFERRED_KB")):
            v = _env(e)
            if v:
                self.options[k] = int(v)
        self.vol = 16384
        self.gain = 256
        self.brightness = 50
        self._gest = []
        self.muted = False           # the speaker's hardware mute
        self.lamp = False            # the simulated room light (light.set; device.info "light")
        self.rt = None
        # mic
        self._mic = None
        self._mic_on = False
        self._mic_live = False       # `mic live PATH`: a growing WAV, a short read pads silence and waits
        self._mic_raw = None
        self._mic_n = 0
        self._mic_due = 0
        self._mic_frame_us = 20000
        self._mic_fmt = audio.fmt_code(16, 1, 0, audio.MIC_SHIFT)
        # speaker
        self._spk = None
        self._spk_out = None
        self._spk_fmt = audio.fmt_code(16, 1, 0, audio.VOL_SHIFT)
        self._spk_rate = 16000
        self._spk_due = 0
        self._spk_frames = 0
        self.led_phase = 0
        self._panel = None
        self.wdt_path = _env("ALABAMA_SIM_WDT")   # the supervisor's heartbeat file (None: no watchdog)
        self._wdt = None             # the open heartbeat file once armed
        self._wdt_line = b""

    def log(self, line):
        self._out.write(line)
        self._out.write("\n")

    # -- network -------------------------------------------------------------------------------------------
    async def network_up(self, rt):
        self.rt = rt
        if self.ctl_port:
            asyncio.create_task(self._ctl_server())
        self.log("sim: board %s, %s duplex, control on 127.0.0.1:%d" % (self.board.get("id"), self.duplex, self.ctl_port))

    # -- knobs ---------------------------------------------------------------------------------------------
    def set_volume(self, q14):
        self.vol = q14

    def set_mic_gain(self, q8):
        self.gain = q8

    def set_led_brightness(self, b):
        self.brightness = b

    def led(self, phase, brightness):
        self.led_phase = phase

    def lamp_set(self, on):
        """The simulated room light: the light.set tool switches it; the serial log and `state` show it."""
        self.lamp = bool(on)
        self.log("sim: light %s" % ("on" if on else "off"))

    def panel(self):
        """The board's panel (satellite.hal.simpanel, imported only for a board file with a "display"
        section), or None. Its framebuffer goes to $ALABAMA_SIM_PANEL, else panel.fb (docs/display.md)."""
        d = self.board.get("display")
        if not d:
            return None
        if self._panel is None:
            from satellite.hal.simpanel import SimPanel
            self._panel = SimPanel(d["width"], d["height"], _env("ALABAMA_SIM_PANEL", "panel.fb"))
        return self._panel

    def gesture(self):
        if self._gest:
            return self._gest.pop(0)
        return 0

    # -- health (simulated: ALABAMA_SIM_RSSI, ALABAMA_SIM_FLASH_FREE, or the `rssi N` command) ----------------
    def rssi(self):
        r = getattr(self, "_rssi", None)
        return r if r is not None else int(_env("ALABAMA_SIM_RSSI", "-52"))

    def reset_cause(self):
        # why the supervisor (re)started this interpreter; otaboot's own note (crash, ota) takes precedence
        return _env("ALABAMA_SIM_RESET_CAUSE", "PWRON_RESET")

    # -- watchdog (simulated: a heartbeat file the supervisor watches; module comment) -------------------------
    def wdt_start(self, ms):
        if not self.wdt_path:
            return
        self._wdt_line = ("%d\n" % ms).encode()
        self._rewrite()

    def wdt_feed(self):
        f = self._wdt
        if f is not None:
            f.seek(0)
            f.write(self._wdt_line)
            f.flush()

    def wdt_park(self):
        if self._wdt is not None:
            self._wdt_line = b"0\n"
            self._rewrite()

    def _rewrite(self):
        if self._wdt is not None:
            self._wdt.close()
        self._wdt = open(self.wdt_path, "wb")
        self.wdt_feed()

    def flash_free(self):
        v = _env("ALABAMA_SIM_FLASH_FREE")
        if v:
            return int(v)
        st = os.statvfs(".")
        return st[0] * st[4]

    # -- microphone -----------------------------------------------------------------------------------------
    def mic_open(self, rate, nframes):
        self._mic_rate = rate
        self._mic_n = nframes
        if self._mic_raw is None or len(self._mic_raw) != 2 * nframes:
            self._mic_raw = bytearray(2 * nframes)
        self._mic_frame_us = nframes * 1000000 // rate
        self._mic_due = ticks_add(ticks_us(), self._mic_frame_us)
        self._mic_on = True
        if self._mic is None and self.mic_path:
            self._open_mic_file()

    def _open_mic_file(self):
        try:
            self._mic = open_wav(self.mic_path, self._mic_rate if hasattr(self, "_mic_rate") else 16000)
            self.log("sim: mic plays %s" % self.mic_path)
        except (OSError, ValueError) as e:
            self.log("sim: mic file unusable (%s): silence" % e)
            self._mic = None
            self.mic_path = None

    def mic_close(self):
        self._mic_on = False

    def mic_wait_ms(self):
        """Milliseconds until the next mic frame is due (0: take it now). Real-time pacing."""
        d = ticks_diff(self._mic_due, ticks_us())
        return (d + 999) // 1000 if d > 0 else 0

    def _mic_next(self):
        self._mic_due = ticks_add(self._mic_due, self._mic_frame_us)
        if ticks_diff(ticks_us(), self._mic_due) > 200000:   # we fell far behind: resynchronise
            self._mic_due = ticks_us()

    def _mic_fill(self):
        raw = self._mic_raw
        n = 0
        f = self._mic
        if f is not None:
            n = f.readinto(raw) or 0
            if n < len(raw) and self._mic_live:
                if n & 1:            # half a sample written so far: read it again with the next frame
                    f.seek(-1, 1)
                    n -= 1
            elif n < len(raw):
                f.close()
                self._mic = None
                self.mic_path = None
                self.log("sim: mic file ended")
        i = n
        while i < len(raw):
            raw[i] = 0
            i += 1

    def mic_take(self, dst, pos, nframes):
        self._mic_next()
        self._mic_fill()
        audio.mic_to_s16(dst, pos, self._mic_raw, nframes, self._mic_fmt, self.gain)

    def mic_skip(self):
        self._mic_next()
        self._mic_fill()

    # -- speaker --------------------------------------------------------------------------------------------
    def spk_open(self, rate, nframes):
        self._spk_rate = rate
        if self._spk_out is None or len(self._spk_out) != 2 * nframes:
            self._spk_out = bytearray(2 * nframes)
        self._spk = open(self.spk_path, "wb")
        self._spk.write(wav_header(rate, 0))
        self._spk_frames = 0
        self._spk_due = ticks_us()

    def spk_wait_ms(self):
        """Milliseconds until the speaker takes the next frame (real-time playout)."""
        d = ticks_diff(self._spk_due, ticks_us())
        if d < -200000:
            self._spk_due = ticks_us()              # an underrun: the next frame plays now
            return 0
        return (d + 999) // 1000 if d > 1000 else 0

    def spk_write(self, buf, pos, nframes):
        """Play nframes of s16 mono from buf[pos:] (the WAV gets exactly what was played); return them."""
        if self._spk is None:
            return 0
        audio.s16_to_spk(self._spk_out, buf, pos, nframes, self._spk_fmt, self.vol)
        self._spk.write(self._spk_out, 2 * nframes)
        self._spk_frames += nframes
        self._spk_due = ticks_add(self._spk_due, nframes * 1000000 // self._spk_rate)
        return nframes

    def spk_drain_ms(self):
        d = ticks_diff(self._spk_due, ticks_us())
        return (d + 999) // 1000 if d > 0 else 0

    def spk_stop(self):
        self._spk_due = ticks_us()    # nothing is queued past the last frame written: silence now

    def spk_close(self):
        f = self._spk
        if f is None:
            return
        f.seek(0)
        f.write(wav_header(self._spk_rate, self._spk_frames))
        f.close()
        self._spk = None
        self.log("sim: speaker wrote %d frames to %s" % (self._spk_frames, self.spk_path))

    # -- control channel ------------------------------------------------------------------------------------
    async def _ctl_server(self):
        import socket
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(socket.getaddrinfo("127.0.0.1", self.ctl_port)[0][-1])
        srv.listen(2)
        srv.setblocking(False)
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                await asyncio.sleep_ms(20)
                continue
            c.setblocking(False)
            asyncio.create_task(self._ctl_client(c))

    async def _ctl_client(self, c):
        buf = b""
        while True:
            try:
                d = c.read(256)
            except OSError:
                d = None
            if d is None:
                await asyncio.sleep_ms(10)
                continue
            if not d:
                c.close()
                return
            buf += d
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                reply = await self.command(line.decode().strip())
                try:
                    c.write((reply + "\n").encode())
                except OSError:
                    pass

    async def command(self, line):
        parts = line.split()
        if not parts:
            return "err empty command"
        cmd = parts[0]
        rt = self.rt
        try:
            if cmd == "press":
                self._gest.append(PRESS)
            elif cmd == "release":
                self._gest.append(RELEASE)
            elif cmd == "long":
                self._gest.append(PRESS)
                await asyncio.sleep_ms(60)
                self._gest.append(LONG)
                self._gest.append(RELEASE)
            elif cmd == "mic":
                if len(parts) < 2:
                    return "err mic PATH|silence"
                if self._mic is not None:
                    self._mic.close()
                    self._mic = None
                self._mic_live = parts[1] == "live" and len(parts) > 2
                self.mic_path = (None if parts[1] == "silence" else
                                 line.split(None, 2)[2] if self._mic_live else line.split(None, 1)[1])
                if self.mic_path and self._mic_on:
                    self._open_mic_file()
            elif cmd == "heap":
                gc.collect()
                return "ok free=%d alloc=%d" % (gc.mem_free(), gc.mem_alloc())
            elif cmd == "state":
                return "ok " + json.dumps(self.state())
            elif cmd == "knob":
                sat = rt.sat if rt else None
                if sat is None or len(parts) != 3:
                    return "err knob KEY VALUE (while connected)"
                key = parts[1]
                v = parts[2] if key == "capture_mode" else int(parts[2])
                from satellite.device import check_setting_raw
                if check_setting_raw(key, v) is None:
                    return "err bad value for %s" % key
                sat.knob(key, v)
            elif cmd == "rssi":
                self._rssi = int(parts[1])
            elif cmd == "mute":
                on = len(parts) > 1 and parts[1] == "on"
                self.muted = on
                self.log("sim: speaker %s" % ("muted" if on else "unmuted"))
            else:
                return "err unknown command %s" % cmd
        except ValueError as e:
            return "err %s" % e
        return "ok"

    def state(self):
        rt = self.rt
        sat = rt.sat if rt else None
        h = rt._health if rt else None              # device.info's figures once a session made them
        if h is not None:
            free, low = h.heap_free(), h.heap_min
        else:
            gc.collect()
            free = low = gc.mem_free()
        return {
            "state": rt.state if rt else "booting", "pattern": rt.pattern if rt else None,
            "connections": rt.connections if rt else 0,
            "capture": sat.capture_id if sat else 0, "pending": list(sat.pending) if sat else [],
            "render": sat.render_id if sat else 0, "phase": sat.phase if sat else 0,
            "settings": rt.settings if rt else {}, "duplex": self.duplex,
            "mic_open": sat.mic_open if sat else False, "heap_free": free, "heap_min": low,
            "led": self.led_phase,
            "panel": self._panel.info() if self._panel else None,
            "light": self.lamp,
        }
