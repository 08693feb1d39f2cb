# dual: cpython micropython
# The runtime's preallocated buffers (satellite/buffers.py): sized from the board file, and computed with
# the same figures as the modules they serve, which buffers.py does not import.
from satellite import buffers
from satellite.noise import transport
from satellite.wire import frame

DEVKIT = {"limits": {"max_frame_bytes": 4096, "max_concurrent_streams": 4, "buffer_ms": 300},
          "audio": {"speaker": {"rates": [16000, 24000]}}}


def test_sizes_follow_the_board_file():
    rx, noise_rx, frm, ring, play, tx = buffers.sizes(DEVKIT)
    assert (rx, noise_rx, frm, play, tx) == (2048, 4122, 4106, 640, 4114)
    assert ring == 2 * 16000 * 300 // 1000 + 4096          # buffer_ms of s16 audio + one frame
    big = {"limits": {"max_frame_bytes": 16384, "buffer_ms": 500}, "audio": {"speaker": {"rates": [24000]}}}
    assert buffers.sizes(big)[1:4] == (16410, 16394, 2 * 24000 * 500 // 1000 + 16384)
    assert buffers.sizes({})[1] == 4122                    # defaults: 4096-byte frames


def test_figures_agree_with_transport_and_framer():
    for mfb in (0, 1, 10, 80, 81, 4096, 16384, 65516, 65519, 65520, 100000):
        assert buffers.rx_message_bytes(mfb) == transport.rx_message_bytes(mfb), mfb
    for mfb in (100, 4096, 16384):
        assert buffers.sizes({"limits": {"max_frame_bytes": mfb}})[2] == mfb + frame.PREFIX_MAX_BYTES


def test_buffers_are_allocated_at_their_sizes():
    b = buffers.Buffers(DEVKIT)
    n = list(buffers.sizes(DEVKIT))
    assert [len(x) for x in (b.rx, b.noise_rx, b.frame, b.play, b.noise_tx)] == n[:3] + n[4:]
    # the jitter ring's buffer also holds the ggwave receiver's ring in listening mode (no 16 KB block then)
    assert b.ring_bytes == n[3] and len(b.ring) == max(n[3], buffers.LISTEN_RING)
    big = {"limits": {"max_frame_bytes": 16384, "buffer_ms": 500}, "audio": {"speaker": {"rates": [24000]}}}
    assert len(buffers.Buffers(big).ring) == buffers.sizes(big)[3]


def test_the_listening_ring_is_the_ggwave_receivers():
    from satellite.provision import ggwave_rx
    assert buffers.LISTEN_RING == ggwave_rx.RING_BYTES
