"""The soak: hundreds of back-to-back push-to-talk exchanges on the virtual board, with periodic link cuts,
while the board's free heap (after gc.collect()) and the core's RSS are sampled after every exchange.

Responsible for the rig (the reference core in its own process, so its RSS is its own; the bench's TCP
relay in front of it, which can cut the link; the virtual board at a chosen heap, on a chosen micropython),
driving the exchanges and the cuts, and the trend verdict. It decides nothing about the protocol beyond
"the exchange completed": the core's conformance reports are read back and counted.

Used by tools/soak/run.py (``make soak``) and tests/host/test_soak_short.py.
"""
import asyncio
import json
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from alabama import REPO
from alabama.board import logwords as lw


#: Where a cut lands, in the order they rotate: while the button is held (the capture streams), while the
#: reply plays (the render streams), and between exchanges (nothing open).
PHASES = ("capture", "render", "idle")

#: Exchanges at the start left out of the trend fit: imports, first-use allocations and the first
#: reconnection settle there.
DEFAULT_WARMUP = 20

#: The firmware's provisioning gesture (satellite/provision/gesture.py): this many presses within 3 s.
#: The soak keeps its presses further apart than that (plus a margin) so it never triggers it.
GESTURE_PRESSES = 5
GESTURE_WINDOW_S = 3.3


class SoakError(Exception):
    """The rig (not the board under test) failed to come up or to answer."""


# ------------------------------------------------------------------------------------------------ trends
def linfit(xs, ys):
    """Least squares y = a + b x: (a, b, residual standard deviation)."""
    n = len(xs)
    if n < 2:
        return (ys[0] if ys else 0.0), 0.0, 0.0
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    res = [y - (a + b * x) for x, y in zip(xs, ys)]
    s = math.sqrt(sum(r * r for r in res) / (n - 2)) if n > 2 else 0.0
    return a, b, s


def trend(xs, ys, floor, bad_sign=-1):
    """Verdict on a series that must stay flat: ``bad_sign`` -1 when falling is the bad direction (free
    heap), +1 when rising is (RSS). ``floor`` is the smallest change over the run that counts as a trend
    (the series' unit), so a perfectly quiet series does not fail on a one-byte wobble.

    The sampling noise is estimated from successive differences (1.4826 x median |y[i+1] - y[i]| / sqrt 2),
    which a trend or a single step barely moves, unlike the residuals around a line that does not fit. The
    tolerance is ``max(4 x noise, floor)``. Flat when both hold:
      * the fitted line's change over the measured span (slope x span) is not beyond the tolerance in the
        bad direction;
      * the mean of the last quarter is not beyond the mean of the second quarter by more than the
        tolerance in the bad direction (a step or a late leak that a line through everything dilutes).
    """
    n = len(ys)
    if n < 8:
        raise ValueError("a trend needs at least 8 samples after the warm-up (got %d)" % n)
    a, b, s = linfit(xs, ys)
    span = xs[-1] - xs[0]
    drift = b * span
    d = sorted(abs(ys[i + 1] - ys[i]) for i in range(n - 1))
    noise = 1.4826 * d[len(d) // 2] / math.sqrt(2)
    tol = max(4 * noise, floor)
    q = n // 4
    q2 = sum(ys[q:2 * q]) / q
    q4 = sum(ys[n - q:]) / q
    step = q4 - q2
    ok = bad_sign * drift <= tol and bad_sign * step <= tol
    return {"n": n, "slope": b, "intercept": a, "sigma": s, "noise": noise, "span": span, "drift": drift, "tolerance": tol,
            "q2_mean": q2, "q4_mean": q4, "q4_minus_q2": step, "min": min(ys), "max": max(ys), "flat": ok}


def parse_size(text):
    m = re.fullmatch(r"(\d+)([kKmM]?)", str(text).strip())
    if not m:
        raise ValueError("%r is not a size like 256k or 2m" % text)
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1 << 20}[m.group(2).lower()]


# ------------------------------------------------------------------------------------------------ audio
def utterance_wav(path, ms=400, rate=16000, seed=7):
    """A short voiced, syllable-modulated utterance (not a pure tone), 16 kHz mono s16."""
    import random
    rnd = random.Random(seed)
    n = rate * ms // 1000
    out = bytearray()
    ph = 0.0
    for i in range(n):
        t = i / rate
        f0 = 140 + 20 * math.sin(2 * math.pi * 0.7 * t)
        ph += 2 * math.pi * f0 / rate
        v = sum(math.sin(k * ph) / k for k in range(1, 6))
        env = 0.55 + 0.45 * math.sin(2 * math.pi * 4.0 * t) ** 2
        x = int(5000 * v * env + rnd.gauss(0, 200))
        out += max(-32768, min(32767, x)).to_bytes(2, "little", signed=True)
    from alabama import audio
    audio.write(path, bytes(out), rate)
    return pathlib.Path(path)


# ------------------------------------------------------------------------------------------------ the core
def rss_kib(pid):
    """VmRSS of a process in KiB (Linux /proc)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SoakError("no VmRSS for pid %d" % pid)


class CoreProcess:
    """`alabama core serve` in a child process on 127.0.0.1 (echo brain): its RSS is the core's alone."""

    def __init__(self, data_dir, ping_interval=5.0, log_path=None):
        self.data_dir = pathlib.Path(data_dir)
        self.ping_interval = ping_interval
        self.log_path = pathlib.Path(log_path or self.data_dir.parent / "core.log")
        self.proc = None
        self.port = None
        self.key = None

    def start(self, timeout=30.0):
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-c", "import sys; from alabama.cli import main; sys.exit(main())",
                "core", "serve", "--listen", "127.0.0.1:0", "--data", str(self.data_dir), "--brain", "echo",
                "--ping-interval", str(self.ping_interval)]
        self._err = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._err, cwd=str(REPO),
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        out = b""
        os.set_blocking(self.proc.stdout.fileno(), False)
        while time.monotonic() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise SoakError("the core exited (%d) at start; see %s" % (self.proc.returncode, self.log_path))
            try:
                d = self.proc.stdout.read()
            except (BlockingIOError, OSError):
                d = None
            if d:
                out += d
                m = re.search(rb"key ([0-9a-f]{64})", out)
                p = re.search(rb"listening on 127\.0\.0\.1:(\d+)", out)
                if m and p:
                    self.key = bytes.fromhex(m.group(1).decode())
                    self.port = int(p.group(1))
                    break
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise SoakError("the core did not report its address within %.0f s: %r" % (timeout, out))
        return self

    @property
    def pid(self):
        return self.proc.pid

    def rss_kib(self):
        return rss_kib(self.proc.pid)

    def stop(self):
        p = self.proc
        if p is not None and p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(5)
        if p is not None and p.stdout is not None:
            p.stdout.close()
        if getattr(self, "_err", None):
            self._err.close()
            self._err = None

    def reports(self):
        """Every session's conformance report the core wrote to its data dir."""
        d = self.data_dir / "reports"
        return [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.is_dir() else []


# ------------------------------------------------------------------------------------------------ the relay
class _Quiet:
    def note(self, text):
        pass


class RelayThread:
    """alabama.hil.corehost.Relay (forwards bytes untouched, can cut every live link) on its own loop."""

    def __init__(self, target):
        from alabama.hil.corehost import Relay
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="soak-relay", daemon=True)
        self.events = []
        self.relay = Relay("127.0.0.1", 0, lambda: target, lambda: _Quiet(),
                           on_event=lambda kind, n, t, *rest: self.events.append((kind, n, t)))

    def start(self):
        self.thread.start()
        self._call(self.relay.start())
        return self

    def _call(self, coro, timeout=10.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def port(self):
        return self.relay.port

    def cut(self):
        async def _cut():
            return self.relay.cut()
        return self._call(_cut())

    def live(self):
        async def _n():
            return len(self.relay.links)
        return self._call(_n())

    def connects(self):
        return sum(1 for e in self.events if e[0] == "connect")

    def stop(self):
        try:
            self._call(self.relay.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


# ------------------------------------------------------------------------------------------------ the soak
class Soak:
    """One soak run. ``run()`` returns the result dict (samples, counts, verdicts)."""

    def __init__(self, workdir, exchanges=500, cut_every=25, heap=None, micropython=None, firmware=None,
                 seed=1, warmup=DEFAULT_WARMUP, utterance_ms=400, phases=PHASES, log=print,
                 exchange_timeout=20.0, max_consecutive_failures=5):
        self.workdir = pathlib.Path(workdir)
        self.exchanges = exchanges
        self.cut_every = cut_every
        self.heap = heap
        self.micropython = str(pathlib.Path(micropython).resolve()) if micropython else None
        self.firmware = firmware
        self.seed = seed
        self.warmup = warmup
        self.utterance_ms = utterance_ms
        self.phases = tuple(phases)
        self.log = log
        self.timeout = exchange_timeout
        self.max_consecutive_failures = max_consecutive_failures
        self.core = self.relay = self.vb = None
        self.samples = []        # one dict per completed-or-failed exchange
        self.cuts = []           # one dict per cut
        self.failures = []
        self._presses = []
        self.paced_s = 0.0

    # -------------------------------------------------------------------------------- rig
    def setup(self):
        import random
        from alabama.board import sim
        self.rng = random.Random(self.seed)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.wav = utterance_wav(self.workdir / "utterance.wav", self.utterance_ms, seed=self.seed)
        self.core = CoreProcess(self.workdir / "core").start()
        self.relay = RelayThread(("127.0.0.1", self.core.port)).start()
        flash = self.workdir / "flash"
        if flash.exists():
            shutil.rmtree(flash)
        sim.provision(flash, "127.0.0.1", self.relay.port, self.core.key, "", 0)
        env = {"ALABAMA_SIM_BACKOFF_BASE_MS": "300", "ALABAMA_SIM_BACKOFF_CAP_MS": "2000"}
        self.vb = sim.VirtualBoard(flash, board="sim", firmware=self.firmware, heap=self.heap,
                                   micropython=self.micropython, speaker=self.workdir / "speaker.wav", env=env)
        self.vb.start()
        self.vb.wait_log(lw.SAT_ACCEPTED, 30)
        self.vb.wait_log(lw.IDLE + "|" + lw.SAT_ACCEPTED, 5)

    def teardown(self):
        for part in (self.vb, self.relay, self.core):
            if part is not None:
                try:
                    part.stop()
                except Exception as e:  # noqa: BLE001 - teardown goes on
                    self.log("soak teardown: %s" % e)

    # -------------------------------------------------------------------------------- moves
    def _ptt(self, hold_s, cut_in=None, cut_delay=0.0):
        """One push-to-talk exchange; with ``cut_in`` ('capture' | 'render') the link is cut there.
        Returns (ok, info)."""
        vb = self.vb
        vb.set_mic(str(self.wav))
        self._pace()
        m = vb.mark()
        t0 = time.monotonic()
        vb.press()
        o = vb.wait_log(lw.CAPTURE_OPENED_BUTTON, 5, m)
        cid = int(o.group(1))
        if cut_in == "capture":
            time.sleep(cut_delay)
            n = self.relay.cut()
            vb.release()
            return True, {"cid": cid, "links_cut": n, "t": time.monotonic() - t0}
        time.sleep(hold_s)
        vb.release()
        if cut_in == "render":
            vb.wait_log(lw.RENDER_OPENED, self.timeout, m)
            time.sleep(cut_delay)
            n = self.relay.cut()
            return True, {"cid": cid, "links_cut": n, "t": time.monotonic() - t0}
        done = vb.wait_log(lw.playback_done(), self.timeout, m)
        vb.wait_log(lw.capture_response(cid), self.timeout, m)
        return True, {"cid": cid, "render": int(done.group(1)), "frames": int(done.group(2)),
                      "t": time.monotonic() - t0}

    def _pace(self):
        """Never five presses within GESTURE_WINDOW_S: the firmware takes five presses in 3 s as the
        "enter listening mode" gesture (sound provisioning), whatever each press was for."""
        p = self._presses
        if len(p) >= GESTURE_PRESSES - 1:
            wait = p[-(GESTURE_PRESSES - 1)] + GESTURE_WINDOW_S - time.monotonic()
            if wait > 0:
                self.paced_s += wait
                time.sleep(wait)
        p.append(time.monotonic())
        del p[:-GESTURE_PRESSES]

    def _wait_reconnected(self, m, timeout=20.0):
        self.vb.wait_log(lw.LINK_DOWN, timeout, m)
        self.vb.wait_log(lw.SAT_ACCEPTED, timeout, m)

    def _wait_idle(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.vb.state()
            if st["state"] == "connected" and not st["capture"] and not st["pending"] and not st["render"]:
                return st
            time.sleep(0.05)
        raise SoakError("the board is not idle after %.0f s: %s" % (timeout, self.vb.state()))

    def cut(self, k, phase):
        vb = self.vb
        m = vb.mark()
        t0 = time.monotonic()
        hold = self.utterance_ms / 1000.0
        if phase == "idle":
            info = {"links_cut": self.relay.cut()}
        elif phase == "capture":
            _, info = self._ptt(hold, cut_in="capture", cut_delay=self.rng.uniform(0.05, hold))
        else:
            _, info = self._ptt(hold, cut_in="render", cut_delay=self.rng.uniform(0.0, 0.3))
        self._wait_reconnected(m)
        st = self._wait_idle()
        rec = dict(info, k=k, phase=phase, reconnect_s=round(time.monotonic() - t0, 3), boots=vb.boots,
                   state=st["state"])
        self.cuts.append(rec)
        return rec

    def sample(self):
        t = time.monotonic()
        free = self.vb.heap()
        return free, self.core.rss_kib(), time.monotonic() - t

    # -------------------------------------------------------------------------------- the run
    def run(self):
        t_start = time.time()
        self.setup()
        try:
            heap0 = self.vb.heap()
            self.log("soak: board up (heap limit %s, free after gc %d), core pid %d rss %d KiB, relay :%d"
                     % (self.vb.heap_limit, heap0, self.core.pid, self.core.rss_kib(), self.relay.port))
            hold = self.utterance_ms / 1000.0
            consecutive = 0
            ncut = 0
            for i in range(1, self.exchanges + 1):
                after_cut = None
                if self.cut_every and i % self.cut_every == 0:
                    phase = self.phases[ncut % len(self.phases)]
                    ncut += 1
                    try:
                        after_cut = self.cut(ncut, phase)
                    except Exception as e:  # noqa: BLE001 - counted, reported, the run goes on
                        self.failures.append({"i": i, "what": "cut %s" % phase, "error": str(e)[:2000]})
                        self.log("soak: cut %d (%s) did not recover: %s" % (ncut, phase, str(e)[:300]))
                        self._recover()
                try:
                    _, info = self._ptt(hold)
                    ok = True
                    consecutive = 0
                except Exception as e:  # noqa: BLE001
                    ok = False
                    info = {"error": str(e)[:2000]}
                    consecutive += 1
                    self.failures.append({"i": i, "what": "exchange", "error": str(e)[:2000]})
                    self.log("soak: exchange %d FAILED: %s" % (i, str(e)[:300]))
                    self._recover()
                free, rss, dt = self.sample()
                s = {"i": i, "ok": ok, "heap_free": free, "rss_kib": rss, "sample_ms": round(1000 * dt, 1),
                     "exchange_s": round(info.get("t", 0.0), 3), "frames": info.get("frames"),
                     "after_cut": after_cut["phase"] if after_cut else None}
                self.samples.append(s)
                if i % 25 == 0 or i == 1:
                    self.log("soak: %4d/%d  heap_free %7d  core rss %7d KiB  %s" % (
                        i, self.exchanges, free, rss, "ok" if ok else "FAILED"))
                if consecutive >= self.max_consecutive_failures:
                    self.log("soak: %d failures in a row: stopping" % consecutive)
                    break
        finally:
            log_text = self.vb.log_text() if self.vb else ""
            self.teardown()
        (self.workdir / "board.log").write_text(log_text)
        return self.result(t_start, time.time(), heap0, log_text)

    def _recover(self):
        try:
            self.vb.release()
        except Exception:  # noqa: BLE001
            pass
        try:
            self._wait_idle(20)
        except Exception as e:  # noqa: BLE001
            self.log("soak: board not idle again: %s" % str(e)[:300])

    # -------------------------------------------------------------------------------- the figures
    def result(self, t0, t1, heap0, log_text):
        ss = self.samples
        good = [s for s in ss if s["ok"] and s["heap_free"] is not None]
        post = [s for s in good if s["i"] > self.warmup]
        heap_limit = parse_size(self.vb.heap_limit)
        out = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0)),
            "wall_s": round(t1 - t0, 1),
            "heap_limit": self.vb.heap_limit, "heap_limit_bytes": heap_limit,
            "micropython": self.vb.micropython, "firmware": str(self.vb.firmware),
            "exchanges": len(ss), "completed": sum(1 for s in ss if s["ok"]),
            "failures": self.failures, "warmup": self.warmup, "seed": self.seed,
            "cut_every": self.cut_every, "cuts": self.cuts, "n_cuts": len(self.cuts),
            "relay_connects": self.relay.connects() if self.relay else None,
            "board_accepts": len(re.findall(lw.SAT_ACCEPTED, log_text)),
            "board_boots": self.vb.boots,
            "internal_errors": len(re.findall(r"INTERNAL ERROR|MemoryError", log_text)),
            "heap_free_at_start": heap0,
            "paced_s": round(self.paced_s, 1),
            "core_pid": self.core.pid,
            "samples": ss,
        }
        out["reconnects"] = out["board_accepts"] - 1
        out["success_rate"] = out["completed"] / out["exchanges"] if ss else 0.0
        reps = self.core.reports()
        out["core_sessions"] = len(reps)
        out["conformance_violations"] = sum(len(r.get("violations") or []) for r in reps)
        out["violations"] = [v for r in reps for v in (r.get("violations") or [])][:20]
        if len(post) >= 8:
            xs = [s["i"] for s in post]
            # a trend under 1/256 of the heap over the whole run is below what this can resolve
            out["heap"] = trend(xs, [s["heap_free"] for s in post], floor=max(1024, heap_limit // 256), bad_sign=-1)
            out["rss"] = trend(xs, [s["rss_kib"] for s in post], floor=1024, bad_sign=+1)
        else:
            out["heap"] = out["rss"] = None
        out["pass"] = bool(out["heap"] and out["heap"]["flat"] and out["rss"]["flat"] and not self.failures
                           and out["internal_errors"] == 0 and out["board_boots"] == 1)
        return out


# ------------------------------------------------------------------------------------------------ output
def table(r):
    h, m = r["heap"], r["rss"]
    rows = [
        ("started", r["started"]), ("wall time", "%.0f s" % r["wall_s"]),
        ("micropython", r["micropython"]), ("heap limit", "%s (%d bytes)" % (r["heap_limit"], r["heap_limit_bytes"])),
        ("exchanges", "%d (%d completed, %d failed: success %.2f %%)" % (
            r["exchanges"], r["completed"], r["exchanges"] - r["completed"], 100 * r["success_rate"])),
        ("cuts", "%d (%s)" % (r["n_cuts"], ", ".join("%s %d" % (p, sum(1 for c in r["cuts"] if c["phase"] == p))
                                                     for p in PHASES))),
        ("reconnects", "%d (relay saw %d TCP connects, board booted %d time(s))" % (
            r["reconnects"], r["relay_connects"] or 0, r["board_boots"])),
        ("internal errors", str(r["internal_errors"])),
        ("core sessions / violations", "%d / %d" % (r["core_sessions"], r["conformance_violations"])),
        ("warm-up excluded", "first %d exchanges" % r["warmup"]),
    ]
    if h:
        rows += [
            ("heap free: slope", "%+.2f bytes/exchange (drift %+.0f bytes over %d exchanges; noise %.0f)" % (
                h["slope"], h["drift"], h["span"], h["noise"])),
            ("heap free: min / max", "%d / %d bytes" % (h["min"], h["max"])),
            ("heap free: Q4 - Q2 mean", "%+.0f bytes (tolerance %.0f)" % (h["q4_minus_q2"], h["tolerance"])),
            ("heap verdict", "FLAT" if h["flat"] else "TREND (falling)"),
            ("core RSS: slope", "%+.1f KiB per 100 exchanges (drift %+.0f KiB over %d exchanges; noise %.0f)" % (
                100 * m["slope"], m["drift"], m["span"], m["noise"])),
            ("core RSS: min / max", "%d / %d KiB" % (m["min"], m["max"])),
            ("core RSS: Q4 - Q2 mean", "%+.0f KiB (tolerance %.0f)" % (m["q4_minus_q2"], m["tolerance"])),
            ("RSS verdict", "FLAT" if m["flat"] else "TREND (rising)"),
        ]
    rows.append(("SOAK", "PASS" if r["pass"] else "FAIL"))
    w = max(len(k) for k, _ in rows)
    return "\n".join("%-*s  %s" % (w, k, v) for k, v in rows)


def svg(r, width=900, height=420):
    """Free heap and core RSS per exchange, two stacked panels, cuts as ticks; hand-written SVG."""
    ss = [s for s in r["samples"] if s["heap_free"] is not None]
    if len(ss) < 2:
        return ""
    pad_l, pad_r, pad_t, gap = 80, 20, 30, 40
    ph = (height - pad_t - gap - 30) // 2
    n = ss[-1]["i"]

    def panel(y0, key, label, unit, fit):
        vals = [s[key] for s in ss]
        lo, hi = min(vals), max(vals)
        if hi - lo < 1:
            hi = lo + 1
        margin = (hi - lo) * 0.1
        lo, hi = lo - margin, hi + margin
        def X(i):
            return pad_l + (width - pad_l - pad_r) * (i - 1) / max(1, n - 1)
        def Y(v):
            return y0 + ph - ph * (v - lo) / (hi - lo)
        pts = " ".join("%.1f,%.1f" % (X(s["i"]), Y(s[key])) for s in ss)
        g = ['<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>' % (
            pad_l, y0, width - pad_l - pad_r, ph)]
        g.append('<text x="%d" y="%d" font-size="13">%s</text>' % (pad_l, y0 - 8, label))
        for v in (lo + margin, hi - margin):
            g.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%d %s</text>' % (
                pad_l - 4, Y(v) + 4, v, unit))
        g.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="#eee"/>' % (
            pad_l, y0, X(r["warmup"] + 0.5) - pad_l, ph))
        for c in r["cuts"]:
            i = c["k"] * r["cut_every"]
            g.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#d62" stroke-width="0.8"/>' % (
                X(i), X(i), y0, y0 + ph))
        g.append('<polyline fill="none" stroke="#236" stroke-width="1.2" points="%s"/>' % pts)
        if fit:
            x1, x2 = r["warmup"] + 1, n
            g.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#2a2" stroke-dasharray="4 3"/>' % (
                X(x1), Y(fit["intercept"] + fit["slope"] * x1), X(x2), Y(fit["intercept"] + fit["slope"] * x2)))
        return g

    body = panel(pad_t, "heap_free", "board free heap after gc.collect() (bytes) - heap %s" % r["heap_limit"], "",
                 r["heap"])
    body += panel(pad_t + ph + gap, "rss_kib", "core VmRSS (KiB)", "", r["rss"])
    body.append('<text x="%d" y="%d" font-size="11">exchange 1 .. %d; grey: warm-up; red ticks: link cuts; '
                'green dashes: least-squares fit</text>' % (pad_l, height - 8, n))
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">%s</svg>\n'
            % (width, height, "".join(body)))


def default_micropython():
    from alabama.board import sim
    return sim.find_micropython()


def tempdir(prefix="alabama-soak-"):
    return tempfile.mkdtemp(prefix=prefix)
