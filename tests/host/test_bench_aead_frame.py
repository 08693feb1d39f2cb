"""The AEAD estimate of tools/bench/bench_crypto_aead.py prices one real 20 ms audio frame each way: its
FRAME_OVERHEAD must be what the codec puts around the samples of a StreamChunk (issue 12, AEAD target)."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "bench"))

import bench_crypto_aead as B  # noqa: E402
from alabama.v1 import envelope_pb2  # noqa: E402
from alabama.wire.frame import encode_frame  # noqa: E402


def _frame_len(stream_id, seq, samples):
    env = envelope_pb2.Envelope(id=stream_id)
    env.stream_chunk.seq = seq
    return len(encode_frame(env.SerializeToString(), bytes(samples)))


def test_frame_overhead_is_the_codecs():
    # a stream id < 128 and a seq from 128 to 16383: 2.6 s to 5.5 min into a capture or a playback
    for seq in (128, 1000, 16383):
        assert _frame_len(1, seq, 640) == B.FRAME_SEAL
        assert _frame_len(1, seq, 960) == B.FRAME_OPEN


def test_frame_estimate_uses_the_transport_ad():
    # Noise transport messages carry no AD (the firmware's transport passes an empty one)
    assert B.FRAME_AD == b""
    src = (ROOT / "firmware" / "satellite" / "noise" / "transport.py").read_text()
    assert "encrypt_into(_EMPTY," in src and "decrypt_into(_EMPTY," in src
