"""The satellite's declared surface (spec §8): a parsed, checked Hello and what it unlocks (§10.9).

Responsible for reading a Hello into plain Python values, listing every way it is malformed
(R8.2-a, R8.2-d, R8.2-e schemas, bounds) and answering "may the core send X to this device?"
(R8.2-b, R10.10-e), including the guest restriction (R7.3-a, R10.5-c). It never sends anything.
"""
import json

from alabama.v1 import surface_pb2, content_pb2

from . import schema as schemas

C = surface_pb2
#: 0 on the wire means these protocol defaults (spec §6.1, §10.3).
DEFAULT_MAX_FRAME_BYTES = 65516
DEFAULT_MAX_CONCURRENT_STREAMS = 8
#: A frame limit below this cannot carry the core's control frames (an Error with a message, a
#: PipelineState, a StreamChunk header): such a Hello is reported, and sends that do not fit fail.
MIN_USEFUL_FRAME_BYTES = 64
#: Repeated-field bounds of the Hello (proto/alabama/v1/alabama.options).
MAX_CAPABILITIES = 16
MAX_TOOLS = 16
MAX_EVENTS = 16
MAX_SETTINGS = 16

#: Which params arm a capability kind must carry (R8.2-a); None = parameterless.
PARAMS_FOR_KIND = {
    C.CAPABILITY_MIC: "mic",
    C.CAPABILITY_SPEAKER: "speaker",
    C.CAPABILITY_TEXT_DISPLAY: "text_display",
    C.CAPABILITY_IMAGE_DISPLAY: "image_display",
    C.CAPABILITY_HTML_DISPLAY: "html_display",
    C.CAPABILITY_MEDIA_SINK: "media_sink",
    C.CAPABILITY_IMAGE_CAPTURE: "image_capture",
    C.CAPABILITY_TOOL_ACTIVITY: None,
}

#: Capabilities withheld from a guest: the core never uses them on an unpaired device (R7.3-a, R10.5-c).
GUEST_WITHHELD = frozenset({C.CAPABILITY_HTML_DISPLAY, C.CAPABILITY_TOOL_ACTIVITY})


def cap_name(kind):
    try:
        return C.CapabilityKind.Name(kind)
    except ValueError:
        return "CAPABILITY_%d" % kind


class Problem:
    """One way the Hello is malformed: requirement ID, check name, human detail."""

    __slots__ = ("rule", "check", "detail")

    def __init__(self, rule, check, detail):
        self.rule, self.check, self.detail = rule, check, detail

    def __repr__(self):
        return "Problem(%s %s: %s)" % (self.rule, self.check, self.detail)


def audio_format_problem(params):
    """Why a MIC/SPEAKER params' format is not an exact, usable format (spec §8.2: declared formats are exact,
    the core resamples to them), or None. A missing format and a zero rate are the common mistakes."""
    if not params.HasField("format"):
        return "has no format"
    fmt = params.format
    if fmt.encoding not in (content_pb2.PCM_S16LE, content_pb2.OPUS):
        return "has encoding %s (PCM_S16LE or OPUS)" % content_pb2.Encoding.Name(fmt.encoding) \
            if fmt.encoding in content_pb2.Encoding.values() else "has unknown encoding %d" % fmt.encoding
    if fmt.sample_rate == 0:
        return "has sample_rate 0"
    if fmt.channels not in (1, 2):
        return "has %d channels (1 or 2)" % fmt.channels
    if fmt.encoding == content_pb2.PCM_S16LE and fmt.sample_bits != 16:
        return "is PCM_S16LE with sample_bits %d (16)" % fmt.sample_bits
    return None


class Surface:
    """What one Hello declares. ``problems`` lists every malformation found (empty = well-formed)."""

    def __init__(self, hello):
        self.hello = hello
        self.wire_version = hello.wire_version
        self.max_frame_bytes = hello.max_frame_bytes or DEFAULT_MAX_FRAME_BYTES
        self.max_concurrent_streams = hello.max_concurrent_streams or DEFAULT_MAX_CONCURRENT_STREAMS
        self.display_name = hello.display_name
        self.software = hello.software
        self.pairing_token = hello.pairing_token
        self.capabilities = {}   # kind -> CapabilityDescriptor (first of each kind)
        self.tools = {}          # name -> ToolDescriptor
        self.events = {}         # id -> (EventDescriptor, parsed schema or None)
        self.settings = {}       # key -> SettingDescriptor
        self.guest = True        # until admission says otherwise
        self.problems = []
        self._read()

    def _bad(self, rule, check, detail):
        self.problems.append(Problem(rule, check, detail))

    def _read(self):
        h = self.hello
        for field, bound in (("capabilities", MAX_CAPABILITIES), ("tools", MAX_TOOLS),
                             ("events", MAX_EVENTS), ("settings", MAX_SETTINGS)):
            if len(getattr(h, field)) > bound:
                self._bad("R6.1-a", "hello_bounds", "%d %s declared, at most %d" % (len(getattr(h, field)), field, bound))
        if h.max_frame_bytes and h.max_frame_bytes < MIN_USEFUL_FRAME_BYTES:
            self._bad("R6.1-b", "hello_max_frame_bytes", "max_frame_bytes %d is below %d: the core cannot "
                      "send its control frames" % (h.max_frame_bytes, MIN_USEFUL_FRAME_BYTES))
        for cap in h.capabilities:
            kind = cap.kind
            if kind not in PARAMS_FOR_KIND:
                self._bad("R8.2-a", "capability_kind", "unknown or unspecified capability kind %d" % kind)
                continue
            if kind in self.capabilities:
                self._bad("R8.2-a", "capability_unique", "%s declared twice" % cap_name(kind))
                continue
            want, got = PARAMS_FOR_KIND[kind], cap.WhichOneof("params")
            if want != got:
                self._bad("R8.2-a", "capability_params", "%s carries params %r, must carry %r"
                          % (cap_name(kind), got, want))
            if got in ("speaker", "mic") and want == got:
                why = audio_format_problem(getattr(cap, got))
                if why:
                    self._bad("R8.2-a", got + "_format", "%s %s: the core cannot %s" % (
                        cap_name(kind), why, "render to it" if got == "speaker" else "read its captures"))
            self.capabilities[kind] = cap
        for t in h.tools:
            if not t.name:
                self._bad("R8.2-d", "tool_name", "a tool has an empty name")
            if t.name in self.tools:
                self._bad("R8.2-d", "tool_names_unique", "tool name %r declared twice" % t.name)
                continue
            schema, probs = schemas.parse_schema(t.input_schema or "{}")
            if probs or not isinstance(schema, dict):
                self._bad("R8.2-d", "tool_input_schema", "tool %r input_schema is not a JSON Schema object: %s"
                          % (t.name, "; ".join(probs) or "not an object"))
            self.tools[t.name] = t
        for ev in h.events:
            if not ev.id or ev.id in self.events:
                self._bad("R8.2-e", "event_ids_unique", "event id %r empty or declared twice" % ev.id)
                continue
            schema = None
            if ev.metadata_schema:
                schema, probs = schemas.parse_schema(ev.metadata_schema)
                if probs:
                    self._bad("R8.2-e", "event_metadata_schema", "event %r metadata_schema: %s"
                              % (ev.id, "; ".join(probs)))
                    schema = None
            self.events[ev.id] = (ev, schema)
        for s in h.settings:
            if not s.key or s.key in self.settings:
                self._bad("R8.2-f", "setting_keys_unique", "setting key %r empty or declared twice" % s.key)
                continue
            if s.type == C.SETTING_TYPE_UNSPECIFIED:
                self._bad("R8.2-f", "setting_type", "setting %r has no type" % s.key)
            if s.type == C.SETTING_INT and s.min > s.max:
                self._bad("R8.2-f", "setting_range", "setting %r has min %d > max %d" % (s.key, s.min, s.max))
            if s.type == C.SETTING_ENUM and not s.options:
                self._bad("R8.2-f", "setting_options", "enum setting %r lists no options" % s.key)
            self.settings[s.key] = s

    # -- what the core may send (R8.2-b) -------------------------------------------------------
    def declared(self, kind):
        return kind in self.capabilities

    def usable(self, kind):
        """Declared and not withheld from a guest."""
        return kind in self.capabilities and not (self.guest and kind in GUEST_WITHHELD)

    def speaker_params(self):
        cap = self.capabilities.get(C.CAPABILITY_SPEAKER)
        return cap.speaker if cap is not None else None

    def speaker_problem(self):
        """Why the core cannot render speech to this device (None when it can): undeclared, or a format it
        cannot produce (the reference core synthesizes PCM_S16LE only)."""
        sp = self.speaker_params()
        if sp is None:
            return "it declares no CAPABILITY_SPEAKER"
        why = audio_format_problem(sp)
        if why:
            return "its SPEAKER " + why
        if sp.format.encoding != content_pb2.PCM_S16LE:
            return "its SPEAKER wants %s and this core renders PCM_S16LE only" % (
                content_pb2.Encoding.Name(sp.format.encoding))
        return None

    def image_display_params(self):
        cap = self.capabilities.get(C.CAPABILITY_IMAGE_DISPLAY)
        return cap.image_display if cap is not None else None

    def check_event(self, ev):
        """Problems of an Event against its descriptor: (error_code_name, detail) or None when fine."""
        entry = self.events.get(ev.id)
        if entry is None:
            return ("CAPABILITY_MISSING", "event id %r was not declared in the Hello" % ev.id)
        _, schema = entry
        if schema is None:
            return None
        try:
            meta = json.loads(ev.metadata) if ev.metadata else None
        except (ValueError, RecursionError) as e:
            return ("INVALID_REQUEST", "event %r metadata is not JSON: %s" % (ev.id, e))
        probs = schemas.validate(meta, schema)
        if probs:
            return ("INVALID_REQUEST", "event %r metadata does not match its schema: %s" % (ev.id, "; ".join(probs[:3])))
        return None

    def check_setting_value(self, key, value):
        """Why a SettingsWrite value is outside the descriptor, or None when it fits."""
        s = self.settings[key]
        if s.type == C.SETTING_INT and not (s.min <= value.int_value <= s.max):
            return "%r: %d outside %d..%d" % (key, value.int_value, s.min, s.max)
        if s.type == C.SETTING_ENUM and value.string_value not in s.options:
            return "%r: %r is not one of %s" % (key, value.string_value, list(s.options))
        return None

    def summary(self):
        return {
            "capabilities": [cap_name(k) for k in self.capabilities],
            "tools": list(self.tools),
            "events": list(self.events),
            "settings": list(self.settings),
            "max_frame_bytes": self.max_frame_bytes,
            "max_concurrent_streams": self.max_concurrent_streams,
            "display_name": self.display_name,
            "software": self.software,
        }
