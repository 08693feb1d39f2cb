# A firmware app whose serve loop awaits an event nobody sets (a deadlocked await) right after the Hello: the
# event loop still runs every other task (the offline button reader, the display), the serve loop does not,
# so nothing feeds the watchdog. tests/host/test_watchdog_e2e.py puts this whole module in place of
# satellite/app.py, the real app kept beside it as satellite/app_real.py (docs/reliability.md).
import asyncio

from satellite import app_real, runtime


async def _serve(self, sess, link, sat):
    self.log("mutant: the serve loop awaits an event nobody sets")
    await asyncio.Event().wait()


runtime.Runtime._serve = _serve
main = app_real.main
