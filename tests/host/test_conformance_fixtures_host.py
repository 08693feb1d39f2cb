"""The shared conformance fixtures (conformance/): the committed tree is exactly what the generator makes (drift
fails), and every case holds on the host implementations — pb2 for Envelopes, alabama.wire.frame for frame streams —
and on the firmware codec under micropython through `alabama conformance codec-echo` (the framer and codec on all
three interpreters: tests/firmware/test_conformance_fixtures.py)."""
import hashlib
import json
import pathlib

import pytest
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from alabama.conformance import cli as ccli, corpus, fixtures
from alabama.v1 import envelope_pb2
from alabama.wire import frame as wire

ROOT = pathlib.Path(__file__).resolve().parents[2]
INDEX = json.loads((ROOT / "conformance" / "index.json").read_text())


def _cases(layer, kind):
    out = [c for c in INDEX["cases"] if c["layer"] == layer and c["set"] == kind]
    assert out
    return out


def _data(c):
    return (ROOT / "conformance" / c["file"]).read_bytes()


def test_the_committed_fixtures_are_exactly_what_the_generator_makes():
    assert fixtures.drift() == [], "run `python -m alabama.conformance.fixtures` and commit conformance/"


def test_drift_is_reported_file_by_file(tmp_path):
    fixtures.write(tmp_path)
    assert fixtures.drift(tmp_path) == []
    p = tmp_path / "envelope" / "accepted" / "ping.bin"
    p.write_bytes(p.read_bytes() + b"\x00")
    (tmp_path / "frame" / "invalid" / "old.bin").write_bytes(b"x")
    (tmp_path / "frame" / "accepted" / "two-frames.bin").unlink()
    assert fixtures.drift(tmp_path) == ["envelope/accepted/ping.bin: differs", "frame/accepted/two-frames.bin: missing",
                                        "frame/invalid/old.bin: not generated (stale)"]
    fixtures.write(tmp_path)                       # rewrites what differs, removes the stale fixture
    assert fixtures.drift(tmp_path) == []


def test_the_index_names_each_file_by_its_hash_and_each_invalid_case_by_its_diagnosis():
    names = [c["name"] for c in INDEX["cases"]]
    assert len(names) == len(set(names))
    for c in INDEX["cases"]:
        assert hashlib.sha256(_data(c)).hexdigest() == c["sha256"], c["name"]
        if c["set"] == "invalid":
            assert c["expect"]["requirement"] in c["requirements"] and c["expect"]["outcome"] in ("close", "error")
    assert INDEX["counts"] == {"accepted": 20, "invalid": 15}


def test_r2_2_a_accepted_envelopes_on_pb2():
    for c in _cases("envelope", "accepted"):
        e = envelope_pb2.Envelope()
        e.ParseFromString(_data(c))
        e.DiscardUnknownFields()
        x = c["expect"]
        assert (e.WhichOneof("op"), e.id) == (x["op"], x["id"]), c["name"]
        assert e.SerializeToString(deterministic=True).hex() == x["canonical_hex"], c["name"]
        assert json_format.MessageToDict(e, preserving_proto_field_name=True) == x["json"], c["name"]


def test_r6_a_invalid_envelopes_on_pb2_and_the_bounds_file():
    """pb2 refuses every malformed one; an over-bound one is well-formed protobuf (pb2 has no bounds), so the
    host checks it breaks the alabama.options bound the case names."""
    bounds = corpus.Bounds()
    for c in _cases("envelope", "invalid"):
        x = c["expect"]
        e = envelope_pb2.Envelope()
        if x["reason"] != "OVER_BOUND":
            with pytest.raises(DecodeError):
                e.ParseFromString(_data(c))
            continue
        e.ParseFromString(_data(c))
        msg_name, field_name = x["field"].split(".")
        found = []

        def walk(m):
            for f, v in m.ListFields():
                if m.DESCRIPTOR.name == msg_name and f.name == field_name:
                    n = len(v) if f.is_repeated else len(v.encode() if isinstance(v, str) else v)
                    found.append((n, bounds.count(f) if f.is_repeated else bounds.size(f)))
                if f.message_type is not None:
                    for sub in (v if f.is_repeated else [v]):
                        walk(sub)
        walk(e)
        assert found and found[0][0] == found[0][1] + 1, (c["name"], found)


def _host_events(c, data, step):
    rx = c["expect"]["receiver"]
    d = wire.FrameDecoder(rx["max_frame_bytes"])
    if rx["phase"] == "session":
        d.set_limit(rx["max_frame_bytes"])
    out = []
    try:
        for i in range(0, len(data), step):
            d.feed(data[i:i + step])
            for ev in d:
                if isinstance(ev, wire.Frame):
                    out.append({"frame": {"header_hex": ev.header.hex(), "tail_hex": ev.tail.hex()}})
                else:
                    out.append({"oversize": {"header_hex": ev.header.hex(), "total_len": ev.total_len}})
    except wire.FrameError as e:
        return out, e.code
    return out, None


@pytest.mark.parametrize("kind", ["accepted", "invalid"])
def test_r6_a_frame_streams_on_the_host_framer(kind):
    for c in _cases("frame", kind):
        data, x = _data(c), c["expect"]
        for step in (len(data), 1, 7):
            events, error = _host_events(c, data, step)
            assert events == x["events"], (c["name"], step, events)
            assert error == (x["reason"] if x.get("outcome") == "close" else None), (c["name"], step, error)


@pytest.mark.needs_micropython
def test_every_envelope_case_through_codec_echo_under_micropython():
    cases = _cases("envelope", "accepted") + _cases("envelope", "invalid")
    out = ccli.unpack_output(ccli.codec_echo(ccli.pack_records([_data(c) for c in cases]), timeout=120))
    assert len(out) == len(cases)
    for c, (ok, body) in zip(cases, out):
        if c["set"] == "accepted":
            assert ok and body.hex() == c["expect"]["canonical_hex"], (c["name"], ok, body)
        else:
            assert not ok and body == "%s %s" % (c["expect"]["reason"], c["expect"]["field"]), (c["name"], body)
