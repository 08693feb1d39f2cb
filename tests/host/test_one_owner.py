"""Facts with one owner and a mirror elsewhere: each mirror is checked against its owner here (issue 27)."""
import alabama
from alabama.core import server


def test_core_default_port_has_one_value():
    # alabama.CORE_PORT feeds the CLIs without importing the server; the server's default must be the same
    assert server.DEFAULT_PORT == alabama.CORE_PORT


def test_key_store_mirror_matches_the_firmware():
    # the virtual board, the HIL targets and serial provisioning write the board's key store from the host
    from alabama.provision import record
    from satellite import app, keystore
    assert record.DATA_DIR == app.DATA_DIR
    for name in ("DEVICE_KEY", "CORE_KEY", "RECORD", "SETTINGS"):
        assert getattr(record, name) == getattr(keystore, name), name
