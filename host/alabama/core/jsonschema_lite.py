"""A small JSON Schema validator for event metadata (R8.2-e) and tool input schemas (R8.2-d).

Covers the keywords devices actually use: type, enum, const, properties, required,
additionalProperties, items, min/maxItems, min/maxLength, minimum/maximum (and exclusive forms),
pattern. Unknown keywords are ignored, as JSON Schema says. It never raises on untrusted input:
``check_schema`` and ``validate`` return a list of problems (empty = valid).
"""
import json
import re

_TYPES = {"string", "number", "integer", "boolean", "object", "array", "null"}
#: Nesting bound: schemas and instances come from the satellite, so recursion is bounded.
MAX_DEPTH = 16


def parse_schema(text):
    """Parse a schema string. Returns (schema, problems)."""
    try:
        schema = json.loads(text)
    except (ValueError, RecursionError) as e:
        return None, ["not JSON: %s" % e]
    return schema, check_schema(schema)


def check_schema(schema, path="$", depth=0):
    """Problems with a schema object itself (wrong keyword types), [] when usable."""
    if isinstance(schema, bool):
        return []
    if not isinstance(schema, dict):
        return ["%s: a schema must be an object or a boolean" % path]
    if depth > MAX_DEPTH:
        return ["%s: nested deeper than %d" % (path, MAX_DEPTH)]
    out = []
    t = schema.get("type")
    if t is not None:
        ts = t if isinstance(t, list) else [t]
        if not ts or any(x not in _TYPES for x in ts):
            out.append("%s.type: unknown type %r" % (path, t))
    if "properties" in schema:
        props = schema["properties"]
        if not isinstance(props, dict):
            out.append("%s.properties: must be an object" % path)
        else:
            for k, v in props.items():
                out += check_schema(v, "%s.properties.%s" % (path, k), depth + 1)
    if "required" in schema:
        req = schema["required"]
        if not isinstance(req, list) or not all(isinstance(x, str) for x in req):
            out.append("%s.required: must be a list of strings" % path)
    for key in ("items", "additionalProperties"):
        if key in schema:
            out += check_schema(schema[key], "%s.%s" % (path, key), depth + 1)
    if "enum" in schema and not isinstance(schema["enum"], list):
        out.append("%s.enum: must be a list" % path)
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in schema and (isinstance(schema[key], bool) or not isinstance(schema[key], (int, float))):
            out.append("%s.%s: must be a number" % (path, key))
    for key in ("minLength", "maxLength", "minItems", "maxItems"):
        if key in schema and (isinstance(schema[key], bool) or not isinstance(schema[key], int) or schema[key] < 0):
            out.append("%s.%s: must be a non-negative integer" % (path, key))
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except (re.error, TypeError):
            out.append("%s.pattern: not a regular expression" % path)
    return out


def _is_type(v, t):
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "array":
        return isinstance(v, list)
    if t == "object":
        return isinstance(v, dict)
    return False


def validate(instance, schema, path="$", depth=0):
    """Problems of an instance against a (checked) schema; [] when it validates."""
    if schema is True:
        return []
    if schema is False:
        return ["%s: no value is allowed here" % path]
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return []
    out = []
    t = schema.get("type")
    if t is not None:
        ts = t if isinstance(t, list) else [t]
        if not any(_is_type(instance, x) for x in ts):
            return ["%s: expected %s, got %s" % (path, "/".join(ts), type(instance).__name__)]
    if "const" in schema and instance != schema["const"]:
        out.append("%s: must equal %r" % (path, schema["const"]))
    if isinstance(schema.get("enum"), list) and instance not in schema["enum"]:
        out.append("%s: %r is not one of %r" % (path, instance, schema["enum"]))
    if isinstance(instance, (int, float)) and not isinstance(instance, bool):
        if "minimum" in schema and instance < schema["minimum"]:
            out.append("%s: %r < minimum %r" % (path, instance, schema["minimum"]))
        if "maximum" in schema and instance > schema["maximum"]:
            out.append("%s: %r > maximum %r" % (path, instance, schema["maximum"]))
        if "exclusiveMinimum" in schema and instance <= schema["exclusiveMinimum"]:
            out.append("%s: %r <= exclusiveMinimum %r" % (path, instance, schema["exclusiveMinimum"]))
        if "exclusiveMaximum" in schema and instance >= schema["exclusiveMaximum"]:
            out.append("%s: %r >= exclusiveMaximum %r" % (path, instance, schema["exclusiveMaximum"]))
    if isinstance(instance, str):
        if "minLength" in schema and len(instance) < schema["minLength"]:
            out.append("%s: shorter than %d" % (path, schema["minLength"]))
        if "maxLength" in schema and len(instance) > schema["maxLength"]:
            out.append("%s: longer than %d" % (path, schema["maxLength"]))
        if isinstance(schema.get("pattern"), str):
            try:
                if not re.search(schema["pattern"], instance):
                    out.append("%s: does not match %r" % (path, schema["pattern"]))
            except re.error:
                pass
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            out.append("%s: fewer than %d items" % (path, schema["minItems"]))
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            out.append("%s: more than %d items" % (path, schema["maxItems"]))
        if "items" in schema:
            for i, item in enumerate(instance):
                out += validate(item, schema["items"], "%s[%d]" % (path, i), depth + 1)
    if isinstance(instance, dict):
        req = schema.get("required")
        if isinstance(req, list):
            for k in req:
                if k not in instance:
                    out.append("%s: missing required property %r" % (path, k))
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        for k, v in instance.items():
            if k in props:
                out += validate(v, props[k], "%s.%s" % (path, k), depth + 1)
            elif "additionalProperties" in schema:
                out += validate(v, schema["additionalProperties"], "%s.%s" % (path, k), depth + 1)
    return out
