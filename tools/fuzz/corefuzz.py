"""Fuzz target over the reference core (CPython): the frame reader, CoreSession and the host Noise reader.

Inputs are RECORDS (bytes) that fully determine one execution, so findings replay as fixtures:

    core   b0 scenario | b1 via Noise (0/1) | b2 feed step (0 = whole) | plaintext frames, or TCP bytes

Scenario 0 is a session before its Hello, 1 is after an accepted Hello, 2 adds an open satellite capture
(id 3), a core render (id 2), a core Invoke (id 4) and a core Ping (id 6). With b1 = 1 the bytes are Noise
transport messages under NOISE_KEY from nonce 0, fed to a core-side host NoiseConnection past its handshake
(the harness installs the cipher states the handshake would have made), and its plaintext is fed on.

Outcome classes: the core's ``receive_data`` returns events (decoded), queues typed ``Error`` frames, or
closes the session (``phase == "CLOSED"``: the server drops the connection); the Noise reader raises a typed
``NoiseError`` (clean close). Anything else escaping, an internal table outgrowing its bound, or a spec
answer missing (a satellite Ping without PingResponse, a CaptureOpen with neither CaptureOpened nor Error,
a core-only op without INVALID_REQUEST, a chunk on a never-opened id without UNKNOWN_STREAM) is a Crash.
This module is written for CPython only; it reuses the structure-aware generators of fwfuzz.
"""
import logging

import fwfuzz
from fwfuzz import Crash, Rng

from google.protobuf.message import DecodeError

from alabama.core import session as CS
from alabama.noise import state as HNS
from alabama.noise import transport as HNT
from alabama.v1 import envelope_pb2, operations_pb2 as ops
from alabama.wire import frame as W
from satellite.wire import frame as FF
from satellite.wire import pb

# The conformance report logs every violation; a fuzzer makes millions of them on purpose: quiet while an
# input runs (run), never at import, so a test process that imports this keeps the core's warnings.
_ALABAMA_LOG = logging.getLogger("alabama")

SAT_ARMS = ("hello", "error", "ping", "ping_response", "stream_chunk", "stream_end", "stream_cancel",
            "capture_open", "playback_done", "response", "text_input", "event", "upload_open", "stop",
            "tool_result", "setting_state", "presence", "invoke", "media_render_open")
CORE_ONLY = CS.CORE_ONLY_OPS
SCENARIOS = 3
_SCENARIO_IDS = ({}, {1}, {1, 2, 3, 4, 6})
_E = ops.ErrorCode


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _admit(surface):
    return CS.Admission(CS.Admission.ACCEPT, trust="paired")


_HELLO = None


def hello_frame():
    """The satellite's real Hello (firmware Session + codec) as one frame."""
    global _HELLO
    if _HELLO is None:
        from satellite import session as S
        s = S.Session(fwfuzz.surface())
        _HELLO = FF.encode_frame(pb.encode(s.hello()))
    return _HELLO


def _frame(env):
    return W.encode_frame(env.SerializeToString())


def session_for(scenario):
    clk = _Clock()
    wall = [1000]

    def wall_us():
        wall[0] += 7
        return wall[0]

    c = CS.CoreSession(_admit, clock=clk, wall_us=wall_us, max_frame_bytes=4096, max_concurrent_streams=4)
    if scenario:
        c.receive_data(hello_frame())
        if scenario == 2:
            co = envelope_pb2.Envelope(id=3)
            co.capture_open.trigger = ops.BUTTON
            c.receive_data(_frame(co))
            fmt = fwfuzz.surface().capability(2).speaker.format
            from alabama.v1 import content_pb2
            f = content_pb2.AudioFormat(encoding=fmt.encoding, sample_rate=fmt.sample_rate, channels=fmt.channels,
                                        sample_bits=fmt.sample_bits)
            c.open_media_render(f)          # 2
            c.invoke("device.info")         # 4
            c.ping()                        # 6
        c.data_to_send()
    return c


NOISE_KEY = fwfuzz.NOISE_KEY


def _host_receiver():
    n = HNT.NoiseConnection(False, fwfuzz.CORE_PRIV)
    rx = HNS.CipherState()
    rx.initialize_key(NOISE_KEY)
    n._recv = rx
    n._send = HNS.CipherState()
    n._started = True
    n._offer_seen = True
    n.pattern = "IK"
    n.handshake_done = True
    return n


_TX = HNS.CipherState()
_TX.initialize_key(NOISE_KEY)


def _seal(n, plain):
    _TX.set_nonce(n)
    _TX._failed = False
    return _TX.encrypt_with_ad(b"", bytes(plain))


def gen_core(r):
    sc = r.below(SCENARIOS) if r.below(8) else 0
    if sc == 0 and r.below(8) == 0:
        sc = 1
    via = 1 if r.below(4) == 0 else 0
    step = r.pick(fwfuzz._STEPS)
    plain = bytearray()
    if sc == 0 and r.below(2):
        h = bytearray(hello_frame())
        plain.extend(fwfuzz.mutate_pb(r, h) if r.below(2) else h)
    plain.extend(fwfuzz.gen_frames(r, 4096, SAT_ARMS))
    if not via:
        rec = bytearray((sc, 0, step))
        rec.extend(plain)
        return rec
    out = bytearray()
    p = 0
    i = 0
    while p < len(plain) or i == 0:
        k = 1 + r.below(300)
        m = bytearray(_seal(i, plain[p:p + k]))
        p += k
        i += 1
        j = r.below(10)
        if j == 0:
            m[r.below(len(m))] ^= 1 << r.below(8)
        elif j == 1:
            m = m[:r.below(len(m) + 1)]
        n = len(m)
        if r.below(12) == 0:
            n = r.pick((0, 1, 15, 16, n + 1, 0xFFFF))
        out.append((n >> 8) & 0xFF)
        out.append(n & 0xFF)
        out.extend(m)
    rec = bytearray((sc, 1, step))
    rec.extend(out)
    return rec


def _envelopes(data):
    """The Envelopes a correct frame reader finds in data (whole, well-formed frames only)."""
    d = W.FrameDecoder(4096)
    d.set_limit(4096)
    out = []
    try:
        d.feed(bytes(data))
        for ev in d:
            if isinstance(ev, W.Oversize):
                return out
            env = envelope_pb2.Envelope()
            env.ParseFromString(ev.header)
            out.append(env)
    except (W.FrameError, DecodeError):
        pass
    return out


def run_core(rec):
    if len(rec) < 3:
        return "empty"
    sc = rec[0] % SCENARIOS
    c = session_for(sc)
    was_open = c.phase == "OPEN"
    via = rec[1] & 1
    step = rec[2]
    fed = bytearray()
    last = ["none"]

    def feed_plain(data):
        fed.extend(data)
        evs = c.receive_data(bytes(data))
        if evs:
            last[0] = "event:" + type(evs[-1]).__name__

    outcome = None
    if via:
        n = _host_receiver()

        def feed_tcp(data, a, b):
            n.receive(bytes(data[a:b]))
            pt = n.read_plaintext()
            if pt:
                feed_plain(pt)
        try:
            fwfuzz.feed_all(feed_tcp, rec, 3, step)
            n.receive_eof()
        except HNS.NoiseError as e:
            outcome = "close:%s:%s" % (type(e).__name__, e.code)
    else:
        fwfuzz.feed_all(lambda d, a, b: feed_plain(d[a:b]), rec, 3, step)
    sent = _envelopes(c.data_to_send())
    if len(c.retired) > CS.RETIRED_MEMORY + 1 or c.decoder.buffered() > c.decoder._cap:
        raise Crash("memory", "core tables past their bounds: retired %d, buffered %d"
                    % (len(c.retired), c.decoder.buffered()))
    if was_open and c.phase == "OPEN":
        _check_answers(sc, _envelopes(fed), sent)
    if outcome is None:
        outcome = ("close:core:" + (c.close_reason or "").split(" ")[0]) if c.phase == "CLOSED" else last[0]
    return outcome


def _check_answers(sc, received, sent):
    by_id = {}
    for e in sent:
        by_id.setdefault(e.id, []).append(e)
    seen = set(_SCENARIO_IDS[sc])
    for env in received:
        id_ = env.id
        op = env.WhichOneof("op")
        fresh = id_ not in seen
        seen.add(id_)
        if not id_ or not fresh or op is None:
            continue
        answers = by_id.get(id_, [])
        codes = [a.error.code for a in answers if a.WhichOneof("op") == "error"]
        if op == "ping" and not any(a.WhichOneof("op") == "ping_response" for a in answers):
            raise Crash("spec", "R10.2-a: Ping on id %d got no PingResponse" % id_)
        if op in CORE_ONLY and _E.INVALID_REQUEST not in codes:
            raise Crash("spec", "R10.10-e: core-only %s on id %d drew %r, not INVALID_REQUEST" % (op, id_, codes))
        if op == "stream_chunk" and _E.UNKNOWN_STREAM not in codes:
            raise Crash("spec", "R10.10-d: a chunk on never-opened id %d drew %r, not UNKNOWN_STREAM" % (id_, codes))


def gen(seed, index):
    return gen_core(Rng(seed, index))


def run(rec):
    level = _ALABAMA_LOG.level
    _ALABAMA_LOG.setLevel(logging.CRITICAL)
    try:
        return run_core(rec)
    except Crash:
        raise
    except MemoryError:
        raise Crash("memory", "MemoryError")
    except Exception as e:  # the fuzzer's purpose: anything escaping the core is a finding
        raise Crash("exception", "%s: %s" % (type(e).__name__, e))
    finally:
        _ALABAMA_LOG.setLevel(level)
