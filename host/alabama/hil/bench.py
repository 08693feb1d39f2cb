"""One scenario's bench: a fresh reference core, the board under test provisioned for it, and the record.

Responsible for what every scenario needs — bring the core up (options per scenario), provision the
board for an admission path (guest/XX, token, pre-provisioned IK, wrong key ...), boot it, wait for
frames with readable failures, take measurements — and for tearing all of it down and packing the
evidence (timeline, conformance reports, serial log, waveforms, heap) into the scenario's record for
the report, whatever happened. The board itself is a ``targets.Target`` (virtual or real).
"""
import os
import pathlib
import shutil
import time

from alabama.provision import record as record_codec

from . import measures
from .corehost import BenchError, CoreHost
from .timeline import CORE_TO_SAT, NOTE, SAT_TO_CORE, Timeline

#: How long a scenario waits by default for the board to be admitted after boot.
ADMIT_TIMEOUT_S = 30.0
#: Rows of the timeline quoted in a failed expectation.
QUOTE_ROWS = 12
#: Frames left out of a failure's quote (liveness chatter and audio would push the story off screen).
QUIET_OPS = ("stream_chunk", "ping", "ping_response")


class ScenarioFailed(AssertionError):
    pass


class Bench:
    """Created per scenario by the plugin's ``hil`` fixture; see docs/hil.md for the scenario API."""

    def __init__(self, target, workdir, bind="127.0.0.1", relay_port=0, log=print, timeline=None):
        self.target = target
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bind = bind
        self.relay_port = relay_port
        self.tl = Timeline() if timeline is None else timeline
        self.core = None
        self._owns_core = True       # False: a Fleet's other board, on the core the first board's bench runs
        self.device_id = None
        self.public_key = None       # the board's public key after provision() (None: it cannot tell)
        self.measurements = {}
        self.notes = []
        self.waves = []
        self.transcripts = {}        # a mic WAV's path or ("capture", id) -> what a recogniser heard in it
        self.heap = []
        self.health = {}             # device_id -> device.info (or its last device.health Event), at teardown
        self.log = log
        self._booted = False

    # ------------------------------------------------------------------ core
    def start_core(self, **opts):
        """Bring up the reference core (fresh data dir) with CoreServer options (closed=, min_wire_version=,
        ping_interval=, max_frame_bytes=, max_concurrent_streams=, brain= ...)."""
        if self.core is not None:
            raise BenchError("the core is already running; use restart_core()")
        opts.setdefault("ping_interval", 2.0)
        self.core = CoreHost(str(self.workdir / "core"), self.tl, bind=self.bind, relay_port=self.relay_port, **opts)
        self.core.start()
        self.note("core up: key %s..., relay %s:%d" % (self.core.public_key_hex[:16], *self.core.address))
        if self.bind != "127.0.0.1":
            self.log("alabama hil: core for the board at %s:%d (key %s)" % (*self.core.address,
                                                                          self.core.public_key_hex))
        return self.core

    def attach_core(self, core):
        """Use a core another bench started (a Fleet: one core, several boards); this bench never stops it."""
        self.core = core
        self._owns_core = False

    def restart_core(self, down_s=0.0, **changes):
        self.core.restart(down_s, **changes)

    def registry(self, fn):
        """Run fn(registry) on the core's thread (SQLite objects belong to it)."""
        return self.core.call_soon(lambda: fn(self.core.server.registry))

    def mint_token(self, ttl=300):
        return self.core.call_soon(self.core.server.mint_token, ttl)

    # ------------------------------------------------------------------ board
    def record(self, core_key=True, token=None, key=None, port=None):
        """A provisioning record pointing the board at the relay (the core's address for the board)."""
        host, rport = self.core.address if self.core else (self.bind, 0)
        if self.target.connect_host:
            host = self.target.connect_host
        if key is None and core_key:
            key = self.core.public_key
        tok, expires = None, 0
        if token:
            tok, expires = token if isinstance(token, tuple) else (token, time.time() + 300)
        return record_codec.build(host, port or rport, key, tok, expires)

    def provision(self, path="ik", **kw):
        """Provision the board for an admission path (spec §7.3), from a clean identity:

        ``guest``  — address only (no core key): Noise XX, admitted as a guest;
        ``token``  — address + pairing token (no core key): XX, then Paired, then IK;
        ``ik``     — address + core key: Noise IK (pre-provisioned path); with ``preconfigure=True``
                     the device key is registered as paired on the core before it connects;
        ``wrong_key`` — address + a key that is not the core's: IK must fail, XX must not be tried.
        """
        preconf = kw.pop("preconfigure", False)
        if path == "guest":
            rec = self.record(core_key=False)
        elif path == "token":
            rec = self.record(core_key=False, token=self.mint_token())
        elif path == "ik":
            rec = self.record(core_key=True)
        elif path == "wrong_key":
            rec = self.record(key=bytes(range(1, 33)) if kw.get("key") is None else kw["key"])
        else:
            raise BenchError("unknown provisioning path %r" % path)
        pub = self.public_key = self.target.provision(rec, fresh_identity=kw.get("fresh", True))
        self.note("board provisioned (%s): core %s:%d%s%s" % (path, rec.core_host, rec.core_port,
                                                            ", key pinned" if rec.core_key else "",
                                                            ", token" if rec.pairing_token else ""))
        if preconf:
            if pub is None:
                raise BenchError("this board cannot tell its public key before it connects")
            self.registry(lambda r: r.preconfigure(pub, display_name="hil"))
            self.note("core: device key registered as paired before it connects (pre-provisioned path)")
        return rec

    def boot(self, wait=True, timeout=ADMIT_TIMEOUT_S):
        """Start the board; with ``wait``, until the core admitted it (returns the device_id)."""
        self.target.start()
        self._booted = True
        self.note("board started")
        if not wait:
            return None
        did = self.core.wait_device(timeout=timeout)
        if did is None:
            self.fail("the board was not admitted within %.0f s" % timeout)
        self.device_id = did
        return did

    # ------------------------------------------------------------------ expectations
    def note(self, text):
        self.tl.note(text)

    def expect(self, dir_=None, op=None, id_=None, after=0, pred=None, timeout=10.0, what=None):
        """The first frame matching at/after timeline index ``after``; fails the scenario (with the last
        frames quoted) when it does not come within ``timeout`` s."""
        ev = self.tl.wait(dir_, op, id_, after, pred, timeout)
        if ev is None:
            self.fail("expected %s within %.1f s" % (what or _what(dir_, op, id_), timeout))
        return ev

    def expect_none(self, dir_=None, op=None, id_=None, after=0, pred=None, within=1.0, what=None):
        """Fail if a matching frame appears within ``within`` s."""
        ev = self.tl.wait(dir_, op, id_, after, pred, within)
        if ev is not None:
            self.fail("unexpected %s at t=%.3f s: %s" % (what or _what(dir_, op, id_), ev.t, ev.summary))

    def fail(self, msg):
        rows = [e for e in self.tl.snapshot() if e.op not in QUIET_OPS][-QUOTE_ROWS:]
        quoted = "\n".join("  %8.3f %-9s %-18s id=%-4s %s" % (e.t, e.dir, e.op, e.id or "-", e.summary) for e in rows)
        log = self.target.log_text().splitlines()[-8:]
        raise ScenarioFailed("%s\nlast frames:\n%s\nboard log tail:\n  %s" % (msg, quoted, "\n  ".join(log)))

    def reports(self):
        return self.core.reports() if self.core else []

    def assert_conformant(self, allow=()):
        """No rule broken on any session of this scenario (``allow``: check names tolerated)."""
        bad = [(r["session"], v) for r in self.reports() for v in r.get("violations", []) if v["check"] not in allow]
        if bad:
            self.fail("the core's conformance report lists %d violation(s): %s" % (len(bad), "; ".join(
                "%s %s %s: %s" % (s, v["rule"], v["check"], v["detail"]) for s, v in bad[:6])))

    def sessions(self):
        return sorted({e.session for e in self.tl.snapshot() if e.session})

    # ------------------------------------------------------------------ measurements
    def measure(self, name, value):
        if value is None:
            return
        self.measurements.setdefault(name, []).append(round(float(value), 3))

    def sample_heap(self):
        h = self.target.heap()
        if h is not None:
            self.heap.append((round(self.tl.now(), 3), h))
            self.measure("heap_free_bytes", h)
        return h

    def finish_measurements(self):
        for hs in measures.handshakes(self.tl):
            self.measure("handshake_ms", 1000 * hs)
        dropped, late = measures.capture_stats(self.tl)
        if any(e.op == "stream_chunk" and e.dir == SAT_TO_CORE for e in self.tl.snapshot()):
            self.measure("frames_dropped", dropped)
            self.measure("frames_late", late)

    def sample_health(self):
        """Every connected device's health (CoreServer.device_health: its device.info, else its last
        device.health Event), kept for the report; {} when no core runs."""
        srv = self.core.server if self.core is not None else None
        if srv is None:
            return {}
        for did in self.core.devices():
            try:
                h = self.core.call(srv.device_health(did, 5.0), 10.0)
            except Exception:  # noqa: BLE001 - a device that just left has no health to show
                h = None
            if h:
                self.health[did] = h
        return self.health

    # ------------------------------------------------------------------ teardown
    def close(self):
        """Stop board and core; never raises (teardown runs after failures and Ctrl-C too)."""
        errors = []
        try:
            if self._booted:
                self.sample_heap()
        except Exception as e:  # noqa: BLE001
            errors.append("heap: %s" % e)
        try:
            if self._booted:
                self.sample_health()
        except Exception as e:  # noqa: BLE001
            errors.append("health: %s" % e)
        core_stop = self.core.stop if self.core is not None and self._owns_core else None
        for what, fn in (("board", self.target.stop), ("core", core_stop)):
            if fn is None:
                continue
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                errors.append("%s stop: %s" % (what, e))
        try:
            if self._owns_core:          # a shared timeline is measured once, by the bench that owns the core
                self.finish_measurements()
        except Exception as e:  # noqa: BLE001
            errors.append("measurements: %s" % e)
        return errors

    def artifacts(self, dest):
        """Copy the scenario's evidence (serial log, WAVs) under ``dest``; return the record fields."""
        dest = pathlib.Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        log = self.target.log_text()
        (dest / "serial.log").write_text(log)
        waves = []
        for title, src in self.target.waves():
            if src and os.path.exists(src) and os.path.getsize(src) > 44:
                dst = dest / os.path.basename(src)
                if os.path.abspath(src) != os.path.abspath(dst):
                    shutil.copyfile(src, dst)
                waves.append(self._heard({"title": title, "path": str(dst)}, str(src)))
        waves.extend(self.waves)
        waves.extend(self._stream_waves(dest))
        return {"serial_log": log, "waves": waves, "heap": self.heap, "timeline": self.tl.rows(),
                "conformance": self.reports(), "measurements": self.measurements, "notes": self.notes,
                "health": self.health}


    def _stream_waves(self, dest, per_dir=3):
        """WAVs of the audio on the wire, from the recorded chunk tails: each capture as the core received
        it (what the board's microphone path produced) and each reply as the core sent it."""
        from .steps import write_wav
        import numpy as np
        out = []
        rows = self.tl.snapshot()
        for dir_, open_op, what in ((SAT_TO_CORE, "capture_open", "capture %d as the core received it"),
                                    (CORE_TO_SAT, "media_render_open", "reply %d as the core sent it")):
            ids = [e.id for e in rows if e.dir == dir_ and e.op == open_op][:per_dir]
            for i in ids:
                pcm = b"".join(e.data for e in rows if e.dir == dir_ and e.op == "stream_chunk" and e.id == i and e.data)
                if len(pcm) < 320:
                    continue
                x = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2")
                path = write_wav(dest / ("%s-%d.wav" % ("capture" if dir_ == SAT_TO_CORE else "reply", i)), x)
                out.append(self._heard({"title": what % i, "path": path}, (open_op, i)))
        return out

    def _heard(self, wave, key):
        """The report's wave entry with the transcript a scenario recorded for it (``self.transcripts``)."""
        if key in self.transcripts:
            wave["transcript"] = self.transcripts[key]
        return wave


def _what(dir_, op, id_):
    s = {SAT_TO_CORE: "Sat \u2192 Core ", CORE_TO_SAT: "Core \u2192 Sat ", NOTE: "note "}.get(dir_, "")
    return "%s%s%s" % (s, op or "any frame", "" if id_ is None else " on id %d" % id_)


class Fleet:
    """Several boards on one reference core at once (the cross-board scenarios, docs/hil.md "A fleet").

    One ``Bench`` per board, all on one timeline and on the core the first one starts (``start_core``); the
    others attach to it. Each board's frames are told apart by its core session (``mine``). Closing stops
    every board, then the core; ``artifacts`` packs one record with every board's log and waves.
    """

    def __init__(self, targets, workdir, labels=None, bind="127.0.0.1", relay_port=0, log=print):
        self.workdir = pathlib.Path(workdir)
        self.tl = Timeline()
        self.boards = []
        labels = labels or ["board %d" % (i + 1) for i in range(len(targets))]
        for label, target in zip(labels, targets):
            d = self.workdir / label.replace(" ", "")
            b = Bench(target, d, bind=bind, relay_port=relay_port, log=log, timeline=self.tl)
            target.begin_scenario(d / "board", t0=self.tl.t0)
            b.label = label
            self.boards.append(b)
        self.core = None

    def start_core(self, **opts):
        self.core = self.boards[0].start_core(**opts)
        for b in self.boards[1:]:
            b.attach_core(self.core)
        return self.core

    def boot(self, boards=None, timeout=ADMIT_TIMEOUT_S):
        """Start the boards all at once, then wait until the core admitted each (by its own key when it could
        tell it at provisioning); returns their device ids."""
        from alabama.core.registry import fingerprint
        boards = self.boards if boards is None else boards
        for b in boards:
            b.boot(wait=False)
        deadline = time.monotonic() + timeout
        for b in boards:
            want = fingerprint(b.public_key) if b.public_key is not None else None
            did = self.core.wait_device(device_id=want, timeout=max(0.1, deadline - time.monotonic()))
            if did is None:
                self.fail("%s was not admitted within %.0f s" % (b.label, timeout))
            b.device_id = did
        return [b.device_id for b in boards]

    def sessions(self, bench):
        """The core sessions of one board so far (its conformance reports and its live connection)."""
        out = {r["session"] for r in self.core.reports() if r.get("device_id") == bench.device_id}
        conn = self.core.server.connections.get(bench.device_id) if self.core.server is not None else None
        if conn is not None:
            out.add(conn.session_id)
        return out

    def mine(self, bench, pred=None):
        """A timeline predicate: frames of ``bench``'s board (its sessions now), and ``pred`` if given."""
        ss = self.sessions(bench)
        return lambda e: e.session in ss and (pred is None or pred(e))

    def expect(self, bench, dir_=None, op=None, id_=None, after=0, pred=None, timeout=10.0, what=None):
        """``Bench.expect`` for one board's frames on the shared timeline; the failure names the board."""
        return self.boards[0].expect(dir_, op, id_, after, self.mine(bench, pred), timeout,
                                     "%s: %s" % (bench.label, what or _what(dir_, op, id_)))

    def note(self, text):
        self.tl.note(text)

    def fail(self, msg):
        self.boards[0].fail(msg)

    def assert_conformant(self, allow=()):
        self.boards[0].assert_conformant(allow)

    def close(self):
        """Stop every board, then the core (the first bench owns it); never raises."""
        errors = []
        for b in reversed(self.boards):
            errors.extend("%s: %s" % (b.label, e) for e in b.close())
        return errors

    def artifacts(self, dest):
        """One record for the scenario: the shared timeline and conformance, every board's serial log (one
        after another, each headed by its board) and waves (titles prefixed with the board)."""
        dest = pathlib.Path(dest)
        logs, waves, heap, notes, ms, rec = [], [], [], [], {}, None
        for b in self.boards:
            r = b.artifacts(dest / b.label.replace(" ", ""))
            rec = rec or r
            notes.extend("%s: %s" % (b.label, n) for n in r["notes"])
            for k, v in r["measurements"].items():
                ms.setdefault(k, []).extend(v)
            logs.append("===== %s: %s =====\n%s" % (b.label, b.target.name, r["serial_log"]))
            waves.extend(dict(w, title="%s: %s" % (b.label, w["title"])) for w in r["waves"])
            heap.extend(r["heap"])
        rec = dict(rec, serial_log="\n".join(logs), waves=waves, heap=sorted(heap), notes=notes, measurements=ms,
                   health={k: v for b in self.boards for k, v in b.health.items()},
                   boards=["%s: %s" % (b.label, b.target.name) for b in self.boards])
        return rec


def open_scenario(target, workdir, board_dir, **kw):
    """A Bench for one scenario on a target that is set up: the bench's files in ``workdir``, the board's in
    ``board_dir``, both on the bench's timeline clock. ``kw`` goes to Bench (bind, relay_port, log)."""
    bench = Bench(target, workdir, **kw)
    target.begin_scenario(board_dir, t0=bench.tl.t0)
    return bench


def sim_bench(workdir, firmware=None, log=print):
    """A Bench on a fresh simulated board in ``workdir`` (bench/ and board/ under it), scenario begun: the
    set-up the fault and deferred campaigns share, tools and tests alike. Close it with ``bench.close()``."""
    from .targets import SimTarget
    work = pathlib.Path(workdir)
    target = SimTarget("sim", firmware=firmware, workdir=work)
    target.setup()
    return open_scenario(target, work / "bench", work / "board", log=log)
