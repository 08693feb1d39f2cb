# A firmware app whose core is unreachable: it connects to a port where nothing listens (no crash, no hang: the
# reconnect backoff goes on feeding the watchdog). tests/host/test_ota_trial_e2e.py ships this whole module in
# place of satellite/app.py in an image, the real app kept beside it as satellite/app_real.py: the trial must be
# rolled back by the firmware itself at its deadline (satellite.trial, docs/ota.md "The trial").
from satellite import app_real, runtime

DEAD_PORT = 9                 # discard: nothing listens there on the test machine's loopback

_load = runtime.Runtime.load_record


def load_record(self):
    rec = _load(self)
    if rec is not None:
        rec.core_port = DEAD_PORT
        self.log("mutant: the core is unreachable (port %d, where nothing listens)" % DEAD_PORT)
    return rec


runtime.Runtime.load_record = load_record
main = app_real.main
