# Generic proto3 codec driven by the field tables of generated modules (alabama_v1.py); no I/O, no schema.
"""Encode and decode protobuf (proto3) messages from compact per-class field tables.

Generated modules (``alabama codegen``) declare one ``Message`` subclass per protobuf message and
call :func:`table` with its fields. Everything else lives here, once:

* ``encode(msg) -> bytes``, ``size(msg)``, ``encode_into(msg, buf, pos) -> end`` — byte-identical
  to google-protobuf: field-number order, implicit presence, packed repeated scalars.
* ``decode(cls, buf, start=0, end=None)`` and ``decode_into(msg, buf, start, end)``; the latter
  reuses ``msg`` and the sub-message instances it held before (a StreamChunk Envelope decodes into
  a reused Envelope without allocating).
* Every failure is a :class:`DecodeError` / :class:`EncodeError` with a ``code`` and the ``field``.

Field tuple (generated, six items: 32 bytes on a 32-bit board): ``(num, name, type, rep, arg, oneof)``;
``type`` is one of the ``_T_*`` codes below; ``rep`` 0 = singular, n > 0 = repeated with at most n
elements, -n = the same, packed; ``arg`` the sub-message class (type 15), the max_size bound
(string/bytes) or None. The generated class bodies hold the tables themselves (``_F`` and the few
derived ones, see ``Message``), so importing them builds nothing; ``satellite.wire.pbtable`` derives
them for a hand-written class (cold: tests and tools only). A generated root message may carry
``_D``, its straight-line decoder (the hot arms inline; anything else continues in ``_dec``).
See docs/codec.md.
Decode is not re-entrant across threads (one module-level reader); MicroPython runs one.
"""
import sys

from micropython import const

_MP = sys.implementation.name == "micropython"

# Type codes of the field tables (the generator writes these numbers; keep in step with codegen).
_T_INT32 = const(1)
_T_INT64 = const(2)
_T_UINT32 = const(3)
_T_UINT64 = const(4)
_T_SINT32 = const(5)
_T_SINT64 = const(6)
_T_BOOL = const(7)
_T_ENUM = const(8)
_T_FIXED32 = const(9)
_T_SFIXED32 = const(10)
_T_FIXED64 = const(11)
_T_SFIXED64 = const(12)
_T_STRING = const(13)
_T_BYTES = const(14)
_T_MESSAGE = const(15)
# Wire type of each type code (index = type code).
_WT = b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x05\x01\x01\x02\x02\x02"
# Default value of each type code (proto3 implicit presence: a default is never encoded).
_DEF = (None, 0, 0, 0, 0, 0, 0, False, 0, 0, 0, 0, 0, "", b"", None)

# Field tuple indices.
_NUM = const(0)
_NAME = const(1)
_TYPE = const(2)
_REP = const(3)   # 0 singular; n > 0 repeated, at most n; -n packed, at most n
_ARG = const(4)   # sub-message class, or max_size of a string/bytes field
_ONEOF = const(5)

# Nesting limit of the decoder: deeper input is refused (DEPTH) instead of exhausting the stack.
_MAX_DEPTH = const(16)

# Error codes (DecodeError.code / EncodeError.code).
TRUNCATED = "TRUNCATED"            # input ends inside a key, value or length
VARINT_TOO_LONG = "VARINT_TOO_LONG"  # a varint longer than 10 bytes
VARINT_RANGE = "VARINT_RANGE"      # a value outside its type (uint32 > 2**32-1, key > 32 bits)
WIRE_TYPE = "WIRE_TYPE"            # wrong wire type for a known field, or wire type 6/7
TAG = "TAG"                        # field number 0
LENGTH = "LENGTH"                  # a length past the end of the buffer
OVER_BOUND = "OVER_BOUND"          # a string/bytes size or repeated count over its .options bound
UTF8 = "UTF8"                      # a string field that is not valid UTF-8
GROUP = "GROUP"                    # wire types 3/4 (groups) are not supported
DEPTH = "DEPTH"                    # nesting deeper than _MAX_DEPTH
INTERNAL = "INTERNAL"              # a bug in this module surfaced as a typed error (tests assert never)
RANGE = "RANGE"                    # encode: a value outside its field type
SPACE = "SPACE"                    # encode_into: the buffer is too small
TYPE = "TYPE"                      # encode: a value of the wrong Python type


class DecodeError(ValueError):
    """Input the codec refuses. ``code`` is one of the names above, ``field`` "Message.field" or None."""

    def __init__(self, code, field=None):
        super().__init__(code if field is None else code + " " + field)
        self.code = code
        self.field = field


class EncodeError(ValueError):
    """A message the codec cannot encode (value out of range, over a bound, buffer too small)."""

    def __init__(self, code, field=None):
        super().__init__(code if field is None else code + " " + field)
        self.code = code
        self.field = field


class _Reader:
    # pos: where the last slow-path varint ended; m, f: the message class and field being decoded
    # (only read when an error is raised, to name the field).
    def __init__(self):
        self.pos = 0
        self.m = None
        self.f = None


_rd = _Reader()


def _where():
    m = _rd.m
    if m is None:
        return None
    f = _rd.f
    return m.__name__ + "." + f[_NAME] if f is not None else m.__name__


def _fail(code):
    raise DecodeError(code, _where())


class Message:
    """Base of generated messages: keyword constructor, equality, repr. Fields are plain attributes.

    A oneof's name is an attribute holding the selected arm's field name (or None); it is the truth
    for encoding: set arms through the constructor or set both ``msg.op`` and the arm attribute.
    """

    # Per class (generated in the class body; table() for a hand-written class). Only _F and _x are
    # per class everywhere; the others exist where they are not empty (RAM: docs/memory.md).
    _F = ()    # field tuples in field-number order
    _x = b""   # field number -> index in _F + 1 (0: not a field); len = largest number + 1
    _E = None  # encode order when the class has a contiguous oneof (collapsed into its name); else _F
    _L = ()    # names of the repeated fields (an empty list per instance)
    _O = ()    # oneof names
    _B = None  # oneof arm name -> field tuple (classes with a oneof: arm switches and encoding look arms up)
    _U = None  # (oneof, attribute) recording an unknown arm's field number (root message only)
    _D = None  # generated straight-line decoder (m, buf, start, end) of a root message
    _k = None  # per instance: sub-message instances kept for reuse by decode_into

    def __init__(self, **kw):
        for n in self._L:
            setattr(self, n, [])
        if kw:
            cls = type(self)
            for k in kw:
                f = _field(cls, k)
                if f is None:
                    raise TypeError("%s has no field %s" % (type(self).__name__, k))
                o = f[_ONEOF]
                if o is not None:
                    cur = getattr(self, o)
                    if cur is not None and cur != k:
                        raise TypeError("%s: %s and %s are arms of one oneof %s" % (type(self).__name__, cur, k, o))
                    setattr(self, o, k)
                setattr(self, k, kw[k])

    def __eq__(self, other):
        if type(other) is not type(self):
            return False
        for f in self._F:
            if getattr(self, f[_NAME]) != getattr(other, f[_NAME]):
                return False
        for o in self._O:
            if getattr(self, o) != getattr(other, o):
                return False
        u = self._U
        return u is None or getattr(self, u[1]) == getattr(other, u[1])

    def __ne__(self, other):
        return not self.__eq__(other)

    def __repr__(self):
        parts = []
        for f in self._F:
            v = getattr(self, f[_NAME])
            o = f[_ONEOF]
            if (getattr(self, o) == f[_NAME]) if o is not None else (v != _DEF[f[_TYPE]] and v != []):
                parts.append("%s=%r" % (f[_NAME], v))
        u = self._U
        if u is not None and getattr(self, u[1]):
            parts.append("%s=%r" % (u[1], getattr(self, u[1])))
        return "%s(%s)" % (type(self).__name__, ", ".join(parts))


def _field(cls, name):
    # The field tuple of ``name``: a oneof arm from _B, any other linearly (only constructors ask).
    b = cls._B
    if b is not None:
        f = b.get(name)
        if f is not None:
            return f
    for f in cls._F:
        if f[_NAME] == name:
            return f
    return None


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------

def decode(cls, buf, start=0, end=None):
    """A new ``cls`` instance decoded from ``buf[start:end]``."""
    msg = cls()
    decode_into(msg, buf, start, end)
    return msg


def decode_into(msg, buf, start=0, end=None):
    """Reset ``msg`` to defaults and decode ``buf[start:end]`` into it, reusing its sub-messages.

    A class with a generated decoder (``_D``) decodes through it. On DecodeError the content of
    ``msg`` is unspecified (the next decode_into resets it).
    """
    _decode(msg, buf, start, end, type(msg)._D)


def decode_generic(msg, buf, start=0, end=None):
    """decode_into without the generated decoder: the table-driven reference it is tested against."""
    _decode(msg, buf, start, end, None)


def _decode(msg, buf, start, end, fast):
    n = len(buf)
    if end is None:
        end = n
    _rd.m = type(msg)
    _rd.f = None
    if start < 0 or end > n or start > end:
        _fail(LENGTH)
    try:
        if fast is None:
            _reset(msg)
            _dec(msg, buf, start, end, 0)
        else:
            fast(msg, buf, start, end)
    except DecodeError:
        raise
    except Exception as e:  # a bug here must still surface as the one typed error
        raise DecodeError(INTERNAL, "%s (%s: %s)" % (_where(), type(e).__name__, e))


def _reset(msg):
    # The generic reset (a generated decoder resets its own message straight-line). Stores defaults
    # unconditionally (a store is cheaper than a load and a compare; neither allocates).
    cls = type(msg)
    for f in cls._F:
        if f[_ONEOF] is not None:
            continue
        name = f[_NAME]
        if f[_REP]:
            v = getattr(msg, name)
            if type(v) is list:
                if v:
                    del v[:]
            else:
                setattr(msg, name, [])
        elif f[_TYPE] == _T_MESSAGE:
            v = getattr(msg, name)
            if v is not None:
                _keep(msg, name, v)
                setattr(msg, name, None)
        else:
            setattr(msg, name, _DEF[f[_TYPE]])
    for o in cls._O:
        a = getattr(msg, o)
        if a is not None:
            _clear_arm(msg, a)
            setattr(msg, o, None)
    u = cls._U
    if u is not None and getattr(msg, u[1]):
        setattr(msg, u[1], 0)


def _keep(msg, name, sub):
    k = msg._k
    if k is None:
        k = msg._k = {}
    k[name] = sub


def _clear_arm(msg, name):
    f = _field(type(msg), name)
    if f[_TYPE] == _T_MESSAGE:
        v = getattr(msg, name)
        if v is not None:
            _keep(msg, name, v)
        setattr(msg, name, None)
    else:
        setattr(msg, name, _DEF[f[_TYPE]])


def _take(msg, name, sub_cls):
    k = msg._k
    if k is not None:
        sub = k.get(name)
        if sub is not None:
            _reset(sub)
            return sub
    return sub_cls()


def _varint(buf, p, end):
    # Slow path: any varint (up to 10 bytes). Value returned, end position left in _rd.pos.
    v = 0
    s = 0
    while True:
        if p >= end:
            _fail(TRUNCATED)
        b = buf[p]
        p += 1
        v |= (b & 0x7F) << s
        if b < 0x80:
            _rd.pos = p
            return v
        s += 7
        if s == 70:
            _fail(VARINT_TOO_LONG)


def _vq(buf, p, end):
    # For the generated decoders: a varint at p of at most 5 bytes whose value is below 2**30 (a small
    # int on the board: no allocation), end position left in _rd.pos; -1 for anything else (truncated,
    # longer, larger), which the caller leaves to the generic decoder. Raises nothing.
    v = 0
    s = 0
    while p < end:
        b = buf[p]
        p += 1
        if s == 28:
            if b > 3:
                return -1
            _rd.pos = p
            return v | (b << 28)
        v |= (b & 0x7F) << s
        if b < 0x80:
            _rd.pos = p
            return v
        s += 7
    return -1


def _skip_varint(buf, p, end):
    q = p + 10
    while True:
        if p >= end:
            _fail(TRUNCATED)
        if p == q:
            _fail(VARINT_TOO_LONG)
        b = buf[p]
        p += 1
        if b < 0x80:
            return p


def _conv(t, v):
    # Varint on the wire -> field value, protobuf semantics (64-bit truncation, int32 from the low
    # 32 bits), except uint32: a value over 2**32-1 is refused instead of truncated.
    if t == _T_UINT32:
        if v > 0xFFFFFFFF:
            _fail(VARINT_RANGE)
        return v
    if t == _T_BOOL:
        return v != 0
    if v > 0xFFFFFFFFFFFFFFFF:
        v &= 0xFFFFFFFFFFFFFFFF
    if t == _T_INT32 or t == _T_ENUM:
        if v > 0x7FFFFFFF:
            v &= 0xFFFFFFFF
            if v > 0x7FFFFFFF:
                v -= 0x100000000
        return v
    if t == _T_INT64:
        if v > 0x7FFFFFFFFFFFFFFF:
            v -= 0x10000000000000000
        return v
    if t == _T_SINT32:
        if v > 0xFFFFFFFF:
            v &= 0xFFFFFFFF
        return (v >> 1) ^ -(v & 1)
    if t == _T_SINT64:
        return (v >> 1) ^ -(v & 1)
    return v  # _T_UINT64


def _fixed(t, buf, p):
    if t == _T_FIXED32 or t == _T_SFIXED32:
        v = buf[p] | (buf[p + 1] << 8) | (buf[p + 2] << 16) | (buf[p + 3] << 24)
        if t == _T_SFIXED32 and v > 0x7FFFFFFF:
            v -= 0x100000000
        return v
    v = (buf[p] | (buf[p + 1] << 8) | (buf[p + 2] << 16) | (buf[p + 3] << 24)
         | ((buf[p + 4] | (buf[p + 5] << 8) | (buf[p + 6] << 16) | (buf[p + 7] << 24)) << 32))
    if t == _T_SFIXED64 and v > 0x7FFFFFFFFFFFFFFF:
        v -= 0x10000000000000000
    return v


def _utf8_strict(buf, p, q):
    # MicroPython's str() accepts overlong forms, surrogates and > U+10FFFF; protobuf does not.
    while p < q:
        c = buf[p]
        if c < 0x80:
            p += 1
            continue
        lo = 0x80
        hi = 0xBF
        if 0xC2 <= c <= 0xDF:
            n = 1
        elif c == 0xE0:
            n = 2
            lo = 0xA0
        elif c == 0xED:
            n = 2
            hi = 0x9F
        elif 0xE1 <= c <= 0xEF:
            n = 2
        elif c == 0xF0:
            n = 3
            lo = 0x90
        elif 0xF1 <= c <= 0xF3:
            n = 3
        elif c == 0xF4:
            n = 3
            hi = 0x8F
        else:
            _fail(UTF8)
        if p + n >= q:
            _fail(UTF8)
        b = buf[p + 1]
        if b < lo or b > hi:
            _fail(UTF8)
        i = 2
        while i <= n:
            b = buf[p + i]
            if b < 0x80 or b > 0xBF:
                _fail(UTF8)
            i += 1
        p += n + 1


def _str(buf, p, q):
    try:
        s = str(buf[p:q], "utf-8")
    except UnicodeError:
        _fail(UTF8)
    if _MP and len(s) != q - p:
        _utf8_strict(buf, p, q)
    return s


def _skip(buf, p, end, wt):
    if wt == 0:
        return _skip_varint(buf, p, end)
    if wt == 2:
        b = buf[p] if p < end else 0x80
        if b < 0x80:
            ln = b
            p += 1
        else:
            ln = _varint(buf, p, end)
            p = _rd.pos
        if ln > end - p:
            _fail(LENGTH)
        return p + ln
    if wt == 5:
        if end - p < 4:
            _fail(TRUNCATED)
        return p + 4
    if wt == 1:
        if end - p < 8:
            _fail(TRUNCATED)
        return p + 8
    if wt == 3 or wt == 4:
        _fail(GROUP)
    _fail(WIRE_TYPE)


def _unknown_arm(msg, u, num):
    # The root message (Envelope) met a length-delimited field it does not know. With no known arm it is
    # an operation from a newer peer (spec §2.2, §10.10). Beside a known arm it may as well be a new
    # Envelope-level field, so it is ignored like any unknown field (R2.2-a) and the known arm is kept:
    # a frame carries exactly one operation (§6.2), so the known one is the operation.
    if getattr(msg, u[0]) is None:
        setattr(msg, u[1], num)


def _dec(msg, buf, p, end, depth):
    r = _rd
    cls = type(msg)
    x = cls._x
    nx = len(x)
    tab = cls._F
    r.m = cls
    while p < end:
        r.f = None
        b = buf[p]
        if b < 0x80:
            key = b
            p += 1
        else:
            key = _varint(buf, p, end)
            p = r.pos
            if key > 0xFFFFFFFF:
                _fail(VARINT_RANGE)
        num = key >> 3
        wt = key & 7
        i = x[num] if num < nx else 0
        if i == 0:
            if num == 0:
                _fail(TAG)
            if wt == 2 and cls._U is not None:
                _unknown_arm(msg, cls._U, num)
            p = _skip(buf, p, end, wt)
            continue
        f = tab[i - 1]
        r.f = f
        t = f[_TYPE]
        if f[_REP]:
            p = _dec_rep(msg, f, buf, p, end, wt, depth)
            r.m = cls
            continue
        if wt != _WT[t]:
            _fail(GROUP if wt == 3 or wt == 4 else WIRE_TYPE)
        if wt == 0:
            b = buf[p] if p < end else 0x80
            if b < 0x80:
                v = b
                p += 1
            elif p + 1 < end and buf[p + 1] < 0x80:   # two bytes (128..16383: seq, most ids): no call
                v = (b & 0x7F) | (buf[p + 1] << 7)
                p += 2
            else:
                v = _varint(buf, p, end)
                p = r.pos
            if t != _T_UINT32 or v > 0x3FFF:   # a uint32 below 2**14 is itself (no range check needed)
                v = _conv(t, v)
        elif wt == 2:
            b = buf[p] if p < end else 0x80
            if b < 0x80:
                ln = b
                p += 1
            else:
                ln = _varint(buf, p, end)
                p = r.pos
            if ln > end - p:
                _fail(LENGTH)
            name = f[_NAME]
            if t == _T_MESSAGE:
                if depth >= _MAX_DEPTH:
                    _fail(DEPTH)
                o = f[_ONEOF]
                sub = getattr(msg, name)
                if o is not None:
                    cur = getattr(msg, o)
                    if cur != name:
                        if cur is not None:
                            _clear_arm(msg, cur)
                        sub = None
                        setattr(msg, o, name)
                    if cls._U is not None:
                        setattr(msg, cls._U[1], 0)
                if sub is None:  # first occurrence; a repeated occurrence merges (protobuf)
                    sub = _take(msg, name, f[_ARG])
                    setattr(msg, name, sub)
                _dec(sub, buf, p, p + ln, depth + 1)
                r.m = cls
                p += ln
                continue
            if ln > f[_ARG]:
                _fail(OVER_BOUND)
            if t == _T_STRING:
                v = _str(buf, p, p + ln)
            else:
                v = bytes(buf[p:p + ln])
            p += ln
        else:
            w = 4 if wt == 5 else 8
            if end - p < w:
                _fail(TRUNCATED)
            v = _fixed(t, buf, p)
            p += w
        o = f[_ONEOF]
        if o is not None:
            cur = getattr(msg, o)
            if cur != f[_NAME]:
                if cur is not None:
                    _clear_arm(msg, cur)
                setattr(msg, o, f[_NAME])
            if cls._U is not None:
                setattr(msg, cls._U[1], 0)
        setattr(msg, f[_NAME], v)


def _dec_rep(msg, f, buf, p, end, wt, depth):
    r = _rd
    t = f[_TYPE]
    lst = getattr(msg, f[_NAME])
    bound = f[_REP]
    if bound < 0:
        bound = -bound
    ewt = _WT[t]
    if wt == 2:
        b = buf[p] if p < end else 0x80
        if b < 0x80:
            ln = b
            p += 1
        else:
            ln = _varint(buf, p, end)
            p = r.pos
        if ln > end - p:
            _fail(LENGTH)
        q = p + ln
        if ewt != 2:  # packed scalars: check the count before each append
            while p < q:
                if len(lst) >= bound:
                    _fail(OVER_BOUND)
                if ewt == 0:
                    v = _conv(t, _varint(buf, p, q))
                    p = r.pos
                else:
                    w = 4 if ewt == 5 else 8
                    if q - p < w:
                        _fail(TRUNCATED)
                    v = _fixed(t, buf, p)
                    p += w
                lst.append(v)
            return q
        if len(lst) >= bound:
            _fail(OVER_BOUND)
        if t == _T_MESSAGE:
            if depth >= _MAX_DEPTH:
                _fail(DEPTH)
            sub = f[_ARG]()
            _dec(sub, buf, p, q, depth + 1)
            lst.append(sub)
            return q
        if ln > f[_ARG]:
            _fail(OVER_BOUND)
        if t == _T_STRING:
            lst.append(_str(buf, p, q))
        else:
            lst.append(bytes(buf[p:q]))
        return q
    if wt != ewt:
        _fail(GROUP if wt == 3 or wt == 4 else WIRE_TYPE)
    if len(lst) >= bound:
        _fail(OVER_BOUND)
    if wt == 0:
        v = _conv(t, _varint(buf, p, end))
        p = r.pos
    else:
        w = 4 if wt == 5 else 8
        if end - p < w:
            _fail(TRUNCATED)
        v = _fixed(t, buf, p)
        p += w
    lst.append(v)
    return p


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------

def _efail(code, cls, f):
    raise EncodeError(code, cls.__name__ + "." + f[_NAME])


def _uvsize(v):
    n = 1
    while v > 0x7F:
        v >>= 7
        n += 1
    return n


def _unsigned(t, v, cls, f):
    # A varint field value -> the unsigned integer on the wire (range-checked as protobuf does).
    if t == _T_UINT32:
        if v < 0 or v > 0xFFFFFFFF:
            _efail(RANGE, cls, f)
        return v
    if t == _T_BOOL:
        return 1 if v else 0
    if t == _T_INT32 or t == _T_ENUM:
        if v < -0x80000000 or v > 0x7FFFFFFF:
            _efail(RANGE, cls, f)
        return v + 0x10000000000000000 if v < 0 else v
    if t == _T_UINT64:
        if v < 0 or v > 0xFFFFFFFFFFFFFFFF:
            _efail(RANGE, cls, f)
        return v
    if t == _T_INT64:
        if v < -0x8000000000000000 or v > 0x7FFFFFFFFFFFFFFF:
            _efail(RANGE, cls, f)
        return v + 0x10000000000000000 if v < 0 else v
    if t == _T_SINT32:
        if v < -0x80000000 or v > 0x7FFFFFFF:
            _efail(RANGE, cls, f)
        return (v << 1) ^ (v >> 31)
    if v < -0x8000000000000000 or v > 0x7FFFFFFFFFFFFFFF:  # _T_SINT64
        _efail(RANGE, cls, f)
    return (v << 1) ^ (v >> 63)


def _fixed_u(t, v, cls, f):
    if t == _T_FIXED32:
        ok = 0 <= v <= 0xFFFFFFFF
    elif t == _T_SFIXED32:
        ok = -0x80000000 <= v <= 0x7FFFFFFF
        v &= 0xFFFFFFFF
    elif t == _T_FIXED64:
        ok = 0 <= v <= 0xFFFFFFFFFFFFFFFF
    else:
        ok = -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF
        v &= 0xFFFFFFFFFFFFFFFF
    if not ok:
        _efail(RANGE, cls, f)
    return v


def _blob(t, v, cls, f):
    # The bytes of a string/bytes value, bound-checked.
    if t == _T_STRING:
        if type(v) is not str:
            _efail(TYPE, cls, f)
        v = v.encode()
    if len(v) > f[_ARG]:
        _efail(OVER_BOUND, cls, f)
    return v


class _Empty:
    # Stands for an empty sub-message (a selected oneof arm whose value is None).
    _E = ()
    _F = ()
    _sz = 0


_EMPTY = _Empty()


def _value_size(t, v, cls, f):
    ewt = _WT[t]
    if ewt == 0:
        if t == _T_UINT32 and 0 <= v < 0x80:
            return 1
        return _uvsize(_unsigned(t, v, cls, f))
    if ewt == 5:
        return 4
    if ewt == 1:
        return 8
    if t == _T_MESSAGE:
        n = size(v)
    else:
        n = len(_blob(t, v, cls, f))
    return _uvsize(n) + n


def size(msg):
    """Encoded size of ``msg`` in bytes (also cached on each sub-message for the write pass)."""
    cls = type(msg)
    n = 0
    order = cls._E
    if order is None:
        order = cls._F
    for it in order:
        if type(it) is str:  # a oneof: only the selected arm
            a = getattr(msg, it)
            if a is None:
                continue
            f = _field(cls, a)
            v = getattr(msg, a)
            if v is None:
                v = _EMPTY
        else:
            f = it
            v = getattr(msg, f[_NAME])
            o = f[_ONEOF]
            if o is not None:
                if getattr(msg, o) != f[_NAME]:
                    continue
                if v is None:
                    v = _EMPTY
            elif f[_REP]:
                if not v:
                    continue
                if len(v) > (f[_REP] if f[_REP] > 0 else -f[_REP]):
                    _efail(OVER_BOUND, cls, f)
            elif v is None or (f[_TYPE] != _T_MESSAGE and v == _DEF[f[_TYPE]]):
                continue
        t = f[_TYPE]
        tag = 1 if f[_NUM] < 16 else _uvsize(f[_NUM] << 3)
        rep = f[_REP]
        if rep == 0:
            n += tag + _value_size(t, v, cls, f)
        elif rep < 0:
            body = 0
            for e in v:
                body += _value_size(t, e, cls, f)
            n += tag + _uvsize(body) + body
        else:
            for e in v:
                n += tag + _value_size(t, e, cls, f)
    if cls is not _Empty:
        msg._sz = n
    return n


def _wv(buf, p, v):
    while v > 0x7F:
        buf[p] = (v & 0x7F) | 0x80
        v >>= 7
        p += 1
    buf[p] = v
    return p + 1


def _write_value(buf, p, t, v, cls, f):
    ewt = _WT[t]
    if ewt == 0:
        if t != _T_UINT32 or v < 0 or v > 0x7F:
            return _wv(buf, p, _unsigned(t, v, cls, f))
        buf[p] = v
        return p + 1
    if ewt == 5 or ewt == 1:
        v = _fixed_u(t, v, cls, f)
        q = p + (4 if ewt == 5 else 8)
        while p < q:
            buf[p] = v & 0xFF
            v >>= 8
            p += 1
        return p
    if t == _T_MESSAGE:
        p = _wv(buf, p, v._sz)  # cached by size(), which encode_into ran first
        return _enc(v, buf, p)
    v = _blob(t, v, cls, f)
    p = _wv(buf, p, len(v))
    q = p + len(v)
    buf[p:q] = v
    return q


def _enc(msg, buf, p):
    cls = type(msg)
    order = cls._E
    if order is None:
        order = cls._F
    for it in order:
        if type(it) is str:
            a = getattr(msg, it)
            if a is None:
                continue
            f = _field(cls, a)
            v = getattr(msg, a)
            if v is None:
                v = _EMPTY
        else:
            f = it
            v = getattr(msg, f[_NAME])
            o = f[_ONEOF]
            if o is not None:
                if getattr(msg, o) != f[_NAME]:
                    continue
                if v is None:
                    v = _EMPTY
            elif f[_REP]:
                if not v:
                    continue
            elif v is None or (f[_TYPE] != _T_MESSAGE and v == _DEF[f[_TYPE]]):
                continue
        t = f[_TYPE]
        rep = f[_REP]
        key = (f[_NUM] << 3) | (2 if rep < 0 else _WT[t])
        if rep == 0:
            if key < 0x80:
                buf[p] = key
                p += 1
            else:
                p = _wv(buf, p, key)
            p = _write_value(buf, p, t, v, cls, f)
        elif rep < 0:
            body = 0
            for e in v:
                body += _value_size(t, e, cls, f)
            p = _wv(buf, p, key)
            p = _wv(buf, p, body)
            for e in v:
                p = _write_value(buf, p, t, e, cls, f)
        else:
            for e in v:
                p = _wv(buf, p, key)
                p = _write_value(buf, p, t, e, cls, f)
    return p


def encode_into(msg, buf, pos=0):
    """Encode ``msg`` into ``buf`` at ``pos``; return the end position. Allocates nothing for
    messages of small integers (the StreamChunk header) once ``msg`` has been encoded before."""
    try:
        n = size(msg)
        if pos < 0 or pos + n > len(buf):
            raise EncodeError(SPACE, type(msg).__name__)
        return _enc(msg, buf, pos)
    except EncodeError:
        raise
    except Exception as e:  # wrong Python types in fields surface as the one typed error
        raise EncodeError(TYPE, "%s (%s: %s)" % (type(msg).__name__, type(e).__name__, e))


def encode(msg):
    """``msg`` as protobuf bytes, byte-identical to google-protobuf's serializer."""
    try:
        buf = bytearray(size(msg))
    except EncodeError:
        raise
    except Exception as e:
        raise EncodeError(TYPE, "%s (%s: %s)" % (type(msg).__name__, type(e).__name__, e))
    encode_into(msg, buf, 0)
    return bytes(buf)
