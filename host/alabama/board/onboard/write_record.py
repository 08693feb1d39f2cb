# Runs on the board (MicroPython), sent by alabama.provision.serial: store the provisioning record and the pin,
# each written to .tmp then renamed (as firmware/satellite/keystore.py does), then print the record read back.
# FAT refuses to rename over an existing file: remove, then rename (keystore.recover() finishes a rename cut by
# a power loss at boot). The host sends this file's text followed by one call: run(key, pin, path, rec, mark,
# forget), key and rec in base64 (key '' removes the old pin), forget: paths removed first (a factory reset).
import os, binascii


def _w(p, b):
    t = p + '.tmp'
    f = open(t, 'wb')
    f.write(b)
    f.close()
    try:
        os.rename(t, p)
    except OSError:
        os.remove(p)
        os.rename(t, p)


def run(key, pin, path, rec, mark, forget=()):
    try:
        os.mkdir('data')
    except OSError:
        pass
    for p in forget:
        for q in (p, p + '.tmp'):
            try:
                os.remove(q)
            except OSError:
                pass
    if key:
        _w(pin, binascii.a2b_base64(key))
    else:
        try:
            os.remove(pin)
        except OSError:
            pass
    _w(path, binascii.a2b_base64(rec))
    f = open(path, 'rb')
    b = f.read()
    f.close()
    print(mark + binascii.hexlify(b).decode())
