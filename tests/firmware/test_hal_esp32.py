# dual: cpython micropython
# The ESP32 HAL (satellite.hal.esp32) against fake_machine, a fake of the esp32 port's machine.I2S that
# enforces the port's real constraints (MicroPython v1.27.0 ports/esp32/machine_i2s.c: keyword arguments,
# no mck, 8-byte RX DMA frames, one object per controller, ibuf accounting). The fake is passed in, never
# imported as `machine`. Each test names the issue-17 point it proves.
import json

import fake_machine as FM
from mpsupport import IS_MICROPYTHON, mem_alloc_delta, raises
from satellite import audio
from satellite.hal import esp32 as E

_HERE = __file__.rpartition("/")[0] or "."
_HW = ("devkitc1-inmp441", "xiao-esp32s3-sense-inmp441", "atoms3r-echobase", "esp32-s3-box-3",
       "esp32-s3-korvo-2")


def _board(name):
    with open(_HERE + "/../../boards/%s.json" % name) as f:
        return json.load(f)


def _hal(name, board=None, mck=False):
    fm = FM.FakeMachine(mck=mck)
    hal = E.Esp32Hal(board or _board(name), machine=fm, neopixel=FM.FakeNeoPixelModule(), clock=fm.clock)
    hal.log = _quiet
    return hal, fm


def _quiet(line):
    pass


def _run_mic(hal, fm, dst, ms, take=True):
    """Let `ms` of audio pass in 1 ms steps, taking each chunk the irq announces; returns chunks taken."""
    n = 0
    t = 0
    while t < ms:
        fm.advance_us(1000)
        t += 1
        if take and hal.mic_wait_ms() == 0:
            hal.mic_take(dst, 0, len(dst) // 2)
            n += 1
    return n


def _ramp_ok(chunks):
    # the fake's DMA frame i carries i in the top 16 bits of the left slot: consecutive, no gap
    prev = None
    for c in chunks:
        for i in range(0, len(c), 2):
            v = c[i] | (c[i + 1] << 8)
            if prev is not None and v != ((prev + 1) & 0x7FFF):
                return False
            prev = v
    return True


# -- ibuf in 8-byte RX DMA frames, >= 200 ms -------------------------------------------------------------
def test_mic_ibuf_sized_in_8_byte_dma_frames_for_200ms_on_every_board():
    for name in _HW:
        b = _board(name)
        hal, fm = _hal(name, b)
        if not hal.mic_supported:
            continue
        rate = b["audio"]["mic"]["rates"][0]
        hal.mic_open(rate, rate // 50)
        c = fm.live(b["audio"]["mic"]["i2s_id"])
        assert c is not None and c.mode == FM.RX, name
        assert c.ibuf_waste == 0, (name, c.ibuf)              # whole 256-frame DMA buffers, nothing wasted
        assert c.ibuf == c.dma_frames * 8, (name, c.ibuf)
        assert c.dma_frames * 1000 // rate >= 200, (name, c.dma_frames)
        assert c.dma_frames * 1000 // rate >= b["audio"]["mic"]["dma_ms"], name
        assert hal.mic_dma_frames == c.dma_frames
        hal.mic_close()
        assert fm.live(b["audio"]["mic"]["i2s_id"]) is None and fm.dma_in_use == 0


def test_mic_survives_a_180ms_stall_without_losing_a_frame():
    # an X25519 (~50 ms on the S3), a GC pass or a flash write between two reads
    hal, fm = _hal("devkitc1-inmp441")
    hal.mic_open(16000, 320)
    dst = bytearray(640)
    got = []
    t = 0
    while t < 100:
        fm.advance_us(1000)
        t += 1
        if hal.mic_wait_ms() == 0:
            hal.mic_take(dst, 0, 320)
            got.append(bytes(dst))
    fm.advance_us(180000)                     # the main task is busy: nobody reads
    while t < 600:
        fm.advance_us(1000)
        t += 1
        while hal.mic_wait_ms() == 0:
            hal.mic_take(dst, 0, 320)
            got.append(bytes(dst))
    c = fm.live(0)
    assert c.lost_frames == 0, c.lost_frames
    assert hal.mic_overruns == 0
    assert len(got) >= 38 and _ramp_ok(got)   # 860 ms of audio, every frame in order


def test_mic_overruns_are_counted_when_a_stall_outlasts_the_dma_ring():
    hal, fm = _hal("devkitc1-inmp441")
    hal.mic_open(16000, 320)
    dst = bytearray(640)
    _run_mic(hal, fm, dst, 100)
    assert hal.mic_overruns == 0
    fm.advance_us(500000)                     # 500 ms without a read: more than the 208 ms ring
    _run_mic(hal, fm, dst, 400)
    lost = fm.live(0).lost_frames
    assert lost > 0
    assert hal.mic_overruns == 1
    d = hal.mic_lost_frames() - lost
    assert -32 <= d <= 32, (hal.mic_lost_frames(), lost)      # within 2 ms of what the port dropped
    _run_mic(hal, fm, dst, 400)
    assert hal.mic_overruns == 1              # steady again: no new overrun


# -- X25519 kept out of an active capture -----------------------------------------------------------------
def test_handshake_closes_an_open_mic_before_any_x25519():
    import asyncio
    import rt_harness as H
    from satellite import runtime as RT
    from satellite.link import LinkError
    from satellite.noise import state as NS

    b = _board("devkitc1-inmp441")
    hal, fm = _hal("devkitc1-inmp441", b)
    rt = RT.Runtime(b, hal, H.MemStore(), log=_quiet)
    hal.mic_open(16000, 320)                   # a capture some path left open
    seen = []
    xmod = NS._x25519
    orig_x, orig_pk = xmod.x25519, xmod.public_key

    def spy_x(k, u, impl=None):
        seen.append(hal.mic_busy())
        return orig_x(k, u, impl)

    def spy_pk(k, impl=None):
        seen.append(hal.mic_busy())
        return orig_pk(k, impl)

    class Sock:
        def write(self, buf, n=None):
            return len(buf) if n is None else n

        def readinto(self, buf):
            return 0                           # the core hangs up: the handshake ends after message 1

        def close(self):
            pass

    async def connect(host, port):
        return Sock()

    rt.connect = connect
    priv = bytes(range(1, 33))
    pub = orig_pk(priv)
    xmod.x25519, xmod.public_key = spy_x, spy_pk
    try:
        try:
            asyncio.run(rt._handshake("core", 1, "XX", None, priv, pub))
        except LinkError:
            pass
    finally:
        xmod.x25519, xmod.public_key = orig_x, orig_pk
    assert seen, "the XX initiator's first message computes its ephemeral key"
    assert True not in seen
    assert fm.live(0) is None


# -- codec clock plans per direction and rate -------------------------------------------------------------
def _es8311_internal_clock(fm, bclk):
    regs = fm.i2c.regs
    r1 = regs[(0x18, 0x01)]
    r2 = regs[(0x18, 0x02)]
    assert r1 & 0x80, "ES8311 MCLK source is BCLK (REG01 bit 7)"
    mult = (1, 2, 4, 8)[(r2 >> 3) & 3]
    pre_div = (r2 >> 5) + 1
    return bclk * mult // pre_div


def test_es8311_clock_plan_follows_the_bus_bclk_per_direction_and_rate():
    hal, fm = _hal("atoms3r-echobase")
    for rate in (16000, 24000):
        hal.mic_open(rate, rate // 50)
        c = fm.live(0)
        assert c.bclk == 64 * rate                           # RX is 32-bit stereo on this port
        assert _es8311_internal_clock(fm, c.bclk) == 256 * rate
        hal.mic_close()
        hal.spk_open(rate, rate // 50)
        c = fm.live(0)
        assert c.bclk == 32 * rate                           # 16-bit TX
        assert _es8311_internal_clock(fm, c.bclk) == 256 * rate
        hal.spk_close()


# -- amp enables: a GPIO (BOX-3, Korvo-2) or the Echo Base's PI4IOE5V6408 expander on the codec's I2C bus ---
def _ioe_writes(fm):
    return fm.i2c.writes(0x43) if fm.i2c is not None else []


def test_echo_base_amp_is_switched_through_the_pi4ioe_at_speaker_open_and_close():
    b = _board("atoms3r-echobase")
    amp = b["amp_enable"]
    assert (amp["expander"], amp["address"], amp["mask"]) == ("pi4ioe5v6408", 0x43, 0x6F)
    hal, fm = _hal("atoms3r-echobase", b)
    # at boot: outputs driven (high-Z 0x07 off), pull-ups selected (0x0D), outputs low (0x05), then the
    # mask bits made outputs (0x03): the amp stays off until a render
    assert _ioe_writes(fm) == [(0x07, 0x00), (0x0D, 0xFF), (0x05, 0x00), (0x03, 0x6F)]
    assert fm.i2c.writes(0x18)                               # the same bus object the ES8311 is on
    for rate in (16000, 24000):
        fm.i2c.log = []
        hal.mic_open(rate, rate // 50)
        hal.mic_close()
        assert _ioe_writes(fm) == []                         # the mic never touches the amp
        hal.spk_open(rate, rate // 50)
        assert _ioe_writes(fm) == [(0x05, 0x6F)]             # amp on with the speaker
        fm.i2c.log = []
        hal.spk_close()
        assert _ioe_writes(fm) == [(0x05, 0x00)]             # and off when the render has drained


def test_no_expander_writes_on_boards_without_one_and_the_gpio_amp_follows_the_speaker():
    for name in _HW:
        if name == "atoms3r-echobase":
            continue
        hal, fm = _hal(name)
        hal.spk_open(16000, 320)
        on = hal._amp.value() if hal._amp is not None else None
        hal.spk_close()
        assert _ioe_writes(fm) == [], name
        amp = _board(name).get("amp_enable")
        if amp:                                              # BOX-3 GPIO46, Korvo-2 GPIO48
            assert on == amp["active_level"] and hal._amp.value() == 1 - amp["active_level"], name


# -- MCLK for the ES7210 ---------------------------------------------------------------------------------
def test_es7210_mic_is_unsupported_on_the_official_image_never_a_pwm_clock():
    for name in ("esp32-s3-box-3", "esp32-s3-korvo-2"):
        b = _board(name)
        hal, fm = _hal(name, b)
        assert not hal.mic_supported and "MCLK" in hal.mic_error
        raises(E.HalError, hal.mic_open, 16000, 320)
        assert fm.allocs == [] and fm.pwms == []             # nothing opened, no PWM stand-in
        assert [u for u in b["unsupported"] if "mck" in u and "ES7210" in u]
        hal.spk_open(16000, 320)                             # the speaker works
        assert fm.live(0).mode == FM.TX and fm.live(0).mck is None


def test_es7210_mic_on_a_custom_image_passes_mck_and_the_official_one_refuses_it():
    b = _board("esp32-s3-box-3")
    b["audio"]["mic"]["mck_output"] = "custom_image"
    hal, fm = _hal("esp32-s3-box-3", b, mck=True)
    assert hal.mic_supported
    hal.mic_open(16000, 320)
    c = fm.live(0)
    assert c.mck == b["audio"]["mic"]["mck"] and c.mode == FM.RX
    hal, fm = _hal("esp32-s3-box-3", b, mck=False)            # that board file on the official image
    raises(TypeError, hal.mic_open, 16000, 320)


# -- short-chunk writes ----------------------------------------------------------------------------------
def test_short_last_chunk_writes_only_its_frames_not_stale_samples():
    hal, fm = _hal("devkitc1-inmp441")
    hal.set_volume(16384)
    hal.spk_open(16000, 320)
    src = bytearray(640)
    for i in range(0, 640, 2):
        src[i] = 0x11
        src[i + 1] = 0x11
    assert hal.spk_write(src, 0, 320) == 320
    fm.advance_us(1000)
    assert hal.spk_wait_ms() == 0
    for i in range(0, 200, 2):
        src[i] = 0x22
        src[i + 1] = 0x22
    assert hal.spk_write(src, 0, 100) == 100                  # the render's last, short chunk
    fm.advance_us(200000)
    out = bytes(fm.live(1).played)
    want = b"\x11" * 640 + b"\x22" * 200
    assert out[:840] == want
    assert out[840:] == bytes(len(out) - 840)                 # then silence (auto_clear), no stale 0x11


# -- I2S objects kept across renders where the port allows ----------------------------------------------
def _render(hal, fm, frames=3):
    hal.spk_open(16000, 320)
    buf = bytearray(640)
    for _ in range(frames):
        while hal.spk_wait_ms():
            fm.advance_us(1000)
        hal.spk_write(buf, 0, 320)
    while hal.spk_drain_ms():
        fm.advance_us(1000)
    hal.spk_close()


def test_speaker_i2s_and_its_dma_kept_across_renders_on_its_own_controller():
    hal, fm = _hal("devkitc1-inmp441")
    for _ in range(3):
        _render(hal, fm)
        hal.mic_open(16000, 320)              # a capture between the replies, on the other controller
        hal.mic_close()
    tx = [a for a in fm.allocs if a[1] == "tx"]
    assert len(tx) == 1, fm.allocs            # one DMA allocation for three renders (irq set once, too)
    hal.spk_stop()                            # barge-in still releases it at once
    assert fm.live(1) is None


def test_half_duplex_never_holds_two_objects_on_the_shared_controller():
    hal, fm = _hal("atoms3r-echobase")
    hal.mic_open(16000, 320)
    hal.spk_open(16000, 320)                  # the runtime forgot the mic: the HAL releases it itself
    c = fm.live(0)
    assert c is not None and c.mode == FM.TX
    hal.mic_close()                           # must not deinit the speaker through a stale reference
    assert fm.live(0) is c and c.mode == FM.TX
    hal.spk_close()
    assert fm.live(0) is None                 # the shared bus goes back to the mic
    hal.mic_open(16000, 320)
    assert fm.live(0).mode == FM.RX


def test_render_end_waits_for_the_dma_ring_to_play_out():
    hal, fm = _hal("atoms3r-echobase")
    _render(hal, fm, frames=5)
    c = fm.controllers[0]
    assert c.is_deinit and c.cut_frames == 0, c.cut_frames   # nothing left unplayed in the DMA at close
    assert len(c.played) >= 5 * 640


# -- hot paths allocate nothing --------------------------------------------------------------------------
def test_steady_state_mic_take_and_speaker_write_allocate_nothing():
    hal, fm = _hal("devkitc1-inmp441")
    hal.mic_open(16000, 320)
    hal.spk_open(16000, 320)
    dst = bytearray(640)
    src = bytearray(640)
    for _ in range(3):                        # warm up
        fm.advance_us(20000)
        hal.mic_take(dst, 0, 320)
        hal.spk_write(src, 0, 320)
    fm.advance_us(20000)
    assert hal.mic_wait_ms() == 0
    d = mem_alloc_delta(hal.mic_take, dst, 0, 320)
    assert d in (None, 0), d
    fm.advance_us(20000)
    assert hal.spk_wait_ms() == 0
    d = mem_alloc_delta(hal.spk_write, src, 0, 320)
    assert d in (None, 0), d
    d = mem_alloc_delta(hal.mic_wait_ms)
    assert d in (None, 0), d


# -- viper load failing with MemoryError -------------------------------------------------------------------
def test_viper_module_failing_with_memoryerror_falls_back_to_the_pure_twin():
    import sys
    mod, fast = audio.load_fast("_viper_mem_bomb", "satellite._audio_pure")
    assert not fast and "_viper_mem_bomb" not in sys.modules
    from satellite import _audio_pure
    assert mod is _audio_pure
    src = bytearray(b"\x00\x10\x00\x20")                       # two s16 mono samples
    dst = bytearray(4)
    mod.mic_to_s16(dst, 0, src, 2, audio.fmt_code(16, 1, 0, audio.MIC_SHIFT), 256)
    assert dst == src
    mod, fast = audio.load_fast("satellite._audio_viper", "satellite._audio_pure")
    assert fast == IS_MICROPYTHON             # the real fast path still loads where viper exists


def test_es7210_board_on_the_official_image_declares_no_mic_and_refuses_captures():
    import rt_harness as H
    from satellite import runtime as RT
    from satellite.wire import alabama_v1 as pb
    b = _board("esp32-s3-box-3")
    hal, fm = _hal("esp32-s3-box-3", b)
    rt = RT.Runtime(b, hal, H.MemStore(), log=_quiet)
    kinds = [c.kind for c in rt.surface("").capabilities]
    assert pb.CapabilityKind.CAPABILITY_MIC not in kinds
    assert pb.CapabilityKind.CAPABILITY_SPEAKER in kinds
    hal2, fm2 = _hal("devkitc1-inmp441")
    rt2 = RT.Runtime(_board("devkitc1-inmp441"), hal2, H.MemStore(), log=_quiet)
    assert pb.CapabilityKind.CAPABILITY_MIC in [c.kind for c in rt2.surface("").capabilities]


def test_reset_cause_is_named_by_the_ports_constants():
    """hal.reset_cause() (device.info's reset_reason): machine.reset_cause() by the name of the machine constant
    it equals (docs/library/machine.rst); a cause the port does not map (0) is said as a number."""
    hal, fm = _hal("devkitc1-inmp441")
    consts = {"PWRON_RESET": 1, "HARD_RESET": 2, "WDT_RESET": 3, "DEEPSLEEP_RESET": 4, "SOFT_RESET": 5}
    for name, v in consts.items():
        setattr(fm, name, v)
    for name, v in consts.items():
        fm.reset_cause = lambda v=v: v
        assert hal.reset_cause() == name
    fm.reset_cause = lambda: 0
    assert hal.reset_cause() == "reset_cause 0"


class FakeEsp32:
    """The esp32 module's idf_heap_info (docs/library/esp32.rst): per region (total, free, largest free, min free)."""
    HEAP_DATA = 4

    def __init__(self, regions):
        self.regions = regions
        self.asked = []

    def idf_heap_info(self, caps):
        self.asked.append(caps)
        return self.regions


def test_heap_largest_free_is_the_largest_free_block_of_the_idf_data_heap():
    """device.info's heap_largest_free (fragmentation): the largest free block over the HEAP_DATA regions."""
    fm = FM.FakeMachine()
    e = FakeEsp32([(327680, 120000, 65536, 90000), (8388608, 4000000, 3997696, 3900000), (14336, 9000, 8192, 0)])
    hal = E.Esp32Hal(_board("devkitc1-inmp441"), machine=fm, neopixel=FM.FakeNeoPixelModule(), clock=fm.clock,
                     esp32=e)
    assert hal.heap_largest_free() == 3997696 and e.asked == [FakeEsp32.HEAP_DATA]
    e.regions = []
    assert hal.heap_largest_free() == 0
