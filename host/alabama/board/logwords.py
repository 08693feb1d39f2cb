"""The board's serial-log wording that the tests, the soak tool and the HIL bench wait on: one table.

Each name is a regular expression (a string, for ``VirtualBoard.wait_log`` / ``Target.log_wait`` /
``re.compile``) matching a line the firmware logs; the comment names where it is logged. Runtime lines are
logged as ``"sat: " + line`` (firmware/satellite/runtime.py Runtime.log). When the firmware's wording changes,
change it here, once. Functions build the patterns that carry an id, a host or a reason; an id left out
becomes a ``(\\d+)`` group.
"""
import re


def _id(n):
    return r"(\d+)" if n is None else "%d" % n


# --------------------------------------------------------------------- connection (runtime.py connect/serve)
IDLE = r"^sat: idle$"                                       # Runtime: nothing to do until the next gesture
ACCEPTED = r"accepted"                                      # "accepted: core max_frame_bytes ..."
SAT_ACCEPTED = r"sat: accepted"
PAIRED = r"paired: core key"                                # "paired: core key <hex> pinned, token dropped; ..."
HANDSHAKE_DONE = r"handshake done \((\w+)\)"                # "handshake done (IK), core key <hex>"
IK_FAILED = r"IK FAILED"                                    # "IK FAILED at <host>: <why>"
REJECTED = r"REJECTED by the core"                          # closed mode, device unknown
VERSION_MISMATCH = r"VERSION MISMATCH: .*update the firmware"
CONNECTION_LOST = r"connection lost"                        # "connection lost (<code>): <why>"
LINK_DOWN = r"sat: connection lost|sat: connection failed"  # either way the link went
RECONNECTING = r"reconnecting in"                           # "reconnecting in <ms> ms (attempt <n>)"
HALTED = r"halted"                                          # "halted: waiting for re-provisioning ..."
CLOCK_OFFSET = r"sat: clock offset"                         # "clock offset <us> us rtt <us> us" (device.py)


def connecting(host=None, port=None, pattern="IK"):
    """ "connecting to <host>:<port> with Noise <IK|XX> (device key ...)"; no host: any address."""
    where = ".*" if host is None else re.escape(host) + ("" if port is None else ":%d" % port)
    return r"connecting to %s with Noise %s" % (where, pattern)


def connection_lost(code):
    return r"connection lost \(%s\)" % code


def ik_failed_at(host):
    return r"IK FAILED at %s" % re.escape(host)


# ------------------------------------------------------------------- captures and renders (device.py Satellite)
CAPTURE_OPENED_BUTTON = r"capture (\d+) opened \(button\)"
CAPTURE_OPENED_AMBIENT = r"capture (\d+) opened \(ambient\)"
CAPTURE_OPENED_REQUESTED = r"capture \d+ opened \(requested, answers request \d+\)"
CAPTURE_OPENED_WAKE = r"capture (\d+) opened \(wake word\)"

# ------------------------------------------------------------------- the wake word (device.py, runtime.wake_engine)
WAKE_LISTENING = r"wake: model (\S+) listening for (.+)"            # runtime.wake_engine
WAKE_DETECTED = r"wake word (\S+) detected"
WAKE_CANNOT_RUN = r"wake: cannot run \((.*)\): the button captures instead"
WAKE_BARGE_IN = r"barge-in over render (\d+) \(wake word\)"


def capture_done(cid=None):
    """ "capture <id> done: Response" or "... done: Error ..." (any outcome)."""
    return r"capture %s done" % _id(cid)


def capture_response(cid=None):
    return r"capture %s done: Response" % _id(cid)


def capture_ended(by, reason):
    """ "capture <id> ended by us|core (<REASON>)"."""
    return r"capture (\d+) ended by %s \(%s\)" % (by, reason)


def capture_cancelled(cid, by, reason=None):
    """ "capture <id> cancelled by us|core (<REASON>)"."""
    return r"capture %d cancelled by %s" % (cid, by) + ("" if reason is None else r" \(%s\)" % reason)


RENDER_OPENED = r"render (\d+) opened"


def render_cancelled(rid, reason):
    """ "render <id> cancelled (<REASON>) after <n> frames"."""
    return r"render %d cancelled \(%s\) after (\d+) frames" % (rid, reason)


def playback_done(rid=None):
    """ "playback done <render id> frames <n>"; the frame count is the last group, also named "frames"."""
    return r"playback done %s frames (?P<frames>\d+)" % _id(rid)


def barge_in(rid):
    return r"barge-in over render %d" % rid


MIC_BACK = r"half duplex: mic back on for capture"          # half-duplex board after a playback
REQUEST_DECLINED_STREAMING = r"request \d+ declined: a capture is already streaming"


def tx(op, env_id=0):
    """ "tx <op> id <n>": an envelope the board sent (device.Satellite's frame trace)."""
    return r"tx %s id %d" % (op, env_id)


def led(phase):
    return r"led %s" % phase


AEAD_FAILED = r"connection failed \((?:Noise|Transport)Error\)"   # a transport message failed to open


# ------------------------------------------------------------------- DEFERRED recordings (deferred.py)
DEFERRED_START = (r"deferred: recording (\S+) \(core out of reach\): first chunk at (\d+) us on the device "
                  r"clock, local RTC (-?\d+) us")
DEFERRED_QUEUED = (r"deferred: recording (\S+) queued: (\d+) chunks \((\d+) stored, (\d+) recordings, "
                   r"(\d+) bytes, (\d+) dropped\)")
DEFERRED_DROPPED = r"deferred: ring full \(.*\): oldest recording (\S+) dropped, (\d+) chunks \((\d+) dropped"
DEFERRED_DELIVERED = r"deferred: (\S+) delivered \((\d+) chunks\)"


# ----------------------------------------------------------------- provisioning (runtime.py, provision/listen.py)
NO_RECORD = r"no provisioning record"
LISTENING = r"provision: listening mode"
HEARD = r"provision: transmission heard"
GESTURE_TO_LISTENING = r"provision: button gesture: leaving the core for listening mode"
NEW_RECORD = r"new provisioning record: connecting again"


def record_stored(host, port):
    """ "provision: record stored: core <host>:<port>, ..." (what follows says key and token)."""
    return r"provision: record stored: core %s:%d, " % (re.escape(host), port)


# ---------------------------------------------------------------------------- health, OTA, display, the sim
HEALTH_BOOT = r"event device\.health \(boot\)"
SIM_DUPLEX = r"sim: board sim, (\w+) duplex"                # hal/sim.py at start
BOOT = r"\[virtual board\] boot \d+: .*\(pid \d+\)$"         # alabama.board.sim, each (re)start of main.py
WDT_ARMED = r"sat: watchdog armed: (\d+) ms"                  # runtime.py _arm, when run() starts
WDT_RESET = r"\[virtual board\] watchdog: not fed for \d+ ms"  # alabama.board.sim's simulated watchdog fired


def ota_refused(reason):
    """ "ota: update refused (<REASON>): ...; the running firmware is untouched" (ota.py)."""
    return r"update refused \(%s\)" % reason


def image_painted(image_id, w, h):
    """ "display: image <id> <w>x<h> painted" (display.py)."""
    return r"display: image %d %dx%d painted" % (image_id, w, h)
