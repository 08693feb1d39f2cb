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
