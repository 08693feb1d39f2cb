# dual: cpython micropython
# DEFERRED store-and-forward (satellite.deferred): the flash ring (bounded, oldest dropped and counted,
# crash-safe index, survives a reboot), the hand-written StreamChunk header (byte-identical to the codec's),
# capture_ts carried as two small ints, and the upload path: resume from the core's CaptureAck (R10.4-d),
# one frame per scheduler turn (R10.1-a), and 0 bytes allocated per steady-state deferred chunk.
import os

from mpsupport import IS_MICROPYTHON, mem_alloc_delta, scratch

import rt_harness as H
from satellite import deferred as D
from satellite.wire import alabama_v1 as pb
from satellite.wire import pb as codec

_n = [0]


def _rmtree(p):
    try:
        names = os.listdir(p)
    except OSError:
        return
    for f in names:
        try:
            os.remove(p + "/" + f)
        except OSError:
            _rmtree(p + "/" + f)
    os.rmdir(p)


def fresh_dir():
    _n[0] += 1
    root = scratch("deferred")
    _rmtree(root)
    return root + "/data/deferred"


def store(path, capacity=1 << 20, lines=None):
    log = lines.append if lines is not None else (lambda s: None)
    return D.Store(path, capacity, log, rng=lambda n: b"\xab" * n).load()


def records(n, nframes=320, t0=5000000, base=0):
    rb = D.TS_BYTES + 2 * nframes
    b = bytearray(n * rb)
    i = 0
    while i < n:
        t = t0 + 20000 * i
        D.put_ts(b, i * rb, t // (1 << 28), t % (1 << 28))
        j = 0
        while j < 2 * nframes:
            b[i * rb + D.TS_BYTES + j] = (base + i + j) & 0xFF
            j += 1
        i += 1
    return b


def test_ts_limbs_round_trip_and_header_matches_the_codec():
    buf = bytearray(8)
    for t in (0, 1, 127, 128, (1 << 28) - 1, 1 << 28, (1 << 30) + 5, 3600 * 1000000 * 24 * 40, (1 << 57) + 3):
        hi, lo = t // (1 << 28), t % (1 << 28)
        D.put_ts(buf, 0, hi, lo)
        assert D.ts_hi(buf, 0) == hi and D.ts_lo(buf, 0) == lo and D.ts_value(buf, 0) == t
        for id_, seq in ((1, 0), (3, 1), (301, 129), (70001, 40000)):
            env = pb.Envelope(id=id_, stream_chunk=pb.StreamChunk(seq=seq, capture_ts=t))
            want = codec.encode(env)
            assert D.chunk_header_size(id_, seq, hi, lo) == len(want), (t, id_, seq)
            out = bytearray(40)
            end = D.write_chunk_header(out, 0, id_, seq, hi, lo)
            assert bytes(out[:end]) == bytes(want), (t, id_, seq)


def test_store_survives_a_reboot_with_a_stable_correlation_ref():
    p = fresh_dir()
    st = store(p)
    rec = st.begin(320, 16000)
    assert st.append(rec, records(8), 8)
    ref = st.ref(rec)
    assert ref == "abababab-1"
    # reset mid-recording: the next boot closes it at its committed batch and keeps ref and bytes
    lines = []
    st2 = store(p, lines=lines)
    (r2,) = st2.queued()
    assert st2.ref(r2) == ref and r2.count == 8 and r2.done == 1
    assert st2.read_all(r2) == bytes(records(8))
    assert any("closed after a reset" in ln for ln in lines)
    assert st2.begin(320, 16000).n == 2          # numbering goes on: never a ref reused


def test_index_from_a_newer_firmware_keeps_its_recordings():
    # an OTA rollback (docs/ota.md) boots this firmware over an index a newer one wrote, with fields this one
    # does not know: the recordings stay (nothing in /data is lost), only the unknown fields go
    p = fresh_dir()
    st = store(p)
    rec = st.begin(320, 16000)
    st.append(rec, records(8), 8)
    st.finish(rec)
    with open(p + "/idx") as f:
        text = f.read().split("\n")
    text[1] = text[1] + " 7 future"
    with open(p + "/idx", "w") as f:
        f.write("\n".join(text))
    lines = []
    st2 = store(p, lines=lines)
    (r2,) = st2.queued()
    assert st2.ref(r2) == st.ref(rec) and r2.count == 8 and st2.read_all(r2) == bytes(records(8))
    assert str(r2.n) + ".rec" in os.listdir(p)
    # a line too short to be a recording is reported, not dropped silently
    with open(p + "/idx", "a") as f:
        f.write("3 1 320\n")
    st3 = store(p, lines=lines)
    assert len(st3.recs) == 1 and any("unreadable" in ln for ln in lines)


def test_crash_between_append_and_index_keeps_only_committed_records():
    p = fresh_dir()
    st = store(p)
    rec = st.begin(320, 16000)
    st.append(rec, records(8), 8)
    # an append whose index rename never happened (power cut): extra bytes on the file, old index
    with open(p + "/%d.rec" % rec.n, "ab") as f:
        f.write(records(3, base=9))
    with open(p + "/idx.tmp", "w") as f:
        f.write("half-written")
    st2 = store(p)
    (r2,) = st2.recs
    assert r2.count == 8 and st2.read_all(r2) == bytes(records(8))
    assert "idx.tmp" not in os.listdir(p)
    # an orphan recording file no index names is removed
    with open(p + "/99.rec", "wb") as f:
        f.write(b"x")
    store(p)
    assert "99.rec" not in os.listdir(p)


def test_ring_full_drops_the_oldest_recording_logs_and_counts():
    p = fresh_dir()
    lines = []
    rb = D.TS_BYTES + 640
    st = store(p, capacity=20 * rb, lines=lines)
    a = st.begin(320, 16000)
    st.append(a, records(8), 8)
    st.finish(a)
    b = st.begin(320, 16000)
    st.append(b, records(8), 8)
    st.finish(b)
    c = st.begin(320, 16000)
    assert st.append(c, records(8), 8)           # 24 > 20 records: the oldest (a) goes
    assert [r.n for r in st.recs] == [b.n, c.n] and st.dropped == 1
    assert any("ring full" in ln and st.ref(a) in ln for ln in lines)
    assert st.used() <= st.capacity
    assert store(p).dropped == 1                 # the counter is on flash
    # a recording that alone fills the ring is refused, not allowed to evict itself
    st.finish(c)
    d = st.begin(320, 16000)
    st.append(d, records(8), 8)
    assert not st.append(d, records(8), 8) or st.used() <= st.capacity
    assert st.used() <= st.capacity


# ---------------------------------------------------------------------------------------------- upload

def _uploader(n_chunks, ack=None, t0=5000000):
    """A runtime + session on an in-memory Noise pair, a store with one recording of n_chunks, and a
    Deferred whose upload coroutine is stepped by hand (one .send(None) = one scheduler turn)."""
    rt, sat, core, sink, hal = H.make(record_output=True)
    p = fresh_dir()
    st = store(p)
    rec = st.begin(320, 16000)
    i = 0
    while i < n_chunks:
        k = 8 if n_chunks - i >= 8 else n_chunks - i
        st.append(rec, records(k, t0=t0 + 20000 * i, base=i), k)
        i += k
    st.finish(rec)
    d = D.Deferred(rt, st)
    rt.deferred = d
    H.sent(core)                                  # drop hello etc.
    return rt, sat, core, d, rec, st


import asyncio
_sleep0 = asyncio.sleep_ms


def _ack(sat, core, cid, stored):
    H.feed(sat.link, core, pb.Envelope(id=cid, capture_ack=pb.CaptureAck(stored=stored)))


CORE_AHEAD_US = 3_000_000


def _drive(sat, core, d, ack=None, answer="response", limit_ms=9000):
    """Run d.upload(sat) under asyncio beside a core that answers: CaptureAck{ack} on the open (None: no
    ack), then `answer` once StreamEnd arrives. Returns (frames in order, the most frames seen in one turn)."""
    got = []
    most = [0]

    async def core_side():
        t = asyncio.create_task(d.upload(sat))
        t0 = D.ticks_ms()
        ended = False
        while not t.done() and D.ticks_diff(D.ticks_ms(), t0) < limit_ms:
            await _sleep0(0)
            frames = H.sent(core)
            if len(frames) > most[0] and not (frames and frames[0][0].op == "capture_open"):
                most[0] = len(frames)
            got.extend(frames)
            for e, _ in frames:
                if e.op == "ping":                 # the core's wall clock is the device's + CORE_AHEAD_US
                    tc = e.ping.t1 + CORE_AHEAD_US
                    H.feed(sat.link, core, pb.Envelope(id=e.id, ping_response=pb.PingResponse(t1=e.ping.t1, t2=tc,
                                                                                              t3=tc)))
                if e.op == "capture_open" and ack is not None:
                    _ack(sat, core, e.id, ack)
                if e.op == "stream_end" and not ended:
                    ended = True
                    if answer == "response":
                        H.feed(sat.link, core, pb.Envelope(id=e.id, response=pb.Response()))
                    else:
                        H.feed(sat.link, core, pb.Envelope(id=e.id, error=pb.Error(code=pb.ErrorCode.INTERNAL_ERROR)))
        assert t.done()

    asyncio.run(core_side())
    return got, most[0]


def test_r10_4_d_upload_resumes_from_the_core_high_water_mark_and_r10_1_a_one_frame_per_turn():
    rt, sat, core, d, rec, st = _uploader(20)
    whole = st.read_all(rec)
    ref = st.ref(rec)
    got, most = _drive(sat, core, d, ack=12)          # the core already holds chunks 0..11
    # the device's own Ping rounds first (this boot's clock offset), then the DEFERRED open and another round
    assert [e.op for e, _ in got[:6]] == ["ping", "ping", "ping", "ping", "capture_open", "ping"]
    assert d.offset_us                    # learnt from the best of those rounds
    co = got[4][0].capture_open
    assert co.mode == pb.CaptureMode.DEFERRED and co.correlation_ref == ref
    # R10.1-a: never more than one frame of the transfer between two scheduler turns
    assert most <= 1, most
    chunks = [(e, t) for e, t in got if e.op == "stream_chunk"]
    assert [e.stream_chunk.seq for e, _ in chunks] == list(range(8))        # seq restarts at 0 on the new id
    rb = rec.record_bytes()
    for k, (e, t) in enumerate(chunks):
        i = 12 + k
        assert t == whole[i * rb + 8:(i + 1) * rb]                           # the stored audio, byte-identical
        assert e.stream_chunk.capture_ts == 5000000 + 20000 * i              # its capture_ts from flash
    assert got[-1][0].op == "stream_end" and got[-1][0].stream_end.reason == pb.StreamReason.COMPLETE
    # the Response ends the upload: the recording leaves the flash ring
    assert st.recs == [] and d.uploaded == 1 and store(st.path).recs == []


def test_upload_without_any_capture_ack_starts_from_zero_and_error_keeps_the_recording():
    rt, sat, core, d, rec, st = _uploader(3)
    d.ack_wait_ms = 300
    got, _ = _drive(sat, core, d, ack=None, answer="error")
    assert [e.stream_chunk.seq for e, _ in got if e.op == "stream_chunk"] == [0, 1, 2]
    assert any("no CaptureAck" in ln for ln in rt.hal.lines)
    assert [r.n for r in st.recs] == [rec.n] and rec.fails == 1       # kept for the next connection
    assert store(st.path).recs[0].fails == 1


def _send_many(d, sat, cid, buf, rb, n):
    i = 0
    while i < n:
        d.send_record(sat, cid, buf, rb)
        i += 1


def test_a_steady_state_deferred_chunk_allocates_nothing():
    rt, sat, core, sink, hal = H.make()            # the sink only counts bytes (no decryption in the count)
    d = D.Deferred(rt, store(fresh_dir()))
    env = sat.s.open_capture(pb.Trigger.BUTTON, pb.CaptureMode.DEFERRED, rt.mic_format(), "r-1")
    cid = env.id
    buf = d.rec_buf
    rb = len(buf)
    # a capture_ts past 2**30 us (18 minutes of uptime: a heap int on the 32-bit board) and past 2**32
    t = (1 << 33) + 12345
    D.put_ts(buf, 0, t // (1 << 28), t % (1 << 28))
    _send_many(d, sat, cid, buf, rb, 5)
    w0 = sink.frames
    if IS_MICROPYTHON:
        delta = mem_alloc_delta(_send_many, d, sat, cid, buf, rb, 50)
        assert delta == 0, delta
    else:
        _send_many(d, sat, cid, buf, rb, 50)
    assert sink.frames - w0 == 50                  # one write (one Noise message) per chunk
    # and what that path wrote decodes to the stored capture_ts and audio
    rt, sat, core, sink, hal = H.make(record_output=True)
    env = sat.s.open_capture(pb.Trigger.BUTTON, pb.CaptureMode.DEFERRED, rt.mic_format(), "r-1")
    H.sent(core)
    _send_many(d, sat, env.id, buf, rb, 2)
    got = H.sent(core)
    assert [e.stream_chunk.capture_ts for e, _ in got] == [t, t] and all(x == buf[8:] for _, x in got)


def test_a_recording_of_an_earlier_boot_is_rebased_onto_this_boots_clock():
    """capture_ts is the device's monotonic clock, which restarts with each boot: a recording an earlier boot
    made is sent on this boot's clock, shifted by the two boots' Ping-round offsets (core - device), so the
    core's one mapping fits it; with no offset for that boot it goes as it is, and the log says so."""
    rt, sat, core, d, rec, st = _uploader(4, t0=1 << 34)
    rec.boot = st.boot - 1
    rec.anchor = 7_000_000_000          # that boot: core wall clock = device clock + 7000 s
    d.offset_us = 7_250_000_000         # this one: + 7250 s (the device clock restarted 250 s "later")
    got, _ = _drive(sat, core, d, ack=0)
    ts = [e.stream_chunk.capture_ts for e, _ in got if e.op == "stream_chunk"]
    assert ts == [(1 << 34) + 20000 * i - 250_000_000 for i in range(4)], ts
    rt, sat, core, d, rec, st = _uploader(2)
    rec.boot = st.boot - 1                # no anchor: sent as recorded, said in the log
    d.offset_us = 1
    got, _ = _drive(sat, core, d, ack=0)
    assert [e.stream_chunk.capture_ts for e, _ in got if e.op == "stream_chunk"] == [5000000, 5020000]
    assert any("cannot map it to wall clock" in ln for ln in rt.hal.lines)


# ------------------------------------------------------------------ one recording, one clock (issue 32)

class _Core:
    """The core's side of DEFERRED over many connections (as host/alabama/core/pipeline.py keeps it): per
    correlation_ref the stored (capture_ts, audio) in order, the gaps (R10.10-c: more than 1.5 chunk durations
    after the previous one) and duplicates it would flag, chunk 0's wall clock through the Ping round of the
    connection its first chunk came on, and the Responses it gave."""

    def __init__(self):
        self.held = {}
        self.gaps = []
        self.dups = []
        self.first_wall = {}
        self.answered = []


def _clock(base):
    """A device clock for one boot (Runtime.now_us): starts at base, 100 us a reading."""
    t = [base]

    def now():
        t[0] += 100
        return t[0]
    return now


def _session(st, d, now, ahead, core, cut_after=None, limit_ms=9000):
    """One connection of the board whose store is st (d: its Deferred, None on the first connection of a
    boot; device clock now(); the core's wall clock = device clock + ahead): the upload runs until the core
    answered everything or, with cut_after, until that many chunks arrived on this connection, where the link
    is cut. Returns d."""
    rt, sat, conn, sink, hal = H.make(record_output=True)
    rt.now_us = sat.now_us = now
    if d is None:
        d = D.Deferred(rt, st)
    d.rt, d.hal, d.log = rt, rt.hal, rt.log
    rt.deferred = d
    H.sent(conn)
    refs = {}
    n = [0]

    async def core_side():
        t = asyncio.create_task(d.upload(sat))
        t0 = D.ticks_ms()
        while not t.done() and D.ticks_diff(D.ticks_ms(), t0) < limit_ms:
            await _sleep0(0)
            for e, tail in H.sent(conn):
                if e.op == "ping":
                    tc = e.ping.t1 + ahead
                    H.feed(sat.link, conn, pb.Envelope(id=e.id, ping_response=pb.PingResponse(t1=e.ping.t1, t2=tc,
                                                                                               t3=tc)))
                elif e.op == "capture_open":
                    ref = e.capture_open.correlation_ref
                    refs[e.id] = ref
                    _ack(sat, conn, e.id, len(core.held.setdefault(ref, [])))
                elif e.op == "stream_chunk":
                    ref = refs[e.id]
                    held = core.held[ref]
                    ts = e.stream_chunk.capture_ts
                    if held and ts <= held[-1][0]:
                        core.dups.append((ref, ts))
                        continue
                    if held and ts - held[-1][0] > 30000:
                        core.gaps.append((ref, ts - held[-1][0]))
                    if ref not in core.first_wall:
                        core.first_wall[ref] = ts + ahead - 20000 * len(held)
                    held.append((ts, tail))
                    n[0] += 1
                    if cut_after is not None and n[0] >= cut_after:
                        sat.closed = True          # the link is cut: the rest of this connection is lost
                        break
                elif e.op == "stream_end":
                    core.answered.append(refs[e.id])
                    H.feed(sat.link, conn, pb.Envelope(id=e.id, response=pb.Response()))
        assert t.done()

    asyncio.run(core_side())
    return d


A1 = 7_000_000_000        # boot 1: core wall clock = device clock + 7000 s
A2 = 7_029_000_000        # boot 2: the device clock restarted 29 s of wall clock later
A3 = 7_100_000_000        # boot 3


def _recorded_offline(p, chunks):
    """Boot 1: a recording made while the core was away (this boot's anchor from an earlier round); the bytes
    the board holds, to compare with what the core stores."""
    st = store(p)
    rec = st.begin(320, 16000, A1)
    i = 0
    while i < chunks:
        k = 8 if chunks - i >= 8 else chunks - i
        st.append(rec, records(k, t0=(1 << 34) + 20000 * i, base=i), k)
        i += k
    st.finish(rec)
    return st.ref(rec), st.read_all(rec)


def _one_clock(core, ref, whole, chunks):
    held = core.held[ref]
    rb = 8 + 640
    assert len(held) == chunks and core.answered == [ref], (len(held), core.answered)
    assert [a for _, a in held] == [whole[i * rb + 8:(i + 1) * rb] for i in range(chunks)]     # samples identical
    assert not core.gaps and not core.dups, (core.gaps, core.dups)                                # no deferred_gap
    assert held[-1][0] - held[0][0] == (chunks - 1) * 20000                                       # one clock
    spoken = (1 << 34) + A1                 # the device clock read (1<<34) when the mic opened in boot 1
    assert abs(core.first_wall[ref] - spoken) <= 20000, core.first_wall[ref] - spoken


def test_issue_32_a_recording_cut_after_a_reset_keeps_one_clock_on_the_next_connection():
    """Recorded while the core was away, reset, connect: the upload rebases it onto the new boot's clock and
    is cut after k chunks (the core holds them, on that clock); the next connection in the same boot sends
    the rest on the SAME clock (not the recording boot's): capture_ts contiguous, no deferred_gap, chunk 0
    maps to the wall clock it was spoken at."""
    for k in (1, 7, 19):
        p = fresh_dir()
        ref, whole = _recorded_offline(p, 20)
        core = _Core()
        st = store(p)                                                   # reset: boot 2
        now = _clock(1 << 40)
        d = _session(st, None, now, A2, core, cut_after=k)
        assert len(core.held[ref]) == k and not core.answered
        _session(st, d, now, A2, core)                                  # reconnect, same boot
        _one_clock(core, ref, whole, 20)
        assert store(p).recs == []


def test_issue_32_the_clock_a_cut_upload_chose_survives_a_further_reset():
    """The same, with another reset between the cut and the next connection: the shift the cut upload used
    is on flash with the recording, so boot 3 sends the rest on boot 2's clock (the one the core holds)."""
    p = fresh_dir()
    ref, whole = _recorded_offline(p, 20)
    core = _Core()
    _session(store(p), None, _clock(1 << 40), A2, core, cut_after=5)    # boot 2: cut after 5 chunks
    st = store(p)                                                       # reset: boot 3, another clock
    assert st.recs[0].shift is not None
    _session(st, None, _clock((1 << 40) + 3_000_000), A3, core)
    _one_clock(core, ref, whole, 20)
    # and a recording the core holds none of is rebased anew on each connection (CaptureAck 0)
    p = fresh_dir()
    ref, whole = _recorded_offline(p, 6)
    core = _Core()
    st = store(p)
    st.recs[0].shift = 123456                                           # a choice from a connection that sent nothing
    _session(st, None, _clock(1 << 40), A2, core)
    _one_clock(core, ref, whole, 6)


def test_issue_32_the_clock_anchor_is_the_round_with_the_lowest_round_trip():
    """NTP-style: the first round of a connection went 40 ms out and 6 ms back (rtt 46 ms, offset 17 ms
    off); the anchor is taken from the best of the connection's rounds, within half its rtt of the truth,
    and a recording made offline earlier in this boot carries it."""
    ahead = 3_000_000
    t = [1 << 40]

    def now():
        t[0] += 10
        return t[0]
    rt, sat, conn, sink, hal = H.make(record_output=True)
    rt.now_us = sat.now_us = now
    st = store(fresh_dir())
    rec = st.begin(320, 16000)                    # recorded before this boot had any round: no anchor yet
    st.append(rec, records(2), 2)
    st.finish(rec)
    d = D.Deferred(rt, st)
    rt.deferred = d
    H.sent(conn)
    rtts = []

    async def core_side():
        task = asyncio.create_task(d._learn_offset(sat))
        first = True
        while not task.done():
            await _sleep0(0)
            for e, _ in H.sent(conn):
                if e.op == "ping":
                    t1 = e.ping.t1
                    if first:                     # the slow, one-sided first round
                        first = False
                        tc = t1 + 40000 + ahead
                        t[0] = t1 + 46000
                    else:
                        tc = t1 + 50 + ahead
                        t[0] = t1 + 100
                    H.feed(sat.link, conn, pb.Envelope(id=e.id, ping_response=pb.PingResponse(t1=t1, t2=tc, t3=tc)))
                    rtts.append(sat.rtt_us)
    asyncio.run(core_side())
    assert len(rtts) == 4 and rtts[0] >= 46000 > max(rtts[1:]), rtts
    assert abs(d.offset_us - ahead) <= sat.rtt_us // 2 + 10, (d.offset_us, sat.rtt_us)
    assert sat.rtt_us == min(rtts)
    assert rec.anchor == d.offset_us and store(st.path).recs[0].anchor == d.offset_us
    assert any("clock anchor" in ln for ln in rt.hal.lines)
