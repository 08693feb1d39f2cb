"""JSON Schema on untrusted input, by the `jsonschema` library: tool input schemas (R8.2-d), event metadata (R8.2-e).

Responsible for turning what a satellite declares (a schema string) and sends (an Event's metadata) into lists of
problems, never an exception: a schema that is not JSON or not a valid schema of its draft (``$schema``, else
2020-12), a ``$ref`` that cannot be resolved (nothing is fetched from the network), a value nested too deep.
Must not decide what a problem costs the satellite (surface.py does).
"""
import json
import re

import jsonschema
from jsonschema import exceptions, validators
from referencing.exceptions import Unresolvable

#: The draft a schema without ``$schema`` is read as.
DEFAULT = jsonschema.Draft202012Validator
#: Problems reported per schema or value (a hostile one could have thousands).
MAX_PROBLEMS = 8


def parse_schema(text):
    """A schema string -> (schema, problems); problems is [] when it is a usable schema."""
    try:
        schema = json.loads(text)
    except (ValueError, RecursionError) as e:
        return None, ["not JSON: %s" % e]
    return schema, check_schema(schema)


def check_schema(schema):
    """Problems with a schema object itself (against its draft's metaschema), [] when usable."""
    if not isinstance(schema, (dict, bool)):
        return ["a schema must be an object or a boolean"]
    try:
        validators.validator_for(schema, default=DEFAULT).check_schema(schema)
    except exceptions.SchemaError as e:
        return ["%s: %s" % (e.json_path, e.message)]
    except (RecursionError, re.error) as e:
        return ["unusable schema: %s" % e]
    return []


def validate(instance, schema):
    """Problems of a value against a checked schema; [] when it validates."""
    try:
        v = validators.validator_for(schema, default=DEFAULT)(schema)
        errs = []
        for e in v.iter_errors(instance):
            errs.append("%s: %s" % (e.json_path, e.message))
            if len(errs) >= MAX_PROBLEMS:
                break
        return errs
    except Unresolvable as e:
        return ["the schema refers to something it does not contain (%s)" % e]
    except (RecursionError, re.error, exceptions.SchemaError) as e:
        return ["the value cannot be checked against its schema: %s" % e]
