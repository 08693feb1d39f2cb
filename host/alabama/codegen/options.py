"""Read the nanopb-style bounds file that sits beside the schema; it must not look at descriptors.

Format, one field per line (``#`` starts a comment)::

    alabama.v1.ToolDescriptor.name       max_size:64
    alabama.v1.Hello.tools               max_count:32
    alabama.v1.MediaSinkParams.accepts   max_count:8 max_size:64

The name is a fully qualified field name; ``*`` and ``?`` match as in shell patterns (nanopb
does the same). Later lines override earlier ones. ``max_size`` bounds the UTF-8/byte length of a
string or bytes value, ``max_count`` the number of elements of a repeated field.
"""
import fnmatch
import re

from . import CodegenError

KEYS = ("max_size", "max_count")
_LINE = re.compile(r"^(\S+)((?:\s+\S+)+)$")


class Rule:
    def __init__(self, pattern, values, lineno):
        self.pattern = pattern
        self.values = values
        self.lineno = lineno
        self.used = False

    def matches(self, full_name):
        return fnmatch.fnmatchcase(full_name, self.pattern)


class Options:
    """Parsed bounds: ``bounds(full_name) -> {"max_size": n, "max_count": n}`` (keys present if set)."""

    def __init__(self, rules, path):
        self.rules = rules
        self.path = path

    def bounds(self, full_name):
        out = {}
        for r in self.rules:
            if r.matches(full_name):
                r.used = True
                out.update(r.values)
        return out

    def unused(self):
        return [r for r in self.rules if not r.used]


def parse(text, path="<options>"):
    rules = []
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE.match(line)
        if not m:
            raise CodegenError("%s:%d: expected `<package.Message.field> max_size:N|max_count:N`, got %r"
                               % (path, i, raw.strip()))
        values = {}
        for item in m.group(2).split():
            key, sep, val = item.partition(":")
            if not sep or key not in KEYS:
                raise CodegenError("%s:%d: unknown option %r (supported: %s)" % (path, i, item, ", ".join(KEYS)))
            if not val.isdigit() or int(val) <= 0:
                raise CodegenError("%s:%d: %s needs a positive integer, got %r" % (path, i, key, val))
            values[key] = int(val)
        rules.append(Rule(m.group(1), values, i))
    return Options(rules, path)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CodegenError("cannot read the bounds file %s (%s): create it beside the .proto files" % (path, e.strerror))
    return parse(text, str(path))
