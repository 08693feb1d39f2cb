# dual: cpython micropython
# Sound-provisioning receiver (ggwave [DT] Fastest at 16 kHz): RS against ggwave's own bytes, decode
# of real ggwave audio with +-2 % clock drift, our own tone generator for corrupted / truncated /
# over-long transmissions, 60 s of noise, pure == viper, zero allocation while listening.
import math
from array import array

from mpsupport import IS_MICROPYTHON, mem_alloc_delta, raises, unhex

from satellite.provision import _goertzel_pure as PURE
from satellite.provision import ggwave_rx as G
from satellite.provision import rs as RS

try:
    from satellite.provision import _goertzel_viper as VIPER
except ImportError:
    VIPER = None

_HERE = __file__.rpartition("/")[0] or "."

# Bytes ggwave 0.4.3 itself transmitted (ggwave.encode(p, protocolId=8), demodulated from its
# audio): RS(length; 2) then RS(payload; ecc_len) -- our encoder must reproduce them exactly.
GGWAVE_WORDS = (
    (b"Ala", "030506" + "416c61" + "521e"),
    (bytes(range(1, 21)), "143c28" + "0102030405060708090a0b0c0d0e0f1011121314" + "02956e596ead4631"),
)


# -- helpers: deterministic randomness, our own ggwave tone generator --------------------------

class Lcg:
    def __init__(self, seed):
        self.s = seed & 0x7FFFFFFF

    def next(self):
        self.s = (self.s * 1103515245 + 12345) & 0x7FFFFFFF
        return self.s >> 8          # 23 bits

    def below(self, n):
        return self.next() % n


_SIN = None


def _sin_table():
    global _SIN
    if _SIN is None:
        _SIN = array("h", [int(round(32767 * math.sin(2 * math.pi * i / 1024))) for i in range(1024)])
    return _SIN


def encode_bytes(payload):
    """The byte stream ggwave sends for payload: RS(len;2) + RS(payload;ecc_len(n))."""
    n = len(payload)
    e = RS.ecc_len(n)
    buf = bytearray(3 + n + e)
    buf[0] = n
    r = RS.RS()
    r.encode(buf, 0, 1, 2)
    buf[3:3 + n] = payload
    r.encode(buf, 3, n, e)
    return buf


def synth(stream, ratio=1.0, lead=3000, tail=6000, amp=12000, noise=0, seed=1, stop_at=None):
    """16 kHz s16 ggwave [DT] Fastest signal for the byte stream, as heard through a clock ratio
    `ratio` (tones x ratio, durations / ratio); segments ramp 15 % in and out like ggwave's."""
    sin = _sin_table()
    segs = [[24 + 2 * i + (i & 1) for i in range(16)]]
    for b in stream:
        segs.append([24 + (b & 15), 40 + (b >> 4)])
    segs.append([24 + 2 * i + 1 - (i & 1) for i in range(16)])
    lens = [16 * 1024 / 3.0] + [1024.0] * len(stream) + [16 * 1024 / 3.0]
    total = lead + tail + int(sum(lens) / ratio) + 2
    out = array("h", bytes(2 * total))
    pos = float(lead)
    for si in range(len(segs)):
        tones = segs[si]
        n = int(pos + lens[si] / ratio) - int(pos)
        start = int(pos)
        pos += lens[si] / ratio
        if stop_at is not None and si >= stop_at:
            break
        a = amp // len(tones)
        ramp = int(0.15 * n)
        incs = [int(round(t * 3 * ratio * 65536)) for t in tones]
        for ti in range(len(tones)):
            inc = incs[ti]
            ph = 0
            for i in range(n):
                g = a
                if i < ramp:
                    g = a * i // ramp
                elif i >= n - ramp:
                    g = a * (n - i) // ramp
                out[start + i] += (sin[(ph >> 16) & 1023] * g) >> 15
                ph += inc
    if noise:
        rnd = Lcg(seed)
        for i in range(total):
            v = out[i] + ((rnd.next() & 0xFFFF) - 32768 + (rnd.next() & 0xFFFF) - 32768) * noise // 65536
            out[i] = max(-32767, min(32767, v))
    return out


def run(rx, sig, blk=500):
    """Feed sig in blocks of blk samples; returns the list of payloads returned."""
    got = []
    buf = array("h", bytes(2 * blk))
    n = len(sig)
    i = 0
    while i < n:
        m = min(blk, n - i)
        for j in range(m):
            buf[j] = sig[i + j]
        p = rx.feed(buf, m)
        if p is not None:
            got.append(p)
        i += m
    return got


def read_raw(name):
    with open(_HERE + "/data/" + name, "rb") as f:
        return array("h", f.read())


# -- Reed-Solomon ------------------------------------------------------------------------------

def test_rs_matches_ggwave_transmitted_bytes():
    for payload, hexword in GGWAVE_WORDS:
        assert bytes(encode_bytes(payload)) == unhex(hexword)


def test_rs_corrects_up_to_capacity_and_refuses_beyond():
    r = RS.RS()
    rnd = Lcg(7)
    for n in (1, 3, 4, 17, 50, 140):
        e = RS.ecc_len(n)
        for trial in range(6):
            word = bytearray(n + e)
            for i in range(n):
                word[i] = rnd.below(256)
            r.encode(word, 0, n, e)
            good = bytes(word)
            k = rnd.below(e // 2 + 1)
            used = []
            while len(used) < k:
                p = rnd.below(n + e)
                if p not in used:
                    used.append(p)
                    word[p] ^= 1 + rnd.below(255)
            assert r.decode(word, 0, n, e) == k
            assert bytes(word) == good
    # every error pattern of weight e/2+1 on a long code is refused (and the word left untouched)
    n = 50
    e = RS.ecc_len(n)
    word = bytearray(n + e)
    r.encode(word, 0, n, e)
    for i in range(e // 2 + 1):
        word[3 * i] ^= 0x5A
    before = bytes(word)
    assert r.decode(word, 0, n, e) == -1
    assert bytes(word) == before
    assert RS.ecc_len(1) == 2 and RS.ecc_len(3) == 2 and RS.ecc_len(4) == 4
    assert RS.ecc_len(14) == 4 and RS.ecc_len(19) == 6 and RS.ecc_len(20) == 8 and RS.ecc_len(140) == 56
    raises(RS.RSError, r.decode, bytearray(300), 0, 250, 50)


# -- real ggwave audio -------------------------------------------------------------------------

def test_real_ggwave_audio_with_plus_minus_2_percent_clock_drift():
    # made by tools/bench/bench_ggwave.py --make-test-data: ggwave.encode(b"Ala", 8), clock ratio
    # 1.02 / 0.98, 10 dB white noise at 48 kHz, decimated to 16 kHz s16
    for name, ratio in (("ggwave_dtfastest_p2.raw", 1.02), ("ggwave_dtfastest_m2.raw", 0.98)):
        rx = G.GgwaveReceiver()
        got = run(rx, read_raw(name), 320)
        assert got == [b"Ala"], (name, got, rx.fail_code)
        assert rx.state == G.STATE_DONE and rx.progress == 100
        assert abs(rx.ratio - ratio) < 0.002


# Low SNR (issue 16): 3 random bytes from ggwave.encode at -8 dB (noise power 6.3 x the whole
# transmission's power, over 0..24 kHz), made by bench_ggwave.py --make-test-data (LOW_SNR_SAMPLES
# there: seed, drift). The receiver before the pair-vote marker detector lost all three: 0 % drift
# and -2 %: marker never detected (ggwave's decoder does decode the 0 % one); +2 %: marker found
# but the length code was not (the edge test needed a 3x level step, the follow test 2x pairs).
LOW_SNR = (("ggwave_m8db_0.raw", "72976d", 1.0), ("ggwave_m8db_p2.raw", "c646b0", 1.02),
           ("ggwave_m8db_m2.raw", "1ccb85", 0.98))


def test_real_ggwave_audio_at_minus_8_db():
    for name, hexp, ratio in LOW_SNR:
        rx = G.GgwaveReceiver()
        got = run(rx, read_raw(name), 512)
        assert got == [unhex(hexp)], (name, got, rx.state, rx.fail_code)
        assert rx.state == G.STATE_DONE
        assert abs(rx.ratio - ratio) < 0.002, (name, rx.ratio)


def test_a_lent_ring_full_of_stale_audio_decodes_the_same():
    # Listening mode lends the runtime's jitter ring (satellite.buffers LISTEN_RING) to the receiver instead
    # of allocating 16 KB in a fragmented heap; it still holds old audio then, which must not matter.
    for name, hexp, ratio in LOW_SNR[:2]:
        ring = bytearray(G.RING_BYTES + 100)
        for i in range(len(ring)):
            ring[i] = (i * 89 + 7) & 0xFF
        rx = G.GgwaveReceiver(ring=ring)
        if VIPER is not None:
            assert rx._ring is ring
        got = run(rx, read_raw(name), 512)
        assert got == [unhex(hexp)], (name, got, rx.state, rx.fail_code)
    small = bytearray(G.RING_BYTES - 2)
    rx = G.GgwaveReceiver(ring=small)
    assert rx._ring is not small


# -- our own generator: good, corrupted, truncated, over-long -----------------------------------

def test_synth_round_trip_drift_and_progress():
    payload = b"\x00\xffprovision\x01"
    for ratio in (1.0, 1.02, 0.98):
        rx = G.GgwaveReceiver()
        sig = synth(encode_bytes(payload), ratio=ratio, noise=3000, seed=3)
        seen = []
        buf = array("h", bytes(1000))
        got = None
        for i in range(0, len(sig) - 500, 500):
            for j in range(500):
                buf[j] = sig[i + j]
            p = rx.feed(buf, 500)
            if p is not None:
                got = p
            if rx.state == G.STATE_RECEIVING:
                seen.append(rx.progress)
        assert got == payload, (ratio, rx.fail_code)
        assert seen and seen[0] == 0 and max(seen) >= 80 and seen == sorted(seen)
        assert rx.state == G.STATE_DONE and rx.progress == 100


def test_symbol_errors_within_capacity_are_corrected():
    payload = b"0123456789abcdefghij"          # n = 20 -> 8 parity bytes, corrects 4
    stream = encode_bytes(payload)
    for p in (3, 9, 20, 29):                   # 4 wrong bytes inside the RS word
        stream[p] ^= 0x11
    rx = G.GgwaveReceiver()
    assert run(rx, synth(stream)) == [payload]


def test_too_many_symbol_errors_never_yield_a_payload():
    payload = b"0123456789abcdefghij"
    rnd = Lcg(11)
    for trial in range(3):
        stream = encode_bytes(payload)
        for p in (4, 8, 12, 16, 20, 24):       # 6 wrong bytes > 4 correctable
            stream[p] = (stream[p] + 1 + rnd.below(255)) & 255
        rx = G.GgwaveReceiver()
        assert run(rx, synth(stream, seed=trial)) == []
        assert rx.state == G.STATE_FAILED and rx.fail_code == G.FAIL_RS


def test_truncated_transmission_never_yields_a_payload():
    for payload, cut in ((b"x" * 50, 40), (b"k", 4), (b"abcd", 7)):
        stream = encode_bytes(payload)
        for noise in (0, 2000):
            rx = G.GgwaveReceiver()
            sig = synth(stream, stop_at=cut, noise=noise, tail=20000)
            assert run(rx, sig) == []
            assert rx.state == G.STATE_FAILED


def test_length_over_140_rejected_before_allocating():
    stream = bytearray(3 + 200 + 2)            # a length code saying 200 bytes, valid RS
    stream[0] = 200
    RS.RS().encode(stream, 0, 1, 2)
    rx = G.GgwaveReceiver()
    assert run(rx, synth(stream[:12], tail=8000)) == []
    assert rx.state == G.STATE_FAILED and rx.fail_code == G.FAIL_LENGTH


def test_sixty_seconds_of_noise_never_yield_a_payload():
    rx = G.GgwaveReceiver()
    rnd = Lcg(5)
    buf = array("h", bytes(1024))
    seconds = 60
    for blk in range(seconds * 16000 // 512):
        amp = (1 + blk % 7) * 1200
        for j in range(512):
            buf[j] = ((rnd.next() & 0xFFFF) - 32768) * amp // 32768
        assert rx.feed(buf, 512) is None
        # the low-SNR marker test (48 pair votes over 3 windows, >= 41 needed; noise gives 24 +- 3.5)
        # must not fire on noise either: not one false start in 60 s
        assert rx.state == G.STATE_IDLE, blk


def test_bad_use_is_a_typed_error():
    e = raises(G.GgwaveError, G.GgwaveReceiver, 48000)
    assert e.code == "rate"
    rx = G.GgwaveReceiver()
    e = raises(G.GgwaveError, rx.feed, array("h", [0] * 10), 11)
    assert e.code == "buffer"
    e = raises(G.GgwaveError, rx.feed, bytearray(20), 11)
    assert e.code == "buffer"
    assert rx.feed(bytearray(20), 10) is None     # little-endian bytes are accepted too


# -- pure == viper, zero allocation -------------------------------------------------------------

def test_pure_equals_viper_kernels_bit_for_bit():
    if VIPER is None:
        assert not IS_MICROPYTHON
        return
    rx = G.GgwaveReceiver(kernels=PURE)
    rnd = Lcg(3)
    srcs = []
    a = array("h", [0] * 64)
    for i in range(64):                        # full-scale square wave near the lowest tone
        a[i] = 32767 if (i * 1125 * 2 // 16000) & 1 else -32768
    srcs.append(a)
    srcs.append(array("h", [-32768] * 64))
    srcs.append(array("h", [32767] * 64))
    for _ in range(6):
        srcs.append(array("h", [(rnd.next() & 0xFFFF) - 32768 for _ in range(64)]))
    ring_p = array("h", [0] * (16 * 64))
    ring_v = array("h", [0] * (16 * 64))
    st_p = array("h", [0] * 64)
    st_v = array("h", [0] * 64)
    for si in range(16):
        src = srcs[si % len(srcs)]
        PURE.load(st_p, 0, src, 0, 64)
        VIPER.load(st_v, 0, src, 0, 64)
        assert st_p == st_v
        PURE.gblock(st_p, rx._coef, rx._cw, si, ring_p, si * 64)
        VIPER.gblock(st_v, rx._coef, rx._cw, si, ring_v, si * 64)
    assert ring_p == ring_v
    assert max(abs(v) for v in ring_p) > 16000       # the extremes really were exercised
    out_p = array("i", [0] * 38)
    out_v = array("i", [0] * 38)
    for c in range(13):
        for t0, n in ((0, 16), (9, 16), (15, 7)):
            PURE.csum(ring_p, 16, t0, n, rx._cand, c * 64, out_p)
            VIPER.csum(ring_v, 16, t0, n, rx._cand, c * 64, out_v)
            assert out_p == out_v, (c, t0, n)
    # bytes input (I2S readinto buffers) loads like array('h')
    raw = bytearray(128)
    for i in range(64):
        v = srcs[3][i] & 0xFFFF
        raw[2 * i] = v & 255
        raw[2 * i + 1] = v >> 8
    PURE.load(st_p, 0, raw, 0, 64)
    VIPER.load(st_v, 0, raw, 0, 64)
    assert st_p == st_v


def test_pure_equals_viper_whole_receiver():
    if VIPER is None:
        return
    sig = read_raw("ggwave_dtfastest_p2.raw")
    rp = G.GgwaveReceiver(kernels=PURE)
    rv = G.GgwaveReceiver(kernels=VIPER)
    assert run(rp, sig, 700) == run(rv, sig, 700) == [b"Ala"]
    assert rp.ratio == rv.ratio and bytes(rp._ring) == bytes(rv._ring) and rp._data == rv._data   # array('h') / bytearray


def test_listening_allocates_nothing():
    if not IS_MICROPYTHON:
        return
    for kern in (PURE, VIPER):
        if kern is None:
            continue
        rx = G.GgwaveReceiver(kernels=kern)
        rnd = Lcg(9)
        buf = array("h", bytes(2 * 512))
        for blk in range(40):                  # 40 blocks of 320 samples: every code path of idle
            for j in range(512):
                buf[j] = ((rnd.next() & 0xFFFF) - 32768) // 8
            assert mem_alloc_delta(rx.feed, buf, 320) == 0, blk
            assert rx.state == G.STATE_IDLE


def test_receiving_allocates_nothing_per_block():
    # once the data phase runs (progress > 0), each block costs 0 bytes until the payload comes
    # back; only the one-off steps (edge, clock refinement, length search, the payload) allocate
    if not IS_MICROPYTHON:
        return
    payload = b"0123456789abcdefghij"
    for kern in (PURE, VIPER):
        if kern is None:
            continue
        rx = G.GgwaveReceiver(kernels=kern)
        sig = synth(encode_bytes(payload), ratio=1.02, noise=2000, seed=4)
        buf = array("h", bytes(2 * 320))
        measured = 0
        got = []
        for i in range(0, len(sig) - 320, 320):
            for j in range(320):
                buf[j] = sig[i + j]
            before = rx.progress if rx.state == G.STATE_RECEIVING else 0
            d = mem_alloc_delta(rx.feed, buf, 320)
            if before > 0 and rx.state == G.STATE_RECEIVING:
                assert d == 0, (i, d)
                measured += 1
            elif rx.state == G.STATE_DONE and not got:
                got.append(rx.progress)
        assert got == [100] and measured > 60, (got, measured)


def test_viper_csum_refuses_a_ring_length_its_mask_cannot_wrap():
    # the viper kernel wraps the ring with rlen - 1 as a mask: any other length would read the wrong slots
    if VIPER is None:
        assert not IS_MICROPYTHON
        return
    out = array("i", [0] * 38)
    try:
        VIPER.csum(bytearray(2 * 96 * 64), 96, 0, 16, array("h", [0] * 64), 0, out)
    except ValueError as e:
        assert "not a power of two" in str(e)
    else:
        assert False, "csum accepted a ring of 96 slots"
