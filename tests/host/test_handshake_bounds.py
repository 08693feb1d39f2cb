"""R6.1-a on the satellite side: a Hello filled to every bound in alabama.options still fits one Noise
transport message, so the firmware can never emit a handshake frame the core must reject."""
from satellite.wire import alabama_v1 as fw
from satellite.wire import frame


def varint_len(v):
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def test_r6_1_a_hello_at_its_bounds_fits_one_noise_message():
    hello = fw.HELLO_MAX_SIZE
    envelope = 1 + varint_len(0xFFFFFFFF) + 1 + varint_len(hello) + hello   # id tag+varint, arm tag+len, body
    total = varint_len(envelope) + envelope                                 # header_len varint + header
    assert varint_len(total) + total <= frame.HANDSHAKE_CEILING == 65519


def test_r6_1_a_hello_response_at_its_bounds_fits_one_noise_message():
    body = fw.HELLO_RESPONSE_MAX_SIZE
    assert body < 1024
