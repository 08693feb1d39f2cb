# dual: cpython micropython
# satellite.health without a network: device.info's fields and sources, the device.health Event (boot once,
# an RSSI move of RSSI_STEP dB, low heap once), the firmware.update refusal for an unpaired core, and a frozen
# image (no firmware.update, device.info reports the image's digest).
import json
import os

import asyncio

import otaboot as B
from satellite import health as H
from mpsupport import IS_MICROPYTHON, scratch
from satellite.wire import alabama_v1 as pb

_HOME = os.getcwd()


def fresh():
    os.chdir(_HOME)
    root = scratch("health")
    B.rmtree(root)
    os.mkdir(root)
    os.chdir(root)


class Ring:
    dropped = 3


class Hal:
    def __init__(self):
        self.r = -50

    def rssi(self):
        return self.r

    def reset_cause(self):
        return "WDT_RESET"

    def flash_free(self):
        return 123456


class Rt:
    def __init__(self):
        self.hal = Hal()
        self.connections = 3
        self.attempts = 1
        self.frames_dropped = 4
        self.ring = Ring()
        self.record = None
        self.core_key_in_use = b"\x01" * 32
        self.frozen = ""
        self.watchdog = 30000

        class KS:
            def pinned_core_key(self):
                return None
        self.ks = KS()

    def info(self):
        return {"board": "t", "firmware": "1.2.3", "uptime_ms": 42}

    def frozen_digest(self):
        return self.frozen


class Sess:
    def event(self, name, metadata=""):
        return pb.Envelope(id=0, event=pb.Event(id=name, metadata=metadata))

    def error(self, id, code, message=""):
        return pb.Envelope(id=id, error=pb.Error(code=code, message=message))

    def tool_result(self, id, content=(), is_error=False):
        return pb.Envelope(id=id, tool_result=pb.ToolResult(content=list(content), is_error=is_error))


class Sat:
    def __init__(self):
        self.closed = False
        self.sent = []
        self.s = Sess()
        self.lines = []
        self.tasks = []

    def send(self, env):
        self.sent.append(env)

    def log(self, line):
        self.lines.append(line)

    def spawn(self, coro):
        self.tasks.append(coro)


def events(sat):
    return [json.loads(e.event.metadata) for e in sat.sent if e.event is not None]


def test_device_info_fields_come_from_runtime_hal_and_otaboot():
    fresh()
    B.write_json(B.BOOTREC, {"boots": 7, "crashes": 2, "last_crash": "ValueError: x", "reset_note": "crash"})
    B.set_state({"state": "rolled_back", "version": "9", "error": "did not reach a session within 3 boots"})
    h = H.Health(Rt())
    i = h.info()
    assert i["firmware"] == "1.2.3" and i["uptime_ms"] == 42 and i["firmware_digest"] == ""
    assert i["rssi"] == -50 and i["reset_reason"] == "crash" and i["boots"] == 7 and i["crash_count"] == 2
    assert i["reconnect_count"] == 2 and i["connect_failures"] == 1 and i["frames_dropped"] == 7
    assert i["watchdog_ms"] == 30000                                  # the runtime feeds one (runtime.py)
    assert i["flash_free"] == 123456 and i["heap_min"] <= i["heap_free"] or i["heap_free"] == 0
    assert i["ota"] == {"state": "rolled_back", "version": "9", "error": "did not reach a session within 3 boots"}
    B.write_json(B.BOOTREC, {"boots": 1})
    assert H.Health(Rt()).info()["reset_reason"] == "WDT_RESET"      # no note: the HAL's cause


def test_health_event_boot_once_rssi_move_and_heap_low():
    fresh()
    rt = Rt()
    h = H.Health(rt)
    h.poll_ms = 1
    free = [200000]
    h.mem_free = lambda: free[0]
    h.collect = lambda: None
    h.heap_min = free[0]
    sat = Sat()
    h.on_session(sat)
    h.on_session(sat)                     # a reconnect: no second boot report
    assert [e["reason"] for e in events(sat)] == ["boot"]
    ev = events(sat)[0]
    assert ev["firmware"] == "1.2.3" and ev["ota"] == "ok" and ev["rssi"] == -50 and ev["crash_count"] == 0
    watch = sat.tasks[0]
    sat.tasks[1].close()                  # the reconnect's sampler: not run here

    async def drive():
        t = asyncio.create_task(watch)
        await asyncio.sleep(0.02)                 # first sample: the baseline, not a report
        rt.hal.r = -50 - H.RSSI_STEP + 1
        await asyncio.sleep(0.02)                 # under the step: nothing
        rt.hal.r = -50 - H.RSSI_STEP
        await asyncio.sleep(0.02)
        free[0] = H.HEAP_LOW - 1
        await asyncio.sleep(0.02)
        free[0] = H.HEAP_LOW - 100                # still low: reported once per boot
        await asyncio.sleep(0.02)
        sat.closed = True
        await asyncio.sleep(0.02)
        t.cancel()
    asyncio.run(drive())
    assert [e["reason"] for e in events(sat)] == ["boot", "rssi", "heap_low"] and events(sat)[1]["rssi"] == -60
    assert events(sat)[2]["heap_min"] == H.HEAP_LOW - 1


class Heap:
    """A GC heap: `garbage` bytes of it are freed only by collect() (gc.mem_free() counts them as used)."""

    def __init__(self, live_free, garbage):
        self.live_free = live_free
        self.garbage = garbage
        self.collections = 0

    def mem_free(self):
        return self.live_free - self.garbage

    def collect(self):
        self.collections += 1
        self.garbage = 0


def test_heap_figures_are_read_after_a_collection_so_an_idle_board_is_not_heap_low():
    """device.info and device.health: heap_free/heap_min after gc.collect(); an idle board whose uncollected
    reading is under HEAP_LOW (garbage, not a shortage: the GC sawtooth) reports no heap_low."""
    fresh()
    rt = Rt()
    h = H.Health(rt)
    heap = Heap(170000, 170000 - 13000)               # 13 KB free before a collection, 170 KB after
    h.mem_free, h.collect = heap.mem_free, heap.collect
    h.heap_min = 1 << 20
    i = h.info()
    assert i["heap_free"] == 170000 and i["heap_min"] == 170000 and heap.collections == 1
    h.poll_ms = 1
    sat = Sat()
    h.on_session(sat)
    ev = events(sat)[0]
    assert ev["reason"] == "boot" and ev["heap_min"] == 170000

    async def drive():
        t = asyncio.create_task(sat.tasks[0])
        for _ in range(3):
            heap.garbage = 170000 - 12000             # the sawtooth again between samples
            await asyncio.sleep(0.02)
        sat.closed = True
        await asyncio.sleep(0.02)
        t.cancel()
    asyncio.run(drive())
    assert [e["reason"] for e in events(sat)] == ["boot"] and h.heap_min == 170000


def test_sampler_collects_while_streaming_only_when_the_heap_already_looks_low():
    """A collection walks the heap: with a stream open the sampler reads gc.mem_free() alone, and collects
    only when that reading is under HEAP_LOW; a heap still low after the collection is reported once."""
    fresh()
    h = H.Health(Rt())
    heap = Heap(100000, 0)
    h.mem_free, h.collect = heap.mem_free, heap.collect
    h.heap_min = 1 << 20
    assert h.sample(False) == 100000 and heap.collections == 0       # streaming, ample: no collection
    assert h.sample(True) == 100000 and heap.collections == 1        # idle: collected
    heap.garbage = 100000 - 1000
    assert h.sample(False) == 100000 and heap.collections == 2       # looks low: collected, and it is not
    heap.live_free = H.HEAP_LOW - 1
    assert h.sample(False) == H.HEAP_LOW - 1 and h.heap_min == H.HEAP_LOW - 1


def test_heap_largest_free_comes_from_the_hal_and_is_null_where_unknown():
    """device.info and the device.health Event carry heap_largest_free: the HAL's figure (the esp32 HAL's is
    esp32.idf_heap_info's largest free block), null on a HAL that cannot tell (the unix virtual board)."""
    fresh()
    rt = Rt()
    assert H.Health(rt).info()["heap_largest_free"] is None
    rt.hal.heap_largest_free = lambda: 31744
    h = H.Health(rt)
    assert h.info()["heap_largest_free"] == 31744
    assert json.loads(h.metadata("boot"))["heap_largest_free"] == 31744
    schema = json.loads(H.EVENT_SCHEMA)
    assert set(json.loads(h.metadata("boot"))) <= set(schema["properties"])


def test_firmware_update_needs_the_pinned_core():
    fresh()
    h = H.Health(Rt())
    sat = Sat()

    class Ev:
        id = 4
        name = "firmware.update"
        arguments = json.dumps({"url": "http://10.0.0.2/m.json", "sha256": "a" * 64})
    assert h.tool(sat, Ev) is True
    err = sat.sent[-1].error
    assert err.code == pb.ErrorCode.INVALID_REQUEST and json.loads(err.data) == {"ota_error": "NOT_PAIRED"}
    assert sat.tasks == []                        # nothing downloads
    Ev.arguments = "{not json"
    h.tool(sat, Ev)
    assert json.loads(sat.sent[-1].error.data) == {"ota_error": "BAD_ARGUMENTS"}


def _tool_names(frozen):
    return [t.name for t in H.tools(frozen)]


def test_a_frozen_image_offers_no_firmware_update_and_reports_its_own_digest():
    """On a frozen image WITHOUT OTA slots the satellite package comes from flash before /lib, so an OTA set
    would be staged, swapped and confirmed while the old firmware went on running: the tool is not declared (an
    Invoke draws CAPABILITY_MISSING from the session), Health does not serve it, and device.info reports the
    image's digest, not the manifest of a set left in /lib. (No esp32 module: no slot. test_imgota imports the
    simulated one, which reports ota_0, into the same interpreter when both files share a test worker.)"""
    import sys
    if IS_MICROPYTHON:                # one interpreter per test file there: no esp32 module on the unix port
        return _frozen_without_slots()
    chip = sys.modules.get("esp32", False)
    sys.modules["esp32"] = None       # CPython: `import esp32` raises ImportError, whatever sys.path holds
    try:
        _frozen_without_slots()
    finally:
        if chip is False:
            del sys.modules["esp32"]
        else:
            sys.modules["esp32"] = chip


def _frozen_without_slots():
    fresh()
    assert _tool_names(False) == ["device.info", "firmware.update", "device.set_volume"]   # health owns every tool
    assert _tool_names(True) == ["device.info", "device.set_volume"]
    B.mkdirs("lib/satellite")
    with open("lib/satellite/" + B.MANIFEST, "w") as f:
        f.write(json.dumps({"format": 1, "version": "0.2.0-ota"}))
    rt = Rt()
    i = H.Health(rt).info()
    assert i["image"] == "files" and len(i["firmware_digest"]) == 64 and i["manifest_version"] == "0.2.0-ota"
    rt.frozen = "ab" * 32
    h = H.Health(rt)
    i = h.info()
    assert i["image"] == "frozen" and i["firmware_digest"] == "ab" * 32 and "manifest_version" not in i
    sat = Sat()

    class Ev:
        id = 6
        name = "firmware.update"
        arguments = json.dumps({"url": "http://10.0.0.2/m.json", "sha256": "a" * 64})
    assert h.tool(sat, Ev) is False and sat.sent == [] and sat.tasks == []


def test_image_digest_reads_the_frozen_digest_module_and_drops_it():
    import sys
    fresh()
    assert H.image_digest() == ""                   # firmware from files (this test run): no alabama_image
    with open("alabama_image.py", "w") as f:
        f.write('DIGEST = "%s"\n' % ("cd" * 32))
    sys.path.insert(0, os.getcwd())
    try:
        assert H.image_digest() == "cd" * 32
        assert "alabama_image" not in sys.modules   # read once, not kept in the heap
    finally:
        sys.path.pop(0)
        sys.modules.pop("alabama_image", None)


class LampHal(Hal):
    def __init__(self):
        Hal.__init__(self)
        self.lamp = False
        self.calls = []

    def lamp_set(self, on):
        self.lamp = on
        self.calls.append(on)


class Invoke:
    def __init__(self, id, name, arguments):
        self.id, self.name, self.arguments = id, name, arguments


def test_a_hal_lamp_is_the_light_set_tool_and_device_info_shows_it():
    fresh()
    assert "light.set" not in [t.name for t in H.tools(False, Hal())]       # no lamp: no tool, no "light"
    assert "light" not in H.Health(Rt()).info()
    t = [t for t in H.tools(False, LampHal()) if t.name == H.LIGHT]
    assert len(t) == 1 and json.loads(t[0].input_schema)["properties"] == {"on": {"type": "boolean"}}
    rt = Rt()
    rt.hal = LampHal()
    h = H.Health(rt)
    sat = Sat()
    assert h.tool(sat, Invoke(6, "light.set", '{"on": true}'))
    assert rt.hal.calls == [True] and h.info()["light"] is True
    assert json.loads(sat.sent[-1].tool_result.content[0].text) == {"on": True} and sat.sent[-1].id == 6
    for bad in ('{"on": 1}', '{}', 'not json', '{"on": "off"}'):
        assert h.tool(sat, Invoke(8, "light.set", bad))
        assert sat.sent[-1].error.code == pb.ErrorCode.INVALID_REQUEST, bad
    assert rt.hal.calls == [True]                                          # a bad argument switches nothing
    assert not H.Health(Rt()).tool(sat, Invoke(9, "light.set", '{"on": false}'))   # no lamp: "no tool"


def test_zz_back_home():
    os.chdir(_HOME)
