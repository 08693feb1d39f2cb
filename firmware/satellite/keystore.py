# The satellite's persistent identity and pins, in flash: device keypair, pinned core key, provisioning
# record, settings. Every write is atomic (temporary file, then rename), so a power cut leaves either the
# old file or the new one, never half of one. It does no crypto of its own and no networking: the key
# generator and the random source are parameters.
import os

from micropython import const

_KEY_LEN = const(32)
_MAX_FILE = const(4096)   # no file here is larger; anything bigger is corruption, refused before reading

DEVICE_KEY = "device.key"        # 32-byte X25519 private key
CORE_KEY = "core.pub"            # 32-byte pinned core static public key (written only on Paired / IK record)
RECORD = "provision.bin"         # provisioning record (version | protobuf | CRC-32)
SETTINGS = "settings.json"

class KeyStoreError(Exception):
    def __init__(self, code, message, name=None):
        super().__init__(message)
        self.code = code
        self.name = name        # the file concerned (DEVICE_KEY, CORE_KEY, RECORD, SETTINGS), when there is one


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


class KeyStore:
    """Files under `root` (on the board: /data; on the virtual board: its flash directory)."""

    def __init__(self, root, rng, public_key):
        # rng(n) -> n random bytes (os.urandom: the hardware RNG on the ESP32-S3);
        # public_key(private32) -> public32 (satellite.noise.x25519.public_key).
        self.root = root.rstrip("/") or "/"
        self._rng = rng
        self._public_key = public_key
        if not _exists(self.root):
            os.mkdir(self.root)

    def path(self, name):
        return self.root + "/" + name

    def read(self, name):
        p = self.path(name)
        try:
            size = os.stat(p)[6]
        except OSError:
            return None
        if size > _MAX_FILE:
            raise KeyStoreError("CORRUPT", "%s is %d bytes, at most %d" % (p, size, _MAX_FILE), name)
        with open(p, "rb") as f:
            return f.read()

    def write(self, name, data):
        """Atomic replace: write `name.tmp`, flush, then rename over `name`."""
        p = self.path(name)
        tmp = p + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
        try:
            os.rename(tmp, p)
        except OSError:
            # FAT (the ESP32 default VFS) refuses to rename over an existing file: remove, then rename.
            # A cut between the two leaves the .tmp beside no file; recover() finishes the rename.
            os.remove(p)
            os.rename(tmp, p)

    def remove(self, name):
        try:
            os.remove(self.path(name))
        except OSError:
            pass

    def recover(self):
        """Finish a replace interrupted between remove and rename (called at boot)."""
        for name in (DEVICE_KEY, CORE_KEY, RECORD, SETTINGS):
            p = self.path(name)
            if _exists(p + ".tmp"):
                if _exists(p):
                    os.remove(p + ".tmp")   # the old file survived: the new one may be partial
                else:
                    os.rename(p + ".tmp", p)

    # ---- identity ------------------------------------------------------------------------------------

    def device_key(self):
        """(private, public): generated once from the RNG and kept; a corrupt key file is an error,
        never silently replaced (a new key is a new device identity, spec §7.3)."""
        k = self.read(DEVICE_KEY)
        if k is None:
            k = bytes(self._rng(_KEY_LEN))
            self.write(DEVICE_KEY, k)
        elif len(k) != _KEY_LEN:
            raise KeyStoreError("CORRUPT", "%s holds %d bytes, not a 32-byte key" % (self.path(DEVICE_KEY), len(k)),
                                DEVICE_KEY)
        return k, self._public_key(k)

    def pinned_core_key(self):
        k = self.read(CORE_KEY)
        if k is not None and len(k) != _KEY_LEN:
            raise KeyStoreError("CORRUPT", "%s holds %d bytes, not a 32-byte key" % (self.path(CORE_KEY), len(k)),
                                CORE_KEY)
        return k

    def pin_core_key(self, key, replace=False):
        """Pin the core's static key (on Paired, or from a provisioning record). A different pinned key is
        never replaced unless `replace` — only a user-initiated re-provisioning passes it (R7.3-h)."""
        key = bytes(key)
        if len(key) != _KEY_LEN:
            raise KeyStoreError("BAD_KEY", "a core key is 32 bytes")
        try:
            old = self.pinned_core_key()
        except KeyStoreError:
            if not replace:
                raise
            old = None                   # a damaged pin: a user-initiated re-provisioning writes a good one
        if old == key:
            return False
        if old is not None and not replace:
            raise KeyStoreError("PINNED", "a different core key is pinned: re-provision or factory-reset to change it")
        self.write(CORE_KEY, key)
        return True

    def factory_reset(self):
        """Forget everything: identity, pin, record, settings (user-initiated only)."""
        for name in (DEVICE_KEY, CORE_KEY, RECORD, SETTINGS):
            self.remove(name)
