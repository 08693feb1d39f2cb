# dual: cpython micropython
# Issue 36: the board joins the Wi-Fi network its record names, on a fake `network` module (the esp32 HAL on
# the fake machine): at boot; again after a new record names another network (the runtime calls network_up
# after re-provisioning: a board provisioned by sound while it had no record, or moved to another network,
# used to keep the old network, or none, until a reset); and a damaged record does not crash it (the runtime
# reports the file, satellite.damaged).
import asyncio
import sys

import rt_harness as H
from satellite import keystore as K
from satellite.provision import record as R
from satellite.wire import alabama_v1 as pb

from test_hal_contract import Esp32Rig
from test_watchdog import _armed, _rt


class FakeWlan:
    """network.WLAN(STA_IF) as ports/esp32/network_wlan.c behaves for what the HAL uses; connect() joins at once."""

    def __init__(self, calls):
        self.calls = calls
        self.ssid = None

    def active(self, on=None):
        return True

    def isconnected(self):
        return self.ssid is not None

    def config(self, key):
        assert key == "ssid"
        return self.ssid or ""

    def connect(self, ssid, key):
        self.calls.append(("connect", ssid, key))
        self.ssid = ssid

    def disconnect(self):
        self.calls.append(("disconnect", self.ssid))
        self.ssid = None

    def ifconfig(self):
        return ("192.168.1.50", "255.255.255.0", "192.168.1.1", "192.168.1.1")

    def status(self, *a):
        return 1010


class FakeNetwork:
    STA_IF = 0

    def __init__(self):
        self.calls = []
        self.wlan = FakeWlan(self.calls)

    def WLAN(self, which):
        return self.wlan


class Rt:
    def __init__(self, raw):
        self.raw = raw
        self.lines = []

    def load_record(self):
        return R.decode(self.raw) if self.raw is not None else None

    def log(self, line):
        self.lines.append(line)


def _record(ssid, passphrase):
    return R.encode(pb.ProvisioningRecord(core_host="10.0.0.2", core_port=7355, wifi_ssid=ssid,
                                          wifi_passphrase=passphrase))


def _with_network(fn):
    net = FakeNetwork()
    old = sys.modules.get("network")
    sys.modules["network"] = net
    try:
        fn(net)
    finally:
        if old is None:
            del sys.modules["network"]
        else:
            sys.modules["network"] = old


def test_the_esp32_hal_joins_the_records_network_and_moves_when_a_new_record_names_another():
    def body(net):
        hal = Esp32Rig("devkitc1-inmp441").hal
        rt = Rt(_record("Upstairs-Office-Network-5GHz-Ext", "correct horse battery staple"))
        asyncio.run(hal.network_up(rt))
        assert net.calls == [("connect", "Upstairs-Office-Network-5GHz-Ext", "correct horse battery staple")]
        assert rt.lines[-1] == "Wi-Fi Upstairs-Office-Network-5GHz-Ext up: 192.168.1.50"
        asyncio.run(hal.network_up(rt))                          # the same network: kept as it is
        assert len(net.calls) == 1
        rt.raw = _record("Garden", "another passphrase")          # re-provisioned for another network
        asyncio.run(hal.network_up(rt))
        assert net.calls[1:] == [("disconnect", "Upstairs-Office-Network-5GHz-Ext"),
                                 ("connect", "Garden", "another passphrase")]
    _with_network(body)


def test_a_damaged_record_leaves_the_wifi_down_without_an_exception():
    def body(net):
        hal = Esp32Rig("devkitc1-inmp441").hal
        bad = bytearray(_record("Home", "password1"))
        bad[-1] ^= 1
        rt = Rt(bytes(bad))
        asyncio.run(hal.network_up(rt))                          # was: RecordError out of Runtime.run
        assert net.calls == [] and "no Wi-Fi network" in rt.lines[-1]
    _with_network(body)


def test_the_runtime_brings_the_network_up_again_after_a_new_record():
    rt, hal = _rt(dict(H.BOARD))
    rt.has_mic = False                                          # listening mode polls the record file
    _armed(rt)
    ups = []

    async def network_up(r):
        ups.append(r.ks.read(K.RECORD))
    hal.network_up = network_up
    new = _record("Garden", "another passphrase")

    def provisioned():                                          # serial provisioning writes the record
        rt.ks.write(K.RECORD, new)
        hal.on_feed = None
    hal.on_feed = provisioned
    asyncio.run(rt._wait_reprovision())
    assert ups == [new]
    assert hal.lines[-1] == "sat: new provisioning record: connecting again"
