# A firmware on trial proves itself (docs/ota.md, "The trial"). Responsible for: timing a trial after an
# over-the-air update (otaboot state `trial`: a module set; `image_trial`: an app image) - it is confirmed only
# once a session has stayed healthy for the confirmation window (accepted for confirm_ms, at least MIN_ROUNDS
# Ping rounds answered, the serve loop running, which is what feeds the watchdog, and not ended by an error),
# and rolled back by the firmware itself when that has not happened within its deadline (deadline_ms, counted
# across its boots in ota/state.json). Not for: the swap, the rollback's renames, the bootloader's rule or the
# confirmation itself (otaboot), the session's rules (session.py), the network (runtime.py calls tick() from
# every loop that feeds the watchdog, session()/ended() around a session and proven() from the serve loop).
# Loaded only while a trial runs (runtime.py looks at ota/state.json first: a board that never took an update
# does not even import it); dropped at the confirmation. Both windows come from the board file's `trial`
# (host/alabama/board/boards.py validates them).
import time

from micropython import const

import otaboot as B

CONFIRM_MS = const(60000)     # a session healthy this long proves a trial (ESPHome's safe_mode boot_is_good_after)
DEADLINE_MS = const(300000)   # a trial not proven within this much running time, over all its boots, is rolled back
MIN_ROUNDS = const(2)         # Ping rounds the core answered in that session (device.Satellite.rounds)
SAVE_MS = const(10000)        # the trial's running time is written to ota/state.json this often (flash wear)


def open_trial(board, now, log, reset=None):
    """A Trial when the running firmware is on trial (a set or an image), else None. (An image in any other state
    was confirmed before, or is the one flashed over USB: otadata holds it VALID, or holds nothing for it.)"""
    st = B.state()
    kind = st.get("state")
    if kind != "trial" and kind != "image_trial":
        return None
    t = board.get("trial") or {}
    c, d = t.get("confirm_ms", CONFIRM_MS), t.get("deadline_ms", DEADLINE_MS)
    if type(c) is not int or type(d) is not int or c < 1000 or d <= c:   # deployed without `alabama board validate`
        log("board.json trial %r: not confirm_ms >= 1000 < deadline_ms; using %d and %d" % (t, CONFIRM_MS, DEADLINE_MS))
        c, d = CONFIRM_MS, DEADLINE_MS
    return Trial(st, c, d, now, log, reset or B.reset)


class Trial:
    """st: the trial's state record (otaboot). now: ticks_ms. reset(note): otaboot.reset on the board (a
    parameter: tests pass their own)."""

    def __init__(self, st, confirm_ms, deadline_ms, now, log, reset):
        self.st = st
        self.confirm_ms = confirm_ms
        self.deadline_ms = deadline_ms
        self.spent = st.get("trial_ms", 0)        # running time of its earlier boots
        self.t0 = now
        self.saved = now
        self.t_session = None
        self.log = log
        self.reset = reset

    def elapsed(self, now):
        return self.spent + time.ticks_diff(now, self.t0)

    def tick(self, now):
        """From every loop that feeds the watchdog (Runtime._feed): True once the deadline has passed (the caller
        then calls expire()). Writes the running time now and then, so the deadline survives a reset. Allocates
        only when it writes (every SAVE_MS while a trial runs, never after it)."""
        e = self.elapsed(now)
        if e >= self.deadline_ms:
            return True
        if time.ticks_diff(now, self.saved) >= SAVE_MS:
            self.saved = now
            self.st["trial_ms"] = e
            B.set_state(self.st)
        return False

    def session(self, now):
        """A session was accepted: its confirmation window starts."""
        self.t_session = now

    def ended(self):
        """The session ended (an error, the link, the core): the next one starts the window again."""
        self.t_session = None

    def proven(self, now, rounds):
        """From the serve loop: the session has been healthy for the whole window, with `rounds` Ping rounds."""
        t = self.t_session
        return t is not None and rounds >= MIN_ROUNDS and time.ticks_diff(now, t) >= self.confirm_ms

    def expire(self, now):
        """The deadline passed unproven: record why and reset. A set is put back by otaboot at the next boot
        (state rollback); an image is rolled back by the bootloader, which aborts an app still PENDING_VERIFY at
        a reset (ESP-IDF app rollback), and otaboot then reports it."""
        st = self.st
        st["trial_ms"] = self.elapsed(now)
        st["error"] = "was not confirmed within its %d s deadline (no session stayed healthy for %d s)" % (
            self.deadline_ms // 1000, self.confirm_ms // 1000)
        if st.get("state") == "trial":
            st["state"] = "rollback"
        else:
            st["expired"] = True
        B.set_state(st)
        self.log("trial firmware %s %s: rolling back" % (st.get("version"), st["error"]))
        self.reset("trial")
