"""Facts with one owner and a mirror elsewhere: each mirror is checked against its owner here (issue 27)."""


def test_key_store_mirror_matches_the_firmware():
    # the virtual board, the HIL targets and serial provisioning write the board's key store from the host
    from alabama.provision import record
    from satellite import app, keystore
    assert record.DATA_DIR == app.DATA_DIR
    for name in ("DEVICE_KEY", "CORE_KEY", "RECORD", "SETTINGS"):
        assert getattr(record, name) == getattr(keystore, name), name
