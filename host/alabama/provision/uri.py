"""The provisioning URI a QR code carries: ``alabama://provision?r=<base64url(record)>``.

Responsible for wrapping the whole record (version byte, protobuf, CRC-32 — see ``record``) in a URI and
unwrapping it again, checking scheme, path, parameter and lengths before decoding anything. It does not
decode the record itself (``record.decode`` does) and does no I/O. docs/provisioning.md, section
"Provisioning URI", is the reference for phone and camera satellites.
"""
import base64
import binascii
from urllib.parse import parse_qs, urlsplit

from ..errors import AlabamaError
from . import record

SCHEME = "alabama"
#: The URI's authority ("host" part): what the URI is for.
TARGET = "provision"
#: The query parameter that carries the record.
PARAM = "r"
PREFIX = "%s://%s?%s=" % (SCHEME, TARGET, PARAM)
#: Unpadded base64 of the largest record: ceil(320 * 4 / 3) = 427 characters.
MAX_PARAM_CHARS = (4 * record.MAX_RECORD_BYTES + 2) // 3
#: Longest URI read at all (the longest we write is len(PREFIX) + 187 = 212); checked before parsing.
MAX_URI_CHARS = 512


class UriError(AlabamaError):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def to_uri(data):
    """Record bytes (as record.encode returns them) -> the URI. base64url without padding."""
    data = bytes(data)
    if not record.MIN_RECORD_BYTES <= len(data) <= record.MAX_RECORD_BYTES:
        raise UriError("LENGTH", "a provisioning record is %d..%d bytes, got %d"
                       % (record.MIN_RECORD_BYTES, record.MAX_RECORD_BYTES, len(data)))
    return PREFIX + base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def from_uri(uri):
    """The URI -> record bytes (not yet decoded: pass them to record.decode, which checks the CRC).

    Accepts what to_uri writes and the forms a QR scanner may hand back: any letter case in scheme and
    target, padded or unpadded base64url, extra query parameters (ignored, for future versions).
    """
    if not isinstance(uri, str):
        raise UriError("TYPE", "a provisioning URI is text")
    uri = uri.strip()
    if len(uri) > MAX_URI_CHARS:
        raise UriError("LENGTH", "provisioning URI of %d characters, at most %d: this is not an Alabama "
                       "provisioning code" % (len(uri), MAX_URI_CHARS))
    try:
        u = urlsplit(uri)
    except ValueError as e:
        raise UriError("SYNTAX", "not a URI (%s): scan the code again" % e) from None
    if u.scheme.lower() != SCHEME or u.netloc.lower() != TARGET or u.path not in ("", "/"):
        raise UriError("SCHEME", "not an Alabama provisioning URI (want %s...): this QR code is for "
                       "something else" % PREFIX)
    values = parse_qs(u.query, keep_blank_values=True).get(PARAM)
    if not values:
        raise UriError("PARAM", "the provisioning URI has no %s= parameter: make the code again with "
                       "`alabama provision qr`" % PARAM)
    if len(values) > 1:
        raise UriError("PARAM", "the provisioning URI has %d %s= parameters, want one" % (len(values), PARAM))
    v = values[0]
    if len(v.rstrip("=")) > MAX_PARAM_CHARS:
        raise UriError("LENGTH", "the record parameter is %d characters, at most %d"
                       % (len(v.rstrip("=")), MAX_PARAM_CHARS))
    v = v.rstrip("=")
    if not all(c.isascii() and (c.isalnum() or c in "-_") for c in v):
        raise UriError("BASE64", "the record parameter is not base64url (A-Z a-z 0-9 - _)")
    try:
        return base64.urlsafe_b64decode(v + "=" * (-len(v) % 4))
    except (binascii.Error, ValueError) as e:
        raise UriError("BASE64", "the record parameter does not decode as base64url: %s" % e) from None


def decode_uri(uri):
    """The URI -> a checked ProvisioningRecord (record.RecordError on a bad CRC, version, field...)."""
    return record.decode(from_uri(uri))
