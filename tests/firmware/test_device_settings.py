# dual: cpython micropython
# satellite.device keeps private copies of two figures it does not own (fewer module globals at rest, and the
# settings table is one const tuple, in flash when frozen): they must equal their owners'.
from satellite import audio
from satellite import buffers
from satellite import device


def test_the_settings_table_reads_the_gain_ceiling_of_audio():
    assert device.row("mic_gain")[3] == audio.MAX_GAIN_DB
    assert device.check_setting_raw("mic_gain", audio.MAX_GAIN_DB) == audio.MAX_GAIN_DB
    assert device.check_setting_raw("mic_gain", audio.MAX_GAIN_DB + 1) is None


def test_the_frame_period_is_the_buffers_one():
    # a const: a global on CPython, inlined by MicroPython (there the rt_harness session below checks it)
    f = getattr(device, "_FRAME_MS", None)
    assert f is None or f == buffers.FRAME_MS
    import rt_harness
    rt, sat, core, sink, hal = rt_harness.make()
    assert sat.nframes == rt.mic_rate * buffers.FRAME_MS // 1000
    assert sat.pframes == rt.spk_rate * buffers.FRAME_MS // 1000
