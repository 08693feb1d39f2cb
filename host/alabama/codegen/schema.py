"""Descriptors + bounds -> the checked schema model the emitter writes; it must not write files.

Everything the firmware codec cannot do is refused here, loudly, naming the field: proto2 and
editions syntax, ``optional`` (explicit presence), groups, maps, float/double, extensions,
messages from outside the package, recursive messages (no worst-case size), and any string, bytes
or repeated field without a bound in the options file. Worst-case encoded sizes come from one
table of wire facts, ``WIRE``.
"""
import keyword

from google.protobuf import descriptor_pb2

from . import CodegenError

FD = descriptor_pb2.FieldDescriptorProto

# The wire facts, one row per protobuf type the codec supports:
#   protobuf type -> (pb.py type code, name, wire type, largest encoded value in bytes or None)
# None = length-delimited (string/bytes/message): the size comes from the bound or the sub-message.
WIRE = {
    FD.TYPE_INT32: (1, "int32", 0, 10),     # negatives are sign-extended to 10-byte varints
    FD.TYPE_INT64: (2, "int64", 0, 10),
    FD.TYPE_UINT32: (3, "uint32", 0, 5),
    FD.TYPE_UINT64: (4, "uint64", 0, 10),
    FD.TYPE_SINT32: (5, "sint32", 0, 5),
    FD.TYPE_SINT64: (6, "sint64", 0, 10),
    FD.TYPE_BOOL: (7, "bool", 0, 1),
    FD.TYPE_ENUM: (8, "enum", 0, 10),       # open enums: any int32, negatives as 10 bytes
    FD.TYPE_FIXED32: (9, "fixed32", 5, 4),
    FD.TYPE_SFIXED32: (10, "sfixed32", 5, 4),
    FD.TYPE_FIXED64: (11, "fixed64", 1, 8),
    FD.TYPE_SFIXED64: (12, "sfixed64", 1, 8),
    FD.TYPE_STRING: (13, "string", 2, None),
    FD.TYPE_BYTES: (14, "bytes", 2, None),
    FD.TYPE_MESSAGE: (15, "message", 2, None),
}
REFUSED_TYPES = {
    FD.TYPE_FLOAT: "float (no float fields in the protocol: use a scaled integer)",
    FD.TYPE_DOUBLE: "double (no float fields in the protocol: use a scaled integer)",
    FD.TYPE_GROUP: "group (proto2 groups are not supported)",
}
T_STRING, T_BYTES, T_MESSAGE = 13, 14, 15


def varint_size(v):
    n = 1
    while v > 0x7F:
        v >>= 7
        n += 1
    return n


def py_name(name):
    """Attribute name on the firmware class: Python keywords get a trailing underscore (from -> from_)."""
    return name + "_" if keyword.iskeyword(name) else name


class Enum:
    def __init__(self, full_name, py_name, values, parent):
        self.full_name = full_name
        self.py_name = py_name
        self.values = values  # [(name, number)] in declaration order
        self.parent = parent


class Field:
    def __init__(self, msg, d, oneof):
        self.msg = msg
        self.name = d.name
        self.py_name = py_name(d.name)
        self.full_name = msg.full_name + "." + d.name
        self.number = d.number
        self.ptype = d.type
        self.type_name = d.type_name.lstrip(".")
        self.repeated = d.label == FD.LABEL_REPEATED
        self.oneof = oneof
        self.max_size = 0
        self.max_count = 0
        self.packed = False
        self.d = d

    @property
    def code(self):
        return WIRE[self.ptype][0]

    @property
    def rep(self):
        return 0 if not self.repeated else 2 if self.packed else 1

    @property
    def length_delimited(self):
        return WIRE[self.ptype][3] is None


class Message:
    def __init__(self, full_name, py_name, parent, file):
        self.full_name = full_name
        self.py_name = py_name
        self.parent = parent
        self.file = file
        self.fields = []
        self.oneofs = []
        self.enums = []
        self.messages = []
        self.unknown_arm = None  # (oneof, attribute) on the root message
        self.max_size = None

    @property
    def const_name(self):
        out = []
        for i, c in enumerate(self.py_name):
            if c.isupper() and i and (self.py_name[i - 1].islower() or self.py_name[i - 1].isdigit()):
                out.append("_")
            out.append(c.upper())
        return "".join(out).replace("__", "_") + "_MAX_SIZE"


class Schema:
    def __init__(self, package):
        self.package = package
        self.files = []
        self.enums = []      # every enum, nested ones included, in emission order
        self.messages = []   # every message, nested before their parent
        self.by_name = {}


def build(fds, package, files, options, root_message="Envelope"):
    """Check the descriptors of ``files`` (names as protoc knows them) and return a Schema."""
    schema = Schema(package)
    protos = [f for f in fds.file if f.name in files]
    for fp in sorted(protos, key=lambda f: f.name):
        if fp.package != package:
            raise CodegenError("%s: package %r, expected %r" % (fp.name, fp.package, package))
        if fp.syntax != "proto3":
            raise CodegenError("%s: syntax %r is not supported; the firmware codec is proto3-only"
                               % (fp.name, fp.syntax or "proto2"))
        if fp.extension:
            raise CodegenError("%s: extensions are not supported (%s)" % (fp.name, fp.extension[0].name))
        schema.files.append(fp.name)
        for e in fp.enum_type:
            _add_enum(schema, e, package, None)
        for m in fp.message_type:
            _add_message(schema, m, package, None, fp.name)
    for m in schema.messages:
        _check_fields(schema, m, options)
    _check_names(schema)
    root = schema.by_name.get(package + "." + root_message)
    if root is not None:
        if len(root.oneofs) != 1:
            raise CodegenError("%s must have exactly one oneof (the operation)" % root.full_name)
        attr = "unknown_" + root.oneofs[0]
        if any(f.py_name == attr for f in root.fields) or attr in root.oneofs:
            raise CodegenError("%s: %s clashes with the unknown-arm attribute" % (root.full_name, attr))
        root.unknown_arm = (root.oneofs[0], attr)
    unused = options.unused()
    if unused:
        r = unused[0]
        raise CodegenError("%s:%d: %r matches no string/bytes/repeated field of %s: fix the name"
                           % (options.path, r.lineno, r.pattern, package))
    for m in schema.messages:
        _max_size(schema, m, ())
    return schema


def _add_enum(schema, e, scope, parent):
    full = scope + "." + e.name
    name = (parent.py_name + "_" + e.name) if parent else e.name
    en = Enum(full, name, [(v.name, v.number) for v in e.value], parent)
    schema.enums.append(en)
    schema.by_name[full] = en
    if parent:
        parent.enums.append(en)


def _add_message(schema, d, scope, parent, file):
    full = scope + "." + d.name
    if d.options.map_entry:
        raise CodegenError("%s: map fields are not supported (use a repeated message)" % full)
    if d.extension or d.extension_range:
        raise CodegenError("%s: extensions are not supported" % full)
    m = Message(full, (parent.py_name + "_" + d.name) if parent else d.name, parent, file)
    schema.by_name[full] = m
    for e in d.enum_type:
        _add_enum(schema, e, full, m)
    for nd in d.nested_type:
        if nd.options.map_entry:
            raise CodegenError("%s: map fields are not supported (use a repeated message)" % full)
        _add_message(schema, nd, full, m, file)
    m.oneofs = [o.name for o in d.oneof_decl]
    for fd in d.field:
        if fd.proto3_optional:
            raise CodegenError("%s.%s: `optional` (explicit presence) is not supported; use a plain proto3 field"
                               % (full, fd.name))
        oneof = m.oneofs[fd.oneof_index] if fd.HasField("oneof_index") else None
        m.fields.append(Field(m, fd, oneof))
    m.fields.sort(key=lambda f: f.number)
    schema.messages.append(m)
    if parent:
        parent.messages.append(m)


def _check_fields(schema, m, options):
    for f in m.fields:
        if f.ptype in REFUSED_TYPES:
            raise CodegenError("%s: type %s" % (f.full_name, REFUSED_TYPES[f.ptype]))
        if f.ptype not in WIRE:
            raise CodegenError("%s: unsupported field type %d" % (f.full_name, f.ptype))
        if f.name.startswith("_"):
            raise CodegenError("%s: field names may not start with '_' (reserved for the codec)" % f.full_name)
        if f.ptype in (FD.TYPE_MESSAGE, FD.TYPE_ENUM) and f.type_name not in schema.by_name:
            raise CodegenError("%s: type %s is outside package %s; the firmware codec covers one package"
                               % (f.full_name, f.type_name, schema.package))
        if f.repeated and not f.length_delimited:
            f.packed = not (f.d.options.HasField("packed") and not f.d.options.packed)
        b = options.bounds(f.full_name)
        needs_size = f.ptype in (FD.TYPE_STRING, FD.TYPE_BYTES)
        if "max_size" in b and not needs_size:
            raise CodegenError("%s:%s: max_size given for %s, which is not string/bytes"
                               % (options.path, f.full_name, WIRE[f.ptype][1]))
        if "max_count" in b and not f.repeated:
            raise CodegenError("%s: max_count given for %s, which is not repeated" % (options.path, f.full_name))
        if needs_size:
            if "max_size" not in b:
                raise CodegenError("%s (%s) has no bound: add `%s max_size:N` to %s"
                                   % (f.full_name, WIRE[f.ptype][1], f.full_name, options.path))
            f.max_size = b["max_size"]
        if f.repeated:
            if "max_count" not in b:
                raise CodegenError("%s (repeated) has no bound: add `%s max_count:N` to %s"
                                   % (f.full_name, f.full_name, options.path))
            f.max_count = b["max_count"]


def _check_names(schema):
    top = {}
    for x in schema.enums + schema.messages:
        if x.py_name in top:
            raise CodegenError("%s and %s both become the firmware class %s: rename one"
                               % (top[x.py_name], x.full_name, x.py_name))
        top[x.py_name] = x.full_name
    for m in schema.messages:
        attrs = {}

        def claim(name, what):
            if name in attrs:
                raise CodegenError("%s: %s and %s both become the attribute %s" % (m.full_name, attrs[name], what, name))
            attrs[name] = what

        for f in m.fields:
            claim(f.py_name, "field " + f.name)
        for o in m.oneofs:
            claim(o, "oneof " + o)
        for e in m.enums:
            claim(e.full_name.rsplit(".", 1)[1], "enum " + e.full_name)
            for vname, _ in e.values:
                claim(vname, "enum value " + vname)
        for nm in m.messages:
            claim(nm.full_name.rsplit(".", 1)[1], "message " + nm.full_name)


def _max_size(schema, m, stack):
    """Worst-case encoded size of ``m`` from WIRE and the bounds; recursion has none and is refused."""
    if m.max_size is not None:
        return m.max_size
    if m.full_name in stack:
        raise CodegenError("%s is recursive (%s): it has no worst-case size; the firmware codec refuses it"
                           % (m.full_name, " -> ".join(stack + (m.full_name,))))
    stack = stack + (m.full_name,)
    total = 0
    arms = {}
    for f in m.fields:
        key = varint_size(f.number << 3)
        if f.ptype == FD.TYPE_MESSAGE:
            sub = _max_size(schema, schema.by_name[f.type_name], stack)
            one = key + varint_size(sub) + sub
        elif f.length_delimited:
            one = key + varint_size(f.max_size) + f.max_size
        else:
            one = key + WIRE[f.ptype][3]
        if f.repeated and f.packed:
            body = f.max_count * WIRE[f.ptype][3]
            size = key + varint_size(body) + body
        elif f.repeated:
            size = f.max_count * one
        else:
            size = one
        if f.oneof is not None:
            arms[f.oneof] = max(arms.get(f.oneof, 0), size)
        else:
            total += size
    m.max_size = total + sum(arms.values())
    return m.max_size
