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


def test_frame_estimate_uses_the_transport_ad(monkeypatch):
    # Noise transport messages carry no AD: seal one each way through the firmware's transport and watch
    # the AD its AEAD is given
    import hashlib

    from satellite.noise import transport, x25519
    # the AEAD class the transport's cipher states are built with, reached through the transport's own imports
    # (test_viper_fallback leaves a second copy of satellite.noise.chachapoly behind on the package)
    aead = transport.HandshakeState.__init__.__globals__["_chachapoly"].ChaChaPoly
    seen = []
    for name in ("encrypt_into", "decrypt_into"):
        def spy(self, n, ad, src, src_len, dst, _real=getattr(aead, name), _name=name):
            seen.append((_name, bytes(ad)))
            return _real(self, n, ad, src, src_len, dst)
        monkeypatch.setattr(aead, name, spy)
    rng = lambda n: hashlib.sha256(b"aead-frame").digest()[:n]  # noqa: E731 — handshake ephemerals only
    si, sr = bytes(range(1, 33)), bytes(range(101, 133))
    sat = transport.NoiseConnection(True, si, "IK", x25519.public_key(sr), rng=rng)
    core = transport.NoiseConnection(False, sr, rng=rng)
    core.receive(sat.start())
    sat.receive(core.data_to_send())
    assert sat.handshake_done and core.handshake_done
    for a, b in ((sat, core), (core, sat)):
        del seen[:]
        b.receive(a.encrypt(bytes(B.FRAME_SEAL)))
        assert b.read_plaintext() == bytes(B.FRAME_SEAL)
        assert seen == [("encrypt_into", B.FRAME_AD), ("decrypt_into", B.FRAME_AD)]
    assert B.FRAME_AD == b""
