"""Serial provisioning: write the record into a board's key store over mpremote, then soft-reset it.

Responsible for the code run on the board (``mpremote exec``): the record goes to ``data/provision.bin``
(relative to the board's working directory, ``/`` after a reset: ``/data`` on a board, the flash directory
on the virtual board) atomically — written to ``.tmp``, then renamed, as firmware/satellite/keystore.py
does — and read back; the pin follows the record (same rule as the board's listening mode, see
firmware/satellite/provision/listen.py: a record with core_key pins it, one without removes the old pin).
Not responsible for building the record (cli/record) or for the mpremote plumbing (board/deploy).
"""
import binascii

from ..errors import AlabamaError

MARK = "ALABAMA-PROVISIONED "
RECORD_PATH = "data/provision.bin"
PIN_PATH = "data/core.pub"

# Runs on the board (MicroPython). FAT refuses to rename over an existing file: remove, then rename
# (keystore.recover() finishes a rename cut by a power loss at boot).
WRITE = r"""
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
try:
    os.mkdir('data')
except OSError:
    pass
_k = %(key)r
if _k:
    _w(%(pin)r, binascii.a2b_base64(_k))
else:
    try:
        os.remove(%(pin)r)
    except OSError:
        pass
_w(%(path)r, binascii.a2b_base64(%(rec)r))
f = open(%(path)r, 'rb')
_b = f.read()
f.close()
print(%(mark)r + binascii.hexlify(_b).decode())
"""


class SerialProvisionError(AlabamaError):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def board_code(data, core_key=b""):
    """The MicroPython source that stores `data` (record bytes) and the pin on the board."""
    b64 = lambda b: binascii.b2a_base64(bytes(b), newline=False).decode("ascii")
    return WRITE % {"key": b64(core_key) if core_key else "", "pin": PIN_PATH, "path": RECORD_PATH,
                    "rec": b64(data), "mark": MARK}


def write_record(port, data, core_key=b"", runner=None):
    """Store the record on the board at `port`; returns the bytes the board read back (== data)."""
    from ..board import deploy
    runner = runner or deploy.run_mpremote
    text = runner(port, ["exec", board_code(data, core_key)])
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


def provision(port, data, core_key=b"", reset=True, runner=None, out=print):
    """Write, verify, then soft-reset the board so main.py starts with the new record."""
    from ..board import deploy
    port = deploy.resolve_port(port)
    write_record(port, data, core_key, runner)
    out("wrote %s (%d bytes) on %s%s" % (RECORD_PATH, len(data), port,
                                         ", pinned the core key" if core_key else ", no core key pinned"))
    if reset:
        deploy.soft_reset(port, out=out)
    return port
