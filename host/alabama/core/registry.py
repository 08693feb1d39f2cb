"""The core's device registry and pairing tokens, in SQLite under --data DIR (spec §7.1, §7.3).

Responsible for identity book-keeping only: fingerprints, pins, trust, tokens, the static key file.
Several processes share the file (the running server and `alabama core token|approve|devices`), so
every write is its own transaction and the server notices changes by polling ``data_version()``.
It never decides admission (``admission.py`` does) and never touches the network.
"""
import hashlib
import os
import stat
import pathlib
import secrets
import sqlite3
import time

from ..noise.state import public_key
from .errors import CoreError

DB_NAME = "registry.sqlite3"
KEY_NAME = "core.key"
#: Trust levels. Never sent on the wire (spec §7.3).
GUEST = "guest"
PAIRED = "paired"
TRUSTS = (GUEST, PAIRED)
#: Pairing tokens travel in Hello.pairing_token (at most 64 bytes); 16 random bytes, url-safe.
TOKEN_BYTES = 16
#: token_urlsafe(16) is always 22 characters (the provisioning CLI checks a record's size before minting).
TOKEN_CHARS = 22
MAX_TTL_S = 7 * 24 * 3600

_SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    device_id    TEXT PRIMARY KEY,
    pubkey       TEXT NOT NULL,
    display_name TEXT NOT NULL DEFAULT '',
    trust        TEXT NOT NULL DEFAULT 'guest',
    software     TEXT NOT NULL DEFAULT '',
    first_seen   REAL NOT NULL,
    last_seen    REAL
);
CREATE TABLE IF NOT EXISTS tokens (
    token      TEXT PRIMARY KEY,
    created    REAL NOT NULL,
    expires    REAL NOT NULL,
    used_by    TEXT,
    used_at    REAL
);
"""


def fingerprint(pubkey):
    """device_id = the first 16 bytes of SHA-256 of the 32-byte X25519 public key, as 32 lowercase hex."""
    pubkey = bytes(pubkey)
    if len(pubkey) != 32:
        raise CoreError("a device key is 32 bytes, got %d" % len(pubkey), "BAD_KEY")
    return hashlib.sha256(pubkey).digest()[:16].hex()


def load_or_create_key(data_dir):
    """The core's static X25519 private key from DIR/core.key (hex), created with mode 0600 if absent."""
    path = pathlib.Path(data_dir) / KEY_NAME
    try:
        return _load_or_create_key(path)
    except OSError as e:                 # a directory where the file should be, no permission, a full disk
        raise CoreError("cannot read or create the core's key %s (%s): check that --data is the core's state "
                        "directory and that it is yours" % (path, e.strerror or e), "KEY_ACCESS") from None


def _load_or_create_key(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):       # its mode bits say nothing of a key: chmod is not the fix
            raise CoreError("%s is %s, not the core's key file: move it away (the core then makes a new key: every "
                            "paired satellite must re-pair) or give --data the core's state directory"
                            % (path, "a directory" if stat.S_ISDIR(st.st_mode) else "no regular file"), "BAD_KEY")
        mode = st.st_mode & 0o777
        if mode & 0o077:
            raise CoreError("%s is readable by others (mode %o): run `chmod 600 %s`" % (path, mode, path), "KEY_MODE")
        try:
            key = bytes.fromhex(path.read_text().strip())
        except ValueError:
            key = b""
        if len(key) != 32:
            raise CoreError("%s is not a 64-hex-character key: restore it from a backup or delete it to make a new "
                            "identity (every paired satellite must then re-pair)" % path, "BAD_KEY")
        return key
    key = os.urandom(32)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
    return key


def new_token(rand=None):
    """A fresh pairing token: TOKEN_BYTES random bytes, url-safe, never starting with '-' (1 in 64 of
    token_urlsafe's would, and a command line then reads it as an option: `board sim --token -abc`)."""
    rand = rand or secrets.token_urlsafe
    while True:
        token = rand(TOKEN_BYTES)
        if not token.startswith("-"):
            return token


def server_public_key(data_dir):
    return public_key(load_or_create_key(data_dir))


def handed_out_key(data_dir):
    """The core's public key for a command that prints it or puts it in a record (core key, core token, provision):
    made for a new directory (or one only `core approve --pubkey` has written), but refused where records were
    handed out with a key that is gone since: a key made there would be an identity no board given them knows."""
    d = pathlib.Path(data_dir)
    if not (d / KEY_NAME).exists() and (d / DB_NAME).exists():
        r = Registry(d)
        try:
            minted = r.db.execute("SELECT count(*) FROM tokens").fetchone()[0]
        finally:
            r.close()
        if minted:
            raise CoreError("%s has no %s, and %d pairing token(s) were handed out with the key it held: restore the "
                            "key from a backup, or start `alabama core serve --data %s` to make a new identity (every "
                            "satellite provisioned from it must then be provisioned again)" % (d, KEY_NAME, minted, d),
                            "KEY_MISSING")
    return server_public_key(d)


def registry_error(path, exc):
    """The one line for an SQLite error on the registry file: which file, what happened, what to do."""
    what = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in what:
        return CoreError("%s is locked by another program (%s): wait for it or stop it, then try again"
                         % (path, what), "REGISTRY_LOCKED")
    if isinstance(exc, sqlite3.OperationalError) and ("unable to open" in what or "readonly" in what):
        return CoreError("cannot open %s (%s): check that the --data directory is yours and writable"
                         % (path, what), "REGISTRY_ACCESS")
    return CoreError("%s is damaged (%s): move it aside (`mv %s %s.bad`) and the core starts an empty registry -- "
                     "every satellite must then pair again -- or restore it from a backup"
                     % (path, what, path, path), "BAD_REGISTRY")


class Device:
    __slots__ = ("device_id", "pubkey", "display_name", "trust", "software", "first_seen", "last_seen")

    def __init__(self, row):
        for k, v in zip(self.__slots__, row):
            setattr(self, k, v)

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


class Registry:
    """SQLite registry at DIR/registry.sqlite3 (created on first use)."""

    def __init__(self, data_dir, clock=time.time):
        self.path = pathlib.Path(data_dir) / DB_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self.db = None
        try:
            self.db = sqlite3.connect(str(self.path), timeout=5.0, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")   # WAL + NORMAL: durable across crashes of this process
            self.db.executescript(_SCHEMA)
            self.db.execute("SELECT count(*) FROM devices").fetchone()
        except sqlite3.DatabaseError as e:             # not a database, damaged, unreadable, locked
            if self.db is not None:
                self.db.close()
            raise registry_error(self.path, e) from None

    def close(self):
        self.db.close()

    def data_version(self):
        """Changes whenever another connection committed a write (tokens, approvals)."""
        return self.db.execute("PRAGMA data_version").fetchone()[0]

    # -- devices ------------------------------------------------------------------------------
    def lookup(self, device_id):
        row = self.db.execute("SELECT %s FROM devices WHERE device_id=?" % ",".join(Device.__slots__),
                              (device_id,)).fetchone()
        return Device(row) if row else None

    def find(self, prefix):
        """A device by its fingerprint or a unique prefix of it (for the CLI)."""
        prefix = prefix.lower()
        rows = self.db.execute("SELECT %s FROM devices WHERE device_id LIKE ?" % ",".join(Device.__slots__),
                               (prefix + "%",)).fetchall()
        if len(rows) == 1:
            return Device(rows[0])
        if not rows:
            raise CoreError("no device matches %r: list them with `alabama core devices`" % prefix, "UNKNOWN_DEVICE")
        raise CoreError("%r matches %d devices: give more of the fingerprint" % (prefix, len(rows)), "AMBIGUOUS")

    def pin(self, device_id, pubkey, display_name="", software="", trust=GUEST):
        now = self.clock()
        self.db.execute("INSERT OR IGNORE INTO devices(device_id,pubkey,display_name,trust,software,first_seen,last_seen)"
                        " VALUES (?,?,?,?,?,?,?)", (device_id, bytes(pubkey).hex(), display_name, trust, software, now, now))
        return self.lookup(device_id)

    def touch(self, device_id, display_name=None, software=None):
        self.db.execute("UPDATE devices SET last_seen=?, display_name=COALESCE(?,display_name), "
                        "software=COALESCE(?,software) WHERE device_id=?",
                        (self.clock(), display_name, software, device_id))

    def set_trust(self, device_id, trust):
        if trust not in TRUSTS:
            raise CoreError("trust must be one of %s" % (TRUSTS,), "BAD_TRUST")
        cur = self.db.execute("UPDATE devices SET trust=? WHERE device_id=?", (trust, device_id))
        if cur.rowcount != 1:
            raise CoreError("no device %s" % device_id, "UNKNOWN_DEVICE")

    def preconfigure(self, pubkey, trust=PAIRED, display_name=""):
        """Register a device key before it ever connects (pre-provisioned path, spec §7.3)."""
        did = fingerprint(pubkey)
        self.pin(did, pubkey, display_name, trust=trust)
        self.set_trust(did, trust)
        return did

    def devices(self):
        return [Device(r) for r in self.db.execute("SELECT %s FROM devices ORDER BY first_seen"
                                                   % ",".join(Device.__slots__)).fetchall()]

    # -- tokens -------------------------------------------------------------------------------
    def mint_token(self, ttl):
        if not 0 < ttl <= MAX_TTL_S:
            raise CoreError("--ttl must be between 1 and %d seconds" % MAX_TTL_S, "BAD_TTL")
        token = new_token()
        now = self.clock()
        self.db.execute("INSERT INTO tokens(token,created,expires) VALUES (?,?,?)", (token, now, now + ttl))
        return token, now + ttl

    def consume_token(self, token, device_id):
        """True when the token exists, is unexpired and unused; it is then used up (single use)."""
        if not token or len(token) > 64:
            return False
        cur = self.db.execute("UPDATE tokens SET used_by=?, used_at=? WHERE token=? AND used_by IS NULL AND expires>?",
                              (device_id, self.clock(), token, self.clock()))
        return cur.rowcount == 1
