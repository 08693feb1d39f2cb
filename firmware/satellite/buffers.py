# The runtime's long-lived buffers: sized from the board file, allocated once per boot and kept across
# connections. app.main makes them FIRST, before the big imports, while the heap is still one free block:
# after ~150 KB of modules (and the garbage their imports leave between them) a 17 KB ring may find no
# contiguous room although the total free is enough. Imports nothing; no I/O, no protocol (docs/memory.md).
from micropython import const

FRAME_MS = const(20)        # one capture chunk / one playout step
TX_CAPACITY = const(4096)   # largest frame we send (Hello, tool results), one Noise message
RX_CHUNK = const(2048)      # bytes asked of the socket per read
# The same figures as noise/transport.py (rx_message_bytes) and wire/frame.py (PREFIX_MAX_BYTES); kept
# here so that sizing the buffers imports neither (tests/firmware/test_buffers.py checks they agree).
_TAG = const(16)            # Poly1305 tag of every Noise transport message
_MAX_MESSAGE = const(65535)
_MAX_PLAINTEXT = const(65519)
_MIN_RX_MESSAGE = const(96)
_PREFIX_MAX_BYTES = const(10)
_TX_OVERHEAD = const(18)    # Noise send buffer: 2-byte length prefix + plaintext + 16-byte tag
# The ggwave receiver's ring (provision/ggwave_rx.py RING_BYTES): listening mode borrows the jitter ring,
# idle then, so the jitter ring is at least this big and listening mode needs no 16 KB block of its own.
LISTEN_RING = const(16384)


def rx_message_bytes(max_frame_bytes):
    """One whole Noise message of a frame up to our advertised max_frame_bytes: prefix + total_len + tag
    (0 = unset: 65535)."""
    if max_frame_bytes <= 0 or max_frame_bytes + _PREFIX_MAX_BYTES > _MAX_PLAINTEXT:
        return _MAX_MESSAGE
    n = max_frame_bytes + _PREFIX_MAX_BYTES + _TAG
    return n if n > _MIN_RX_MESSAGE else _MIN_RX_MESSAGE


def sizes(board):
    """(socket read chunk, Noise receive, frame reassembly, jitter ring, playout step, Noise send) bytes
    for `board`: the Noise receive buffer holds one message of our max_frame_bytes (the core never sends
    a frame over it, spec §6.1); the ring holds buffer_ms of speaker audio plus one frame of slack (the core paces under
    buffer_ms, host/alabama/core/pipeline.py PACE_FRACTION)."""
    lim = board.get("limits") or {}
    mfb = lim.get("max_frame_bytes", 4096)
    ms = lim.get("buffer_ms", 300)
    spk = ((board.get("audio") or {}).get("speaker") or {}).get("rates", [16000])[0]
    return (RX_CHUNK, rx_message_bytes(mfb), mfb + _PREFIX_MAX_BYTES, 2 * spk * ms // 1000 + mfb,
            2 * (spk * FRAME_MS // 1000), TX_CAPACITY + _TX_OVERHEAD)


class Buffers:
    """Every long-lived buffer of the runtime, allocated here and nowhere else."""

    def __init__(self, board):
        n_rx, n_noise, n_frame, n_ring, n_play, n_tx = sizes(board)
        # largest first: each takes the lowest free run that fits. The ring doubles as the ggwave
        # receiver's in listening mode (no connection then): ring_bytes of it are the jitter ring.
        self.ring_bytes = n_ring
        self.ring = bytearray(n_ring if n_ring > LISTEN_RING else LISTEN_RING)
        self.noise_rx = bytearray(n_noise)
        self.frame = bytearray(n_frame)
        self.noise_tx = bytearray(n_tx)
        self.rx = bytearray(n_rx)
        self.play = bytearray(n_play)
