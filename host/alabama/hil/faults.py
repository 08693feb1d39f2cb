"""Fault injection between the virtual board and the reference core, and the fault campaign built on it.

Responsible for putting one fault on the link at a chosen point of the protocol — a *cut* (both TCP
halves closed), a *stall* (nothing forwarded, nothing closed: a half-open link), a *delay* (latency on
every chunk), a *flip* (one ciphertext byte changed: the receiver's AEAD must fail and end the
connection, R5-a) or a core *restart* — and for judging what followed: did the board come back by
itself within its liveness and backoff bounds, did the core release every bit of the dead session's
state (``CoreServer.state_accounting``), and did a LIVE capture cut mid-way end as spec §10.4 says
(R10.4-e: it carries no correlation_ref and dies with its connection; nothing of it is resumed).

The relay (``corehost.Relay``) sees only ciphertext but knows the Noise message boundaries (the 2-byte
prefixes of §5.1.2); the bench's timeline sees every plaintext frame as the core reads or writes it.
Faults are therefore placed by *phase*: inside the Noise handshake or the Hello's / HelloResponse's
message (a rule armed for the next link), or on the message that follows a frame trigger (the k-th mic
chunk, the k-th render chunk, the Invoke, the Paired), at a random byte of it. One board process serves
the whole campaign: ``FaultBench`` keeps it and the core up and runs ``run(FaultSpec)`` per fault.
``tools/faults/run.py`` is the campaign; ``tests/host/test_faults.py`` the short version. See
docs/reliability.md.
"""
import asyncio
import json
import random
import re
import statistics
import threading
import time

from alabama.board import logwords as lw
from alabama.core import registry as reg
from alabama.core.errors import NotConnected

from . import steps
from .corehost import DOWN, UP, Rule
from .timeline import CORE_TO_SAT, NOTE, SAT_TO_CORE

KINDS = ("cut", "stall", "delay", "flip", "restart")
PHASES = ("handshake", "hello", "idle", "capture", "render", "tool", "paired")

#: Liveness and backoff of the virtual board in a campaign (hal/sim.py knobs): short, so 100+ faults take
#: minutes; the bounds below are derived from these, never fixed numbers.
CAMPAIGN_ENV = {"ALABAMA_SIM_PING_MS": "500", "ALABAMA_SIM_BACKOFF_BASE_MS": "200",
                "ALABAMA_SIM_BACKOFF_CAP_MS": "2000"}
#: The core's Ping interval in a campaign (s).
CORE_PING_S = 1.0
#: The board's handshake/Hello timeout (firmware/satellite/runtime.py _HANDSHAKE_TIMEOUT_MS): a stalled
#: handshake is only noticed after it.
BOARD_HANDSHAKE_TIMEOUT_S = 10.0
#: Slack on every recovery bound for a loaded machine (the bounds are generous on purpose).
SLACK_S = 6.0
#: After recovery, how long the core may take to finish tearing the dead session down (its writer gets
#: 2 s to flush) before what it still holds counts as leaked.
RELEASE_WAIT_S = 4.0


#: The board's log line when a received transport message fails (runtime.run: the NoiseError's class).
BOARD_AEAD_FAILED = re.compile(lw.AEAD_FAILED)


class FaultSpec:
    def __init__(self, kind, phase, **params):
        if kind not in KINDS or phase not in PHASES:
            raise ValueError("unknown fault %s/%s" % (kind, phase))
        self.kind, self.phase, self.params = kind, phase, params

    def __repr__(self):
        return "%s@%s%s" % (self.kind, self.phase, "" if not self.params else " " + json.dumps(self.params))


class FaultResult:
    def __init__(self, spec):
        self.spec = spec
        self.injected = False
        self.recovered = False
        self.recover_s = None
        self.leaks = []             # strings: state the core still held for a dead session
        self.problems = []          # why it did not recover (or what else went wrong)
        self.detail = ""

    @property
    def ok(self):
        return self.injected and self.recovered and not self.leaks and not self.problems

    def as_dict(self):
        return {"kind": self.spec.kind, "phase": self.spec.phase, "params": self.spec.params,
                "injected": self.injected, "recovered": self.recovered,
                "recover_ms": None if self.recover_s is None else round(1000 * self.recover_s, 1),
                "leaks": self.leaks, "problems": self.problems, "detail": self.detail}

    def __repr__(self):
        return "<%r %s %s%s>" % (self.spec, "ok" if self.ok else "FAIL",
                                 "" if self.recover_s is None else "%.0f ms" % (1000 * self.recover_s),
                                 "" if self.ok else " " + "; ".join(self.problems + self.leaks))


def max_attempts(window_s, base_ms, cap_ms):
    """The most connection attempts a board keeping its backoff (firmware runtime.backoff_ms: base doubling,
    capped, full jitter in [d/2, d), from attempt 0) can make in ``window_s``: every wait at its shortest."""
    t, k = 0.0, 0
    while True:
        k += 1                              # an attempt at time t
        t += min(base_ms << min(k - 1, 16), cap_ms) / 2000.0
        if t > window_s:
            return k


class _Trigger:
    """fn(event) on the timeline; the first event matching ``pred`` runs ``action`` (on the thread adding
    rows: the core's loop) and is remembered with its time."""

    def __init__(self, tl, pred, action=None):
        self.tl, self.pred, self.action = tl, pred, action
        self.fired = threading.Event()
        self.t = None
        self.ev = None
        tl.listeners.append(self)

    def __call__(self, ev):
        if self.fired.is_set() or not self.pred(ev):
            return
        self.ev, self.t = ev, self.tl.now()
        self.fired.set()
        self.remove()
        if self.action is not None:
            self.action(ev)

    def remove(self):
        try:
            self.tl.listeners.remove(self)
        except ValueError:
            pass

    def wait(self, timeout):
        ok = self.fired.wait(timeout)
        if not ok:
            self.remove()
        return ok


class FaultBench:
    """One board and one core for a whole campaign (``bench``: an ``alabama.hil.bench.Bench`` on a sim
    target); ``run(spec)`` injects one fault and judges the recovery."""

    def __init__(self, bench, rng=None, env=None, core_ping_s=CORE_PING_S):
        self.hil = bench
        self.tl = bench.tl
        self.rng = rng or random.Random(0)
        self.env = dict(CAMPAIGN_ENV if env is None else env)
        self.core_ping_s = core_ping_s
        self.ping_ms = int(self.env["ALABAMA_SIM_PING_MS"])
        self.base_ms = int(self.env["ALABAMA_SIM_BACKOFF_BASE_MS"])
        self.cap_ms = int(self.env["ALABAMA_SIM_BACKOFF_CAP_MS"])
        self.did = None
        self.wav = None

    # ------------------------------------------------------------------ bounds (from the knobs)
    @property
    def board_dead_s(self):
        """The board's liveness limit (runtime._serve: 3 ping intervals + one max frame at ~100 kbit/s + 1 s)."""
        mfb = self.hil.target.board.limits.get("max_frame_bytes", 4096) if hasattr(self.hil.target, "board") else 4096
        return (3 * self.ping_ms + 1000 + mfb // 12) / 1000.0

    def bound_s(self, spec):
        """How long the board may take from the fault to being admitted again: its longest backoff (a
        failed IK handshake waits at the cap), plus the liveness limit when only silence tells it, plus
        the handshake timeout when the handshake itself stalls, plus slack."""
        b = self.cap_ms / 1000.0 + SLACK_S
        if spec.kind == "stall":
            b += BOARD_HANDSHAKE_TIMEOUT_S if spec.phase in ("handshake", "hello") else self.board_dead_s
        if spec.kind == "restart":
            b += spec.params.get("down_s", 0)
        if spec.kind == "delay":
            b += spec.params.get("for_s", 0) + self.board_dead_s
        return b

    # ------------------------------------------------------------------ setup
    def up(self):
        """Core, relay and a board provisioned IK (paired beforehand), admitted."""
        hil = self.hil
        hil.target.env.update(self.env)
        hil.start_core(ping_interval=self.core_ping_s)
        hil.provision("ik", preconfigure=True)
        self.did = hil.boot()
        self.wav = steps.utterance_wav(hil.workdir / "fault-utterance.wav", speech_ms=900, silence_ms=300)
        return self.did

    @property
    def core(self):
        return self.hil.core

    def _pattern_next(self):
        tgt = self.hil.target
        rec = tgt.stored_record() if hasattr(tgt, "stored_record") else None
        return "IK" if (rec is not None and rec.core_key) or tgt.pinned_core_key() else "XX"

    def _current(self):
        """(server, session_id) of the board's live admitted session, or None."""
        srv = self.core.server
        conn = srv.connections.get(self.did) if srv is not None else None
        if conn is None or conn.session is None or conn.session.phase != "OPEN":
            return None
        return srv, conn.session_id

    def wait_admitted(self, after_t, timeout):
        """The first HelloResponse{accepted} after timeline time ``after_t``."""
        return self.tl.wait(CORE_TO_SAT, "hello_response", pred=lambda e: e.t > after_t and "accepted" in e.summary,
                            timeout=timeout)

    def settle(self, timeout=20.0):
        """Until the board is admitted, idle (no capture, nothing playing) and its session is the only one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cur = self.core.call_soon(self._current) if self.core.server is not None else None
            if cur is not None:
                try:
                    st = self.hil.target.state()
                except Exception:  # noqa: BLE001 — the board is between connections
                    st = None
                if st and st.get("state") == "connected" and not st.get("capture") and not st.get("render"):
                    acc = self.core.accounting()
                    if acc is not None and list(acc["live"]) == [cur[1]]:
                        return True
            time.sleep(0.05)
        return False

    # ------------------------------------------------------------------ rules at triggers
    def _arm_on(self, kind, dir_, frac, spec_note):
        """An action for a _Trigger: arm ``kind`` at ``frac`` of a Noise message in ``dir_`` of the live link.
        Core -> board: the message carrying the frame that triggered (it is not encrypted yet: its index is
        the handshake's one message plus the frames written so far); board -> core: the next message (the
        triggering frame has passed the relay already)."""
        core = self.core

        def act(ev):
            if dir_ == DOWN and ev.dir == CORE_TO_SAT:
                conn = core.server.connections.get(self.did)
                rule = Rule(kind, DOWN, msg=1 + core.frames_out(conn) - 1, frac=frac, on_fire=self._fired_cb)
            else:
                rule = Rule(kind, dir_, frac=frac, on_fire=self._fired_cb)
            core.relay.arm(rule)
            self.tl.note("bench: %r armed after %s (%s)" % (rule, ev.op, spec_note))
        return act

    def _fired_cb(self, link, rule):
        if self._fire_t is None:
            self._fire_t = self.tl.now()
            self._fire_link = link.n

    def _phase_trigger(self, spec, kind):
        """A _Trigger that reaches ``spec.phase`` of a live session and arms ``kind`` there (None: the test
        thread acts at the trigger: delay, restart). Starts whatever the phase needs (button, Invoke)."""
        p, rng = spec.phase, self.rng
        frac = spec.params.setdefault("frac", round(rng.random(), 3))
        arm = (lambda dir_: self._arm_on(kind, dir_, frac, repr(spec))) if kind in ("cut", "stall", "flip") else \
            (lambda dir_: None)
        tgt = self.hil.target
        if p == "idle":
            wait_ms = spec.params.setdefault("after_ms", rng.randrange(0, 1200))
            dir_ = spec.params.setdefault("dir", rng.choice((UP, DOWN)))
            time.sleep(wait_ms / 1000.0)
            # the next message in that direction: a Ping, a PingResponse, a PipelineState
            trig = _Trigger(self.tl, lambda e: e.dir == NOTE and e.summary.startswith("bench: idle"), arm(dir_))
            self.core.call_soon(self.tl.note, "bench: idle for %d ms" % wait_ms)
            return trig
        if p == "capture":
            k = spec.params.setdefault("chunk", rng.randrange(1, 30))
            seen = [0]

            def pred(e):
                if e.dir == SAT_TO_CORE and e.op == "stream_chunk":
                    seen[0] += 1
                    return seen[0] >= k
                return False
            spec.params["dir"] = UP
            trig = _Trigger(self.tl, pred, arm(UP))
            tgt.set_mic(self.wav)
            self._cap_mark = self.tl.mark()
            tgt.press()
            self._pressed = True
            return trig
        if p == "render":
            k = spec.params.setdefault("chunk", rng.randrange(0, 20))
            seen = [0]

            def pred(e):
                if e.dir != CORE_TO_SAT:
                    return False
                if e.op == "media_render_open":
                    return k == 0
                if e.op == "stream_chunk" and e.id % 2 == 0:
                    seen[0] += 1
                    return seen[0] >= k
                return False
            spec.params["dir"] = DOWN
            trig = _Trigger(self.tl, pred, arm(DOWN))
            tgt.set_mic(self.wav)
            tgt.press()
            time.sleep(0.5)
            tgt.release()
            return trig
        if p == "tool":
            side = spec.params.setdefault("at", rng.choice(("invoke", "tool_result")))
            spec.params["dir"] = DOWN if side == "invoke" else UP
            if side == "invoke":
                trig = _Trigger(self.tl, lambda e: e.dir == CORE_TO_SAT and e.op == "invoke", arm(DOWN))
            else:      # the board's ToolResult arrived: the next board message (its answer is in, the core moves on)
                trig = _Trigger(self.tl, lambda e: e.dir == SAT_TO_CORE and e.op == "tool_result", arm(UP))
            srv, loop = self.core.server, self.core.loop
            self._invoke = asyncio.run_coroutine_threadsafe(srv.invoke(self.did, "device.info", "{}", timeout=30.0),
                                                            loop)
            return trig
        raise ValueError(p)

    # ------------------------------------------------------------------ one fault
    def run(self, spec):
        r = FaultResult(spec)
        self._fire_t = None
        self._fire_link = None
        self._pressed = False
        self._invoke = None
        self._cap_mark = None
        hil = self.hil
        if not self.settle():
            r.problems.append("the bench could not reach a settled, admitted board before the fault")
            return r
        before = self.core.call_soon(self._current)
        self._log_mark = len(hil.target.log_text())
        connects0 = len(self.core.link_events)
        self.tl.note("fault: %r" % spec)
        try:
            getattr(self, "_inject_" + spec.kind)(spec, r)
        finally:
            if self._pressed:
                try:
                    hil.target.release()
                except Exception:  # noqa: BLE001 — the board may be mid-reconnect; the release is best effort
                    pass
        if not r.injected:
            r.problems.append("the fault never fired (the phase was not reached)")
            return r
        t_fault = self._fire_t
        # --- recovery: admitted again after the fault (a delay may leave the session alive instead)
        if spec.kind == "delay":
            survived = self.core.call_soon(self._current) == before
            if survived:
                r.recovered = True
                r.detail = "the session survived the delay"
        if not r.recovered:
            acc = self.wait_admitted(t_fault, self.bound_s(spec))
            if acc is None:
                r.problems.append("not admitted again within %.1f s of the fault (bound: backoff cap %.1f s%s + %.0f s "
                                  "slack)" % (self.bound_s(spec), self.cap_ms / 1000.0,
                                              " + liveness %.1f s" % self.board_dead_s if spec.kind == "stall" else "",
                                              SLACK_S))
            else:
                r.recovered = True
                r.recover_s = acc.t - t_fault
                self._acc_row = acc
        self._check_outcome(spec, r, before, connects0)
        if r.recovered:
            if not self.settle(timeout=RELEASE_WAIT_S + 10):
                r.problems.append("the board did not settle after recovering")
            self._check_leaks(r, before)
        self.tl.note("fault done: %r" % r)
        return r

    def _wait_fire(self, trig, r, timeout=15.0):
        if not trig.wait(timeout):
            return False
        deadline = time.monotonic() + timeout
        while self._fire_t is None and time.monotonic() < deadline:   # the armed rule fires on the next message
            time.sleep(0.01)
        r.injected = self._fire_t is not None
        return r.injected

    # -- kinds
    def _inject_cut(self, spec, r):
        self._inject_rule("cut", spec, r)

    def _inject_stall(self, spec, r):
        self._inject_rule("stall", spec, r)

    def _inject_flip(self, spec, r):
        self._inject_rule("flip", spec, r)

    def _inject_rule(self, kind, spec, r):
        if spec.phase in ("handshake", "hello"):
            return self._inject_next_link(kind, spec, r)
        if spec.phase == "paired":
            return self._inject_paired(kind, spec, r)
        trig = self._phase_trigger(spec, kind)
        self._wait_fire(trig, r)

    def _inject_next_link(self, kind, spec, r):
        """In the next connection's handshake (or its Hello / HelloResponse message): the rule is armed for
        the next link, then the live one is cut to make the board reconnect (that cut is not the fault)."""
        rng = self.rng
        pat = self._pattern_next()
        dir_ = spec.params.setdefault("dir", rng.choice((UP, DOWN)))
        # Board -> core, the binding's protocol-name offer comes first (noise/transport.py start()), then the
        # pattern's messages: IK -> name, (e, es, s, ss) / <- (e, ee, se);  XX -> name, (e) / <- (e, ee, s, es) / -> (s, se)
        hs_up = 2 if pat == "IK" else 3
        if spec.phase == "handshake":
            msg = rng.randrange(hs_up) if dir_ == UP else 0
        else:
            msg = hs_up if dir_ == UP else 1
        spec.params.setdefault("msg", msg)
        frac = spec.params.setdefault("frac", round(rng.random(), 3))
        spec.params["pattern"] = pat
        self.core.arm_next(Rule(kind, dir_, msg=spec.params["msg"], frac=frac, on_fire=self._fired_cb))
        self.core.cut()
        deadline = time.monotonic() + self.cap_ms / 1000.0 + SLACK_S
        while self._fire_t is None and time.monotonic() < deadline:
            time.sleep(0.01)
        r.injected = self._fire_t is not None

    def _inject_paired(self, kind, spec, r):
        """The token path (§7.3): the board is made a fresh token-holding guest (trust reset, pin removed,
        a record with a new token and no core key), reconnects over XX, and the fault lands inside the
        Noise message that carries the core's Paired: the board never sees it."""
        hil, core = self.hil, self.core
        did = self.did
        hil.registry(lambda reg_: reg_.set_trust(did, reg.GUEST))
        rec = hil.record(core_key=False, token=hil.mint_token())
        hil.target.provision(rec, fresh_identity=False)
        frac = spec.params.setdefault("frac", round(self.rng.random(), 3))
        trig = _Trigger(self.tl, lambda e: e.dir == CORE_TO_SAT and e.op == "paired",
                        self._arm_on(kind, DOWN, frac, repr(spec)))
        core.cut()
        self._paired_mark = self.tl.mark()
        self._wait_fire(trig, r, timeout=self.cap_ms / 1000.0 + SLACK_S + 5)

    def _inject_delay(self, spec, r):
        up_s = spec.params.setdefault("up_ms", self.rng.randrange(20, 400)) / 1000.0
        down_s = spec.params.setdefault("down_ms", self.rng.randrange(20, 400)) / 1000.0
        for_s = spec.params.setdefault("for_s", 2.0)
        if spec.phase in ("handshake", "hello", "paired"):
            raise ValueError("delay applies to a live session's phases")
        trig = self._phase_trigger(spec, "delay")
        if not trig.wait(15.0):
            return
        self.core.delay(up_s, down_s)
        self._fire_t = self.tl.now()
        r.injected = True
        time.sleep(for_s)
        self.core.delay(0.0, 0.0)
        time.sleep(0.5)

    def _inject_restart(self, spec, r):
        down_s = spec.params.setdefault("down_s", round(self.rng.uniform(0.0, 2.5), 2))
        if spec.phase in ("handshake", "hello", "paired"):
            raise ValueError("restart applies to a live session's phases")
        trig = self._phase_trigger(spec, "restart")
        if not trig.wait(15.0):
            return
        old = self.core.server
        self._fire_t = self.tl.now()
        r.injected = True
        n0 = len(self.core.link_events)
        t0 = time.monotonic()
        self.core.restart(down_s=down_s)
        window = time.monotonic() - t0
        attempts = sum(1 for e in self.core.link_events[n0:] if e[0] == "connect")
        allowed = max_attempts(window, self.base_ms, self.cap_ms) + 1
        r.detail = "%d connection attempt(s) while the core was down %.2f s (backoff allows <= %d)" % (
            attempts, window, allowed)
        spec.params["attempts_down"] = attempts
        if attempts > allowed:
            r.problems.append("reconnect storm: %d connection attempts in %.2f s with the core down; a board keeping "
                              "its backoff (base %d ms, cap %d ms) makes at most %d" % (
                                  attempts, window, self.base_ms, self.cap_ms, allowed))
        self._settle_invoke(spec, r)
        acc = self.core.call_soon(old.state_accounting)
        if acc["live"]:
            r.leaks.append("the stopped core still serves sessions %s" % sorted(acc["live"]))
        self._leaks_from(acc, r, live_ok=())

    # ------------------------------------------------------------------ judging
    def _check_outcome(self, spec, r, before, connects0):
        hil = self.hil
        if spec.kind == "flip" and r.recovered and r.recover_s is not None:
            # AEAD failure ends the connection at once (R5-a), not by liveness: the faulted link closed quickly
            closes = [e for e in self.core.link_events[connects0:] if e[0] == "closed"]
            if not closes:
                r.problems.append("the corrupted connection was never closed")
            if spec.phase not in ("handshake", "hello") and spec.params.get("dir", DOWN) == UP:
                pass
        if spec.kind == "flip" and spec.phase not in ("handshake", "hello", "paired"):
            # which side must have noticed: the receiver of the flipped message
            dir_ = spec.params.get("dir")
            if dir_ is None:
                dir_ = UP if spec.phase == "capture" else DOWN if spec.phase == "render" else None
            if dir_ == UP and before is not None:
                reps = [x for x in hil.reports() if x["session"] == before[1]]
                if reps and not any(v["rule"] == "R5-a" for v in reps[-1].get("violations", [])):
                    r.problems.append("board -> core byte flipped but the core's report has no R5-a decrypt failure")
        if spec.kind == "stall" and spec.phase not in ("handshake", "hello") and self._fire_link is not None:
            # R10.1-b: the board's own liveness check must end a stalled session, not the core's (slower) one
            closes = [e for e in self.core.link_events[connects0:] if e[0] == "closed" and e[1] == self._fire_link]
            by = closes[0][3] if closes and len(closes[0]) > 3 else None
            if by != "board":
                r.problems.append("R10.1-b: the stalled connection was not closed by the board's liveness check "
                                  "(closed by %s)" % (by or "nobody"))
        if spec.kind == "flip" and spec.params.get("dir") == DOWN and spec.phase not in ("handshake", "hello"):
            if not BOARD_AEAD_FAILED.search(hil.target.log_text()[self._log_mark:]):
                r.problems.append("R5-a: core -> board byte flipped but the board logged no Noise failure")
        if spec.phase == "capture" and r.recovered:
            self._check_live_capture(r)
        self._settle_invoke(spec, r)
        if spec.phase == "paired" and r.recovered:
            key = hil.core.public_key
            deadline = time.monotonic() + self.cap_ms / 1000.0 + SLACK_S
            while time.monotonic() < deadline and hil.target.pinned_core_key() != key:
                time.sleep(0.05)
            if hil.target.pinned_core_key() != key:
                r.problems.append("the board was admitted again but never received Paired: it never pinned the "
                                  "core key (its token is spent, so it would stay an XX guest)")
            rec = hil.target.stored_record()
            if rec is not None and rec.pairing_token:
                r.problems.append("the board still stores its pairing token after Paired")

    def _settle_invoke(self, spec, r):
        """The Invoke of a mid-tool-call fault: its caller must get an answer or NotConnected, never hang
        (the core resolves a dead session's waiters); the bench then drops its reference to the outcome."""
        if self._invoke is None:
            return
        try:
            self._invoke.result(self.bound_s(spec) + 10)
            answered = True
        except NotConnected:
            answered = False
        except Exception as e:  # noqa: BLE001 — a hang (TimeoutError) or anything else is a problem
            answered = False
            r.problems.append("the Invoke's caller got %s: %s (expected its answer or NotConnected)"
                              % (type(e).__name__, e))
        if spec.params.get("at") == "invoke" and answered and spec.kind in ("cut", "stall", "flip"):
            r.problems.append("the Invoke was answered although its message was %s" % spec.kind)
        self._invoke = None      # the outcome's traceback references the connection: let it go

    def _check_live_capture(self, r):
        """R10.4-e: the LIVE capture cut mid-way carried no correlation_ref and died with its connection:
        in the session the board came back with, no frame continues it (no chunk, end or cancel on an id
        that session never opened, no CaptureOpen carrying a correlation_ref), and the board is idle."""
        acc = getattr(self, "_acc_row", None)
        if self._cap_mark is not None:
            cos = self.tl.find(SAT_TO_CORE, "capture_open", after=self._cap_mark)
            if cos and cos[0].env is not None and cos[0].env.capture_open.correlation_ref:
                r.problems.append("R10.4-e: the LIVE CaptureOpen carried correlation_ref %r"
                                  % cos[0].env.capture_open.correlation_ref)
        if acc is None:
            return
        time.sleep(0.3)
        start = self.tl.index_of(acc)
        opened = set()
        for e in self.tl.find(SAT_TO_CORE, after=start, pred=lambda e: e.session == acc.session):
            if e.op == "capture_open":
                opened.add(e.id)
                if e.env is not None and e.env.capture_open.correlation_ref:
                    r.problems.append("R10.4-e: a CaptureOpen with correlation_ref %r after the reconnect"
                                      % e.env.capture_open.correlation_ref)
            elif e.op in ("stream_chunk", "stream_end", "stream_cancel") and e.id not in opened:
                r.problems.append("R10.4-e: the board continued a capture of the dead connection: %s on id %d in "
                                  "the new session" % (e.op, e.id))
                break
        try:
            st = self.hil.target.state()
        except Exception as e:  # noqa: BLE001
            st = {"error": str(e)}
        if st.get("capture") or st.get("mic_open"):
            r.problems.append("R10.4-e: after the reconnect the board still has capture %s open (mic %s)"
                              % (st.get("capture"), st.get("mic_open")))

    def _check_leaks(self, r, before):
        """After recovery: the core serves exactly the board's new session; every ended session is gone
        (collected) and held nothing; no registry entry, report or DEFERRED hold outlives its session."""
        cur = self.core.call_soon(self._current)
        if cur is None:
            r.problems.append("no live session after recovery")
            return
        deadline = time.monotonic() + RELEASE_WAIT_S
        while True:
            acc = self.core.accounting()
            trial = FaultResult(r.spec)
            self._leaks_from(acc, trial, live_ok=(cur[1],))
            if not trial.leaks or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        r.leaks.extend(trial.leaks)

    @staticmethod
    def _leaks_from(acc, r, live_ok):
        for sid, held in acc["live"].items():
            if sid not in live_ok:
                r.leaks.append("session %s is still served although its connection is gone: %s" % (
                    sid, {k: v for k, v in held.items() if v}))
        for sid, held in acc["dead"].items():
            extra = {k: v for k, v in held.items() if v}
            r.leaks.append("ended session %s is still referenced (not collectable)%s" % (
                sid, ", holding %s" % extra if extra else ""))
        for did, sid in acc["registry"].items():
            if sid not in live_ok:
                r.leaks.append("registry entry %s... -> %s outlives its session" % (did[:8], sid))
        for sid in acc["live_reports"]:
            if sid not in live_ok:
                r.leaks.append("report of %s still live" % sid)
        if acc["conn_tasks"] > len(live_ok):
            r.leaks.append("%d connection tasks for %d live session(s)" % (acc["conn_tasks"], len(live_ok)))
        holds = sum(h.get("deferred_holds", 0) for s, h in acc["live"].items() if s in live_ok)
        if acc["deferred"]["held"] > holds:
            r.leaks.append("%d DEFERRED entries held by no live capture" % (acc["deferred"]["held"] - holds))


# ---------------------------------------------------------------------------------------- campaign
#: The default campaign: (kind, phase, count). >= 100 cuts over every phase, plus stalls, flips, delays and
#: core restarts mid-exchange.
PLAN = [("cut", "handshake", 18), ("cut", "hello", 14), ("cut", "idle", 16), ("cut", "capture", 16),
        ("cut", "render", 16), ("cut", "tool", 14), ("cut", "paired", 8),
        ("stall", "idle", 3), ("stall", "capture", 3), ("stall", "render", 3), ("stall", "tool", 2),
        ("stall", "hello", 1),
        ("flip", "handshake", 2), ("flip", "hello", 2), ("flip", "idle", 4), ("flip", "capture", 3),
        ("flip", "render", 3), ("flip", "tool", 2),
        ("delay", "idle", 2), ("delay", "capture", 2), ("delay", "render", 2),
        ("restart", "idle", 3), ("restart", "capture", 3), ("restart", "render", 3), ("restart", "tool", 2)]

#: The short version (tests/host/test_faults.py): one of each phase and kind.
SHORT_PLAN = [("cut", "handshake", 1), ("cut", "hello", 1), ("cut", "idle", 1), ("cut", "capture", 1),
              ("cut", "render", 1), ("cut", "tool", 1), ("cut", "paired", 1), ("stall", "idle", 1),
              ("flip", "idle", 1), ("flip", "capture", 1), ("delay", "render", 1), ("restart", "capture", 1)]


def specs(plan, rng, scale=1.0):
    """The fault list of a plan, shuffled with ``rng`` (each fault's random placement is drawn when it runs)."""
    out = []
    for kind, phase, n in plan:
        out += [FaultSpec(kind, phase) for _ in range(max(1, round(n * scale)))]
    rng.shuffle(out)
    return out


def _pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def table(results):
    """Rows (kind, phase, injected, recovered, p50 ms, p99 ms, leaked) plus a total row."""
    groups = {}
    for r in results:
        groups.setdefault((r.spec.kind, r.spec.phase), []).append(r)
    order = {k: i for i, k in enumerate(KINDS)}
    porder = {p: i for i, p in enumerate(PHASES)}
    rows = []

    def row(kind, phase, rs):
        rec = [1000 * r.recover_s for r in rs if r.recovered and r.recover_s is not None]
        return {"kind": kind, "phase": phase, "injected": sum(r.injected for r in rs),
                "recovered": sum(r.injected and r.recovered and not r.problems for r in rs),
                "p50_ms": _pct(rec, 50), "p99_ms": _pct(rec, 99), "leaked": sum(bool(r.leaks) for r in rs)}
    for (kind, phase), rs in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], porder[kv[0][1]])):
        rows.append(row(kind, phase, rs))
    for kind in KINDS:
        rs = [r for r in results if r.spec.kind == kind]
        if rs:
            rows.append(row(kind, "all", rs))
    rows.append(row("all", "all", results))
    return rows


def format_table(rows):
    def ms(v):
        return "-" if v is None else "%.0f" % v
    out = ["| fault | phase | injected | recovered | recover p50 ms | recover p99 ms | leaked |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        bold = r["phase"] == "all"
        name = ("**%s**" % r["kind"]) if bold else r["kind"]
        out.append("| %s | %s | %d | %d | %s | %s | %d |" % (name, r["phase"], r["injected"], r["recovered"],
                                                          ms(r["p50_ms"]), ms(r["p99_ms"]), r["leaked"]))
    return "\n".join(out)


def summary(results):
    inj = sum(r.injected for r in results)
    ok = sum(r.ok for r in results)
    rec = [1000 * r.recover_s for r in results if r.recovered and r.recover_s]
    return {"faults": len(results), "injected": inj, "ok": ok, "leaked": sum(bool(r.leaks) for r in results),
            "cuts": sum(r.spec.kind == "cut" and r.injected for r in results),
            "recover_p50_ms": _pct(rec, 50), "recover_p99_ms": _pct(rec, 99),
            "recover_mean_ms": statistics.mean(rec) if rec else None}
