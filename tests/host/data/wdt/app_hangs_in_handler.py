# A firmware app whose handler of the core's accepted Hello never returns (an infinite loop): the hang the
# watchdog exists for. tests/host/test_watchdog_e2e.py puts this whole module in place of satellite/app.py, the
# real app kept beside it as satellite/app_real.py, as a broken release would ship it. The handler runs inside
# the runtime's serve loop, so the loop stops and with it the feeding: the board must be reset by the
# watchdog, and a trial set that does this on every boot rolled back by otaboot (docs/reliability.md).
from satellite import app_real, runtime


def _accepted(self, ev):
    self.log("mutant: the Accepted handler loops for ever")
    while True:
        pass


runtime.Runtime._accepted = _accepted
main = app_real.main
