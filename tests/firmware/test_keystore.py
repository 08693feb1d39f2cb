# dual: cpython micropython
# Identity, pinning and atomic writes of the key store.
import os
from mpsupport import raises, scratch
from satellite import keystore as K

_n = [0]


def fresh():
    _n[0] += 1
    root = scratch("ks")
    try:
        for f in os.listdir(root):
            os.remove(root + "/" + f)
        os.rmdir(root)
    except OSError:
        pass
    counter = [0]

    def rng(n):
        counter[0] += 1
        return bytes([counter[0]]) * n

    return K.KeyStore(root, rng, lambda k: bytes(reversed(k))), counter


def test_device_key_generated_once_and_kept():
    ks, counter = fresh()
    priv, pub = ks.device_key()
    assert priv == b"\x01" * 32 and pub == bytes(reversed(priv))
    again = K.KeyStore(ks.root, lambda n: b"\xff" * n, lambda k: k)
    assert again.device_key()[0] == priv
    assert counter[0] == 1


def test_corrupt_key_is_an_error_not_a_new_identity():
    ks, _ = fresh()
    ks.write(K.DEVICE_KEY, b"short")
    e = raises(K.KeyStoreError, ks.device_key)
    assert e.code == "CORRUPT"


def test_r7_3_h_pinned_key_not_replaced_without_reprovisioning():
    ks, _ = fresh()
    assert ks.pinned_core_key() is None
    assert ks.pin_core_key(b"\x01" * 32)
    assert not ks.pin_core_key(b"\x01" * 32)
    e = raises(K.KeyStoreError, ks.pin_core_key, b"\x02" * 32)
    assert e.code == "PINNED"
    assert ks.pinned_core_key() == b"\x01" * 32
    assert ks.pin_core_key(b"\x02" * 32, True)
    assert ks.pinned_core_key() == b"\x02" * 32


def test_atomic_write_recovers_interrupted_replace():
    ks, _ = fresh()
    ks.write(K.CORE_KEY, b"\x05" * 32)
    # a cut after remove, before rename: only the .tmp exists
    with open(ks.path(K.CORE_KEY) + ".tmp", "wb") as f:
        f.write(b"\x06" * 32)
    os.remove(ks.path(K.CORE_KEY))
    ks.recover()
    assert ks.pinned_core_key() == b"\x06" * 32
    # a cut before the rename with the old file intact: the old one wins, the partial .tmp goes
    with open(ks.path(K.CORE_KEY) + ".tmp", "wb") as f:
        f.write(b"\x07" * 3)
    ks.recover()
    assert ks.pinned_core_key() == b"\x06" * 32
    raises(OSError, os.stat, ks.path(K.CORE_KEY) + ".tmp")


def test_oversized_file_refused_before_reading():
    ks, _ = fresh()
    ks.write(K.RECORD, b"x" * 5000)
    e = raises(K.KeyStoreError, ks.read, K.RECORD)
    assert e.code == "CORRUPT"


def test_factory_reset_forgets_everything():
    ks, _ = fresh()
    ks.device_key()
    ks.pin_core_key(b"\x01" * 32)
    ks.factory_reset()
    assert ks.pinned_core_key() is None and ks.read(K.DEVICE_KEY) is None


def test_issue36_a_damaged_file_is_said_with_its_path_what_happened_and_the_fixing_command():
    from satellite import damaged
    from satellite.provision import record as R
    ks, _ = fresh()
    ks.write(K.DEVICE_KEY, b"short")
    e = raises(K.KeyStoreError, ks.device_key)
    assert e.name == K.DEVICE_KEY
    ln = damaged.line(ks, e.name, e)
    assert ln.startswith(ks.path(K.DEVICE_KEY) + " is damaged (holds 5 bytes, not a 32-byte key): factory-reset ")
    assert "`alabama provision serial --factory-reset --data DIR --port PORT`" in ln and "(no retry)" in ln
    bad = bytearray(R.encode(R.pb.ProvisioningRecord(core_host="h", core_port=1)))
    bad[0] = 0x37
    e = raises(R.RecordError, R.decode, bytes(bad))
    ln = damaged.line(ks, K.RECORD, e)
    assert ln.startswith(ks.path(K.RECORD) + " is damaged (its first byte is not the record version")
    assert "update the firmware" not in ln and "`alabama provision serial --data DIR --port PORT`" in ln
    assert "`alabama provision sound`" in ln
    ks.write(K.RECORD, b"x" * 5000)
    e = raises(K.KeyStoreError, ks.read, K.RECORD)
    assert e.name == K.RECORD and "is damaged (is 5000 bytes, at most 4096)" in damaged.line(ks, K.RECORD, e)


def test_issue36_reprovisioning_replaces_a_damaged_pin():
    ks, _ = fresh()
    ks.write(K.CORE_KEY, b"\x05" * 7)
    e = raises(K.KeyStoreError, ks.pinned_core_key)
    assert e.code == "CORRUPT" and e.name == K.CORE_KEY
    e = raises(K.KeyStoreError, ks.pin_core_key, b"\x02" * 32)          # Paired never overwrites it silently
    assert e.code == "CORRUPT"
    assert ks.pin_core_key(b"\x02" * 32, True)                          # a user-initiated re-provisioning does
    assert ks.pinned_core_key() == b"\x02" * 32
