"""DEFERRED store-and-forward on the bench (issue 13): record while the core is out of reach, deliver exactly once.

Responsible for the moves the DEFERRED scenarios and the cut campaign share: take the core out of the
board's reach (the relay refuses and cuts: the board sees a core that is down), make a recording with the
button (a distinct noise WAV per recording so nothing can match by accident), read back from the board's
flash what it recorded (the truth the core's copy is compared with, byte for byte), bring the core back,
cut the link at random points of the upload (relay ``Rule`` cuts on a random byte of the next message
either way, armed when the k-th DEFERRED chunk goes by), and judge the delivery from the core's report:
chunks lost, chunks stored twice, audio identical (sha256 of what the core stored against the board's
recording), and the clock mapping (the report's ``spoken_at_us`` against the wall clock the virtual board
read when it opened the mic). ``tools/deferred/run.py`` is the long campaign, ``tests/host/test_deferred_hil.py``
the short one, ``host/alabama/hil/scenarios/test_deferred.py`` the scenarios. See docs/deferred.md.
"""
import hashlib
import random
import re
import statistics
import time

import numpy as np

from alabama.board import logwords as lw
from alabama.core.pipeline import Reply

from . import steps
from .corehost import DOWN, UP, Rule
from .faults import CAMPAIGN_ENV

#: The board's log lines (firmware/satellite/deferred.py; worded in board/logwords.py).
RE_START = re.compile(lw.DEFERRED_START)
RE_QUEUED = re.compile(lw.DEFERRED_QUEUED)
RE_DROPPED = re.compile(lw.DEFERRED_DROPPED)
TS_BYTES = 8
#: The clock-mapping bound the issue sets (capture_ts mapped to wall clock, on the virtual board).
CLOCK_BOUND_US = 20_000


class KeepBrain:
    """Answers each turn with text only (no reply audio: a campaign of hundreds of uploads stays quick)."""

    name = "keep"

    def __init__(self):
        self.turns = []

    async def reply(self, turn):
        self.turns.append(turn)
        return Reply(text="kept %d bytes" % len(turn.audio))


class Recorded:
    """What the board recorded (read from its flash): ref, chunk count, PCM bytes, capture_ts per chunk,
    and the wall clock at the first chunk (the virtual board's RTC is the host's)."""

    def __init__(self, ref, pcm, ts, wall_t0_us):
        self.ref, self.pcm, self.ts, self.wall_t0_us = ref, pcm, ts, wall_t0_us
        self.chunks = len(ts)
        self.sha256 = hashlib.sha256(pcm).hexdigest()

    def __repr__(self):
        return "Recorded(%s, %d chunks)" % (self.ref, self.chunks)


def noise_wav(path, ms, seed):
    rng = np.random.default_rng(seed)
    x = 6000 * rng.standard_normal(int(steps.RATE * ms / 1000))
    return steps.write_wav(path, x)


class DeferredBench:
    """One board and one core for a run of DEFERRED recordings (``bench``: an ``alabama.hil.bench.Bench`` on
    a sim target)."""

    def __init__(self, bench, rng=None, ring_kb=None, env=None):
        self.hil = bench
        self.tl = bench.tl
        self.rng = rng or random.Random(0)
        self.env = dict(CAMPAIGN_ENV if env is None else env)
        if ring_kb:
            self.env["ALABAMA_SIM_DEFERRED_KB"] = str(ring_kb)
        self.brain = KeepBrain()
        self.did = None
        self._n = 0
        self.cuts_fired = 0

    # ------------------------------------------------------------------ setup and reach
    def up(self):
        hil = self.hil
        hil.target.env.update(self.env)
        hil.start_core(ping_interval=1.0, brain=self.brain)
        hil.provision("ik", preconfigure=True)
        self.did = hil.boot()
        # the board's own Ping rounds have run (the best of its 4 is this boot's clock anchor: what a reset's
        # rebase needs); cut earlier, the anchor is the best of the rounds done, the first one alone often
        # ~20 ms off (issue 32)
        rx = re.compile(lw.CLOCK_OFFSET)
        deadline = time.monotonic() + 15
        while len(rx.findall(self.hil.target.log_text())) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        self._wait_log(rx, 0, 1)
        return self.did

    def _flash(self):
        return self.hil.target.flash / "data" / "deferred"

    def offline(self, timeout=15.0):
        """The core goes out of reach: the relay refuses new connections and cuts the live one."""
        core = self.hil.core
        core.call_soon(setattr, core.relay, "refuse", True)
        core.cut()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.hil.target.state().get("state") != "connected":
                    return True
            except Exception:  # noqa: BLE001 — between connections the control channel still answers
                pass
            time.sleep(0.05)
        raise AssertionError("the board still says connected %.0f s after the core went away" % timeout)

    def online(self):
        core = self.hil.core
        core.call_soon(setattr, core.relay, "refuse", False)
        self.tl.note("bench: the core is reachable again")

    # ------------------------------------------------------------------ recordings
    def record(self, ms, timeout=20.0):
        """Press, hold ``ms``, release while offline; returns the board's Recorded (read from its flash)."""
        self._n += 1
        tgt = self.hil.target
        wav = noise_wav(self.hil.workdir / ("deferred-%d.wav" % self._n), ms + 400, seed=1000 + self._n)
        tgt.set_mic(wav)
        mark = len(tgt.log_text())
        tgt.press()
        m0 = self._wait_log(RE_START, mark, timeout)
        time.sleep(ms / 1000.0)
        tgt.release()
        m = self._wait_log(RE_QUEUED, mark, timeout)
        ref = m.group(1)
        assert ref == m0.group(1), (ref, m0.group(1))
        return self.read_recording(ref, int(m0.group(3)), int(m0.group(2)))

    def _wait_log(self, rx, mark, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = rx.search(self.hil.target.log_text(), mark)
            if m:
                return m
            time.sleep(0.02)
        raise AssertionError("no board log line /%s/ within %.0f s" % (rx.pattern, timeout))

    def read_recording(self, ref, wall_t0_us=-1, dev_t0_us=None):
        """The recording ``ref`` as the board stored it: its index line and record file."""
        d = self._flash()
        lines = (d / "idx").read_text().split("\n")
        tag = lines[0].split()[1]
        for ln in lines[1:]:
            p = ln.split()
            if len(p) >= 8 and "%s-%s" % (tag, p[0]) == ref:     # 9th field: the upload's clock shift
                n, count, nframes = int(p[0]), int(p[1]), int(p[2])
                rb = TS_BYTES + 2 * nframes
                raw = (d / ("%d.rec" % n)).read_bytes()[: count * rb]
                ts = [int.from_bytes(raw[i * rb:i * rb + 8], "little") for i in range(count)]
                pcm = b"".join(raw[i * rb + 8:(i + 1) * rb] for i in range(count))
                if dev_t0_us is not None and ts:
                    assert ts[0] == dev_t0_us, (ts[0], dev_t0_us)
                return Recorded(ref, pcm, ts, wall_t0_us)
        raise AssertionError("recording %s is not in the board's index: %r" % (ref, lines))

    def stored_refs(self):
        d = self._flash()
        lines = (d / "idx").read_text().split("\n")
        tag = lines[0].split()[1]
        return ["%s-%s" % (tag, ln.split()[0]) for ln in lines[1:] if len(ln.split()) >= 8]

    # ------------------------------------------------------------------ cuts during the upload
    def _remaining(self, recs):
        """Chunks of ``recs`` the core has not stored yet (read on the core's loop thread)."""
        srv = self.hil.core.server
        done = {d["correlation_ref"] for r in (srv.reports if srv else []) for d in r.deferred}
        left = 0
        for rec in recs:
            if rec.ref in done:
                continue
            st = srv.deferred.get((self.did, rec.ref)) if srv else None
            left += rec.chunks - (st["count"] if st else 0)
        return left

    def plan_cuts(self, recs, n_cuts):
        """Cut each of the next ``n_cuts`` connections once during the upload of ``recs``: a cut at a random
        byte of a random Noise message after the Hello -- board -> core (70 %: the CaptureOpen, the Ping, any
        chunk still to send) or core -> board (30 %: the CaptureAck, a PingResponse, a later ack). Each rule is
        armed for the next link when the previous one fires. Returns the list the fired rules go to."""
        fired = []
        left = [n_cuts]

        def arm_next():
            if left[0] <= 0:
                return
            left[0] -= 1
            rem = self._remaining(recs)
            if self.rng.random() < 0.7:
                rule = Rule("cut", UP, msg=self.rng.randint(3, 5 + max(0, rem)), frac=round(self.rng.random(), 3),
                            on_fire=on_fire)
            else:
                rule = Rule("cut", DOWN, msg=self.rng.randint(2, 4 + max(0, rem) // 25), frac=round(self.rng.random(), 3),
                            on_fire=on_fire)
            self.hil.core.relay.arm_next(rule)
            self.tl.note("bench: DEFERRED cut armed for the next link: %r (%d chunks to go)" % (rule, rem))

        def on_fire(link, rule):
            fired.append((rule, self._remaining(recs)))
            arm_next()

        self.hil.core.call_soon(arm_next)
        return fired

    def clear_cuts(self):
        self.hil.core.call_soon(self.hil.core.relay.pending.clear)

    # ------------------------------------------------------------------ judging
    def deferred_entries(self):
        """Every DEFERRED recording the core completed, over all sessions (the reports' "deferred" lists)."""
        out = []
        for r in self.hil.reports():
            for d in r.get("deferred", []):
                out.append(d)
        return out

    def wait_delivered(self, refs, timeout=60.0):
        """Until the core has completed every recording in ``refs`` and the board has emptied its ring of them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = {d["correlation_ref"] for d in self.deferred_entries()}
            if set(refs) <= done:
                try:
                    left = set(self.stored_refs()) & set(refs)
                except OSError:
                    left = set(refs)
                if not left:
                    return True
            time.sleep(0.05)
        return False

    def judge(self, recs):
        """Per recording: (ref, lost, stored twice, identical, clock error us) from the core's report."""
        entries = {}
        for d in self.deferred_entries():
            entries.setdefault(d["correlation_ref"], []).append(d)
        dup_flags = sum(1 for r in self.hil.reports() for v in r.get("violations", [])
                        if v["check"] == "deferred_duplicate")
        rows = []
        for rec in recs:
            es = entries.get(rec.ref, [])
            if not es:
                rows.append({"ref": rec.ref, "chunks": rec.chunks, "delivered": False, "lost": rec.chunks,
                             "twice": 0, "identical": False, "clock_err_us": None, "responses": 0})
                continue
            e = es[-1]
            stored = e["chunks"]
            err = (e["spoken_at_us"] - rec.wall_t0_us) if e["spoken_at_us"] is not None and rec.wall_t0_us > 0 else None
            rows.append({"ref": rec.ref, "chunks": rec.chunks, "delivered": True,
                         "lost": max(0, rec.chunks - stored), "twice": max(0, stored - rec.chunks),
                         "identical": e["sha256"] == rec.sha256 and stored == rec.chunks,
                         "clock_err_us": err, "responses": len(es)})
        return rows, dup_flags


def summarize(rows, dup_flags, cuts):
    errs = [abs(r["clock_err_us"]) for r in rows if r["clock_err_us"] is not None]
    return {
        "recordings": len(rows), "delivered": sum(r["delivered"] for r in rows),
        "chunks": sum(r["chunks"] for r in rows), "cuts": cuts,
        "lost": sum(r["lost"] for r in rows), "stored_twice": sum(r["twice"] for r in rows),
        "resent_flagged": dup_flags, "identical": sum(r["identical"] for r in rows),
        "responses_extra": sum(max(0, r["responses"] - 1) for r in rows),
        "clock_err_us_max": max(errs) if errs else None,
        "clock_err_us_median": statistics.median(errs) if errs else None,
    }


# ---------------------------------------------------------------------------------------------- scenarios
# Each takes a DeferredBench that is up (board admitted) and raises AssertionError with what went wrong;
# the HIL scenarios (scenarios/test_deferred.py) and tests/host/test_deferred_hil.py both run them.

def _check_rows(rows, dup):
    bad = [r for r in rows if not r["delivered"] or r["lost"] or r["twice"] or not r["identical"]
           or r["responses"] != 1]
    assert not bad, "recordings not delivered exactly once, byte-identical: %s" % bad
    assert dup == 0, "the board resent %d chunk(s) the core had stored (deferred_duplicate)" % dup
    late = [r for r in rows if r["clock_err_us"] is None or abs(r["clock_err_us"]) > CLOCK_BOUND_US]
    assert not late, "capture_ts not mapped within %d us of the true time: %s" % (CLOCK_BOUND_US, late)


def scenario_offline_press_delivered(db, ms=900):
    """Core out of reach, a press records to flash (LED: recording queued), the core comes back: the
    recording is delivered exactly once, byte-identical, spoken-at within 20 ms; the LED leaves "queued"."""
    db.offline()
    rec = db.record(ms)
    st = db.hil.target.state()
    assert st.get("led") == 5, "LED state after an offline recording: %r (5 = recording queued)" % st.get("led")
    db.online()
    assert db.wait_delivered([rec.ref], timeout=40), "%s not delivered within 40 s" % rec.ref
    rows, dup = db.judge([rec])
    _check_rows(rows, dup)
    deadline = time.monotonic() + 5
    while db.hil.target.state().get("led") == 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert db.hil.target.state().get("led") != 5, "the LED still says queued after delivery"
    return rows


def scenario_cuts(db, n_recordings, seed=0):
    """``n_recordings`` made offline (1-3 at a time), each upload cut 1-3 times at random points."""
    rng = random.Random(seed)
    rows_all, cuts = [], 0
    done = 0
    while done < n_recordings:
        batch = min(rng.randint(1, 3), n_recordings - done)
        db.offline()
        recs = [db.record(rng.randint(400, 1600)) for _ in range(batch)]
        fired = db.plan_cuts(recs, rng.randint(1, 3) * batch)
        db.online()
        ok = db.wait_delivered([r.ref for r in recs], timeout=60 + 30 * batch)
        db.clear_cuts()
        cuts += sum(1 for _, rem in fired if rem > 0)
        rows, _ = db.judge(recs)
        rows_all += rows
        done += batch
        assert ok, "not delivered: %s" % [r for r in rows if not r["delivered"]]
    _, dup = db.judge([])
    _check_rows(rows_all, dup)
    return rows_all, summarize(rows_all, dup, cuts)


def _online_until(db, rec, action, msg, settle_s=0.0):
    """The core back with a relay fault (``action``: "stall" or "cut") armed at Noise message ``msg`` board ->
    core of the next link; waits until it fired, returns the chunks of ``rec`` the core had stored then."""
    fired = []
    db.hil.core.call_soon(db.hil.core.relay.arm_next, Rule(action, UP, msg=msg, frac=0.5,
                                                          on_fire=lambda link, rule: fired.append(rule)))
    db.online()
    deadline = time.monotonic() + 30
    while not fired and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fired, "the %s never fired" % action
    time.sleep(settle_s)
    return db.hil.core.call_soon(lambda: (db.hil.core.server.deferred.get((db.did, rec.ref)) or {}).get("count", 0))


def scenario_reboot_mid_upload(db, ms=2500):
    """The board resets mid-upload (the link stalls at a random chunk, then the process is killed and
    started again on the same flash): after the reboot it resumes and delivers exactly once."""
    db.offline()
    rec = db.record(ms)
    stored = _online_until(db, rec, "stall", 5 + db.rng.randint(5, rec.chunks - 5), settle_s=0.2)
    db.tl.note("bench: board reset mid-upload (%d of %d chunks stored)" % (stored, rec.chunks))
    db.hil.target.restart()
    assert db.wait_delivered([rec.ref], timeout=60), "%s not delivered after the reset" % rec.ref
    rows, dup = db.judge([rec])
    _check_rows(rows, dup)
    assert 0 < stored < rec.chunks, "the reset did not land mid-upload (%d of %d stored)" % (stored, rec.chunks)
    return stored, rec.chunks


def scenario_ring_full(db, ms=600):
    """A ring for about two recordings (``ring_kb`` on the DeferredBench): the third drops the oldest, with a
    log line and the counter on flash; the two newest are delivered, the dropped one never is."""
    db.offline()
    tgt = db.hil.target
    mark = len(tgt.log_text())
    recs = [db.record(ms) for _ in range(3)]
    m = RE_DROPPED.search(tgt.log_text(), mark)
    assert m, "no 'ring full ... dropped' line in the board's log"
    assert m.group(1) == recs[0].ref and int(m.group(3)) == 1, m.group(0)
    head = (db._flash() / "idx").read_text().split("\n")[0].split()
    assert int(head[3]) == 1, "dropped counter on flash: %r" % head
    assert recs[0].ref not in db.stored_refs()
    db.online()
    assert db.wait_delivered([r.ref for r in recs[1:]], timeout=40)
    rows, dup = db.judge(recs[1:])
    _check_rows(rows, dup)
    assert recs[0].ref not in {d["correlation_ref"] for d in db.deferred_entries()}
    return recs


def scenario_reboot_before_upload(db, ms=700):
    """Recorded offline, then the board resets before the core is back: the recording survives on flash,
    is rebased from the old boot's clock onto the new one (both boots' Ping rounds) and is delivered once,
    still mapped within 20 ms of when it was spoken."""
    db.offline()
    rec = db.record(ms)
    db.hil.target.restart()
    time.sleep(1.0)
    db.online()
    assert db.wait_delivered([rec.ref], timeout=60), "%s not delivered after the reset" % rec.ref
    rows, dup = db.judge([rec])
    _check_rows(rows, dup)
    return rows


def scenario_reset_then_cut_upload(db, ms=1500):
    """Issue 32: recorded offline, the board resets before the core is back, and the first upload after the
    reset is cut after a few chunks (the core holds them, rebased onto the new boot's clock); the next
    connection sends the rest on that SAME clock: delivered once, byte-identical, capture_ts contiguous (last -
    first = (chunks - 1) x 20 ms), no deferred_gap (R10.10-c), spoken-at within 20 ms."""
    db.offline()
    rec = db.record(ms)
    db.hil.target.restart()
    time.sleep(1.0)
    stored = _online_until(db, rec, "cut", 8 + db.rng.randint(3, rec.chunks - 3))
    db.tl.note("bench: upload after the reset cut (%d of %d chunks stored)" % (stored, rec.chunks))
    assert db.wait_delivered([rec.ref], timeout=60), "%s not delivered after the cut" % rec.ref
    rows, dup = db.judge([rec])
    _check_rows(rows, dup)
    assert 0 < stored < rec.chunks, "the cut did not land mid-upload (%d of %d stored)" % (stored, rec.chunks)
    gaps = [v for r in db.hil.reports() for v in r.get("violations", []) if v["check"] == "deferred_gap"]
    assert not gaps, "the rest of the recording went on another clock: %s" % gaps
    (e,) = [d for d in db.deferred_entries() if d["correlation_ref"] == rec.ref]
    assert e["last_capture_ts"] - e["first_capture_ts"] == (rec.chunks - 1) * 20000, e
    return rows
