"""The provisioning record codec: ``version (0x01) | ProvisioningRecord protobuf | CRC-32 LE``.

Responsible for turning a ``alabama.v1.ProvisioningRecord`` into the bytes every carrier moves and
back, checking version, CRC, length and field bounds. It never chooses a carrier and does no I/O.
"""
import re
import zlib

from alabama.v1 import provisioning_pb2

from ..errors import AlabamaError

VERSION = 0x01
#: The largest record a board reads (QR, serial): every record within the field bounds below fits
#: (1 + 66 + 4 + 34 + 66 + 11 + 34 + 66 + 34 + 4 = 320 bytes; the last 34 are the optional release key).
MAX_RECORD_BYTES = 320
#: What sound provisioning carries: ggwave's variable-length payload limit (kMaxLengthVariable).
SOUND_MAX_BYTES = 140
CRC_BYTES = 4
MIN_RECORD_BYTES = 1 + CRC_BYTES
#: Field bounds (proto/alabama/v1/alabama.options).
BOUNDS = {"core_host": 64, "core_key": 32, "pairing_token": 64, "wifi_ssid": 32, "wifi_passphrase": 64,
          "release_key": 32}

#: The board's key store, mirrored for the host tools that write a flash directory or read one back (the
#: virtual board, the HIL targets, serial provisioning). The owners are firmware/satellite/app.py (DATA_DIR,
#: under the board's working directory) and firmware/satellite/keystore.py (the file names);
#: tests/host/test_one_owner.py compares this mirror with them.
DATA_DIR = "data"
DEVICE_KEY = "device.key"        # 32-byte X25519 private key
CORE_KEY = "core.pub"            # 32-byte pinned core static public key
RECORD = "provision.bin"         # this codec's bytes
SETTINGS = "settings.json"


class RecordError(AlabamaError):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


#: The option that prints a record carrying a Wi-Fi passphrase: its hex (and a URI of it) holds the passphrase in
#: clear, so by default the CLIs print neither for such a record (a terminal's scrollback, a pasted bug report).
SHOW_SECRETS = "--show-secrets"


def shown(text, rec, show_secrets):
    """TEXT (the record's hex or URI) as a CLI prints it: withheld, saying why and how to see it, when REC carries
    a Wi-Fi passphrase and SHOW_SECRETS was not given."""
    if rec.wifi_passphrase and not show_secrets:
        return "(not shown: it carries the Wi-Fi passphrase in clear; %s prints it)" % SHOW_SECRETS
    return text


#: WPA2-Personal: a passphrase is 8..63 printable ASCII characters, or the 256-bit PSK as 64 hex digits.
WPA_MIN, WPA_MAX = 8, 63


def wpa_problem(passphrase):
    """What a board's Wi-Fi would refuse in PASSPHRASE, as one line (None: fine; empty: an open network)."""
    n = len(passphrase)
    hex64 = n == 64 and all(c in "0123456789abcdefABCDEF" for c in passphrase)
    odd = next((i for i, c in enumerate(passphrase) if not " " <= c <= "~"), None)
    if n and not hex64 and odd is not None:
        return ("a WPA2 passphrase is printable ASCII (letters, digits, punctuation, spaces), this one has %s at "
                "position %d: check it and pass it again" % (_shown_char(passphrase[odd]), odd + 1))
    if n and not hex64 and not WPA_MIN <= n <= WPA_MAX:
        return ("a WPA2 passphrase is %d..%d printable ASCII characters (or 64 hex digits), this one is %d "
                "characters: check it and pass it again" % (WPA_MIN, WPA_MAX, n))
    return None


def _shown_char(c):
    """A character as a line may show it: a byte the terminal's locale could not decode (argv's surrogate) as
    that byte, a control character as its escape, anything else quoted."""
    if "\udc80" <= c <= "\udcff":
        return "the byte 0x%02x (not UTF-8 text)" % (ord(c) - 0xDC00)
    return repr(c) if c.isprintable() else "a control character %r" % c


def ssid_problem(ssid):
    """What the record cannot carry in a Wi-Fi network name SSID as typed, as one line (None: fine)."""
    try:
        n = len(ssid.encode())
    except UnicodeEncodeError as e:          # bytes of argv the locale could not decode: the record holds UTF-8
        return ("the record carries the Wi-Fi name as UTF-8 text, and this one has %s at position %d: type it in a "
                "UTF-8 terminal (e.g. LANG=C.UTF-8)" % (_shown_char(ssid[e.start]), e.start + 1))
    if not 1 <= n <= BOUNDS["wifi_ssid"]:
        return "a Wi-Fi name (--wifi-ssid) is 1..%d bytes, this one is %d: check it and pass it again" % (
            BOUNDS["wifi_ssid"], n)
    return None


_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def host_problem(host):
    """What a board cannot connect to in HOST, the core's address as typed after --host (one line; None: fine): an
    IP address or a DNS host name, nothing else (a port, a URL, a space)."""
    import ipaddress
    if "://" in host:
        return ("--host %r is a URL: give the core's address alone (an IP address or a host name, e.g. "
                "192.168.1.20)" % host)
    name, sep, port = host.rpartition(":")
    if sep and name and port.isdigit() and name.count(":") == 0:
        return "--host %r carries a port: give the address alone (--host %s) and the port with --port %s" % (
            host, name, port)
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if labels[-1].isdigit():              # no host name ends in a number (RFC 3696 2): an IPv4 address mistyped
        return ("--host %r is not an IPv4 address: it is four numbers 0..255 separated by dots, e.g. 192.168.1.20"
                % host)
    if host and len(host) <= 253 and all(_LABEL.match(lb) for lb in labels):
        return None
    return ("--host %r is neither an IP address nor a host name (letters, digits, '-' and '.'): give the core's "
            "address as the board reaches it, e.g. 192.168.1.20" % host)


def build(core_host, core_port, core_key=None, pairing_token=None, token_expires=0, wifi_ssid=None,
          wifi_passphrase=None, release_key=None):
    """The one place a ProvisioningRecord is put together (the CLIs, the virtual board and the HIL bench).

    None and empty both mean "absent" (proto3: an empty field is not on the wire), so callers pass what they
    have without testing it first. Nothing is checked here: ``encode`` does that, naming the field."""
    return provisioning_pb2.ProvisioningRecord(
        core_host=core_host, core_port=int(core_port), core_key=bytes(core_key or b""),
        pairing_token=pairing_token or "", token_expires=int(token_expires or 0), wifi_ssid=wifi_ssid or "",
        wifi_passphrase=wifi_passphrase or "", release_key=bytes(release_key or b""))


def _field_sizes(rec):
    return {name: len(getattr(rec, name).encode() if isinstance(getattr(rec, name), str) else getattr(rec, name))
            for name in BOUNDS}


def check(rec):
    """Field-level checks shared by encode and decode."""
    for name, n in _field_sizes(rec).items():
        if n > BOUNDS[name]:
            raise RecordError("FIELD_TOO_LONG", "%s is %d bytes, at most %d" % (name, n, BOUNDS[name]))
    if rec.core_key and len(rec.core_key) != 32:
        raise RecordError("BAD_KEY", "core_key must be exactly 32 bytes or empty, got %d" % len(rec.core_key))
    if rec.release_key and len(rec.release_key) != 32:
        raise RecordError("BAD_KEY", "release_key must be exactly 32 bytes (an Ed25519 public key) or empty, got %d"
                          % len(rec.release_key))
    if not 0 <= rec.core_port <= 65535:
        raise RecordError("BAD_PORT", "core_port %d is outside 1..65535" % rec.core_port)


def encode(rec, limit=MAX_RECORD_BYTES):
    """The record's bytes; one over `limit` is refused naming the longest field to shorten (every carrier
    takes MAX_RECORD_BYTES; sound splits what is over SOUND_MAX_BYTES into parts, ``parts``)."""
    check(rec)
    body = bytes([VERSION]) + rec.SerializeToString()
    out = body + zlib.crc32(body).to_bytes(CRC_BYTES, "little")
    if len(out) > limit:
        sizes = _field_sizes(rec)
        longest = max(sizes, key=lambda k: sizes[k])
        raise RecordError("RECORD_TOO_LONG", "the provisioning record is %d bytes, over the %d-byte limit: "
                          "shorten %s (%d bytes)%s" % (len(out), limit, longest, sizes[longest],
                                                       ", or provision by QR code or serial instead"
                                                       if limit < MAX_RECORD_BYTES else ""))
    return out


def decode(data):
    """A ProvisioningRecord from bytes; raises RecordError (code LENGTH / VERSION / CRC / DECODE / ...)."""
    data = bytes(data)
    if not MIN_RECORD_BYTES <= len(data) <= MAX_RECORD_BYTES:
        raise RecordError("LENGTH", "a provisioning record is %d..%d bytes, got %d"
                          % (MIN_RECORD_BYTES, MAX_RECORD_BYTES, len(data)))
    if data[0] != VERSION:
        raise RecordError("VERSION", "provisioning record version %d; this tool reads version %d: update it"
                          % (data[0], VERSION))
    body, crc = data[:-CRC_BYTES], int.from_bytes(data[-CRC_BYTES:], "little")
    if zlib.crc32(body) != crc:
        raise RecordError("CRC", "provisioning record CRC mismatch: the transfer was corrupted, send it again")
    rec = provisioning_pb2.ProvisioningRecord()
    try:
        rec.ParseFromString(body[1:])
    except Exception as e:  # noqa: BLE001 — DecodeError and friends; the message says what happened
        raise RecordError("DECODE", "provisioning record does not decode: %s" % e) from None
    check(rec)
    return rec
