"""Wake-phrase spotting in worker processes, so the spotters neither hold the core's GIL nor share its one core.

pocketsphinx holds the GIL in ``Decoder.process_raw`` (measured: two threads feeding two spotters ran at
0.87x the speed of one), so spotters in worker threads of the core's process compete with its event loop for
one interpreter: tools/bench/bench_core.py --wake-phrase showed p99 frame delays of ~1 s at 20 ambient boards
that way. Here each ambient stream's ``Spotter`` lives in one of a few ``python -m alabama.core.spotting``
processes; the core sends it the stream's audio in batches of ``batch_s`` and reads back one answer per batch.

Responsible for: ``SpotterPool`` (the worker processes, started on first use on the running loop, restarted
when one dies, stopped by ``close()``; streams assigned to the least-loaded worker) and ``PoolStream`` (one
ambient stream's handle with the shape the pipeline uses for a ``hearing.Feeder``: ``push(bytes)``,
``pending``, ``backlog()``, ``drop()``, and ``on_result((Hit, rest))`` on the loop at a hit, where ``rest`` is
every byte pushed after the hit's frame that the pipeline has not seen back yet), and the worker's loop.
Must not: block the event loop (writes go to asyncio pipe transports, reads run in one task per worker);
grow without bound (a stream keeps at most ``max_backlog_s`` of audio in flight and as much waiting: when
its worker is that far behind, the oldest waiting audio is skipped, counted in ``skipped`` and logged
once); hang (a worker that dies is restarted and its streams get fresh spotters; after ``max_restarts`` of
one worker its streams' spotting is off, ``PoolStream.off`` set and logged, pushes ignored); touch the
session or the wire.

Wire between core and worker (stdin/stdout of the worker): a header ``<BIII`` (op, stream id, batch seq,
payload length) and the payload. Core -> worker: OPEN (JSON: the speech.wakeword.choose() config), FEED (s16le PCM), CLOSE.
Worker -> core: FED (the batch was spotted, no hit), HIT (``<qqI``: hit frame, end_ms, bytes of the batch
before the rest), ERROR (a spotter could not be built: UTF-8 message; that stream's spotting is off).
STATS (either way, stream id 0): the core asks, the worker answers JSON {pid, rss_kb, blocks (Python's
allocated blocks), spotters}: what the ambient soak samples (tools/soak/ambient.py, docs/soak.md).
Both ways messages go together: the core writes a worker's waiting messages every ``FLUSH_S`` (10 ms) in one
write, the worker answers everything one read brought in one write, and the core parses every answer one read
brought (issue 40's capacity: one pipe write and one wake-up per stream batch each way cost the core and the
workers more than the messages did).
"""
import asyncio
import collections
import json
import logging
import os
import pathlib
import struct
import sys

from ..speech import BYTES_PER_SECOND

log = logging.getLogger("alabama.core.spotting")

HDR = struct.Struct("<BIII")
HIT_FMT = struct.Struct("<qqI")
OPEN, FEED, CLOSE, FED, HIT, ERROR, STATS = range(1, 8)

BATCH_S = 0.1           # audio per message: 5 frames of 20 ms (one pipe write and one answer per 100 ms a stream)
MAX_BACKLOG_S = 2.0     # in flight per stream before waiting audio is skipped (the worker is that far behind)
MAX_RESTARTS = 3        # per worker slot; then its streams' spotting is off
#: A worker's messages are written to its pipe at most this often, together (at 200 ambient boards a worker got
#: ~500 writes a second, each a syscall and a wake-up of the worker and of the core's reader for its answer);
#: the worker answers all it has read in one write. It delays a hit by at most this much.
FLUSH_S = 0.01
READ_BYTES = 1 << 16
#: The workers run this much nicer than the core: a frame has 20 ms (the p99 rule), a stream's spotting 2 s of
#: slack (MAX_BACKLOG_S), so when both want a CPU the frame path goes first.
WORKER_NICE = 5


def default_processes():
    return max(1, min(4, os.cpu_count() or 1))


class _Worker:
    """One spotting process and the streams assigned to it."""

    def __init__(self, pool, index):
        self.pool, self.index = pool, index
        self.proc = None
        self.streams = {}            # sid -> PoolStream
        self.restarts = 0
        self.dead = False            # given up: no more restarts
        self._early = []             # messages written before the process was up
        self._out = bytearray()      # messages waiting for the next flush (FLUSH_S)
        self._flush_at = None        # the flush's timer handle
        self._task = None
        self._stats = []             # futures waiting for the next STATS answer

    async def stats(self, timeout=10.0):
        """The worker's {pid, rss_kb, blocks, spotters} (answered between two batches)."""
        fut = asyncio.get_running_loop().create_future()
        self._stats.append(fut)
        self.send(STATS, 0)
        return await asyncio.wait_for(fut, timeout)

    def start(self):
        self._task = asyncio.get_running_loop().create_task(self._run())

    def send(self, op, sid, seq=0, payload=b""):
        if self.proc is None or self.proc.stdin is None:
            self._early.append(HDR.pack(op, sid, seq, len(payload)) + payload)
            return
        out = self._out
        out += HDR.pack(op, sid, seq, len(payload))
        out += payload
        if self._flush_at is None:
            self._flush_at = asyncio.get_running_loop().call_later(FLUSH_S, self._flush)

    def _flush(self):
        """Write what waits, in one go (buffered by the transport: never blocks; each stream bounds its share)."""
        self._flush_at = None
        data, self._out = self._out, bytearray()
        if data and self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.write(data)

    def _drop_output(self):
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        self._out = bytearray()

    async def _spawn(self):
        env = dict(os.environ)
        root = str(pathlib.Path(__file__).resolve().parents[2])     # the directory holding the alabama package
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "alabama.core.spotting", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env=env)
        early, self._early = self._early, []
        for msg in early:
            self.proc.stdin.write(msg)

    async def _run(self):
        while True:
            try:
                await self._spawn()
                out, buf = self.proc.stdout, b""
                while True:
                    data = await out.read(READ_BYTES)      # every answer that has arrived (the worker batches them)
                    if not data:
                        raise asyncio.IncompleteReadError(buf, None)
                    buf = buf + data if buf else data
                    buf = self._answers(buf)
            except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
                reason = e
            except asyncio.CancelledError:
                return
            if self.pool.closed:
                return
            code = await self._reap()
            self.restarts += 1
            if self.restarts > self.pool.max_restarts:
                self.dead = True
                log.warning("spotting worker %d died (%s, exit %s) %d times: wake-phrase spotting is off on its %d "
                            "stream(s)", self.index, type(reason).__name__, code, self.restarts, len(self.streams))
                for s in list(self.streams.values()):
                    s._turn_off("its spotting worker kept dying")
                return
            log.warning("spotting worker %d died (%s, exit %s): restarted; its %d stream(s) start fresh spotters",
                        self.index, type(reason).__name__, code, len(self.streams))
            self.proc = None
            self._early = []
            self._drop_output()                     # written for the dead process
            for s in self.streams.values():
                s._reopen()

    def _answers(self, buf):
        """Hand every whole answer in ``buf`` to its stream; -> the incomplete rest."""
        i, n = 0, len(buf)
        while n - i >= HDR.size:
            op, sid, seq, k = HDR.unpack_from(buf, i)
            if n - i - HDR.size < k:
                break
            payload = buf[i + HDR.size:i + HDR.size + k] if k else b""
            i += HDR.size + k
            if op == STATS:
                waiting, self._stats = self._stats, []
                for fut in waiting:
                    if not fut.done():
                        fut.set_result(json.loads(payload))
                continue
            s = self.streams.get(sid)
            if s is not None:
                s._answer(op, seq, payload)
        return buf[i:] if i else buf

    async def _reap(self):
        p = self.proc
        if p is None:
            return None
        if p.returncode is None:
            try:
                p.kill()
            except ProcessLookupError:
                pass
        try:
            return await asyncio.wait_for(p.wait(), 5)
        except asyncio.TimeoutError:
            return None

    async def close(self):
        if self._task is not None:
            self._task.cancel()
        self._drop_output()
        p = self.proc
        if p is not None and p.returncode is None:
            try:
                p.stdin.close()               # the worker exits at EOF
                await asyncio.wait_for(p.wait(), 2)
            except (asyncio.TimeoutError, OSError):
                await self._reap()


class SpotterPool:
    """Spotters for every ambient stream of one core, in ``processes`` worker processes."""

    def __init__(self, config, processes=None, batch_s=BATCH_S, max_backlog_s=MAX_BACKLOG_S,
                 max_restarts=MAX_RESTARTS):
        self.config = config               # speech.wakeword.choose(): the engine every stream's detector runs
        self.phrase = config["label"]
        self.processes = processes or default_processes()
        self.batch_bytes = int(batch_s * BYTES_PER_SECOND) & ~1
        self.max_backlog_bytes = int(max_backlog_s * BYTES_PER_SECOND) & ~1
        self.max_restarts = max_restarts
        self.closed = False
        self.workers = []
        self._loop = None
        self._next_sid = 0

    def _ensure(self):
        loop = asyncio.get_running_loop()
        if self._loop is not loop:           # first use, or a new loop (tests): fresh workers on this one
            self.workers = [_Worker(self, i) for i in range(self.processes)]
            for w in self.workers:
                w.start()
            self._loop = loop

    def stream(self, on_result, config=None):
        """A PoolStream for one ambient capture (call on the loop); ``on_result((hit, rest))`` runs on it;
        ``config``: this stream's engine (a device's own wake word), else the pool's."""
        self._ensure()
        live = [w for w in self.workers if not w.dead]
        self._next_sid += 1
        if not live:
            s = PoolStream(self, self._next_sid, None, on_result, config)
            s._turn_off("every spotting worker kept dying")
            return s
        w = min(live, key=lambda w: len(w.streams))
        s = PoolStream(self, self._next_sid, w, on_result, config)
        w.streams[s.sid] = s
        s._reopen()
        return s

    async def stats(self):
        """Each live worker's {pid, rss_kb, blocks, spotters} (the ambient soak's samples)."""
        self._ensure()
        return [await w.stats() for w in self.workers if not w.dead]

    async def close(self):
        self.closed = True
        if self._loop is asyncio.get_running_loop():
            await asyncio.gather(*(w.close() for w in self.workers), return_exceptions=True)
        else:                                  # another loop's processes: they exit at their stdin's EOF
            for w in self.workers:
                if w.proc is not None and w.proc.returncode is None:
                    try:
                        w.proc.kill()
                    except ProcessLookupError:
                        pass
        self.workers = []


class PoolStream:
    """One ambient stream's spotter in a worker process (see the module docstring)."""

    def __init__(self, pool, sid, worker, on_result, config=None):
        self.pool, self.sid, self.worker, self._on_result = pool, sid, worker, on_result
        self.config = config or pool.config
        self.pending = bytearray()         # pushed, not yet sent
        self._inflight = collections.deque()   # (seq, bytes) sent, not yet answered
        self._inflight_bytes = 0
        self._seq = 0
        self._ignore_upto = 0              # answers for batches sent before a hit's answer are not reported
        self.skipped = 0                   # bytes never spotted because the worker was behind
        self.off = False
        self.closed = False

    def push(self, data):
        if self.off or self.closed:
            return
        self.pending += data
        if len(self.pending) >= self.pool.batch_bytes:
            self._send()

    def backlog(self):
        """Bytes pushed but not yet answered (waiting here or in the worker)."""
        return len(self.pending) + self._inflight_bytes

    def _send(self):
        limit = self.pool.max_backlog_bytes
        if self._inflight_bytes >= limit:    # the worker is behind: keep only the newest audio waiting
            excess = len(self.pending) - limit
            if excess > 0:
                excess &= ~1
                del self.pending[:excess]
                if not self.skipped:
                    log.warning("wake-phrase spotter %d is %.1f s behind: skipping audio", self.sid,
                                self._inflight_bytes / BYTES_PER_SECOND)
                self.skipped += excess
            return
        data = bytes(self.pending)
        self.pending.clear()
        self._seq += 1
        self._inflight.append((self._seq, data))
        self._inflight_bytes += len(data)
        self.worker.send(FEED, self.sid, self._seq, data)

    def _answer(self, op, seq, payload):
        if op == ERROR:
            self._turn_off(payload.decode("utf-8", "replace"))
            return
        data = b""
        while self._inflight and self._inflight[0][0] <= seq:
            s, d = self._inflight.popleft()
            self._inflight_bytes -= len(d)
            if s == seq:
                data = d
        if op != HIT or self.closed or seq <= self._ignore_upto:
            return
        from ..speech.spotter import Hit
        frame, end_ms, before = HIT_FMT.unpack(payload)
        rest = data[before:] + b"".join(d for _, d in self._inflight)
        self._ignore_upto = self._seq          # what was in flight is in ``rest``: its answers are stale
        self._on_result((Hit(self.config["label"], frame, end_ms), rest))

    def _reopen(self):
        """(Re)create the spotter in the worker: after a restart the audio in flight is lost."""
        self._inflight.clear()
        self._inflight_bytes = 0
        self._ignore_upto = self._seq
        self.worker.send(OPEN, self.sid, 0, json.dumps(self.config).encode())

    def _turn_off(self, why):
        if not self.off:
            log.warning("wake-phrase spotting off on stream %d: %s", self.sid, why)
        self.off = True
        self.pending.clear()
        self._inflight.clear()
        self._inflight_bytes = 0

    def drop(self):
        """The ambient capture ended: its spotter goes (never waits for the worker)."""
        if self.closed:
            return
        self.closed = True
        self.pending.clear()
        self._inflight.clear()
        self._inflight_bytes = 0
        w = self.worker
        if w is not None and w.streams.pop(self.sid, None) is not None and not w.dead:
            w.send(CLOSE, self.sid)


# ------------------------------------------------------------------------------------------ the worker
def worker_main(inp=None, out=None):
    """The worker process: answer every FEED with FED or HIT until stdin ends; whatever one read brought is
    answered in one write (the core sends a worker's batches together, every FLUSH_S)."""
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout.buffer
    spots, buf = {}, b""
    read = getattr(inp, "read1", inp.read)
    try:
        while True:
            data = read(READ_BYTES)
            if not data:
                return 0
            buf = buf + data if buf else data
            i, n = 0, len(buf)
            while n - i >= HDR.size:
                op, sid, seq, k = HDR.unpack_from(buf, i)
                if n - i - HDR.size < k:
                    break
                _serve(spots, out, op, sid, seq, buf[i + HDR.size:i + HDR.size + k] if k else b"")
                i += HDR.size + k
            buf = buf[i:] if i else buf
            out.flush()
    finally:
        for sp in spots.values():
            sp.close()


def _serve(spots, out, op, sid, seq, payload):
    """One message from the core; its answer (if any) goes to ``out``, flushed by the caller."""
    from ..speech import spotter, wakeword
    if op == OPEN:
        old = spots.pop(sid, None)
        if old is not None:
            old.close()
        try:
            spots[sid] = wakeword.open_detector(json.loads(payload))
        except Exception as e:  # noqa: BLE001 — said back to the core, which turns that stream's spotting off
            msg = ("%s: %s" % (type(e).__name__, e)).encode()
            out.write(HDR.pack(ERROR, sid, 0, len(msg)) + msg)
    elif op == FEED:
        sp = spots.get(sid)
        r = spotter.frames_until_hit(sp, payload) if sp is not None else None
        if r is None:
            out.write(HDR.pack(FED, sid, seq, 0))
        else:
            hit, rest = r
            out.write(HDR.pack(HIT, sid, seq, HIT_FMT.size) + HIT_FMT.pack(hit.frame, hit.end_ms,
                                                                           len(payload) - len(rest)))
    elif op == CLOSE:
        sp = spots.pop(sid, None)
        if sp is not None:
            sp.close()
    elif op == STATS:
        msg = json.dumps({"pid": os.getpid(), "rss_kb": rss_kb(), "blocks": sys.getallocatedblocks(),
                          "spotters": len(spots)}).encode()
        out.write(HDR.pack(STATS, 0, 0, len(msg)) + msg)


def rss_kb(pid="self"):
    """VmRSS of a process in kB (0 where /proc is not there)."""
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _be_nicer():
    try:
        os.nice(WORKER_NICE)
    except (OSError, AttributeError):      # not allowed, or no os.nice here: the same priority as the core
        pass


if __name__ == "__main__":
    _be_nicer()
    sys.exit(worker_main())
