"""The virtual board in a browser: ``alabama board sim --web [PORT]``.

Responsible for showing a running ``VirtualBoard`` on one page served on 127.0.0.1 (aiohttp): the
push-to-talk button, the LED ring (the PipelineState the firmware logs as ``led PHASE``), the panel's
framebuffer, the frame timeline (the firmware's ``tx``/``rx`` trace lines) and the serial log, live over
one websocket; the microphone from the browser (getUserMedia, streamed as 16 kHz s16le PCM) or from a
chosen WAV; the speaker's output streamed back to the browser as it is played. It holds no protocol
logic: everything it shows comes from the board's serial log, its files and its control channel.

How each part reaches the page:

* serial log, LED, timeline: ``VirtualBoard.echo`` (one call per log line, from the pump thread) is
  chained into ``feed_line`` when the WebBoard is made, before the board starts (lines that come before
  the server's loop runs wait in ``_early``), so every page gets the board's history from its first boot
  line (the last LOG_KEEP lines and TIMELINE_KEEP frames); lines are parsed here and pushed as JSON
  events. StreamChunks are collapsed here: a stream's first chunk is a row, the rest one ``⋯`` row whose
  count grows (from one line per chunk, or the firmware's ``tx stream_chunk id N +COUNT``).
* microphone: while the button is held with the browser mic selected, the browser's PCM (binary
  websocket messages) is appended to a fresh WAV that the simulated HAL reads with ``mic live PATH``
  (a growing file: its end is not the end); a chosen WAV is uploaded (POST /mic), converted to 16 kHz
  mono and handed to the HAL with ``mic PATH``.
* speaker: the HAL writes what it plays to ``VirtualBoard.speaker`` (a WAV, header first); a watcher
  tails it and forwards the new samples as binary websocket messages, announced by a JSON
  ``{"t": "speaker", "rate": N}`` event when a new playback starts.
* panel: ``PanelSource`` (below) reads the HAL's framebuffer file; a change is announced as a
  ``{"t": "panel", "v": N}`` event and the page loads ``/panel.png?v=N``.

Websocket protocol (``/ws``). Server → page, JSON: ``hello`` (snapshot: board, led, log, timeline,
panel, mic), ``log``, ``led``, ``frame``, ``panel``, ``speaker``, ``state`` (the control channel's
``state`` once a second), ``mic``, ``error``; binary: speaker PCM (s16le mono at the announced rate).
Page → server, JSON ``{"cmd": "press" | "release" | "long"}`` and ``{"cmd": "mic", "source":
"browser" | "wav" | "silence"}``; binary: microphone PCM (s16le mono 16 kHz), taken only while pressed.
"""
import asyncio
import collections
import errno
import io
import json
import logging
import pathlib
import re
import shutil
import struct
import tempfile
import threading
import time

from aiohttp import WSMsgType, web

from .. import audio
from ..errors import AlabamaError, listen_error

log = logging.getLogger("alabama.board.web")

STATIC = pathlib.Path(__file__).with_name("webpage")
#: Only loopback: the page drives a board and plays its microphone; nothing else may reach it.
HOST = "127.0.0.1"
MIC_RATE = audio.MIC_RATE
#: Silence written ahead of the browser's first samples: the HAL starts reading at the press, the
#: browser's audio arrives a few tens of ms later; this lead keeps the first words from being cut.
MIC_LEAD_MS = 100
#: Past this the browser is streaming more microphone than real time allows (or not pressing): refused.
MAX_MIC_BYTES = 2 * MIC_RATE * 120
#: A chosen WAV (POST /mic) larger than this is refused before it is read (two minutes of 48 kHz stereo).
MAX_UPLOAD_BYTES = 48000 * 4 * 120 + 4096
#: What a page opened late still gets: the board's last LOG_KEEP serial lines and TIMELINE_KEEP timeline rows.
LOG_KEEP = 2000
#: Messages a page may fall behind before it is dropped (a stalled tab must not grow the server's memory).
OUTBOX_MAX = 4000
TIMELINE_KEEP = 2000
SPEAKER_POLL_S = 0.02
STATE_POLL_S = 1.0
PHASES = ("IDLE", "LISTENING", "PROCESSING", "SPEAKING", "ERROR")

_LED = re.compile(r"^(?:sat: )?led (\w+)")
_FRAME = re.compile(r"^(?:sat: )?(tx|rx) (\w+) id (\d+)(?: seq (\d+)| \+(\d+))?")
#: Frames after which a stream's id carries no more chunks (a StreamChunk run on it is over).
_ENDS = ("stream_end", "stream_cancel", "error", "response")


class WebError(AlabamaError):
    pass


#: A 16-bit mono PCM WAV header (alabama.audio owns the format).
wav_header = audio.stream_header


def to_mic_wav(data, dest):
    """A chosen WAV (any PCM 8/16-bit, mono/stereo, any rate) written as the mic's 16 kHz mono s16 WAV
    (alabama.audio.to_mic_wav). Returns its duration in seconds. Raises WebError saying what is wrong."""
    try:
        return audio.to_mic_wav(data, dest, MIC_RATE)
    except audio.WavError as e:
        msg = str(e)
        raise WebError(msg + ": choose a .wav (16-bit PCM)" if msg.startswith("not a") else msg) from None


class PanelSource:
    """The panel's framebuffer as the page sees it: the file the simulated HAL exports (``panel.fb`` in the
    flash dir, or $ALABAMA_SIM_PANEL; format in docs/display.md, parsed by ``alabama.board.panel``).

    ``size``: (w, h) from the board file's ``display`` section, None when the board has no panel.
    ``poll()`` -> True when a new picture was written since the last call. ``png()`` -> (seq, its PNG
    bytes), None before the first paint. ``seq``/``phase``: the header's fields of the picture last read."""

    def __init__(self, vb):
        self.vb = vb
        d = vb.board.data.get("display") or None
        self.size = (int(d["width"]), int(d["height"])) if d else None
        p = pathlib.Path((vb.extra_env or {}).get("ALABAMA_SIM_PANEL") or "panel.fb")
        self.path = p if p.is_absolute() else vb.flash / p
        self.seq = None
        self.phase = None
        self._stamp = None
        self._panel = None
        self._png = None
        self.bad = None                  # why the last file read was refused (shown once in the log)

    def poll(self):
        if self.size is None:
            return False
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return False
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        from . import panel
        try:
            p = panel.read(self.path)
        except panel.PanelError as e:
            self.bad = str(e)
            return False
        if p is None or (p.seq == self.seq and self._panel is not None):
            return False
        self._panel, self._png, self.seq, self.phase = p, None, p.seq, p.phase_name
        self.size = p.size
        return True

    def png(self):
        """(seq, PNG bytes) of the picture last read, or None before the first paint."""
        p = self._panel
        if p is None:
            return None
        if self._png is None or self._png[0] != p.seq:
            buf = io.BytesIO()
            p.image().save(buf, "PNG")
            self._png = (p.seq, buf.getvalue())
        return self._png


class WebBoard:
    """Serves ``vb`` (a VirtualBoard, best not started yet) on http://127.0.0.1:PORT/.

    Made before ``vb.start()``, it hears the board from its first line: the constructor chains its echo.
    Made later, it starts from ``vb.lines()`` (no times for those). ``await start()`` binds (port 0: a free
    one; ``url`` says which), ``await stop()`` closes the page's connections and the server (the board
    itself is the caller's)."""

    def __init__(self, vb, port=0, panel=None, mic_wav=None):
        self.vb = vb
        self.port = port
        self.panel = panel or PanelSource(vb)
        self.t0 = time.monotonic()
        self.clients = {}                 # websocket -> its outbox (asyncio.Queue)
        self.led = None
        self.log = collections.deque(maxlen=LOG_KEEP)
        self.timeline = collections.deque(maxlen=TIMELINE_KEEP)
        self.last_state = None
        self.work = pathlib.Path(tempfile.mkdtemp(prefix="alabama-web-"))
        self.mic_source = "silence"
        self.mic_wav = None
        self.mic_wav_name = None
        if mic_wav:                       # --mic: converted like a WAV chosen on the page
            try:
                data = pathlib.Path(mic_wav).read_bytes()
            except OSError as e:
                shutil.rmtree(self.work, ignore_errors=True)
                raise WebError("cannot read the mic WAV %s: %s" % (mic_wav, e.strerror or e)) from None
            self.mic_wav = str(self.work / "chosen-mic.wav")
            try:
                to_mic_wav(data, self.mic_wav)
            except WebError:
                shutil.rmtree(self.work, ignore_errors=True)
                raise
            self.mic_wav_name = pathlib.Path(mic_wav).name
            self.mic_source = "wav"
        self.pressed = False
        self._live = None                 # the growing WAV the HAL hears while the browser mic streams
        self._live_bytes = 0
        self._presses = 0
        self._mic_refused = False
        self._panel_v = 0
        self._loop = None
        self._runner = None
        self._tasks = []
        self._runs = {}                   # (dir, id) -> [first row, the "more" row or None] of a StreamChunk run
        self._run_n = 0
        self._early = collections.deque(maxlen=LOG_KEEP)   # (line, time) heard before start(): fed at start
        self._early_lock = threading.Lock()
        for line in (vb.lines() if vb.running and hasattr(vb, "lines") else ()):
            self.feed_line(line, self.t0)
        self._prev_echo = vb.echo
        vb.echo = self._echo
    # ------------------------------------------------------------------ lifecycle
    @property
    def addresses(self):
        """The (host, port) pairs the server listens on (one: 127.0.0.1)."""
        return [tuple(a[:2]) for a in self._runner.addresses] if self._runner else []

    @property
    def url(self):
        return "http://%s:%d/" % (HOST, self.port)

    def _allowed_hosts(self):
        return {"%s:%d" % (h, self.port) for h in (HOST, "localhost")}

    @web.middleware
    async def _same_origin(self, request, handler):
        """Loopback is not enough: any page the user's browser has open can reach 127.0.0.1. A request must
        name this server as its Host (no DNS rebinding) and, when it says where it comes from (Origin:
        browsers send it on websockets and POSTs), come from this page."""
        hosts = self._allowed_hosts()
        origin = request.headers.get("Origin")
        if request.host not in hosts or (origin is not None and origin not in {"http://" + h for h in hosts}):
            return web.Response(status=403, text="the web board answers only its own page at %s" % self.url)
        return await handler(request)

    def app(self):
        app = web.Application(client_max_size=MAX_UPLOAD_BYTES, middlewares=[self._same_origin])
        app.router.add_get("/", self._index)
        app.router.add_get("/ws", self._ws)
        app.router.add_get("/panel.png", self._panel_png)
        app.router.add_post("/mic", self._mic_upload)
        app.router.add_static("/static/", STATIC, show_index=False)
        return app

    async def start(self):
        with self._early_lock:
            self._loop = asyncio.get_running_loop()
            early, self._early = self._early, None
        for line, t in early:
            self.feed_line(line, t)
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, self.port)
        try:
            await site.start()
        except OSError as e:
            await self._runner.cleanup()
            self.vb.echo = self._prev_echo
            if e.errno == errno.EADDRINUSE:
                raise listen_error(e, HOST, self.port, "--web", "PORT") from None
            raise WebError("cannot serve the web board on %s:%d (%s): pick another port, --web PORT"
                           % (HOST, self.port, e.strerror or e)) from None
        self.port = self._runner.addresses[0][1]
        self._tasks = [asyncio.ensure_future(self._watch_speaker()), asyncio.ensure_future(self._watch_state()),
                       asyncio.ensure_future(self._watch_panel())]
        return self

    async def stop(self):
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):   # noqa: BLE001 - shutting down
                pass
        self._tasks = []
        for ws in list(self.clients):
            self.clients.pop(ws).put_nowait(None)
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.vb.echo == self._echo:
            self.vb.echo = self._prev_echo
        self._close_live()
        shutil.rmtree(self.work, ignore_errors=True)

    # ------------------------------------------------------------------ from the board's serial log
    def _echo(self, line):
        """VirtualBoard.echo: called from its pump thread for every serial log line."""
        if self._prev_echo:
            self._prev_echo(line)
        t = time.monotonic()
        with self._early_lock:
            loop = self._loop
            if loop is None:
                self._early.append((line, t))
                return
        if not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.feed_line, line, t)
            except RuntimeError:
                pass                       # the loop is shutting down

    def feed_line(self, line, t=None):
        ms = int(((t or time.monotonic()) - self.t0) * 1000)
        self.log.append((ms, line))
        self._send({"t": "log", "ms": ms, "line": line})
        m = _LED.match(line)
        if m:
            self.led = m.group(1)
            if self.timeline and self.timeline[-1]["op"] == "pipeline_state":
                self.timeline[-1].setdefault("detail", self.led)
            self._send({"t": "led", "ms": ms, "phase": self.led})
            return
        m = _FRAME.match(line)
        if m:
            d, op, id_ = m.group(1), m.group(2), int(m.group(3))
            if op == "stream_chunk":
                self._chunk(ms, d, id_, m.group(4), m.group(5))
                return
            if op in _ENDS:
                self._runs.pop(("tx", id_), None)
                self._runs.pop(("rx", id_), None)
            row = {"t": "frame", "ms": ms, "dir": d, "op": op, "id": id_}
            self.timeline.append(row)
            self._send(row)

    def _chunk(self, ms, d, id_, seq, more):
        """A StreamChunk line: the run's first is a row, the rest counted in one "more" row (sent again as it
        grows: the page replaces it by its ``run`` number). ``more``: the firmware's count of the chunks after
        the first, logged once before the stream's end (that run is then over)."""
        run = self._runs.get((d, id_))
        if run is None and more is None:
            row = {"t": "frame", "ms": ms, "dir": d, "op": "stream_chunk", "id": id_}
            if seq is not None:
                row["detail"] = "seq " + seq
            self._runs[(d, id_)] = [row, None]
            self.timeline.append(row)
            self._send(row)
            return
        if run is None:
            run = [None, None]
        if run[1] is None:
            self._run_n += 1
            run[1] = {"t": "frame", "ms": ms, "dir": d, "op": "stream_chunk", "id": id_, "more": 0, "run": self._run_n}
            self.timeline.append(run[1])
        row = run[1]
        row["more"] += int(more) if more is not None else 1
        row["to_ms"] = ms
        if more is not None:
            self._runs.pop((d, id_), None)
        self._send(row)

    # ------------------------------------------------------------------ to the page
    def _send(self, ev):
        if self.clients:
            self._queue(json.dumps(ev))

    def _send_bytes(self, data):
        if self.clients:
            self._queue(bytes(data))

    def _queue(self, msg):
        """Each page has its own queue, sent in order by its own task; a page that falls OUTBOX_MAX
        messages behind (a stalled tab) is dropped rather than let the queue grow without bound."""
        for ws, q in list(self.clients.items()):
            if q.qsize() >= OUTBOX_MAX:
                log.warning("web board: a page fell %d messages behind: closing it", OUTBOX_MAX)
                self.clients.pop(ws, None)
                q.put_nowait(None)
            else:
                q.put_nowait(msg)

    async def _sender(self, ws, q):
        try:
            while True:
                msg = await q.get()
                if msg is None or ws.closed:
                    break
                if isinstance(msg, str):
                    await ws.send_str(msg)
                else:
                    await ws.send_bytes(msg)
        except (ConnectionError, RuntimeError):
            pass                            # the page went away
        finally:
            if not ws.closed:
                await ws.close()

    def snapshot(self):
        return {"t": "hello", "board": self.vb.board.id, "board_name": self.vb.board.data.get("name", ""),
                "keep": {"log": LOG_KEEP, "timeline": TIMELINE_KEEP}, "led": self.led, "log": [{"ms": ms, "line": l} for ms, l in self.log],
                "timeline": list(self.timeline), "panel": list(self.panel.size) if self.panel.size else None,
                "panel_v": self._panel_v, "mic": self._mic_info(), "state": self.last_state}

    def _mic_info(self):
        return {"source": self.mic_source, "wav": self.mic_wav_name}

    # ------------------------------------------------------------------ HTTP
    async def _index(self, request):
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def _panel_png(self, request):
        got = await asyncio.to_thread(self.panel.png)
        if got is None:
            return web.Response(status=404, text="nothing on the panel yet (or this board has none)")
        return web.Response(body=got[1], content_type="image/png",
                            headers={"Cache-Control": "no-store", "X-Panel-Seq": str(got[0])})

    async def _mic_upload(self, request):
        """POST /mic with the WAV as the body: it becomes what the microphone hears at the next press."""
        if request.content_length is not None and request.content_length > MAX_UPLOAD_BYTES:
            return web.json_response({"error": "the WAV is over %d bytes" % MAX_UPLOAD_BYTES}, status=413)
        data = await request.read()
        name = pathlib.Path(request.query.get("name") or "chosen.wav").name
        dest = self.work / "chosen-mic.wav"
        try:
            seconds = await asyncio.to_thread(to_mic_wav, data, dest)
        except WebError as e:
            return web.json_response({"error": str(e)}, status=400)
        self.mic_wav, self.mic_wav_name, self.mic_source = str(dest), name, "wav"
        self._send({"t": "mic", **self._mic_info(), "seconds": round(seconds, 2)})
        return web.json_response({"ok": True, "seconds": round(seconds, 2), **self._mic_info()})

    async def _ws(self, request):
        ws = web.WebSocketResponse(heartbeat=20, max_msg_size=1 << 20)
        await ws.prepare(request)
        q = asyncio.Queue()
        q.put_nowait(json.dumps(self.snapshot()))
        self.clients[ws] = q
        sender = asyncio.ensure_future(self._sender(ws, q))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    try:
                        req = json.loads(msg.data)
                        await self._command(req)
                    except (ValueError, TypeError, KeyError, AttributeError) as e:
                        q.put_nowait(json.dumps({"t": "error", "error": "bad request %r: %s" % (msg.data[:80], e)}))
                    except AlabamaError as e:
                        q.put_nowait(json.dumps({"t": "error", "error": str(e)}))
                elif msg.type == WSMsgType.BINARY:
                    self._mic_pcm(msg.data)
        finally:
            if self.clients.pop(ws, None) is not None:
                q.put_nowait(None)
            await sender
        return ws

    # ------------------------------------------------------------------ commands
    async def _command(self, req):
        cmd = req["cmd"]
        if cmd == "press":
            await self.press()
        elif cmd == "release":
            await self.release()
        elif cmd == "long":
            await asyncio.to_thread(self.vb.long_press)
        elif cmd == "mic":
            src = req["source"]
            if src not in ("browser", "wav", "silence"):
                raise WebError("mic source %r: browser, wav or silence" % src)
            if src == "wav" and not self.mic_wav:
                raise WebError("no WAV chosen yet: choose one first")
            self.mic_source = src
            self._send({"t": "mic", **self._mic_info()})
        else:
            raise WebError("unknown command %r (press, release, long, mic)" % cmd)

    async def press(self):
        if self.pressed:
            return
        self.pressed = True
        self._presses += 1
        self._mic_refused = False
        try:
            if self.mic_source == "browser":
                path = self._open_live()
                await asyncio.to_thread(self.vb.command, "mic live %s" % path)
            elif self.mic_source == "wav":
                await asyncio.to_thread(self.vb.command, "mic %s" % self.mic_wav)
            else:
                await asyncio.to_thread(self.vb.command, "mic silence")
            await asyncio.to_thread(self.vb.press)
        except AlabamaError:
            self.pressed = False            # not pressed: the next press tries again
            self._close_live()
            raise
        self._send({"t": "button", "pressed": True})

    async def release(self):
        if not self.pressed:
            return
        self.pressed = False
        await asyncio.to_thread(self.vb.release)
        self._close_live()
        self._send({"t": "button", "pressed": False})

    # ------------------------------------------------------------------ the browser's microphone
    def _open_live(self):
        """A fresh growing WAV for this press (a new name each time: the HAL may still hold the last one)."""
        self._close_live()
        for old in self.work.glob("live-mic-*.wav"):
            old.unlink(missing_ok=True)
        path = self.work / ("live-mic-%d.wav" % self._presses)
        f = open(path, "wb", buffering=0)
        f.write(wav_header(MIC_RATE))
        f.write(bytes(2 * MIC_RATE * MIC_LEAD_MS // 1000))
        self._live, self._live_bytes = f, 0
        return path

    def _close_live(self):
        if self._live is not None:
            self._live.close()
            self._live = None

    def _mic_pcm(self, data):
        if self._live is None or not self.pressed:
            return                          # not pressed or not the browser mic: nothing listens
        if len(data) & 1 or self._live_bytes + len(data) > MAX_MIC_BYTES:
            if not self._mic_refused:       # said once a press
                self._mic_refused = True
                self._send({"t": "error", "error": "microphone data refused (odd length or past %d s)"
                            % (MAX_MIC_BYTES // (2 * MIC_RATE))})
            return
        self._live.write(data)
        self._live_bytes += len(data)

    # ------------------------------------------------------------------ watchers
    async def _watch_speaker(self):
        """Tail the speaker WAV. The HAL's spk_open truncates it and writes a header with data size 0,
        spk_write appends, spk_close rewrites the header with the real size: a header saying 0 after a
        finished one, or a file shorter than what was read, is a new playback."""
        path = pathlib.Path(self.vb.speaker)
        try:
            pos, finished = path.stat().st_size, True     # what was played before the page: not replayed
        except FileNotFoundError:
            pos, finished = 0, False
        while True:
            await asyncio.sleep(SPEAKER_POLL_S)
            try:
                with open(path, "rb") as f:
                    head = f.read(44)
                    if len(head) < 44 or head[:4] != b"RIFF":
                        continue
                    size = struct.unpack_from("<I", head, 40)[0]
                    end = f.seek(0, 2)
                    if end < pos or (finished and size == 0):
                        pos, finished = 0, False
                    if pos == 0:
                        self._send({"t": "speaker", "rate": struct.unpack_from("<I", head, 24)[0]})
                        pos = 44
                    f.seek(pos)
                    data = f.read(max(0, end - pos) & ~1)
            except FileNotFoundError:
                continue
            if data:
                pos += len(data)
                self._send_bytes(data)
            finished = size != 0 and pos >= 44 + size

    async def _watch_state(self):
        while True:
            await asyncio.sleep(STATE_POLL_S)
            if not self.clients or not self.vb.running:
                continue
            try:
                st = await asyncio.to_thread(self.vb.state)
            except (AlabamaError, ValueError):
                continue
            self.last_state = st
            self._send({"t": "state", "state": st})

    async def _watch_panel(self):
        while True:
            await asyncio.sleep(0.1)
            try:
                changed = await asyncio.to_thread(self.panel.poll)
            except OSError:
                continue
            if changed:
                self._panel_v += 1
                self._send({"t": "panel", "v": self._panel_v, "size": list(self.panel.size or ()),
                            "seq": self.panel.seq, "phase": self.panel.phase})


async def serve(wb, echo=print):
    """Run the page of a WebBoard (made before its board started: it hears every line) until cancelled (the
    CLI's --web)."""
    await wb.start()
    echo("web board on %s (loopback only; Ctrl-C stops)" % wb.url)
    try:
        while not getattr(wb.vb, "failed", None):      # a board that cannot start at all ends the page too
            await asyncio.sleep(0.2)
    finally:
        await wb.stop()
