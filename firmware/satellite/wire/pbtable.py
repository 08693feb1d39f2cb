# Cold helpers of the codec (tests, tools, hand-written tables): never imported at boot (RAM, docs/memory.md).
"""Field tables of satellite/wire/pb.py: derive, attach, and read them in their long form.

Generated classes (``alabama codegen``) carry their tables in the class body; this module holds what
only tests and tools need:

* ``derive(fields)`` -> ``(_x, _E, _L, _O, _B)``, what the generator writes beside ``_F`` (a test
  compares the two for every generated class);
* ``table(cls, fields, unknown_arm=None)`` attaches a hand-written table given in the long form;
* ``fields(cls)`` -> the long form of ``cls._F``.

Long form (documented in docs/codec.md, used by the fuzzers): ``(num, name, type, rep, sub, oneof,
max_size, max_count, key)``, ``rep`` 0 singular, 1 repeated, 2 packed; ``key`` = num << 3 | wire type.
The stored form is ``(num, name, type, rep, arg, oneof)`` (see pb.py).
"""
from . import pb

# pb's type codes for string, bytes, message (pb's own are const() names, folded away on MicroPython)
_STRING = 13
_BYTES = 14
_MESSAGE = 15


def derive(fields):
    """(``_x``, ``_E``, ``_L``, ``_O``, ``_B``) of a table in the stored form. ``_x`` maps a field number to
    its index + 1; ``_E`` is None unless a oneof's arms are contiguous in number order: then it is the encode
    order with the oneof collapsed into its name (one lookup instead of one test per arm); ``_L`` names the
    repeated fields, ``_O`` the oneofs; ``_B`` maps each oneof arm's name to its field (None without one)."""
    top = 0
    for f in fields:
        if f[0] > top:
            top = f[0]
    if len(fields) > 255:
        raise ValueError("%d fields: the one-byte _x index holds 255" % len(fields))
    x = bytearray(top + 1 if fields else 0)
    lists = []
    oneofs = []
    arms = {}
    for i in range(len(fields)):
        f = fields[i]
        x[f[0]] = i + 1
        if f[3]:
            lists.append(f[1])
        o = f[5]
        if o is not None:
            arms[f[1]] = f
            if o not in oneofs:
                oneofs.append(o)
    order = []
    collapsed = False
    for f in fields:
        o = f[5]
        if o is None:
            order.append(f)
            continue
        if o in order:
            continue
        idx = [i for i in range(len(fields)) if fields[i][5] == o]
        if idx[-1] - idx[0] + 1 == len(idx):  # contiguous: one item for the whole oneof
            order.append(o)
            collapsed = True
        else:
            order.append(f)
    return bytes(x), (tuple(order) if collapsed else None), tuple(lists), tuple(oneofs), (arms if arms else None)


def _key(num, t, rep):
    return (num << 3) | (2 if rep == 2 else pb._WT[t])


def table(cls, fields, unknown_arm=None):
    """Attach a hand-written table in the long form (``key`` optional) to ``cls``."""
    out = []
    for f in fields:
        num, name, t, rep, sub, oneof, max_size, max_count = f[:8]
        if len(f) > 8 and f[8] != _key(num, t, rep):
            raise ValueError("field %s of %s: key %d, expected %d" % (name, cls.__name__, f[8], _key(num, t, rep)))
        out.append((num, name, t, 0 if not rep else (-max_count if rep == 2 else max_count),
                    sub if t == _MESSAGE else (max_size if t in (_STRING, _BYTES) else None), oneof))
    cls._F = tuple(out)
    cls._x, cls._E, cls._L, cls._O, cls._B = derive(cls._F)
    cls._U = unknown_arm


def fields(cls):
    """``cls._F`` in the long form ``(num, name, type, rep, sub, oneof, max_size, max_count, key)``."""
    out = []
    for num, name, t, rep, arg, oneof in cls._F:
        r = 0 if rep == 0 else (2 if rep < 0 else 1)
        out.append((num, name, t, r, arg if t == _MESSAGE else None, oneof,
                    arg if t in (_STRING, _BYTES) else 0, rep if rep > 0 else -rep, _key(num, t, r)))
    return tuple(out)
