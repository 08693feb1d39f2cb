# Test driver run under the real `micropython` unix port: the FIRMWARE Noise initiator
# (satellite.noise.transport) over a blocking TCP socket to 127.0.0.1. Thin: all protocol logic is
# in the firmware core; this only moves bytes. Prints one line per step for the host test to check.
#
#   micropython mp_noise_client.py PORT PATTERN STATIC_HEX PINNED_HEX|- MODE
#   MODE "echo": handshake, send stream A (200,000-byte write + small writes, some coalesced into one
#   Noise message), receive stream B and check its SHA-256, print "RX OK n"; errors print "ERR code".
import sys
import socket
import hashlib
import os

from satellite.noise.transport import NoiseConnection
from satellite.noise.state import NoiseError


def stream_a_parts():
    yield bytes((k * 31 + 7) & 255 for k in range(200000))
    for k in range(300):
        yield bytes([k & 255]) * (1 + k % 50)


def stream_b_parts():
    yield bytes((k * 17 + 1) & 255 for k in range(200000))
    for k in range(300):
        yield bytes([(k * 3) & 255]) * (1 + k % 41)


def write_all(s, data):
    mv = memoryview(data)
    pos = 0
    while pos < len(mv):
        n = s.write(mv[pos:])
        pos += n


class Rx:
    def __init__(self):
        self.h = hashlib.sha256()
        self.n = 0

    def on_plaintext(self, buf, start, end):
        self.h.update(memoryview(buf)[start:end])  # the view is only valid during this call
        self.n += end - start


def main():
    port = int(sys.argv[1])
    pattern = sys.argv[2]
    static = bytes.fromhex(sys.argv[3])
    pinned = None if sys.argv[4] == "-" else bytes.fromhex(sys.argv[4])
    mode = sys.argv[5]
    rx = Rx()
    conn = NoiseConnection(True, static, pattern, pinned, rng=os.urandom, on_plaintext=rx.on_plaintext)
    s = socket.socket()
    s.connect(socket.getaddrinfo("127.0.0.1", port)[0][-1])
    try:
        write_all(s, conn.start())
        while not conn.handshake_done:
            data = s.recv(4096)  # blocking readinto() would wait for a full buffer
            if not data:
                conn.receive_eof()
            conn.receive(data)
            out = conn.data_to_send()
            if out:
                write_all(s, out)
        print("HS", conn.handshake_hash.hex(), conn.remote_static.hex())
        parts = list(stream_a_parts())
        # 1. one 200,000-byte write spans four Noise messages (encrypt_from on a preallocated buffer)
        big = parts[0]
        pos = 0
        while pos < len(big):
            k = min(conn.tx_capacity, len(big) - pos)
            t = conn.encrypt_from(big, pos, pos + k)
            write_all(s, memoryview(conn.tx_buf)[:t])
            pos += k
        # 2. 150 small writes, one Noise message each, coalesced into a single TCP write
        write_all(s, b"".join(conn.encrypt(p) for p in parts[1:151]))
        # 3. 150 small writes packed into ONE Noise message (several frames share a message)
        off = 0
        for p in parts[151:]:
            conn.tx_plain[off:off + len(p)] = p
            off += len(p)
        t = conn.encrypt_buffer(off)
        write_all(s, memoryview(conn.tx_buf)[:t])
        print("TX", sum(len(p) for p in parts))
        want = hashlib.sha256()
        total = 0
        for p in stream_b_parts():
            want.update(p)
            total += len(p)
        while rx.n < total:
            data = s.recv(4096)
            if not data:
                conn.receive_eof()
                break
            conn.receive(data)
        if rx.n == total and rx.h.digest() == want.digest():
            print("RX OK", rx.n)
        else:
            print("RX BAD", rx.n)
    except NoiseError as e:
        print("ERR", e.code, str(e))
    s.close()


main()
