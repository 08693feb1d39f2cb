# dual: cpython micropython
# Multi-part sound provisioning, board side (satellite.provision.parts and listening mode): a record with a
# 32-byte SSID and a 63-byte passphrase, over ggwave's 140-byte limit, arrives as numbered parts and is
# reassembled in any order, a repeat ignored, a damaged or foreign part dropped without losing the set, a part
# of another record starting the set again, every length checked against a named limit; the LED asks for a
# missing part (LED_PARTS) until it comes. The parts are the host splitter's own bytes (PARTS_HEX:
# tests/host/test_provision_parts.py checks alabama.provision.parts.split still makes exactly these).
from mpsupport import raises

from satellite import keystore as K
from satellite.provision import ggwave_rx as G
from satellite.provision import listen as L
from satellite.provision import parts as P
from satellite.provision import record as R

from test_provision_listen import FakeRx, LedLog, fresh

# record.build("192.168.100.200", 7355, bytes(range(32)), "k3J9-pQ2vX7mZr0aLw5eYt", 1767225600,
#              "Upstairs-Office-Network-5GHz-Ext", "correct horse battery staple and a long tail of words to 63 ch!")
RECORD_HEX = ("010a0f3139322e3136382e3130302e32303010bb391a20000102030405060708090a0b0c0d0e0f101112131415161718191a1b"
              "1c1d1e1f22166b334a392d7051327658376d5a7230614c77356559742880f2d6ca06322055707374616972732d4f66666963"
              "652d4e6574776f726b2d3547487a2d4578743a3f636f727265637420686f727365206261747465727920737461706c652061"
              "6e642061206c6f6e67207461696c206f6620776f72647320746f2036332063682120348dec")
PARTS_HEX = (
    ("5002bc0020348dec010a0f3139322e3136382e3130302e32303010bb391a20000102030405060708090a0b0c0d0e0f10"
     "1112131415161718191a1b1c1d1e1f22166b334a392d7051327658376d5a7230614c77356559742880f2d6ca06322055"
     "707374616972acef78d7"),
    ("5012bc0020348dec732d4f66666963652d4e6574776f726b2d3547487a2d4578743a3f636f727265637420686f727365"
     "206261747465727920737461706c6520616e642061206c6f6e67207461696c206f6620776f72647320746f2036332063"
     "682120348dec33f531c1"),
)


def _parts():
    return [bytes.fromhex(h) for h in PARTS_HEX]


def _crc_fix(p):
    """A part with its part CRC-32 recomputed (to build parts that are well-formed but say something wrong)."""
    import binascii
    body = bytes(p[:-4])
    c = binascii.crc32(body) & 0xFFFFFFFF
    return body + bytes([c & 0xFF, (c >> 8) & 0xFF, (c >> 16) & 0xFF, c >> 24])


def test_vector_is_a_record_with_a_32_byte_ssid_and_a_63_byte_passphrase_over_the_sound_limit():
    rec = R.decode(bytes.fromhex(RECORD_HEX))
    assert len(rec.wifi_ssid) == 32 and len(rec.wifi_passphrase) == 63
    assert len(bytes.fromhex(RECORD_HEX)) > P.MAX_PAYLOAD
    ps = _parts()
    assert len(ps) == 2 and all(len(p) <= P.MAX_PAYLOAD and P.is_part(p) for p in ps)
    assert not P.is_part(bytes.fromhex(RECORD_HEX))               # the single-part format: version first


def test_parts_reassemble_in_either_order_and_a_repeat_is_ignored():
    want = bytes.fromhex(RECORD_HEX)
    for order in ((0, 1), (1, 0), (1, 1, 0), (0, 0, 1)):
        a = P.Assembler()
        results = [a.add(_parts()[i]) for i in order]
        assert results[-1] == P.COMPLETE and all(r != P.COMPLETE for r in results[:-1]), (order, results)
        if len(order) == 3:
            assert results[1] == P.REPEAT
        assert bytes(a.record()) == want


def test_damaged_or_impossible_parts_are_refused_and_the_set_is_kept():
    p0, p1 = _parts()
    flipped = bytearray(p0)
    flipped[20] ^= 1
    too_many = bytearray(p0)
    too_many[1] = 0x04                                             # part 1 of 4: over MAX_PARTS
    beyond = bytearray(p0)
    beyond[1] = 0x22                                               # part 3 of 2
    huge = bytearray(p0)
    huge[2], huge[3] = 0x41, 0x01                                  # a 321-byte record: over MAX_RECORD
    short = bytearray(p1)
    short[2] = 0xbe                                                # 190 bytes: part 2 would carry 95, not 94
    cases = ((bytes(flipped), "PART_CRC"), (_crc_fix(too_many), "PART_NUMBER"), (_crc_fix(beyond), "PART_NUMBER"),
             (_crc_fix(huge), "PART_LENGTH"), (_crc_fix(short), "PART_LENGTH"), (p0[:12], "PART_LENGTH"),
             (p0 + bytes(P.MAX_PAYLOAD), "PART_LENGTH"))
    for bad, code in cases:
        a = P.Assembler()
        assert a.add(p0) == P.ADDED
        e = raises(P.PartError, a.add, bad)
        assert e.code == code, (code, e.code, str(e))
        assert a.held() == 1 and a.missing() == [2]                # the good part is kept
        assert a.add(p1) == P.COMPLETE and bytes(a.record()) == bytes.fromhex(RECORD_HEX)


def test_a_part_of_another_record_starts_the_set_again():
    p0, p1 = _parts()
    other = bytearray(p0)
    other[4] ^= 0xFF                                               # another record's CRC names another set
    a = P.Assembler()
    assert a.add(_crc_fix(other)) == P.ADDED
    assert a.add(p1) == P.ADDED and a.missing() == [1]             # p1 began a new set: the foreign part is gone
    assert a.add(p0) == P.COMPLETE and bytes(a.record()) == bytes.fromhex(RECORD_HEX)


def test_parts_that_do_not_make_the_record_they_name_are_refused():
    p0, p1 = _parts()
    lie = bytearray(p1)
    lie[20] ^= 1                                                   # content changed, part CRC made right again
    a = P.Assembler()
    a.add(p0)
    e = raises(P.PartError, a.add, _crc_fix(lie))
    assert e.code == "PART_SET" and a.count == 0                   # nothing half-believed is kept


def _listener(steps, leds, lines):
    return L.Listener(fresh(), on_led=leds, log=lines.append, receiver=FakeRx(steps))


def test_listening_mode_stores_a_record_from_its_parts_and_the_led_asks_for_a_missing_one():
    p0, p1 = _parts()
    leds = LedLog()
    lines = []
    li = _listener([(G.STATE_RECEIVING, 50, None), (G.STATE_DONE, 100, p1),      # part 2 first
                    (G.STATE_RECEIVING, 20, None), (G.STATE_FAILED, 20, None),    # part 1 lost
                    (G.STATE_IDLE, 0, None),
                    (G.STATE_RECEIVING, 50, None), (G.STATE_DONE, 100, p1),       # the sound again: 2 is a repeat
                    (G.STATE_RECEIVING, 50, None), (G.STATE_DONE, 100, p0)], leds, lines)
    got = [li.feed(bytearray(2), 1) for _ in range(9)]
    assert got[:8] == [None] * 8 and got[8] is not None
    assert li.ks.read(K.RECORD) == bytes.fromhex(RECORD_HEX) and li.ks.pinned_core_key() == bytes(range(32))
    assert got[8].wifi_ssid == "Upstairs-Office-Network-5GHz-Ext"
    assert leds.states() == [L.LED_LISTENING, L.LED_RECEIVING, L.LED_PARTS, L.LED_RECEIVING, L.LED_PARTS,
                             L.LED_RECEIVING, L.LED_PARTS, L.LED_RECEIVING, L.LED_STORED]
    assert (L.LED_PARTS, 50) in leds.seen                                         # half the parts held
    assert "provision: part 2 of 2 received" in lines
    assert "provision: part 1 of 2 missing: play the sound again" in lines
    assert "provision: part 2 of 2 again: already held, ignored" in lines
    assert "provision: all 2 parts in" in lines


def test_a_single_part_record_still_works_while_a_set_is_begun():
    p0, _ = _parts()
    small = R.encode(R.decode(bytes.fromhex(RECORD_HEX)).__class__(core_host="h", core_port=1))
    leds = LedLog()
    li = _listener([(G.STATE_DONE, 100, p0), (G.STATE_DONE, 100, small)], leds, [])
    assert li.feed(bytearray(2), 1) is None and li.led == L.LED_PARTS
    rec = li.feed(bytearray(2), 1)
    assert rec is not None and rec.core_host == "h" and li.ks.read(K.RECORD) == small


def test_a_damaged_part_is_rejected_and_the_led_still_asks_for_the_missing_one():
    p0, p1 = _parts()
    bad = bytearray(p1)
    bad[30] ^= 1
    leds = LedLog()
    lines = []
    li = _listener([(G.STATE_DONE, 100, p0), (G.STATE_DONE, 100, bytes(bad)), (G.STATE_DONE, 100, p1)], leds, lines)
    assert li.feed(bytearray(2), 1) is None
    assert li.feed(bytearray(2), 1) is None
    assert li.reject_code == "PART_CRC" and li.led == L.LED_PARTS and li.ks.read(K.RECORD) is None
    assert li.feed(bytearray(2), 1) is not None
    assert li.ks.read(K.RECORD) == bytes.fromhex(RECORD_HEX)


def test_hal_led_fallback_shows_a_missing_part_as_listening_brightening():
    seen = []

    class Hal:
        def led(self, phase, level):
            seen.append((phase, level))
    show = L.hal_led(Hal())
    show(L.LED_PARTS, 50)
    show(L.LED_LISTENING, 0)
    assert seen == [(1, 60), (1, 20)]
