# dual: cpython micropython
# The shared conformance fixtures (conformance/index.json) through the firmware codec and framer: every accepted
# Envelope decodes to its op and id and re-encodes to its canonical bytes; every invalid one is refused with exactly
# its code and field; every frame stream yields its events and its diagnosis, fed whole and one byte at a time.
import json

from satellite.wire import alabama_v1 as v1, frame as F, pb

_HERE = __file__.rpartition("/")[0] or "."
_ROOT = _HERE + "/../../conformance"


def _index():
    with open(_ROOT + "/index.json") as f:
        return json.load(f)


def _data(case):
    with open(_ROOT + "/" + case["file"], "rb") as f:
        return f.read()


def _hex(b):
    return bytes(b).hex() if len(b) else ""       # MicroPython 1.26 gives b"" for an empty bytes' hex()


def _cases(layer, kind):
    out = [c for c in _index()["cases"] if c["layer"] == layer and c["set"] == kind]
    assert out, (layer, kind)
    return out


def test_the_index_is_a_format_this_runner_reads():
    idx = _index()
    assert idx["conformance_fixtures"] == 1 and idx["wire_version"] == 1
    assert idx["counts"]["accepted"] == len([c for c in idx["cases"] if c["set"] == "accepted"])


def test_r2_2_a_accepted_envelopes_decode_and_reencode_canonically():
    for c in _cases("envelope", "accepted"):
        data = _data(c)
        env = pb.decode(v1.Envelope, data)
        e = c["expect"]
        assert env.op == e["op"], (c["name"], env.op, e["op"])
        assert env.id == e["id"], (c["name"], env.id)
        assert pb.encode(env) == bytes.fromhex(e["canonical_hex"]), c["name"]


def test_r6_a_invalid_envelopes_are_refused_with_their_exact_code_and_field():
    for c in _cases("envelope", "invalid"):
        data = _data(c)
        try:
            pb.decode(v1.Envelope, data)
        except pb.DecodeError as ex:
            got = (ex.code, ex.field)
        else:
            raise AssertionError("%s: decoded, expected %s" % (c["name"], c["expect"]["reason"]))
        assert got == (c["expect"]["reason"], c["expect"]["field"]), (c["name"], got)


def _events(case, data, step):
    rx = case["expect"]["receiver"]
    r = F.FrameReader(rx["max_frame_bytes"])
    if rx["phase"] == "session":
        r.set_limit(rx["max_frame_bytes"])
    out = []
    pos = 0
    n = len(data)
    try:
        while pos < n:
            end = pos + step if pos + step < n else n
            while pos < end:
                pos += r.feed(data, pos, end)
                while True:
                    kind = r.next()
                    if kind == F.NEED_MORE:
                        break
                    h = _hex(r.header())
                    if kind == F.FRAME:
                        out.append({"frame": {"header_hex": h, "tail_hex": _hex(r.tail())}})
                    else:
                        out.append({"oversize": {"header_hex": h, "total_len": r.total_len}})
    except F.FrameError as ex:
        return out, ex.code
    return out, None


def test_r6_a_frame_streams_yield_their_events_and_diagnosis():
    for kind in ("accepted", "invalid"):
        for c in _cases("frame", kind):
            data = _data(c)
            e = c["expect"]
            for step in (len(data) or 1, 1, 7):
                events, error = _events(c, data, step)
                assert events == e["events"], (c["name"], step, events)
                want = e["reason"] if e.get("outcome") == "close" else None
                assert error == want, (c["name"], step, error, want)
            if e.get("outcome") == "error":      # the receiver answers on the over-limit frame's id
                (ov,) = [x["oversize"] for x in events if "oversize" in x]
                env = pb.decode(v1.Envelope, bytes.fromhex(ov["header_hex"]))
                assert env.id == e["id"], (c["name"], env.id)
