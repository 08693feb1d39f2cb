# Device health: the `device.info` and `firmware.update` tools and the `device.health` event (and a HAL lamp's
# `light.set`, the one tool that acts on a HAL output: the virtual board's simulated lamp). It gathers what
# the runtime counts (reconnects, frames dropped), what otaboot records across boots (boots, crashes, the
# reset it asked for, the update state) and what only the hardware knows, through the HAL (hal.rssi(),
# hal.reset_cause(), hal.flash_free(), hal.heap_largest_free(); absent on a HAL -> null). Protocol rules stay
# in session.py; the download itself is satellite.ota. Nothing here runs on a hot path: it is sampled every
# POLL_MS and when a tool is called.
# The heap figures are read after gc.collect(): gc.mem_free() alone counts garbage not yet collected as used
# (an idle board reads 12-14 KB between collections, 170 KB after one), so heap_low would mean "the collector
# has not run lately". A collection walks the whole heap (tens of ms on a PSRAM board), so the sampler collects
# only while no stream is open, or when the cheap reading already looks low (the allocator is about to
# collect anyway); device.info collects every time (a tool call is rare).
import gc
import json
import sys

from micropython import const
import asyncio

import otaboot as B

from satellite.wire import alabama_v1 as pb

POLL_MS = const(10000)        # the health sampler's period (heap low-water mark, RSSI change)
RSSI_STEP = const(10)         # an RSSI move of this many dB since the last report is reported (Event)
HEAP_LOW = const(16384)       # free heap under this is reported once per boot (Event)

EVENT = "device.health"
INFO_SCHEMA = '{"type":"object","properties":{},"additionalProperties":false}'
UPDATE_SCHEMA = ('{"type":"object","properties":{"url":{"type":"string","maxLength":256},'
                 '"sha256":{"type":"string","pattern":"^[0-9a-f]{64}$"},"reboot":{"type":"boolean"}},'
                 '"required":["url","sha256"],"additionalProperties":false}')
LIGHT = "light.set"
LIGHT_SCHEMA = ('{"type":"object","properties":{"on":{"type":"boolean"}},"required":["on"],'
                '"additionalProperties":false}')
EVENT_SCHEMA = ('{"type":"object","properties":{"reason":{"type":"string","enum":["boot","rssi","heap_low"]},'
                '"firmware":{"type":"string"},"digest":{"type":"string"},"ota":{"type":"string"},'
                '"reset_reason":{"type":"string"},"crash_count":{"type":"integer"},'
                '"rssi":{"type":["integer","null"]},"heap_min":{"type":"integer"},'
                '"heap_largest_free":{"type":["integer","null"]}},'
                '"required":["reason","firmware","ota","crash_count","rssi","heap_min"],"additionalProperties":false}')


def image_digest():
    """The digest of the firmware frozen into this MicroPython image (the `alabama_image` module that
    `alabama image` freezes beside the satellite package), or "" when the firmware runs from files. On a
    frozen image `sys.path` puts `.frozen` before `/lib`, so an OTA set in /lib/satellite would be staged,
    swapped and confirmed while the frozen package went on running: such a board offers no firmware.update."""
    try:
        import alabama_image
    except ImportError:
        return ""
    d = alabama_image.DIGEST
    sys.modules.pop("alabama_image", None)
    return d


def image_slot():
    """The running OTA app slot ("ota_0"/"ota_1") of an image with the OTA partition table, else None: a frozen
    image takes an image update (satellite.imgota) only there."""
    s = B.running_slot()
    return s if s in ("ota_0", "ota_1") else None


def updatable(frozen):
    return not frozen or image_slot() is not None


def has_lamp(hal):
    return getattr(hal, "lamp_set", None) is not None


def tools(frozen=False, hal=None):
    """Every tool the device declares; `frozen` (image_digest() is not "") without an OTA slot: no
    firmware.update, so an Invoke of it draws CAPABILITY_MISSING from the session ("no tool") instead of an
    update that changes nothing (a set in /lib is shadowed by the frozen package). A HAL with a lamp
    (`lamp_set`, hal/__init__.py) adds light.set.
    device.set_volume's bounds are the settings table's (satellite.device.SETTINGS)."""
    from satellite.device import row
    r = row("volume")
    lo, hi = r[2], r[3]
    t = [
        pb.ToolDescriptor(name="device.info", input_schema=INFO_SCHEMA,
                          description="Health as JSON: firmware version and digest, uptime, free and lowest heap, "
                                      "Wi-Fi RSSI, reset reason, crash/reconnect/dropped-frame counts, update state"),
    ]
    if updatable(frozen):
        t.append(pb.ToolDescriptor(name="firmware.update", input_schema=UPDATE_SCHEMA,
                                   description="Download the firmware (a module set, or an app image on a frozen "
                                               "image) whose manifest is at url (sha256 pins it), verify it, and "
                                               "boot it next (rolled back if it fails)"))
    t.append(pb.ToolDescriptor(name="device.set_volume", description="Set the speaker volume (%d-%d)" % (lo, hi),
                               input_schema='{"type":"object","properties":{"volume":{"type":"integer",'
                                            '"minimum":%d,"maximum":%d}},"required":["volume"]}' % (lo, hi)))
    if has_lamp(hal):
        t.append(pb.ToolDescriptor(name=LIGHT, input_schema=LIGHT_SCHEMA,
                                   description="Switch the room light on or off"))
    return t


def events():
    return [pb.EventDescriptor(id=EVENT, metadata_schema=EVENT_SCHEMA,
                               description="Health report: after a boot, an RSSI move of 10 dB, or low heap")]


class Health:
    def __init__(self, rt):
        self.rt = rt
        self.hal = rt.hal
        rec = B.boot_record()
        self.boots = rec.get("boots", 0)
        self.crashes = rec.get("crashes", 0)
        self.last_crash = rec.get("last_crash", "")
        note = rec.get("reset_note", "")
        cause = self._hal("reset_cause")
        self.reset_reason = note or cause or "unknown"
        self.mem_free = getattr(gc, "mem_free", None)     # None on CPython (tests): no heap figures
        self.collect = gc.collect
        self.heap_min = self.heap_free()
        self.reported_boot = False
        self.rssi_reported = None
        self.heap_low_reported = False
        self.updater = None
        self.poll_ms = POLL_MS

    def _hal(self, name):
        f = getattr(self.hal, name, None)
        if f is None:
            return None
        try:
            return f()
        except (OSError, ValueError, AttributeError):
            return None

    def heap_free(self):
        """Free heap after a collection (what an allocation can really get); heap_min is the lowest such
        reading since boot."""
        if self.mem_free is None:
            return 0
        self.collect()
        f = self.mem_free()
        if f < getattr(self, "heap_min", f + 1):
            self.heap_min = f
        return f

    def sample(self, idle):
        """The sampler's heap reading: collected when idle or when the uncollected one is already low."""
        if self.mem_free is None:
            return 0
        f = self.mem_free()
        return self.heap_free() if idle or f < HEAP_LOW else f

    def info(self):
        rt = self.rt
        frozen = rt.frozen_digest()
        if frozen:                                   # a set left in /lib is not what runs: the image is
            digest, mversion = frozen, ""
        else:
            digest, mversion = B.running_manifest()  # satellite.ota is imported only for an update
        d = rt.info()
        d.update({
            "firmware_digest": digest, "image": "frozen" if frozen else "files",
            "heap_free": self.heap_free(), "heap_min": self.heap_min,
            "heap_largest_free": self._hal("heap_largest_free"),
            "rssi": self._hal("rssi"), "reset_reason": self.reset_reason, "boots": self.boots,
            "crash_count": self.crashes, "last_crash": self.last_crash,
            "reconnect_count": max(0, rt.connections - 1), "connect_failures": rt.attempts,
            "frames_dropped": rt.frames_dropped + rt.ring.dropped + (self._hal("mic_lost_frames") or 0),
            "flash_free": self._hal("flash_free"), "mpy": getattr(sys.implementation, "_mpy", 0),
            "watchdog_ms": rt.watchdog,       # null: no watchdog armed (a HAL without one) or parked (REPL)
            "ota": B.status(),
        })
        rec = B.boot_record()
        d["rollback_count"] = rec.get("rollbacks", 0)
        d["last_update"] = rec.get("last_update", "")
        if frozen:
            d["slot"] = image_slot()
        if has_lamp(self.hal):
            d["light"] = bool(getattr(self.hal, "lamp", False))
        if mversion and mversion != d["firmware"]:
            d["manifest_version"] = mversion
        return d

    def metadata(self, reason):
        i = self.info()
        return json.dumps({"reason": reason, "firmware": i["firmware"], "digest": i["firmware_digest"],
                           "ota": i["ota"]["state"], "reset_reason": i["reset_reason"],
                           "crash_count": i["crash_count"], "rssi": i["rssi"], "heap_min": i["heap_min"],
                           "heap_largest_free": i["heap_largest_free"]})

    # -- session hooks ----------------------------------------------------------------------------------
    def on_session(self, sat):
        """A session was accepted: the boot report goes out once per boot; the sampler starts. (A trial firmware
        is confirmed later, once the session has proven it: satellite.trial, docs/ota.md.)"""
        if not self.reported_boot:
            self.reported_boot = True
            self.report(sat, "boot")
        sat.spawn(self.watch(sat))

    def report(self, sat, reason):
        try:
            sat.send(sat.s.event(EVENT, self.metadata(reason)))
            sat.log("event %s (%s)" % (EVENT, reason))
        except Exception as e:  # noqa: BLE001 - a report must never end the session
            sat.log("health event not sent: %s" % e)

    async def watch(self, sat):
        while not sat.closed:
            await asyncio.sleep_ms(self.poll_ms)
            if sat.closed:
                return
            free = self.sample(not (getattr(sat, "capture_id", 0) or getattr(sat, "render_id", 0)))
            rssi = self._hal("rssi")
            if rssi is not None and (self.rssi_reported is None or abs(rssi - self.rssi_reported) >= RSSI_STEP):
                first = self.rssi_reported is None
                self.rssi_reported = rssi
                if not first:
                    self.report(sat, "rssi")
            if self.mem_free is not None and free < HEAP_LOW and not self.heap_low_reported:
                self.heap_low_reported = True
                self.report(sat, "heap_low")

    # -- tools ------------------------------------------------------------------------------------------
    def tool(self, sat, ev):
        """Serve every tool tools() declares (device.set_volume is the device's action); False for another."""
        if ev.name == "device.set_volume":
            sat.set_volume(ev)
            return True
        if ev.name == "device.info":
            info = self.info()
            info["settings"] = sat.settings
            info["offset_us"] = sat.offset_us
            sat.send(sat.s.tool_result(ev.id, [pb.ContentBlock(text=json.dumps(info))]))
            return True
        if ev.name == LIGHT and has_lamp(self.hal):
            self._light(sat, ev)
            return True
        if ev.name == "firmware.update" and updatable(self.rt.frozen_digest()):   # declared where it can work
            self._update(sat, ev)
            return True
        return False

    def _light(self, sat, ev):
        try:
            args = json.loads(ev.arguments or "{}")
            on = args["on"]
            if not isinstance(on, bool):
                raise ValueError("on must be true or false")
        except (ValueError, KeyError, TypeError) as e:
            sat.send(sat.s.error(ev.id, pb.ErrorCode.INVALID_REQUEST, "bad arguments: %s" % e))
            return
        self.hal.lamp_set(on)
        sat.send(sat.s.tool_result(ev.id, [pb.ContentBlock(text=json.dumps({"on": on}))]))

    def _error(self, sat, id, code, reason, message):
        env = sat.s.error(id, code, message[:256])
        env.error.data = json.dumps({"ota_error": reason})
        sat.send(env)
        sat.log("tool firmware.update: Error %d %s: %s" % (code, reason, message))

    def _update(self, sat, ev):
        from satellite import ota
        try:
            args = json.loads(ev.arguments or "{}")
            url, pin = args["url"], args["sha256"]
            reboot = args.get("reboot", True)
            if type(reboot) is not bool:
                raise TypeError("reboot must be true or false")
        except (ValueError, KeyError, TypeError) as e:
            self._error(sat, ev.id, pb.ErrorCode.INVALID_REQUEST, "BAD_ARGUMENTS", "bad arguments: %s" % e)
            return
        rt = self.rt
        pinned = (rt.record.core_key if rt.record is not None else b"") or rt.ks.pinned_core_key()
        if not pinned or bytes(pinned) != bytes(rt.core_key_in_use or b""):
            # Only the core this device is paired with may replace its firmware: a guest session's core is unproven.
            self._error(sat, ev.id, pb.ErrorCode.INVALID_REQUEST, "NOT_PAIRED",
                        "firmware updates come only from the paired core: pair this device first")
            return
        if self.updater is None:
            self.updater = ota.Updater(rt.connect, free=getattr(self.hal, "flash_free", None),
                                       mpy=getattr(sys.implementation, "_mpy", 0), log=sat.log,
                                       image=bool(rt.frozen_digest()), board=rt.board.get("id"))
        self.updater.release_key = rt.record.release_key if rt.record is not None else b""   # satellite.release
        sat.spawn(self._run_update(sat, ev.id, url, pin, reboot))

    async def _run_update(self, sat, id, url, pin, reboot):
        from satellite import ota
        try:
            res = await self.updater.update(url, pin)
        except ota.OtaError as e:
            if not sat.closed:
                self._error(sat, id, e.code, e.reason, str(e))
            return
        res["reboot"] = reboot
        if not sat.closed:
            sat.send(sat.s.tool_result(id, [pb.ContentBlock(text=json.dumps(res))]))
        if reboot:
            # The reset is not the session's: a link drop right after the answer ends the session and cancels
            # its tasks (Satellite.close), and the staged firmware must boot whatever the link does.
            sat.log("rebooting into firmware %s" % res["staged"])
            asyncio.create_task(ota.reset_soon("ota"))
