# A firmware app that crashes at boot: tests/host/test_ota_e2e.py puts this whole module in place of
# satellite/app.py in a copy of the firmware, as a broken release would ship, and checks that otaboot rolls
# the set back by itself. main.py calls app.main(); nothing else of app is reached before it raises.
from satellite import VERSION


def main(board=None, hal=None):
    raise RuntimeError("broken firmware %s" % VERSION)
