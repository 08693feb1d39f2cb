# A firmware app that hangs right after the handshake: its handler of the first ClockSync (the Ping round the
# session starts with, ~50 ms after Accepted) loops for ever. tests/host/test_ota_trial_e2e.py ships this whole
# module in place of satellite/app.py in an image, the real app kept beside it as satellite/app_real.py: the
# session was accepted, so a trial confirmed at Accepted would be kept and reset by the watchdog for ever; a
# trial that must prove itself is never confirmed, and the watchdog's reset rolls it back (docs/ota.md).
from satellite import app_real, device
from satellite import session as S

_on_event = device.Satellite.on_event


def on_event(self, ev, buf, start, end):
    if type(ev) is S.ClockSync:
        self.log("mutant: the ClockSync handler loops for ever")
        while True:
            pass
    return _on_event(self, ev, buf, start, end)


device.Satellite.on_event = on_event
main = app_real.main
