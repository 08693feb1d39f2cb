"""The conformance fixtures as data (``conformance/`` at the top of the checkout): what they are, built and checked.

Responsible for the catalogue of cases — Envelopes and frame streams, accepted and invalid, each invalid one with
its exact diagnosis (requirement ID + Error code or close reason) — and for writing them reproducibly (bytes from the
pb2 classes of the .proto and ``wire.frame``; no clock, no randomness) or reporting drift from what is committed.
Not for running them: tests/host/test_conformance_fixtures.py runs them through pb2 + wire/frame.py, and
tests/firmware/test_conformance_fixtures.py through the firmware codec and framer on all three interpreters.

Run ``python -m alabama.conformance.fixtures`` to write, ``... --check`` to report drift (exit 1).
"""
import hashlib
import json
import pathlib
import sys

from google.protobuf import json_format

from alabama.v1 import envelope_pb2, operations_pb2 as ops
from alabama.wire import frame as wire

from .. import REPO
from ..core import testsat as ts

#: Version of index.json's layout (a runner checks it first).
FORMAT = 1
DIR = REPO / "conformance"
INDEX = "index.json"

_v = wire.varint


def _key(field, wt):
    return _v(field << 3 | wt)


def _ld(field, body):
    return _key(field, 2) + _v(len(body)) + body


def _arm(name):
    return envelope_pb2.Envelope.DESCRIPTOR.fields_by_name[name].number


def _pattern(n, seed=1):
    """``n`` deterministic tail bytes (a tail is opaque: any bytes)."""
    return bytes((i * 31 + seed) & 0xFF for i in range(n))


# -- Envelopes ------------------------------------------------------------------------------------------
def _accepted_envelopes():
    """(name, what it shows, requirement IDs, Envelope bytes)."""
    acc = envelope_pb2.Envelope(id=1)
    a = acc.hello_response.accepted
    a.max_frame_bytes, a.max_concurrent_streams, a.wire_version = 4096, 8, 1
    err = ts.env(4, "error", code=ops.UNKNOWN_STREAM, message="stream 4 is not open")
    at_bound = ts.env(6, "error", code=ops.UNAVAILABLE, message="é" * 128)                 # 256 UTF-8 bytes
    open_enum = ts.env(8, "error", code=9999, message="a code this version does not know")
    big = ts.env(2, "ping_response", t1=2 ** 64 - 1, t2=2 ** 63, t3=2 ** 63 + 1)
    tools = ts.hello(id_=1, tools=[ts.tool("device.t%02d" % i) for i in range(16)])          # Hello.tools max_count
    ping = ts.env(3, "ping", t1=123456789)
    unknown_fields = envelope_pb2.Envelope(id=3).SerializeToString() + _ld(
        _arm("ping"), ping.ping.SerializeToString() + _key(1000, 0) + _v(7) + _ld(1001, b"xyz")) + _key(900, 0) + _v(5)
    unknown_arm = envelope_pb2.Envelope(id=7).SerializeToString() + _ld(1999, b"\x08\x01")
    non_minimal = b"\x08\x83\x80\x80\x00" + _ld(_arm("ping"), b"\x08\x01")               # id 3 in a 4-byte varint
    wrapped = envelope_pb2.Envelope(id=2 ** 32 - 1)
    wrapped.ping.t1 = 1
    return [
        ("hello", "a voice satellite's Hello: MIC + SPEAKER 16 kHz mono, id 1", ["R6-a", "R6.3-a"],
         ts.hello(id_=1).SerializeToString()),
        ("hello-16-tools", "a Hello declaring Hello.tools at its bound (16)", ["R8.2-d"], tools.SerializeToString()),
        ("hello-response-accepted", "Accepted{max_frame_bytes 4096, max_concurrent_streams 8, wire_version 1}",
         ["R6.1-b"], acc.SerializeToString()),
        ("paired", "Paired (an empty message arm) as a notification, id 0", ["R7.3-e"],
         ts.env(0, "paired").SerializeToString()),
        ("ping", "Ping on satellite id 3", ["R10.2-a"], ping.SerializeToString()),
        ("ping-response-uint64-edges", "PingResponse with t1 = 2^64-1, t2 = 2^63, t3 = 2^63+1", ["R10.2-a"],
         big.SerializeToString()),
        ("ping-id-uint32-max", "an id of 2^32-1 (odd: a satellite id just before the wrap)", ["R6.3-a"],
         wrapped.SerializeToString()),
        ("capture-open", "CaptureOpen{BUTTON, LIVE, PCM16 16 kHz mono} on id 5", ["R10.8-a"],
         ts.capture_open(5, trigger=ops.BUTTON).SerializeToString()),
        ("stream-chunk-seq-0", "StreamChunk{seq 0} on id 5 (its audio rides the frame tail)", ["R10.10-c"],
         ts.env(5, "stream_chunk", seq=0).SerializeToString()),
        ("request-capture", "RequestCapture{correlation_ref \"kit-24\"} on core id 24", ["R10.4-a"],
         ts.env(24, "request_capture", correlation_ref="kit-24").SerializeToString()),
        ("error-unknown-stream", "Error{UNKNOWN_STREAM} on id 4", ["R10.10-d"], err.SerializeToString()),
        ("error-message-at-bound", "Error.message of exactly 256 UTF-8 bytes (its bound)", ["R2.2-a"],
         at_bound.SerializeToString()),
        ("error-open-enum", "Error.code 9999, a value this version does not define (proto3 enums are open)",
         ["R2.2-a"], open_enum.SerializeToString()),
        ("ping-unknown-fields", "a Ping with unknown fields (Ping 1000 varint, 1001 bytes; Envelope 900 varint): "
         "decoded as the plain Ping", ["R2.2-a"], unknown_fields),
        ("unknown-arm", "an Envelope on id 7 whose only arm is field 1999: no known operation, not an error",
         ["R2.2-b"], unknown_arm),
        ("non-minimal-varint", "id 3 written as a 4-byte varint: accepted (protobuf reads non-minimal varints)",
         ["R2.2-a"], non_minimal),
    ]


def _invalid_envelopes():
    """(name, what is wrong, requirement, code, field, Envelope bytes): the receiver refuses it and closes."""
    ping = _arm("ping")
    err_no = _arm("error")
    hello_no = _arm("hello")
    tools17 = ts.hello(id_=1, tools=[ts.tool("device.t%02d" % i) for i in range(17)])
    return [
        ("truncated-varint", "the id varint is cut after its first byte", "R6-a", "TRUNCATED", "Envelope.id",
         b"\x08\x80"),
        ("truncated-length", "the Ping arm claims 10 bytes, 2 follow", "R6-a", "LENGTH", "Envelope.ping",
         b"\x08\x03" + _key(ping, 2) + _v(10) + b"\x08\x01"),
        ("field-number-zero", "a key with field number 0", "R6-a", "TAG", "Envelope", b"\x00\x01"),
        ("varint-eleven-bytes", "a varint of 11 bytes", "R6-a", "VARINT_TOO_LONG", "Envelope.id",
         b"\x08" + b"\xff" * 10 + b"\x01"),
        ("string-not-utf8", "Error.message holding the byte 0xff", "R6-a", "UTF8", "Error.message",
         b"\x08\x04" + _ld(err_no, _ld(2, b"ok\xff"))),
        ("string-over-bound", "Error.message of 257 bytes (bound 256)", "R6-a", "OVER_BOUND", "Error.message",
         b"\x08\x04" + _ld(err_no, _ld(2, b"x" * 257))),
        ("repeated-over-bound", "Hello.tools with 17 elements (bound 16)", "R6-a", "OVER_BOUND", "Hello.tools",
         tools17.SerializeToString()),
        ("nested-truncated", "a Hello whose first capability's mic params claim 9 bytes where 1 is left in it",
         "R6-a", "LENGTH", "Hello.capabilities", b"\x08\x01" + _ld(hello_no, _key(2, 2) + _v(6) + _key(1, 0) + _v(1) +
                                                         _key(2, 2) + _v(9) + b"\x08")),
    ]


# -- frame streams ----------------------------------------------------------------------------------------
def _f(env, tail=b""):
    return wire.encode_frame(env.SerializeToString(), tail)


def _frame_cases():
    """(name, what, set, requirement, receiver, stream bytes, expected events, diagnosis or None)."""
    ping = ts.env(3, "ping", t1=1)
    chunk_tail = _pattern(640)
    chunk = ts.env(5, "stream_chunk", seq=0)
    session = {"phase": "session", "max_frame_bytes": 1024}
    out = []

    def frames(*pairs):
        return [{"frame": {"header_hex": e.SerializeToString().hex(), "tail_hex": t.hex()}} for e, t in pairs]

    out.append(("two-frames", "a Ping and a 640-byte capture chunk back to back", "accepted", "R6-a", session,
                _f(ping) + _f(chunk, chunk_tail), frames((ping, b""), (chunk, chunk_tail)), None))
    hl = len(chunk.SerializeToString())
    fill = 1024 - wire.frame_total_len(hl, 0)
    out.append(("frame-at-limit", "a chunk whose total_len is exactly the receiver's max_frame_bytes (1024)",
                "accepted", "R6.1-b", session, _f(chunk, _pattern(fill, 2)), frames((chunk, _pattern(fill, 2))),
                None))
    h = ping.SerializeToString()
    long_prefix = bytes([0x80 | (1 + len(h)), 0x00]) + _v(len(h)) + h           # total_len in a 2-byte varint
    out.append(("non-minimal-prefix", "total_len written as a 2-byte varint (accepted up to 5 bytes)", "accepted",
                "R6-a", session, long_prefix, frames((ping, b"")), None))
    hello = ts.hello(id_=1)
    out.append(("handshake-hello", "a Hello before the limit is negotiated (the 65519-byte ceiling applies)",
                "accepted", "R6.1-a", {"phase": "handshake", "max_frame_bytes": 65516}, _f(hello),
                frames((hello, b"")), None))
    big = _pattern(1100, 3)
    over = ts.env(9, "stream_chunk", seq=2)
    out.append(("over-limit-then-frame", "a 1100-byte tail over a 1024 limit, then a Ping: the receiver answers "
                "Error{FRAME_TOO_LARGE} on id 9, discards the rest of that frame and reads the Ping", "invalid",
                "R6.1-c", session, _f(over, big) + _f(ping),
                [{"oversize": {"header_hex": over.SerializeToString().hex(),
                               "total_len": wire.frame_total_len(len(over.SerializeToString()), len(big))}}]
                + frames((ping, b"")),
                {"requirement": "R6.1-c", "outcome": "error", "error": "FRAME_TOO_LARGE", "id": 9}))
    out.append(("header-len-over-total", "header_len 9 inside a total_len of 5", "invalid", "R6-a", session,
                _f(ping) + b"\x05\x09\x08\x01\x10\x02", frames((ping, b"")),
                {"requirement": "R6-a", "outcome": "close", "reason": "HEADER_LEN_OVER_TOTAL"}))
    out.append(("total-len-zero", "a frame with total_len 0 (no room for header_len)", "invalid", "R6-a", session,
                b"\x00", [], {"requirement": "R6-a", "outcome": "close", "reason": "HEADER_LEN_OVER_TOTAL"}))
    out.append(("prefix-varint-six-bytes", "total_len written with a 6th continuation byte", "invalid", "R6-a",
                session, b"\x80\x80\x80\x80\x80\x01", [],
                {"requirement": "R6-a", "outcome": "close", "reason": "VARINT_TOO_LONG"}))
    out.append(("prefix-over-32-bits", "total_len of 2^32 (5 bytes, over 32 bits)", "invalid", "R6-a", session,
                b"\x80\x80\x80\x80\x10", [], {"requirement": "R6-a", "outcome": "close", "reason": "VARINT_TOO_LONG"}))
    small = {"phase": "session", "max_frame_bytes": 64}
    fat = ts.env(11, "error", code=ops.UNAVAILABLE, message="m" * 120)            # a 120+-byte header
    out.append(("over-limit-header-unholdable", "a frame over a 64-byte limit whose header alone is larger than the "
                "receiver's buffer (64 + 10): it cannot answer on the id, it closes", "invalid", "R6.1-c", small,
                _f(fat), [], {"requirement": "R6.1-c", "outcome": "close", "reason": "HEADER_TOO_LARGE"}))
    huge = b"\x80\x80\x05" + b"\x01\x00"                                            # total_len 81920, unfinished
    out.append(("handshake-over-ceiling", "a first frame claiming 81920 bytes, over the 65519-byte handshake "
                "ceiling (a Hello must fit one Noise message)", "invalid", "R6.1-a",
                {"phase": "handshake", "max_frame_bytes": 65516}, huge, [],
                {"requirement": "R6.1-a", "outcome": "close", "reason": "FRAME_TOO_LARGE"}))
    return out


# -- the whole set ----------------------------------------------------------------------------------------
def _envelope_json(data):
    e = envelope_pb2.Envelope()
    e.ParseFromString(data)
    return e


def build():
    """{relative path: bytes} of the whole conformance/ tree except README.md (written by hand)."""
    files, cases = {}, []
    for name, what, rids, data in _accepted_envelopes():
        e = _envelope_json(data)
        e.DiscardUnknownFields()
        path = "envelope/accepted/%s.bin" % name
        files[path] = data
        cases.append({"name": name, "layer": "envelope", "set": "accepted", "file": path, "what": what,
                      "requirements": rids, "sha256": hashlib.sha256(data).hexdigest(),
                      "expect": {"op": e.WhichOneof("op"), "id": e.id,
                                 "canonical_hex": e.SerializeToString(deterministic=True).hex(),
                                 "json": json_format.MessageToDict(e, preserving_proto_field_name=True)}})
    for name, what, rid, code, field, data in _invalid_envelopes():
        path = "envelope/invalid/%s.bin" % name
        files[path] = data
        cases.append({"name": name, "layer": "envelope", "set": "invalid", "file": path, "what": what,
                      "requirements": [rid], "sha256": hashlib.sha256(data).hexdigest(),
                      "expect": {"requirement": rid, "outcome": "close", "reason": code, "field": field}})
    for name, what, kind, rid, receiver, data, events, diag in _frame_cases():
        path = "frame/%s/%s.bin" % (kind, name)
        files[path] = data
        expect = {"receiver": receiver, "events": events}
        if diag:
            expect.update(diag)
        cases.append({"name": name, "layer": "frame", "set": kind, "file": path, "what": what,
                      "requirements": [rid], "sha256": hashlib.sha256(data).hexdigest(), "expect": expect})
    proto = sorted((REPO / "proto" / "alabama" / "v1").glob("*.proto")) + [
        REPO / "proto" / "alabama" / "v1" / "alabama.options"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in proto)).hexdigest()
    index = {"conformance_fixtures": FORMAT, "wire_version": 1, "schema_sha256": digest,
             "generator": "python -m alabama.conformance.fixtures",
             "counts": {"accepted": sum(c["set"] == "accepted" for c in cases),
                        "invalid": sum(c["set"] == "invalid" for c in cases)},
             "cases": cases}
    files[INDEX] = (json.dumps(index, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode()
    return files


def drift(root=DIR):
    """What differs between the committed tree and a fresh build: [relative path + why]; [] when none."""
    want = build()
    root = pathlib.Path(root)
    out = []
    for rel, data in sorted(want.items()):
        p = root / rel
        if not p.is_file():
            out.append("%s: missing" % rel)
        elif p.read_bytes() != data:
            out.append("%s: differs" % rel)
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel not in want and rel != "README.md":
            out.append("%s: not generated (stale)" % rel)
    return out


def write(root=DIR):
    root = pathlib.Path(root)
    want = build()
    for p in sorted(root.rglob("*.bin")):
        if p.relative_to(root).as_posix() not in want:
            p.unlink()
    for rel, data in want.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return len(want)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--check"]:
        d = drift()
        for line in d:
            print(line)
        if d:
            print("conformance/ drifted from its generator: run `python -m alabama.conformance.fixtures`",
                  file=sys.stderr)
        return 1 if d else 0
    if argv:
        print("usage: python -m alabama.conformance.fixtures [--check]", file=sys.stderr)
        return 2
    print("wrote %d files under %s" % (write(), DIR))
    return 0


if __name__ == "__main__":
    sys.exit(main())
