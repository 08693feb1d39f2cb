"""Serial provisioning: write the record into a board's key store over mpremote, then soft-reset it.

Responsible for what the board is told to do (``mpremote exec`` of alabama/board/onboard/write_record.py,
tested on the unix port): the record goes to ``data/provision.bin`` (relative to the board's working
directory, ``/`` after a reset: ``/data`` on a board, the flash directory on the virtual board) atomically —
written to ``.tmp``, then renamed, as firmware/satellite/keystore.py does — and read back; the pin follows the
record (same rule as the board's listening mode, see firmware/satellite/provision/listen.py: a record with
core_key pins it, one without removes the old pin).
Not responsible for building the record (cli/record) or for the mpremote plumbing (board/mpremote).
"""
import binascii

from ..board import mpremote
from . import record
from ..errors import AlabamaError

MARK = "ALABAMA-PROVISIONED "
RECORD_PATH = record.DATA_DIR + "/" + record.RECORD      # the key store's names: one host mirror (record.py)
PIN_PATH = record.DATA_DIR + "/" + record.CORE_KEY
#: What --factory-reset forgets besides the pin and the record (which the new record replaces): the identity
#: and the settings (firmware/satellite/keystore.py, KeyStore.factory_reset).
FORGET = tuple(record.DATA_DIR + "/" + n for n in (record.DEVICE_KEY, record.SETTINGS))


class SerialProvisionError(AlabamaError):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def board_code(data, core_key=b"", forget=()):
    """The MicroPython source that removes `forget` (paths), then stores `data` (record bytes) and the pin."""
    b64 = lambda b: binascii.b2a_base64(bytes(b), newline=False).decode("ascii")
    return mpremote.script("write_record", b64(core_key) if core_key else "", PIN_PATH, RECORD_PATH, b64(data), MARK,
                           list(forget))


def write_record(port, data, core_key=b"", runner=None, forget=()):
    """Store the record on the board at `port`; returns the bytes the board read back (== data)."""
    runner = runner or mpremote.run_mpremote
    text = runner(port, ["exec", board_code(data, core_key, forget)])
    for line in text.splitlines():
        if line.startswith(MARK):
            back = bytes.fromhex(line[len(MARK):].strip())
            if back != bytes(data):
                raise SerialProvisionError("VERIFY", "the board on %s read back a different record (%d bytes, "
                                           "want %d): its filesystem may be damaged; run again" %
                                           (port, len(back), len(data)))
            return back
    raise SerialProvisionError("NO_ANSWER", "the board on %s did not confirm the record (got %r): is it running "
                               "MicroPython? flash it with `alabama flash`" % (port, text.strip()[-80:]))


def provision(port, data, core_key=b"", reset=True, runner=None, out=print, factory_reset=False):
    """Write, verify, then soft-reset the board so main.py starts with the new record. factory_reset first
    forgets the board's identity and settings (FORGET): it makes a new device key at its next start."""
    port = mpremote.resolve_port(port)
    write_record(port, data, core_key, runner, FORGET if factory_reset else ())
    if factory_reset:
        out("factory reset on %s: removed %s; the board makes a new identity at its next start"
            % (port, ", ".join(FORGET)))
    out("wrote %s (%d bytes) on %s%s" % (RECORD_PATH, len(data), port,
                                         ", pinned the core key" if core_key else ", no core key pinned"))
    if reset:
        mpremote.soft_reset(port, out=out)
    return port
