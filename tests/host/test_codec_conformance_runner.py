"""`alabama conformance codec-echo`: the firmware codec under the real micropython, against upb.

A corpus of random valid Envelopes (every arm, built from the pb2 descriptors within the bounds)
must come back byte-identical; malformed and mutated records must be refused with exactly the
error the same codec gives on CPython (so the two interpreters agree on every input).
"""
import random
import struct
import subprocess
import sys

import pytest

from alabama.conformance import cli as conf
from alabama.conformance.corpus import Bounds, RandomMessages, envelope_arms
from alabama.v1 import envelope_pb2
from satellite.wire import alabama_v1 as v1, pb

ARMS = envelope_arms(envelope_pb2.Envelope)


def corpus(n=2100, seed=1):
    gen = RandomMessages(Bounds(), seed=seed)
    return [gen.envelope(envelope_pb2.Envelope, ARMS[i % len(ARMS)]).SerializeToString() for i in range(n)]


def cpython_echo(raw):
    try:
        return True, pb.encode(pb.decode(v1.Envelope, raw))
    except pb.DecodeError as e:
        return False, "%s %s" % (e.code, e.field or "-")


@pytest.mark.slow
def test_r2_2_a_corpus_roundtrips_byte_identical_under_micropython():
    msgs = corpus()
    assert len(msgs) >= 2000
    assert {envelope_pb2.Envelope.FromString(m).WhichOneof("op") for m in msgs} == set(ARMS)
    out = conf.unpack_output(conf.codec_echo(conf.pack_records(msgs)))
    assert len(out) == len(msgs)
    for i, (m, (ok, body)) in enumerate(zip(msgs, out)):
        assert ok, (i, body, m.hex())
        assert body == m, (i, m.hex(), body.hex())


def _mutants(seed=7, n=1500):
    rng = random.Random(seed)
    seeds = corpus(60, seed=3)
    out = []
    for i in range(n):
        b = bytearray(seeds[i % len(seeds)])
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(4)
            pos = rng.randrange(len(b) + 1)
            if op == 0 and b:
                b[pos % len(b)] ^= 1 << rng.randrange(8)
            elif op == 1:
                del b[pos:]
            elif op == 2:
                b[pos:pos] = bytes([rng.randrange(256)])
            elif b:
                b[pos % len(b)] = rng.randrange(256)
        out.append(bytes(b))
    return out


MALFORMED = [
    ("08", "TRUNCATED Envelope.id"), ("4205 0805", "LENGTH Envelope.stream_chunk"),
    ("0a0107", "WIRE_TYPE Envelope.id"), ("08" + "ff" * 10 + "01", "VARINT_TOO_LONG Envelope.id"),
    ("088080808010", "VARINT_RANGE Envelope.id"), ("0b", "GROUP Envelope.id"), ("9303", "GROUP Envelope"),
    ("1243" + "4a41" + "61" * 65, "OVER_BOUND Hello.display_name"), ("12061a040a02c080", "UTF8 ToolDescriptor.name"),
    ("0000", "TAG Envelope"),
]


@pytest.mark.slow
def test_malformed_and_mutated_records_refused_exactly_as_on_cpython():
    cases = [bytes.fromhex(h.replace(" ", "")) for h, _ in MALFORMED] + _mutants()
    out = conf.unpack_output(conf.codec_echo(conf.pack_records(cases)))
    assert len(out) == len(cases)
    refused = 0
    for raw, got in zip(cases, out):
        assert got == cpython_echo(raw), raw.hex()
        refused += not got[0]
        assert "INTERNAL" not in str(got[1])
    for (h, want), (ok, body) in zip(MALFORMED, out):
        assert not ok
        if want:
            assert body == want
    assert refused > 300


def test_empty_input_and_unknown_arm_records():
    assert conf.codec_echo(b"") == b""
    out = conf.unpack_output(conf.codec_echo(conf.pack_records([bytes.fromhex("0807fa01020801"), b""])))
    assert out == [(True, bytes.fromhex("0807")), (True, b"")]  # unknown arm dropped, not fatal (R2.2-b)


def test_record_framing_errors():
    out = conf.unpack_output(conf.codec_echo(struct.pack(">I", 1 << 24)))
    assert out == [(False, "OVER_BOUND record")]
    out = conf.unpack_output(conf.codec_echo(struct.pack(">I", 10) + b"\x08"))
    assert out == [(False, "TRUNCATED record")]


def test_cli_filter_end_to_end():
    msgs = corpus(40, seed=11)
    r = subprocess.run([sys.executable, "-m", "alabama.cli", "conformance", "codec-echo"],
                       input=conf.pack_records(msgs + [b"\x08"]), capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = conf.unpack_output(r.stdout)
    assert [b for _, b in out[:-1]] == msgs
    assert out[-1] == (False, "TRUNCATED Envelope.id")
