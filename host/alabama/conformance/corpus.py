"""Random valid messages from pb2 descriptors within the alabama.options bounds, and pb2<->firmware mapping.

Generic over any descriptor (the scratch schema of the codegen tests as well as alabama.v1), so
differential tests cover every field the schema has without naming one. Only builds and compares
values; it runs no codec.
"""
import keyword
import random

from google.protobuf.descriptor import FieldDescriptor as FD

from ..codegen import options as options_mod
from ..codegen.generate import Config

INT_EDGES = {
    FD.TYPE_INT32: (-2 ** 31, 2 ** 31 - 1, -1, 0, 1, 127, 128, -128),
    FD.TYPE_SINT32: (-2 ** 31, 2 ** 31 - 1, -1, 0, 1, 63, 64, -65),
    FD.TYPE_SFIXED32: (-2 ** 31, 2 ** 31 - 1, -1, 0, 1),
    FD.TYPE_UINT32: (0, 1, 127, 128, 16383, 16384, 2 ** 31, 2 ** 32 - 1),
    FD.TYPE_FIXED32: (0, 1, 2 ** 31, 2 ** 32 - 1),
    FD.TYPE_INT64: (-2 ** 63, 2 ** 63 - 1, -1, 0, 1, 2 ** 32),
    FD.TYPE_SINT64: (-2 ** 63, 2 ** 63 - 1, -1, 0, 1, -2 ** 32),
    FD.TYPE_SFIXED64: (-2 ** 63, 2 ** 63 - 1, -1, 0, 1),
    FD.TYPE_UINT64: (0, 1, 2 ** 32, 2 ** 63, 2 ** 64 - 1),
    FD.TYPE_FIXED64: (0, 1, 2 ** 63, 2 ** 64 - 1),
}
INT_RANGE = {
    FD.TYPE_INT32: (-2 ** 31, 2 ** 31 - 1), FD.TYPE_SINT32: (-2 ** 31, 2 ** 31 - 1),
    FD.TYPE_SFIXED32: (-2 ** 31, 2 ** 31 - 1), FD.TYPE_ENUM: (-2 ** 31, 2 ** 31 - 1),
    FD.TYPE_UINT32: (0, 2 ** 32 - 1), FD.TYPE_FIXED32: (0, 2 ** 32 - 1),
    FD.TYPE_INT64: (-2 ** 63, 2 ** 63 - 1), FD.TYPE_SINT64: (-2 ** 63, 2 ** 63 - 1),
    FD.TYPE_SFIXED64: (-2 ** 63, 2 ** 63 - 1),
    FD.TYPE_UINT64: (0, 2 ** 64 - 1), FD.TYPE_FIXED64: (0, 2 ** 64 - 1),
}
TEXT_ALPHABET = "abcXYZ019 {}\":,._-\n\té€ñ中😀\u0800\U0010ffff"


def py_name(name):
    return name + "_" if keyword.iskeyword(name) else name


class Bounds:
    """max_size / max_count of each field, read from an options file with the codegen parser."""

    def __init__(self, path=None):
        cfg = Config()
        self.options = options_mod.load(path or cfg.root / cfg.options)

    def size(self, field):
        return self.options.bounds(field.full_name).get("max_size", 0)

    def count(self, field):
        return self.options.bounds(field.full_name).get("max_count", 0)


class RandomMessages:
    """Seeded random pb2 messages; ``cap`` limits typical string/bytes sizes (the bound still
    appears now and then, exactly)."""

    def __init__(self, bounds, seed=0, cap=48):
        self.bounds = bounds
        self.rng = random.Random(seed)
        self.cap = cap

    def scalar(self, f):
        r = self.rng
        t = f.type
        if t == FD.TYPE_BOOL:
            return r.random() < 0.5
        if t == FD.TYPE_ENUM:
            vals = [v.number for v in f.enum_type.values]
            return r.choice(vals) if r.random() < 0.85 else r.randint(-2 ** 31, 2 ** 31 - 1)
        if t in INT_RANGE:
            if r.random() < 0.4:
                return r.choice(INT_EDGES[t])
            lo, hi = INT_RANGE[t]
            bits = r.choice((7, 14, 21, 32, 64))
            return max(lo, min(hi, r.randint(-(2 ** bits), 2 ** bits) if lo < 0 else r.randint(0, 2 ** bits)))
        bound = self.bounds.size(f)
        n = bound if r.random() < 0.03 else r.randint(0, min(bound, self.cap))
        if t == FD.TYPE_BYTES:
            return r.randbytes(n)
        s = "".join(r.choice(TEXT_ALPHABET) for _ in range(n))
        while len(s.encode()) > bound:
            s = s[:-1]
        return s

    def fill(self, msg, depth=0):
        r = self.rng
        d = msg.DESCRIPTOR
        for o in d.oneofs:
            if r.random() < 0.8:
                self.set_field(msg, r.choice(o.fields), depth)
        for f in d.fields:
            if f.containing_oneof is None and r.random() < 0.7:
                self.set_field(msg, f, depth)
        return msg

    def set_field(self, msg, f, depth=0):
        r = self.rng
        if f.is_repeated:
            bound = self.bounds.count(f)
            n = bound if r.random() < 0.05 else r.randint(0, min(bound, 3))
            lst = getattr(msg, f.name)
            for _ in range(n):
                if f.type == FD.TYPE_MESSAGE:
                    self.fill(lst.add(), depth + 1)
                else:
                    lst.append(self.scalar(f))
        elif f.type == FD.TYPE_MESSAGE:
            sub = getattr(msg, f.name)
            sub.SetInParent()
            self.fill(sub, depth + 1)
        else:
            setattr(msg, f.name, self.scalar(f))

    def envelope(self, cls, arm=None):
        """A random ``cls`` (the root) with operation ``arm`` (a field name) set."""
        env = cls()
        d = env.DESCRIPTOR
        for f in d.fields:
            if f.containing_oneof is None and self.rng.random() < 0.8:
                self.set_field(env, f)
        arm_f = d.fields_by_name[arm] if arm else self.rng.choice(d.oneofs[0].fields)
        self.set_field(env, arm_f)
        return env


def envelope_arms(cls):
    return [f.name for f in cls.DESCRIPTOR.oneofs[0].fields]


def to_firmware(pbmsg, module):
    """The firmware-codec object equal to ``pbmsg`` (classes looked up by name in ``module``)."""
    d = pbmsg.DESCRIPTOR
    cls = getattr(module, _fw_name(d))
    kw = {}
    for f in d.fields:
        v = getattr(pbmsg, f.name)
        if f.is_repeated:
            if f.type == FD.TYPE_MESSAGE:
                kw[py_name(f.name)] = [to_firmware(x, module) for x in v]
            else:
                kw[py_name(f.name)] = list(v)
        elif f.containing_oneof is not None:
            if pbmsg.WhichOneof(f.containing_oneof.name) == f.name:
                kw[py_name(f.name)] = to_firmware(v, module) if f.type == FD.TYPE_MESSAGE else v
        elif f.type == FD.TYPE_MESSAGE:
            if pbmsg.HasField(f.name):
                kw[py_name(f.name)] = to_firmware(v, module)
        else:
            kw[py_name(f.name)] = v
    return cls(**kw)


def _fw_name(d):
    parts = []
    while d is not None:
        parts.append(d.name)
        d = d.containing_type
    return "_".join(reversed(parts))


def mismatch(fw, pbmsg, path=""):
    """None when the firmware object carries exactly pbmsg's values, else a description of the first difference."""
    d = pbmsg.DESCRIPTOR
    path = path or d.name
    if type(fw).__name__ != _fw_name(d):
        return "%s: firmware class %s" % (path, type(fw).__name__)
    for o in d.oneofs:
        if getattr(fw, o.name) != pbmsg.WhichOneof(o.name):
            return "%s.%s: firmware arm %r, pb2 arm %r" % (path, o.name, getattr(fw, o.name), pbmsg.WhichOneof(o.name))
    for f in d.fields:
        fv = getattr(fw, py_name(f.name))
        pv = getattr(pbmsg, f.name)
        p = "%s.%s" % (path, f.name)
        if f.is_repeated:
            if len(fv) != len(pv):
                return "%s: %d vs %d elements" % (p, len(fv), len(pv))
            for i, (a, b) in enumerate(zip(fv, pv)):
                why = mismatch(a, b, "%s[%d]" % (p, i)) if f.type == FD.TYPE_MESSAGE else (
                    None if a == b and type(a) is type(b) else "%s[%d]: %r vs %r" % (p, i, a, b))
                if why:
                    return why
        elif f.type == FD.TYPE_MESSAGE:
            present = (pbmsg.WhichOneof(f.containing_oneof.name) == f.name) if f.containing_oneof else pbmsg.HasField(f.name)
            if not present:
                if fv is not None:
                    return "%s: firmware has %r, pb2 has none" % (p, fv)
            elif fv is None:
                return "%s: firmware has none" % p
            else:
                why = mismatch(fv, pv, p)
                if why:
                    return why
        elif fv != pv or type(fv) is not type(pv):
            return "%s: firmware %r vs pb2 %r" % (p, fv, pv)
    return None
