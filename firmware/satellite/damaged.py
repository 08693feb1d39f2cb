# What the board says when a file of its key store is damaged: which file, what happened, the command that
# fixes it (docs/provisioning.md, "Factory reset"). Imported only when damage is found, so its text costs no
# RAM on a healthy board. It reads and changes nothing: the runtime halts (no retry) and waits for the fix.
from satellite import keystore as K

_REPROVISION = ("provision this board again: `alabama provision serial --data DIR --port PORT`, or five short "
                "presses of its button and `alabama provision sound`")
_RESET = "factory-reset this board: `alabama provision serial --factory-reset --data DIR --port PORT`"

# file -> the fix. The record and the pin come back with any new record; the identity only by a reset (a new
# device key: the core sees a new device, paired again by the new record's token).
FIX = {
    K.RECORD: _REPROVISION,
    K.CORE_KEY: _REPROVISION,
    K.DEVICE_KEY: _RESET + " (a new identity: the core pairs it again with the new token)",
    K.SETTINGS: _RESET,
}


# record.RecordError code -> what happened to a STORED record (the codec's own words are for a record in
# transit: "send it again", "update the firmware")
_WHAT = {
    "LENGTH": "wrong length for a record",
    "VERSION": "its first byte is not the record version: overwritten or not a record",
    "CRC": "its CRC-32 does not match: a write was cut or the flash is worn",
    "FORMAT": "its fields do not decode",
    "FIELD": "it holds no usable core address",
}


def line(ks, name, e):
    """One log line for a KeyStoreError or RecordError `e` about file `name`:
    '<path> is damaged (<what happened>): <fix>; halted until then (no retry)'."""
    p = ks.path(name)
    what = _WHAT.get(e.code)
    if what is None:
        what = str(e)
        if what.startswith(p):
            what = what[len(p):].strip()
    return "%s is damaged (%s): %s; halted until then (no retry)" % (p, what, FIX.get(name, _RESET))
