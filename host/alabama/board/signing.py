"""Release signing of OTA manifests (issue 29): the key pair, and the detached signature a board with a pinned
release key checks before any write (firmware/satellite/release.py; docs/ota.md, "Release signature").

Responsible for Ed25519 keys in files and for signing; pyca/cryptography does the maths. It never talks to a board:
`alabama ota --sign-key` (board/ota.py) serves the signature beside the manifest, `alabama provision
--release-key` (provision/cli.py) puts the public key into the provisioning record.
"""
import hashlib
import os
import pathlib

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import UsageError

#: What a release key signs: CONTEXT + sha256(manifest). The firmware's satellite.release.CONTEXT is the owner;
#: tests/host/test_release_sign.py compares the two.
CONTEXT = b"alabama ota v1\n"
#: The signature travels as this file beside the manifest (<manifest url>.sig), 64 raw bytes.
SIG_SUFFIX = ".sig"


class SigningError(UsageError):
    """A key file the user named that cannot be used (not a key, the wrong half, unreadable): the command line's
    mistake, exit status 2; the message says which file and what to do."""


def signed_message(manifest):
    return CONTEXT + hashlib.sha256(manifest).digest()


def sign_manifest(key, manifest):
    """The 64-byte detached signature of manifest bytes by an Ed25519PrivateKey."""
    return key.sign(signed_message(manifest))


def load_private(path):
    """An Ed25519 private key from a PEM (PKCS#8, as `alabama release-key` or `openssl genpkey -algorithm
    ed25519` writes it) or a raw 32-byte file."""
    data = _read(path)
    if len(data) == 32:
        return Ed25519PrivateKey.from_private_bytes(data)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        if b"-----BEGIN PUBLIC KEY-----" in data:       # the .pub beside it: the usual slip
            mine = str(path)[:-len(".pub")] if str(path).endswith(".pub") else None
            raise SigningError("%s is a public key: signing takes the private key%s" % (
                path, " (%s, its pair)" % mine if mine and pathlib.Path(mine).is_file() else
                " `alabama release-key --out FILE` wrote")) from None
        if b"ENCRYPTED" in data or "encrypted" in str(e):
            raise SigningError("%s is encrypted: give an unencrypted one (`openssl pkey -in %s -out plain.pem` asks "
                               "its passphrase once), or make one with `alabama release-key --out FILE`"
                               % (path, path)) from None
        why = str(e).split("\n")[0]
        why = "no PEM key in it" if "Unable to load PEM" in why else why    # not cryptography's FAQ link and enum
        raise SigningError("%s is not an unencrypted PEM private key (%s): make one with `alabama release-key "
                           "--out FILE`" % (path, why))
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError("%s is not an Ed25519 key: make one with `alabama release-key --out FILE`" % path)
    return key


def load_public(path):
    """The raw 32-byte Ed25519 public key from a PEM (SubjectPublicKeyInfo), a raw 32-byte file or 64 hex digits."""
    data = _read(path)
    if len(data) == 32:
        return data
    text = data.strip()
    if len(text) == 64:
        try:
            return bytes.fromhex(text.decode())
        except (ValueError, UnicodeDecodeError):
            pass
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise SigningError("%s is not an Ed25519 public key (PEM, 32 raw bytes or 64 hex digits): use the .pub file "
                           "`alabama release-key` wrote" % path) from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError("%s is not an Ed25519 public key: use the .pub file `alabama release-key` wrote" % path)
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def keygen(out):
    """Write a new private key to `out` (PEM, mode 0600; never overwritten) and its public key to `out`.pub (PEM)."""
    out = pathlib.Path(out)
    pub = out.with_name(out.name + ".pub")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    if pub.exists():                    # a .pub that boards may pin already: never replaced by another key's
        raise UsageError("%s exists: a release key is never overwritten (boards pin its public key); choose another "
                         "path" % pub)
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError("%s exists: a release key is never overwritten (boards pin its public key); choose another "
                         "path" % out) from None
    except OSError as e:
        raise UsageError("cannot write %s (%s): give --out a path in a directory you can write"
                         % (out, e.strerror or e)) from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return out, pub, key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _read(path):
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as e:
        raise SigningError("cannot read the key file %s: %s: check the path (`alabama release-key --out FILE` "
                           "makes a key pair)" % (path, e.strerror or e)) from None


def register(sub):
    p = sub.add_parser("release-key", help="make the Ed25519 key pair that signs OTA manifests",
                       description="Write a new release signing key (PEM, mode 0600) and its public key (FILE.pub). "
                                   "Pin the public key on boards with `alabama provision ... --release-key FILE.pub`; "
                                   "sign updates with `alabama ota ... --sign-key FILE`. Keep FILE off the boards and "
                                   "out of the repository. Same as: openssl genpkey -algorithm ed25519 -out FILE && "
                                   "openssl pkey -in FILE -pubout -out FILE.pub")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the private key")
    p.set_defaults(func=cmd_keygen)


def cmd_keygen(args):
    out, pub, raw = keygen(args.out)
    print("release key %s (private: keep it safe), public key %s: %s" % (out, pub, raw.hex()))
    return 0
