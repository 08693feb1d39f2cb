# DEFERRED store-and-forward capture (spec §10.1, §10.3, §10.4; R10.4-d, R10.1-a): a button press while the
# core is out of reach records into a bounded ring on flash; on the next connection each stored recording is
# uploaded as a DEFERRED CaptureOpen with a stable correlation_ref, only from the core's CaptureAck
# high-water mark on, every chunk stamped with capture_ts from the device's monotonic clock (Runtime.now_us,
# the clock Ping t1/t2/t3 use), one frame per scheduler turn so Ping and control frames go between chunks.
#
# Flash layout (one directory, "data/deferred" under the working directory: "/" on a board, the virtual
# board's flash directory in the simulator):
#   idx        the index, text, rewritten whole as idx.tmp then renamed over idx (crash-safe: either the old
#              or the new index is there). Line 1: "v1 <tag> <next> <dropped> <boot>"; then one line per
#              recording, oldest first: "<n> <count> <nframes> <rate> <done> <fails> <boot> <anchor> [<shift>]"
#              (boot: the store's boot count when it was recorded; anchor: that boot's clock offset, core wall
#              clock minus device clock in us from the device's own Ping rounds, or "-" when that boot had none
#              yet; shift: the us its upload adds to every stored capture_ts, written once a core holds chunks
#              of it, so the rest goes on the same clock whatever connection or boot sends it).
#   <n>.rec    recording n: `count` fixed-size records [8-byte LE capture_ts | 2*nframes bytes s16le PCM],
#              appended a batch at a time. Bytes past `count` records (a crash between the append and the
#              index rename) are ignored: at most one batch is lost, never a record half-read.
# The correlation_ref of recording n is "<tag>-<n>": tag is random per store, so a store erased and
# re-created never reuses a ref the core may still hold partial state for.
#
# Allocation: the upload's per-chunk path (read one record from flash into a preallocated buffer, write the
# StreamChunk header by hand, copy the PCM into the frame buffer, encrypt in place, write) allocates nothing;
# capture_ts is carried as two small ints (hi * 2**28 + lo) because a microsecond count passes 2**30 (a heap
# int on the 32-bit board) after 18 minutes of uptime. Recording appends a whole batch (BATCH records) and
# rewrites the index once per batch: that is where the flash writes (and their allocations) happen.
import os
import time

import asyncio
from micropython import const
from time import ticks_ms, ticks_diff
from satellite import audio
from satellite.hal import PRESS, RELEASE, LONG

from satellite.wire import alabama_v1 as pb
from satellite.wire import frame as F

LED_RECORDING = const(1)     # the LISTENING colour: the mic is recording for later
LED_QUEUED = const(5)        # a device-local LED state past PipelineState's five: "recording queued"
BATCH = const(8)             # records per flash append (8 x 20 ms = 160 ms of audio)
TS_BYTES = const(8)
MAX_RECORDINGS = const(16)   # index entries; past it the oldest recording is dropped like a full ring
MAX_RECORD_MS = const(30000) # one recording, like a LIVE capture (device._MAX_CAPTURE_MS)
ACK_WAIT_MS = const(5000)    # the core's CaptureAck on a DEFERRED open; without one we start from 0
MAX_FAILS = const(3)         # a recording the core answered with Error this often is dropped (logged)
_LIMB = const(0x10000000)    # capture_ts = hi * 2**28 + lo, both small ints on a 32-bit port
_LIMB_MASK = const(0xFFFFFFF)
_FRAME_MS = const(20)

try:
    copy = audio.copy                  # the viper byte copy (allocation-free) or its pure twin
except AttributeError:
    from satellite.wire._copy import copy


def _wall_us():
    """The local real-time clock (the host's on the virtual board, where it is the truth the clock-mapping
    test compares with; unset on a board without NTP): for the log line only."""
    try:
        return time.time_ns() // 1000
    except AttributeError:
        return -1


def put_ts(buf, pos, hi, lo):
    """capture_ts (hi * 2**28 + lo) as 8 little-endian bytes at buf[pos:]."""
    buf[pos] = lo & 0xFF
    buf[pos + 1] = (lo >> 8) & 0xFF
    buf[pos + 2] = (lo >> 16) & 0xFF
    buf[pos + 3] = ((lo >> 24) & 0x0F) | ((hi & 0x0F) << 4)
    buf[pos + 4] = (hi >> 4) & 0xFF
    buf[pos + 5] = (hi >> 12) & 0xFF
    buf[pos + 6] = (hi >> 20) & 0xFF
    buf[pos + 7] = (hi >> 28) & 0x03


def ts_lo(buf, pos):
    return buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16) | ((buf[pos + 3] & 0x0F) << 24)


def ts_hi(buf, pos):
    return (buf[pos + 3] >> 4) | (buf[pos + 4] << 4) | (buf[pos + 5] << 12) | (buf[pos + 6] << 20) | \
        ((buf[pos + 7] & 0x03) << 28)


def ts_value(buf, pos):
    """The whole capture_ts (an int, may be a heap int: tests and logs only)."""
    return ts_hi(buf, pos) * _LIMB + ts_lo(buf, pos)


def _ts_size(hi, lo):
    if hi:
        n = 4                # 4 groups of 7 bits carry lo's 28 bits, then hi 7 bits a byte
        while True:
            n += 1
            hi >>= 7
            if not hi:
                return n
    return F.varint_size(lo) if lo else 0


def _put_ts_varint(buf, pos, hi, lo):
    """Minimal varint of hi * 2**28 + lo (hi > 0): 28 bits of lo in 4 groups, then hi 7 bits at a time."""
    i = 0
    while i < 4:
        buf[pos] = (lo & 0x7F) | 0x80
        lo >>= 7
        pos += 1
        i += 1
    while hi >= 0x80:
        buf[pos] = (hi & 0x7F) | 0x80
        hi >>= 7
        pos += 1
    buf[pos] = hi
    return pos + 1


def chunk_header_size(id_, seq, hi, lo):
    """Bytes of the canonical Envelope{id, stream_chunk{seq, capture_ts}} (what codec.size would say)."""
    inner = (1 + F.varint_size(seq) if seq else 0) + (1 + _ts_size(hi, lo) if (hi or lo) else 0)
    return 1 + F.varint_size(id_) + 2 + inner


def write_chunk_header(buf, pos, id_, seq, hi, lo):
    """Write Envelope{id=1, stream_chunk=8 {seq=1, capture_ts=2}} at pos (fields in order, defaults left out,
    exactly the codec's canonical bytes); return the position after it."""
    inner = (1 + F.varint_size(seq) if seq else 0) + (1 + _ts_size(hi, lo) if (hi or lo) else 0)
    buf[pos] = 0x08
    pos = F.write_varint(buf, pos + 1, id_)
    buf[pos] = 0x42
    buf[pos + 1] = inner
    pos += 2
    if seq:
        buf[pos] = 0x08
        pos = F.write_varint(buf, pos + 1, seq)
    if hi:
        buf[pos] = 0x10
        pos = _put_ts_varint(buf, pos + 1, hi, lo)
    elif lo:
        buf[pos] = 0x10
        pos = F.write_varint(buf, pos + 1, lo)
    return pos


# ------------------------------------------------------------------------------------------------ the store

class Recording:
    def __init__(self, n, count, nframes, rate, done, fails, boot=0, anchor=None, shift=None):
        self.n, self.count, self.nframes, self.rate, self.done, self.fails = n, count, nframes, rate, done, fails
        self.boot, self.anchor = boot, anchor
        self.shift = shift           # the upload's clock (us added to capture_ts), None until one is chosen

    def record_bytes(self):
        return TS_BYTES + 2 * self.nframes


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def _mkdirs(path):
    p = ""
    for part in path.split("/"):
        if not part:
            p = "/"
            continue
        p = part if not p else (p + part if p.endswith("/") else p + "/" + part)
        if not _exists(p):
            os.mkdir(p)


class Store:
    """The bounded ring of recordings on flash (module comment: layout). `capacity` bytes of records at
    most: past it (or past MAX_RECORDINGS) the oldest finished recording is dropped, logged and counted."""

    def __init__(self, path, capacity, log, rng=None):
        self.path = path
        self.capacity = capacity
        self.log = log
        self.rng = rng or os.urandom
        self.tag = ""
        self.next = 1
        self.dropped = 0
        self.boot = 0
        self.recs = []

    def _file(self, n):
        return "%s/%d.rec" % (self.path, n)

    def ref(self, rec):
        return "%s-%d" % (self.tag, rec.n)

    def load(self):
        """Read the index (after a reboot: a recording cut by the reset is closed at its last whole
        batch); a missing or unreadable index starts an empty store. Orphan files are removed."""
        _mkdirs(self.path)
        self.recs = []
        try:
            with open(self.path + "/idx") as f:
                lines = f.read().split("\n")
            head = lines[0].split()
            if len(head) != 5 or head[0] != "v1":
                raise ValueError("index header %r" % lines[0])
            self.tag, self.next, self.dropped, self.boot = head[1], int(head[2]), int(head[3]), int(head[4])
            for ln in lines[1:]:
                p = ln.split()
                # 8 fields, a 9th (shift) since issue 32; more come from a newer firmware this one was rolled
                # back from (OTA): its recordings are kept, the fields this firmware does not know dropped
                if len(p) >= 8:
                    self.recs.append(Recording(int(p[0]), int(p[1]), int(p[2]), int(p[3]), int(p[4]), int(p[5]),
                                               int(p[6]), None if p[7] == "-" else int(p[7]),
                                               None if len(p) < 9 or p[8] == "-" else int(p[8])))
                elif p:
                    self.log("deferred: index line %r unreadable: its recording is dropped" % ln[:40])
        except (OSError, ValueError, IndexError) as e:
            if _exists(self.path + "/idx"):
                self.log("deferred: index unreadable (%s): starting an empty store" % e)
            r = self.rng(4)
            self.tag = "".join("%02x" % b for b in r)
        self.boot += 1                    # this boot: recordings of an earlier one carry another clock
        changed = True
        for rec in self.recs:
            if not rec.done:
                rec.done = 1              # recording when the board reset: keep what was committed
                changed = True
                self.log("deferred: recording %s closed after a reset at %d chunks" % (self.ref(rec), rec.count))
        keep = ["%d.rec" % r.n for r in self.recs]
        for name in os.listdir(self.path):
            if name.endswith(".rec") and name not in keep or name == "idx.tmp":
                os.remove(self.path + "/" + name)
        if changed:
            self.write_index()
        return self

    def write_index(self):
        t = self.path + "/idx.tmp"
        with open(t, "w") as f:
            f.write("v1 %s %d %d %d\n" % (self.tag, self.next, self.dropped, self.boot))
            for r in self.recs:
                f.write("%d %d %d %d %d %d %d %s%s\n" % (r.n, r.count, r.nframes, r.rate, r.done, r.fails, r.boot,
                                                       "-" if r.anchor is None else r.anchor,
                                                       "" if r.shift is None else " %d" % r.shift))
        os.rename(t, self.path + "/idx")

    def used(self):
        n = 0
        for r in self.recs:
            n += r.count * r.record_bytes()
        return n

    def queued(self):
        """Finished recordings, oldest first."""
        return [r for r in self.recs if r.done]

    def begin(self, nframes, rate, anchor=None):
        if len(self.recs) >= MAX_RECORDINGS:
            self._drop_oldest("%d recordings stored" % MAX_RECORDINGS)
        rec = Recording(self.next, 0, nframes, rate, 0, 0, self.boot, anchor)
        self.next += 1
        self.recs.append(rec)
        with open(self._file(rec.n), "wb"):
            pass
        self.write_index()
        return rec

    def _drop_oldest(self, why, keep=None):
        for r in self.recs:
            if r is not keep:
                self.remove(r, write=False)
                self.dropped += 1
                self.log("deferred: ring full (%s): oldest recording %s dropped, %d chunks (%d dropped so far)"
                         % (why, self.ref(r), r.count, self.dropped))
                return True
        return False

    def append(self, rec, buf, nrec):
        """Append nrec whole records from buf, dropping the oldest recordings first while the ring would
        overflow; False (nothing written) when this recording alone fills the ring."""
        size = nrec * rec.record_bytes()
        while self.used() + size > self.capacity:
            if not self._drop_oldest("%d of %d bytes" % (self.used(), self.capacity), keep=rec):
                return False
        with open(self._file(rec.n), "ab") as f:
            f.write(memoryview(buf)[:size])
        rec.count += nrec
        self.write_index()
        return True

    def finish(self, rec):
        rec.done = 1
        if not rec.count:
            self.remove(rec)
            return
        self.write_index()

    def remove(self, rec, write=True):
        if rec in self.recs:
            self.recs.remove(rec)
        try:
            os.remove(self._file(rec.n))
        except OSError:
            pass
        if write:
            self.write_index()

    def read_all(self, rec):
        """Every committed record of rec as bytes (tests and tools: allocates)."""
        with open(self._file(rec.n), "rb") as f:
            return f.read(rec.count * rec.record_bytes())


# -------------------------------------------------------------------------------------- recorder + uploader

class Deferred:
    """Owned by the Runtime for its whole life. `take_gesture` (the runtime hands it the button) records while
    no session is up and lets an offline recording end on a release that arrives after the link came back;
    `upload(sat)` runs once per accepted session (spawned by the runtime)."""

    def __init__(self, rt, store):
        self.rt = rt
        self.hal = rt.hal
        self.log = rt.log
        self.store = store
        self.nframes = rt.mic_rate * _FRAME_MS // 1000
        self.rbytes = TS_BYTES + 2 * self.nframes
        self.batch = bytearray(BATCH * self.rbytes)      # recording: BATCH records, then one flash append
        self.rec_buf = bytearray(self.rbytes)            # upload: one record read back from flash
        self.recording = None
        self.upload_id = 0                               # the DEFERRED CaptureOpen in flight (0: none)
        self.acked = -1                                  # its CaptureAck high-water mark (-1: none yet)
        self.done = None                                 # its terminal: None, True (Response), False (Error)
        self.sent_chunks = 0                             # chunks on the wire this boot (tests, logs)
        self.uploaded = 0                                # recordings the core answered with a Response
        self.ack_wait_ms = ACK_WAIT_MS
        self.offset_us = None                            # this boot's clock offset (core - device), our Ping
        self._dhi = 0                                    # rebase of the upload in flight: capture_ts + dhi *
        self._dlo = 0                                    # 2**28 + dlo (an earlier boot's recording)

    # -- LED ------------------------------------------------------------------------------------------
    def show_queue(self):
        sat = self.rt.sat
        if sat is not None and sat.phase:
            return                        # the core's PipelineState has the LED now
        self.hal.led(LED_QUEUED if self.store.queued() else 0, self.rt.settings["led_brightness"])

    # -- recording --------------------------------------------------------------------------------------
    async def press(self):
        """An offline press: record until the release (satellite.app.IdleDeferred calls it for the press that
        made it import this module)."""
        try:
            await self.record()
        except Exception as e:   # a flash or mic failure must not end offline recording for good
            self.log("deferred: recording failed (%s: %s)" % (type(e).__name__, e))

    def take_gesture(self, g):
        """A gesture the runtime read (the one reader of the button): offline, a press starts a recording (its
        task runs before the runtime reads the button again); ours (True) while that recording is still going,
        which a release or a long press ends, also after the link came back."""
        if self.recording is None:
            if g == PRESS and self.rt.offline() and self.rt.has_mic:
                asyncio.create_task(self.press())
            return False
        if g == RELEASE or g == LONG:
            self._stop = True
        return True

    async def record(self):
        hal = self.hal
        n = self.nframes
        rb = self.rbytes
        try:
            rec = self.store.begin(n, self.rt.mic_rate, self.offset_us)
        except OSError as e:
            self.log("deferred: cannot record (flash: %s)" % e)
            return
        self.recording = rec
        self._stop = False
        hal.mic_open(self.rt.mic_rate, n)
        t0 = self.rt.now_us()             # the first frame's samples start now (monotonic, as Ping's t1)
        hi = t0 // _LIMB
        lo = t0 % _LIMB
        step = n * 1000000 // self.rt.mic_rate
        self.log("deferred: recording %s (core out of reach): first chunk at %d us on the device clock, "
                 "local RTC %s us" % (self.store.ref(rec), t0, _wall_us()))
        hal.led(LED_RECORDING, self.rt.settings["led_brightness"])
        k = 0
        total = 0
        full = False
        t_start = ticks_ms()
        try:
            while not self._stop and not self.rt.stopped:
                d = hal.mic_wait_ms()
                if d > 0:
                    await asyncio.sleep_ms(d)
                    continue
                p = k * rb
                put_ts(self.batch, p, hi, lo)
                hal.mic_take(self.batch, p + TS_BYTES, n)
                lo += step
                if lo >= _LIMB:
                    lo -= _LIMB
                    hi += 1
                k += 1
                total += 1
                if k == BATCH:
                    if not self._append(rec, k):
                        full = True
                        break
                    k = 0
                if ticks_diff(ticks_ms(), t_start) > MAX_RECORD_MS:
                    self.log("deferred: recording %s reached %d ms: ended" % (self.store.ref(rec), MAX_RECORD_MS))
                    break
                await asyncio.sleep_ms(0)
            if k and not full:
                self._append(rec, k)
        finally:
            hal.mic_close()
            self.recording = None
            try:
                self.store.finish(rec)
            except OSError as e:
                self.log("deferred: index write failed: %s" % e)
        self.log("deferred: recording %s queued: %d chunks (%d stored, %d recordings, %d bytes, %d dropped)"
                 % (self.store.ref(rec), total, rec.count, len(self.store.queued()), self.store.used(),
                    self.store.dropped))
        self.show_queue()

    def _append(self, rec, k):
        try:
            if self.store.append(rec, self.batch, k):
                return True
            self.log("deferred: recording %s alone fills the %d-byte ring: ended" % (self.store.ref(rec),
                                                                                   self.store.capacity))
        except OSError as e:
            self.log("deferred: flash write failed (%s): recording ended" % e)
        return False

    # -- upload -----------------------------------------------------------------------------------------
    def on_ack(self, ev):
        if ev.id == self.upload_id and ev.stored > self.acked:
            self.acked = ev.stored                  # cumulative: never backwards

    def on_done(self, ev):
        """CaptureDone for our upload id: True when it was ours (the Satellite then ignores it)."""
        if not self.upload_id or ev.id != self.upload_id:
            return False
        self.done = bool(ev.ok)
        if not ev.ok:
            self.log("deferred: upload %d answered with Error %d %s" % (ev.id, ev.code, ev.message))
        return True

    async def _learn_offset(self, sat, wait_ms=3000):
        """This boot's clock offset from the device's own four-timestamp rounds (Satellite.clock_round: the
        round with the lowest round trip, off by at most half of it)."""
        if self.offset_us is None:
            off = await sat.clock_round(wait_ms, self)     # sets self.offset_us round by round
            if off:
                self.log("deferred: clock anchor %d us (best round: rtt %d us, +/- %d us)" % (
                    off, sat.rtt_us, sat.rtt_us // 2))
        if self.offset_us is not None:
            w = False
            for r in self.store.recs:
                if r.boot == self.store.boot and r.anchor is None:
                    r.anchor = self.offset_us      # recorded offline earlier in this boot
                    w = True
            if w:
                self.store.write_index()

    def _rebase(self, rec):
        """The us to add to rec's stored capture_ts so it reads on this boot's clock, or None."""
        if rec.boot == self.store.boot:
            return 0
        if rec.anchor is None or self.offset_us is None:
            return None
        return rec.anchor - self.offset_us        # old boot's (core - device) minus this boot's

    def _clock(self, rec):
        """Choose the clock this upload sends rec on (sets _dhi/_dlo). One recording keeps one clock: the core
        checks duplicates and gaps by capture_ts and maps it to wall clock once. So the clock is chosen anew
        only when the core holds none of it (CaptureAck 0: this boot's, rebased); once chunks may be there
        the choice made when they were sent (rec.shift, on flash with the index) goes on, on any later
        connection and after any reset."""
        d = rec.shift
        if self.acked == 0 or d is None and self.acked < 0:
            d = self._rebase(rec)
            if d is None:
                d = 0
                self.log("deferred: %s was recorded in an earlier boot with no Ping round: its capture_ts is "
                         "that boot's clock, the core cannot map it to wall clock" % self.store.ref(rec))
            if d != rec.shift:
                rec.shift = d
                self.store.write_index()          # before its first chunk: a reset cannot split the clock
        elif d is None:
            d = 0                                 # the core holds chunks an older firmware sent as recorded
        self._dhi, self._dlo = d // _LIMB, d % _LIMB

    async def upload(self, sat):
        """Upload every finished recording, oldest first, on this session. Ends with the session."""
        self.show_queue()
        await self._learn_offset(sat)
        while not sat.closed:
            q = self.store.queued()
            if not q:
                return
            rec = q[0]
            ok = await self._upload_one(sat, rec)
            if sat.closed or ok is None:
                return
            if ok:
                self.uploaded += 1
                self.store.remove(rec)
                self.log("deferred: %s delivered (%d chunks)" % (self.store.ref(rec), rec.count))
            else:
                rec.fails += 1
                if rec.fails >= MAX_FAILS:
                    self.store.remove(rec, write=False)
                    self.store.dropped += 1
                    self.log("deferred: %s refused %d times by the core: dropped" % (self.store.ref(rec), rec.fails))
                self.store.write_index()
                return                       # the next connection tries again
            self.show_queue()

    async def _upload_one(self, sat, rec):
        """One recording: DEFERRED CaptureOpen (stable correlation_ref), wait for the core's CaptureAck,
        send from its high-water mark, StreamEnd{COMPLETE}, wait for the Response. True / False (Error) /
        None (the session ended or the frame cannot fit the core's limit)."""
        s = sat.s
        link = sat.link
        fmt = pb.AudioFormat(encoding=pb.Encoding.PCM_S16LE, sample_rate=rec.rate, channels=1, sample_bits=16)
        while True:
            try:
                env = s.open_capture(pb.Trigger.BUTTON, pb.CaptureMode.DEFERRED, fmt, self.store.ref(rec))
                break
            except Exception as e:              # TOO_MANY_STREAMS / not active: wait for room
                if sat.closed:
                    return None
                if getattr(e, "code", "") != "TOO_MANY_STREAMS":
                    raise
                await asyncio.sleep_ms(100)
        cid = env.id
        self.upload_id = cid
        self.acked = -1
        self.done = None
        sat.send(env)
        sat.send(s.ping(self.rt.now_us()))      # the device's four-timestamp round (ClockSync)
        self.log("deferred: upload %s on id %d (%d chunks)" % (self.store.ref(rec), cid, rec.count))
        f = None
        try:
            t0 = ticks_ms()
            while self.acked < 0 and self.done is None and not sat.closed:
                if ticks_diff(ticks_ms(), t0) > self.ack_wait_ms:
                    self.log("deferred: no CaptureAck on id %d: sending from chunk 0" % cid)
                    break
                await asyncio.sleep_ms(5)
            if sat.closed:
                return None
            self._clock(rec)
            start = self.acked if self.acked > 0 else 0
            if start > rec.count:
                start = rec.count
            rb = rec.record_bytes()
            if link.header_room(env) < rb:
                self.log("deferred: a %d-byte chunk does not fit the core's max_frame_bytes: not uploaded" % rb)
                s.cancel_capture(cid, pb.StreamReason.FAILED)
                return None
            f = open(self.store._file(rec.n), "rb")
            f.seek(start * rb)
            i = start
            buf = self.rec_buf if rb == len(self.rec_buf) else bytearray(rb)
            while i < rec.count:
                if sat.closed or self.done is not None:
                    return None if sat.closed else self.done
                if link.pending_bytes():
                    await asyncio.sleep_ms(5)   # RELIABLE: wait for the socket, never skip
                    continue
                if f.readinto(buf) != rb:
                    self.log("deferred: %s ends early at chunk %d" % (self.store.ref(rec), i))
                    break
                if not self.send_record(sat, cid, buf, rb):
                    return None if sat.closed else self.done
                i += 1
                await asyncio.sleep_ms(0)       # R10.1-a: one frame, then the session loop's turn
            f.close()
            f = None
            sat.send(s.end_capture(cid, pb.StreamReason.COMPLETE))
            self.log("deferred: %s sent from chunk %d, StreamEnd" % (self.store.ref(rec), start))
            while self.done is None and not sat.closed:
                await asyncio.sleep_ms(10)
            return None if sat.closed else self.done
        finally:
            if f is not None:
                f.close()
            self.upload_id = 0

    def send_record(self, sat, cid, rec, rb):
        """One stored record as one StreamChunk frame (allocation-free): header by hand, PCM copied into the
        frame buffer's tail, encrypted in place, one write."""
        env = sat.s.chunk(cid)
        if env is None:
            return False
        seq = env.stream_chunk.seq
        hi = ts_hi(rec, 0)
        lo = ts_lo(rec, 0) + self._dlo
        if lo >= _LIMB:
            lo -= _LIMB
            hi += 1
        hi += self._dhi
        if hi < 0:
            hi = 0                                 # before the clock epoch: not representable (never here)
            lo = 1
        link = sat.link
        n = rb - TS_BYTES
        pos = link.begin_raw(chunk_header_size(cid, seq, hi, lo), n)
        tx = link.tx
        pos = write_chunk_header(tx, pos, cid, seq, hi, lo)
        copy(tx, pos, rec, TS_BYTES, n)
        link.seal(pos + n)
        self.sent_chunks += 1
        return True
